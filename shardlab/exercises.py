"""Checking a reader's answer to an exercise against a value computed by JAX."""

from __future__ import annotations

import numpy as np


def _same(answer, expected) -> bool:
    if isinstance(expected, (set, frozenset)):
        return set(answer) == set(expected)
    if isinstance(expected, np.ndarray) or hasattr(expected, "__array__") and not isinstance(expected, (str, bytes)):
        a, e = np.asarray(answer), np.asarray(expected)
        return a.shape == e.shape and bool(np.all(a == e))
    return answer == expected


def check(answer, expected, *, hint: str = "") -> None:
    """Say whether ``answer`` equals ``expected``; raise ``AssertionError`` with the hint if not.

    Sets compare as sets and arrays element by element; anything else with ``==``.
    """
    if not isinstance(hint, str):
        raise ValueError(f"check: hint must be a string, got {type(hint).__name__}")
    if answer is Ellipsis:
        raise AssertionError("Replace the ... with your answer, then run this cell again.")
    if not _same(answer, expected):
        message = f"Not yet: your answer was {answer!r}."
        raise AssertionError(f"{message} Hint: {hint}" if hint else message)
    print(f"Correct: {answer!r}")
