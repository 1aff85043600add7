"""Compile targets: the chapter's own devices, or a real TPU topology compiled for ahead of time.

With ``libtpu`` installed (``pip install "jax[tpu]"``, Linux x86-64 only), XLA's TPU compiler runs on a
machine with no TPU: ``jax.experimental.topologies.get_topology_desc`` describes the devices of a named
TPU slice (ids, chip coordinates, cores), ``jax.make_mesh`` orders them as it would on that slice, and
``jax.jit(f).lower(...).compile()`` on abstract inputs sharded over that mesh returns XLA:TPU's program
for it. Nothing runs: the program is read (collectives, memory per chip, flops), never executed.

Where libtpu is missing, :func:`compiling_for_tpu` turns the cell into one printed line.
"""

from __future__ import annotations

import math
import os
import re
import sys
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache

from shardlab.compiled import CollectiveReport, _device_assignment, collectives_in_compiled
from shardlab.cost_model import CHIPS, Chip
from shardlab.memory import memory_kinds


@dataclass(frozen=True)
class Target:
    """A named TPU slice: its topology name (for ``get_topology_desc``), its chip, and where readers meet it.

    ``host_bounds``: the chips one host holds, as x, y, z (``None``: libtpu's default for the chip, 2 x 2 x 1).
    A single-host slice names its own, so that all its devices belong to process 0.
    """

    name: str
    topology: str
    chip: Chip
    where: str
    host_bounds: tuple[int, int, int] | None = None

    @property
    def num_chips(self) -> int:
        return math.prod(int(size) for size in self.topology.split(":")[1].split("x"))


#: The TPU slices the book compiles for, named as Google Cloud names them (by chips for v5e and
#: v6e, by TensorCores, two per chip, for v5p).
TARGETS = {t.name: t for t in (
    Target("v5e-1", "v5e:1x1", CHIPS["TPU v5e"], "Colab's TPU runtime: one v5e chip", (1, 1, 1)),
    Target("v5e-8", "v5e:2x4", CHIPS["TPU v5e"], "Kaggle's TPU runtime: one host with 8 v5e chips", (2, 4, 1)),
    Target("v5e-256", "v5e:16x16", CHIPS["TPU v5e"], "a full v5e pod: 16 x 16 chips, 4 per host"),
    Target("v5p-16", "v5p:2x2x2", CHIPS["TPU v5p"], "a cube of 2 x 2 x 2 v5p chips on 2 hosts of 4"),
    Target("v5p-128", "v5p:4x4x4", CHIPS["TPU v5p"], "a v5p slice of 4 x 4 x 4 chips, 4 per host"),
    Target("v6e-8", "v6e:2x4", CHIPS["TPU v6e"], "one host with 8 v6e (Trillium) chips", (2, 4, 1)),
)}

#: The chapter's own devices (simulated CPU devices, or the accelerators ``setup_devices`` found).
HERE = "here"


class TPUCompilerUnavailable(RuntimeError):
    """libtpu, XLA's TPU compiler, cannot be loaded in this Python: TPU programs cannot be compiled."""


class MemoryKindWarning(UserWarning):
    """:func:`compile_for` compiled a program that names a memory kind its target's devices do not list:
    XLA kept those buffers in device memory, so the program shows no offload."""


# ---------------------------------------------------------------------------------------------------------
# libtpu started on a machine without a TPU writes warnings about unset TPU environment variables straight
# to the process's stderr (file descriptor 2), which a notebook shows. They say nothing about compiling.

_LIBTPU_NOISE = re.compile(r"could not determine TPU|Logging before InitGoogle|Source Location Trace"
                           r"|^learning/|libtpu_init_utils|ALLOW_MULTIPLE_LIBTPU_LOAD is set|^\s*$"
                           # JAX's CUDA plugin, loaded where there is no GPU (shardlab.gpu_targets)
                           r"|cudart_stub\.cc.*Could not find cuda drivers"
                           r"|All log messages before absl::InitializeLog\(\) is called")


def share_libtpu() -> None:
    """Let several processes load libtpu where this machine has no TPU chip to guard.

    libtpu takes a lock file (/tmp/libtpu_lockfile) so that one process owns a host's TPU chips; a second
    process, e.g. another notebook compiling for a TPU, would fail to load it. With no chip here there is
    nothing to own, and libtpu's own switch ``ALLOW_MULTIPLE_LIBTPU_LOAD`` lifts the lock. On a TPU host
    nothing changes. Must run before libtpu loads (``setup_devices`` calls it).
    """
    try:
        from jax._src import hardware_utils   # private, in every JAX the book admits

        chips = hardware_utils.num_available_tpu_chips_and_device_id()[0]
    except Exception:  # noqa: BLE001 - if JAX cannot tell, leave libtpu's lock as it is
        return
    if chips == 0:
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


@contextmanager
def quiet_libtpu():
    """Run the block with file descriptor 2 captured; pass on every line but libtpu's start-up warnings.

    Also dropped: the CUDA plugin's note that this machine has no CUDA driver (it compiles anyway).
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no descriptor 2 to capture: nothing to hide
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines()
                    if not _LIBTPU_NOISE.search(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


@lru_cache(maxsize=None)
def _topology_devices(target: Target) -> tuple:
    from jax.experimental import topologies

    extra = {} if target.host_bounds is None else {"chips_per_host_bounds": list(target.host_bounds)}
    share_libtpu()
    with quiet_libtpu():
        return tuple(topologies.get_topology_desc(topology_name=target.topology, platform="tpu", **extra).devices)


def tpu_compiler_missing() -> str | None:
    """``None`` when TPU programs can be compiled here; otherwise one line saying why not."""
    try:
        _topology_devices(TARGETS["v5e-8"])
    except Exception as e:  # noqa: BLE001 - any failure to load libtpu means the same to the reader
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "not installed" in first:
            return ('No TPU compiler here: libtpu is not installed (pip install "jax[tpu]", Linux x86-64 '
                    "only), so this TPU cell is skipped.")
        return f"No TPU compiler here ({type(e).__name__}: {first[:160]}), so this TPU cell is skipped."
    return None


@contextmanager
def compiling_for_tpu():
    """Wrap a cell that compiles for a TPU: where libtpu is missing, it prints one line and stops there.

    Only :class:`TPUCompilerUnavailable` (raised by :func:`target_devices` and :func:`target_mesh`) is
    caught; every other error propagates.
    """
    try:
        yield
    except TPUCompilerUnavailable as e:
        print(e)


def _target(target):
    from shardlab.gpu_targets import GPU_TARGETS, GpuTarget

    if isinstance(target, (Target, GpuTarget)) or target == HERE:
        return target
    if isinstance(target, str) and target in TARGETS:
        return TARGETS[target]
    if isinstance(target, str) and target in GPU_TARGETS:
        return GPU_TARGETS[target]
    raise ValueError(f"target must be {HERE!r}, a Target, a GpuTarget, or one of {list(TARGETS)} (TPU) or "
                     f"{list(GPU_TARGETS)} (GPU), got {target!r}")


def target_devices(target) -> list:
    """The devices of ``target``: ``"here"`` (the chapter's devices), a TPU slice named in ``TARGETS``, or a
    GPU cluster named in ``shardlab.GPU_TARGETS`` (``shardlab.gpu_targets.gpu_devices``; raises
    :class:`~shardlab.GPUCompilerUnavailable` where JAX's CUDA plugin is missing).

    A TPU slice's devices are compile-only descriptions from libtpu: they carry ``id``, ``coords``,
    ``core_on_chip`` and ``device_kind`` like real TPU devices, but hold no memory. Raises
    :class:`TPUCompilerUnavailable` with a one-line reason where libtpu cannot be loaded.
    """
    from shardlab.gpu_targets import GpuTarget, gpu_devices

    t = _target(target)
    if t == HERE:
        import jax

        return list(jax.devices())
    if isinstance(t, GpuTarget):
        return gpu_devices(t)
    missing = tpu_compiler_missing()
    if missing:
        raise TPUCompilerUnavailable(missing)
    return list(_topology_devices(t))


def target_mesh(target, axis_sizes, axis_names, *, axis_types=None):
    """``jax.make_mesh(axis_sizes, axis_names, devices=target_devices(target))``: the order JAX picks there.

    ``axis_types`` defaults to ``Auto`` on every axis. ``make_mesh`` may refuse a shape for a topology
    (its error is JAX's, unchanged).
    """
    import jax
    from jax.sharding import AxisType

    if not isinstance(axis_sizes, (tuple, list)) or not all(isinstance(s, int) and s > 0 for s in axis_sizes):
        raise ValueError(f"target_mesh: axis_sizes must be a tuple of positive integers, got {axis_sizes!r}")
    if not isinstance(axis_names, (tuple, list)) or len(axis_names) != len(axis_sizes) \
            or not all(isinstance(a, str) for a in axis_names):
        raise ValueError(f"target_mesh: axis_names must be a tuple of {len(axis_sizes)} strings (one per size), "
                         f"got {axis_names!r}")
    devices = target_devices(target)
    if axis_types is None:
        axis_types = (AxisType.Auto,) * len(axis_sizes)
    if target == HERE:
        devices = devices[:math.prod(axis_sizes)]
    return jax.make_mesh(tuple(axis_sizes), tuple(axis_names), devices=devices, axis_types=tuple(axis_types))


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
    ``shardlab.targets.MemoryKindWarning``: XLA then keeps those buffers in device memory.
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
    devices = _device_assignment(compiled) or []
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
                elif not _LIBTPU_NOISE.search(line):
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
