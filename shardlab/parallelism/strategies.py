"""How much one training step communicates and stores under the classic layouts, from formulas.

The model is the residual MLP of the training chapter: ``layers`` blocks
``x = x + relu(x @ W1) @ W2`` with ``W1: (d_model, d_hidden)`` and
``W2: (d_hidden, d_model)``, a mean-squared-error loss and a plain SGD update.
For each strategy :func:`mlp_transfers` lists every collective one step needs
(kind, buffer, group, forward or backward pass) and :func:`mlp_bytes` adds up
what one device sends under the ring model (the ring formulas of
:mod:`shardlab.layout.ring_bytes`). The chapter applies the same model to the
collectives read from compiled code: equal totals say that the compiler
emitted the collectives expected here. ``mlp_flops`` counts the matrix
products of one step and :func:`mlp_memory` what one device holds.

From bytes and flops to time: :func:`step_times` turns each pass's flops and
collectives into modelled times with the book's one time model
(:func:`shardlab.modelled_time`: links and hops per mesh axis from the topology,
a latency per collective, published chip figures), assuming a pass's
communication can hide only behind that pass's arithmetic;
:func:`compute_bound_from` solves for the batch (or hidden width) from which
every pass is compute-bound.

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

import math
from dataclasses import dataclass
from functools import lru_cache

from shardlab.arguments import positive_int as _positive_int
from shardlab.layout.ring_bytes import bytes_all_gather, bytes_all_reduce, bytes_reduce_scatter
from shardlab.models.network import AxisNetwork, Traffic
from shardlab.models.time_model import modelled_passes
from shardlab.programs.hlo import parse_module

__all__ = [
    "STRATEGIES",
    "MLPSizes",
    "Transfer",
    "mlp_transfers",
    "mlp_bytes",
    "mlp_memory",
    "mlp_flops",
    "mlp_pass_flops",
    "step_times",
    "compute_bound_from",
    "phase_of",
]

#: The two passes of a training step, in the order they run.
PASSES = ("forward", "backward")

#: The strategy names :func:`~shardlab.mlp_transfers` and :func:`~shardlab.mlp_memory` understand.
STRATEGIES = ("dp", "fsdp", "tp", "dp+tp")

#: How a gradient reduce-scatter can appear in compiled code.
GRADIENT_REDUCTIONS = ("reduce-scatter", "all-reduce")

_LOSS_BYTES = 4  # the float32 scalar loss


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
    ``axis`` is the mesh axis it runs over, ``"data"`` or ``"model"``.
    """

    kind: str
    what: str
    nbytes: int
    group_size: int
    phase: str
    axis: str = "data"

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
        out += [Transfer("all-reduce", f"output of block {i}", act, model, "forward", "model")
                for i in range(sizes.layers)]
        out += [Transfer("all-reduce", f"gradient of the input of block {i}", act, model, "backward", "model")
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


def mlp_pass_flops(sizes: MLPSizes, *, data: int = 1, model: int = 1) -> dict:
    """``mlp_flops`` split by pass: ``{"forward": ..., "backward": ...}`` on one device.

    Forward: ``4 * layers * batch * d_model * d_hidden``; backward: twice that, less the
    first block's input gradient (``2 * batch * d_model * d_hidden``). Their sum is
    ``mlp_flops``.
    """
    total = mlp_flops(sizes, data=data, model=model)
    forward = 2 * sizes.layers * 2 * sizes.batch * sizes.d_model * sizes.d_hidden // (data * model)
    return {"forward": forward, "backward": total - forward}


def _links(name: str, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be a positive integer number of links, got {value!r}")
    return value


def _network(network, data: int, model: int, data_links, model_links) -> tuple[dict, float | None]:
    """The network of the two axes and the hop latency to use (None: the time model's own)."""
    if network is not None:
        if data_links is not None or model_links is not None:
            raise ValueError("network: give either network or data_links/model_links, not both")
        if not isinstance(network, dict) or not all(isinstance(v, AxisNetwork) for v in network.values()):
            raise ValueError(f"network must be a dict {{'data': AxisNetwork, 'model': AxisNetwork}} "
                             f"(shardlab.mesh_network), got {network!r}")
        for axis, size in (("data", data), ("model", model)):
            if size > 1 and axis not in network:
                raise ValueError(f"network has no entry for the {axis!r} axis (of size {size})")
        return network, None
    # Links given by hand (the older form): bandwidth only, no latency.
    links = {"data": _links("data_links", 2 if data_links is None else data_links),
             "model": _links("model_links", 2 if model_links is None else model_links)}
    return {axis: AxisNetwork(n, 1) for axis, n in links.items()}, 0.0


def step_times(strategy: str, sizes: MLPSizes, chip, *, data: int = 1, model: int = 1, network: dict | None = None,
               data_links: int | None = None, model_links: int | None = None, **options) -> dict:
    """Modelled time of one training step on one chip, pass by pass: compute, communication, bound.

    :func:`shardlab.modelled_passes` (the book's one time model, which states its assumptions) of the
    two passes: each pass's flops (:func:`mlp_pass_flops`) and its collectives
    (:func:`mlp_transfers`, same ``options``) on the ``"data"`` and ``"model"`` axes. ``network``:
    ``{"data": AxisNetwork, "model": AxisNetwork}``, the links and hops of each axis derived from the
    topology (``shardlab.mesh_network(shardlab.target_mesh(target, shape, ("data", "model")))``);
    each collective then pays its bandwidth and its hop latency; a pass's communication overlaps only
    that pass's arithmetic. The older form ``data_links=``/``model_links=`` (default 2
    each) gives the links by hand and leaves the latency out.

    Returns ``{"forward": {"compute", "comm", "comm_data", "comm_model"}, "backward": {...},
    "compute", "comm", "time", "bound"}`` in seconds: ``time`` is the sum over the passes of
    ``max(compute, comm)``; ``bound`` is ``"communication"`` if any pass communicates for
    longer than it computes, else ``"compute"``.
    """
    net, hop_latency = _network(network, data, model, data_links, model_links)
    latency = {} if hop_latency is None else {"hop_latency": hop_latency}
    flops = mlp_pass_flops(sizes, data=data, model=model)
    transfers = mlp_transfers(strategy, sizes, data=data, model=model, **options)
    passes = {phase: (flops[phase], [Traffic(t.bytes_per_device, t.axis, 1, t.kind)
                                     for t in transfers if t.phase == phase]) for phase in PASSES}
    t = modelled_passes(passes, chip, net, **latency)
    out: dict = {}
    for phase in PASSES:
        row = {"compute": t[phase]["compute"]}
        for axis in ("data", "model"):
            row[f"comm_{axis}"] = t[phase]["by_axis"].get(axis, 0.0)
        row["comm"] = t[phase]["comm"]
        out[phase] = row
    out.update(compute=t["compute"], comm=t["comm"], time=t["time"], bound=t["bound"])
    return out


def compute_bound_from(strategy: str, sizes: MLPSizes, chip, *, vary: str = "batch", data: int = 1,
                       model: int = 1, network: dict | None = None, data_links: int | None = None,
                       model_links: int | None = None, **options) -> float:
    """The smallest ``sizes.batch`` (or ``sizes.d_hidden``) from which :func:`step_times` is compute-bound.

    ``vary``: ``"batch"`` (the global batch; divide by ``data * model`` for a batch per
    chip) or ``"d_hidden"``; the other sizes are taken from ``sizes``; ``network`` (or the
    older ``data_links``/``model_links``) as for :func:`step_times`. Flops grow in
    proportion to either, modelled bytes by a fixed amount per unit (the latency is a fixed
    amount too), so each pass and axis is compute-bound from one value on, solved exactly
    here. Returns ``0.0`` when every value is compute-bound and ``math.inf`` when none is
    (e.g. tensor parallelism's bytes grow with the batch as fast as its flops). The answer
    is a real number: a batch or width must also divide evenly over the mesh.
    """
    if vary not in ("batch", "d_hidden"):
        raise ValueError(f"vary must be 'batch' or 'd_hidden', got {vary!r}")
    unit = data if vary == "batch" else model
    kwargs = dict(data=data, model=model, network=network, data_links=data_links, model_links=model_links,
                  **options)
    at = [step_times(strategy, _replace(sizes, **{vary: v * unit}), chip, **kwargs) for v in (1, 2)]
    value = 0.0
    for phase in PASSES:
        compute_rate = (at[1][phase]["compute"] - at[0][phase]["compute"]) / unit
        for axis in ("comm_data", "comm_model"):
            comm_rate = (at[1][phase][axis] - at[0][phase][axis]) / unit
            fixed = at[0][phase][axis] - comm_rate * unit
            if fixed <= 1e-15 and comm_rate <= compute_rate * (1 + 1e-12):
                continue                                  # never more communication than compute
            if compute_rate <= comm_rate * (1 + 1e-12):
                return math.inf                           # communication grows as fast as compute, or faster
            value = max(value, fixed / (compute_rate - comm_rate))
    return value


def _replace(sizes: MLPSizes, **changes) -> MLPSizes:
    fields = dict(batch=sizes.batch, d_model=sizes.d_model, d_hidden=sizes.d_hidden, layers=sizes.layers,
                  itemsize=sizes.itemsize)
    fields.update(changes)
    return MLPSizes(**fields)


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


@lru_cache(maxsize=8)
def _module(text: str):
    return parse_module(text)     # phase_of asks once per collective of the same report


def _op_name(module, name: str) -> str | None:
    """The op_name JAX gave instruction ``name``, or that of the instruction calling its computation.

    XLA:TPU moves a collective into a fused computation of its own (e.g. the all-reduce of an
    ``all-reduce-scatter`` fusion) and leaves the name JAX gave it on the fusion that calls it.
    """
    found = next((ins for ins in module.instructions if ins.name == name), None)
    if found is None:
        return None
    op = (found.metadata or {}).get("op_name")
    if op is None and found.computation is not None:
        callers = [ins for ins, _ in module.calls().get(found.computation, ())
                   if found.computation in (ins.called("calls"), ins.called("to_apply"))]
        op = (callers[0].metadata or {}).get("op_name") if callers else None
    return op


def phase_of(collective, report) -> str:
    """``"forward"``, ``"backward"`` or ``"forward+backward"``: which pass of autodiff a collective serves.

    Read from the ``op_name`` metadata JAX writes into the compiled module:
    the backward pass is the transpose of the forward one, so its operations are
    named ``transpose(jvp(...))``. A collective that XLA combined from several
    gets every phase of its parts; one that XLA moved into a fused computation
    of its own is named by the fusion that calls it. ``report`` is the
    :class:`~shardlab.programs.collectives.CollectiveReport` the collective came from.
    """
    name = getattr(collective, "name", None)
    text = getattr(report, "hlo_text", None)
    if not isinstance(name, str):
        raise ValueError(f"collective must be a shardlab Collective, got {type(collective).__name__}")
    if not isinstance(text, str):
        raise ValueError(f"report must be a CollectiveReport, got {type(report).__name__}")
    op = _op_name(_module(text), name)
    if op is None:
        raise ValueError(f"report has no op_name metadata for {name!r}")
    phases = {"backward" if "transpose(" in part else "forward" for part in _top_level_parts(op)}
    return "+".join(p for p in ("forward", "backward") if p in phases)
