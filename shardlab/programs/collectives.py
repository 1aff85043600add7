"""What jit inserted: the collectives read from compiled HLO, and the bytes they move by a model.

``collectives_in(f, *args)`` compiles ``f`` for the example arguments and reads
every collective out of ``.compile().as_text()``: its kind, the shapes it takes
and gives, the groups of devices that talk to each other. Those are *read from
compiled code*. The bytes each device sends are *modelled*: the ring model of
:mod:`shardlab.layout.ring_bytes` applied to the shapes read. Nothing here measures
traffic; the model says what the algorithm needs, not what a given runtime or
network moves. Reports use the direct-exchange count for all-to-all and say so.

Group members are *positions* in the executable's device assignment (what HLO
calls replica or partition ids), not ``Device.id``; ``CollectiveReport.device_ids``
maps a position to its device id when it is known.

The count is static: a collective inside a loop body is listed once.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

from shardlab.layout.ring_bytes import (
    as_number,
    bytes_all_gather,
    bytes_all_reduce,
    bytes_all_to_all,
    bytes_permute,
    bytes_reduce_scatter,
)
from shardlab.programs.hlo import (
    KINDS,
    Array,
    arrays,
    async_dones,
    async_half,
    parse_module,
    parse_shape,
    replica_groups,
    source_target_pairs,
)

__all__ = ["KINDS", "Collective", "CollectiveReport", "collectives_in", "collectives_in_compiled",
           "collectives_in_text", "device_assignment"]


@dataclass(frozen=True)
class Collective:
    """One collective in compiled code.

    ``kind`` is one of ``shardlab.programs.hlo.KINDS``; ``operands`` and ``results`` are what
    one device gives and gets (several for a combined, variadic collective);
    ``replica_groups`` lists the groups of device positions that communicate
    (for a collective-permute, see ``source_target_pairs``): all read from
    compiled code. ``bytes_per_device`` is modelled, not measured: what one
    device sends by the formula of its kind applied to those shapes (the ring
    model; for an all-to-all, a direct exchange, see ``model``).
    """

    kind: str
    name: str
    operand_shapes: tuple
    result_shapes: tuple
    dtypes: tuple
    replica_groups: list
    source_target_pairs: list | None
    bytes_per_device: int | float
    is_async: bool = False
    dimensions: tuple = ()
    hlo: str = field(default="", repr=False)

    @property
    def model(self) -> str:
        """The model behind ``bytes_per_device``: ``"ring"``, or ``"direct exchange"`` for an all-to-all."""
        return "direct exchange" if self.kind == "all-to-all" else "ring"

    @property
    def shape(self):
        """The operand's shape (a tuple of shapes for a variadic collective)."""
        return _one_or_all(self.operand_shapes)

    @property
    def result_shape(self):
        """The result's shape (a tuple of shapes for a variadic collective)."""
        return _one_or_all(self.result_shapes)

    @property
    def dtype(self) -> str:
        """The element type as HLO writes it (``"f32"``, ``"bf16"``, ...); joined with "," if mixed."""
        return ",".join(dict.fromkeys(self.dtypes))

    @property
    def operand_bytes(self) -> int:
        """Bytes of the operand(s) on one device."""
        return sum(Array(d, s).nbytes for d, s in zip(self.dtypes, self.operand_shapes))

    @property
    def result_bytes(self) -> int:
        """Bytes of the result(s) on one device."""
        return sum(Array(d, s).nbytes for d, s in zip(self.dtypes, self.result_shapes))

    @property
    def group_size(self) -> int | None:
        """Devices per group (the ``n`` of the formulas); None for a collective-permute."""
        if self.kind == "collective-permute":
            return None
        return len(self.replica_groups[0]) if self.replica_groups else 1

    @property
    def senders(self) -> tuple:
        """Positions of the devices that send something to another device."""
        if self.kind == "collective-permute":
            return tuple(sorted({s for s, t in self.source_target_pairs or [] if s != t}))
        return tuple(sorted(p for g in self.replica_groups if len(g) > 1 for p in g))

    def _shapes_text(self) -> str:
        def text(shapes):
            items = [str(Array(d, s)) for d, s in zip(self.dtypes, shapes)]
            if len(items) == 1:
                return items[0]
            if len(items) > 2 and len(set(items)) == 1:
                return f"{len(items)} \u00d7 {items[0]}"  # the pieces of an all-to-all
            return "(" + ", ".join(items) + ")"
        return f"{text(self.operand_shapes)} -> {text(self.result_shapes)}"

    def groups_text(self, limit: int = 4) -> str:
        """The groups (or source->target pairs) in short form, for tables."""
        if self.kind == "collective-permute":
            pairs = [f"{s}\u2192{t}" for s, t in sorted(self.source_target_pairs or [])]
            shown = ", ".join(pairs[:2 * limit]) + (", \u2026" if len(pairs) > 2 * limit else "")
            return f"{len(pairs)} pairs: {shown}"
        def members(g):   # a pod's groups have hundreds of members: the first three and the last
            return ",".join(map(str, g)) if len(g) <= 8 else ",".join(map(str, g[:3])) + f",\u2026,{g[-1]}"

        groups = ["{" + members(g) + "}" for g in self.replica_groups]
        shown = " ".join(groups[:limit]) + (" \u2026" if len(groups) > limit else "")
        many = "group" if len(groups) == 1 else "groups"
        return f"{len(groups)} {many} of {self.group_size}: {shown}"

    def __str__(self) -> str:
        return (f"{self.kind} {self._shapes_text()}, {self.groups_text()}, "
                f"{_fmt_bytes(self.bytes_per_device)} bytes sent per device ({self.model} model)")


def _one_or_all(items: tuple):
    return items[0] if len(items) == 1 else items


def _fmt_bytes(x) -> str:
    return f"{x:,}" if isinstance(x, int) else f"{x:,.1f}"


class CollectiveReport(Sequence):
    """The collectives of one compiled program: a sequence of :class:`Collective`.

    Displays as a table (HTML in a notebook, text elsewhere). ``device_ids``
    maps group positions to ``Device.id`` when the report came from a compiled
    executable (None when it came from text alone).
    """

    def __init__(self, collectives, *, num_devices: int | None = None, device_ids=None, hlo_text: str = ""):
        self._items = tuple(collectives)
        self.num_devices = num_devices
        self.device_ids = None if device_ids is None else tuple(device_ids)
        self.hlo_text = hlo_text

    def __getitem__(self, i):
        if isinstance(i, slice):
            return CollectiveReport(self._items[i], num_devices=self.num_devices,
                                    device_ids=self.device_ids, hlo_text=self.hlo_text)
        return self._items[i]

    def __len__(self) -> int:
        return len(self._items)

    def __eq__(self, other) -> bool:
        return isinstance(other, CollectiveReport) and self._items == other._items

    __hash__ = None

    @property
    def total_bytes_per_device(self):
        """Bytes one device sends over all the collectives, modelled (each kind's formula, summed)."""
        return as_number(sum(Fraction(c.bytes_per_device) for c in self._items))

    def traffic(self) -> list[tuple]:
        """What moves, without the instructions' names: one ``(kind, operand shape, result shape, groups,
        bytes per device)`` per collective, so that two programs can be compared."""
        return [(c.kind, c.shape, c.result_shape, c.replica_groups, c.bytes_per_device) for c in self._items]

    def kinds(self) -> Counter:
        """How many collectives of each kind: ``Counter({"all-gather": 2, ...})``."""
        return Counter(c.kind for c in self._items)

    def of_kind(self, kind: str) -> "CollectiveReport":
        """Only the collectives of one kind (``"all-reduce"``, ``"all-gather"``, ...)."""
        if kind not in KINDS:
            raise ValueError(f"of_kind: kind must be one of {', '.join(KINDS)}; got {kind!r}")
        return CollectiveReport([c for c in self._items if c.kind == kind], num_devices=self.num_devices,
                                device_ids=self.device_ids, hlo_text=self.hlo_text)

    def device_groups(self, collective: Collective) -> list[list[int]]:
        """A collective's groups as ``Device.id`` values (needs ``device_ids``)."""
        if self.device_ids is None:
            raise ValueError("device_groups: this report has no device assignment (it was read from text)")
        if collective.kind == "collective-permute":
            return [[self.device_ids[s], self.device_ids[t]] for s, t in collective.source_target_pairs]
        return [[self.device_ids[p] for p in g] for g in collective.replica_groups]

    @property
    def host_collective_calls(self) -> int:
        """How many ``MegaScaleCollective*`` custom-calls the program's host computations hold.

        XLA:TPU writes a collective run by the hosts (a gather into host memory) that way. Not counted
        as collectives, and given no bytes."""
        return _host_collective_calls(self.hlo_text)

    def summary(self) -> str:
        """One line: how many collectives of which kinds, and the modelled bytes each device sends."""
        host = self.host_collective_calls
        if not self._items:
            if host:
                return (f"No collectives between the devices, but {host} host-side collective "
                        f"custom-call{'s' if host > 1 else ''} (MegaScaleCollective*), not counted.")
            return "No collectives: every device computes on its own data."
        kinds = ", ".join(f"{k} \u00d7{v}" if v > 1 else k for k, v in self.kinds().items())
        many = "collective" if len(self) == 1 else "collectives"
        models = "ring model" + ("; all-to-all: direct exchange" if "all-to-all" in self.kinds() else "")
        plus = (f" Plus {host} host-side collective custom-call{'s' if host > 1 else ''} "
                "(MegaScaleCollective*), not counted.") if host else ""
        return (f"{len(self)} {many} ({kinds}); each device sends "
                f"{_fmt_bytes(self.total_bytes_per_device)} bytes ({models}).{plus}")

    def _rows(self):
        return [(c.kind, c._shapes_text(), c.dtype, c.groups_text(), _fmt_bytes(c.bytes_per_device))
                for c in self._items]

    def __str__(self) -> str:
        head = ("kind", "operand -> result", "dtype", "groups", "bytes/device (model)")
        rows = self._rows()
        if not rows:
            return self.summary()
        widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in [head, *rows]]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join([self.summary(), *lines])

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        esc = html.escape
        rows = "".join(
            "<tr>" + "".join(f"<td style='text-align:{a}'>{esc(v)}</td>"
                             for v, a in zip(r, ("left", "left", "left", "left", "right"))) + "</tr>"
            for r in self._rows()
        )
        head = "".join(f"<th>{h}</th>" for h in ("kind", "operand \u2192 result", "dtype", "groups",
                                                   "bytes/device (model)"))
        table = f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>" if rows else ""
        return f"<div class='shardlab-collectives'><p>{esc(self.summary())}</p>{table}</div>"


# --------------------------------------------------------------------------
# Reading a module
# --------------------------------------------------------------------------


def _host_collective_calls(text: str) -> int:
    """The ``MegaScaleCollective*`` custom-calls inside computations marked ``execution_thread="host"``."""
    return sum(1 for comp in parse_module(text).computations.values() if comp.execution_thread == "host"
               for ins in comp.instructions
               if re.fullmatch(r"MegaScaleCollective\w*", ins.custom_call_target or ""))


def _kind_of(opcode: str) -> tuple[str | None, bool]:
    base, half = async_half(opcode)
    if opcode in KINDS:
        return opcode, False
    if half == "start" and base in KINDS:
        return base, True
    return None, False


def _fallback_operands(kind: str, results: list[Array], n: int, dims: tuple, is_async, shape) -> list[Array]:
    # Operand shapes when the text does not say them (a lone instruction line).
    if is_async and kind in ("all-gather", "collective-permute") and isinstance(shape, tuple) and len(shape) >= 2:
        return arrays(shape[0])
    if kind == "all-gather" and dims:
        return [Array(r.dtype, tuple(s // n if i == dims[0] else s for i, s in enumerate(r.shape)))
                for r in results]
    if kind == "reduce-scatter" and dims:
        return [Array(r.dtype, tuple(s * n if i == dims[0] else s for i, s in enumerate(r.shape)))
                for r in results]
    return list(results)


def _bytes(kind: str, operands, results, n: int, pairs) -> int | float:
    op_bytes = sum(a.nbytes for a in operands)
    res_bytes = sum(a.nbytes for a in results)
    if kind == "all-gather":
        return bytes_all_gather(res_bytes, n)
    if kind == "reduce-scatter":
        return bytes_reduce_scatter(op_bytes, n)
    if kind == "all-reduce":
        return bytes_all_reduce(op_bytes, n)
    if kind == "all-to-all":
        return bytes_all_to_all(op_bytes, n)
    return bytes_permute(op_bytes, any(s != t for s, t in pairs or []))


def collectives_in_text(hlo_text: str, *, num_devices: int | None = None, device_ids=None) -> CollectiveReport:
    """The collectives in HLO text (a whole module, or just instruction lines).

    ``num_devices`` is needed only when a group is written ``replica_groups={}``
    (all devices) and the text has no ``HloModule`` header giving
    ``num_partitions``. ``device_ids`` (optional) maps positions to ``Device.id``.
    Asynchronous pairs (``all-gather-start``/``-done``) count once, by their start; so does a
    collective XLA:TPU copies into the fused computations that overlap it with other work. XLA:TPU's
    ``all-reduce-scatter`` fusion (an all-reduce and a slice) is read as the reduce-scatter it is.
    """
    if not isinstance(hlo_text, str):
        raise ValueError(f"collectives_in_text: hlo_text must be a string of HLO, got {type(hlo_text).__name__}")
    if num_devices is not None and (isinstance(num_devices, bool) or not isinstance(num_devices, int)
                                    or num_devices < 1):
        raise ValueError(f"collectives_in_text: num_devices must be a positive integer, got {num_devices!r}")
    module = parse_module(hlo_text)
    if num_devices is None:
        num_devices = module.num_devices
    comps = module.computations

    def root_target(comp):
        return comp.root.custom_call_target if comp.root is not None else None

    # XLA:TPU wraps an overlapped collective in three fused computations (start, work, done), each
    # holding a copy of it: the one under AsyncCollectiveStart is counted, as asynchronous; the others not.
    copies = {c for c, comp in comps.items()
              if root_target(comp) == "AsyncCollectiveDone" or c.startswith("async_collective_fusion")}
    starts = {c for c, comp in comps.items() if root_target(comp) == "AsyncCollectiveStart"}
    shapes = {i.name: i.shape for i in module.instructions}
    done_shape = {start: done.shape for start, done in async_dones(module.instructions).items()}

    found = []
    for ins in module.instructions:
        kind, is_async = _kind_of(ins.opcode)
        if kind is None or ins.computation in copies:
            continue
        is_async = is_async or ins.computation in starts
        # XLA:TPU's reduce-scatter: an all-reduce and a slice fused into a computation of that name.
        fused_scatter = kind == "all-reduce" and (ins.computation or "").startswith("all-reduce-scatter")
        pairs = source_target_pairs(ins.attributes) if kind == "collective-permute" else None
        groups = [] if kind == "collective-permute" else replica_groups(ins.attributes, num_devices)
        if groups is None:
            if num_devices is None:
                raise ValueError(f"{ins.name}: no replica_groups and an unknown number of devices: "
                                 "pass num_devices=")
            groups = [list(range(num_devices))]
        n = len(groups[0]) if groups else 1
        dims = ins.dimensions

        # What one device gets: the -done's shape for an async pair.
        if is_async and ins.name in done_shape:
            results = arrays(done_shape[ins.name])
        elif is_async and kind == "all-gather" and isinstance(ins.shape, tuple) and len(ins.shape) == 2:
            results = arrays(ins.shape[1])
        elif is_async and kind == "collective-permute" and isinstance(ins.shape, tuple):
            results = arrays(ins.shape[1])
        elif fused_scatter:
            head = comps[ins.computation].result_text        # the fused computation's result: the slice
            results = arrays(parse_shape(head) if head else ins.shape)
            kind = "reduce-scatter"
        else:
            results = arrays(ins.shape)
        operand_arrays = [s if s is not None else shapes.get(name) for name, s in ins.operands]
        if ins.operands and all(s is not None for s in operand_arrays):
            operands = [a for s in operand_arrays for a in arrays(s)]
        else:
            operands = _fallback_operands(kind, results, n, dims, is_async, ins.shape)
        if kind == "collective-permute":
            operands = operands[:1]  # later operands of the in-place form are offsets
        if kind in ("all-reduce", "all-to-all") and len(operands) != len(results):
            operands = list(results)
        found.append(Collective(
            kind=kind,
            name=ins.name,
            operand_shapes=tuple(a.shape for a in operands),
            result_shapes=tuple(a.shape for a in results),
            dtypes=tuple(a.dtype for a in operands)
            if len(operands) == len(results) else tuple(a.dtype for a in results),
            replica_groups=groups,
            source_target_pairs=pairs,
            bytes_per_device=_bytes(kind, operands, results, n, pairs),
            is_async=is_async,
            dimensions=dims,
            hlo=re.sub(r",\s*metadata=\{.*$", "", ins.line),
        ))
    return CollectiveReport(found, num_devices=num_devices, device_ids=device_ids, hlo_text=hlo_text)


def device_assignment(compiled) -> list | None:
    """The devices a jitted program's partitions run on, in partition order (the order replica groups index)."""
    import jax

    for sharding in jax.tree.leaves((compiled.input_shardings, compiled.output_shardings)):
        devices = getattr(sharding, "_device_assignment", None)   # jit takes its assignment from the shardings
        if devices:
            return list(devices)
    try:
        return list(compiled.runtime_executable().local_devices())
    except Exception:  # noqa: BLE001 - a program compiled ahead of time for a TPU has no runtime devices
        return None


def _assignment(compiled) -> list[int] | None:
    devices = device_assignment(compiled)
    return [d.id for d in devices] if devices else None


def collectives_in_compiled(compiled) -> CollectiveReport:
    """The collectives of an already compiled (or lowered) JAX program.

    ``compiled`` is what ``jax.jit(f).lower(...).compile()`` returns, or the
    ``Lowered`` before ``.compile()`` (then it is compiled here).
    """
    import jax

    if isinstance(compiled, jax.stages.Lowered):
        compiled = compiled.compile()
    if not isinstance(compiled, jax.stages.Compiled):
        raise ValueError("collectives_in_compiled: compiled must be a jax.stages.Compiled (from "
                         f"jax.jit(f).lower(...).compile()) or a Lowered, got {type(compiled).__name__}")
    text = compiled.as_text()
    ids = _assignment(compiled)
    known = parse_module(text).num_devices
    return collectives_in_text(text, num_devices=len(ids) if ids and known is None else None,
                               device_ids=ids)


def collectives_in(f, *args, **kwargs) -> CollectiveReport:
    """Compile ``f`` for the example arguments and return the collectives jit inserted.

    ``f`` is a function, a jitted function (used as it is, so its static
    arguments and shardings count), or an already compiled program. The
    arguments may be arrays or ``jax.ShapeDtypeStruct`` (with a sharding).
    """
    import jax

    if isinstance(f, (jax.stages.Compiled, jax.stages.Lowered)):
        if args or kwargs:
            raise ValueError("collectives_in: f is already compiled, so it takes no example arguments")
        return collectives_in_compiled(f)
    if not callable(f):
        raise ValueError(f"collectives_in: f must be a function (or a jitted one), got {type(f).__name__}")
    jitted = f if hasattr(f, "lower") else jax.jit(f)
    return collectives_in_compiled(jitted.lower(*args, **kwargs).compile())
