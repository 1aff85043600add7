"""Unit tests of shardlab.parallelism.transformer: sizes, specs, the task, the flops count and the factorisations."""

import numpy as np
import pytest

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

from shardlab.parallelism.transformer import (TransformerConfig, init_params, mesh_factorisations, model_flops,
                                              model_flops_utilisation, param_shapes, param_specs, reversal_batch,
                                              without_fsdp)


def test_num_params_counts_every_array():
    config = TransformerConfig(vocab=16, d_model=32, heads=4, d_ff=64, layers=2, seq=8)
    params = init_params(config)
    import jax
    assert sum(a.size for a in jax.tree.leaves(params)) == config.num_params


def test_shapes_match_init():
    import jax
    config = TransformerConfig(vocab=16, d_model=32, heads=4, d_ff=64, layers=3, seq=8)
    real = jax.tree.map(lambda a: a.shape, init_params(config))
    abstract = jax.tree.map(lambda a: a.shape, param_shapes(config))
    assert real == abstract


def test_sharded_init_equals_one_device_init():
    # Compiled with the parameters' shardings as outputs (each device creates its shards), on a mesh
    # where every weight matrix is split: the values are those of the plain call on one device.
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P

    config = TransformerConfig(vocab=16, d_model=32, heads=4, d_ff=64, layers=2, seq=8)
    reference = jax.device_get(init_params(config, 3))
    mesh = jax.make_mesh((2, 2, 2), ("data", "fsdp", "model"), devices=DEVICES)
    shardings = jax.tree.map(lambda s: NamedSharding(mesh, s), param_specs(reference),
                             is_leaf=lambda x: isinstance(x, P))
    placed = jax.jit(lambda key: init_params(config, key), out_shardings=shardings)(jax.random.key(3))
    w_in = placed["blocks"][0]["w_in"]
    assert w_in.sharding == shardings["blocks"][0]["w_in"]
    assert w_in.addressable_shards[0].data.shape == (16, 32)
    for got, want in zip(jax.tree.leaves(placed), jax.tree.leaves(reference)):
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=1e-7)


def test_init_is_reproducible_and_scaled():
    import jax
    config = TransformerConfig(vocab=16, d_model=256, heads=4, d_ff=512, layers=1, seq=8)
    a, b, other = init_params(config, 0), init_params(config, 0), init_params(config, 1)
    assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)))
    assert not np.allclose(a["unembed"], other["unembed"])
    # variance 1 / fan_in: 256 for w_in, 512 for w_out (then scaled by 1 / (2 * layers))
    w_in, w_out = np.asarray(a["blocks"][0]["w_in"]), np.asarray(a["blocks"][0]["w_out"])
    assert w_in.std() == pytest.approx(1 / 16, rel=0.02)
    assert w_out.std() == pytest.approx(0.5 / np.sqrt(512), rel=0.02)
    assert w_out.std() != pytest.approx(1 / np.sqrt(512), rel=0.02)
    assert np.all(np.asarray(a["ln_f"]) == 1) and a["embed"].dtype == np.float32


def test_loss_in_bfloat16_is_float32_and_close():
    # Mixed precision: parameters cast to bfloat16, the loss (softmax in float32) comes out float32,
    # within bfloat16's rounding (8 bits of mantissa) of the float32 loss, and its gradients, taken
    # through the cast, are float32 again.
    import jax
    import jax.numpy as jnp
    from shardlab.parallelism.transformer import loss_fn

    config = TransformerConfig(vocab=16, d_model=32, heads=4, d_ff=64, layers=2, seq=8)
    params = init_params(config, 0)
    tokens = reversal_batch(np.random.default_rng(0), 4, config)
    low = lambda p: loss_fn(jax.tree.map(lambda w: w.astype(jnp.bfloat16), p), tokens)
    full, mixed = loss_fn(params, tokens), low(params)
    assert mixed.dtype == jnp.float32
    assert abs(float(mixed) - float(full)) < 0.02 * float(full)
    assert float(mixed) != float(full)
    grads = jax.grad(low)(params)
    assert all(g.dtype == jnp.float32 for g in jax.tree.leaves(grads))


def test_specs_cover_every_parameter_and_rank():
    import jax
    from jax.sharding import PartitionSpec as P
    params = init_params(TransformerConfig())
    specs = param_specs(params)
    leaves = jax.tree.leaves(specs, is_leaf=lambda x: isinstance(x, P))
    arrays = jax.tree.leaves(params)
    assert len(leaves) == len(arrays)
    assert all(len(s) <= a.ndim for s, a in zip(leaves, arrays))
    assert specs["blocks"][0]["w_in"] == P("fsdp", "model")


# Sizes that differ from each other, so that a dimension's size says what it is.
DISTINCT = TransformerConfig(vocab=20, d_model=24, heads=3, d_ff=40, layers=3, seq=6)   # head_dim 8


def test_every_parameter_of_every_block_has_its_spec():
    from jax.sharding import PartitionSpec as P

    # The layout the docstring states, written out by hand: the width (d_model) over fsdp in every matrix,
    # heads and hidden units over model, the vocabulary over model in the output projection only.
    block = {"ln1": P(), "ln2": P(),
             "wq": P("fsdp", "model", None), "wk": P("fsdp", "model", None), "wv": P("fsdp", "model", None),
             "wo": P("model", None, "fsdp"), "w_in": P("fsdp", "model"), "w_out": P("model", "fsdp")}
    expected = {"embed": P(None, "fsdp"), "pos": P(None, "fsdp"), "ln_f": P(), "unembed": P("fsdp", "model"),
                "blocks": [block] * DISTINCT.layers}
    assert param_specs(init_params(DISTINCT)) == expected


def test_each_spec_splits_the_dimensions_its_role_says():
    # Read the other way: from each array's shape. A dimension of size d_model is split over fsdp (layer norms
    # are replicated); one of size heads or d_ff over model, and the vocabulary where it is an output.
    import jax

    c = DISTINCT
    params, specs = init_params(c), param_specs(init_params(c))
    flat_params = jax.tree_util.tree_flatten_with_path(params)[0]
    flat_specs = dict(jax.tree_util.tree_flatten_with_path(
        specs, is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec))[0])
    assert len(flat_params) == len(flat_specs) == 4 + 8 * c.layers
    for path, array in flat_params:
        name = path[-1].key
        spec = tuple(flat_specs[path]) + (None,) * (array.ndim - len(flat_specs[path]))
        for size, axis in zip(array.shape, spec):
            if name.startswith("ln"):
                want = None
            elif size == c.d_model:
                want = "fsdp"
            elif size in (c.heads, c.d_ff) or (size == c.vocab and name == "unembed"):
                want = "model"
            else:
                want = None                                  # head_dim, seq, the embedding's vocabulary
            assert axis == want, (jax.tree_util.keystr(path), array.shape, spec)


def test_without_fsdp():
    from jax.sharding import PartitionSpec as P
    assert without_fsdp(P("fsdp", "model")) == P(None, "model")
    assert without_fsdp(P(("data", "fsdp"), None)) == P("data", None)
    assert without_fsdp(P(("fsdp",), "model")) == P(None, "model")


def test_reversal_batch_is_reversed():
    config = TransformerConfig(seq=10)
    batch = reversal_batch(np.random.default_rng(0), 4, config)
    assert batch.shape == (4, 10) and batch.dtype == np.int32
    np.testing.assert_array_equal(batch[:, 5:], batch[:, :5][:, ::-1])
    assert batch.min() >= 1 and batch.max() < config.vocab


def test_model_flops_matches_hand_count():
    config = TransformerConfig(vocab=4, d_model=2, heads=1, d_ff=8, layers=1, seq=2)
    weights = 4 * 2 * 2 + 2 * 2 * 8 + 2 * 4
    assert model_flops(config, 3) == 6 * 3 * 2 * weights + 6 * 2 * 3 * 2 * 2 * 2


def test_mesh_factorisations():
    assert len(mesh_factorisations(8)) == 10
    assert all(np.prod(f) == 8 for f in mesh_factorisations(8))
    assert (2, 2, 2) in mesh_factorisations(8)
    assert mesh_factorisations(5, 2) == [(5, 1), (1, 5)]


def test_mfu():
    assert model_flops_utilisation(100.0, 2, 10.0, 10.0) == pytest.approx(0.5)


@pytest.mark.parametrize("call", [
    lambda: TransformerConfig(d_model=30, heads=4),
    lambda: TransformerConfig(seq=7),
    lambda: TransformerConfig(layers=0),
    lambda: reversal_batch(np.random.default_rng(0), 0, TransformerConfig()),
    lambda: model_flops(TransformerConfig(), -1),
    lambda: mesh_factorisations(0),
    lambda: model_flops_utilisation(1.0, 0, 1.0, 1.0),
    lambda: param_specs({"no": "blocks"}),
    lambda: init_params("not a config"),
    lambda: init_params(TransformerConfig(), "seed"),
])
def test_bad_input_raises_value_error(call):
    with pytest.raises(ValueError):
        call()


def test_stacked_blocks_under_scan_equal_the_list():
    # The same parameters, blocks stacked and run under lax.scan (with and without a remat policy):
    # the same loss and gradients as the blocks run one after the other.
    import jax
    from jax.sharding import PartitionSpec as P
    from shardlab.parallelism.transformer import loss_fn, stack_blocks

    config = TransformerConfig(vocab=16, d_model=32, heads=4, d_ff=64, layers=3, seq=8)
    params = init_params(config, 0)
    tokens = reversal_batch(np.random.default_rng(0), 4, config)
    stacked = stack_blocks(params)
    assert stacked["blocks"]["w_in"].shape == (3, 32, 64)
    assert jax.tree.map(lambda a: a.shape, param_shapes(config, stacked=True)) == \
        jax.tree.map(lambda a: a.shape, stacked)
    assert param_specs(stacked)["blocks"]["wq"] == P(None, "fsdp", "model", None)
    loss, grads = jax.value_and_grad(loss_fn)(params, tokens)
    for policy in (None, jax.checkpoint_policies.nothing_saveable):
        s_loss, s_grads = jax.value_and_grad(loss_fn)(stacked, tokens, remat_policy=policy)
        np.testing.assert_allclose(s_loss, loss, rtol=1e-5)
        scale = max(float(np.abs(g).max()) for g in jax.tree.leaves(grads))
        for a, b in zip(jax.tree.leaves(s_grads), jax.tree.leaves(stack_blocks(grads))):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * scale)
    # a different model gives a different loss: the comparison can fail
    other = stack_blocks(init_params(config, 1))
    assert abs(float(loss_fn(other, tokens)) - float(loss)) > 1e-3


def test_specs_follow_the_rules_table():
    # Another table of rules moves the split without touching the model: heads over fsdp instead.
    from jax.sharding import PartitionSpec as P
    rules = (("batch", "data"), ("embed", None), ("heads", "fsdp"), ("mlp", "model"), ("vocab", None),
             ("seq", None))
    specs = param_specs(init_params(DISTINCT), rules)
    assert specs["blocks"][0]["wq"] == P(None, "fsdp", None)
    assert specs["blocks"][0]["w_in"] == P(None, "model")
    assert specs["unembed"] == P(None, None)


def test_stack_blocks_rejects_stacked_params():
    from shardlab.parallelism.transformer import stack_blocks
    with pytest.raises(ValueError):
        stack_blocks(stack_blocks(init_params(DISTINCT)))


def _fsdp_grads(hook, cast_inside=False):
    """Gradients of a small sum-of-products loss through `hook`, on a (1, 8, 1) mesh, jitted."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

    mesh = jax.make_mesh((1, 8, 1), ("data", "fsdp", "model"), axis_types=(AxisType.Auto,) * 3)
    stored, used = NamedSharding(mesh, P("fsdp", None)), NamedSharding(mesh, P(None, None))
    rng = np.random.default_rng(0)
    w = jax.device_put(rng.normal(size=(64, 32)).astype(np.float32), stored)
    x = jax.device_put(rng.normal(size=(16, 64)).astype(np.float32), NamedSharding(mesh, P("fsdp", None)))

    def loss(w, x):
        if cast_inside:   # the float32 weight given to the hook, cast inside it
            low = hook(w, used, stored, compute_dtype=jnp.bfloat16)
        else:
            low = hook(w.astype(jnp.bfloat16), used, stored)
        return jnp.sum((x.astype(jnp.bfloat16) @ low).astype(jnp.float32) ** 2)
    grads = jax.jit(jax.grad(loss))(w, x)
    reference = jax.grad(lambda w: jnp.sum((np.asarray(x) @ w) ** 2))(np.asarray(w))
    return grads, np.asarray(reference), stored


def test_gather_reduce_scattered_gives_the_plain_gradient_laid_out_as_stored():
    import jax
    import jax.numpy as jnp
    from shardlab.parallelism.transformer import gather_reduce_scattered

    plain = lambda w, used, stored: jax.lax.with_sharding_constraint(w, used)
    for cast_inside in (False, True):
        grads, reference, stored = _fsdp_grads(gather_reduce_scattered, cast_inside)
        assert grads.sharding.is_equivalent_to(stored, 2)
        scale = np.abs(reference).max()
        # bfloat16 products: within a few bfloat16 roundings of the float32 gradient, not within float32's
        np.testing.assert_allclose(grads, reference, rtol=0.05, atol=0.02 * scale)
        assert np.abs(np.asarray(grads) - reference).max() > 1e-6 * scale
    same, _, _ = _fsdp_grads(plain)
    np.testing.assert_allclose(_fsdp_grads(gather_reduce_scattered)[0], same, rtol=1e-2, atol=1e-2 * scale)


def test_gather_reduce_scattered_sums_in_the_weights_dtype_on_xla_tpu():
    import jax
    import jax.numpy as jnp
    from jax.sharding import AxisType, NamedSharding, PartitionSpec as P
    from shardlab.parallelism.transformer import gather_reduce_scattered

    with shardlab.compiling_for_tpu():
        mesh = shardlab.target_mesh("v5e-8", (1, 8, 1), ("data", "fsdp", "model"),
                                    axis_types=(AxisType.Auto,) * 3)
        stored, used = NamedSharding(mesh, P("fsdp", None)), NamedSharding(mesh, P(None, None))
        w = jax.ShapeDtypeStruct((1024, 512), jnp.float32, sharding=stored)
        x = jax.ShapeDtypeStruct((64, 1024), jnp.float32, sharding=NamedSharding(mesh, P("fsdp", None)))
        dtypes = {}
        for cast_inside, wide in ((False, None), (True, None), (True, jnp.float32)):
            def loss(w, x):
                if cast_inside:
                    low = gather_reduce_scattered(w, used, stored, jnp.bfloat16)
                else:
                    low = gather_reduce_scattered(w.astype(jnp.bfloat16), used, stored)
                y = jnp.dot(x.astype(jnp.bfloat16), low, preferred_element_type=wide)
                return jnp.sum(y.astype(jnp.float32) ** 2)
            report = shardlab.compile_for(jax.jit(jax.grad(loss)), w, x).collectives
            scatters = report.of_kind("reduce-scatter")
            assert scatters and not report.of_kind("all-reduce")
            gathers = report.of_kind("all-gather")
            assert gathers and {d for c in gathers for d in c.dtypes} == {"bf16"}
            dtypes[cast_inside, wide] = {d for c in scatters for d in c.dtypes}
    # the sum is made in the weight-gradient product's dtype: float32 only when it writes float32
    assert dtypes == {(False, None): {"bf16"}, (True, None): {"bf16"}, (True, jnp.float32): {"f32"}}


@pytest.mark.parametrize("kwargs", [dict(used=None), dict(stored="fsdp"), dict(compute_dtype="int32"),
                                    dict(compute_dtype="not a dtype")])
def test_gather_reduce_scattered_rejects_bad_arguments(kwargs):
    import jax
    from jax.sharding import NamedSharding, PartitionSpec as P
    from shardlab.parallelism.transformer import gather_reduce_scattered

    mesh = jax.make_mesh((8,), ("fsdp",))
    args = dict(used=NamedSharding(mesh, P()), stored=NamedSharding(mesh, P("fsdp")), compute_dtype=None)
    args.update(kwargs)
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        gather_reduce_scattered(np.zeros(8, np.float32), **args)
