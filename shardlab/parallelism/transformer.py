"""A small decoder-only transformer in plain JAX, laid out over a ``("data", "fsdp", "model")`` mesh.

One model, every layout: the layout is only the sizes of the three mesh axes. The batch is split over
``data`` and ``fsdp`` together; every weight matrix is split over ``fsdp`` on one dimension (gathered
whole, on that axis, just before use) and over ``model`` on the other, Megatron-style (attention heads
and the MLP's hidden units). An optional ``residual`` hook constrains the residual stream between
sub-layers (split over ``model`` along the sequence); compilers then keep the tokens split through each
block and gather the weights, which is not Megatron sequence parallelism, so the book's layouts run
without it. An axis of size one changes nothing, so ``(8, 1, 1)`` is data parallelism, ``(1, 8, 1)``
FSDP and ``(1, 1, 8)`` tensor parallelism.

The task is synthetic and learnable: reverse a sequence of random tokens (:func:`reversal_batch`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardlab.arguments import positive_int
from shardlab.parallelism.logical_axes import RULES, logical_spec

#: The mesh axes every layout uses, in this order.
AXES = ("data", "fsdp", "model")


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes of the model: vocabulary, width, heads, MLP width, blocks and sequence length."""

    vocab: int = 16
    d_model: int = 64
    heads: int = 8
    d_ff: int = 256
    layers: int = 2
    seq: int = 16

    def __post_init__(self):
        for name in ("vocab", "d_model", "heads", "d_ff", "layers", "seq"):
            positive_int(f"TransformerConfig: {name}", getattr(self, name))
        if self.d_model % self.heads:
            raise ValueError(f"TransformerConfig: d_model ({self.d_model}) must be a multiple of heads "
                             f"({self.heads})")
        if self.seq % 2:
            raise ValueError(f"TransformerConfig: seq must be even (a sequence and its reverse), got {self.seq}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.heads

    @property
    def num_params(self) -> int:
        """Parameters of the model (embeddings and layer norms included)."""
        d, f = self.d_model, self.d_ff
        block = 4 * d * d + 2 * d * f + 2 * d
        return self.vocab * d + self.seq * d + self.layers * block + d + d * self.vocab


def _check_config(config):
    if not isinstance(config, TransformerConfig):
        raise ValueError(f"config must be a TransformerConfig, got {type(config).__name__}")


def init_params(config: TransformerConfig, key=0, dtype=None) -> dict:
    """The model's parameters, drawn with ``jax.random`` from ``key`` (a PRNG key, or an int seed).

    Pure JAX, so that it can be compiled with the parameters' shardings as its outputs,
    ``jax.jit(lambda k: init_params(config, k), out_shardings=...)(key)``: each device then creates only
    its own shards, and the whole model never exists in one place. JAX's random bits do not depend on
    the sharding (``jax_threefry_partitionable``), so every layout starts from the same values. Weight
    matrices are normal with variance ``1 / fan_in`` (the blocks' output projections scaled down by
    ``2 * layers``), layer-norm scales are ones. ``dtype`` defaults to float32.
    """
    import jax
    import jax.numpy as jnp

    _check_config(config)
    dtype = jnp.float32 if dtype is None else dtype
    if isinstance(key, (int, np.integer)) and not isinstance(key, bool):
        key = jax.random.key(int(key))
    elif not (isinstance(key, jax.Array) and jnp.issubdtype(key.dtype, jax.dtypes.prng_key)):
        raise ValueError(f"init_params: key must be an int seed or a jax.random.key, got {key!r}")
    d, h, k, f = config.d_model, config.heads, config.head_dim, config.d_ff
    keys = iter(jax.random.split(key, 3 + 6 * config.layers))

    def normal(shape, fan_in, scale=1.0):
        return (jax.random.normal(next(keys), shape, jnp.float32) * (scale / math.sqrt(fan_in))).astype(dtype)

    ones = lambda: jnp.ones(d, dtype)   # a new array each: a tree of distinct buffers (donatable)
    embed, pos = normal((config.vocab, d), 1), normal((config.seq, d), 1, 0.25)
    blocks = [{"ln1": ones(), "wq": normal((d, h, k), d), "wk": normal((d, h, k), d),
               "wv": normal((d, h, k), d), "wo": normal((h, k, d), d, 1 / (2 * config.layers)),
               "ln2": ones(), "w_in": normal((d, f), d), "w_out": normal((f, d), f, 1 / (2 * config.layers))}
              for _ in range(config.layers)]
    return {"embed": embed, "pos": pos, "blocks": blocks, "ln_f": ones(), "unembed": normal((d, config.vocab), d)}


def param_shapes(config: TransformerConfig, dtype=np.float32, stacked: bool = False) -> dict:
    """The parameters' shapes and dtype as ``jax.ShapeDtypeStruct`` (nothing allocated): a pod-scale model.

    ``stacked=True``: the blocks as one dict of arrays with a leading ``layers`` dimension, the form
    ``forward`` runs under ``jax.lax.scan`` (see :func:`stack_blocks`).
    """
    import jax

    _check_config(config)
    d, h, k, f = config.d_model, config.heads, config.head_dim, config.d_ff
    shapes = {"ln1": (d,), "wq": (d, h, k), "wk": (d, h, k), "wv": (d, h, k), "wo": (h, k, d), "ln2": (d,),
              "w_in": (d, f), "w_out": (f, d)}
    leaf = lambda shape: jax.ShapeDtypeStruct(shape, dtype)
    if stacked:
        blocks = {name: leaf((config.layers,) + shape) for name, shape in shapes.items()}
    else:
        blocks = [{name: leaf(shape) for name, shape in shapes.items()} for _ in range(config.layers)]
    return {"embed": leaf((config.vocab, d)), "pos": leaf((config.seq, d)), "blocks": blocks,
            "ln_f": leaf((d,)), "unembed": leaf((d, config.vocab))}


def stack_blocks(params) -> dict:
    """``params`` with its list of blocks stacked into one dict of ``(layers, ...)`` arrays (for a scan)."""
    import jax
    import jax.numpy as jnp

    if not isinstance(params, dict) or not isinstance(params.get("blocks"), list):
        raise ValueError("stack_blocks: params must be the dict init_params returns (a list of blocks)")
    return {**params, "blocks": jax.tree.map(lambda *layers: jnp.stack(layers), *params["blocks"])}


#: Each parameter's dimensions by logical name (:mod:`shardlab.parallelism.logical_axes`); ``None``: never split.
#: The embedding tables' rows are looked up, not multiplied: they stay whole.
PARAM_AXES = {"embed": (None, "embed"), "pos": (None, "embed"), "ln_f": (), "unembed": ("embed", "vocab")}
BLOCK_AXES = {"ln1": (), "wq": ("embed", "heads", None), "wk": ("embed", "heads", None),
              "wv": ("embed", "heads", None), "wo": ("heads", None, "embed"), "ln2": (),
              "w_in": ("embed", "mlp"), "w_out": ("mlp", "embed")}


def block_specs(rules=None) -> dict:
    """A ``PartitionSpec`` per weight of one block, from ``BLOCK_AXES`` and ``rules``."""

    rules = RULES if rules is None else rules
    return {name: logical_spec(axes, rules) for name, axes in BLOCK_AXES.items()}


def param_specs(params, rules=None) -> dict:
    """A ``PartitionSpec`` per parameter over the axes ``("data", "fsdp", "model")``.

    Read from each parameter's logical axis names (``PARAM_AXES``, ``BLOCK_AXES``) through
    ``rules`` (default ``shardlab.parallelism.logical_axes.RULES``): matrices that widen the stream (``wq``,
    ``wk``, ``wv``, ``w_in``) are split over ``fsdp`` on their input dimension (``embed``) and ``model``
    on their output one (``heads``, ``mlp``); those that narrow it back (``wo``, ``w_out``) the other way
    round; the embeddings over ``fsdp`` on the width, the output projection over ``model`` on the
    vocabulary. Layer-norm scales are replicated. Blocks stacked for a scan (a dict of arrays with a
    leading layer dimension, :func:`param_shapes` with ``stacked=True``) get that dimension unsplit.
    """
    from jax.sharding import PartitionSpec as P

    if not isinstance(params, dict) or "blocks" not in params:
        raise ValueError("param_specs: params must be the dict init_params returns")
    rules = RULES if rules is None else rules
    block = block_specs(rules)
    outer = {name: logical_spec(axes, rules) for name, axes in PARAM_AXES.items()}
    if isinstance(params["blocks"], dict):            # stacked: (layers, ...) per weight
        blocks = {name: P(None, *spec) for name, spec in block.items()}
    else:
        blocks = [dict(block) for _ in params["blocks"]]
    return {"embed": outer["embed"], "pos": outer["pos"], "blocks": blocks, "ln_f": outer["ln_f"],
            "unembed": outer["unembed"]}


def without_fsdp(spec):
    """``spec`` with the ``fsdp`` axis removed: how a weight is laid out while it is used."""
    from jax.sharding import PartitionSpec as P

    def drop(entry):
        if entry == "fsdp":
            return None
        if isinstance(entry, tuple):
            kept = tuple(a for a in entry if a != "fsdp")
            return kept if len(kept) > 1 else (kept[0] if kept else None)
        return entry
    return P(*(drop(e) for e in spec))


def gather_reduce_scattered(w, used, stored, compute_dtype=None):
    """FSDP's gather: ``w`` laid out as ``used``, its gradient handed back laid out as ``stored``.

    ``used`` and ``stored`` are shardings (``used`` usually ``stored`` with ``fsdp`` removed,
    :func:`without_fsdp`). A plain ``jax.lax.with_sharding_constraint(w, used)`` would constrain the
    gradient to ``used`` too (the constraint's transpose), so the compiler may sum it whole on every
    device; this gather's own backward (a ``jax.custom_vjp``) constrains the gradient to ``stored``,
    which lets it reduce-scatter instead, as ZeRO-3 does. The gradient is summed across devices in
    ``w``'s dtype. ``compute_dtype`` (e.g. ``jnp.bfloat16``): ``w`` is cast to it inside the gather, before
    it is gathered, and its gradient comes back in ``w``'s dtype. Where the compiler sums the gradient is
    its choice: XLA:TPU sums the partial products where the weight-gradient product writes them, in
    that product's dtype, so a float32 sum also needs the product written in float32
    (``preferred_element_type``); the tests show both.
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import Sharding

    for name, sharding in (("used", used), ("stored", stored)):
        if not isinstance(sharding, Sharding):
            raise ValueError(f"gather_reduce_scattered: {name} must be a jax.sharding.Sharding, "
                             f"got {sharding!r}")
    if compute_dtype is not None:
        try:
            compute_dtype = jnp.dtype(compute_dtype)
        except TypeError:
            compute_dtype = None
        if compute_dtype is None or not jnp.issubdtype(compute_dtype, jnp.floating):
            raise ValueError("gather_reduce_scattered: compute_dtype must be a floating dtype or None")

    @jax.custom_vjp
    def gather(w):
        low = w if compute_dtype is None else w.astype(compute_dtype)
        return jax.lax.with_sharding_constraint(low, used)

    dtype = jnp.asarray(w).dtype if not hasattr(w, "dtype") else w.dtype

    def backward(_, grad):   # the cotangent, back in the weight's dtype before the sum
        return (jax.lax.with_sharding_constraint(grad.astype(dtype), stored),)

    gather.defvjp(lambda w: (gather(w), None), backward)
    return gather(w)


def _layer_norm(x, scale):
    import jax.numpy as jnp

    # statistics in float32 whatever the compute dtype (a no-op for float32)
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, axis=-1, keepdims=True)
    var = jnp.mean((x32 - mean) ** 2, axis=-1, keepdims=True)
    return ((x32 - mean) / jnp.sqrt(var + 1e-5)).astype(x.dtype) * scale


def _block(x, p, residual):
    import jax
    import jax.numpy as jnp

    seq = x.shape[1]
    causal = jnp.tril(jnp.ones((seq, seq), bool))
    h = _layer_norm(x, p["ln1"])
    q, k, v = (jnp.einsum("bsd,dhk->bshk", h, p[w]) for w in ("wq", "wk", "wv"))
    scores = jnp.einsum("bshk,bthk->bhst", q, k) / math.sqrt(q.shape[-1])
    weights = jax.nn.softmax(jnp.where(causal, scores, -1e9).astype(jnp.float32), axis=-1).astype(x.dtype)
    x = residual(x + jnp.einsum("bhst,bthk,hkd->bsd", weights, v, p["wo"]))
    h = _layer_norm(x, p["ln2"])
    return residual(x + jax.nn.gelu(h @ p["w_in"]) @ p["w_out"])


def forward(params, tokens, gather=None, residual=None, remat_policy=None):
    """Logits ``(batch, seq, vocab)`` of the decoder for ``tokens`` ``(batch, seq)``.

    ``gather(block)`` is applied to each block's weights just before they are used (FSDP: make them
    whole on ``fsdp``); ``residual(x)`` to the residual stream after each sub-layer (sequence
    parallelism: split it along the sequence). Both default to doing nothing. Blocks given as a list
    run one after the other in the program; stacked (a dict of ``(layers, ...)`` arrays) they run under
    ``jax.lax.scan``, one block's program looped ``layers`` times, and ``remat_policy`` (a
    ``jax.checkpoint_policies`` policy, or ``None`` for no rematerialisation) says what of each block
    the backward pass keeps rather than recomputes.
    """
    import jax

    gather = gather or (lambda p: p)
    residual = residual or (lambda x: x)
    outer = gather({k: v for k, v in params.items() if k != "blocks"})
    seq = tokens.shape[1]
    x = residual(outer["embed"][tokens] + outer["pos"][:seq])
    if isinstance(params["blocks"], dict):
        def one_block(x, block):
            return _block(x, gather(block), residual), None
        if remat_policy is not None:
            one_block = jax.checkpoint(one_block, policy=remat_policy)
        x, _ = jax.lax.scan(one_block, x, params["blocks"])
    else:
        for block in params["blocks"]:
            x = _block(x, gather(block), residual)
    return _layer_norm(x, outer["ln_f"]) @ outer["unembed"]


def loss_fn(params, tokens, gather=None, residual=None, remat_policy=None):
    """Mean cross-entropy of the second half of each sequence (the reversed first half), predicted
    token by token from everything before it. Computed in the parameters' dtype (pass them cast to
    bfloat16 for mixed precision); the layer norms' statistics and the softmax in float32."""
    import jax
    import jax.numpy as jnp

    logits = forward(params, tokens, gather, residual, remat_policy)
    half = tokens.shape[1] // 2
    # the positions whose next token is in the second half; the softmax in float32 whatever the compute dtype
    predicted = logits[:, half - 1:-1].astype(jnp.float32)
    targets = tokens[:, half:]
    log_probs = jax.nn.log_softmax(predicted, axis=-1)
    return -jnp.mean(jnp.take_along_axis(log_probs, targets[..., None], axis=-1))


def reversal_batch(rng, batch: int, config: TransformerConfig) -> np.ndarray:
    """``batch`` sequences ``[x, reversed(x)]`` of ``config.seq`` tokens, ``x`` drawn from ``1..vocab-1``."""
    _check_config(config)
    batch = positive_int("reversal_batch: batch", batch)
    first = rng.integers(1, config.vocab, size=(batch, config.seq // 2))
    return np.concatenate([first, first[:, ::-1]], axis=1).astype(np.int32)


def model_flops(config: TransformerConfig, batch: int) -> int:
    """Flops of one training step of the model (forward and backward, matrix products only).

    ``6 * tokens`` per weight of the blocks and the output projection (2 forward, 4 backward), plus
    attention's two products, ``6 * 2 * batch * seq**2 * d_model`` per block (causal masking not
    subtracted). The embedding lookups are not products and count nothing.
    """
    _check_config(config)
    batch = positive_int("model_flops: batch", batch)
    d, f, s = config.d_model, config.d_ff, config.seq
    weights = config.layers * (4 * d * d + 2 * d * f) + d * config.vocab
    attention = config.layers * 2 * batch * s * s * d
    return 6 * batch * s * weights + 6 * attention


def mesh_factorisations(n: int, axes: int = 3) -> list[tuple[int, ...]]:
    """Every way to write ``n`` devices as ``axes`` mesh sizes (ordered), e.g. ``(2, 2, 2)`` for 8."""
    n, axes = positive_int("mesh_factorisations: n", n), positive_int("mesh_factorisations: axes", axes)
    if axes == 1:
        return [(n,)]
    return [(a,) + rest for a in range(n, 0, -1) if n % a == 0 for rest in mesh_factorisations(n // a, axes - 1)]


def model_flops_utilisation(flops: float, chips: int, peak_flops: float, seconds: float) -> float:
    """``flops / (chips * peak_flops * seconds)``: the share of the chips' peak the model's own flops use."""
    for name, value in (("flops", flops), ("chips", chips), ("peak_flops", peak_flops), ("seconds", seconds)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)) or value <= 0:
            raise ValueError(f"model_flops_utilisation: {name} must be a positive number, got {value!r}")
    return float(flops) / (chips * peak_flops * seconds)
