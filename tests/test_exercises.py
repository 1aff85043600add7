import numpy as np
import pytest

from shardlab import check


def test_right_answers_pass(capsys):
    check(4, 4)
    check({1, 2}, {2, 1})
    check([[0, 1]], np.array([[0, 1]]))
    assert capsys.readouterr().out.count("Correct") == 3


@pytest.mark.parametrize("answer, expected", [(3, 4), ({1}, {1, 2}), ([0, 1], np.array([[0, 1]]))])
def test_wrong_answers_fail_with_the_hint(answer, expected):
    with pytest.raises(AssertionError, match="Hint: look again"):
        check(answer, expected, hint="look again")


def test_unanswered_is_named():
    with pytest.raises(AssertionError, match="Replace the"):
        check(..., 1)


def test_bad_hint_is_refused():
    with pytest.raises(ValueError, match="hint must be a string"):
        check(1, 1, hint=3)
