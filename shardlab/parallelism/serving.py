"""Serving a decoder: a KV cache, prefill and decode, and the bytes each decoded token reads.

A small decoder-only transformer with grouped-query attention (GQA: ``kv_heads`` key/value heads shared
by ``q_heads`` query heads), rotary position embeddings and RMS norms, written so that one function runs
both phases of generation:

* **prefill** reads a prompt of ``T`` tokens at once, writes their keys and values into the cache and
  returns the logits of the last one;
* **decode** reads one token per sequence, writes its key and value at position ``pos`` with
  ``jax.lax.dynamic_update_slice`` and attends over the cache up to it.

:func:`forward_without_cache` recomputes a whole sequence with a causal mask and no cache: the reference
the cached path is checked against. Weights are stacked over layers (a leading axis of ``layers``);
the cache is ``{"k", "v"}`` of shape ``(layers, max_seq, kv_heads, batch, head_dim)``
(``CACHE_AXES``), the order XLA:TPU's decode loop keeps it in: stored batch first instead
(``BATCH_FIRST_AXES``, ``batch_first=True``), the compiled step copies the whole cache into that
order and back at every call. Attention reads the whole allocated cache at every step and masks the
positions not yet written (production kernels, ragged or paged attention, read only the filled part).

:func:`sharded_step` jits it for a mesh (weights split by heads and MLP units, the key/value weights
optionally replicated, the cache by heads or by sequence, the cache donated) and :func:`step_arguments` gives its arguments at any size without
allocating them, to compile for a TPU slice. The last part models one step on a chip:
:func:`serving_bytes` (weights and cache read from HBM per step, per chip), :func:`serving_flops`,
:func:`serving_time` (the memory term from the chip's HBM bandwidth, which
:func:`shardlab.modelled_time` does not count, plus the collectives' time from it). Everything there is
*modelled*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardlab.arguments import positive_int
from shardlab.hardware.chips import named_chip

__all__ = [
    "DecoderConfig", "LLAMA_8B_LIKE", "init_decoder", "decoder_shapes", "decoder_specs", "cache_specs",
    "empty_cache", "cache_shapes", "CACHE_AXES", "BATCH_FIRST_AXES", "forward_with_cache", "forward_without_cache", "generate",
    "sharded_step", "step_arguments", "serving_bytes", "serving_flops", "serving_time",
    "LAYOUTS",
]


@dataclass(frozen=True)
class DecoderConfig:
    """Sizes of a GQA decoder: vocabulary, width, query and key/value heads, head width, MLP, layers, cache."""

    vocab: int = 64
    d_model: int = 64
    q_heads: int = 8
    kv_heads: int = 4
    head_dim: int = 16
    d_ff: int = 128
    layers: int = 2
    max_seq: int = 32

    def __post_init__(self):
        for name in ("vocab", "d_model", "q_heads", "kv_heads", "head_dim", "d_ff", "layers", "max_seq"):
            positive_int(f"DecoderConfig: {name}", getattr(self, name))
        if self.q_heads % self.kv_heads:
            raise ValueError(f"DecoderConfig: q_heads ({self.q_heads}) must be a multiple of kv_heads "
                             f"({self.kv_heads}): each key/value head serves a group of query heads")
        if self.head_dim % 2:
            raise ValueError(f"DecoderConfig: head_dim must be even (rotary embeddings rotate pairs), "
                             f"got {self.head_dim}")

    @property
    def layer_params(self) -> int:
        """Parameters of one layer (attention, a gated SwiGLU MLP, two norm scales)."""
        d, k = self.d_model, self.head_dim
        attention = d * self.q_heads * k * 2 + d * self.kv_heads * k * 2
        return attention + 3 * d * self.d_ff + 2 * d

    @property
    def num_params(self) -> int:
        """All parameters (embedding, layers, final norm, output projection, not tied)."""
        return 2 * self.vocab * self.d_model + self.layers * self.layer_params + self.d_model

    def kv_bytes_per_token(self, itemsize: int = 2) -> int:
        """Bytes of the cache one token of one sequence takes: keys and values of every layer."""
        return 2 * self.layers * self.kv_heads * self.head_dim * positive_int("itemsize", itemsize)


#: A decoder the size of Llama 3 8B, 8.0e9 parameters (GQA with 8 key/value heads, vocabulary 128,256).
LLAMA_8B_LIKE = DecoderConfig(vocab=128_256, d_model=4096, q_heads=32, kv_heads=8, head_dim=128,
                              d_ff=14_336, layers=32, max_seq=8192)


def _check_config(config):
    if not isinstance(config, DecoderConfig):
        raise ValueError(f"config must be a DecoderConfig, got {type(config).__name__}")


def _shapes(config: DecoderConfig) -> dict:
    d, L, k = config.d_model, config.layers, config.head_dim
    return {"embed": (config.vocab, d),
            "ln1": (L, d), "wq": (L, d, config.q_heads, k), "wk": (L, d, config.kv_heads, k),
            "wv": (L, d, config.kv_heads, k), "wo": (L, config.q_heads, k, d),
            "ln2": (L, d), "w_gate": (L, d, config.d_ff), "w_up": (L, d, config.d_ff),
            "w_down": (L, config.d_ff, d),
            "ln_f": (d,), "unembed": (d, config.vocab)}


def init_decoder(config: DecoderConfig, key=0, dtype=None) -> dict:
    """Parameters drawn from ``key`` (an int seed or a ``jax.random.key``); ``dtype`` defaults to float32."""
    import jax
    import jax.numpy as jnp

    _check_config(config)
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        key = jax.random.key(int(key))
    elif not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
        raise ValueError(f"init_decoder: key must be an int seed or a jax.random.key, got {key!r}")
    dtype = jnp.float32 if dtype is None else dtype
    shapes = _shapes(config)
    fan_in = {"embed": 1, "wq": config.d_model, "wk": config.d_model, "wv": config.d_model,
              "wo": config.q_heads * config.head_dim, "w_gate": config.d_model, "w_up": config.d_model,
              "w_down": config.d_ff, "unembed": config.d_model}
    keys = dict(zip(shapes, jax.random.split(key, len(shapes))))
    params = {}
    for name, shape in shapes.items():
        if name.startswith("ln"):
            params[name] = jnp.ones(shape, dtype)
        else:
            w = jax.random.normal(keys[name], shape, jnp.float32) / math.sqrt(fan_in[name])
            params[name] = w.astype(dtype)
    return params


def decoder_shapes(config: DecoderConfig, dtype=None) -> dict:
    """The parameters as ``jax.ShapeDtypeStruct`` (nothing allocated); ``dtype`` defaults to bfloat16."""
    import jax
    import jax.numpy as jnp

    _check_config(config)
    dtype = jnp.bfloat16 if dtype is None else dtype
    return {name: jax.ShapeDtypeStruct(shape, dtype) for name, shape in _shapes(config).items()}


#: The cache's dimensions, in order.
CACHE_AXES = ("layers", "seq", "kv_heads", "batch", "head_dim")

#: The cache's dimensions stored batch first (``forward_with_cache(..., batch_first=True)``).
BATCH_FIRST_AXES = ("layers", "batch", "seq", "kv_heads", "head_dim")

#: How the cache may be split over the ``model`` axis: by key/value heads, or by position in the sequence.
LAYOUTS = ("heads", "sequence")


def decoder_specs(model_axis: str | None = "model", *, split_kv_weights: bool = True,
                  kv_axis: str | None = None) -> dict:
    """A ``PartitionSpec`` per parameter: tensor parallelism over ``model_axis`` (``None``: replicated).

    Attention is split by heads (``wq``, ``wk``, ``wv`` on their head dimension, ``wo`` on its input
    heads), the MLP by hidden units (``w_gate``, ``w_up`` on their output, ``w_down`` on its input), the
    output projection by vocabulary; the embedding and the norms are replicated. ``split_kv_weights=False``
    replicates ``wk`` and ``wv`` (small under GQA), so that ``model_axis`` may exceed the key/value heads.

    ``kv_axis``: a second tensor axis for more chips than key/value heads with each head *replicated*: the
    key/value heads are split over ``kv_axis`` alone (each kept whole on the ``model_axis`` chips of its
    group), every other split dimension over ``(kv_axis, model_axis)`` together. With query heads split that
    way, the query heads of a chip share the key/value head it holds, so attention stays on the chip.
    """
    from jax.sharding import PartitionSpec as P

    m = model_axis
    if m is not None and not isinstance(m, str):
        raise ValueError(f"decoder_specs: model_axis must be a mesh axis name or None, got {m!r}")
    if not isinstance(split_kv_weights, bool):
        raise ValueError(f"decoder_specs: split_kv_weights must be True or False, got {split_kv_weights!r}")
    if kv_axis is not None:
        if not isinstance(kv_axis, str) or m is None or kv_axis == m:
            raise ValueError(f"decoder_specs: kv_axis must be a mesh axis name other than model_axis ({m!r}), "
                             f"got {kv_axis!r}")
        if not split_kv_weights:
            raise ValueError("decoder_specs: kv_axis replicates each key/value head; it needs "
                             "split_kv_weights=True")
        kv, m = P(None, None, kv_axis, None), (kv_axis, m)
    else:
        kv = P(None, None, m, None) if split_kv_weights else P()
    return {"embed": P(), "ln1": P(), "wq": P(None, None, m, None), "wk": kv, "wv": kv, "wo": P(None, m, None, None), "ln2": P(),
            "w_gate": P(None, None, m), "w_up": P(None, None, m), "w_down": P(None, m, None),
            "ln_f": P(), "unembed": P(None, m)}


def cache_specs(layout: str, *, batch_axis: str | None = "data", model_axis: str | None = "model",
                kv_axis: str | None = None) -> dict:
    """``PartitionSpec`` of the cache (``CACHE_AXES``) for a layout.

    ``"heads"``: key/value heads over ``model_axis`` (each chip keeps the cache of the heads it computes);
    ``"sequence"``: positions over ``model_axis`` (for more chips than key/value heads, or long contexts).
    The batch is split over ``batch_axis`` either way. ``kv_axis`` (layout ``"heads"`` only): the heads are
    split over ``kv_axis`` and each replicated over ``model_axis`` (see :func:`decoder_specs`).
    """
    from jax.sharding import PartitionSpec as P

    if layout not in LAYOUTS:
        raise ValueError(f"cache_specs: layout must be one of {LAYOUTS}, got {layout!r}")
    b, m = batch_axis, model_axis
    if kv_axis is not None:
        if layout != "heads":
            raise ValueError(f"cache_specs: kv_axis replicates key/value heads; it needs layout 'heads', "
                             f"got {layout!r}")
        m = kv_axis
    spec = P(None, None, m, b, None) if layout == "heads" else P(None, m, None, b, None)
    return {"k": spec, "v": spec}


def _batch_seq(name: str, batch, seq, seq_name: str = "seq") -> tuple[int, int]:
    return positive_int(f"{name}: batch", batch), positive_int(f"{name}: {seq_name}", seq)


def cache_shapes(config: DecoderConfig, batch: int, dtype=None, seq: int | None = None) -> dict:
    """The cache as ``jax.ShapeDtypeStruct`` ``(layers, seq, kv_heads, batch, head_dim)`` (default bfloat16,
    ``seq`` defaults to ``config.max_seq``)."""
    import jax
    import jax.numpy as jnp

    _check_config(config)
    batch, seq = _batch_seq("cache_shapes", batch, config.max_seq if seq is None else seq)
    shape = (config.layers, seq, config.kv_heads, batch, config.head_dim)
    dtype = jnp.bfloat16 if dtype is None else dtype
    return {"k": jax.ShapeDtypeStruct(shape, dtype), "v": jax.ShapeDtypeStruct(shape, dtype)}


def empty_cache(config: DecoderConfig, batch: int, dtype=None, sharding=None) -> dict:
    """A cache of zeros for ``batch`` sequences of up to ``config.max_seq`` tokens (default float32),
    created already split as ``sharding`` (a ``{"k", "v"}`` dict of shardings) if given."""
    import jax
    import jax.numpy as jnp

    shapes = cache_shapes(config, batch, jnp.float32 if dtype is None else dtype)
    make = lambda: {n: jnp.zeros(s.shape, s.dtype) for n, s in shapes.items()}
    return jax.jit(make, out_shardings=sharding)() if sharding is not None else make()


def _rms_norm(x, scale):
    import jax.numpy as jnp

    x32 = x.astype(jnp.float32)   # statistics in float32 whatever the compute dtype
    x32 = x32 * (1.0 / jnp.sqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + 1e-6))
    return x32.astype(x.dtype) * scale


def _rotate(x, positions):
    """Rotary embedding of ``x`` ``(batch, T, heads, head_dim)`` at ``positions`` ``(T,)``."""
    import jax.numpy as jnp

    half = x.shape[-1] // 2
    freq = 1.0 / (10_000.0 ** (jnp.arange(half, dtype=jnp.float32) / half))
    angle = positions.astype(jnp.float32)[:, None] * freq            # (T, half)
    cos, sin = jnp.cos(angle)[None, :, None], jnp.sin(angle)[None, :, None]
    x1, x2 = x[..., :half].astype(jnp.float32), x[..., half:].astype(jnp.float32)
    return jnp.concatenate([x1 * cos - x2 * sin, x1 * sin + x2 * cos], axis=-1).astype(x.dtype)


def _attend(q, k, v, q_pos, k_pos, batch_first=False):
    """GQA attention: ``q`` ``(B, T, Hq, D)``, ``k``/``v`` ``(S, Hkv, B, D)`` (``(B, S, Hkv, D)`` if
    ``batch_first``); key ``s`` seen by query ``t`` where ``k_pos[s] <= q_pos[t]``. Scores and softmax in
    float32. Every position of ``k`` is read, written or not: the mask hides the unwritten ones."""
    import jax
    import jax.numpy as jnp

    B, T, Hq, D = q.shape
    Hkv = k.shape[2 if batch_first else 1]
    kv = "bskd" if batch_first else "skbd"
    q = q.reshape(B, T, Hkv, Hq // Hkv, D)
    scores = jnp.einsum(f"btkgd,{kv}->bkgts", q, k, preferred_element_type=jnp.float32) / math.sqrt(D)
    seen = k_pos[None, :] <= q_pos[:, None]                            # (T, S)
    weights = jax.nn.softmax(jnp.where(seen, scores, -1e30), axis=-1)
    out = jnp.einsum(f"bkgts,{kv}->btkgd", weights.astype(v.dtype), v)
    return out.reshape(B, T, Hq, D)


#: The weights stacked over layers (a leading axis of ``layers``).
_LAYER_WEIGHTS = ("ln1", "wq", "wk", "wv", "wo", "ln2", "w_gate", "w_up", "w_down")


def _mlp(h, w):
    import jax

    return (jax.nn.silu(h @ w["w_gate"]) * (h @ w["w_up"])) @ w["w_down"]


def forward_without_cache(params, tokens):
    """Logits ``(batch, T, vocab)`` for every position of ``tokens`` ``(batch, T)``: causal, no cache."""
    import jax.numpy as jnp

    T = tokens.shape[1]
    positions = jnp.arange(T)
    x = params["embed"][tokens]
    for l in range(params["wq"].shape[0]):      # a Python loop: an independent path from the scan
        w = {name: params[name][l] for name in _LAYER_WEIGHTS}
        h = _rms_norm(x, w["ln1"])
        q, k, v = (jnp.einsum("btd,dhk->bthk", h, w[name]) for name in ("wq", "wk", "wv"))
        q, k = _rotate(q, positions), _rotate(k, positions)
        k, v = k.transpose(1, 2, 0, 3), v.transpose(1, 2, 0, 3)      # (T, heads, batch, head_dim)
        x = x + jnp.einsum("bthk,hkd->btd", _attend(q, k, v, positions, positions), w["wo"])
        x = x + _mlp(_rms_norm(x, w["ln2"]), w)
    return _rms_norm(x, params["ln_f"]) @ params["unembed"]


def forward_with_cache(params, cache, tokens, start, heads_sharding=None, batch_first=False):
    """Logits of the last of ``tokens`` ``(batch, T)``, which sit at positions ``start .. start+T-1``,
    and the cache with their keys and values written in: ``(logits (batch, vocab), cache)``.

    Prefill is ``T`` = the prompt's length at ``start = 0``; decode is ``T = 1`` at ``start = pos``.
    The layers run in a ``jax.lax.scan`` over the stacked weights (one compiled layer, whatever the
    depth); the cache travels in the loop's carry, and each layer writes its new keys and values at
    ``(layer, start, 0, 0, 0)`` with ``jax.lax.dynamic_update_slice`` (``start`` may be traced), then
    attends over its whole slice of the cache, masking positions after each query. Jit it with the
    cache donated (``donate_argnums=1``) so that the write happens in the cache's own buffer.

    ``heads_sharding``: where given (a sharding of ``(batch, T, heads, head_dim)``), the new queries,
    keys and values are constrained to it before attention; with the cache split by sequence, a
    sharding that keeps every head on every chip (``P(batch_axis)``) lets each chip attend over its own
    positions for all heads, and the chips combine their partial softmaxes with small all-reduces.

    ``batch_first``: the cache is stored as ``BATCH_FIRST_AXES`` and used in that order throughout
    (no transposes), in place of ``CACHE_AXES``.
    """
    import jax
    import jax.numpy as jnp

    T = tokens.shape[1]
    start = jnp.asarray(start, jnp.int32)
    positions = start + jnp.arange(T, dtype=jnp.int32)
    k_pos = jnp.arange(cache["k"].shape[2 if batch_first else 1], dtype=jnp.int32)
    constrain = (lambda a: a) if heads_sharding is None else (
        lambda a: jax.lax.with_sharding_constraint(a, heads_sharding))
    zero = jnp.zeros((), jnp.int32)

    def layer(carry, w):
        x, k_cache, v_cache, l = carry
        h = _rms_norm(x, w["ln1"])
        q, k, v = (jnp.einsum("btd,dhk->bthk", h, w[name]) for name in ("wq", "wk", "wv"))
        q, k = _rotate(q, positions), _rotate(k, positions)
        q, k, v = constrain(q), constrain(k), constrain(v)
        if batch_first:
            at = (l, zero, start, zero, zero)
        else:
            k, v = k.transpose(1, 2, 0, 3), v.transpose(1, 2, 0, 3)  # (T, heads, batch, head_dim)
            at = (l, start, zero, zero, zero)
        k_cache = jax.lax.dynamic_update_slice(k_cache, k[None].astype(k_cache.dtype), at)
        v_cache = jax.lax.dynamic_update_slice(v_cache, v[None].astype(v_cache.dtype), at)
        keys, values = (jax.lax.dynamic_index_in_dim(c, l, keepdims=False).astype(q.dtype)
                        for c in (k_cache, v_cache))
        attended = _attend(q, keys, values, positions, k_pos, batch_first)
        x = x + jnp.einsum("bthk,hkd->btd", attended, w["wo"])
        x = x + _mlp(_rms_norm(x, w["ln2"]), w)
        return (x, k_cache, v_cache, l + 1), None

    weights = {name: params[name] for name in _LAYER_WEIGHTS}
    carry = (params["embed"][tokens], cache["k"], cache["v"], zero)
    (x, k_cache, v_cache, _), _ = jax.lax.scan(layer, carry, weights)
    logits = _rms_norm(x[:, -1], params["ln_f"]) @ params["unembed"]
    return logits, {"k": k_cache, "v": v_cache}


def generate(step, params, cache, prompt, new_tokens: int):
    """Greedy generation: ``step`` (a jitted :func:`forward_with_cache`) prefills ``prompt`` ``(batch, T)``,
    then decodes ``new_tokens - 1`` more, one per call. Returns ``(tokens (batch, new_tokens), logits
    (batch, new_tokens, vocab), cache)``; the logits are those each token was picked from."""
    import jax.numpy as jnp

    new_tokens = positive_int("generate: new_tokens", new_tokens)
    prompt = jnp.asarray(prompt)
    if prompt.ndim != 2 or not jnp.issubdtype(prompt.dtype, jnp.integer):
        raise ValueError(f"generate: prompt must be a (batch, T) array of token ids, got {prompt.dtype} "
                         f"{prompt.shape}")
    T = prompt.shape[1]
    if T + new_tokens - 1 > cache["k"].shape[1]:
        raise ValueError(f"generate: prompt ({T}) + new_tokens ({new_tokens}) - 1 exceeds the cache's "
                         f"{cache['k'].shape[1]} positions")
    logits, cache = step(params, cache, prompt, 0)
    tokens, kept = [], []
    for i in range(new_tokens):
        if i:
            logits, cache = step(params, cache, tokens[-1][:, None], T + i - 1)
        kept.append(logits)
        tokens.append(jnp.argmax(logits, axis=-1).astype(prompt.dtype))
    return jnp.stack(tokens, axis=1), jnp.stack(kept, axis=1), cache


# -------------------------------------------------------------------------------------------------------
# A sharded step, compiled for a target


def sharded_step(mesh, layout: str, *, batch_axis: str | None = "data", model_axis: str = "model",
                 donate: bool = True, split_kv_weights: bool = True, kv_axis: str | None = None):
    """:func:`forward_with_cache` jitted for ``mesh``: weights split by :func:`decoder_specs` (``wk`` and
    ``wv`` replicated where ``split_kv_weights`` is False), the cache
    by :func:`cache_specs` (``layout``), the tokens and logits by ``batch_axis``, the cache donated.

    Returns ``(step, param_shardings, cache_shardings)``. With the cache split by sequence, every head's
    query, key and value is kept on every chip of ``model_axis`` (``heads_sharding``). ``kv_axis``: each
    key/value head replicated over ``model_axis`` (:func:`decoder_specs`).
    """
    import functools

    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    if layout not in LAYOUTS:
        raise ValueError(f"sharded_step: layout must be one of {LAYOUTS}, got {layout!r}")
    names = tuple(getattr(mesh, "axis_names", ()))
    for name, axis in (("batch_axis", batch_axis), ("model_axis", model_axis), ("kv_axis", kv_axis)):
        if axis is not None and axis not in names:
            raise ValueError(f"sharded_step: {name} must be an axis of the mesh {names}, got {axis!r}")
    shard = lambda tree: jax.tree.map(lambda spec: NamedSharding(mesh, spec), tree,
                                      is_leaf=lambda x: isinstance(x, P))
    params = shard(decoder_specs(model_axis, split_kv_weights=split_kv_weights, kv_axis=kv_axis))
    cache = shard(cache_specs(layout, batch_axis=batch_axis, model_axis=model_axis, kv_axis=kv_axis))
    rows = NamedSharding(mesh, P(batch_axis))
    heads = rows if layout == "sequence" else None
    step = jax.jit(functools.partial(forward_with_cache, heads_sharding=heads),
                   in_shardings=(params, cache, rows, None), out_shardings=(rows, cache),
                   donate_argnums=(1,) if donate else ())
    return step, params, cache


def step_arguments(config: DecoderConfig, mesh, layout: str, batch: int, context: int, tokens: int = 1,
                   *, batch_axis: str | None = "data", model_axis: str = "model", dtype=None,
                   split_kv_weights: bool = True, kv_axis: str | None = None) -> tuple:
    """The arguments of a sharded step as ``jax.ShapeDtypeStruct`` (nothing allocated): bfloat16 weights
    and a cache of ``context`` positions for ``batch`` sequences, ``tokens`` new tokens each, a start."""
    import jax
    import jax.numpy as jnp

    _check_config(config)
    tokens = positive_int("step_arguments: tokens", tokens)
    _, param_sh, cache_sh = sharded_step(mesh, layout, batch_axis=batch_axis, model_axis=model_axis,
                                         split_kv_weights=split_kv_weights, kv_axis=kv_axis)
    place = lambda shapes, shardings: jax.tree.map(
        lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), shapes, shardings)
    rows = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(batch_axis))
    return (place(decoder_shapes(config, dtype), param_sh),
            place(cache_shapes(config, batch, dtype, seq=context), cache_sh),
            jax.ShapeDtypeStruct((batch, tokens), jnp.int32, sharding=rows), jax.ShapeDtypeStruct((), jnp.int32))


# -------------------------------------------------------------------------------------------------------
# One step on a chip, modelled


def _read_params(config: DecoderConfig) -> int:
    return config.num_params - config.vocab * config.d_model     # the embedding is looked up, not read


def serving_bytes(config: DecoderConfig, batch: int, context: int, *, model_chips: int = 1,
                  batch_chips: int = 1, itemsize: int = 2, split_kv_weights: bool = True,
                  kv_replicas: int = 1, weight_itemsize: int | None = None,
                  cache_itemsize: int | None = None) -> dict:
    """Bytes one chip reads from HBM in one decode step (modelled): ``{"weights", "cache", "total"}``.

    ``batch`` sequences in all, each with ``context`` positions of cache; weights split over
    ``model_chips`` (tensor parallelism: each chip reads its slice once per step, whatever the batch;
    the embedding is a lookup of a few rows and counts nothing); the cache split over ``model_chips``
    (by heads or by sequence: the same bytes) and over ``batch_chips`` with the batch. ``itemsize``:
    bytes per number (2 for bfloat16); ``split_kv_weights=False``: ``wk`` and ``wv`` are replicated, read
    whole by every chip. Every allocated position of the cache counts: attention reads it all and masks
    the positions not yet written (pass the filled length as ``context`` to model a kernel that reads only
    that).

    ``kv_replicas``: each key/value head (its ``wk``, ``wv`` and cache) is kept on ``kv_replicas`` of the
    ``model_chips`` (more chips than key/value heads, :func:`decoder_specs` with ``kv_axis``), so those are
    split over ``model_chips / kv_replicas`` only. ``weight_itemsize`` and ``cache_itemsize`` (default
    ``itemsize``): bytes per number of the weights and of the cache apart, e.g. 1 for int8 weights or an
    int8 cache (their scales, a few bytes per row, not counted).
    """
    _check_config(config)
    batch, context = _batch_seq("serving_bytes", batch, context, "context")
    model_chips = positive_int("serving_bytes: model_chips", model_chips)
    batch_chips = positive_int("serving_bytes: batch_chips", batch_chips)
    itemsize = positive_int("serving_bytes: itemsize", itemsize)
    kv_replicas = positive_int("serving_bytes: kv_replicas", kv_replicas)
    if model_chips % kv_replicas:
        raise ValueError(f"serving_bytes: model_chips ({model_chips}) must be a multiple of kv_replicas "
                         f"({kv_replicas})")
    if kv_replicas > 1 and not split_kv_weights:
        raise ValueError("serving_bytes: kv_replicas needs split_kv_weights=True")
    w_size = itemsize if weight_itemsize is None else positive_int("serving_bytes: weight_itemsize",
                                                                   weight_itemsize)
    c_size = itemsize if cache_itemsize is None else positive_int("serving_bytes: cache_itemsize",
                                                                  cache_itemsize)
    if batch % batch_chips:
        raise ValueError(f"serving_bytes: batch ({batch}) must be a multiple of batch_chips ({batch_chips})")
    if not isinstance(split_kv_weights, bool):
        raise ValueError(f"serving_bytes: split_kv_weights must be True or False, got {split_kv_weights!r}")
    all_kv = 2 * config.layers * config.d_model * config.kv_heads * config.head_dim
    kv_weights = 0 if split_kv_weights else all_kv
    weights = ((_read_params(config) - kv_weights) / model_chips + kv_weights) * w_size
    weights += (kv_replicas - 1) * all_kv / model_chips * w_size      # the replicated heads' wk, wv
    cache = batch * context * config.kv_bytes_per_token(c_size) / (model_chips // kv_replicas * batch_chips)
    return {"weights": weights, "cache": cache, "total": weights + cache}


def serving_flops(config: DecoderConfig, batch: int, context: int, *, tokens: int = 1, chips: int = 1) -> float:
    """Flops of one step per chip (modelled), ``tokens`` new tokens for each of ``batch`` sequences:
    ``2`` per weight per token (the matrix products), plus attention's two products over ``context``
    cached positions, ``4 * context * q_heads * head_dim`` per layer and token; split over ``chips``."""
    _check_config(config)
    batch, context = _batch_seq("serving_flops", batch, context, "context")
    tokens = positive_int("serving_flops: tokens", tokens)
    chips = positive_int("serving_flops: chips", chips)
    attention = 4 * context * config.q_heads * config.head_dim * config.layers
    return batch * tokens * (2 * _read_params(config) + attention) / chips


def serving_time(flops: float, hbm_bytes: float, chip, comm: float = 0.0) -> dict:
    """Modelled time of one step on one chip.

    ``compute = flops / peak_flops`` and ``memory = hbm_bytes / hbm_bandwidth`` overlap (a step takes the
    larger: the chip streams weights in while it multiplies); ``comm`` (seconds, e.g.
    ``modelled_time(...)["comm"]`` of the step's collectives) is added, because each collective waits
    for the product before it and the next layer waits for it. Returns ``{"compute", "memory",
    "comm", "time", "bound"}``, bound naming the largest term (``"memory"``, ``"compute"`` or
    ``"communication"``).
    """

    chip = named_chip(chip)
    for name, value in (("flops", flops), ("hbm_bytes", hbm_bytes), ("comm", comm)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) \
                or not value >= 0:
            raise ValueError(f"serving_time: {name} must be a non-negative number, got {value!r}")
    compute, memory = float(flops) / chip.peak_flops, float(hbm_bytes) / chip.hbm_bandwidth
    terms = {"memory": memory, "compute": compute, "communication": float(comm)}
    return {"compute": compute, "memory": memory, "comm": float(comm), "time": max(compute, memory) + comm,
            "bound": max(terms, key=terms.get)}
