"""Collectives counted per step: a collective inside a ``while`` loop runs once per trip.

A collective inside a ``while`` loop (a ``lax.scan`` or ``fori_loop``, over
microbatches say) is written once in the program's text but runs once per trip.
``collectives_per_step`` reads each collective's loop and the loop's trip count
from the compiled program and multiplies: the bytes each device sends in one
call of the program. The trip count is XLA's ``known_trip_count`` where
the compiler recorded one (XLA:CPU does), else the bound of a provably counted
loop read from the program's text (XLA:TPU records none).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass

from shardlab.programs.collectives import collectives_in_compiled
from shardlab.programs.hlo import _COMMENT_RE as _HLO_COMMENT
from shardlab.programs.hlo import _parse_instruction as _parse_hlo_instruction

__all__ = ['LoopedCollective', 'StepCollectives', 'collectives_per_step']


# --------------------------------------------------------------------------
# Collectives in loops: counted once in the text, run once per trip
# --------------------------------------------------------------------------


_COMPUTATION_HEAD = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*->.*\{\s*$")


_INSTR_NAME = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=")


_CALLED = re.compile(r"(?:calls|to_apply|body|condition|branch_computations)=(\{[^}]*\}|%?[\w.\-]+)")


_TRIPS = re.compile(r'"known_trip_count"\s*:\s*\{\s*"n"\s*:\s*"?(\d+)"?')


_BODY = re.compile(r"body=%?([\w.\-]+)")


def _computations(text: str) -> tuple[dict, str | None]:
    """``({computation name: [its instruction lines]}, name of the ENTRY computation)`` of HLO text."""
    comps, current, entry = {}, None, None
    for line in text.splitlines():
        head = _COMPUTATION_HEAD.match(line)
        if head:
            current = head.group(1)
            comps[current] = []
            if line.startswith("ENTRY"):
                entry = current
        elif line.startswith("}"):
            current = None
        elif current is not None:
            comps[current].append(line)
    return comps, entry


# --- The trip count of a counted loop, where XLA recorded none -------------------------------------------


_COUNTER_SHAPE = re.compile(r"^(s32|s64|u32)\[\]$")      # a scalar s32, s64 or u32


_INDEX = re.compile(r"(?:^|,)\s*index=(\d+)")


_DIRECTION = re.compile(r"(?:^|,)\s*direction=(\w+)")


_CONDITION = re.compile(r"condition=%?([\w.\-]+)")


@dataclass(frozen=True)
class _Instr:
    """One HLO instruction as the loop reading needs it: shape, opcode, operand names (or a constant's
    literal), attributes, and whether it is its computation's ROOT."""

    shape: str
    opcode: str
    operands: tuple
    attrs: str
    root: bool


def _parsed(comps: dict) -> dict:
    """``{computation: {instruction name: _Instr}}`` of :func:`_computations`'s output, each line read
    by the same parser as the collectives (``shardlab.programs.collectives``)."""
    out = {}
    for name, lines in comps.items():
        instrs = {}
        for line in lines:
            ins = _parse_hlo_instruction(_HLO_COMMENT.sub("", line))
            if ins is not None:
                instrs[ins.name] = _Instr(str(ins.shape), ins.opcode, tuple(n for n, _ in ins.operands),
                                          ins.attrs.lstrip(", "), line.lstrip().startswith("ROOT"))
        out[name] = instrs
    return out


_CALLS = re.compile(r"(?:^|,)\s*calls=%?([\w.\-]+)")


def _unwrapped(parsed: dict, instr):
    """A ``fusion`` that wraps one instruction (its computation: ``parameter(0)``, ``parameter(1)``, ...
    and a ROOT reading each parameter once, in order, as XLA:CPU wraps a lone ``add`` or ``compare``)
    as that instruction applied to the fusion's operands; any other instruction unchanged."""
    if instr is None or instr.opcode != "fusion":
        return instr
    called = _CALLS.search(instr.attrs)
    comp = parsed.get(called.group(1)) if called else None
    if not comp:
        return instr
    roots = [i for i in comp.values() if i.root]
    params = {n: i for n, i in comp.items() if i.opcode == "parameter"}
    if len(roots) != 1 or len(comp) != len(params) + 1 or len(params) != len(instr.operands):
        return instr
    root = roots[0]
    if len(root.operands) != len(params) or any(
            op not in params or params[op].operands != (str(n),) for n, op in enumerate(root.operands)):
        return instr
    return _Instr(instr.shape, root.opcode, instr.operands, root.attrs, instr.root)


def _through_copies(instrs: dict, name: str, parsed: dict | None = None):
    """The instruction ``name`` stands for once ``copy`` instructions (which pass their operand's value
    through unchanged) are followed back to their source, and a fusion wrapping one instruction is read
    as that instruction (:func:`_unwrapped`, where ``parsed`` is given); ``None`` if it is not in
    ``instrs``."""
    seen = set()
    while name in instrs and instrs[name].opcode == "copy" and len(instrs[name].operands) == 1 \
            and name not in seen:
        seen.add(name)
        name = instrs[name].operands[0]
    return _unwrapped(parsed, instrs.get(name)) if parsed is not None else instrs.get(name)


def _integer_constant(instr) -> int | None:
    """The value of a scalar s32/s64/u32 ``constant``, else ``None``."""
    if instr is None or instr.opcode != "constant" or not _COUNTER_SHAPE.match(instr.shape) \
            or len(instr.operands) != 1:
        return None
    try:
        return int(instr.operands[0])
    except ValueError:
        return None


def _parameter_element(instrs: dict, name: str) -> int | None:
    """``k`` where ``name`` is (copies of) ``get-tuple-element(parameter(0), index=k)`` of a scalar counter."""
    gte = _through_copies(instrs, name)
    if gte is None or gte.opcode != "get-tuple-element" or len(gte.operands) != 1 \
            or not _COUNTER_SHAPE.match(gte.shape):
        return None
    param = instrs.get(gte.operands[0])
    index = _INDEX.search(gte.attrs)
    if param is None or param.opcode != "parameter" or param.operands != ("0",) or not index:
        return None
    return int(index.group(1))


def _counted_loop_trips(parsed: dict, caller: str, while_name: str) -> int | None:
    """The trip count of the ``while`` instruction ``while_name`` of computation ``caller``, where the
    program's text proves the loop is counted; ``None`` otherwise.

    Accepted, with ``k`` one element of the loop's state, a scalar ``s32``, ``s64`` or ``u32``:

    - the condition's ROOT is ``compare(get-tuple-element(parameter(0), index=k), constant(N)),
      direction=LT``, in that operand order;
    - the body's ROOT is a ``tuple`` whose element ``k`` is ``add`` of ``get-tuple-element(parameter(0),
      index=k)`` and ``constant(1)``, in either order;
    - the ``while``'s operand is a ``tuple`` (in ``caller``) whose element ``k`` is ``constant(0)``.

    A ``copy`` is followed to its operand (XLA:TPU copies the counter between memory spaces before
    adding 1, and the start value before building the tuple; a copy does not change a value), and the
    ``compare`` and the ``add`` may each be a ``fusion`` that wraps that one instruction alone
    (:func:`_unwrapped`; XLA:CPU writes them so). The counter then takes the values 0, 1, ..., N - 1
    in the body, one per trip: N trips (0 if N < 0). Any other form (another direction, step or start,
    a start that is not a constant of ``caller``, a condition with more logic than the one compare, a
    fusion that computes more) gives ``None``.
    """
    instrs = parsed.get(caller, {})
    loop = instrs.get(while_name)
    if loop is None or loop.opcode != "while" or len(loop.operands) != 1:
        return None
    cond_name, body_name = _CONDITION.search(loop.attrs), _BODY.search(loop.attrs)
    if not cond_name or not body_name:
        return None
    cond, body = parsed.get(cond_name.group(1), {}), parsed.get(body_name.group(1), {})
    cond_root = _unwrapped(parsed, next((i for i in cond.values() if i.root), None))
    body_root = next((i for i in body.values() if i.root), None)
    # the condition: counter < N
    if cond_root is None or cond_root.opcode != "compare" or len(cond_root.operands) != 2:
        return None
    direction = _DIRECTION.search(cond_root.attrs)
    if not direction or direction.group(1) != "LT":
        return None
    k = _parameter_element(cond, cond_root.operands[0])
    bound = _integer_constant(_through_copies(cond, cond_root.operands[1]))
    if k is None or bound is None:
        return None
    # the body: element k of the next state is counter + 1
    if body_root is None or body_root.opcode != "tuple" or len(body_root.operands) <= k:
        return None
    step = _through_copies(body, body_root.operands[k], parsed)
    if step is None or step.opcode != "add" or len(step.operands) != 2 or not _COUNTER_SHAPE.match(step.shape):
        return None
    a, b = step.operands
    if not any(_parameter_element(body, x) == k and _integer_constant(_through_copies(body, y)) == 1
               for x, y in ((a, b), (b, a))):
        return None
    # the start: element k of the loop's operand is 0
    init = _through_copies(instrs, loop.operands[0])
    if init is None or init.opcode != "tuple" or len(init.operands) <= k:
        return None
    if _integer_constant(_through_copies(instrs, init.operands[k])) != 0:
        return None
    return max(bound, 0)


def _callers(text: str) -> tuple[dict, dict, str | None]:
    """``(computations, {computation: [(caller, trips, is a while body)]}, ENTRY name)`` of HLO text.

    ``trips`` is the loop's trip count where the computation is a ``while`` body: XLA's
    ``known_trip_count``, else the bound of a counted loop (:func:`_counted_loop_trips`), else ``None``;
    1 for any other call.
    """
    comps, entry = _computations(text)
    parsed = None
    callers: dict = {name: [] for name in comps}
    for name, lines in comps.items():
        for line in lines:
            body = _BODY.search(line) if " while(" in line else None
            trips = None
            if body:
                m = _TRIPS.search(line)
                if m:
                    trips = int(m.group(1))
                else:
                    parsed = parsed if parsed is not None else _parsed(comps)
                    head = _INSTR_NAME.match(line)
                    trips = _counted_loop_trips(parsed, name, head.group(1)) if head else None
            for m in _CALLED.finditer(line):
                for callee in m.group(1).strip("{}").split(","):
                    callee = callee.strip().lstrip("%")
                    if callee in callers and callee != name:
                        is_body = bool(body) and callee == body.group(1)
                        callers[callee].append((name, trips if is_body else 1, is_body))
    return comps, callers, entry


def _loop_depths(text: str) -> dict:
    """``{instruction name: how many while-loop bodies enclose it}`` (the most over its call sites)."""
    from functools import cache

    comps, callers, entry = _callers(text)

    @cache
    def depth(name):
        if name == entry or not callers[name]:
            return 0
        return max(depth(caller) + is_body for caller, _, is_body in callers[name])

    return {m.group(1): depth(name) for name, lines in comps.items() for line in lines
            if (m := _INSTR_NAME.match(line))}


def _loop_trips(text: str) -> dict:
    """``{instruction name: how many times one call of the program runs it}``.

    The ENTRY computation runs once; a computation runs as many times as the computations that call it,
    times the trip count where it is a ``while`` body, summed over its call sites. ``None`` where a loop
    on the way has no recorded trip count.
    """
    from functools import cache

    comps, callers, entry = _callers(text)

    @cache
    def runs(name):                 # HLO's call graph has no cycles
        if name == entry or not callers[name]:
            return 1
        total = 0
        for caller, factor, _ in callers[name]:
            r = runs(caller)
            if r is None or factor is None:
                return None
            total += r * factor
        return total                # 0 under a loop of no trips

    trips_of = {}
    for name, lines in comps.items():
        for line in lines:
            m = _INSTR_NAME.match(line)
            if m:
                trips_of[m.group(1)] = runs(name)
    return trips_of


@dataclass(frozen=True)
class LoopedCollective:
    """One collective of a compiled program, how many times one call runs it (``trips``) and how many
    ``while`` loops enclose it (``loops``).

    ``trips`` is the product of the trip counts of the loops around the collective: each loop's
    ``known_trip_count`` where XLA recorded one, else the bound of a counted loop read from its
    condition (see :func:`collectives_per_step`); ``None`` where a loop around it has neither.
    """

    collective: object
    trips: int | None
    loops: int = 0

    @property
    def bytes_per_step(self):
        """Modelled bytes one device sends over all trips (the ring model, see ``shardlab.layout.ring_bytes``)."""
        return None if self.trips is None else self.collective.bytes_per_device * self.trips


class StepCollectives(tuple):
    """The :class:`LoopedCollective` items of one program; ``bytes_per_step`` adds them up."""

    @property
    def bytes_per_step(self):
        """Modelled bytes one device sends in one call, each collective times its trips."""
        values = [c.bytes_per_step for c in self]
        return None if any(v is None for v in values) else sum(values)

    def kinds(self) -> Counter:
        """How many collectives of each kind one call runs: ``Counter({"all-reduce": 4, ...})``
        (a kind under a loop of unknown trip count is left out)."""
        counts = Counter()
        for c in self:
            if c.trips is not None:
                counts[c.collective.kind] += c.trips
        return counts

    @property
    def runs(self) -> int | None:
        """How many collectives one call runs (each counted once per trip)."""
        values = [c.trips for c in self]
        return None if any(v is None for v in values) else sum(values)

    def __str__(self) -> str:
        if not self:
            return "No collectives."
        lines = [f"{c.collective.kind} {c.collective._shapes_text()}: "
                 + (f"inside {c.loops} loop(s) of unknown trip count" if c.trips is None else
                    "runs once" if c.trips == 1 else
                    f"runs {c.trips} times (inside {'a loop' if c.loops == 1 else f'{c.loops} loops'})")
                 for c in self]
        return "\n".join(lines + [f"modelled bytes per device per call: {self.bytes_per_step:,}"
                                  if self.bytes_per_step is not None else "trip count unknown"])

    def __repr__(self) -> str:
        return str(self)


def collectives_per_step(compiled) -> StepCollectives:
    """The collectives of a compiled program, each with the number of times one call runs it.

    ``compiled`` is what ``jax.jit(f).lower(...).compile()`` returns (or a
    :class:`~shardlab.CompiledProgram`). A collective in the body of a ``while`` loop runs once
    per trip. A loop's trip count is the one XLA recorded for it (``known_trip_count``, which
    XLA:CPU writes). XLA:TPU records none; there the trip count is read from the program's text
    where the loop is provably a counted one: a scalar integer counter that starts at the constant
    0, goes up by the constant 1 each trip, and whose condition is ``counter < N`` for a constant
    ``N`` (the loop a ``lax.scan`` compiles to); then it makes ``N`` trips. ``copy``
    instructions on the way are passed through, and so is a ``fusion`` that wraps the one ``add``
    or ``compare`` alone. Where a loop has neither (another condition, step or start), ``trips`` is
    ``None`` and ``loops`` still says how many loops enclose the collective.
    """
    compiled = getattr(compiled, "compiled", compiled)
    if not hasattr(compiled, "as_text"):
        raise ValueError("collectives_per_step: compiled must be a compiled program "
                         f"(jax.jit(f).lower(...).compile()), got {type(compiled).__name__}")
    report = collectives_in_compiled(compiled)
    text = compiled.as_text()
    trips, depths = _loop_trips(text), _loop_depths(text)
    return StepCollectives(LoopedCollective(c, trips.get(c.name, 1), depths.get(c.name, 0)) for c in report)
