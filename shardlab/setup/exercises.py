"""Checking a reader's answer to an exercise against a value computed by JAX.

An exercise in a chapter is three cells: the reader's cell (``answer_1 = ...``), a visible check cell
(``shardlab.check(answer_1, <expected, computed from JAX>)``) and, after it, the book's answer in a cell
that stays collapsed, code and output together, until the reader asks for it: on the page, in JupyterLab
and in Colab (see ``ANSWER_TITLE``). The check does not stop a notebook while the answer is still ``...``,
so "Run all" goes through an unanswered chapter.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

# First line of every answer cell: Colab shows only this title (the code stays hidden until asked for).
ANSWER_TITLE = '# @title Answer (double-click to show the code) { display-mode: "form" }'

# Floats computed in another order (another CPU, a TPU) differ in their last bits: without a tolerance
# of its own, a floating-point exercise accepts errors up to this fraction of the largest |expected|.
DEFAULT_FLOAT_RTOL = 1e-5


def _is_array(value) -> bool:
    return isinstance(value, np.ndarray) or (hasattr(value, "__array__") and not isinstance(value, (str, bytes)))


def _is_float(value) -> bool:
    return isinstance(value, (float, np.floating)) or (_is_array(value) and np.asarray(value).dtype.kind in "fc")


def _number(value) -> bool:
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


def _array_mismatch(answer, expected, rtol, atol) -> str | None:
    """None if they agree, else a short sentence saying how they differ (never the whole array)."""
    try:
        a = np.asarray(answer)
    except Exception:  # noqa: BLE001 - whatever the reader passed, say what was expected
        return f"expected an array of shape {np.shape(expected)}, got {type(answer).__name__}"
    e = np.asarray(expected)
    if a.shape != e.shape:
        return f"your array has shape {a.shape}, the expected one {e.shape}"
    if a.size == 0:
        return None
    floating = a.dtype.kind in "fc" or e.dtype.kind in "fc"
    if not floating and rtol is None and atol is None:
        wrong = np.argwhere(a != e)
        if len(wrong) == 0:
            return None
        return f"{len(wrong)} of {e.size} elements differ, the first at index {tuple(int(i) for i in wrong[0])}"
    if a.dtype.kind not in "biufc":
        return f"expected numbers, got an array of {a.dtype}"
    rtol = DEFAULT_FLOAT_RTOL if rtol is None else rtol
    atol = 0.0 if atol is None else atol
    wide = np.complex128 if "c" in (a.dtype.kind, e.dtype.kind) else np.float64
    a, e = a.astype(wide), e.astype(wide)
    # The tolerance is scaled to the data: a fraction of the largest expected magnitude, so an element
    # near zero is judged against the array's scale, not against itself.
    allowed = atol + rtol * float(np.max(np.abs(e)))
    error = np.abs(a - e)
    bad = ~(error <= allowed)  # NaN in the answer counts as an error
    if not bad.any():
        return None
    worst = np.unravel_index(int(np.nanargmax(np.where(bad, np.nan_to_num(error, nan=np.inf), -1.0))), e.shape)
    return (f"{int(bad.sum())} of {e.size} elements are off by more than {allowed:.3g}; the largest error is "
            f"{float(error[worst]):.3g} at index {tuple(int(i) for i in worst)}")


def _mismatch(answer, expected, rtol, atol) -> str | None:
    if isinstance(expected, (set, frozenset)):
        try:
            same = set(answer) == set(expected)
        except TypeError:
            return f"expected a set, got {type(answer).__name__}"
        return None if same else "not the same set"
    if _is_array(expected):
        return _array_mismatch(answer, expected, rtol, atol)
    if _number(expected) and _number(answer) and (_is_float(expected) or _is_float(answer)
                                                  or rtol is not None or atol is not None):
        rtol = (DEFAULT_FLOAT_RTOL if _is_float(expected) or _is_float(answer) else 0.0) if rtol is None else rtol
        allowed = (0.0 if atol is None else atol) + rtol * abs(float(expected))
        error = abs(float(answer) - float(expected))
        return None if error <= allowed else f"off by {error:.3g}, more than the {allowed:.3g} allowed"
    return None if answer == expected else "not the expected value"


def check(answer: Any, expected: Any, *, hint: str = "", run: Callable[[Any], Any] | None = None,
          rtol: float | None = None, atol: float | None = None) -> None:
    """Say whether ``answer`` equals ``expected``; raise ``AssertionError`` with the hint if not.

    Sets compare as sets; integers, strings and other values with ``==``; floating-point numbers and
    arrays within a tolerance scaled to the data: an element passes when it is within
    ``atol + rtol * max|expected|`` of its expected value (``rtol`` defaults to ``DEFAULT_FLOAT_RTOL``
    for floats, exact equality for integers). For an exercise whose answer is code, ``run`` turns the
    answer into the value to compare (for example ``run=lambda f: f(x)``). An answer that is still ``...``
    is not judged: the cell says so and raises nothing, so the rest of the notebook still runs. A wrong
    array is described by its shape, the number of wrong elements and the largest error, never printed
    whole; the expected value is never shown, so a hidden answer cell gives nothing away.
    """
    if not isinstance(hint, str):
        raise ValueError(f"check: hint must be a string, got {type(hint).__name__}")
    if run is not None and not callable(run):
        raise ValueError(f"check: run must be a function of the answer, got {type(run).__name__}")
    for name, tol in (("rtol", rtol), ("atol", atol)):
        if tol is not None and not (_number(tol) and tol >= 0):
            raise ValueError(f"check: {name} must be a number >= 0 or None, got {tol!r}")
    if answer is Ellipsis:
        print("Not answered yet: put your answer in place of the ... above, run it, then this.")
        return
    value = run(answer) if run is not None else answer
    problem = _mismatch(value, expected, rtol, atol)
    if problem is not None:
        shown = "your code gave" if run is not None else "your answer was"
        if _is_array(value) and np.asarray(value).size > 8:
            message = f"Not yet: {problem}."
        else:
            message = f"Not yet: {shown} {_short(value)} ({problem})."
        raise AssertionError(f"{message} Hint: {hint}" if hint else message)
    print("Correct.")


def _short(value, limit: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"
