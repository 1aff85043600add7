"""What jit inserted: the collectives read from compiled HLO, and the bytes they move by a model.

``collectives_in(f, *args)`` compiles ``f`` for the example arguments and reads
every collective out of ``.compile().as_text()``: its kind, the shapes it takes
and gives, the groups of devices that talk to each other. Those are *read from
compiled code*. The bytes each device sends are *modelled*: the ring model of
:mod:`shardlab.cost_model` applied to the shapes read. Nothing here measures
traffic; the model says what the algorithm needs, not what a given runtime or
network moves. Reports use the direct-exchange count for all-to-all and say so.

Group members are *positions* in the executable's device assignment (what HLO
calls replica or partition ids), not ``Device.id``; ``CollectiveReport.device_ids``
maps a position to its device id when it is known.

The count is static: a collective inside a loop body is listed once.
"""

from __future__ import annotations

import html
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np

from shardlab.cost_model import (_number, bytes_all_gather, bytes_all_reduce, bytes_all_to_all, bytes_permute,
                                 bytes_reduce_scatter)

__all__ = [
    "KINDS",
    "Collective",
    "CollectiveReport",
    "collectives_in",
    "collectives_in_compiled",
    "collectives_in_text",
]

#: The collective kinds the reader recognises, as HLO names them.
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")

# Bits per element of each HLO element type, as XLA stores it: 2- and 4-bit types packed, the 6-bit floats
# one per byte (XLA's memory analysis counts a byte for each).
_BITS = {
    "pred": 8, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f6e2m3fn": 8, "f6e3m2fn": 8, "f8e8m0fnu": 8, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8,
    "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e3m4": 8,
    "token": 0,
}


# --------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class _Array:
    dtype: str
    shape: tuple

    @property
    def nbytes(self) -> int:
        bits = _BITS.get(self.dtype)
        if bits is None:
            raise ValueError(f"unknown HLO element type {self.dtype!r}")
        return math.ceil(math.prod(self.shape) * bits / 8)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


def _split_top(text: str, sep: str = ",") -> list[str]:
    """Split at ``sep`` outside any brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts if p.strip()]


def _parse_shape(text: str):
    """An HLO shape: ``f32[16,8]{1,0}`` -> _Array; ``(a, b)`` -> tuple of parsed shapes."""
    text = text.strip()
    if text.startswith("("):
        inner = text[1:_matching(text, 0)]
        return tuple(_parse_shape(p) for p in _split_top(inner))
    m = _ARRAY_RE.match(text)
    if not m:
        if text in ("token[]", "token"):
            return _Array("token", ())
        raise ValueError(f"cannot read an HLO shape from {text!r}")
    dims = []
    for d in m.group(2).split(","):
        d = d.strip()
        if d:
            dims.append(int(d.lstrip("<=?")) if d.lstrip("<=?").isdigit() else 0)
    return _Array(m.group(1), tuple(dims))


def _flat(shape) -> list[_Array]:
    if isinstance(shape, _Array):
        return [shape]
    return [a for s in shape for a in _flat(s)]


def _matching(text: str, start: int) -> int:
    """Index of the bracket closing the one at ``start``."""
    pairs = {"(": ")", "[": "]", "{": "}"}
    depth = 0
    for i in range(start, len(text)):
        if text[i] in pairs:
            depth += 1
        elif text[i] in ")]}":
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced brackets in {text[start:start + 80]!r}")


# --------------------------------------------------------------------------
# Instructions
# --------------------------------------------------------------------------

@dataclass
class _Instr:
    name: str
    shape: object
    opcode: str
    operands: list  # list of (name, shape or None)
    attrs: str
    line: str


_COMMENT_RE = re.compile(r"/\*.*?\*/")
# A computation's first line: "%name (params) -> result {" (or "ENTRY %name ...").
_COMPUTATION_RE = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\)\s*->\s*(.+?)\s*\{\s*$")
_HEAD_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*")


def _parse_instruction(line: str) -> _Instr | None:
    m = _HEAD_RE.match(line)
    if not m:
        return None
    rest = line[m.end():]
    try:
        if rest.startswith("("):
            end = _matching(rest, 0) + 1
        else:
            end = re.match(r"\S+", rest).end()
        shape_text, rest = rest[:end], rest[end:].lstrip()
        op = re.match(r"([\w\-]+)\(", rest)
        if not op:
            return None
        close = _matching(rest, op.end() - 1)
        operand_text, attrs = rest[op.end():close], rest[close + 1:]
        shape = _parse_shape(shape_text)
    except (ValueError, AttributeError):
        return None
    operands = []
    for item in _split_top(operand_text):
        tokens = item.rsplit(None, 1)
        name = tokens[-1].lstrip("%")
        oshape = None
        if len(tokens) == 2:
            try:
                oshape = _parse_shape(tokens[0])
            except ValueError:
                oshape = None
        operands.append((name, oshape))
    return _Instr(m.group(1), shape, op.group(1), operands, attrs, line.strip())


# --------------------------------------------------------------------------
# Replica groups in their three spellings
# --------------------------------------------------------------------------

def _ints(text: str) -> list[int]:
    return [int(t) for t in re.findall(r"-?\d+", text)]


def _iota(dims: list[int], reshape: list[int], perm: list[int] | None) -> np.ndarray:
    """XLA's iota tile assignment: iota(prod(reshape)).reshape(reshape).transpose(perm).reshape(dims)."""
    a = np.arange(math.prod(reshape)).reshape(reshape)
    if perm:
        a = a.transpose(perm)
    return a.reshape(dims)


def _explicit_groups(text: str) -> list[list[int]]:
    inner = text.strip()[1:-1].strip()
    return [_ints(g) for g in re.findall(r"\{([^{}]*)\}", inner)] if inner else []


_IOTA_GROUPS_RE = re.compile(r"\[([\d,\s]+)\]<=\[([\d,\s]+)\](?:T\(([\d,\s]+)\))?")
_MESH_RE = re.compile(
    r"mesh\[(?P<axes>[^\]]*)\]"
    r"(?:,\s*device_ids=\((?P<ids>\[[\d,\s]+\](?:T\([\d,\s]+\))?|[\d,\s]+)\))?"
    r"\s*\{(?P<groups>[^{}]*)\}"
)
_MESH_AXIS_RE = re.compile(r"""(?:'([^']*)'|"([^"]*)"|([\w.\-]+))\s*=\s*(\d+)""")
_AXIS_REF_RE = re.compile(r"""(?:'([^']*)'|"([^"]*)"|([\w.\-]+))\s*(?::\((\d+)\)(\d+))?""")


def _mesh_groups(axes_text: str, ids_text: str | None, groups_text: str) -> list[list[int]]:
    """Groups of a mesh-axes replica group list (XLA's MeshAxesReplicaGroupList).

    The devices are the mesh's device array (row-major over the mesh axes);
    a group is every device that differs only along the named axes (a sub-axis
    ``a:(pre)size`` splits axis ``a`` into ``[pre, size, rest]`` and groups
    along the middle part). Grouped axes go last, in the order written.
    """
    names, sizes = [], []
    for m in _MESH_AXIS_RE.finditer(axes_text):
        names.append(next(g for g in m.groups()[:3] if g is not None))
        sizes.append(int(m.group(4)))
    if not names:
        raise ValueError(f"mesh replica groups without axes: {axes_text!r}")
    total = math.prod(sizes)
    if ids_text is None:
        devices = np.arange(total).reshape(sizes)
    elif ids_text.lstrip().startswith("["):
        m = _IOTA_GROUPS_RE.fullmatch("[" + ",".join(map(str, sizes)) + "]<=" + ids_text.strip())
        if not m:
            raise ValueError(f"cannot read device_ids=({ids_text})")
        devices = _iota(sizes, _ints(m.group(2)), _ints(m.group(3)) if m.group(3) else None)
    else:
        devices = np.array(_ints(ids_text)).reshape(sizes)

    refs = []  # (axis index, pre_size or None, size or None)
    for item in _split_top(groups_text):
        m = _AXIS_REF_RE.fullmatch(item.strip())
        if not m:
            raise ValueError(f"cannot read mesh axis {item!r}")
        name = next(g for g in m.groups()[:3] if g is not None)
        if name not in names:
            raise ValueError(f"mesh replica groups name axis {name!r}, not one of {names}")
        pre = int(m.group(4)) if m.group(4) else None
        size = int(m.group(5)) if m.group(5) else None
        refs.append((names.index(name), pre, size))

    # Split each mesh axis into the parts its references need.
    by_axis: dict[int, list[int]] = {}
    for k, (axis, _, _) in enumerate(refs):
        by_axis.setdefault(axis, []).append(k)
    new_sizes, grouped = [], [None] * len(refs)
    for axis, full in enumerate(sizes):
        ks = by_axis.get(axis)
        if not ks:
            new_sizes.append(full)
            continue
        if len(ks) == 1 and refs[ks[0]][1] is None:
            grouped[ks[0]] = len(new_sizes)
            new_sizes.append(full)
            continue
        prefix = 1
        for k in sorted(ks, key=lambda k: refs[k][1] or 1):
            pre, size = refs[k][1] or 1, refs[k][2] or full
            if pre != prefix:
                new_sizes.append(pre // prefix)
                prefix = pre
            grouped[k] = len(new_sizes)
            new_sizes.append(size)
            prefix *= size
        if prefix != full:
            new_sizes.append(full // prefix)
    devices = devices.reshape(new_sizes)
    rest = [d for d in range(len(new_sizes)) if d not in grouped]
    per_group = math.prod(new_sizes[g] for g in grouped)
    return devices.transpose(rest + grouped).reshape(-1, per_group).tolist()


def _replica_groups(attrs: str, num_devices: int | None) -> list[list[int]] | None:
    """The groups of an instruction's ``replica_groups=``, or None if it has none."""
    key = "replica_groups="
    at = attrs.find(key)
    if at < 0:
        return None
    value = attrs[at + len(key):].lstrip()
    if value.startswith("{"):
        groups = _explicit_groups(value[:_matching(value, 0) + 1])
        if not groups:
            # {} means every device in one group.
            if num_devices is None:
                raise ValueError(
                    "replica_groups={} means all devices in one group, but the number of devices is "
                    "unknown: pass num_devices= (or give the whole module, whose header says num_partitions)"
                )
            groups = [list(range(num_devices))]
        return groups
    m = _MESH_RE.match(value)
    if m:
        return _mesh_groups(m.group("axes"), m.group("ids"), m.group("groups"))
    m = _IOTA_GROUPS_RE.match(value)
    if m:
        dims = _ints(m.group(1))
        return _iota(dims, _ints(m.group(2)), _ints(m.group(3)) if m.group(3) else None).tolist()
    raise ValueError(f"cannot read replica groups from {value[:80]!r}")


def _source_target_pairs(attrs: str) -> list[tuple[int, int]] | None:
    key = "source_target_pairs="
    at = attrs.find(key)
    if at < 0:
        return None
    value = attrs[at + len(key):].lstrip()
    value = value[:_matching(value, 0) + 1]
    return [tuple(_ints(p)) for p in re.findall(r"\{([^{}]*)\}", value[1:-1])]


# --------------------------------------------------------------------------
# The report
# --------------------------------------------------------------------------

def _one_or_all(items: tuple):
    return items[0] if len(items) == 1 else items


@dataclass(frozen=True)
class Collective:
    """One collective in compiled code.

    ``kind`` is one of ``shardlab.compiled.KINDS``; ``operands`` and ``results`` are what
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
        return sum(_Array(d, s).nbytes for d, s in zip(self.dtypes, self.operand_shapes))

    @property
    def result_bytes(self) -> int:
        """Bytes of the result(s) on one device."""
        return sum(_Array(d, s).nbytes for d, s in zip(self.dtypes, self.result_shapes))

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
            items = [str(_Array(d, s)) for d, s in zip(self.dtypes, shapes)]
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
        return _number(sum(Fraction(c.bytes_per_device) for c in self._items))

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
    count, inside = 0, 0
    for raw in text.splitlines():
        line = _COMMENT_RE.sub("", raw)
        if _COMPUTATION_RE.match(line):
            inside = 0
        elif line.startswith("}"):
            if 'execution_thread="host"' in line:
                count += inside
            inside = 0
        elif re.search(r'custom_call_target="MegaScaleCollective\w*"', line):
            inside += 1
    return count


def _header_devices(text: str) -> int | None:
    m = re.search(r"^\s*HloModule\b[^\n]*", text, re.M)
    if not m:
        return None
    head = m.group(0)
    parts = re.search(r"num_partitions=(\d+)", head)
    reps = re.search(r"replica_count=(\d+)", head)
    if not parts and not reps:
        return 1  # XLA leaves both out when they are 1
    return (int(parts.group(1)) if parts else 1) * (int(reps.group(1)) if reps else 1)


def _kind_of(opcode: str) -> tuple[str | None, bool]:
    if opcode in KINDS:
        return opcode, False
    if opcode.endswith("-start") and opcode[:-len("-start")] in KINDS:
        return opcode[:-len("-start")], True
    return None, False


def _fallback_operands(kind: str, results: list[_Array], n: int, dims: tuple, is_async, shape) -> list[_Array]:
    # Operand shapes when the text does not say them (a lone instruction line).
    if is_async and kind in ("all-gather", "collective-permute") and isinstance(shape, tuple) and len(shape) >= 2:
        return _flat(shape[0])
    if kind == "all-gather" and dims:
        return [_Array(r.dtype, tuple(s // n if i == dims[0] else s for i, s in enumerate(r.shape)))
                for r in results]
    if kind == "reduce-scatter" and dims:
        return [_Array(r.dtype, tuple(s * n if i == dims[0] else s for i, s in enumerate(r.shape)))
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
    if num_devices is None:
        num_devices = _header_devices(hlo_text)

    instrs, home, computations = [], {}, {}
    comp = None
    for raw in hlo_text.splitlines():
        line = _COMMENT_RE.sub("", raw)
        if (head := _COMPUTATION_RE.match(line)) is not None:
            comp = head.group(1)
            computations[comp] = {"result": head.group(2), "root_target": None}
            continue
        if "=" not in line:
            continue
        ins = _parse_instruction(line)
        if ins is not None:
            instrs.append(ins)
            home[id(ins)] = comp
            if comp is not None and line.lstrip().startswith("ROOT") and \
                    (target := re.search(r'custom_call_target="(\w+)"', ins.attrs)):
                computations[comp]["root_target"] = target.group(1)
    # XLA:TPU wraps an overlapped collective in three fused computations (start, work, done), each
    # holding a copy of it: the one under AsyncCollectiveStart is counted, as asynchronous; the others not.
    copies = {c for c, info in computations.items()
              if info["root_target"] == "AsyncCollectiveDone" or c.startswith("async_collective_fusion")}
    starts = {c for c, info in computations.items() if info["root_target"] == "AsyncCollectiveStart"}
    shapes = {i.name: i.shape for i in instrs}
    done_shape = {}
    for i in instrs:
        if i.opcode.endswith("-done") and i.operands:
            done_shape[i.operands[0][0]] = i.shape

    found = []
    for ins in instrs:
        kind, is_async = _kind_of(ins.opcode)
        if kind is None or home.get(id(ins)) in copies:
            continue
        is_async = is_async or home.get(id(ins)) in starts
        # XLA:TPU's reduce-scatter: an all-reduce and a slice fused into a computation of that name.
        fused_scatter = kind == "all-reduce" and (home.get(id(ins)) or "").startswith("all-reduce-scatter")
        pairs = _source_target_pairs(ins.attrs) if kind == "collective-permute" else None
        groups = [] if kind == "collective-permute" else _replica_groups(ins.attrs, num_devices)
        if groups is None:
            if num_devices is None:
                raise ValueError(f"{ins.name}: no replica_groups and an unknown number of devices: "
                                 "pass num_devices=")
            groups = [list(range(num_devices))]
        n = len(groups[0]) if groups else 1
        dims = tuple(_ints(m.group(1))) if (m := re.search(r"dimensions=\{([\d,\s]*)\}", ins.attrs)) else ()

        # What one device gets: the -done's shape for an async pair.
        if is_async and ins.name in done_shape:
            results = _flat(done_shape[ins.name])
        elif is_async and kind == "all-gather" and isinstance(ins.shape, tuple) and len(ins.shape) == 2:
            results = _flat(ins.shape[1])
        elif is_async and kind == "collective-permute" and isinstance(ins.shape, tuple):
            results = _flat(ins.shape[1])
        elif fused_scatter:
            results = _flat(_parse_shape(computations[home[id(ins)]]["result"]))
            kind = "reduce-scatter"
        else:
            results = _flat(ins.shape)
        operand_arrays = [s if s is not None else shapes.get(name) for name, s in ins.operands]
        if ins.operands and all(s is not None for s in operand_arrays):
            operands = [a for s in operand_arrays for a in _flat(s)]
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


def _device_assignment(compiled) -> list | None:
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
    devices = _device_assignment(compiled)
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
    return collectives_in_text(text, num_devices=len(ids) if ids and _header_devices(text) is None else None,
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
