"""How much one training step communicates and stores under the classic layouts, from formulas.

The model is the residual MLP of the training chapter: ``layers`` blocks
``x = x + relu(x @ W1) @ W2`` with ``W1: (d_model, d_hidden)`` and
``W2: (d_hidden, d_model)``, a mean-squared-error loss and a plain SGD update.
For each strategy :func:`mlp_transfers` lists every collective one step needs
(kind, buffer, group, forward or backward pass) and :func:`mlp_bytes` adds up
what one device sends under the ring model (the ring formulas of
:mod:`shardlab.cost_model`). The chapter applies the same model to the
collectives read from compiled code: equal totals say that the compiler
emitted the collectives expected here. :func:`mlp_flops` counts the matrix
products of one step and :func:`mlp_memory` what one device holds.

Strategies (``data`` and ``model`` are mesh axis sizes):

* ``"dp"``: batch split over ``data``, weights replicated; gradients all-reduced.
* ``"fsdp"``: batch and weights split over ``data``; weights all-gathered
  before use, gradients reduce-scattered back to their shards.
* ``"tp"``: Megatron-style, ``W1`` split by columns and ``W2`` by rows over
  ``model``; each block's output all-reduced in the forward pass and the
  gradient of its input all-reduced in the backward pass.
* ``"dp+tp"``: both at once on a ``data x model`` mesh.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardlab.cost_model import bytes_all_gather, bytes_all_reduce, bytes_reduce_scatter

__all__ = [
    "STRATEGIES",
    "MLPSizes",
    "Transfer",
    "mlp_transfers",
    "mlp_bytes",
    "mlp_memory",
    "mlp_flops",
    "phase_of",
]

#: The strategy names :func:`mlp_transfers` and :func:`mlp_memory` understand.
STRATEGIES = ("dp", "fsdp", "tp", "dp+tp")

#: How a gradient reduce-scatter can appear in compiled code.
GRADIENT_REDUCTIONS = ("reduce-scatter", "all-reduce")

_LOSS_BYTES = 4  # the float32 scalar loss


def _positive_int(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class MLPSizes:
    """Sizes of the residual MLP and of one step's batch (``itemsize``: bytes per element)."""

    batch: int
    d_model: int
    d_hidden: int
    layers: int
    itemsize: int = 4

    def __post_init__(self):
        for name in ("batch", "d_model", "d_hidden", "layers", "itemsize"):
            _positive_int(name, getattr(self, name))

    @property
    def weight_bytes(self) -> int:
        """Bytes of one weight matrix (``W1`` and ``W2`` have the same size)."""
        return self.d_model * self.d_hidden * self.itemsize

    @property
    def param_bytes(self) -> int:
        """The bytes of all parameters, ``layers * 2 * d_model * d_hidden * itemsize``."""
        return 2 * self.layers * self.weight_bytes

    def activation_bytes(self, batch: int | None = None) -> int:
        """Bytes of one block's output ``(batch, d_model)`` (the whole batch unless ``batch`` is given)."""
        batch = self.batch if batch is None else _positive_int("batch", batch)
        return batch * self.d_model * self.itemsize


@dataclass(frozen=True)
class Transfer:
    """One collective of the analytic model.

    ``nbytes`` is the buffer the ring formula is applied to: the operand of an
    all-reduce or reduce-scatter, the (gathered) result of an all-gather.
    """

    kind: str
    what: str
    nbytes: int
    group_size: int
    phase: str

    @property
    def bytes_per_device(self):
        """What one device sends, by the ring formula of its ``kind``."""
        formula = {"all-reduce": bytes_all_reduce, "all-gather": bytes_all_gather,
                   "reduce-scatter": bytes_reduce_scatter}[self.kind]
        return formula(self.nbytes, self.group_size)


def _check_strategy(strategy: str, data: int, model: int) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {', '.join(STRATEGIES)}; got {strategy!r}")
    _positive_int("data", data)
    _positive_int("model", model)
    if strategy in ("dp", "fsdp") and model != 1:
        raise ValueError(f"model must be 1 for strategy {strategy!r} (it uses only the data axis), got {model}")
    if strategy == "tp" and data != 1:
        raise ValueError(f"data must be 1 for strategy 'tp' (it uses only the model axis), got {data}")


def _check_sizes(sizes: MLPSizes, data: int, model: int) -> None:
    if not isinstance(sizes, MLPSizes):
        raise ValueError(f"sizes must be an MLPSizes, got {type(sizes).__name__}")
    if sizes.batch % data:
        raise ValueError(f"sizes.batch ({sizes.batch}) must be divisible by data ({data})")
    if sizes.d_hidden % model:
        raise ValueError(f"sizes.d_hidden ({sizes.d_hidden}) must be divisible by model ({model})")


def mlp_transfers(strategy: str, sizes: MLPSizes, *, data: int = 1, model: int = 1,
                  gradient_reduction: str = "reduce-scatter", regather: bool = False) -> list[Transfer]:
    """Every collective one training step needs under ``strategy``, with the bytes it moves.

    ``data``/``model``: how many devices split the batch / the weights' hidden
    dimension. ``gradient_reduction`` (FSDP only): ``"reduce-scatter"`` (the
    minimum) or ``"all-reduce"`` (a compiler that reduces the whole gradient
    and lets each device slice its shard, as XLA's CPU backend does).
    ``regather`` (FSDP only): gather the weights again in the backward pass
    instead of keeping them from the forward pass (what rematerialisation does).

    Collectives over a group of one device move nothing and are left out.
    """
    _check_strategy(strategy, data, model)
    _check_sizes(sizes, data, model)
    if gradient_reduction not in GRADIENT_REDUCTIONS:
        raise ValueError(f"gradient_reduction must be one of {', '.join(GRADIENT_REDUCTIONS)}; "
                         f"got {gradient_reduction!r}")
    if not isinstance(regather, bool):
        raise ValueError(f"regather must be True or False, got {regather!r}")

    out: list[Transfer] = []
    weights = [f"{name} of block {i}" for i in range(sizes.layers) for name in ("W1", "W2")]

    if strategy == "fsdp" and data > 1:
        # Each weight is gathered whole before its block runs (and again in backward if not kept).
        for phase in ("forward", "backward") if regather else ("forward",):
            out += [Transfer("all-gather", w, sizes.weight_bytes, data, phase) for w in weights]

    if model > 1:
        # Megatron: each block's output is a sum of partial products over the hidden shards (forward);
        # the gradient of each block's input likewise (backward), except the first block's, whose
        # input is the data, which needs no gradient.
        act = sizes.activation_bytes(sizes.batch // data)
        out += [Transfer("all-reduce", f"output of block {i}", act, model, "forward")
                for i in range(sizes.layers)]
        out += [Transfer("all-reduce", f"gradient of the input of block {i}", act, model, "backward")
                for i in range(sizes.layers - 1, 0, -1)]

    if data > 1:
        # The loss is a mean over the whole batch: one scalar summed over the data axis.
        out.append(Transfer("all-reduce", "loss", _LOSS_BYTES, data, "forward"))
        # Each device's gradient covers only its part of the batch: sum over the data axis.
        grad_bytes = sizes.param_bytes // model
        if strategy == "fsdp" and gradient_reduction == "reduce-scatter":
            out += [Transfer("reduce-scatter", f"gradient of {w}", sizes.weight_bytes, data, "backward")
                    for w in weights]
        elif strategy == "fsdp":
            out += [Transfer("all-reduce", f"gradient of {w} (then sliced)", sizes.weight_bytes, data,
                             "backward") for w in weights]
        else:
            out.append(Transfer("all-reduce", "gradients", grad_bytes, data, "backward"))
    return out


def mlp_bytes(strategy: str, sizes: MLPSizes, **options):
    """Bytes one device sends in one training step: the sum over :func:`mlp_transfers` (same options)."""
    total = 0
    for t in mlp_transfers(strategy, sizes, **options):
        total += t.bytes_per_device
    return total


def mlp_memory(strategy: str, sizes: MLPSizes, *, data: int = 1, model: int = 1, optimizer_states: int = 0,
               regather: bool = False) -> dict:
    """Bytes one device holds for one step, modelled from the sizes.

    Keys: ``params``, ``grads``, ``optimizer`` (``optimizer_states`` arrays per
    parameter: 0 for SGD, 1 for momentum, 2 for Adam, laid out like the
    parameters), ``activations`` (kept from the forward pass for the backward
    one: each block's input ``(rows, d_model)`` and hidden activation ``(rows,
    d_hidden / model)``, ``rows = batch / data``) and ``gathered`` (FSDP only:
    the whole weights a device holds while it computes, all of them if kept
    from forward to backward). ``regather=True`` models FSDP with each block
    rematerialised (``jax.checkpoint``): the weights are gathered one block at
    a time, and only each block's input is kept for the backward pass.
    """
    _check_strategy(strategy, data, model)
    _check_sizes(sizes, data, model)
    if isinstance(optimizer_states, bool) or not isinstance(optimizer_states, int) or optimizer_states < 0:
        raise ValueError(f"optimizer_states must be a non-negative integer, got {optimizer_states!r}")
    if not isinstance(regather, bool):
        raise ValueError(f"regather must be True or False, got {regather!r}")
    if regather and strategy != "fsdp":
        raise ValueError(f"regather applies to strategy 'fsdp' only, got {strategy!r}")
    shards = {"dp": 1, "fsdp": data, "tp": model, "dp+tp": model}[strategy]
    params = sizes.param_bytes // shards
    gathered = 0
    if strategy == "fsdp" and data > 1:
        gathered = sizes.param_bytes // sizes.layers if regather else sizes.param_bytes
    rows = sizes.batch // data
    kept_width = sizes.d_model if regather else sizes.d_model + sizes.d_hidden // model
    activations = sizes.layers * rows * kept_width * sizes.itemsize
    return {"params": params, "grads": params, "optimizer": optimizer_states * params,
            "activations": activations, "gathered": gathered}


def mlp_flops(sizes: MLPSizes, *, data: int = 1, model: int = 1) -> int:
    """Floating-point operations of one step's matrix products on one device (2 per multiply-add).

    Forward: two products of ``2 * batch * d_model * d_hidden`` per block. Backward:
    twice that (the gradients of the weights and of the block's input), less
    the first block's input gradient, which nothing needs. The work divides
    evenly over the ``data * model`` devices; element-wise work and the update
    are left out.
    """
    _positive_int("data", data)
    _positive_int("model", model)
    _check_sizes(sizes, data, model)
    per_product = 2 * sizes.batch * sizes.d_model * sizes.d_hidden
    total = (6 * sizes.layers - 1) * per_product
    return total // (data * model)


_OP_NAME_RE = re.compile(r'op_name="([^"]*)"')


def _top_level_parts(name: str) -> list[str]:
    # A combined instruction is named "prefix/(a:b:c)": split at ':' outside inner brackets.
    start = name.find("/(")
    if start < 0 or not name.endswith(")"):
        return [name]
    inner, parts, depth, begin = name[start + 2:-1], [], 0, 0
    for i, ch in enumerate(inner):
        depth += ch == "("
        depth -= ch == ")"
        if ch == ":" and depth == 0:
            parts.append(inner[begin:i])
            begin = i + 1
    parts.append(inner[begin:])
    return parts


def phase_of(collective, report) -> str:
    """``"forward"``, ``"backward"`` or ``"forward+backward"``: which pass of autodiff a collective serves.

    Read from the ``op_name`` metadata JAX writes into the compiled module:
    the backward pass is the transpose of the forward one, so its operations are
    named ``transpose(jvp(...))``. A collective that XLA combined from several
    gets every phase of its parts. ``report`` is the
    :class:`~shardlab.compiled.CollectiveReport` the collective came from.
    """
    name = getattr(collective, "name", None)
    text = getattr(report, "hlo_text", None)
    if not isinstance(name, str):
        raise ValueError(f"collective must be a shardlab Collective, got {type(collective).__name__}")
    if not isinstance(text, str):
        raise ValueError(f"report must be a CollectiveReport, got {type(report).__name__}")
    line = re.search(rf"^\s*(?:ROOT\s+)?%?{re.escape(name)}\s*=.*$", text, re.M)
    op = _OP_NAME_RE.search(line.group(0)) if line else None
    if op is None:
        raise ValueError(f"report has no op_name metadata for {name!r}")
    phases = {"backward" if "transpose(" in part else "forward" for part in _top_level_parts(op.group(1))}
    return "+".join(p for p in ("forward", "backward") if p in phases)
