"""Where the time goes: a profiler trace read back, per device.

``jax.profiler.trace(folder)`` writes, under ``folder/plugins/profile/<run>/``, a ``<host>.trace.json.gz``:
Chrome trace-event JSON (``json.load`` reads it), whose complete events (``"ph": "X"``) carry a start
``ts`` and a duration ``dur`` in microseconds, a process ``pid`` and a thread ``tid`` named by metadata
events (``"ph": "M"``). This module reads that file, never the binary ``.xplane.pb`` beside it.

Where the XLA ops of a device are, three layouts, all read here (:func:`read_trace`). Only the host layout
is exercised by a real trace in this package's tests; the other two follow XProf's documented conventions
(github.com/openxla/xprof, ``docs/trace_viewer.md``: "only the XLA Ops for TPUs and stream data for GPUs are
directly grounded in the collected profile; all other lines are derived lines"):

* **TPU**: each device is a process named ``/device:TPU:N`` whose ``XLA Ops`` thread holds one event per op,
  named as the compiled program names its instruction, and whose ``XLA Modules`` thread holds one event per
  run of a program (a step). Asynchronous collectives are two ops there, ``...-start`` and ``...-done``.
* **GPU**: each device is a process named ``/device:GPU:N`` with one thread per stream (``Stream #N(...)``);
  each kernel's event carries the instruction that launched it and its program as ``args`` ``hlo_op`` and
  ``hlo_module`` (the stats XProf's ``GpuEventStats`` reads, ``xprof/utils/gpu_event_stats.cc``). The
  ``XLA Ops``/``XLA Modules`` lines are derived by XProf when it loads a profile
  (``xprof/utils/derived_timeline.cc``) and are not in the file JAX writes, so runs of a program are told
  apart here by where its first op reappears. One instruction may launch several kernels (each is read as
  one op run); a collective is the communication kernel on its own stream, and its ``-done`` has no kernel.
* **Host devices** (XLA:CPU): all simulated devices share one process (``/host:CPU``) and its thread
  pool; an op's event names its device, program and run in ``args`` (``device_ordinal``, ``hlo_module``,
  ``hlo_op``, ``run_id``). A collective is a rendezvous of the devices' threads (XLA's ``rendezvous.cc``):
  inside it, on the same thread, ``Wait: pending_threads=k/n`` events are the time it waited for the
  others to arrive, and ``Wait for rendezvous callback`` the time it waited, all arrived, for the
  rendezvous to complete.

Then :func:`time_breakdown` splits a step per device into compute, collectives, waits and idle time,
:func:`op_totals` ranks the ops, :func:`collective_overlap` measures how much of each collective's window
compute covers (hidden or exposed), :func:`hlo_sources` reads a compiled program's text back to each
instruction's ``op_name`` (the ``jax.named_scope`` path) and source line, and :func:`draw_timeline`
draws one step, one row per device. Everything here is *measured* on the machine that ran the trace.

:func:`read_memory_profile` reads what ``jax.profiler.save_device_memory_profile`` writes: a gzipped
pprof ``Profile`` protocol buffer, decoded by the ``protobuf`` package from the message types of pprof's
published schema (github.com/google/pprof, ``proto/profile.proto``), declared here field by field.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from shardlab.programs.hlo import parse_module

__all__ = ["DeviceOp", "Wait", "Trace", "trace_file", "read_trace", "op_kind", "time_breakdown", "op_totals",
           "CollectiveWindow", "collective_overlap", "quiet_native_logs", "InstructionSource", "hlo_sources",
           "scope_of", "MemorySample", "read_memory_profile"]


#: Substrings that make an op a collective (XLA's opcode names, also inside async ``-start``/``-done``).
COLLECTIVE_NAMES = ("all-gather", "all-reduce", "reduce-scatter", "all-to-all", "collective-permute",
                    "collective-broadcast", "ragged-all-to-all")


_DEVICE_PROCESS = re.compile(r"^/device:(TPU|GPU|CPU):(\d+)")


_OPS_THREAD = "XLA Ops"


_MODULES_THREAD = "XLA Modules"


_STREAM_THREAD = "Stream #"


_ARRIVAL_WAIT = "Wait: pending_threads"


_COMPLETION_WAIT = "Wait for rendezvous callback"


_MODULE_ID = re.compile(r"\(\d+\)$")


@dataclass(frozen=True)
class DeviceOp:
    """One run of one XLA op on one device: times in microseconds from the trace's start.

    ``kind`` is ``"collective"`` or ``"compute"`` (:func:`op_kind`); ``step`` counts the runs of
    ``module`` on that device from 0, in order of time.
    """

    device: int
    name: str
    kind: str
    start: float
    duration: float
    module: str
    step: int

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class Wait:
    """Time a device spent inside collective ``op`` waiting: ``reason`` is ``"arrival"`` (for the other
    devices to arrive) or ``"completion"`` (all arrived, for the rendezvous to complete)."""

    device: int
    op: str
    start: float
    duration: float
    step: int
    reason: str = "arrival"

    @property
    def end(self) -> float:
        return self.start + self.duration


@dataclass(frozen=True)
class Trace:
    """What :func:`read_trace` found: the devices (from the trace's own process metadata), their ops and
    waits, and the platform those devices are (``"TPU"``, ``"GPU"`` or ``"CPU"``)."""

    platform: str
    devices: tuple
    ops: tuple
    waits: tuple
    modules: tuple

    @property
    def steps(self) -> int:
        """How many runs of the program every device shows."""
        counts = [len({op.step for op in self.ops if op.device == d}) for d in self.devices]
        return min(counts) if counts else 0

    def ops_in(self, step: int, device: int | None = None) -> list:
        """The ops of ``step`` (of every device, or of ``device``), in order of time."""
        self._check_step(step)
        return sorted((op for op in self.ops if op.step == step and (device is None or op.device == device)),
                      key=lambda op: (op.device, op.start))

    def waits_in(self, step: int, device: int | None = None) -> list:
        self._check_step(step)
        return sorted((w for w in self.waits if w.step == step and (device is None or w.device == device)),
                      key=lambda w: (w.device, w.start))

    def _check_step(self, step) -> None:
        if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step < self.steps:
            raise ValueError(f"step must be an integer from 0 to {self.steps - 1} (the runs every device "
                             f"shows in this trace), got {step!r}")


def op_kind(name: str) -> str:
    """``"collective"`` if the op's name is a collective's (``all-gather.2``, ``all-reduce-start``),
    else ``"compute"`` (fusions, products, copies: everything a device does by itself)."""
    if not isinstance(name, str):
        raise ValueError(f"op_kind: name must be an op's name (a string), got {name!r}")
    return "collective" if any(c in name for c in COLLECTIVE_NAMES) else "compute"


def trace_file(folder) -> Path:
    """The newest ``*.trace.json.gz`` under ``folder`` (what ``jax.profiler.trace(folder)`` wrote)."""
    if not isinstance(folder, (str, Path)):
        raise ValueError(f"trace_file: folder must be a path (str or Path), got {type(folder).__name__}")
    root = Path(folder)
    if root.is_file() and root.name.endswith(".trace.json.gz"):
        return root
    if not root.is_dir():
        raise ValueError(f"trace_file: folder must be a folder jax.profiler.trace wrote, got {str(folder)!r} "
                         "(no such folder)")
    found = sorted(root.rglob("*.trace.json.gz"), key=lambda p: (p.stat().st_mtime, str(p)))
    if not found:
        raise ValueError(f"trace_file: no *.trace.json.gz under {str(folder)!r}: was it written by "
                         "jax.profiler.trace?")
    return found[-1]


def _events(data) -> list:
    if isinstance(data, dict):
        data = data.get("traceEvents")
    if not isinstance(data, list):
        raise ValueError("read_trace: the trace must be Chrome trace-event JSON (a dict with 'traceEvents', "
                         "or the list of events)")
    return data


def _names(events) -> tuple[dict, dict]:
    processes, threads = {}, {}
    for e in events:
        if e.get("ph") != "M":
            continue
        name = e.get("args", {}).get("name", "")
        if e.get("name") == "process_name":
            processes[e.get("pid")] = name
        elif e.get("name") == "thread_name":
            threads[(e.get("pid"), e.get("tid"))] = name
    return processes, threads


def _numbered(runs: dict) -> dict:
    """{(device, module, run key): first start} -> {(device, module, run key): step index on that device}."""
    order: dict = {}
    for (device, module, key), start in sorted(runs.items(), key=lambda kv: kv[1]):
        count = order.setdefault((device, module), {})
        count[key] = len(count)
    return {(d, m, k): order[(d, m)][k] for (d, m, k) in runs}


def _device_processes(events, processes, threads, module):
    """Ops from per-device processes with an XLA Ops line (TPU), steps from the XLA Modules line."""
    devices = {}
    for pid, name in processes.items():
        m = _DEVICE_PROCESS.match(name)
        if m and m.group(1) != "CPU" and any(p == pid and t == _OPS_THREAD for (p, _), t in threads.items()):
            devices[pid] = (m.group(1), int(m.group(2)))
    if not devices:
        return None
    runs, raw = {}, []
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in devices:
            continue
        line = threads.get((e["pid"], e.get("tid")))
        device = devices[e["pid"]][1]
        if line == _MODULES_THREAD:
            name = _MODULE_ID.sub("", e["name"])
            if module is None or name == module:
                runs[(device, name, (float(e["ts"]), float(e["ts"]) + float(e.get("dur", 0))))] = float(e["ts"])
        elif line == _OPS_THREAD:
            raw.append((device, e["name"], float(e["ts"]), float(e.get("dur", 0))))
    steps = _numbered(runs)
    ops = []
    for device, name, start, duration in raw:
        for (d, mod, (a, b)), step in steps.items():
            if d == device and a <= start and start + duration <= b + 1e-3:
                ops.append(DeviceOp(device, name, op_kind(name), start, duration, mod, step))
                break
    platform = next(iter(devices.values()))[0]
    return platform, sorted({d for _, d in devices.values()}), ops, []


def _gpu_streams(events, processes, threads, module):
    """Ops from GPU stream lines: kernel events whose args name the HLO op and module that launched them.

    A run of a program starts where its first op (in time, on that device) comes back after other ops.
    """
    devices = {}
    for pid, name in processes.items():
        m = _DEVICE_PROCESS.match(name)
        if m and m.group(1) == "GPU":
            devices[pid] = int(m.group(2))
    kernels: dict = {}
    for e in events:
        args = e.get("args") or {}
        if (e.get("ph") != "X" or e.get("pid") not in devices or "hlo_op" not in args
                or not threads.get((e["pid"], e.get("tid")), "").startswith(_STREAM_THREAD)):
            continue
        mod = _MODULE_ID.sub("", str(args.get("hlo_module", "")))
        if module is not None and mod != module:
            continue
        kernels.setdefault((devices[e["pid"]], mod), []).append(
            (float(e["ts"]), float(e.get("dur", 0)), str(args["hlo_op"])))
    if not kernels:
        return None
    ops = []
    for (device, mod), found in kernels.items():
        found.sort()
        first, step, previous = found[0][2], -1, None
        for start, duration, name in found:
            if name == first and previous != first:
                step += 1
            previous = name
            ops.append(DeviceOp(device, name, op_kind(name), start, duration, mod, step))
    return "GPU", sorted({op.device for op in ops}), ops, []


def _host_devices(events, module):
    """Ops of XLA:CPU's simulated devices: events whose args name a device ordinal and an HLO op."""
    runs, raw, by_thread = {}, [], {}
    for e in events:
        args = e.get("args") or {}
        if e.get("ph") != "X" or "device_ordinal" not in args or "hlo_op" not in args:
            continue
        name, mod = args["hlo_op"], args.get("hlo_module", "")
        if module is not None and mod != module:
            continue
        device, start, duration = int(args["device_ordinal"]), float(e["ts"]), float(e.get("dur", 0))
        key = (device, mod, args.get("run_id", ""))
        runs[key] = min(runs.get(key, start), start)
        raw.append((key, name, start, duration, e.get("tid")))
    steps = _numbered(runs)
    ops = []
    for key, name, start, duration, tid in raw:
        op = DeviceOp(key[0], name, op_kind(name), start, duration, key[1], steps[key])
        ops.append(op)
        if op.kind == "collective":
            by_thread.setdefault(tid, []).append(op)
    waits = []
    for e in events:   # a wait inside a collective, on the thread that ran it: that device waiting
        name = e.get("name", "")
        if e.get("ph") != "X" or not (name.startswith(_ARRIVAL_WAIT) or name == _COMPLETION_WAIT):
            continue
        start, duration = float(e["ts"]), float(e.get("dur", 0))
        for op in by_thread.get(e.get("tid"), ()):
            if op.start <= start and start + duration <= op.end + 1e-3:
                reason = "completion" if name == _COMPLETION_WAIT else "arrival"
                waits.append(Wait(op.device, op.name, start, duration, op.step, reason))
                break
    return "CPU", sorted({op.device for op in ops}), ops, waits


def read_trace(source, *, module: str | None = None) -> Trace:
    """Read the XLA ops of every device from a profiler trace.

    ``source``: a folder ``jax.profiler.trace`` wrote (its newest ``*.trace.json.gz``, :func:`trace_file`),
    a ``.trace.json.gz`` file, or the trace already loaded (a dict). ``module``: keep only the runs of
    this program (its HLO module name, e.g. ``"jit_step"``), or ``None`` for all. Devices are found from
    the trace's process metadata (``/device:TPU:N`` with an ``XLA Ops`` line; ``/device:GPU:N`` with
    ``Stream #`` lines whose kernels carry ``hlo_op``) or, on the host, from the ``device_ordinal`` of
    each op (the three layouts of this module's docstring; only the host one is tested on a real trace).
    """
    if module is not None and not isinstance(module, str):
        raise ValueError(f"read_trace: module must be an HLO module name (a string) or None, got {module!r}")
    if isinstance(source, (dict, list)):
        data = source
    else:
        with gzip.open(trace_file(source), "rt") as f:
            data = json.load(f)
    events = _events(data)
    processes, threads = _names(events)
    found = (_device_processes(events, processes, threads, module)
             or _gpu_streams(events, processes, threads, module) or _host_devices(events, module))
    platform, devices, ops, waits = found
    if not ops:
        raise ValueError("read_trace: the trace holds no XLA ops" + (f" of module {module!r}" if module else "")
                         + ": did the traced code run a jitted program (and block until it finished)?")
    modules = tuple(sorted({op.module for op in ops}))
    return Trace(platform, tuple(devices), tuple(sorted(ops, key=lambda o: (o.device, o.start))),
                 tuple(sorted(waits, key=lambda w: (w.device, w.start))), modules)


def _union(intervals) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b > end:
            total += b - max(a, end)
            end = b
    return total


def step_window(trace: Trace, step: int) -> tuple[float, float]:
    """When step ``step`` of ``trace`` runs: its first op's start and its last op's end, in microseconds."""
    ops = trace.ops_in(step)
    return min(op.start for op in ops), max(op.end for op in ops)


def time_breakdown(trace: Trace, step: int) -> dict:
    """Per device, where the time of ``step`` went, in microseconds.

    The step's window runs from the first op of any device to the last op of any device. For each
    device: ``compute`` (time inside its compute ops), ``collective`` (inside its collectives, less
    the waits), ``wait`` (inside a collective, waiting for the others to arrive or for the rendezvous to
    complete: :class:`Wait`; 0 where the trace records none), ``idle`` (in the window, in no op) and ``window``. The four parts add up to the
    window (ops of one device that overlap count once, as the first kind in that order).
    """
    if not isinstance(trace, Trace):
        raise ValueError(f"time_breakdown: trace must be a Trace (read_trace), got {type(trace).__name__}")
    lo, hi = step_window(trace, step)
    out = {}
    for d in trace.devices:
        ops = trace.ops_in(step, d)
        waits = [(w.start, w.end) for w in trace.waits_in(step, d)]
        compute = [(o.start, o.end) for o in ops if o.kind == "compute"]
        collective = [(o.start, o.end) for o in ops if o.kind == "collective"]
        busy = _union(compute + collective)
        c = _union(compute)
        w = _union(compute + waits) - c
        coll = busy - c - w
        out[d] = {"compute": c, "collective": coll, "wait": w, "idle": (hi - lo) - busy, "window": hi - lo}
    return out


def op_totals(trace: Trace, steps=None) -> list[tuple[str, str, int, float]]:
    """``(op name, kind, runs, total microseconds)`` summed over devices and ``steps`` (default: all
    steps every device shows), longest first. A collective's time includes its waits."""
    if not isinstance(trace, Trace):
        raise ValueError(f"op_totals: trace must be a Trace (read_trace), got {type(trace).__name__}")
    steps = range(trace.steps) if steps is None else steps
    totals: dict = {}
    for s in steps:
        for op in trace.ops_in(s):
            runs, total = totals.get(op.name, (0, 0.0))
            totals[op.name] = (runs + 1, total + op.duration)
    return sorted(((n, op_kind(n), r, t) for n, (r, t) in totals.items()), key=lambda row: -row[3])


_ASYNC = re.compile(r"^(?P<base>.+)-(?P<role>start|done)(?P<n>\.\d+)?$")


@dataclass(frozen=True)
class CollectiveWindow:
    """One collective on one device in one step: its window (microseconds) and how much of it the same
    device spent in compute ops. ``name`` is the collective's (``all-gather-start.1`` and its ``-done``
    form one window, ``all-gather-start.1``; a synchronous collective is its own window)."""

    device: int
    name: str
    start: float
    span: float
    covered: float

    @property
    def hidden(self) -> float:
        """The share of the window covered by compute: 1 hidden, 0 exposed."""
        return self.covered / self.span if self.span > 0 else 0.0

    @property
    def exposed(self) -> float:
        """Microseconds of the window with no compute on the device."""
        return self.span - self.covered


def collective_overlap(trace: Trace, step: int) -> list:
    """Is each collective of ``step`` hidden? One :class:`CollectiveWindow` per collective and device.

    A window runs from an asynchronous collective's ``-start`` op to the end of its ``-done`` op (paired in
    time order, as XProf's async-overlap analysis pairs them), or is a synchronous collective's own span.
    ``covered`` is the time in it that the same device spent in compute ops (the union, less the start and
    done ops themselves): the same measure as XProf's ``xprof.cli.internal.async_overlap.analyze``, read
    from the trace JSON rather than the ``.xplane.pb``. Sorted by device, then start.
    """
    if not isinstance(trace, Trace):
        raise ValueError(f"collective_overlap: trace must be a Trace (read_trace), got {type(trace).__name__}")
    out = []
    for d in trace.devices:
        ops = trace.ops_in(step, d)
        compute = sorted((o.start, o.end) for o in ops
                         if o.kind == "compute" and not _ASYNC.match(o.name))
        windows, open_starts = [], {}
        for o in ops:
            if o.kind != "collective":
                continue
            m = _ASYNC.match(o.name)
            if m is None:
                windows.append((o.name, o.start, o.end))
                continue
            key = m["base"] + (m["n"] or "")
            if m["role"] == "start":
                open_starts.setdefault(key, []).append(o)
            elif open_starts.get(key):
                first = open_starts[key].pop(0)
                windows.append((f"{m['base']}-start{m['n'] or ''}", first.start, o.end))
        for name, lo, hi in windows:
            covered = _union([(max(a, lo), min(b, hi)) for a, b in compute if b > lo and a < hi])
            out.append(CollectiveWindow(d, name, lo, hi - lo, covered))
    return sorted(out, key=lambda w: (w.device, w.start))


_NATIVE_LOG = re.compile(r"^[IWE]\d{4} [\d:. ]+\d+ \S+:\d+\]|^WARNING: (All log messages before absl|"
                         r"Logging before InitGoogle)|^\s*$")


@contextlib.contextmanager
def quiet_native_logs():
    """Run the block with file descriptor 2 captured and pass on every line but the C++ libraries' log
    lines (``I0000 00:00:... file.cc:12] ...``: XProf's converters and the profiler server log each step
    they take). Exceptions still propagate; other lines reach ``sys.stderr``."""
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
                    if not _NATIVE_LOG.search(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


# ---------------------------------------------------------------------------------------------------------
# From an op's name back to the program and the source


@dataclass(frozen=True)
class InstructionSource:
    """An instruction of a compiled program: its ``op_name`` (JAX's path of named scopes and
    transformations, e.g. ``jit(step)/transpose(jvp(layer1))/dot_general``) and the Python
    ``function`` and ``line`` that wrote it (``file`` is the full path: print its name alone)."""

    name: str
    opcode: str
    op_name: str
    file: str | None
    line: int | None
    function: str | None


def hlo_sources(hlo_text: str) -> dict:
    """``{instruction name: InstructionSource}`` for every instruction of a compiled program's text
    (``compiled.as_text()``) that carries metadata. The source line comes from the instruction's
    ``stack_frame_id`` and the program's ``StackFrames``/``FileLocations`` tables (the innermost frame),
    or from ``source_file``/``source_line`` where a program writes them inline."""
    if not isinstance(hlo_text, str) or "HloModule" not in hlo_text:
        raise ValueError("hlo_sources: hlo_text must be a compiled program's text (compiled.as_text()), "
                         "starting with 'HloModule'")
    module = parse_module(hlo_text)
    out = {}
    for ins in module.instructions:
        meta = ins.metadata
        if meta is None:
            continue
        where = module.source(ins)
        out[ins.name] = InstructionSource(ins.name, ins.opcode, meta.get("op_name", ""), where.file, where.line,
                                          where.function)
    return out


def _alternatives(path: str) -> list[str] | None:
    """A combined op_name ``prefix/(a:b)`` (XLA merged instructions from several places) -> ``[prefix/a,
    prefix/b]``; None for a plain path."""
    start = path.find("/(")
    if start < 0 or not path.endswith(")"):
        return None
    inner, parts, depth, begin = path[start + 2:-1], [], 0, 0
    for i, ch in enumerate(inner):
        depth += (ch == "(") - (ch == ")")
        if ch == ":" and depth == 0:
            parts.append(inner[begin:i])
            begin = i + 1
    if not parts:
        return None
    parts.append(inner[begin:])
    return [path[:start + 1] + part for part in parts]


def scope_of(op_name: str, scopes) -> str | None:
    """The innermost of ``scopes`` (names given to ``jax.named_scope``) in an ``op_name`` path, or None;
    with `` (backward)`` added where the path holds a ``transpose(...)``: the operation belongs to the
    gradient's side (``transpose(jvp(layer1))`` for a scope inside the differentiated function,
    ``layer1/transpose(jvp())`` for one around ``jax.grad``). An instruction XLA combined from several
    places has an ``op_name`` such as ``jit(f)/(transpose(jvp(layer1))/dot:transpose(jvp(layer2))/dot)``:
    its scopes are joined, ``"layer1+layer2 (backward)"``."""
    if not isinstance(op_name, str):
        raise ValueError(f"scope_of: op_name must be a string, got {op_name!r}")
    if isinstance(scopes, str) or not all(isinstance(s, str) for s in scopes):
        raise ValueError(f"scope_of: scopes must be a list of scope names (strings), got {scopes!r}")
    path = op_name.split(";")[0]
    alternatives = _alternatives(path)
    if alternatives:
        found = [scope_of(a, scopes) for a in alternatives]
        labels = list(dict.fromkeys(f for f in found if f))
        if len(labels) <= 1:
            return labels[0] if labels else None
        suffix = " (backward)"
        if all(label.endswith(suffix) for label in labels):
            bases = sorted((label[:-len(suffix)] for label in labels), key=list(scopes).index)
            return "+".join(bases) + suffix
        return "+".join(labels)
    found = None
    for part in path.split("/"):
        for name in scopes:
            if re.search(rf"(^|\(){re.escape(name)}(\)|$)", part):
                found = name
    return None if found is None else found + (" (backward)" if "transpose(" in path else "")


# ---------------------------------------------------------------------------------------------------------
# The device memory profile (pprof)


@dataclass(frozen=True)
class MemorySample:
    """One line of a device memory profile: ``nbytes`` in ``allocations`` live buffers of ``kind``
    (``"buffer"``, ``"executable"``) on ``device`` (e.g. ``"cpu:3"``, ``None`` for an executable),
    allocated from ``stack``: ``(function, file, line)`` frames, innermost first."""

    kind: str
    device: str | None
    allocations: int
    nbytes: int
    stack: tuple

    def allocated_at(self, skip=("jax", "jaxlib")) -> tuple | None:
        """The innermost frame outside packages named in ``skip``: the caller's own line."""
        for function, file, line in self.stack:
            parts = set(re.split(r"[\\/]", file or ""))
            if not parts & set(skip) and "site-packages" not in parts and not (file or "").startswith("<frozen"):
                return function, file, line
        return None


_PPROF_MESSAGES = (   # pprof's profile.proto, the fields a device memory profile uses: (name, number, type, repeated)
    ("ValueType", (("type", 1, "int64", False), ("unit", 2, "int64", False))),
    ("Label", (("key", 1, "int64", False), ("str", 2, "int64", False), ("num", 3, "int64", False),
               ("num_unit", 4, "int64", False))),
    ("Sample", (("location_id", 1, "uint64", True), ("value", 2, "int64", True), ("label", 3, "Label", True))),
    ("Line", (("function_id", 1, "uint64", False), ("line", 2, "int64", False))),
    ("Location", (("id", 1, "uint64", False), ("mapping_id", 2, "uint64", False), ("address", 3, "uint64", False),
                  ("line", 4, "Line", True))),
    ("Function", (("id", 1, "uint64", False), ("name", 2, "int64", False), ("system_name", 3, "int64", False),
                  ("filename", 4, "int64", False), ("start_line", 5, "int64", False))),
    ("Profile", (("sample_type", 1, "ValueType", True), ("sample", 2, "Sample", True),
                 ("location", 4, "Location", True), ("function", 5, "Function", True),
                 ("string_table", 6, "string", True))),
)


def _profile_class():
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    types = {"int64": field.TYPE_INT64, "uint64": field.TYPE_UINT64, "string": field.TYPE_STRING}
    schema = descriptor_pb2.FileDescriptorProto(name="shardlab_pprof.proto", package="shardlab_pprof",
                                                syntax="proto3")
    for name, fields in _PPROF_MESSAGES:
        message = schema.message_type.add(name=name)
        for fname, number, ftype, repeated in fields:
            f = message.field.add(name=fname, number=number,
                                  label=field.LABEL_REPEATED if repeated else field.LABEL_OPTIONAL)
            if ftype in types:
                f.type = types[ftype]
            else:
                f.type, f.type_name = field.TYPE_MESSAGE, f".shardlab_pprof.{ftype}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(schema)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("shardlab_pprof.Profile"))


def read_memory_profile(source) -> list[MemorySample]:
    """The samples of a device memory profile: ``jax.profiler.device_memory_profile()``'s bytes, or the
    file ``jax.profiler.save_device_memory_profile`` wrote. Largest first."""
    if isinstance(source, (str, Path)):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"read_memory_profile: source must be a memory profile's bytes or file, got "
                             f"{str(source)!r} (no such file)")
        source = path.read_bytes()
    if not isinstance(source, (bytes, bytearray)):
        raise ValueError(f"read_memory_profile: source must be bytes (jax.profiler.device_memory_profile()) "
                         f"or a file path, got {type(source).__name__}")
    raw = gzip.decompress(source) if source[:2] == b"\x1f\x8b" else bytes(source)
    profile = _profile_class()()
    try:
        profile.ParseFromString(raw)
    except Exception as e:  # noqa: BLE001 - protobuf's DecodeError, named in the message
        raise ValueError(f"read_memory_profile: source is not a pprof profile ({type(e).__name__})") from None
    strings = profile.string_table
    kinds = [strings[v.type] for v in profile.sample_type]
    if "space" not in kinds:
        raise ValueError(f"read_memory_profile: a device memory profile has a 'space' value; this one has "
                         f"{kinds}")
    functions = {f.id: f for f in profile.function}
    locations = {loc.id: loc for loc in profile.location}
    samples = []
    for sample in profile.sample:
        labels = {strings[lab.key]: strings[lab.str] if lab.str else lab.num for lab in sample.label}
        values = dict(zip(kinds, sample.value))
        stack = tuple((strings[functions[ln.function_id].name], strings[functions[ln.function_id].filename],
                       int(ln.line)) for lid in sample.location_id for ln in locations[lid].line)
        samples.append(MemorySample(str(labels.get("kind", "")), labels.get("device"),
                                    int(values.get("allocations", 0)), int(values["space"]), stack))
    return sorted(samples, key=lambda s: -s.nbytes)
