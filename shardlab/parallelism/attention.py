"""Ring attention, modelled: which key/value block each device holds at each step, how much of it
causality masks, and what one device holds in memory and sends per step.

Nothing here runs JAX: these are the book's models (counts and formulas) of the ring attention the
chapter on sequence parallelism writes with ``jax.lax.ppermute``. The sequence of ``seq_len`` tokens
is split over a ring of ``ring`` devices; device ``d`` keeps its queries and, at step ``s``, holds
the key/value block that started on device ``(d - s) mod ring``.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from shardlab.arguments import positive_int as _positive_int
from shardlab.hardware.chips import Chip, named_chip
from shardlab.models.time_model import step_time

#: How the tokens of a sequence are dealt to the devices of the ring.
ORDERS = ("contiguous", "zigzag", "striped")


def kv_block_at(device: int, step: int, ring: int) -> int:
    """The key/value block device ``device`` holds at ring step ``step`` (blocks travel to ``d + 1``)."""
    ring = _positive_int("ring", ring)
    for name, value in (("device", device), ("step", step)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 0 <= value < ring:
            raise ValueError(f"{name} must be an integer from 0 to ring - 1 = {ring - 1}, got {value!r}")
    return (int(device) - int(step)) % ring


def token_positions(ring: int, tokens: int, order: str = "contiguous") -> np.ndarray:
    """Positions in the sequence of each device's tokens, shape ``(ring, tokens)``.

    ``"contiguous"``: device ``d`` holds tokens ``d * tokens`` to ``(d + 1) * tokens - 1``.
    ``"zigzag"``: the sequence is cut into ``2 * ring`` chunks and device ``d`` holds chunks ``d`` and
    ``2 * ring - 1 - d`` (``tokens`` must be even), so every device has early and late tokens.
    ``"striped"``: token ``t`` goes to device ``t mod ring`` (striped attention), so device ``d`` holds
    ``d, d + ring, d + 2 ring, ...``.
    """
    ring, tokens = _positive_int("ring", ring), _positive_int("tokens", tokens)
    if order == "contiguous":
        return np.arange(ring * tokens).reshape(ring, tokens)
    if order == "zigzag":
        if tokens % 2:
            raise ValueError(f"tokens must be even for the zigzag order (two chunks per device), got {tokens}")
        half = tokens // 2
        chunks = np.arange(2 * ring * half).reshape(2 * ring, half)
        return np.stack([np.concatenate([chunks[d], chunks[2 * ring - 1 - d]]) for d in range(ring)])
    if order == "striped":
        return np.arange(ring * tokens).reshape(tokens, ring).T.copy()
    raise ValueError(f"order must be one of {ORDERS}, got {order!r}")


def causal_work(ring: int, tokens: int, order: str = "contiguous") -> np.ndarray:
    """Fraction of the query-key pairs each device scores at each ring step that causality keeps.

    Shape ``(ring steps, ring devices)``: entry ``[s, d]`` is the share of device ``d``'s queries times
    the keys of the block it holds at step ``s`` (:func:`kv_block_at`) with key position <= query
    position. 0 means the whole block is masked: work a plain ring does for nothing. A count, not a
    measurement.
    """
    pos = token_positions(ring, tokens, order)
    work = np.zeros((ring, ring))
    for s in range(ring):
        for d in range(ring):
            q, k = pos[d], pos[kv_block_at(d, s, ring)]
            work[s, d] = np.mean(q[:, None] >= k[None, :])
    return work


def block_kinds(ring: int) -> np.ndarray:
    """For the contiguous order, what causality does to the block device ``d`` meets at step ``s``.

    Shape ``(ring steps, ring devices)`` of strings: ``"diagonal"`` (own block, partly masked),
    ``"visible"`` (an earlier block, nothing masked) or ``"masked"`` (a later block, all masked).
    """
    ring = _positive_int("ring", ring)
    kinds = np.empty((ring, ring), dtype=object)
    for s in range(ring):
        for d in range(ring):
            j = kv_block_at(d, s, ring)
            kinds[s, d] = "diagonal" if j == d else ("visible" if j < d else "masked")
    return kinds


def _sizes(seq_len, ring, heads, head_dim, dtype_bytes):
    seq_len, ring = _positive_int("seq_len", seq_len), _positive_int("ring", ring)
    heads, head_dim = _positive_int("heads", heads), _positive_int("head_dim", head_dim)
    dtype_bytes = _positive_int("dtype_bytes", dtype_bytes)
    if seq_len % ring:
        raise ValueError(f"seq_len must be a multiple of ring (each device holds seq_len / ring tokens), "
                         f"got seq_len={seq_len}, ring={ring}")
    return seq_len // ring, heads, head_dim, dtype_bytes


def ring_attention_memory(seq_len: int, ring: int, *, heads: int, head_dim: int, dtype_bytes: int = 2,
                          key_tile: int | None = None, query_tile: int | None = None,
                          score_blocks: int = 1) -> dict:
    """Modelled bytes one device holds for one attention layer of ring attention, forward pass only.

    Counted, with ``c = seq_len / ring`` tokens per device and ``e = heads * head_dim``:
    ``"q, k, v, out"``: its own blocks, ``4 c e`` elements of ``dtype_bytes``; ``"k, v arriving"``: the
    next key/value block received while this one is used, ``2 c e``; ``"scores"``: one block of scores
    in float32 (the probabilities computed in place), ``heads * r * t`` with ``r = c`` queries and
    ``t = c`` keys (the whole block, as a plain implementation computes it), ``t = key_tile`` (a kernel
    that walks the block in tiles of keys) and ``r = query_tile`` (one that also takes the queries a tile
    at a time, as flash-attention kernels do); ``"softmax state"``: running max, sum and output
    accumulator in float32, ``c * heads * (2 + head_dim)``. Weights, other layers and what the backward
    pass keeps are not counted, except through ``score_blocks``: how many such blocks of scores are alive
    at once (1 forward; a training step whose ring steps are checkpointed holds a few more, which a
    compiled program's peak tells). ``ring=1`` is attention on one device. Returns the components and
    their ``"total"``, in bytes.
    """
    c, heads, head_dim, nbytes = _sizes(seq_len, ring, heads, head_dim, dtype_bytes)
    tile = c if key_tile is None else min(_positive_int("key_tile", key_tile), c)
    rows = c if query_tile is None else min(_positive_int("query_tile", query_tile), c)
    blocks = _positive_int("score_blocks", score_blocks)
    e = heads * head_dim
    parts = {"q, k, v, out": 4 * c * e * nbytes,
             "k, v arriving": 2 * c * e * nbytes if ring > 1 else 0,
             "scores": blocks * heads * rows * tile * 4,
             "softmax state": c * heads * (2 + head_dim) * 4}
    parts["total"] = sum(parts.values())
    return parts


def ring_attention_comm(seq_len: int, ring: int, *, heads: int, head_dim: int, dtype_bytes: int = 2,
                        chip: Chip | str = "TPU v5e", links: int = 1, kv_heads: int | None = None) -> dict:
    """Modelled sending and computing of one ring step on one device, and of the whole ring.

    A step sends one key and one value block to the next device, ``2 c e dtype_bytes`` bytes
    (``c = seq_len / ring``, ``e = heads * head_dim``), and scores the held block:
    ``4 c^2 e`` flops (``q k^T`` and ``p v``, causality ignored). The ring has ``ring - 1`` sends and
    ``ring`` steps of compute. ``"time"`` is :func:`shardlab.step_time` of one step on ``chip``;
    ``"tokens_to_hide"`` is the number of tokens per device above which, by this model, a step's
    compute takes at least as long as its send. ``kv_heads`` (grouped-query attention; default ``heads``)
    divides the bytes sent by ``heads / kv_heads``, and the crossing with them.
    """
    c, heads, head_dim, nbytes = _sizes(seq_len, ring, heads, head_dim, dtype_bytes)
    kv = heads if kv_heads is None else _positive_int("kv_heads", kv_heads)
    if heads % kv:
        raise ValueError(f"kv_heads must divide heads ({heads}), got {kv}")
    chip = named_chip(chip)
    e = heads * head_dim
    sent = 2 * c * kv * head_dim * nbytes
    flops = 4 * c * c * e
    return {"tokens_per_device": c, "bytes_per_step": sent, "sends": ring - 1,
            "bytes_total": sent * (ring - 1), "flops_per_step": flops,
            "time": step_time(flops, sent, chip, links=links),
            "tokens_to_hide": float(Fraction(nbytes * kv, heads) * Fraction(chip.peak_flops)
                                    / (2 * links * Fraction(chip.link_bandwidth)))}


def longest_sequence(ring: int, hbm_bytes: float, *, heads: int, head_dim: int, dtype_bytes: int = 2,
                     key_tile: int | None = None, query_tile: int | None = None,
                     multiple: int = 1024, score_blocks: int = 1) -> int:
    """The longest sequence, a multiple of ``multiple * ring`` tokens, whose modelled memory
    (:func:`ring_attention_memory`, ``"total"``, with ``score_blocks`` blocks of scores alive: 1 is the
    forward pass) fits in ``hbm_bytes`` on each device; 0 if none does."""
    ring, multiple = _positive_int("ring", ring), _positive_int("multiple", multiple)
    if isinstance(hbm_bytes, bool) or not isinstance(hbm_bytes, (int, float, np.integer, np.floating)) \
            or not hbm_bytes > 0:
        raise ValueError(f"hbm_bytes must be a positive number, got {hbm_bytes!r}")
    unit = multiple * ring

    def fits(k):
        return ring_attention_memory(k * unit, ring, heads=heads, head_dim=head_dim, dtype_bytes=dtype_bytes,
                                     key_tile=key_tile, query_tile=query_tile,
                                     score_blocks=score_blocks)["total"] <= hbm_bytes

    if not fits(1):
        return 0
    high = 2
    while fits(high):
        high *= 2
    low = high // 2                      # fits(low) and not fits(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if fits(mid) else (low, mid)
    return low * unit
