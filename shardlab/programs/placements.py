"""Memory placements: where a program keeps its buffers, read from its text.

:func:`memory_placements` reads the memory placement out of the text of a
lowered module (``jax.jit(f).lower(...).as_text()``) or a compiled one
(``.compile().as_text()``), so that a chapter shows where a transfer appears
instead of asserting it. Which memories a device has is :mod:`shardlab.hardware.memory_kinds`.

Compiled text is HLO, read by :mod:`shardlab.programs.hlo`. Lowered text is StableHLO, a dialect of
MLIR and another language (``tensor<4x8xf32>`` types, ``func.func @main(...)``, quoted attributes):
the small reader of ``main``'s signature and its custom calls here is for that text alone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardlab.programs.hlo import parse_module, split_top_level

__all__ = ["Placement", "memory_placements", "HOST_MEMORY_SPACE"]


# XLA's number for the host memory space in a buffer layout, e.g. f32[8]{0:S(5)}.
HOST_MEMORY_SPACE = 5


# The custom calls through which JAX and XLA mark a buffer's memory inside a program.
_PLACEMENT_CALLS = ("annotate_device_placement", "MoveToHost", "MoveToDevice")


# ----------------------------------------------------------------------------------------------
# Where a lowered or compiled program keeps its buffers
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Placement:
    """One buffer whose memory the program text states.

    ``where``: "input 0", "output 1", or the instruction ("%3 = annotate_device_placement(%2)").
    ``shape``: its type as the text writes it (``tensor<4x8xf32>`` lowered, ``f32[2,2]`` compiled:
    compiled shapes are per device). ``memory``: the memory kind (lowered text) or, in compiled
    text, ``"host"`` for XLA memory space 5, ``"device"`` for the default space, ``"S(n)"`` otherwise;
    for an asynchronous copy (``copy-start``), ``"<destination> from <source>"``.
    ``evidence``: the fragment of the text that says so (in compiled text, the layout).
    """

    where: str
    shape: str
    memory: str
    evidence: str

    def __str__(self) -> str:
        return f"{self.where:<38} {self.shape:<16} {self.memory:<17} {self.evidence}"


# The lowered text is StableHLO (MLIR), not HLO: its types use angle brackets (tensor<4x8xf32>) and its
# attributes quoted strings, so it has its own two bracket helpers below; compiled text is read by
# shardlab.programs.hlo.


def _mlir_closing(text: str, start: int) -> int:
    """Index just past the MLIR bracket group opening at ``text[start]`` (skips quoted strings)."""
    pairs = {"(": ")", "[": "]", "{": "}", "<": ">"}
    stack = []
    i = start
    while i < len(text):
        c = text[i]
        if c == '"':
            i = text.index('"', i + 1) + 1
            continue
        if c == "-" and text.startswith("->", i):  # an arrow, not a closing angle bracket
            i += 2
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i + 1
        i += 1
    raise ValueError("text has an unbalanced bracket group")


def _mlir_split(text: str) -> list[str]:
    """MLIR text split at commas that are not inside brackets (angle brackets too) or quotes."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c == '"':
            j = text.index('"', i + 1) + 1
            cur.append(text[i:j])
            i = j
            continue
        if c == "-" and text.startswith("->", i):
            cur.append("->")
            i += 2
            continue
        if c in "([{<":
            depth += 1
        elif c in ")]}>":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur).strip())
            cur = []
        else:
            cur.append(c)
        i += 1
    if "".join(cur).strip():
        parts.append("".join(cur).strip())
    return parts


_MEMORY_KIND = re.compile(r'mhlo\.memory_kind\s*=\s*"([^"]+)"')


_ANNOTATION = re.compile(
    r'(%[\w#.]+)\s*=\s*stablehlo\.custom_call\s+@(\w+)\(([^)]*)\).*?_xla_buffer_placement\s*=\s*"([^"]+)"'
    r'.*->\s*(\S+)\s*$'
)


def _lowered_placements(text: str) -> list[Placement]:
    found = []
    m = re.search(r"func\.func\s+public\s+@main\(", text)
    if m:
        open_at = m.end() - 1
        close_at = _mlir_closing(text, open_at)
        for i, arg in enumerate(_mlir_split(text[open_at + 1:close_at - 1])):
            kind = _MEMORY_KIND.search(arg)
            typ = re.match(r"%[\w#]+\s*:\s*(\S+?>|\S+)", arg)
            found.append(Placement(f"input {i}", typ.group(1) if typ else "?",
                                   kind.group(1) if kind else "device (default)",
                                   kind.group(0) if kind else "no mhlo.memory_kind"))
        rest = text[close_at:].lstrip()
        if rest.startswith("->"):
            rest = rest[2:].lstrip()
            if rest.startswith("("):
                results = _mlir_split(rest[1:_mlir_closing(rest, 0) - 1])
            else:  # one result without attributes (attributes force parentheses); "{" opens the body
                results = [rest[:_mlir_closing(rest, rest.index("<"))] if "<" in rest.split()[0] else rest.split()[0]]
            for i, res in enumerate(results):
                kind = _MEMORY_KIND.search(res)
                found.append(Placement(f"output {i}", res.split()[0],
                                       kind.group(1) if kind else "device (default)",
                                       kind.group(0) if kind else "no mhlo.memory_kind"))
    for line in text.splitlines():
        a = _ANNOTATION.search(line)
        if a and a.group(2) in _PLACEMENT_CALLS:
            name, target, operands, kind, typ = a.groups()
            found.append(Placement(f"{name} = {target}({operands})", typ, kind,
                                   f'_xla_buffer_placement = "{kind}"'))
    return found


_SPACE = re.compile(r"S\((\d+)\)")


def _space_name(shape: str) -> str:
    """The memory of an HLO shape with layout such as ``f32[2,2]{1,0:S(5)}`` (no S(n): device)."""
    spaces = {int(s) for s in _SPACE.findall(shape)} - {0}
    if not spaces:
        return "device"
    return "/".join(sorted("host" if s == HOST_MEMORY_SPACE else f"S({s})" for s in spaces))


def _bare_shape(shape: str) -> str:
    # f32[2,2]{1,0:S(5)} -> f32[2,2]; tuples keep their elements' bare shapes.
    return re.sub(r"\{[^{}]*\}", "", shape)


def _compiled_placements(text: str) -> list[Placement]:
    found = []
    module = parse_module(text)
    layout = module.entry_computation_layout()
    if layout is not None:
        for label, shapes in zip(("input", "output"), layout):
            for i, shape in enumerate(shapes):
                found.append(Placement(f"{label} {i}", _bare_shape(shape), _space_name(shape), shape))
    for ins in module.instructions:
        shape, target = ins.shape_text, ins.custom_call_target
        is_move = target in _PLACEMENT_CALLS
        spaces = {int(s) for s in _SPACE.findall(shape)} - {0}
        if not (is_move or spaces):
            continue
        what = f"%{ins.name} = {target if is_move else ins.opcode}"
        memory = _space_name(shape)
        if ins.opcode == "copy-start" and shape.startswith("("):
            # (destination, source, context): say the direction, not the union of the spaces.
            dest, src = split_top_level(shape[1:-1])[:2]
            memory = f"{_space_name(dest)} from {_space_name(src)}"
        found.append(Placement(what, _bare_shape(shape), memory,
                               f'custom_call_target="{target}"' if is_move else shape))
    return found


def memory_placements(text: str) -> list[Placement]:
    """Every buffer whose memory a lowered or compiled program's text states.

    ``text`` is ``jax.jit(f).lower(...).as_text()`` (StableHLO: memory kinds on the
    inputs and outputs of ``main``, and ``annotate_device_placement`` custom calls
    that move a value inside the program) or ``.compile().as_text()`` (HLO: the
    memory space in each entry input/output layout, ``S(5)`` being host memory,
    and instructions whose result lives outside device memory or that are
    ``MoveToHost``/``MoveToDevice`` calls). Inputs and outputs are always listed,
    also when they are in device memory.
    """
    if not isinstance(text, str):
        raise ValueError(f"text must be the str from .as_text(), got {type(text).__name__}")
    stripped = text.lstrip()
    if stripped.startswith("HloModule"):
        return _compiled_placements(text)
    if stripped.startswith("module") or "func.func" in text:
        return _lowered_placements(text)
    raise ValueError("text must be a lowered module ('module @...') or compiled HLO ('HloModule ...')")
