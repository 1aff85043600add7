"""The schedule a compiler chose: what runs in which order, and what hides behind each asynchronous collective.

Two readers of a compiled program's *scheduled* order (XLA prints a scheduled module's instructions in
the order they run): :func:`scheduled_order` lists the instructions of one computation with what each
is (an asynchronous collective's start or done, a synchronous collective, a product, other work), and
:func:`async_windows` pairs every ``*-start`` with its ``*-done`` and names the products scheduled
between them, the work a device can do while that collective's bytes travel.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardlab.programs.hlo import Module, async_half, parse_instruction, parse_module

__all__ = ["ScheduledOp", "AsyncWindow", "scheduled_order", "async_windows", "loop_bodies", "windowed_loops"]


_COLLECTIVES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
                "collective-broadcast", "ragged-all-to-all")


_PRODUCTS = ("dot", "convolution")


@dataclass(frozen=True)
class ScheduledOp:
    """One instruction of a computation, at its place in the schedule.

    ``kind`` is ``"start"`` or ``"done"`` (the two halves of an asynchronous collective, or of XLA:TPU's
    fusions marked ``AsyncCollectiveStart``/``AsyncCollectiveDone``),
    ``"collective"`` (a synchronous one, or a fusion that runs one: XLA:TPU's ``all-reduce-scatter``
    fusion is read as the reduce-scatter it is), ``"product"`` (a ``dot`` or ``convolution``, or a fusion
    whose body holds one), ``"loop"`` (a ``while``) or ``"other"``; ``collective`` names the
    collective for the first three (``"collective-permute"``, ...), else it is ``""``.
    """

    position: int
    name: str
    opcode: str
    kind: str
    collective: str
    line: str


@dataclass(frozen=True)
class AsyncWindow:
    """An asynchronous collective: where its start and its done sit, and the products scheduled between.

    ``products`` are the names of the ``"product"`` instructions between ``start_position`` and
    ``done_position``: the compute the schedule lets run while the collective's bytes travel.
    """

    collective: str
    start: str
    done: str
    start_position: int
    done_position: int
    products: tuple

    @property
    def overlapped(self) -> bool:
        """Whether at least one product is scheduled between the start and the done."""
        return bool(self.products)


def _text_of(compiled_or_text, where: str) -> str:
    if isinstance(compiled_or_text, str):
        return compiled_or_text
    text = getattr(compiled_or_text, "text", None)          # a shardlab CompiledProgram
    if isinstance(text, str):
        return text
    as_text = getattr(compiled_or_text, "as_text", None)    # a jax Compiled
    if callable(as_text):
        return as_text()
    raise ValueError(f"{where}: compiled must be HLO text, a compiled program (.as_text()) or a "
                     f"shardlab.CompiledProgram, got {type(compiled_or_text).__name__}")


def _holds_product(name: str, module: Module, seen: set) -> bool:
    if name in seen or name not in module.computations:
        return False
    seen.add(name)
    for instr in module.computations[name]:
        if instr.opcode in _PRODUCTS:
            return True
        if any(_holds_product(called, module, seen) for called in _calls(instr)):
            return True
    return False


def _calls(instr) -> list:
    """The computations an instruction's ``calls=`` names (a fusion's, an async wrapper's)."""
    value = instr.attribute("calls")
    return [n.strip().lstrip("%") for n in value.strip("{}").split(",") if n.strip()] if value else []


def _first_collective(name: str, module: Module) -> str:
    comp = module.computations.get(name)
    return next((i.opcode for i in comp if i.opcode in _COLLECTIVES), "") if comp is not None else ""


def _async_fusion(name: str, module: Module) -> tuple[str, str]:
    """For XLA:TPU's asynchronous collective fusions, ``("start", collective)`` or ``("done", collective)``.

    XLA:TPU overlaps a collective with other work by writing it as three fusions: a start (named
    ``async-collective-start``) whose fused computation's root is a custom-call to
    ``AsyncCollectiveStart``, the work that runs meanwhile (an ``async_collective_fusion``, holding a
    copy of the collective beside the product), and a done (``async-collective-done``) whose root calls
    ``AsyncCollectiveDone``. ``("", "")`` for any other fused computation.
    """
    comp = module.computations.get(name)
    root = comp.root if comp is not None else None
    target = root.custom_call_target if root is not None else None
    if target in ("AsyncCollectiveStart", "AsyncCollectiveDone"):
        return target[len("AsyncCollective"):].lower(), _first_collective(name, module)
    return "", ""


def _fused_collective(name: str, module: Module) -> str:
    """The collective a fused computation runs synchronously (XLA:TPU's ``all-reduce-scatter`` fusion: an
    all-reduce and a slice, the reduce-scatter it is), or ``""``: none, or one marked as an asynchronous
    start or done (``AsyncCollectiveStart``/``Done``), which is not a synchronous collective."""
    comp = module.computations.get(name)
    if comp is None or any("AsyncCollective" in i.line for i in comp) or name.startswith("async_collective_fusion"):
        return ""                           # the halves of an asynchronous collective, or work beside it
    inner = _first_collective(name, module)
    if inner == "all-reduce" and name.startswith("all-reduce-scatter"):
        return "reduce-scatter"
    return inner


def _classify(instr, module: Module) -> tuple[str, str]:
    op = instr.opcode
    base, half = async_half(op)
    if half and base in _COLLECTIVES:
        return half, base
    if op in _COLLECTIVES:
        return "collective", op
    called = _calls(instr)[:1]
    if op in ("async-start", "async-done"):                 # a collective wrapped in an async computation
        inner = ""
        if called:
            comp = module.computations.get(called[0])
            inner = next((i.opcode for i in reversed(comp.instructions) if i.opcode in _COLLECTIVES), "") \
                if comp is not None else ""
        if inner:
            return half, inner
    if op in _PRODUCTS:
        return "product", ""
    if op == "fusion-start":                                # XLA:GPU: a fusion launched on another stream
        if called and _holds_product(called[0], module, set()):
            return "product", ""
    if op == "fusion":
        if called:
            fusion_half, inner = _async_fusion(called[0], module)
            if fusion_half:
                return fusion_half, inner
        if called and _holds_product(called[0], module, set()):
            return "product", ""
        inner = _fused_collective(called[0], module) if called else ""
        if inner:
            return "collective", inner
    if op == "while":
        return "loop", ""
    return "other", ""


def scheduled_order(compiled, computation: str | None = None) -> list[ScheduledOp]:
    """The instructions of one computation of a compiled program, in the order the schedule runs them.

    ``compiled`` is HLO text, a compiled program (anything with ``.as_text()``) or a
    :class:`shardlab.CompiledProgram`; ``computation`` names one computation (default: the entry
    computation). A compiled module is scheduled, and its text lists each computation's
    instructions in that order.
    """
    module = parse_module(_text_of(compiled, "scheduled_order"))
    bodies, entry = module.computations, module.entry
    if computation is None:
        if entry is None:
            raise ValueError("scheduled_order: compiled has no ENTRY computation")
        computation = entry
    elif computation not in bodies:
        raise ValueError(f"scheduled_order: computation {computation!r} is not in the program "
                         f"(it has {len(bodies)} computations, the entry is {entry!r})")
    ops, async_starts = [], {}
    for instr in bodies[computation]:
        kind, collective = _classify(instr, module)
        if instr.opcode == "async-start" and kind == "start":
            async_starts[instr.name] = collective
        elif instr.opcode == "async-done" and kind == "other":
            # XLA prints an async-done without calls=: it waits on the async-start among its operands
            started = [async_starts[name] for name, _ in instr.operands if name in async_starts]
            if started:
                kind, collective = "done", started[0]
        ops.append(ScheduledOp(len(ops), instr.name, instr.opcode, kind, collective, instr.line))
    return ops


def _start_of(done: str, operands: dict, starts: dict, halves: set, paired: set):
    """The start a done waits on: a start among its operands, else the latest one reached through them."""
    direct = [starts[n] for n in operands.get(done, []) if n in starts and n not in paired]
    if direct:
        return direct[0]
    found, seen, todo = [], {done}, list(operands.get(done, []))
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in starts:
            if name not in paired:
                found.append(starts[name])
            continue
        if name in halves:                  # another collective's done: not this one's chain
            continue
        todo.extend(operands.get(name, []))
    return max(found, key=lambda op: op.position) if found else None


def async_windows(compiled, computation: str | None = None) -> list[AsyncWindow]:
    """Each asynchronous collective of one computation: its start, its done, and the products between.

    Arguments as for :func:`scheduled_order`. A done is matched to its start by the start's name
    among the done's operands or, where the done takes what the work scheduled meanwhile returned (as
    XLA:TPU's asynchronous collective fusions do), among the operands of those operands, back to the
    nearest start not already paired (the search stops at every start and done).
    """
    ops = scheduled_order(compiled, computation)
    starts = {op.name: op for op in ops if op.kind == "start"}
    halves = {op.name for op in ops if op.kind in ("start", "done")}
    operands = {}
    for op in ops:
        instr = parse_instruction(op.line)
        operands[op.name] = [name for name, _ in instr.operands] if instr else []
    windows, paired = [], set()
    for op in ops:
        if op.kind != "done":
            continue
        start = _start_of(op.name, operands, starts, halves, paired)
        if start is None:
            continue
        paired.add(start.name)
        between = tuple(o.name for o in ops[start.position + 1: op.position] if o.kind == "product")
        windows.append(AsyncWindow(op.collective, start.name, op.name, start.position, op.position, between))
    return windows


def loop_bodies(compiled, computation: str | None = None) -> list[str]:
    """The bodies of the ``while`` loops one computation runs, by name, in the order of its schedule.

    Arguments as for :func:`scheduled_order` (default: the entry computation). Each name can be given
    back to :func:`scheduled_order` and :func:`async_windows` as ``computation`` to read the loop's body:
    a ``lax.scan`` over layers, or the loop XLA writes for a windowed einsum.
    """
    bodies = []
    for op in scheduled_order(compiled, computation):
        if op.kind == "loop":
            body = parse_instruction(op.line).called("body")
            if body:
                bodies.append(body)
    return bodies


def windowed_loops(compiled, computation: str | None = None) -> list[str]:
    """The loops of one computation whose body overlaps a collective-permute with a product.

    That is how a windowed einsum (XLA's own collective matmul) reads in a compiled program: a ``while``
    loop whose body starts collective-permutes, runs products, and waits for the sends after them.
    Returns the bodies' names (:func:`loop_bodies`) that hold at least one such window; an empty list
    where the compiler wrote the plain form (a collective, then the product) or the windows are empty.
    """
    return [body for body in loop_bodies(compiled, computation)
            if any(win.collective == "collective-permute" and win.overlapped
                   for win in async_windows(compiled, body))]
