"""Checks of what the public helpers are given: each raises a ValueError that names the argument."""

from __future__ import annotations

import numpy as np


def positive_int(name: str, value) -> int:
    """``value`` as an ``int`` if it is a positive integer (a ``bool`` is not); else a ValueError naming
    ``name`` (which may start with the helper's name, ``"top_k_routing: k"``)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)
