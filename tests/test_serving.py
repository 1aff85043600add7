"""Unit tests of shardlab.parallelism.serving: the cached decoder against recomputation, sharded against one device,
donation, and the bytes and flops of a step against independent counts."""

import math

import numpy as np
import pytest

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import jax
import jax.numpy as jnp
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

from shardlab.parallelism import serving
from shardlab.parallelism.serving import DecoderConfig, LLAMA_8B_LIKE

CONFIG = DecoderConfig()


def _prompt(batch=4, length=6, seed=0):
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.integers(0, CONFIG.vocab, (batch, length)), jnp.int32)


def _mesh(sizes=(2, 4)):
    return jax.make_mesh(sizes, ("data", "model"), devices=DEVICES[:math.prod(sizes)],
                         axis_types=(AxisType.Auto,) * 2)


def test_num_params_counts_every_array():
    params = serving.init_decoder(CONFIG)
    assert sum(a.size for a in jax.tree.leaves(params)) == CONFIG.num_params
    shapes = serving.decoder_shapes(LLAMA_8B_LIKE)
    assert sum(math.prod(s.shape) for s in shapes.values()) == LLAMA_8B_LIKE.num_params
    assert 8.0e9 < LLAMA_8B_LIKE.num_params < 8.1e9      # Llama 3 8B's published size


def test_kv_bytes_per_token_matches_the_cache():
    cache = serving.cache_shapes(LLAMA_8B_LIKE, batch=3, seq=10)
    total = sum(math.prod(s.shape) * s.dtype.itemsize for s in cache.values())
    assert total == 3 * 10 * LLAMA_8B_LIKE.kv_bytes_per_token(2) == 3 * 10 * 128 * 1024


def test_cached_generation_equals_recomputation():
    params = serving.init_decoder(CONFIG, 1)
    prompt = _prompt()
    step = jax.jit(serving.forward_with_cache, donate_argnums=1)
    tokens, logits, _ = serving.generate(step, params, serving.empty_cache(CONFIG, 4), prompt, 10)
    full = serving.forward_without_cache(params, jnp.concatenate([prompt, tokens[:, :-1]], axis=1))
    full = np.asarray(full[:, prompt.shape[1] - 1:])
    tol = 1e-5 * np.abs(full).max()
    assert np.abs(np.asarray(logits) - full).max() <= tol
    assert (full.argmax(-1) == np.asarray(tokens)).all()
    # the other side: a cache written one position off gives logits far outside that tolerance
    _, cache = step(params, serving.empty_cache(CONFIG, 4), prompt, 1)
    shifted, _ = step(params, cache, tokens[:, :1], prompt.shape[1] + 1)
    assert np.abs(np.asarray(shifted) - full[:, 1]).max() > 100 * tol


def test_forward_without_cache_is_causal():
    params = serving.init_decoder(CONFIG, 2)
    a, b = np.array(_prompt(2, 8, 0)), np.array(_prompt(2, 8, 0))
    b[:, -1] = (b[:, -1] + 1) % CONFIG.vocab
    la, lb = serving.forward_without_cache(params, a), serving.forward_without_cache(params, b)
    np.testing.assert_allclose(la[:, :-1], lb[:, :-1], rtol=0, atol=1e-6 * float(jnp.abs(la).max()))
    assert float(jnp.abs(la[:, -1] - lb[:, -1]).max()) > 1e-3


@pytest.mark.parametrize("layout", serving.LAYOUTS)
def test_sharded_generation_equals_one_device(layout):
    params = serving.init_decoder(CONFIG, 3)
    prompt = _prompt(4, 5, 1)
    one = jax.jit(serving.forward_with_cache, donate_argnums=1)
    want, want_logits, _ = serving.generate(one, params, serving.empty_cache(CONFIG, 4), prompt, 8)
    step, param_sh, cache_sh = serving.sharded_step(_mesh(), layout)
    got, got_logits, cache = serving.generate(step, jax.device_put(params, param_sh),
                                              serving.empty_cache(CONFIG, 4, sharding=cache_sh), prompt, 8)
    assert (np.asarray(got) == np.asarray(want)).all()
    scale = float(jnp.abs(want_logits).max())
    np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=1e-5 * scale)
    assert cache["k"].sharding.spec == serving.cache_specs(layout)["k"]
    # each device holds an eighth of the cache (model 4 x data 2)
    assert cache["k"].addressable_shards[0].data.size * 8 == cache["k"].size


def test_sequence_split_past_the_kv_heads_equals_one_device():
    # 8 chips per copy for 4 key/value heads: only with wk and wv replicated
    params = serving.init_decoder(CONFIG, 4)
    prompt = _prompt(4, 5, 2)
    one = jax.jit(serving.forward_with_cache, donate_argnums=1)
    want, want_logits, _ = serving.generate(one, params, serving.empty_cache(CONFIG, 4), prompt, 6)
    mesh = _mesh((1, 8))
    step, param_sh, cache_sh = serving.sharded_step(mesh, "sequence", split_kv_weights=False)
    assert param_sh["wk"].spec == P() and param_sh["wq"].spec == P(None, None, "model", None)
    got, got_logits, _ = serving.generate(step, jax.device_put(params, param_sh),
                                          serving.empty_cache(CONFIG, 4, sharding=cache_sh), prompt, 6)
    assert (np.asarray(got) == np.asarray(want)).all()
    scale = float(jnp.abs(want_logits).max())
    np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=1e-5 * scale)
    # split by head, the same mesh cannot place wk: 4 heads over 8 chips
    _, split_sh, _ = serving.sharded_step(mesh, "sequence")
    with pytest.raises(ValueError):
        jax.device_put(params["wk"], split_sh["wk"])


def test_batch_first_cache_gives_the_same_logits():
    params = serving.init_decoder(CONFIG, 5)
    prompt = _prompt(3, 4, 3)
    step = jax.jit(serving.forward_with_cache)
    first = jax.jit(lambda p, c, t, s: serving.forward_with_cache(p, c, t, s, batch_first=True))
    cache = serving.empty_cache(CONFIG, 3)
    stored = {k: jnp.zeros((CONFIG.layers, 3, CONFIG.max_seq, CONFIG.kv_heads, CONFIG.head_dim))
              for k in cache}
    assert serving.BATCH_FIRST_AXES == tuple(serving.CACHE_AXES[i] for i in (0, 3, 1, 2, 4))
    want, cache = step(params, cache, prompt, 0)
    got, stored = first(params, stored, prompt, 0)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(jnp.abs(want).max()))
    # the same cache, in the other order
    np.testing.assert_array_equal(np.asarray(stored["k"]), np.asarray(cache["k"]).transpose(0, 3, 1, 2, 4))
    want, _ = step(params, cache, prompt[:, :1], 4)
    got, _ = first(params, stored, prompt[:, :1], 4)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5 * float(jnp.abs(want).max()))
    # the other side: the same token written one position off is far outside that tolerance
    off, _ = first(params, stored, prompt[:, :1], 5)
    assert np.abs(np.asarray(off) - np.asarray(want)).max() > 100 * 1e-5 * float(jnp.abs(want).max())


def test_donated_cache_is_aliased_and_deleted():
    params = serving.init_decoder(CONFIG)
    cache = serving.empty_cache(CONFIG, 4)
    args = (params, cache, _prompt()[:, :1], 3)
    nbytes = sum(a.nbytes for a in cache.values())
    donated = jax.jit(serving.forward_with_cache, donate_argnums=1)
    assert donated.lower(*args).compile().memory_analysis().alias_size_in_bytes == nbytes
    kept = jax.jit(serving.forward_with_cache).lower(*args).compile()
    assert kept.memory_analysis().alias_size_in_bytes == 0
    donated(*args)
    assert cache["k"].is_deleted()


def test_bytes_read_equals_the_shards_of_the_arguments():
    # An independent count: the bytes of each argument's shard on one device of a (2, 4) mesh.
    config = DecoderConfig(vocab=96, d_model=64, q_heads=8, kv_heads=4, head_dim=16, d_ff=128, layers=3,
                           max_seq=32)
    mesh = _mesh((2, 4))
    params, cache, _, _ = serving.step_arguments(config, mesh, "heads", batch=6, context=32)
    shard = lambda s: math.prod(s.sharding.shard_shape(s.shape)) * s.dtype.itemsize
    weights = sum(shard(s) for name, s in params.items() if name != "embed")
    cache_bytes = sum(shard(s) for s in cache.values())
    got = serving.serving_bytes(config, 6, 32, model_chips=4, batch_chips=2)
    # the replicated norms are read whole by every chip; the formula divides them too: within 1%
    assert got["cache"] == cache_bytes
    assert got["weights"] == pytest.approx(weights, rel=0.01)
    assert got["weights"] != pytest.approx(weights * 4, rel=0.01)
    # wk and wv replicated: each chip reads them whole
    params, _, _, _ = serving.step_arguments(config, mesh, "sequence", batch=6, context=32,
                                             split_kv_weights=False)
    weights = sum(shard(s) for name, s in params.items() if name != "embed")
    got = serving.serving_bytes(config, 6, 32, model_chips=4, batch_chips=2, split_kv_weights=False)
    assert got["weights"] == pytest.approx(weights, rel=0.01)
    assert got["weights"] > serving.serving_bytes(config, 6, 32, model_chips=4, batch_chips=2)["weights"]


def test_forward_flops_against_the_compiled_count():
    # One layer (no loop to count once), products large against the elementwise work.
    config = DecoderConfig(vocab=512, d_model=256, q_heads=4, kv_heads=2, head_dim=64, d_ff=1024, layers=1,
                           max_seq=64)
    params = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.float32), serving.decoder_shapes(config))
    cache = jax.tree.map(lambda s: jax.ShapeDtypeStruct(s.shape, jnp.float32),
                         serving.cache_shapes(config, 8))
    tokens = jax.ShapeDtypeStruct((8, 1), jnp.int32)
    compiled = jax.jit(serving.forward_with_cache).lower(params, cache, tokens, 0).compile()
    counted = compiled.cost_analysis()["flops"]
    modelled = serving.serving_flops(config, 8, 64)
    assert modelled == pytest.approx(counted, rel=0.02)
    assert modelled / 2 != pytest.approx(counted, rel=0.02)   # 1 flop per weight would not pass
    assert serving.serving_flops(config, 8, 64, tokens=4, chips=2) == 2 * modelled


def test_serving_time_terms():
    chip = shardlab.CHIPS["TPU v5e"]
    t = serving.serving_time(1e9, 8.1e9, chip, 1e-3)
    assert t["memory"] == pytest.approx(0.01) and t["compute"] == pytest.approx(1e9 / chip.peak_flops)
    assert t["time"] == pytest.approx(0.011) and t["bound"] == "memory"
    assert serving.serving_time(1e15, 1.0, "TPU v5e")["bound"] == "compute"


def test_decode_step_traffic_counts_every_layer():
    if shardlab.tpu_compiler_missing():
        pytest.skip("libtpu is not installed")
    config = DecoderConfig(vocab=256, d_model=128, q_heads=8, kv_heads=8, head_dim=16, d_ff=256, layers=3,
                           max_seq=64)
    mesh = shardlab.target_mesh("v5e-8", (1, 8), ("data", "model"))
    step, _, _ = serving.sharded_step(mesh, "heads")
    program = shardlab.compile_for(step, *serving.step_arguments(config, mesh, "heads", 8, 64))
    traffic, network = shardlab.step_traffic(program, mesh)
    from shardlab.programs.loops import collectives_per_step
    per_step = collectives_per_step(program.compiled)
    assert sum(t.nbytes for t in traffic) == per_step.bytes_per_step
    assert sum(t.count for t in traffic if t.kind == "all-reduce") == 2 * config.layers
    # the stream of 8 sequences, bf16, all-reduced over 8 chips: 2 (8-1)/8 of 8 x 128 x 2 bytes
    stream = [t for t in traffic if t.kind == "all-reduce"]
    assert sum(t.nbytes for t in stream) == 2 * config.layers * 2 * 7 * 8 * 128 * 2 // 8
    assert shardlab.modelled_time(0, traffic, "TPU v5e", network)["comm"] > 0


@pytest.mark.parametrize("call, message", [
    (lambda: DecoderConfig(q_heads=6, kv_heads=4), "q_heads"),
    (lambda: DecoderConfig(head_dim=15), "head_dim"),
    (lambda: DecoderConfig(layers=0), "layers"),
    (lambda: serving.init_decoder(CONFIG, key="a"), "key"),
    (lambda: serving.init_decoder("config"), "config"),
    (lambda: serving.cache_specs("rows"), "layout"),
    (lambda: serving.decoder_specs(3), "model_axis"),
    (lambda: serving.decoder_specs(split_kv_weights=1), "split_kv_weights"),
    (lambda: serving.serving_bytes(CONFIG, 4, 8, split_kv_weights="no"), "split_kv_weights"),
    (lambda: serving.cache_shapes(CONFIG, 0), "batch"),
    (lambda: serving.sharded_step(_mesh(), "heads", batch_axis="rows"), "batch_axis"),
    (lambda: serving.sharded_step(_mesh(), "pages"), "layout"),
    (lambda: serving.serving_bytes(CONFIG, 6, 8, batch_chips=4), "batch_chips"),
    (lambda: serving.serving_bytes(CONFIG, 4, 0), "context"),
    (lambda: serving.serving_bytes(CONFIG, 4, 8, model_chips=0), "model_chips"),
    (lambda: serving.step_arguments(CONFIG, _mesh(), "heads", 4, 8, tokens=0), "tokens"),
    (lambda: serving.serving_flops(CONFIG, 4, 8, tokens=0), "tokens"),
    (lambda: serving.serving_time(-1, 0, "TPU v5e"), "flops"),
    (lambda: serving.serving_time(1, 1, "TPU v9"), "chip"),
])
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()


def test_generate_refuses_a_sequence_longer_than_the_cache():
    params = serving.init_decoder(CONFIG)
    step = jax.jit(serving.forward_with_cache)
    with pytest.raises(ValueError, match="new_tokens"):
        serving.generate(step, params, serving.empty_cache(CONFIG, 1), _prompt(1, 30), 4)
    with pytest.raises(ValueError, match="prompt"):
        serving.generate(step, params, serving.empty_cache(CONFIG, 1), jnp.zeros((1, 3)), 4)


def test_replicated_kv_heads_equal_one_device():
    # 8 chips per copy for 4 key/value heads, each head kept on 2 chips: (data, kv, model) = (1, 4, 2)
    params = serving.init_decoder(CONFIG, 6)
    prompt = _prompt(4, 5, 3)
    one = jax.jit(serving.forward_with_cache, donate_argnums=1)
    want, want_logits, _ = serving.generate(one, params, serving.empty_cache(CONFIG, 4), prompt, 6)
    mesh = jax.make_mesh((1, 4, 2), ("data", "kv", "model"), devices=DEVICES,
                         axis_types=(AxisType.Auto,) * 3)
    step, param_sh, cache_sh = serving.sharded_step(mesh, "heads", kv_axis="kv")
    assert param_sh["wk"].spec == P(None, None, "kv", None)
    assert param_sh["wq"].spec == P(None, None, ("kv", "model"), None)
    assert cache_sh["k"].spec == P(None, None, "kv", "data", None)
    got, got_logits, cache = serving.generate(step, jax.device_put(params, param_sh),
                                              serving.empty_cache(CONFIG, 4, sharding=cache_sh), prompt, 6)
    assert (np.asarray(got) == np.asarray(want)).all()
    scale = float(jnp.abs(want_logits).max())
    np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=1e-5 * scale)
    # each chip holds a quarter of the cache: every head twice over the 8 chips
    assert cache["k"].addressable_shards[0].data.size * 4 == cache["k"].size
    # and the bytes it reads, by the formula, are those of its shards
    args = serving.step_arguments(CONFIG, mesh, "heads", batch=4, context=CONFIG.max_seq, kv_axis="kv")
    shard = lambda s: math.prod(s.sharding.shard_shape(s.shape)) * s.dtype.itemsize
    got_bytes = serving.serving_bytes(CONFIG, 4, CONFIG.max_seq, model_chips=8, kv_replicas=2)
    assert got_bytes["cache"] == sum(shard(s) for s in args[1].values())
    wkv = sum(shard(args[0][name]) for name in ("wk", "wv"))
    plain = serving.serving_bytes(CONFIG, 4, CONFIG.max_seq, model_chips=8)["weights"]
    assert got_bytes["weights"] == pytest.approx(plain + wkv / 2, rel=1e-9)     # wk, wv read twice as much
    assert got_bytes["weights"] != pytest.approx(plain, rel=1e-3)


def test_itemsizes_of_weights_and_cache_apart():
    both = serving.serving_bytes(LLAMA_8B_LIKE, 64, 8192, model_chips=8)
    int8 = serving.serving_bytes(LLAMA_8B_LIKE, 64, 8192, model_chips=8, itemsize=1)
    w8 = serving.serving_bytes(LLAMA_8B_LIKE, 64, 8192, model_chips=8, weight_itemsize=1)
    c8 = serving.serving_bytes(LLAMA_8B_LIKE, 64, 8192, model_chips=8, cache_itemsize=1)
    assert w8["weights"] == int8["weights"] == both["weights"] / 2 and w8["cache"] == both["cache"]
    assert c8["cache"] == int8["cache"] == both["cache"] / 2 and c8["weights"] == both["weights"]
    # by hand: 128 KiB of bfloat16 cache per token, 64 sequences x 8192 positions over 8 chips
    assert c8["cache"] == 64 * 8192 * 64 * 1024 / 8


@pytest.mark.parametrize("call,message", [
    (lambda: serving.serving_bytes(CONFIG, 4, 8, model_chips=8, kv_replicas=3), "kv_replicas"),
    (lambda: serving.serving_bytes(CONFIG, 4, 8, model_chips=8, kv_replicas=2, split_kv_weights=False),
     "kv_replicas"),
    (lambda: serving.serving_bytes(CONFIG, 4, 8, weight_itemsize=0), "weight_itemsize"),
    (lambda: serving.serving_bytes(CONFIG, 4, 8, cache_itemsize=1.5), "cache_itemsize"),
    (lambda: serving.decoder_specs("model", kv_axis="model"), "kv_axis"),
    (lambda: serving.decoder_specs("model", kv_axis="kv", split_kv_weights=False), "kv_axis"),
    (lambda: serving.cache_specs("sequence", kv_axis="kv"), "kv_axis"),
    (lambda: serving.sharded_step(_mesh((2, 4)), "heads", kv_axis="kv"), "kv_axis"),
])
def test_kv_replication_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
