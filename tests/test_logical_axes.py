"""Unit tests of shardlab.parallelism.logical_axes: logical names mapped to mesh axes by a table of rules."""

import pytest

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

from jax.sharding import PartitionSpec as P  # noqa: E402

from shardlab.parallelism.logical_axes import RULES, logical_spec


def test_each_name_takes_its_rule():
    assert logical_spec(("embed", "mlp")) == P("fsdp", "model")
    assert logical_spec(("batch", None)) == P(("data", "fsdp"), None)
    assert logical_spec(()) == P()


def test_an_axis_already_used_is_skipped():
    # the batch takes fsdp, so the width stays whole; seq still gets model
    assert logical_spec(("batch", "seq", "embed")) == P(("data", "fsdp"), "model", None)
    # heads and mlp both want model: the second stays whole
    assert logical_spec(("heads", "mlp")) == P("model", None)


def test_the_first_free_rule_wins():
    rules = (("embed", "fsdp"), ("embed", "model"), ("batch", "fsdp"))
    assert logical_spec(("batch", "embed"), rules) == P("fsdp", "model")
    assert logical_spec(("embed", "batch"), rules) == P("fsdp", None)


def test_an_earlier_dimension_wins_a_contested_axis():
    # Unlike Flax's rule-major reading (where the earlier rule, batch's, would win fsdp and give
    # P(None, ("data", "fsdp"))), the dimensions are read in order: embed comes first and takes fsdp.
    assert logical_spec(("embed", "batch")) == P("fsdp", None)
    assert logical_spec(("batch", "embed")) == P(("data", "fsdp"), None)


def test_agrees_with_jax_on_a_mesh():
    # The spec is one JAX accepts: placed on a (2, 2, 2) mesh, each shard has the size the names say.
    import jax
    import numpy as np
    from jax.sharding import NamedSharding

    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "model"), devices=DEVICES)
    x = jax.device_put(np.zeros((8, 6, 4), np.float32),
                       NamedSharding(mesh, logical_spec(("batch", "seq", "embed"))))
    assert x.addressable_shards[0].data.shape == (2, 3, 4)


def test_rules_table_names_the_book_axes():
    names = [name for name, _ in RULES]
    assert names == ["batch", "embed", "heads", "mlp", "vocab", "seq"]


@pytest.mark.parametrize("call", [
    lambda: logical_spec(("nonsense",)),
    lambda: logical_spec("embed"),
    lambda: logical_spec(("embed",), rules="embed"),
    lambda: logical_spec(("embed",), rules=[("embed",)]),
    lambda: logical_spec(("embed",), rules=[("embed", 3)]),
])
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()
