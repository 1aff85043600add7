"""The one reader of HLO text: modules, computations, instructions, operands, shapes and replica groups.

XLA prints a program (``jax.jit(f).lower(...).compile().as_text()``) as a header line ``HloModule ...``,
then computations, each a list of instructions ``%name = shape opcode(operands), attribute=value, ...``,
then tables of source locations. Every reader of a compiled program in this package (collectives,
schedules, loops, memory placements, sources) reads that text through this module's public interface:

* :func:`parse_module` -> :class:`Module` (its :class:`Computation` objects, each a list of
  :class:`Instruction`), :func:`parse_instruction` for one line;
* :func:`parse_shape` -> :class:`Array` or a tuple of shapes, :func:`arrays` to flatten one, :data:`BITS`;
* :func:`replica_groups`, :func:`source_target_pairs`: who talks to whom in a collective;
* :func:`async_half`, :func:`async_dones`: the ``-start``/``-done`` halves of an asynchronous operation;
* :func:`split_top_level`, :func:`closing_bracket`: the bracket arithmetic the rest is built on.

It knows no model: it reports what the program says.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

__all__ = ["KINDS", "BITS", "CALL_ATTRIBUTES", "Array", "Operand", "Instruction", "Computation", "Module",
           "SourceLocation", "parse_shape", "arrays", "parse_instruction", "parse_module", "replica_groups",
           "source_target_pairs", "async_half", "async_dones", "split_top_level", "closing_bracket"]

#: The collective kinds the reader recognises, as HLO names them.
KINDS = ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


#: Bits per element of each HLO element type, as XLA stores it (2- and 4-bit types packed, the 6-bit floats
#: one per byte, as XLA's memory analysis counts them).
BITS = {
    "pred": 8, "s2": 2, "s4": 4, "s8": 8, "s16": 16, "s32": 32, "s64": 64,
    "u2": 2, "u4": 4, "u8": 8, "u16": 16, "u32": 32, "u64": 64,
    "f16": 16, "bf16": 16, "f32": 32, "f64": 64, "c64": 64, "c128": 128,
    "f4e2m1fn": 4, "f6e2m3fn": 8, "f6e3m2fn": 8, "f8e8m0fnu": 8, "f8e5m2": 8, "f8e4m3": 8, "f8e4m3fn": 8,
    "f8e4m3b11fnuz": 8, "f8e5m2fnuz": 8, "f8e4m3fnuz": 8, "f8e3m4": 8,
    "token": 0,
}


#: The attributes through which an instruction calls other computations.
CALL_ATTRIBUTES = ("calls", "to_apply", "body", "condition", "branch_computations",
                   "true_computation", "false_computation")


# --------------------------------------------------------------------------
# Brackets
# --------------------------------------------------------------------------


def closing_bracket(text: str, start: int) -> int:
    """Index of the bracket (``)``, ``]`` or ``}``) closing the one at ``text[start]``."""
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


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """``text`` split at each ``sep`` outside any brackets, the parts stripped, empty parts left out."""
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


def _attribute_items(text: str) -> dict:
    """``{key: value text}`` of an instruction's attributes ``key=value, ...`` (commas inside brackets or
    quotes do not split; the first of a repeated key is kept)."""
    items, depth, start, i = {}, 0, 0, 0
    bounds = []
    while i < len(text):
        ch = text[i]
        if ch == '"':                       # a quoted string: skip it, escapes included
            i += 1
            while i < len(text) and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch == "," and depth == 0:
            bounds.append((start, i))
            start = i + 1
        i += 1
    bounds.append((start, len(text)))
    for a, b in bounds:
        key, eq, value = text[a:b].partition("=")
        if eq and key.strip() not in items:
            items[key.strip()] = value.strip()
    return items


# --------------------------------------------------------------------------
# Shapes
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Array:
    """One array type of HLO: its element type (``"f32"``, ``"bf16"``, ...) and its dimensions."""

    dtype: str
    shape: tuple

    @property
    def nbytes(self) -> int:
        """Bytes of the array as XLA stores it (sub-byte types packed, see :data:`BITS`)."""
        bits = BITS.get(self.dtype)
        if bits is None:
            raise ValueError(f"unknown HLO element type {self.dtype!r}")
        return math.ceil(math.prod(self.shape) * bits / 8)

    def __str__(self) -> str:
        return f"{self.dtype}[{','.join(map(str, self.shape))}]"


_ARRAY_RE = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\]")


def parse_shape(text: str):
    """An HLO shape: ``f32[16,8]{1,0}`` -> :class:`Array` (the layout dropped); ``(a, b)`` -> a tuple of
    parsed shapes. A dynamic dimension (``<=8``) reads as its bound, an unknown one (``?``) as 0."""
    text = text.strip()
    if text.startswith("("):
        inner = text[1:closing_bracket(text, 0)]
        return tuple(parse_shape(p) for p in split_top_level(inner))
    m = _ARRAY_RE.match(text)
    if not m:
        if text in ("token[]", "token"):
            return Array("token", ())
        raise ValueError(f"cannot read an HLO shape from {text!r}")
    dims = []
    for d in m.group(2).split(","):
        d = d.strip()
        if d:
            dims.append(int(d.lstrip("<=?")) if d.lstrip("<=?").isdigit() else 0)
    return Array(m.group(1), tuple(dims))


def arrays(shape) -> list[Array]:
    """The arrays of a parsed shape, in order: ``[shape]`` for an :class:`Array`, a tuple's leaves else."""
    if isinstance(shape, Array):
        return [shape]
    return [a for s in shape for a in arrays(s)]


# --------------------------------------------------------------------------
# Instructions
# --------------------------------------------------------------------------


class Operand(NamedTuple):
    """One operand of an instruction: the name it refers to (or a constant's literal text, such as ``5``)
    and its shape where the text prints one (``f32[8]{0} %p``), else None."""

    name: str
    shape: object = None


_TRIPS_RE = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')


_FIELD_RE = re.compile(r'(\w+)=("(?:[^"\\]|\\.)*"|[^\s}]+)')


def _unquote(value: str) -> str:
    return value[1:-1].replace('\\"', '"').replace("\\'", "'") if value.startswith('"') else value


def _fields(text: str) -> dict:
    """``{key: value}`` of space-separated ``key=value`` fields (metadata, source tables), values unquoted."""
    return {k: _unquote(v) for k, v in _FIELD_RE.findall(text)}


@dataclass(frozen=True)
class Instruction:
    """One instruction ``%name = shape opcode(operands), attributes``.

    ``shape`` is the parsed result shape (:func:`parse_shape`), ``shape_text`` its text with the layout;
    ``operands`` are :class:`Operand` items; ``attributes`` is the text after the operands, without the
    leading comma; ``line`` the whole line, stripped, without ``/*...*/`` comments; ``is_root`` whether it
    is its computation's ``ROOT``; ``computation`` the name of the computation that holds it (None for a
    line read alone).
    """

    name: str
    shape: object
    shape_text: str
    opcode: str
    operands: tuple
    attributes: str
    line: str
    is_root: bool = False
    computation: str | None = None

    @property
    def operand_names(self) -> tuple:
        """The operands' names, in order."""
        return tuple(o.name for o in self.operands)

    @cached_property
    def attribute_values(self) -> dict:
        """``{key: value text}`` of the top-level attributes (commas inside brackets or quotes do not split)."""
        return _attribute_items(self.attributes)

    def attribute(self, key: str) -> str | None:
        """The text of the top-level attribute ``key=...`` (``"index"``, ``"direction"``, ...), or None."""
        return self.attribute_values.get(key)

    @property
    def called_computations(self) -> tuple:
        """The names of the computations this instruction calls (its ``calls=``, ``to_apply=``, ``condition=``,
        ``body=``, ``branch_computations=``, ...; :data:`CALL_ATTRIBUTES`), in that order."""
        called = []
        for key in CALL_ATTRIBUTES:
            value = self.attribute(key)
            if value is not None:
                called += [n.strip().lstrip("%") for n in value.strip("{}").split(",") if n.strip()]
        return tuple(called)

    def called(self, key: str) -> str | None:
        """The computation named by one call attribute (``"body"``, ``"condition"``, ``"calls"``), or None."""
        value = self.attribute(key)
        return value.strip("{}").split(",")[0].strip().lstrip("%") if value else None

    @property
    def custom_call_target(self) -> str | None:
        """The ``custom_call_target`` of a ``custom-call``, unquoted, or None."""
        value = self.attribute("custom_call_target")
        return _unquote(value) if value is not None else None

    @property
    def dimensions(self) -> tuple:
        """The integers of the ``dimensions={...}`` attribute (the gathered or scattered axis of a
        collective), or ``()``."""
        value = self.attribute("dimensions")
        return tuple(_ints(value)) if value and value.startswith("{") else ()

    @property
    def metadata(self) -> dict | None:
        """The ``metadata={...}`` fields (``op_name``, ``source_file``, ``source_line``,
        ``stack_frame_id``, ...) as unquoted strings; None where the instruction has no metadata."""
        value = self.attribute("metadata")
        return _fields(value[1:-1]) if value is not None and value.startswith("{") else None

    @property
    def known_trip_count(self) -> int | None:
        """The trip count XLA recorded for a ``while`` (``"known_trip_count"`` of its backend config), or
        None."""
        m = _TRIPS_RE.search(self.attributes)
        return int(m.group(1)) if m else None


_COMMENT_RE = re.compile(r"/\*.*?\*/")


_HEAD_RE = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*")


def parse_instruction(line: str, computation: str | None = None) -> Instruction | None:
    """One line of HLO read as an :class:`Instruction` (``/*...*/`` comments dropped), or None where
    the line is not an instruction (or its shape cannot be read)."""
    line = _COMMENT_RE.sub("", line)
    m = _HEAD_RE.match(line)
    if not m:
        return None
    rest = line[m.end():]
    try:
        if rest.startswith("("):
            end = closing_bracket(rest, 0) + 1
        else:
            end = re.match(r"\S+", rest).end()
        shape_text, rest = rest[:end], rest[end:].lstrip()
        op = re.match(r"([\w\-]+)\(", rest)
        if not op:
            return None
        close = closing_bracket(rest, op.end() - 1)
        operand_text, attrs = rest[op.end():close], rest[close + 1:]
        shape = parse_shape(shape_text)
    except (ValueError, AttributeError):
        return None
    operands = []
    for item in split_top_level(operand_text):
        tokens = item.rsplit(None, 1)
        oshape = None
        if len(tokens) == 2:
            try:
                oshape = parse_shape(tokens[0])
            except ValueError:
                oshape = None
        operands.append(Operand(tokens[-1].lstrip("%"), oshape))
    return Instruction(m.group(1), shape, shape_text, op.group(1), tuple(operands), attrs.strip().lstrip(",").strip(),
                       line.strip(), line.lstrip().startswith("ROOT"), computation)


def async_half(opcode: str) -> tuple[str, str]:
    """``(base opcode, "start" | "done" | "")`` of an opcode: ``all-gather-start`` -> ``("all-gather",
    "start")``, ``async-done`` -> ``("async", "done")``, ``add`` -> ``("add", "")``."""
    for half in ("start", "done"):
        if opcode.endswith("-" + half):
            return opcode[:-len(half) - 1], half
    return opcode, ""


def async_dones(instructions) -> dict:
    """``{start's name: its done}`` over instructions: each ``*-done`` waits on its first operand."""
    return {i.operands[0].name: i for i in instructions if async_half(i.opcode)[1] == "done" and i.operands}


# --------------------------------------------------------------------------
# Computations and modules
# --------------------------------------------------------------------------


@dataclass
class Computation:
    """One computation: its ``name``, its ``instructions`` in text order (a scheduled module prints them
    in the order they run), whether it is the ``ENTRY``, the text of its result shape (``result_text``,
    ``""`` where the text leaves the signature out)
    and the ``execution_thread`` its closing line names (``}, execution_thread="host"``), else None.
    ``computation["add.3"]`` looks an instruction up by name."""

    name: str
    instructions: list = field(default_factory=list)
    is_entry: bool = False
    result_text: str = ""
    execution_thread: str | None = None

    def __post_init__(self):
        self._by_name = {i.name: i for i in self.instructions}

    def add(self, instruction: Instruction) -> None:
        """Append an instruction (as the text lists it)."""
        self.instructions.append(instruction)
        self._by_name.setdefault(instruction.name, instruction)

    def __getitem__(self, name: str) -> Instruction:
        return self._by_name[name]

    def get(self, name: str, default=None):
        """The instruction called ``name``, or ``default``."""
        return self._by_name.get(name, default)

    def __contains__(self, name) -> bool:
        return name in self._by_name

    def __iter__(self):
        return iter(self.instructions)

    def __len__(self) -> int:
        return len(self.instructions)

    @property
    def root(self) -> Instruction | None:
        """The instruction marked ``ROOT``, or None if none is."""
        return next((i for i in self.instructions if i.is_root), None)


@dataclass(frozen=True)
class SourceLocation:
    """Where an instruction came from: the Python ``file``, ``line`` and ``function`` (None where unknown)."""

    file: str | None
    line: int | None
    function: str | None


# A computation's first line: "%name (params) -> result {" (or "ENTRY %name ..."); XLA's parser also
# reads a computation written without its signature, "name {".
_COMPUTATION_RE = re.compile(r"^(ENTRY\s+)?%?([\w.\-]+)\s*(?:\(.*\)\s*->\s*(.+?))?\s*\{\s*$")


_THREAD_RE = re.compile(r'execution_thread="([^"]*)"')


_TABLES = ("FileNames", "FunctionNames", "FileLocations", "StackFrames")


_TABLE_ROW_RE = re.compile(r"^(\d+)\s+(.*)$")


@dataclass
class Module:
    """A whole HLO module: its ``header`` line (``HloModule name, ...``; ``""`` for text without one), its
    ``computations`` by name in text order, the ``entry`` computation's name (None if none is marked),
    ``instructions``: every instruction in text order (with those outside any computation, for text
    that is just instruction lines), and ``tables``: the source tables XLA prints after the computations
    (``FileNames``, ``FunctionNames``, ``FileLocations``, ``StackFrames``: ``{table: {id: row text}}``)."""

    header: str
    computations: dict
    entry: str | None
    instructions: list
    tables: dict

    @property
    def num_devices(self) -> int | None:
        """``num_partitions`` times ``replica_count`` of the header (1 where it names neither, as XLA
        leaves both out when they are 1); None for text without a header."""
        if not self.header:
            return None
        parts = re.search(r"num_partitions=(\d+)", self.header)
        reps = re.search(r"replica_count=(\d+)", self.header)
        return (int(parts.group(1)) if parts else 1) * (int(reps.group(1)) if reps else 1)

    def entry_computation_layout(self) -> tuple[list, list] | None:
        """``(parameter shape texts, result shape texts)`` of the header's ``entry_computation_layout``,
        layouts (and memory spaces ``S(n)``) kept; None where the header has none."""
        m = re.search(r"entry_computation_layout=\{", self.header)
        if not m:
            return None
        body = self.header[m.end():closing_bracket(self.header, m.end() - 1)]
        params_end = closing_bracket(body, 0) + 1
        params = split_top_level(body[1:params_end - 1])
        result = body[params_end:].lstrip()
        result = result[2:].strip() if result.startswith("->") else result
        return params, split_top_level(result[1:-1]) if result.startswith("(") else [result]

    def calls(self) -> dict:
        """``{computation: [(calling instruction, computation it is in)]}`` for every computation (a
        computation calling itself is left out; HLO's call graph has no cycles)."""
        callers = {name: [] for name in self.computations}
        for comp in self.computations.values():
            for ins in comp.instructions:
                for callee in ins.called_computations:
                    if callee in callers and callee != comp.name:
                        callers[callee].append((ins, comp.name))
        return callers

    def source(self, instruction: Instruction) -> SourceLocation:
        """Where ``instruction`` came from: its metadata's ``source_file``/``source_line``, overridden by
        the innermost frame of its ``stack_frame_id`` in the module's tables where it has one."""
        f = instruction.metadata or {}
        file = f.get("source_file")
        number = int(f["source_line"]) if f.get("source_line", "").isdigit() else None
        function = None
        frames, locations = self.tables.get("StackFrames", {}), self.tables.get("FileLocations", {})
        frame = frames.get(int(f["stack_frame_id"])) if f.get("stack_frame_id", "").isdigit() else None
        if frame is not None:
            frame = _fields(frame)
            loc = _fields(locations.get(int(frame.get("file_location_id", -1)), ""))
            files, functions = self.tables.get("FileNames", {}), self.tables.get("FunctionNames", {})
            name = files.get(int(loc.get("file_name_id", -1)))
            file = _unquote(name) if name is not None else file
            name = functions.get(int(loc.get("function_name_id", -1)))
            function = _unquote(name) if name is not None else None
            number = int(loc["line"]) if loc.get("line", "").isdigit() else number
        return SourceLocation(file, number, function)


def parse_module(text: str) -> Module:
    """HLO text (a whole module, or just instruction lines) read as a :class:`Module`.

    A computation opens with ``[ENTRY] %name (parameters) -> result {`` and closes with a line starting
    ``}``; ``/*...*/`` comments are dropped; lines that are neither (blank lines, the source tables)
    are not instructions.
    """
    header = re.search(r"^\s*HloModule\b[^\n]*", text, re.M)
    computations, instructions, tables = {}, [], {}
    entry, current, table = None, None, None
    for raw in text.splitlines():
        stripped = raw.strip()
        if current is None and stripped in _TABLES:
            table = tables.setdefault(stripped, {})
            continue
        if table is not None:
            row = _TABLE_ROW_RE.match(stripped)
            if row:
                table[int(row.group(1))] = row.group(2)
                continue
            if not stripped:                # a blank line does not end a table
                continue
            table = None
        line = _COMMENT_RE.sub("", raw).strip()
        head = _COMPUTATION_RE.match(line)
        if head:
            current = Computation(head.group(2), is_entry=bool(head.group(1)), result_text=head.group(3) or "")
            computations[current.name] = current
            if current.is_entry:
                entry = current.name
            continue
        if line.startswith("}") and current is not None:   # "}" or '}, execution_thread="host"'
            thread = _THREAD_RE.search(line)
            current.execution_thread = thread.group(1) if thread else None
            current = None
            continue
        if "=" not in line:
            continue
        ins = parse_instruction(line, current.name if current is not None else None)
        if ins is not None:
            instructions.append(ins)
            if current is not None:
                current.add(ins)
    return Module(header.group(0).strip() if header else "", computations, entry, instructions, tables)


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
    for item in split_top_level(groups_text):
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


def replica_groups(attrs: str, num_devices: int | None) -> list[list[int]] | None:
    """The groups of device positions of an instruction's ``replica_groups=`` (from its attribute text), or
    None if it has none. Reads the three spellings: explicit ``{{0,1},{2,3}}`` (``{}`` is every device in
    one group, which needs ``num_devices``), iota ``[2,4]<=[8]`` or ``[4,2]<=[2,4]T(1,0)``, and mesh axes
    ``mesh[x=2,y=4]{y}``."""
    key = "replica_groups="
    at = attrs.find(key)
    if at < 0:
        return None
    value = attrs[at + len(key):].lstrip()
    if value.startswith("{"):
        groups = _explicit_groups(value[:closing_bracket(value, 0) + 1])
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


def source_target_pairs(attrs: str) -> list[tuple[int, int]] | None:
    """The ``(source, target)`` position pairs of a collective-permute's ``source_target_pairs=`` (from its
    attribute text), or None if it has none."""
    key = "source_target_pairs="
    at = attrs.find(key)
    if at < 0:
        return None
    value = attrs[at + len(key):].lstrip()
    value = value[:closing_bracket(value, 0) + 1]
    return [tuple(_ints(p)) for p in re.findall(r"\{([^{}]*)\}", value[1:-1])]
