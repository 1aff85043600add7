"""shardlab.programs.traces: a profiler trace read back per device, the program's sources, the memory profile."""

import gzip
import inspect
import json

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.pictures.display import smallest_text_pt
from shardlab.pictures.timeline import draw_timeline
from shardlab.programs.traces import (Trace, collective_overlap, hlo_sources, op_kind, op_totals, quiet_native_logs,
                                      read_memory_profile, read_trace, scope_of, time_breakdown, trace_file)
from shardlab.hardware.environment import quiet_libtpu


# ---------------------------------------------------------------------------------------------------------
# Synthetic traces in the two layouts, with times chosen so that every sum is known by hand


def _meta(pid, name, tid=None):
    event = {"ph": "M", "pid": pid, "name": "process_name" if tid is None else "thread_name",
             "args": {"name": name}}
    if tid is not None:
        event["tid"] = tid
    return event


def _span(name, ts, dur, pid=1, tid=10, **args):
    return {"ph": "X", "pid": pid, "tid": tid, "ts": ts, "dur": dur, "name": name, "args": args}


def _host_op(name, device, ts, dur, run, tid):
    return _span(name, ts, dur, tid=tid, device_ordinal=str(device), hlo_module="jit_f", hlo_op=name,
                 run_id=str(run))


def host_trace():
    """Two CPU devices, two runs: a fusion, then an all-reduce in which device 1 waits 30 us for device 0 to
    arrive and device 0 waits 5 us for the rendezvous to complete. Span names as XLA:CPU's rendezvous writes
    them (a ``Rendezvous`` span around the waits; ``InvokeRendezvous`` is the exchange, not a wait)."""
    events = [_meta(1, "/host:CPU"), _meta(1, "worker", 10), _meta(1, "worker", 11)]
    for run, base in ((7, 0.0), (8, 1000.0)):
        events += [_host_op("fusion.1", 0, base + 0, 50, run, 10), _host_op("all-reduce.3", 0, base + 50, 40, run, 10),
                   _host_op("fusion.1", 1, base + 0, 20, run, 11), _host_op("all-reduce.3", 1, base + 20, 70, run, 11),
                   _span("Rendezvous", base + 22, 60, tid=11),
                   _span("Wait: pending_threads=1/2", base + 25, 30, tid=11),
                   _span("Rendezvous", base + 52, 30, tid=10), _span("InvokeRendezvous", base + 53, 2, tid=10),
                   _span("Wait for rendezvous callback", base + 55, 5, tid=10)]
    events.append(_host_op("other", 0, 5000, 10, 99, 10) | {"args": {"device_ordinal": "0", "hlo_module": "jit_g",
                                                                     "hlo_op": "other", "run_id": "99"}})
    return {"traceEvents": events}


def device_trace():
    """Two TPU devices as processes of their own, each with an XLA Ops and an XLA Modules line: the layout
    XProf documents for TPUs (github.com/openxla/xprof, docs/trace_viewer.md), not one recorded here."""
    events = []
    for pid, device in ((5, 0), (6, 1)):
        events += [_meta(pid, f"/device:TPU:{device}"), _meta(pid, "XLA Modules", 1), _meta(pid, "XLA Ops", 2),
                   _meta(pid, "Steps", 3)]
        for base in (0.0, 500.0):
            events += [_span("jit_f(42)", base, 100, pid=pid, tid=1),
                       _span("fusion.2", base + 10, 30, pid=pid, tid=2),
                       _span("all-gather-start.1", base + 40, 40 + 10 * device, pid=pid, tid=2)]
    events.append(_meta(9, "/host:CPU"))
    return {"traceEvents": events}


def gpu_trace():
    """Two GPUs as processes of their own, one thread per stream, kernel events naming their HLO op and
    module in args: the raw layout XProf documents for GPUs (docs/trace_viewer.md: "one track per stream";
    the hlo_op/hlo_module stats of xprof/utils/gpu_event_stats.cc), not one recorded here. Device 0's
    fusion.2 launches two kernels; a memcpy carries no hlo_op; an eager op belongs to another module."""
    events = []
    for pid, device in ((3, 0), (4, 1)):
        events += [_meta(pid, f"/device:GPU:{device}"), _meta(pid, "Stream #13(Compute)", 13),
                   _meta(pid, "Stream #20(MemcpyH2D)", 20), _meta(pid, "Stream #25(Compute,Nccl)", 25),
                   _meta(pid, "Launch Stats", 1)]
        for base in (0.0, 500.0):
            kernels = [("loop_fusion", "fusion.2", base + 10, 20)]
            if device == 0:
                kernels.append(("loop_fusion_1", "fusion.2", base + 30, 10))
            events += [_span(k, ts, dur, pid=pid, tid=13, hlo_op=op, hlo_module="jit_f", correlation_id=7)
                       for k, op, ts, dur in kernels]
            events.append(_span("ncclDevKernel_AllGather_RING_LL", base + 40, 40 + 10 * device, pid=pid, tid=25,
                                hlo_op="all-gather-start.1", hlo_module="jit_f"))
            events.append(_span("MemcpyH2D", base, 5, pid=pid, tid=20))
        events.append(_span("kernel", 900, 5, pid=pid, tid=13, hlo_op="add", hlo_module="jit_add"))
        events.append(_span("Launch", 5, 5, pid=pid, tid=1, hlo_op="fusion.2", hlo_module="jit_f"))
    events.append(_meta(9, "/host:CPU"))
    return {"traceEvents": events}


def test_gpu_layout_from_stream_lines():
    t = read_trace(gpu_trace(), module="jit_f")
    assert (t.platform, t.devices, t.steps, t.waits, t.modules) == ("GPU", (0, 1), 2, (), ("jit_f",))
    assert [(op.name, op.kind) for op in t.ops_in(1, 0)] == [
        ("fusion.2", "compute"), ("fusion.2", "compute"), ("all-gather-start.1", "collective")]
    assert [op.start for op in t.ops_in(1, 1)] == [510, 540]
    parts = time_breakdown(t, 1)
    # window: first op at 510, last end at 500 + 40 + 50 = 590 (device 1)
    assert parts[0] == pytest.approx({"compute": 30, "collective": 40, "wait": 0, "idle": 10, "window": 80})
    assert parts[1] == pytest.approx({"compute": 20, "collective": 50, "wait": 0, "idle": 10, "window": 80})
    assert read_trace(gpu_trace()).modules == ("jit_add", "jit_f")
    with pytest.raises(ValueError, match="no XLA ops of module 'jit_other'"):
        read_trace(gpu_trace(), module="jit_other")


def test_host_layout_devices_steps_and_waits():
    t = read_trace(host_trace(), module="jit_f")
    assert (t.platform, t.devices, t.steps, t.modules) == ("CPU", (0, 1), 2, ("jit_f",))
    assert [(op.name, op.kind) for op in t.ops_in(0, 1)] == [("fusion.1", "compute"), ("all-reduce.3", "collective")]
    assert [(w.device, w.op, w.duration, w.reason) for w in t.waits_in(1)] == [
        (0, "all-reduce.3", 5, "completion"), (1, "all-reduce.3", 30, "arrival")]
    assert read_trace(host_trace()).modules == ("jit_f", "jit_g")


def test_host_layout_breakdown_by_hand():
    parts = time_breakdown(read_trace(host_trace(), module="jit_f"), 1)
    assert parts[0] == pytest.approx({"compute": 50, "collective": 35, "wait": 5, "idle": 0, "window": 90})
    assert parts[1] == pytest.approx({"compute": 20, "collective": 40, "wait": 30, "idle": 0, "window": 90})


def test_device_layout_from_process_metadata():
    t = read_trace(device_trace())
    assert (t.platform, t.devices, t.steps, t.waits) == ("TPU", (0, 1), 2, ())
    assert {op.module for op in t.ops} == {"jit_f"}
    parts = time_breakdown(t, 1)
    # window: first op at 510, last end at 500 + 40 + 50 = 590 (device 1)
    assert parts[0] == pytest.approx({"compute": 30, "collective": 40, "wait": 0, "idle": 10, "window": 80})
    assert parts[1] == pytest.approx({"compute": 30, "collective": 50, "wait": 0, "idle": 0, "window": 80})
    with pytest.raises(ValueError, match="no XLA ops of module 'jit_other'"):
        read_trace(device_trace(), module="jit_other")


def test_op_totals_sum_durations():
    t = read_trace(host_trace(), module="jit_f")
    rows = {name: (kind, runs, total) for name, kind, runs, total in op_totals(t)}
    assert rows == {"all-reduce.3": ("collective", 4, 2 * (40 + 70)), "fusion.1": ("compute", 4, 2 * (50 + 20))}
    assert op_totals(t)[0][0] == "all-reduce.3"
    assert op_totals(t, steps=[0])[0][2] == 2


@pytest.mark.parametrize("name, kind", [("all-gather.3", "collective"), ("all-reduce-start", "collective"),
                                        ("reduce-scatter.1", "collective"), ("collective-permute-done.2", "collective"),
                                        ("fusion.12", "compute"), ("dot.4", "compute"), ("ynn_fusion", "compute")])
def test_op_kind(name, kind):
    assert op_kind(name) == kind


def test_bad_inputs_name_the_argument(tmp_path):
    with pytest.raises(ValueError, match="folder"):
        trace_file(tmp_path / "missing")
    with pytest.raises(ValueError, match="no \\*.trace.json.gz"):
        trace_file(tmp_path)
    with pytest.raises(ValueError, match="folder must be a path"):
        trace_file(3)
    with pytest.raises(ValueError, match="module must be"):
        read_trace(host_trace(), module=3)
    with pytest.raises(ValueError, match="traceEvents"):
        read_trace({"events": []})
    t = read_trace(host_trace(), module="jit_f")
    for bad in (-1, 2, 1.0, True):
        with pytest.raises(ValueError, match="step must be"):
            time_breakdown(t, bad)
    with pytest.raises(ValueError, match="trace must be a Trace"):
        time_breakdown({}, 0)
    with pytest.raises(ValueError, match="trace must be a Trace"):
        op_totals([])
    with pytest.raises(ValueError, match="width"):
        draw_timeline(t, 0, width=9)
    with pytest.raises(ValueError, match="scopes must be"):
        draw_timeline(t, 0, scopes=["a"])
    with pytest.raises(ValueError, match="hlo_text"):
        hlo_sources("not a program")
    with pytest.raises(ValueError, match="scopes must be"):
        scope_of("jit(f)/a/b", "a")
    with pytest.raises(ValueError, match="op_name"):
        scope_of(None, ["a"])
    with pytest.raises(ValueError, match="name must be"):
        op_kind(3)
    with pytest.raises(ValueError, match="source must be"):
        read_memory_profile(12)
    with pytest.raises(ValueError, match="no such file"):
        read_memory_profile(tmp_path / "nothing.prof")
    with pytest.raises(ValueError, match="not a pprof profile"):
        read_memory_profile(b"\x08\x96\x01\xff\xff")


@pytest.mark.parametrize("op_name, found", [
    ("jit(step)/jvp(layer1)/dot_general", "layer1"),
    ("jit(step)/transpose(jvp(layer1))/dot_general", "layer1 (backward)"),
    ("jit(step)/update/sub", "update"),
    ("jit(step)/jvp(layer2)/jit(relu)/max", "layer2"),
    ("p['w1']", None),
    ("jit(step)/layer10/add", None),
    ("jit(step)/update/transpose(jvp())/dot_general", "update (backward)"),
    # one all-reduce XLA combined from both layers' weight gradients
    ("jit(step)/(transpose(jvp(layer1))/dot_general:transpose(jvp(layer2))/dot_general)", "layer1+layer2 (backward)"),
    ("jit(step)/(transpose(jvp(layer2))/dot_general:transpose(jvp(layer1))/dot_general)", "layer1+layer2 (backward)"),
    ("jit(step)/(update/sub:update/mul)", "update"),
    ("jit(step)/(a/b:c)", None),
])
def test_scope_of(op_name, found):
    assert scope_of(op_name, ("layer1", "layer2", "update")) == found


def test_timeline_fits_the_page():
    t = read_trace(device_trace())
    fig = draw_timeline(t, 0, scopes={"fusion.2": "layer1"}, title="t")
    assert fig.get_size_inches()[0] <= 7.0
    assert smallest_text_pt(fig) >= 9.0
    import matplotlib.pyplot as plt
    plt.close(fig)


# ---------------------------------------------------------------------------------------------------------
# A real trace of a sharded step, checked against the compiled program


def _sharded_step():
    mesh = jax.make_mesh((8,), ("data",), devices=DEVICES, axis_types=(AxisType.Auto,))
    rows = NamedSharding(mesh, P("data", None))
    w = jax.device_put(np.ones((64, 32), np.float32), rows)
    x = jax.device_put(np.ones((16, 64), np.float32), rows)

    @jax.jit
    def step(w, x):
        with jax.named_scope("layer"):
            return jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)

    return step, w, x


@pytest.fixture(scope="module")
def traced(tmp_path_factory):
    step, w, x = _sharded_step()
    jax.block_until_ready(step(w, x))
    folder = tmp_path_factory.mktemp("trace")
    with quiet_libtpu(), jax.profiler.trace(str(folder)):
        for _ in range(2):
            out = step(w, x)
        jax.block_until_ready(out)
    return folder, step.lower(w, x).compile()


def test_real_trace_has_every_collective_once_per_step_and_device(traced):
    folder, compiled = traced
    with gzip.open(trace_file(folder), "rt") as f:
        assert "traceEvents" in json.load(f)
    t = read_trace(folder, module=compiled.as_text().split()[1].rstrip(","))
    assert isinstance(t, Trace) and t.steps == 2 and t.devices == tuple(d.id for d in DEVICES)
    names = [c.name for c in shardlab.collectives_in_compiled(compiled)]
    assert names
    # the first of eight threads to reach a collective waits for the others: XLA:CPU records it
    assert any(w.reason == "arrival" for w in t.waits) and all(w.op in names for w in t.waits)
    for s in range(t.steps):
        for d in t.devices:
            ran = [op.name for op in t.ops_in(s, d) if op.kind == "collective"]
            assert sorted(ran) == sorted(names)
        for d, p in time_breakdown(t, s).items():
            assert p["compute"] + p["collective"] + p["wait"] + p["idle"] == pytest.approx(p["window"])
            assert min(p.values()) >= 0


def test_sources_name_the_scope_and_the_line(traced):
    _, compiled = traced
    sources = hlo_sources(compiled.as_text())
    names = {op for op in sources}
    assert {c.name for c in shardlab.collectives_in_compiled(compiled)} <= names
    lines, first = inspect.getsourcelines(_sharded_step)
    product_line = first + next(i for i, text in enumerate(lines) if "x @ w" in text)
    with_scope = [s for s in sources.values() if scope_of(s.op_name, ["layer"])]
    assert with_scope
    assert any(s.line == product_line and s.function.endswith("<lambda>") for s in with_scope)
    assert any(scope_of(s.op_name, ["layer"]) == "layer (backward)" for s in with_scope)


def test_inline_source_metadata_is_read():
    text = ('HloModule m\n\nENTRY %main (p: f32[2]) -> f32[2] {\n  %p = f32[2]{0} parameter(0)\n'
            '  ROOT %negate.1 = f32[2]{0} negate(%p), metadata={op_name="jit(f)/neg" '
            'source_file="/x/model.py" source_line=12}\n}\n')
    src = hlo_sources(text)["negate.1"]
    assert (src.opcode, src.op_name, src.file, src.line, src.function) == ("negate", "jit(f)/neg", "/x/model.py",
                                                                            12, None)


def test_memory_profile_matches_live_arrays(tmp_path):
    a = jax.device_put(np.ones((64, 32), np.float32),
                       NamedSharding(jax.make_mesh((8,), ("d",), devices=DEVICES), P("d")))
    samples = read_memory_profile(jax.profiler.device_memory_profile())
    by_device = {}
    for s in samples:
        if s.kind == "buffer":
            by_device[s.device] = by_device.get(s.device, 0) + s.nbytes
    buffers = {}   # a shard's .data is a view of the array's buffer: count each buffer once
    for x in jax.live_arrays():
        for sh in x.addressable_shards:
            buffers[(sh.device, sh.data.unsafe_buffer_pointer())] = sh.data.nbytes
    for d in DEVICES:
        live = sum(n for (device, _), n in buffers.items() if device == d)
        assert by_device.get(f"{d.platform}:{d.id}", 0) == live >= 1024
    path = tmp_path / "memory.prof"
    jax.profiler.save_device_memory_profile(str(path))
    from_file = read_memory_profile(path)
    assert sum(s.nbytes for s in from_file) == sum(s.nbytes for s in samples)
    assert any(s.allocated_at() and s.allocated_at()[0] == "test_memory_profile_matches_live_arrays"
               for s in from_file)
    del a


def async_trace():
    """One TPU device (a process with an XLA Ops line) whose step has an asynchronous all-gather partly
    hidden behind two fusions, an all-reduce-start/done with nothing between them, and a synchronous
    collective-permute: by hand, covered 30 + 20 of the gather's 70 us, 0 of the all-reduce's 25."""
    pid = 5
    events = [_meta(pid, "/device:TPU:0"), _meta(pid, "XLA Modules", 1), _meta(pid, "XLA Ops", 2)]
    events.append(_span("jit_f(1)", 0, 300, pid=pid, tid=1))
    ops = [("fusion.1", 0, 10), ("all-gather-start.1", 10, 5), ("fusion.2", 15, 30), ("copy-start", 45, 5),
           ("fusion.3", 60, 20), ("all-gather-done.1", 80, 0), ("all-reduce-start", 100, 5),
           ("all-reduce-done", 105, 20), ("collective-permute.4", 130, 12), ("fusion.4", 150, 10)]
    events += [_span(name, ts, dur, pid=pid, tid=2) for name, ts, dur in ops]
    return {"traceEvents": events}


def test_collective_overlap_by_hand():
    windows = {w.name: w for w in collective_overlap(read_trace(async_trace()), 0)}
    assert set(windows) == {"all-gather-start.1", "all-reduce-start", "collective-permute.4"}
    gather = windows["all-gather-start.1"]
    assert (gather.start, gather.span, gather.covered) == pytest.approx((10, 70, 50))
    assert gather.hidden == pytest.approx(50 / 70) and gather.exposed == pytest.approx(20)
    assert windows["all-reduce-start"].span == pytest.approx(25)
    assert windows["all-reduce-start"].hidden == 0
    assert windows["collective-permute.4"].hidden == 0
    with pytest.raises(ValueError, match="trace must be a Trace"):
        collective_overlap({"traceEvents": []}, 0)
    with pytest.raises(ValueError, match="step must be"):
        collective_overlap(read_trace(async_trace()), 3)


def test_collective_overlap_agrees_with_xprof():
    """The same windows and covered fractions as XProf's own async-overlap analysis, on the same events."""
    async_overlap = pytest.importorskip("xprof.cli.internal.async_overlap")
    trace = read_trace(async_trace())
    events = [async_overlap.TimelineEvent("/device:TPU:0", "XLA Ops", op.name, int(op.start * 1e6),
                                          int(op.duration * 1e6)) for op in trace.ops_in(0, 0)]
    theirs = {row["name"]: row for row in async_overlap.analyze(events)["top_exposed"]}
    ours = {w.name: w for w in collective_overlap(trace, 0) if "-start" in w.name}
    assert set(ours) == set(theirs), (set(ours), set(theirs))
    for name, w in ours.items():
        assert w.span * 1e6 == pytest.approx(theirs[name]["span_ps"], rel=1e-9)
        assert w.hidden == pytest.approx(theirs[name]["overlap_ratio"], rel=1e-9, abs=1e-12)


def test_quiet_native_logs_keeps_other_lines(capfd):
    import os
    with quiet_native_logs():
        os.write(2, b"I0000 00:00:1795854870.310381   23221 multi_xplanes_to_op_stats.cc:68] chatter\n")
        os.write(2, b"W1128 08:35:32.020187   24489 profiler_session.cc:177] late\n")
        os.write(2, b"a real problem\n")
    err = capfd.readouterr().err
    assert "a real problem" in err and "chatter" not in err and "late" not in err
