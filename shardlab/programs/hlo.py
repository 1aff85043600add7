"""The one reader of HLO text: computations, instructions, operands, shapes and replica groups.

XLA prints a program (``jax.jit(f).lower(...).compile().as_text()``) as computations, each a list of
instructions ``%name = shape opcode(operands), attribute=value, ...``. Every reader of a program in
this package (collectives, schedules, loops, memory placements, sources) parses that text here.
It knows no model: it reports what the program says.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

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
