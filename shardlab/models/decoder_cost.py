"""A decoder's training step on paper: its flops, its collectives under FSDP x TP x DP, its modelled time.

The runs people publish are decoders with gated MLPs, grouped-query attention, a head width of its own,
causal attention and a rematerialisation policy, laid out over a torus as FSDP on some axes and tensor
parallelism on others. :class:`DecoderShape` describes such a model; :func:`training_flops` counts a
step's flops as MaxText counts model flops (three times the forward matmuls, causal attention at half
the square) and adds what a remat policy recomputes; :func:`layout_traffic` gives the bytes each chip
sends per step (ring model) on each layout axis; :func:`training_step` puts them through
:func:`shardlab.modelled_time` with the HBM bytes the step cannot avoid, and returns the MFU bound.
:func:`fsdp_tp_critical_batch` and :func:`optimal_fsdp` are the scaling book's closed forms for the same
layout ("How to Parallelize a Transformer for Training"). Every figure is *modelled*.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from shardlab.arguments import positive_int
from shardlab.hardware.chips import named_chip
from shardlab.models.network import AxisNetwork, Traffic
from shardlab.models.time_model import modelled_time

__all__ = ["DecoderShape", "REMAT_POLICIES", "decoder_params", "training_flops", "layout_traffic", "torus_network",
           "training_step", "fsdp_tp_critical_batch", "optimal_fsdp"]


#: What each remat policy recomputes in the backward pass, by MaxText's names
#: (``src/maxtext/layers/decoders.py``, ``get_remat_policy``): ``none`` keeps every activation;
#: ``minimal`` keeps every projection's output and recomputes attention's two products; ``save_qkv_proj``
#: (and ``qkv_proj_offloaded``, which keeps the same on the host) keeps the q, k, v projections and
#: recomputes the rest of the block; ``full`` recomputes the whole forward pass of every block.
REMAT_POLICIES = ("none", "minimal", "save_qkv_proj", "full")


@dataclass(frozen=True)
class DecoderShape:
    """A decoder-only transformer: ``layers`` blocks of attention and MLP, a vocabulary, a sequence length.

    ``heads`` query heads of width ``head_dim`` (default ``d_model // heads``; MaxText's scaled models use
    128 whatever ``d_model``), ``kv_heads`` key/value heads (default ``heads``; fewer is grouped-query
    attention); an MLP of width ``mlp``, gated (three matrices, as SwiGLU) or not (two);
    ``tied_embedding``: the unembedding reuses the embedding's matrix. Norm scales are left out.
    """

    d_model: int
    layers: int
    heads: int
    mlp: int
    vocab: int
    seq: int
    kv_heads: int | None = None
    head_dim: int | None = None
    gated: bool = True
    tied_embedding: bool = False

    def __post_init__(self):
        for field in ("d_model", "layers", "heads", "mlp", "vocab", "seq"):
            positive_int(f"DecoderShape: {field}", getattr(self, field))
        for field in ("kv_heads", "head_dim"):
            if getattr(self, field) is not None:
                positive_int(f"DecoderShape: {field}", getattr(self, field))
        if self.heads % self.kv:
            raise ValueError(f"DecoderShape: heads must be a multiple of kv_heads, got {self.heads} and {self.kv}")
        for field in ("gated", "tied_embedding"):
            if not isinstance(getattr(self, field), bool):
                raise ValueError(f"DecoderShape: {field} must be True or False, got {getattr(self, field)!r}")

    @property
    def kv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads

    @property
    def width(self) -> int:
        """Each head's width: ``head_dim``, or ``d_model // heads``."""
        return self.d_model // self.heads if self.head_dim is None else self.head_dim


def _shape(name: str, shape) -> DecoderShape:
    if not isinstance(shape, DecoderShape):
        raise ValueError(f"{name}: shape must be a DecoderShape, got {shape!r}")
    return shape


def _block_parts(shape: DecoderShape) -> dict:
    """Parameters of one block, by matmul: q, k and v projections, output projection, MLP."""
    d, h, k, w = shape.d_model, shape.heads, shape.kv, shape.width
    return {"qkv": d * (h + 2 * k) * w, "out": h * w * d, "mlp": (3 if shape.gated else 2) * d * shape.mlp}


def decoder_params(shape: DecoderShape) -> int:
    """Parameters of ``shape``: its blocks' matrices, the embedding and (unless tied) the unembedding."""
    shape = _shape("decoder_params", shape)
    embeddings = (1 if shape.tied_embedding else 2) * shape.vocab * shape.d_model
    return shape.layers * sum(_block_parts(shape).values()) + embeddings


def training_flops(shape: DecoderShape, tokens: int, *, remat: str = "none", causal: bool = True) -> dict:
    """Flops of one training step on ``tokens`` tokens (sequences of ``shape.seq``): model flops and recomputed.

    ``model``: 3 x the forward's matmuls (``2 x`` each weight per token, the unembedding included, the
    embedding lookup not) plus 3 x attention's two products (``4 x seq x heads x head_dim`` per token per
    block, halved when ``causal``), MaxText's count (``calculate_tflops_training_per_device``).
    ``recompute``: the forward flops ``remat`` (one of ``REMAT_POLICIES``) repeats in the backward
    pass; ``total``: their sum; ``attention``: attention's part of ``model``; ``ceiling``: ``model / total``,
    the highest MFU the policy leaves a chip that computes at its peak.
    """
    shape = _shape("training_flops", shape)
    tokens = positive_int("training_flops: tokens", tokens)
    if remat not in REMAT_POLICIES:
        raise ValueError(f"training_flops: remat must be one of {REMAT_POLICIES}, got {remat!r}")
    if not isinstance(causal, bool):
        raise ValueError(f"training_flops: causal must be True or False, got {causal!r}")
    parts = {name: 2 * tokens * shape.layers * n for name, n in _block_parts(shape).items()}
    unembed = 2 * tokens * shape.vocab * shape.d_model
    attention = 4 * tokens * shape.seq * shape.heads * shape.width * shape.layers // (2 if causal else 1)
    forward = sum(parts.values()) + unembed + attention
    recompute = {"none": 0, "minimal": attention, "save_qkv_proj": parts["out"] + parts["mlp"] + attention,
                 "full": parts["qkv"] + parts["out"] + parts["mlp"] + attention}[remat]
    model = 3 * forward
    return {"model": model, "recompute": recompute, "total": model + recompute, "attention": 3 * attention,
            "ceiling": model / (model + recompute)}


#: Forward blocks (attention, MLP) whose tensor-parallel collectives a remat policy runs again.
_TP_REPEATS = {"none": 0, "minimal": 0, "save_qkv_proj": 1.5, "full": 2}


def _layout(name: str, fsdp, tp, data) -> tuple[int, int, int]:
    return tuple(positive_int(f"{name}: {k}", v) for k, v in (("fsdp", fsdp), ("tp", tp), ("data", data)))


def layout_traffic(shape: DecoderShape, tokens_per_chip: int, *, fsdp: int = 1, tp: int = 1, data: int = 1,
                   remat: str = "none", param_bytes: int = 2, grad_bytes: int = 2,
                   act_bytes: int = 2) -> list[Traffic]:
    """Bytes each chip sends in one training step (ring model), as :class:`~shardlab.Traffic` per layout axis.

    Axes ``"fsdp"``, ``"tp"``, ``"data"`` (an axis of size 1 sends nothing and is left out); ``tp``
    shards each matrix, ``fsdp`` shards what ``tp`` left, ``data`` replicates. Per step:

    * FSDP (``X = fsdp``): each block's weight shard gathered twice (forward, backward: ZeRO-3 gathers
      again) and its gradient reduce-scattered, ``(P / tp) * bytes * (X - 1) / X`` each, one collective
      per block each;
    * TP (``Y = tp``): per block forward, an all-gather and a reduce-scatter of the activations of the
      group's ``tokens_per_chip * tp`` tokens in attention and again in the MLP,
      ``tokens * d_model * act_bytes * (Y - 1) / Y`` each; the backward pass the same; ``remat`` repeats
      those of the forward it recomputes (all four for ``full``, three for ``save_qkv_proj``);
    * DP (``D = data``): one all-reduce of the gradient shard, ``2 * (P / (tp * fsdp)) * grad_bytes *
      (D - 1) / D``.
    """
    shape = _shape("layout_traffic", shape)
    tokens_per_chip = positive_int("layout_traffic: tokens_per_chip", tokens_per_chip)
    fsdp, tp, data = _layout("layout_traffic", fsdp, tp, data)
    for name, value in (("param_bytes", param_bytes), ("grad_bytes", grad_bytes), ("act_bytes", act_bytes)):
        positive_int(f"layout_traffic: {name}", value)
    if remat not in REMAT_POLICIES:
        raise ValueError(f"layout_traffic: remat must be one of {REMAT_POLICIES}, got {remat!r}")
    params, layers = decoder_params(shape), shape.layers
    out = []
    if fsdp > 1:
        shard = params / tp * (fsdp - 1) / fsdp
        out += [Traffic(2 * shard * param_bytes, "fsdp", 2 * layers, "all-gather"),
                Traffic(shard * grad_bytes, "fsdp", layers, "reduce-scatter")]
    if tp > 1:
        per = tokens_per_chip * tp * shape.d_model * act_bytes * (tp - 1) / tp
        passes = 2 + _TP_REPEATS[remat] / 2       # forward, backward, and what remat repeats
        out += [Traffic(2 * passes * per * layers, "tp", int(2 * passes * layers), "all-gather"),
                Traffic(2 * passes * per * layers, "tp", int(2 * passes * layers), "reduce-scatter")]
    if data > 1:
        out.append(Traffic(2 * params / (tp * fsdp) * grad_bytes * (data - 1) / data, "data", 1, "all-reduce"))
    return out


def torus_network(spans: dict) -> dict:
    """``{axis: AxisNetwork}`` for layout axes laid along whole torus dimensions with wraparound links.

    ``spans``: ``{axis: (size of each torus dimension it spans, ...)}``, e.g. ``{"fsdp": (16, 16)}`` on a
    v5e pod. Each dimension gives two links (a ring both ways) and ``size // 2`` hops; an axis of one
    chip gets no links.
    """
    if not isinstance(spans, dict):
        raise ValueError(f"torus_network: spans must be a dict {{axis: (sizes, ...)}}, got {spans!r}")
    out = {}
    for axis, sizes in spans.items():
        if not isinstance(sizes, tuple) or not sizes:
            raise ValueError(f"torus_network: spans[{axis!r}] must be a non-empty tuple of sizes, got {sizes!r}")
        sizes = [positive_int(f"torus_network: spans[{axis!r}]", s) for s in sizes]
        long = [s for s in sizes if s > 1]
        out[axis] = AxisNetwork(2 * len(long), sum(s // 2 for s in long))
    return out


def _hbm_bytes(shape: DecoderShape, flops: dict, fsdp: int, tp: int) -> float:
    """HBM bytes a chip cannot avoid: each matmul pass reads the gathered bf16 weights, the update its state.

    Forward, the two backward products and the recomputed share of the forward read ``P / tp`` weights;
    the Adam update reads the float32 parameter, gradient and two moments and writes three of them
    (28 bytes per parameter of its ``P / (tp * fsdp)``). Activations are left out: a lower bound.
    """
    params = decoder_params(shape)
    forward = flops["model"] / 3
    passes = 3 + flops["recompute"] / forward
    return passes * params / tp * 2 + 28 * params / (tp * fsdp)


def training_step(shape: DecoderShape, tokens_per_chip: int, chip, network: dict, *, fsdp: int = 1, tp: int = 1,
                  data: int = 1, remat: str = "none", causal: bool = True, axes_at_once: bool = True) -> dict:
    """Modelled training step of ``shape`` on ``fsdp * tp * data`` chips: time and MFU bound.

    ``network``: ``{axis: AxisNetwork}`` for the layout axes of size above 1 (:func:`torus_network`);
    the step's flops (:func:`training_flops`, recomputation included), its traffic (:func:`layout_traffic`)
    and its unavoidable HBM bytes go through :func:`shardlab.modelled_time`. Returns that result with
    ``"flops"`` (per chip, :func:`training_flops`' dict) and ``"mfu"``: model flops / (peak x time) for the
    ``overlapped`` and ``serial`` steps, the bounds a measurement can be set against.
    """
    shape = _shape("training_step", shape)
    fsdp, tp, data = _layout("training_step", fsdp, tp, data)
    chip = named_chip(chip)
    chips = fsdp * tp * data
    flops = training_flops(shape, positive_int("training_step: tokens_per_chip", tokens_per_chip) * chips,
                           remat=remat, causal=causal)
    per_chip = {k: (v / chips if k not in ("ceiling",) else v) for k, v in flops.items()}
    traffic = layout_traffic(shape, tokens_per_chip, fsdp=fsdp, tp=tp, data=data, remat=remat)
    t = modelled_time(per_chip["total"], traffic, chip, network, axes_at_once=axes_at_once,
                      hbm_bytes=_hbm_bytes(shape, flops, fsdp, tp))
    t["flops"] = per_chip
    t["mfu"] = {k: per_chip["model"] / (chip.peak_flops * t[k]) for k in ("overlapped", "serial")}
    return t


def fsdp_tp_critical_batch(chip, mlp: int, *, fsdp_axes: int, tp_axes: int, links_per_axis: int = 2) -> float:
    """Tokens per chip below which FSDP x TP is communication-bound, at the best split: ``4 a^2 / (M_X M_Y F)``.

    The scaling book's result for the forward pass of an MLP ("How to Parallelize a Transformer for
    Training", mixed FSDP and tensor parallelism): ``a = peak / W``, ``W`` one torus axis's bandwidth
    (``links_per_axis`` links, 2 for a ring with wraparound), ``M_X`` and ``M_Y`` the torus axes given to
    FSDP and to TP, ``F`` the MLP width. 453 tokens for LLaMA-3-70B (``F`` = 28,672) on v5p with
    ``M_X M_Y = 2``.
    """
    chip = named_chip(chip)
    mlp = positive_int("fsdp_tp_critical_batch: mlp", mlp)
    fsdp_axes = positive_int("fsdp_tp_critical_batch: fsdp_axes", fsdp_axes)
    tp_axes = positive_int("fsdp_tp_critical_batch: tp_axes", tp_axes)
    links_per_axis = positive_int("fsdp_tp_critical_batch: links_per_axis", links_per_axis)
    alpha = chip.peak_flops / (links_per_axis * chip.link_bandwidth)
    return 4 * alpha ** 2 / (fsdp_axes * tp_axes * mlp)


def optimal_fsdp(tokens: int, mlp: int, chips: int, *, fsdp_axes: int, tp_axes: int) -> float:
    """FSDP's share of ``chips`` that minimises FSDP x TP's communication: ``sqrt(B / F * M_X / M_Y * N)``.

    The scaling book's ``X_opt`` (same section as :func:`fsdp_tp_critical_batch`); ``tokens`` is the
    global batch ``B``. A real number: round it to a divisor of ``chips``.
    """
    tokens = positive_int("optimal_fsdp: tokens", tokens)
    mlp = positive_int("optimal_fsdp: mlp", mlp)
    chips = positive_int("optimal_fsdp: chips", chips)
    fsdp_axes = positive_int("optimal_fsdp: fsdp_axes", fsdp_axes)
    tp_axes = positive_int("optimal_fsdp: tp_axes", tp_axes)
    return math.sqrt(tokens / mlp * fsdp_axes / tp_axes * chips)
