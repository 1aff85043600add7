"""Collectives written by hand as Pallas TPU kernels: remote DMAs and semaphores, one ring step at a time.

Each function here is a *per-device* program, called inside ``jax.shard_map`` over a 1-D mesh axis. It
runs one ``pallas_call`` whose kernel moves blocks to its ring neighbours itself, with
``pltpu.make_async_remote_copy`` (a DMA into another chip's memory) and semaphores:

* :func:`ring_all_gather`: every device ends with every block (``jax.lax.all_gather(..., tiled=True)``);
* :func:`bidirectional_all_gather`: the same, half of each block going each way round;
* :func:`ring_reduce_scatter`: a running sum passed round the ring (``jax.lax.psum_scatter``), double
  buffered, with a semaphore by which a device tells its left neighbour that a buffer is free;
* :func:`collective_matmul`: ``all_gather(x) @ w`` in which the send of the next block of ``x``
  overlaps the product of this one.

``interpret=`` takes :func:`interpret_mode` (TPU interpret mode: the kernel runs on CPU devices, with
the TPU's memories, DMAs and semaphores simulated); ``None`` writes the real Mosaic kernel, which only a
TPU runs and which compiles for a TPU topology with no TPU here. :func:`catch_races` runs a function
with the interpreter's race detector on both JAX versions (0.12 raises or warns, 0.10 prints).
:func:`ring_events` lists a kernel's DMAs, products and semaphore waits step by step, from its
structure, for :func:`shardlab.pictures.dma_timeline.draw_dma_timeline`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import logging
import re

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from shardlab.arguments import positive_int

try:  # where the interpreter keeps its race detector's flag (the same module in JAX 0.10 and 0.12)
    from jax._src.pallas.mosaic.interpret import interpret_pallas_call as _interpreter
except ImportError:  # a later JAX: the reported races are still read
    _interpreter = None

__all__ = ["RING_KERNELS", "Race", "RaceReport", "RingEvent", "bidirectional_all_gather", "catch_races",
           "collective_matmul", "interpret_mode", "ring_all_gather", "ring_events", "ring_reduce_scatter",
           "all_gather_kernel", "bidirectional_kernel", "reduce_scatter_kernel", "collective_matmul_kernel"]

#: The kernels :func:`ring_events` describes.
RING_KERNELS = ("all_gather", "reduce_scatter", "collective_matmul")


# ---------------------------------------------------------------------------------------------------------
# Interpret mode and its race detector, on both JAX versions


def interpret_mode(detect_races: bool = False):
    """``pltpu.InterpretParams`` for a kernel run on CPU devices, race detection on or off.

    JAX 0.12's detector raises on the first race unless ``on_race="warn"``; JAX 0.10's has no
    ``on_race`` and prints each race. Here races are reported, not raised, on both (read them with
    :func:`catch_races`).
    """
    if not isinstance(detect_races, bool):
        raise ValueError(f"interpret_mode: detect_races must be True or False, got {detect_races!r}")
    fields = pltpu.InterpretParams.__dataclass_fields__
    extra = {"on_race": "warn"} if "on_race" in fields else {}
    return pltpu.InterpretParams(detect_races=detect_races, **extra)


@dataclasses.dataclass(frozen=True)
class Race:
    """One race the interpreter reported: two accesses to the same piece of a buffer, neither known to
    happen before the other. ``buffer`` is the interpreter's key (memory space, buffer id, device,
    core); ``index`` the piece (its leading index); ``first``/``second``: ``"read"`` or ``"write"``."""

    first: str
    second: str
    memory: str
    device: int
    index: str


@dataclasses.dataclass(frozen=True)
class RaceReport:
    """What :func:`catch_races` saw: ``found`` (the detector's own flag) and the ``races`` it reported."""

    found: bool
    races: tuple

    def __len__(self):
        return len(self.races)


_RACE = re.compile(r"RACE DETECTED\s+(read|write) of \('(\w+)', \d+, (\d+), \d+\)\[\(([^,]+),.*?\n"
                   r".*?\n\s+(read|write) of", re.S)


def catch_races(f, *args):
    """Run ``f(*args)`` (a function whose kernels use ``interpret_mode(detect_races=True)``), wait for
    its result, and return ``(result, RaceReport)``: whether the interpreter's race detector found a
    race, and each race it reported."""
    if not callable(f):
        raise ValueError(f"catch_races: f must be a function, got {type(f).__name__}")
    text = io.StringIO()
    handler = logging.StreamHandler(text)
    # JAX 0.12 logs each race (to JAX's logger and the root logger), JAX 0.10 prints it: keep both here
    loggers = [logging.getLogger(), logging.getLogger("jax")]
    saved = [(lg.handlers, lg.propagate) for lg in loggers]
    for lg in loggers:
        lg.handlers = [handler]
    loggers[1].propagate = False
    try:
        with contextlib.redirect_stdout(text):
            result = jax.block_until_ready(f(*args))
            jax.effects_barrier()
    finally:
        for lg, (handlers, propagate) in zip(loggers, saved):
            lg.handlers, lg.propagate = handlers, propagate
    races = tuple(Race(m[0], m[4], m[1], int(m[2]), m[3].strip()) for m in _RACE.findall(text.getvalue()))
    state = getattr(_interpreter, "races", None)
    found = bool(state is not None and state.races_found) or bool(races)
    return result, RaceReport(found, races)


# ---------------------------------------------------------------------------------------------------------
# The kernels


def _ring(axis):
    me = jax.lax.axis_index(axis)
    n = jax.lax.axis_size(axis)
    return me, n, jax.lax.rem(me + 1, n), jax.lax.rem(me + n - 1, n)


def all_gather_kernel(x_ref, out_ref, copy_sem, send_sem, recv_sems, *, axis):
    """Ring all-gather: ``out[j]`` on every device ends as device ``j``'s block."""
    me, n, right, _ = _ring(axis)
    local = pltpu.make_async_copy(x_ref, out_ref.at[me], copy_sem)
    local.start()
    local.wait()
    for step in range(n - 1):
        # send the block that arrived last step (at step 0: my own) on to the right
        slot = jax.lax.rem(me + n - step, n)
        dma = pltpu.make_async_remote_copy(out_ref.at[slot], out_ref.at[slot],
                                           send_sem, recv_sems.at[step],
                                           device_id={axis: right})
        dma.start()
        dma.wait()   # my send has left, and the left neighbour's block has arrived


def ring_all_gather(block, axis: str, *, interpret=None):
    """All-gather of ``block`` (rows, cols) over mesh ``axis`` as a ring of remote DMAs: returns
    ``(n · rows, cols)``, block ``j`` from device ``j``. Each of ``n - 1`` steps sends one block to the
    right neighbour, with its own receive semaphore. Call it inside ``jax.shard_map``."""
    n = jax.lax.axis_size(axis)
    rows, cols = block.shape
    gathered = pl.pallas_call(
        functools.partial(all_gather_kernel, axis=axis),
        out_shape=jax.ShapeDtypeStruct((n, rows, cols), block.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((n - 1,))],
        interpret=interpret,
    )(block)
    return gathered.reshape(n * rows, cols)


def bidirectional_kernel(x_ref, out_ref, copy_sem, send_sems, recv_sems, *, axis):
    """Both ways round: top halves travel right, bottom halves left, each with its own semaphores."""
    me, n, right, left = _ring(axis)
    half = x_ref.shape[0] // 2
    local = pltpu.make_async_copy(x_ref, out_ref.at[me], copy_sem)
    local.start()
    local.wait()
    for step in range(n - 1):
        from_right = jax.lax.rem(me + n - step, n)   # the top half going right
        from_left = jax.lax.rem(me + step, n)        # the bottom half going left
        top = out_ref.at[from_right, pl.ds(0, half)]
        bottom = out_ref.at[from_left, pl.ds(half, half)]
        to_right = pltpu.make_async_remote_copy(top, top, send_sems.at[0], recv_sems.at[0, step],
                                                device_id={axis: right})
        to_left = pltpu.make_async_remote_copy(bottom, bottom, send_sems.at[1], recv_sems.at[1, step],
                                               device_id={axis: left})
        to_right.start()
        to_left.start()
        to_right.wait()
        to_left.wait()


def bidirectional_all_gather(block, axis: str, *, interpret=None, kernel=None):
    """As :func:`ring_all_gather`, half of each block each way round (``rows`` even): each link
    carries half a block per step. ``kernel``: another kernel with ``bidirectional_kernel``'s
    arguments (an exercise's), else that one."""
    n = jax.lax.axis_size(axis)
    rows, cols = block.shape
    if rows % 2:
        raise ValueError(f"bidirectional_all_gather: block must have an even number of rows, got {rows}")
    if kernel is not None and not callable(kernel):
        raise ValueError(f"bidirectional_all_gather: kernel must be a function or None, got {kernel!r}")
    gathered = pl.pallas_call(
        functools.partial(kernel or bidirectional_kernel, axis=axis),
        out_shape=jax.ShapeDtypeStruct((n, rows, cols), block.dtype),
        in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=pl.BlockSpec(memory_space=pl.ANY),
        scratch_shapes=[pltpu.SemaphoreType.DMA, pltpu.SemaphoreType.DMA((2,)),
                        pltpu.SemaphoreType.DMA((2, n - 1))],
        interpret=interpret,
    )(block)
    return gathered.reshape(n * rows, cols)


def _barrier(axis, left, right):
    """Wait until both neighbours have entered the kernel (their buffers exist)."""
    barrier = pltpu.get_barrier_semaphore()
    pl.semaphore_signal(barrier, 1, device_id={axis: left})
    pl.semaphore_signal(barrier, 1, device_id={axis: right})
    pl.semaphore_wait(barrier, 2)


def _default_block_at(me, step, n):
    return jax.lax.rem(me + 2 * n - step - 2, n)


def reduce_scatter_kernel(x_ref, out_ref, buf, send_sem, recv_sems, free_sem, *, axis, block_at,
                          handshake=True):
    """Ring reduce-scatter: a running sum per block of rows goes round; each device adds its part.

    ``buf`` holds two sums: the one being sent (slot ``step % 2``) and the one arriving
    (slot ``(step + 1) % 2``). Before writing into the right neighbour's slot, a device waits on
    ``free_sem``, which that neighbour signals once it has sent the slot's old sum on."""
    me, n, right, left = _ring(axis)
    rows = out_ref.shape[0]

    def part(block):            # this device's partial sums for one block of rows
        return x_ref[pl.ds(pl.multiple_of(block * rows, rows), rows), :]

    _barrier(axis, left, right)
    buf[0] = part(jax.lax.rem(me + n - 1, n))
    for step in range(n - 1):
        send, arrive = step % 2, (step + 1) % 2
        if handshake and step > 0:
            pl.semaphore_wait(free_sem, 1)          # the right neighbour's slot is free
        dma = pltpu.make_async_remote_copy(buf.at[send], buf.at[arrive], send_sem,
                                           recv_sems.at[arrive], device_id={axis: right})
        dma.start()
        dma.wait()
        if handshake and step < n - 2:
            pl.semaphore_signal(free_sem, 1, device_id={axis: left})   # my slot `send` is free
        # the accumulation: add my part of the block whose sum just arrived
        buf[arrive] = buf[arrive] + part(block_at(me, step, n))
    out_ref[...] = buf[(n - 1) % 2]


def ring_reduce_scatter(partial_sums, axis: str, *, interpret=None, block_at=None, handshake: bool = True):
    """``psum_scatter(partial_sums, axis, tiled=True)`` as a ring of remote DMAs: ``partial_sums``
    ``(n · rows, cols)`` on every device, returns the sum of block ``me`` ``(rows, cols)``.

    ``block_at(me, step, n)``: which block of rows device ``me`` adds to the sum it receives at
    ``step`` (an exercise's answer), else the ring's own. ``handshake=False`` drops the semaphore by
    which a device frees its buffer for its left neighbour: a race."""
    n = jax.lax.axis_size(axis)
    total, cols = partial_sums.shape
    if total % n:
        raise ValueError(f"ring_reduce_scatter: partial_sums rows ({total}) must be divisible by {n}")
    if block_at is not None and not callable(block_at):
        raise ValueError(f"ring_reduce_scatter: block_at must be a function (me, step, n) -> block, "
                         f"got {block_at!r}")
    if not isinstance(handshake, bool):
        raise ValueError(f"ring_reduce_scatter: handshake must be True or False, got {handshake!r}")
    rows = total // n
    kernel = functools.partial(reduce_scatter_kernel, axis=axis, block_at=block_at or _default_block_at,
                               handshake=handshake)
    return pl.pallas_call(
        kernel,
        out_shape=jax.ShapeDtypeStruct((rows, cols), partial_sums.dtype),
        scratch_shapes=[pltpu.VMEM((2, rows, cols), partial_sums.dtype), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=interpret,
    )(partial_sums)


def collective_matmul_kernel(x_ref, w_ref, out_ref, buf, send_sem, recv_sems,
                             free_sem, *, axis):
    """All-gather matmul: multiply the block of ``x`` held while the next travels.

    At step ``s`` the block in ``buf[s % 2]`` came from device ``me - s``: its DMA to
    the right starts, its product fills those rows of ``out``, then the DMA is waited."""
    me, n, right, left = _ring(axis)
    rows = x_ref.shape[0]
    _barrier(axis, left, right)
    buf[0] = x_ref[...]
    for step in range(n):
        held, arrive = step % 2, (step + 1) % 2
        if step < n - 1:
            if step > 0:
                pl.semaphore_wait(free_sem, 1)   # the right neighbour's slot is free
            dma = pltpu.make_async_remote_copy(buf.at[held], buf.at[arrive], send_sem,
                                               recv_sems.at[arrive],
                                               device_id={axis: right})
            dma.start()
        source = jax.lax.rem(me + n - step, n)          # the block held came from here
        product = jnp.dot(buf[held], w_ref[...], preferred_element_type=jnp.float32)
        where = pl.ds(pl.multiple_of(source * rows, rows), rows)
        out_ref[where, :] = product.astype(out_ref.dtype)
        if step < n - 1:
            dma.wait()
            if step < n - 2:       # my slot `held` is free: tell the left neighbour
                pl.semaphore_signal(free_sem, 1, device_id={axis: left})


def collective_matmul(x_block, w_block, axis: str, *, interpret=None):
    """``all_gather(x_block, axis, tiled=True) @ w_block`` with the gather fused into the product:
    ``x_block`` ``(rows, contract)`` split by rows, ``w_block`` ``(contract, cols)`` by columns; returns
    ``(n · rows, cols)``. Double buffered: one block is multiplied while the next arrives."""
    n = jax.lax.axis_size(axis)
    rows, contract = x_block.shape
    if w_block.shape[0] != contract:
        raise ValueError(f"collective_matmul: x_block is {x_block.shape} and w_block {w_block.shape}: "
                         "their contracting sizes must agree")
    return pl.pallas_call(
        functools.partial(collective_matmul_kernel, axis=axis),
        out_shape=jax.ShapeDtypeStruct((n * rows, w_block.shape[1]), x_block.dtype),
        scratch_shapes=[pltpu.VMEM((2, rows, contract), x_block.dtype), pltpu.SemaphoreType.DMA,
                        pltpu.SemaphoreType.DMA((2,)), pltpu.SemaphoreType.REGULAR],
        compiler_params=pltpu.CompilerParams(collective_id=0),
        interpret=interpret,
    )(x_block, w_block)


# ---------------------------------------------------------------------------------------------------------
# The kernels' structure, step by step, for a picture


@dataclasses.dataclass(frozen=True)
class RingEvent:
    """One thing a device does in one ring step: ``kind`` is ``"dma"`` (a block sent to ``peer``),
    ``"compute"`` (a product or an addition), ``"wait"`` (on semaphore ``label``) or ``"signal"``
    (semaphore ``label`` raised on ``peer``)."""

    device: int
    step: int
    kind: str
    label: str
    peer: int | None = None


def ring_events(kernel: str, n: int = 8) -> list:
    """The DMAs, products and semaphore operations of each device at each step of a ring kernel of
    this module (``"all_gather"``, ``"reduce_scatter"`` or ``"collective_matmul"``) on ``n`` devices,
    read from the kernels' structure (the same index arithmetic), not timed."""
    if kernel not in RING_KERNELS:
        raise ValueError(f"ring_events: kernel must be one of {', '.join(map(repr, RING_KERNELS))}, "
                         f"got {kernel!r}")
    n = positive_int("ring_events: n", n)
    if n < 2:
        raise ValueError(f"ring_events: n must be at least 2 (a ring), got {n}")
    events = []
    steps = n if kernel == "collective_matmul" else n - 1
    for d in range(n):
        right, left = (d + 1) % n, (d - 1) % n
        for s in range(steps):
            sends = s < n - 1
            if kernel == "all_gather":
                events.append(RingEvent(d, s, "dma", f"x{(d - s) % n}", right))
                events.append(RingEvent(d, s, "wait", f"recv[{s}]"))
                continue
            if kernel == "reduce_scatter":
                if s > 0:
                    events.append(RingEvent(d, s, "wait", "free"))
                events.append(RingEvent(d, s, "dma", f"Σ{(d - s - 1) % n}", right))
                events.append(RingEvent(d, s, "wait", f"recv[{(s + 1) % 2}]"))
                if s < n - 2:
                    events.append(RingEvent(d, s, "signal", "free", left))
                events.append(RingEvent(d, s, "compute", f"+{(d - s - 2) % n}"))
                continue
            if sends and s > 0:
                events.append(RingEvent(d, s, "wait", "free"))
            if sends:
                events.append(RingEvent(d, s, "dma", f"x{(d - s) % n}", right))
            events.append(RingEvent(d, s, "compute", f"x{(d - s) % n}·W{d}"))
            if sends:
                events.append(RingEvent(d, s, "wait", f"recv[{(s + 1) % 2}]"))
            if s < n - 2:
                events.append(RingEvent(d, s, "signal", "free", left))
    return events
