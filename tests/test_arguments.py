"""shardlab.arguments: one check of a positive integer for every helper, naming the argument."""

import numpy as np
import pytest

from shardlab.arguments import positive_int


@pytest.mark.parametrize("value", [1, 7, np.int64(3)])
def test_a_positive_integer_comes_back_as_an_int(value):
    out = positive_int("n", value)
    assert out == value and type(out) is int


@pytest.mark.parametrize("value", [0, -2, 2.0, "3", True, None])
def test_anything_else_is_refused_by_name(value):
    with pytest.raises(ValueError, match=r"^top_k_routing: k must be a positive integer, got "):
        positive_int("top_k_routing: k", value)
