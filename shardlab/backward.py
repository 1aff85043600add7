"""Where the backward pass communicates: collectives of a gradient program, loops counted per trip.

``transposed_collectives(f, *args)`` compiles two programs, ``f`` itself and its
backward pass alone (``jax.vjp``'s function applied to a cotangent shaped like
``f``'s output), and reads the collectives of each from compiled code: which
collective the forward one becomes when it is transposed. ``transpose_table``
puts several such pairs side by side.

A collective inside a ``while`` loop (a ``lax.scan`` or ``fori_loop``, over
microbatches say) is written once in the program's text but runs once per trip.
``collectives_per_step`` reads each collective's loop and the loop's trip count
from the compiled program and multiplies: the modelled bytes each device sends
in one call of the program. ``split_microbatches`` cuts a batch into microbatches.
"""

from __future__ import annotations

import html
import re
from collections import Counter
from dataclasses import dataclass

from shardlab.compiled import CollectiveReport, collectives_in, collectives_in_compiled

__all__ = ["Transpose", "TransposeTable", "LoopedCollective", "StepCollectives", "transposed_collectives",
           "transpose_table", "collectives_per_step", "split_microbatches"]


# --------------------------------------------------------------------------
# Forward collective -> backward collective
# --------------------------------------------------------------------------

@dataclass(frozen=True)
class Transpose:
    """The collectives of a function's forward program and of its backward pass alone.

    Both are :class:`~shardlab.CollectiveReport` read from compiled code.
    """

    forward: CollectiveReport
    backward: CollectiveReport

    @staticmethod
    def _kinds(report: CollectiveReport) -> str:
        return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(report.kinds().items())) or "none"

    @property
    def forward_kinds(self) -> str:
        """The forward program's collectives in words (``"none"`` if it has none)."""
        return self._kinds(self.forward)

    @property
    def backward_kinds(self) -> str:
        """The backward program's collectives in words (``"none"`` if it has none)."""
        return self._kinds(self.backward)


def transposed_collectives(f, *args) -> Transpose:
    """Compile ``f(*args)`` and its backward pass, and read the collectives of each.

    The backward program is ``jax.vjp(f, *args)[1]`` applied to a cotangent with the type of
    ``f``'s output (it is compiled, not run): only what the backward pass needs stays in it, so
    its collectives are the backward pass's own. ``f`` must return one array. Call it under
    ``jax.set_mesh`` where ``f`` needs a mesh.
    """
    import jax

    if not callable(f):
        raise ValueError(f"transposed_collectives: f must be a function, got {type(f).__name__}")
    if not args:
        raise ValueError("transposed_collectives: args must hold at least one example argument")
    out = jax.eval_shape(f, *args)
    if not hasattr(out, "shape"):
        raise ValueError(f"transposed_collectives: f must return one array, got {type(out).__name__}")

    def backward(primals, cotangent):
        return jax.vjp(f, *primals)[1](cotangent)

    sharding = getattr(out, "sharding", None)
    cotangent = jax.ShapeDtypeStruct(out.shape, out.dtype, sharding=sharding)
    return Transpose(collectives_in(f, *args), collectives_in(backward, args, cotangent))


class TransposeTable:
    """Named :class:`Transpose` pairs, shown as a table (HTML in a notebook, text elsewhere)."""

    def __init__(self, rows: dict):
        self.rows = dict(rows)

    def __getitem__(self, name) -> Transpose:
        return self.rows[name]

    def _lines(self):
        return [(name, t.forward_kinds, t.backward_kinds) for name, t in self.rows.items()]

    def __str__(self) -> str:
        head = ("forward", "collectives in the forward program", "collectives in the backward program")
        rows = [head, *self._lines()]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        esc = html.escape
        body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>" for r in self._lines())
        return ("<table><thead><tr><th>forward</th><th>collectives in the forward program</th>"
                "<th>collectives in the backward program</th></tr></thead>"
                f"<tbody>{body}</tbody></table>")


def transpose_table(cases: dict) -> TransposeTable:
    """:func:`transposed_collectives` for each ``{name: (f, args)}``, as one table."""
    if not isinstance(cases, dict) or not cases:
        raise ValueError("transpose_table: cases must be a non-empty dict {name: (f, args)}")
    rows = {}
    for name, case in cases.items():
        if not (isinstance(case, tuple) and len(case) == 2 and isinstance(case[1], tuple)):
            raise ValueError(f"transpose_table: cases[{name!r}] must be a pair (f, args) with args a tuple")
        rows[name] = transposed_collectives(case[0], *case[1])
    return TransposeTable(rows)


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


def _callers(text: str) -> tuple[dict, dict, str | None]:
    """``(computations, {computation: [(caller, trips, is a while body)]}, ENTRY name)`` of HLO text.

    ``trips`` is the loop's recorded trip count where the computation is a ``while`` body (``None`` if
    XLA recorded none), 1 for any other call.
    """
    comps, entry = _computations(text)
    callers: dict = {name: [] for name in comps}
    for name, lines in comps.items():
        for line in lines:
            body = _BODY.search(line) if " while(" in line else None
            trips = None
            if body:
                m = _TRIPS.search(line)
                trips = int(m.group(1)) if m else None
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
        if name == entry:
            return 1
        total = 0
        for caller, factor, _ in callers[name]:
            r = runs(caller)
            if r is None or factor is None:
                return None
            total += r * factor
        return total or 1

    trips_of = {}
    for name, lines in comps.items():
        for line in lines:
            m = _INSTR_NAME.match(line)
            if m:
                trips_of[m.group(1)] = runs(name)
    return trips_of


@dataclass(frozen=True)
class LoopedCollective:
    """One collective of a compiled program, how many times one call runs it (``trips``; ``None``
    where a loop around it has no known trip count) and how many ``while`` loops enclose it (``loops``)."""

    collective: object
    trips: int | None
    loops: int = 0

    @property
    def bytes_per_step(self):
        """Modelled bytes one device sends over all trips (the ring model, see ``shardlab.cost_model``)."""
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
                    "runs once" if c.trips == 1 else f"runs {c.trips} times (inside a loop)")
                 for c in self]
        return "\n".join(lines + [f"modelled bytes per device per call: {self.bytes_per_step:,}"
                                  if self.bytes_per_step is not None else "trip count unknown"])

    def __repr__(self) -> str:
        return str(self)


def collectives_per_step(compiled) -> StepCollectives:
    """The collectives of a compiled program, each with the number of times one call runs it.

    ``compiled`` is what ``jax.jit(f).lower(...).compile()`` returns (or a
    :class:`~shardlab.CompiledProgram`). A collective in the body of a ``while`` loop runs once
    per trip; the trip count is the one XLA recorded for the loop (``known_trip_count``). Where XLA
    recorded none (XLA:TPU's loops, for one), ``trips`` is ``None`` and ``loops`` still says how many
    loops enclose the collective.
    """
    compiled = getattr(compiled, "compiled", compiled)
    if not hasattr(compiled, "as_text"):
        raise ValueError("collectives_per_step: compiled must be a compiled program "
                         f"(jax.jit(f).lower(...).compile()), got {type(compiled).__name__}")
    report = collectives_in_compiled(compiled)
    text = compiled.as_text()
    trips, depths = _loop_trips(text), _loop_depths(text)
    return StepCollectives(LoopedCollective(c, trips.get(c.name, 1), depths.get(c.name, 0)) for c in report)


# --------------------------------------------------------------------------
# Microbatches
# --------------------------------------------------------------------------

def split_microbatches(batch, n: int):
    """Reshape a batch ``(B, ...)`` into ``n`` microbatches ``(n, B // n, ...)``, for a ``lax.scan``.

    Microbatch ``i`` is rows ``i * B // n`` to ``(i + 1) * B // n`` of the batch. Give it a host
    (NumPy) array and place the result with ``P(None, "batch axis")``: each microbatch is then
    split over the devices as the whole batch was.
    """
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"split_microbatches: n must be a positive integer, got {n!r}")
    shape = getattr(batch, "shape", None)
    if shape is None or len(shape) < 1:
        raise ValueError("split_microbatches: batch must be an array with a leading batch axis")
    if shape[0] % n:
        raise ValueError(f"split_microbatches: n={n} must divide the batch size {shape[0]}")
    return batch.reshape((n, shape[0] // n, *shape[1:]))
