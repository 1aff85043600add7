"""Compiling for a target and reading the program: collectives, memory per device, flops, the compiler's log.

:func:`compile_for` compiles a function for the devices its arguments are sharded over (the chapter's
own, or a TPU slice or GPU cluster of :mod:`shardlab.hardware.targets`, compiled for ahead of time with
no such chip here) and reads the result. Nothing runs: the program is read, never executed.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field

from shardlab.hardware.environment import libtpu_noise
from shardlab.hardware.memory_kinds import memory_kinds
from shardlab.programs.collectives import CollectiveReport, collectives_in_compiled, device_assignment

__all__ = ["CompiledProgram", "ProgramMemory", "MemoryKindWarning", "compile_for"]


class MemoryKindWarning(UserWarning):
    """:func:`compile_for` compiled a program that names a memory kind its target's devices do not list:
    XLA kept those buffers in device memory, so the program shows no offload."""


# ---------------------------------------------------------------------------------------------------------
# A compiled program and what it reports about itself


@dataclass(frozen=True)
class ProgramMemory:
    """``memory_analysis()`` of one device's program, in bytes (what XLA reports, not a model).

    ``xla_peak`` is XLA's own estimate of the program's peak (``peak_memory_in_bytes``); on a TPU it
    is the figure the compiler compares with the chip's HBM when it refuses a program that does not fit.
    It is not the sum :attr:`peak` adds up, and may be below or above it.
    """

    arguments: int
    outputs: int
    temporaries: int
    aliased: int
    code: int
    xla_peak: int | None = None

    @property
    def peak(self) -> int:
        """Arguments, outputs and temporaries, less outputs that reuse an argument's buffer."""
        return self.arguments + self.outputs + self.temporaries - self.aliased


@dataclass(frozen=True)
class CompiledProgram:
    """A program compiled for a target, read: its collectives, memory per device, flops and bytes.

    Both the collectives and ``flops`` are counted over the program's text, where the body of a loop
    appears once: a program with ``while_loops`` (XLA:TPU writes some sharded products as a loop of
    collective-permutes) sends and computes more than they say, once per trip.
    """

    target: str
    compiled: object = field(repr=False)
    compile_seconds: float
    collectives: CollectiveReport = field(repr=False)
    memory: ProgramMemory
    flops: float
    bytes_accessed: float
    #: Where ``flops`` comes from: XLA's ``cost_analysis()`` of this program, or, where it reports none
    #: (XLA:GPU compiling with no GPU), the unsharded function's count divided evenly among the devices.
    flops_source: str = "cost_analysis"
    #: What the compiler logged while compiling, captured instead of printed (XLA's warnings and errors,
    #: such as the GPU compiler's note that it cannot bring the program under the GPU's memory).
    log: tuple = ()

    @property
    def text(self) -> str:
        """The compiled HLO text."""
        return self.compiled.as_text()

    @property
    def while_loops(self) -> int:
        """How many ``while`` instructions the program has (their bodies are counted once above)."""
        return len(re.findall(r"\swhile\(", self.text))

    def summary(self) -> str:
        mib = 2 ** 20
        return (f"{self.target}: {len(self.collectives)} collective(s) "
                f"({', '.join(f'{k} x{v}' for k, v in sorted(self.collectives.kinds().items())) or 'none'}); "
                f"memory per device {self.memory.peak / mib:,.2f} MiB "
                f"(arguments {self.memory.arguments / mib:,.2f}, outputs {self.memory.outputs / mib:,.2f}, "
                f"temporaries {self.memory.temporaries / mib:,.2f}); {self.flops:,.0f} flops per device"
                + ("" if self.flops_source == "cost_analysis" else f" ({self.flops_source})")
                + (f" ({self.while_loops} loop(s): bodies counted once)" if self.while_loops else ""))

    def __str__(self) -> str:
        return self.summary()


def _describe(devices) -> str:
    d = devices[0]
    kind = d.platform.upper() if d.platform == "cpu" else d.device_kind
    return f"{kind} x{len(devices)}"


def _without_python_frames(error):
    # XLA appends the Python frames it suspects ("Suspected Python Code Location:"): a page of this
    # machine's paths under a one-line message. The message alone is what the reader needs.
    message = str(error).split("Suspected Python Code Location:")[0].rstrip()
    return error if message == str(error).rstrip() else type(error)(message)


def _cost(compiled) -> dict:
    return compiled.cost_analysis() or {}       # a dict of XLA's counts in every JAX the book admits


def compile_for(f, *args, **kwargs) -> CompiledProgram:
    """Compile ``f`` for the devices its arguments are sharded over, and read the program.

    ``args`` are ``jax.ShapeDtypeStruct`` with a ``NamedSharding`` over a mesh of
    :func:`target_mesh` (or arrays); ``f`` is a function or a jitted one (its shardings count).
    Nothing runs: the compiled program's collectives (:func:`collectives_in_compiled`),
    ``memory_analysis()`` and ``cost_analysis()`` are read. The compile time is measured.

    Where the program names a memory kind (``pinned_host``, ``unpinned_host``) that the target's devices
    do not list, as on the book's compile-only GPU devices, which list none, it warns with
    ``shardlab.programs.compile.MemoryKindWarning``: XLA then keeps those buffers in device memory.
    """
    import jax

    if not callable(f):
        raise ValueError(f"compile_for: f must be a function (or a jitted one), got {type(f).__name__}")
    jitted = f if hasattr(f, "lower") else jax.jit(f)
    start = time.perf_counter()
    with _compiler_log() as log:
        lowered = jitted.lower(*args, **kwargs)
        try:
            compiled = lowered.compile()
        except jax.errors.JaxRuntimeError as error:
            raise _without_python_frames(error) from None
    seconds = time.perf_counter() - start
    devices = device_assignment(compiled) or []
    if devices:
        _warn_missing_memory_kinds(lowered, devices)
    stats = compiled.memory_analysis()
    memory = ProgramMemory(stats.argument_size_in_bytes, stats.output_size_in_bytes, stats.temp_size_in_bytes,
                           stats.alias_size_in_bytes, stats.generated_code_size_in_bytes,
                           getattr(stats, "peak_memory_in_bytes", None))
    cost = _cost(compiled)
    flops, source = float(cost.get("flops", 0.0)), "cost_analysis"
    if not cost and devices:
        flops, source = _even_share_of_flops(jitted, args, kwargs, len(devices))
    return CompiledProgram(target=_describe(devices) if devices else "?", compiled=compiled,
                           compile_seconds=seconds, collectives=collectives_in_compiled(compiled), memory=memory,
                           flops=flops, bytes_accessed=float(cost.get("bytes accessed", 0.0)), flops_source=source,
                           log=tuple(log))


#: Where a lowered module names a memory: ``mhlo.memory_kind`` on an input or output of ``main``, and
#: ``_xla_buffer_placement`` on a move inside it.
_NAMED_MEMORY = re.compile(r'(?:mhlo\.memory_kind|_xla_buffer_placement)\s*=\s*"([^"]+)"')


_ALL_KINDS = frozenset(("device", "pinned_host", "unpinned_host"))


def _warn_missing_memory_kinds(lowered, devices) -> None:
    """Warn (``MemoryKindWarning``) when the lowered program names a memory kind other than
    ``device`` that the target's devices do not list (the book's compile-only GPU devices list none)."""
    have = memory_kinds(devices[0])
    if _ALL_KINDS <= set(have):
        return                                  # nothing the program could name is missing
    named = sorted(set(_NAMED_MEMORY.findall(lowered.as_text())) - {"device"} - set(have))
    if named:
        warnings.warn(MemoryKindWarning(
            f"compile_for: the program places buffers in {', '.join(map(repr, named))} memory, but the "
            f"{_describe(devices)} devices list {', '.join(have) or 'no memory kinds'}: XLA compiled those "
            "buffers into device memory, so this program shows no offload and no host memory."),
            stacklevel=3)


#: A line of XLA's own log (absl format: severity, date, time, thread, file:line]).
_XLA_LOG_LINE = re.compile(r"^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+\s+\d+ [\w./-]+:\d+\] ")


@contextmanager
def _compiler_log():
    """Capture file descriptor 2 while compiling: XLA's log lines go into the yielded list (the program
    keeps them), libtpu's start-up noise is dropped, and any other line is passed on."""
    lines: list[str] = []
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):
        yield lines
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield lines
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            other = []
            for line in captured.read().decode(errors="replace").splitlines():
                if _XLA_LOG_LINE.search(line):
                    lines.append(line)
                elif not libtpu_noise(line):
                    other.append(line)
            if other:
                print("\n".join(other), file=sys.stderr)


def _even_share_of_flops(jitted, args, kwargs, n: int) -> tuple[float, str]:
    """XLA:GPU compiled with no GPU reports no costs: count the unsharded function's flops, on this
    machine's default backend, and give each device ``1/n`` of them (a model: it ignores work that
    sharding repeats or adds)."""
    import jax

    def unsharded(x):
        return jax.ShapeDtypeStruct(x.shape, x.dtype) if hasattr(x, "shape") and hasattr(x, "dtype") else x

    fn = getattr(jitted, "__wrapped__", None)
    try:
        lowered = jax.jit(fn).lower(*jax.tree.map(unsharded, args), **jax.tree.map(unsharded, kwargs))
        total = float((lowered.cost_analysis() or {}).get("flops", 0.0))
    except Exception:  # noqa: BLE001 - a function tied to its mesh cannot be lowered unsharded
        return 0.0, "no flops: XLA reports no cost analysis for this program"
    return total / n, "the unsharded function's flops / devices, modelled: XLA reports none here"
