import numpy as np
import pytest

from shardlab import check


def test_right_answers_pass(capsys):
    assert check(4, 4) is None  # nothing for a notebook cell to display but the message
    check({1, 2}, {2, 1})
    check([[0, 1]], np.array([[0, 1]]))
    check(np.float32(1.0) + 1e-7, np.ones(()), rtol=1e-6)
    check(lambda v: v * 2, np.array([2, 4]), run=lambda f: f(np.array([1, 2])))
    out = capsys.readouterr().out
    assert out.count("Correct.") == 5
    assert "[2 4]" not in out  # an answer cell's output must not give the answer away


@pytest.mark.parametrize("answer, expected", [(3, 4), ({1}, {1, 2}), ([0, 1], np.array([[0, 1]]))])
def test_wrong_answers_fail_with_the_hint(answer, expected):
    with pytest.raises(AssertionError, match="Hint: look again"):
        check(answer, expected, hint="look again")


def test_wrong_code_names_what_it_gave():
    with pytest.raises(AssertionError, match="your code gave 3"):
        check(lambda v: v + 1, 4, run=lambda f: f(2))


def test_unanswered_is_named_and_does_not_stop_the_notebook(capsys):
    assert check(..., 1) is None
    check(..., 1, run=lambda f: 1 / 0)  # the code is never called
    assert capsys.readouterr().out.count("Not answered yet") == 2


@pytest.mark.parametrize("kwargs, message", [({"hint": 3}, "hint must be a string"),
                                             ({"run": 3}, "run must be a function"),
                                             ({"rtol": -1}, "rtol must be a number"),
                                             ({"atol": "0.1"}, "atol must be a number")])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        check(1, 1, **kwargs)


# Tolerances, tried on both sides. The reference is plain arithmetic on the data's largest magnitude.
SCALE = np.array([[1.0, -0.5], [8.06e-5, 2.0]])


@pytest.mark.parametrize("rtol", [1e-4, 1e-6])
def test_an_array_within_the_scaled_tolerance_passes_and_just_outside_fails(rtol):
    allowed = rtol * np.abs(SCALE).max()
    for index in [(0, 0), (1, 0)]:  # a large element and one near zero are judged on the same scale
        inside, outside = SCALE.copy(), SCALE.copy()
        inside[index] += 0.9 * allowed
        outside[index] += 1.1 * allowed
        check(inside, SCALE, rtol=rtol)
        with pytest.raises(AssertionError, match=r"1 of 4 elements .* at index \(%d, %d\)" % index):
            check(outside, SCALE, rtol=rtol)


def test_atol_adds_to_the_scaled_tolerance():
    check(SCALE + 0.009, SCALE, rtol=0, atol=0.01)
    with pytest.raises(AssertionError, match="off by more than 0.01"):
        check(SCALE + 0.011, SCALE, rtol=0, atol=0.01)


def test_floats_default_to_a_small_scaled_tolerance_and_integers_to_equality():
    from shardlab.setup.exercises import DEFAULT_FLOAT_RTOL

    check(SCALE * (1 + 0.5 * DEFAULT_FLOAT_RTOL), SCALE)
    with pytest.raises(AssertionError):
        check(SCALE + 2 * DEFAULT_FLOAT_RTOL * 2.0, SCALE)
    with pytest.raises(AssertionError, match="1 of 3 elements differ, the first at index \\(2,\\)"):
        check(np.array([1, 2, 4]), np.array([1, 2, 3]))


@pytest.mark.parametrize("expected", [3.0, np.float32(3.0), -3.0])
def test_a_scalar_within_rtol_passes_and_outside_fails(expected, capsys):
    check(expected * (1 + 0.9e-3), expected, rtol=1e-3)
    with pytest.raises(AssertionError, match="off by"):
        check(expected * (1 + 1.1e-3), expected, rtol=1e-3)
    check(7, 7.0)          # an int answer to a float question, within the default tolerance
    with pytest.raises(AssertionError):
        check(7, 8, rtol=0.1)   # |7 - 8| = 1 > 0.1 * 8
    check(7, 8, rtol=0.2)
    assert capsys.readouterr().out.count("Correct.") == 3


def test_nan_in_an_answer_is_an_error():
    with pytest.raises(AssertionError, match="1 of 4 elements"):
        check(np.where(SCALE == 2.0, np.nan, SCALE), SCALE, rtol=1e-3)


def test_a_wrong_array_is_described_not_dumped():
    big = np.arange(1024.0).reshape(32, 32)
    with pytest.raises(AssertionError) as caught:
        check(big + 1, big)
    message = str(caught.value)
    assert len(message) < 300 and "\n" not in message, message
    assert "1024 of 1024 elements" in message
    with pytest.raises(AssertionError, match=r"shape \(32, 31\), the expected one \(32, 32\)"):
        check(big[:, :31], big)
