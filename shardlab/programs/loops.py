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

import dataclasses
import re
from collections import Counter
from dataclasses import dataclass
from functools import cache

from shardlab.programs.collectives import collectives_in_compiled
from shardlab.programs.hlo import Array, Computation, Instruction, Module, parse_module

__all__ = ["LoopedCollective", "StepCollectives", "collectives_per_step"]


# --------------------------------------------------------------------------
# Collectives in loops: counted once in the text, run once per trip
# --------------------------------------------------------------------------


# --- The trip count of a counted loop, where XLA recorded none -------------------------------------------


_NONE = Computation("")         # what a missing computation reads as: no instructions


def _is_counter(instr: Instruction) -> bool:
    """Whether the instruction gives a scalar s32, s64 or u32 (a loop counter's type)."""
    return isinstance(instr.shape, Array) and instr.shape.dtype in ("s32", "s64", "u32") and instr.shape.shape == ()


def _unwrapped(module: Module, instr):
    """A ``fusion`` that wraps one instruction (its computation: ``parameter(0)``, ``parameter(1)``, ...
    and a ROOT reading each parameter once, in order, as XLA:CPU wraps a lone ``add`` or ``compare``)
    as that instruction applied to the fusion's operands; any other instruction unchanged."""
    if instr is None or instr.opcode != "fusion":
        return instr
    called = instr.called("calls")
    comp = module.computations.get(called) if called else None
    if not comp:
        return instr
    roots = [i for i in comp if i.is_root]
    params = {i.name: i for i in comp if i.opcode == "parameter"}
    if len(roots) != 1 or len(comp) != len(params) + 1 or len(params) != len(instr.operands):
        return instr
    root = roots[0]
    if len(root.operands) != len(params) or any(
            op not in params or params[op].operand_names != (str(n),) for n, op in enumerate(root.operand_names)):
        return instr
    return dataclasses.replace(instr, opcode=root.opcode, attributes=root.attributes)


def _through_copies(comp: Computation, name: str, module: Module | None = None):
    """The instruction ``name`` stands for once ``copy`` instructions (which pass their operand's value
    through unchanged) are followed back to their source, and a fusion wrapping one instruction is read
    as that instruction (:func:`_unwrapped`, where ``module`` is given); ``None`` if it is not in
    ``comp``."""
    seen = set()
    while name in comp and comp[name].opcode == "copy" and len(comp[name].operands) == 1 and name not in seen:
        seen.add(name)
        name = comp[name].operand_names[0]
    return _unwrapped(module, comp.get(name)) if module is not None else comp.get(name)


def _integer_constant(instr) -> int | None:
    """The value of a scalar s32/s64/u32 ``constant``, else ``None``."""
    if instr is None or instr.opcode != "constant" or not _is_counter(instr) or len(instr.operands) != 1:
        return None
    try:
        return int(instr.operand_names[0])
    except ValueError:
        return None


def _parameter_element(comp: Computation, name: str) -> int | None:
    """``k`` where ``name`` is (copies of) ``get-tuple-element(parameter(0), index=k)`` of a scalar counter."""
    gte = _through_copies(comp, name)
    if gte is None or gte.opcode != "get-tuple-element" or len(gte.operands) != 1 or not _is_counter(gte):
        return None
    param = comp.get(gte.operand_names[0])
    index = gte.attribute("index")
    if param is None or param.opcode != "parameter" or param.operand_names != ("0",) \
            or not re.fullmatch(r"\d+", index or ""):
        return None
    return int(index)


def _counted_loop_trips(module: Module, caller: Computation, loop: Instruction) -> int | None:
    """The trip count of the ``while`` instruction ``loop`` of computation ``caller``, where the
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
    if loop.opcode != "while" or len(loop.operands) != 1:
        return None
    cond_name, body_name = loop.called("condition"), loop.called("body")
    if not cond_name or not body_name:
        return None
    cond, body = module.computations.get(cond_name, _NONE), module.computations.get(body_name, _NONE)
    cond_root = _unwrapped(module, cond.root)
    body_root = body.root
    # the condition: counter < N
    if cond_root is None or cond_root.opcode != "compare" or len(cond_root.operands) != 2:
        return None
    if cond_root.attribute("direction") != "LT":
        return None
    k = _parameter_element(cond, cond_root.operand_names[0])
    bound = _integer_constant(_through_copies(cond, cond_root.operand_names[1]))
    if k is None or bound is None:
        return None
    # the body: element k of the next state is counter + 1
    if body_root is None or body_root.opcode != "tuple" or len(body_root.operands) <= k:
        return None
    step = _through_copies(body, body_root.operand_names[k], module)
    if step is None or step.opcode != "add" or len(step.operands) != 2 or not _is_counter(step):
        return None
    a, b = step.operand_names
    if not any(_parameter_element(body, x) == k and _integer_constant(_through_copies(body, y)) == 1
               for x, y in ((a, b), (b, a))):
        return None
    # the start: element k of the loop's operand is 0
    init = _through_copies(caller, loop.operand_names[0])
    if init is None or init.opcode != "tuple" or len(init.operands) <= k:
        return None
    if _integer_constant(_through_copies(caller, init.operand_names[k])) != 0:
        return None
    return max(bound, 0)


def _callers(module: Module) -> dict:
    """``{computation: [(caller, trips, is a while body)]}`` of a module.

    ``trips`` is the loop's trip count where the computation is a ``while`` body: XLA's
    ``known_trip_count``, else the bound of a counted loop (:func:`_counted_loop_trips`), else ``None``;
    1 for any other call.
    """
    callers: dict = {name: [] for name in module.computations}
    for callee, calls in module.calls().items():
        for ins, caller in calls:
            is_body = ins.opcode == "while" and ins.called("body") == callee
            trips = 1
            if is_body:
                trips = ins.known_trip_count
                if trips is None:
                    trips = _counted_loop_trips(module, module.computations[caller], ins)
            callers[callee].append((caller, trips, is_body))
    return callers


def _loop_depths(text: str) -> dict:
    """``{instruction name: how many while-loop bodies enclose it}`` (the most over its call sites)."""
    module = parse_module(text)
    callers = _callers(module)

    @cache
    def depth(name):
        if name == module.entry or not callers[name]:
            return 0
        return max(depth(caller) + is_body for caller, _, is_body in callers[name])

    return {ins.name: depth(comp.name) for comp in module.computations.values() for ins in comp}


def _loop_trips(text: str) -> dict:
    """``{instruction name: how many times one call of the program runs it}``.

    The ENTRY computation runs once; a computation runs as many times as the computations that call it,
    times the trip count where it is a ``while`` body, summed over its call sites. ``None`` where a loop
    on the way has no recorded trip count.
    """
    module = parse_module(text)
    callers = _callers(module)

    @cache
    def runs(name):                 # HLO's call graph has no cycles
        if name == module.entry or not callers[name]:
            return 1
        total = 0
        for caller, factor, _ in callers[name]:
            r = runs(caller)
            if r is None or factor is None:
                return None
            total += r * factor
        return total                # 0 under a loop of no trips

    return {ins.name: runs(comp.name) for comp in module.computations.values() for ins in comp}


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
