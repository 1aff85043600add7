"""Checking a reader's answer to an exercise against a value computed by JAX.

An exercise in a chapter is three cells: the reader's cell (``answer_1 = ...``), a visible check cell
(``shardlab.check(answer_1, <expected, computed from JAX>)``) and, after it, the book's answer in a cell
whose code is hidden on the page, in JupyterLab and in Colab (see ``ANSWER_TITLE``). The check does not
stop a notebook while the answer is still ``...``, so "Run all" goes through an unanswered chapter.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

# First line of every answer cell: Colab shows only this title (the code stays hidden until asked for).
ANSWER_TITLE = '# @title Answer (double-click to show the code) { display-mode: "form" }'


def _same(answer, expected, rtol: float | None) -> bool:
    if isinstance(expected, (set, frozenset)):
        return set(answer) == set(expected)
    if isinstance(expected, np.ndarray) or hasattr(expected, "__array__") and not isinstance(expected, (str, bytes)):
        a, e = np.asarray(answer), np.asarray(expected)
        if a.shape != e.shape:
            return False
        return bool(np.allclose(a, e, rtol=rtol, atol=0.0)) if rtol is not None else bool(np.all(a == e))
    if rtol is not None and isinstance(expected, (int, float)) and isinstance(answer, (int, float)):
        return abs(answer - expected) <= rtol * abs(expected)
    return answer == expected


def check(answer: Any, expected: Any, *, hint: str = "", run: Callable[[Any], Any] | None = None,
          rtol: float | None = None) -> None:
    """Say whether ``answer`` equals ``expected``; raise ``AssertionError`` with the hint if not.

    Sets compare as sets, arrays element by element (within ``rtol`` when it is given), anything else
    with ``==``. For an exercise whose answer is code, ``run`` turns the answer into the value to
    compare (for example ``run=lambda f: f(x)``). An answer that is still ``...`` is not judged: the
    cell says so and raises nothing, so the rest of the notebook still runs. The message never repeats
    the answer, so a hidden answer cell gives nothing away. Returns ``None`` (a cell shows only the message).
    """
    if not isinstance(hint, str):
        raise ValueError(f"check: hint must be a string, got {type(hint).__name__}")
    if run is not None and not callable(run):
        raise ValueError(f"check: run must be a function of the answer, got {type(run).__name__}")
    if rtol is not None and not (isinstance(rtol, (int, float)) and rtol >= 0):
        raise ValueError(f"check: rtol must be a number >= 0 or None, got {rtol!r}")
    if answer is Ellipsis:
        print("Not answered yet: write your answer in place of the ... above, run that cell, then this one.")
        return
    value = run(answer) if run is not None else answer
    if not _same(value, expected, rtol):
        shown = "your code gave" if run is not None else "your answer was"
        message = f"Not yet: {shown} {value!r}."
        raise AssertionError(f"{message} Hint: {hint}" if hint else message)
    print("Correct.")
