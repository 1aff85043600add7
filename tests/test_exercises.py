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
                                             ({"rtol": -1}, "rtol must be a number")])
def test_bad_arguments_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        check(1, 1, **kwargs)
