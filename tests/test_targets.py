"""Compile targets: real TPU slices described by libtpu, programs compiled for them, and the one-line skip."""

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import shardlab
from shardlab.hardware import environment, tpus

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX


def sds(mesh, shape, spec, dtype=jnp.float32):
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))


def test_every_named_slice_has_its_chips_and_one_host_where_it_says_so():
    for name, t in shardlab.TARGETS.items():
        devs = shardlab.target_devices(name)
        assert len(devs) == t.num_chips, name          # v5e, v5p, v6e: one device per chip
        assert {d.platform for d in devs} == {"tpu"}, name
        assert len({tuple(d.coords) for d in devs}) == t.num_chips, name
        kind = {"TPU v5e": "TPU v5 lite", "TPU v5p": "TPU v5", "TPU v6e": "TPU v6 lite"}[t.chip.name]
        assert {d.device_kind for d in devs} == {kind}, name
        if t.host_bounds is not None:
            assert {d.process_index for d in devs} == {0}, f"{name} is one host"
    assert {d.process_index for d in shardlab.target_devices("v5e-256")} == set(range(64))  # 4 chips per host


def test_target_mesh_is_make_mesh_over_the_slice():
    mesh = shardlab.target_mesh("v5e-8", (2, 4), ("data", "model"))
    direct = jax.make_mesh((2, 4), ("data", "model"), devices=shardlab.target_devices("v5e-8"),
                           axis_types=(jax.sharding.AxisType.Auto,) * 2)
    assert [d.id for d in mesh.devices.flat] == [d.id for d in direct.devices.flat]
    here = shardlab.target_mesh("here", (2, 2), ("a", "b"))
    assert [d.id for d in here.devices.flat] == [d.id for d in jax.make_mesh(
        (2, 2), ("a", "b"), devices=jax.devices()[:4], axis_types=(jax.sharding.AxisType.Auto,) * 2).devices.flat]


@pytest.mark.parametrize("call, match", [
    (lambda: shardlab.target_devices("v7x-9"), "target must be"),
    (lambda: shardlab.target_mesh("v5e-8", (2, 4.0), ("a", "b")), "axis_sizes"),
    (lambda: shardlab.target_mesh("v5e-8", (2, 4), ("a",)), "axis_names"),
    (lambda: shardlab.compile_for(3), "f must be a function"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_tpu_program_is_read_like_a_cpu_one():
    def f(x, w):
        return jnp.sum(jnp.tanh(x @ w))

    grad = jax.grad(f, argnums=1)
    progs = {}
    for where in ("here", "v5e-8"):
        mesh = shardlab.target_mesh(where, (2, 4), ("data", "model"))
        args = (sds(mesh, (64, 256), P("data", None)), sds(mesh, (256, 512), P(None, "model")))
        progs[where] = prog = shardlab.compile_for(grad, *args)
        stats = prog.compiled.memory_analysis()
        assert prog.memory.xla_peak == stats.peak_memory_in_bytes
        assert prog.memory.peak == (stats.argument_size_in_bytes + stats.output_size_in_bytes
                                    + stats.temp_size_in_bytes - stats.alias_size_in_bytes)
        assert prog.collectives == shardlab.collectives_in(prog.compiled)
        assert prog.flops > 2 * 2 * 32 * 256 * 128          # two per-device matrix products, at least
        # The contraction over the batch is summed across "data": one all-reduce of the gradient block.
        (c,) = prog.collectives
        assert c.kind == "all-reduce" and sorted(c.result_shapes[0]) == [128, 256]   # CPU sums it transposed
        ids = np.array([d.id for d in mesh.devices.flat]).reshape(2, 4)
        # Groups in Device.id follow the mesh's order: each column of the mesh is one group.
        assert sorted(map(sorted, prog.collectives.device_groups(c))) == sorted(sorted(col) for col in ids.T)
    assert progs["v5e-8"].target == "TPU v5 lite x8" and progs["here"].target == "CPU x8"
    assert [d.id for d in shardlab.target_mesh("v5e-8", (2, 4), ("data", "model")).devices.flat] != list(range(8)), \
        "the TPU order is make_mesh's, not the list order (else the group test above proves nothing)"


@pytest.mark.parametrize("where", ["here", "v5e-8"])
def test_a_donated_argument_is_aliased_and_taken_off_the_peak(where):
    # w is donated: XLA writes the new w into its buffer. One device's block of w is 256 x 256 floats.
    mesh = shardlab.target_mesh(where, (2, 4), ("data", "model"))
    block = (512 // 2) * (1024 // 4) * 4
    args = (sds(mesh, (512, 1024), P("data", "model")), sds(mesh, (512, 1024), P("data", "model")))

    def update(w, g):
        return w - 0.1 * jnp.tanh(g), jnp.sum(g)

    kept = shardlab.compile_for(jax.jit(update), *args)
    donated = shardlab.compile_for(jax.jit(update, donate_argnums=0), *args)
    assert kept.memory.aliased == 0 and donated.memory.aliased == block
    assert kept.memory.arguments == donated.memory.arguments == 2 * block
    assert (kept.memory.outputs, kept.memory.temporaries) == (donated.memory.outputs, donated.memory.temporaries)
    # The aliased block is counted once, not twice: the peak drops by it, as XLA's own estimate does.
    assert kept.memory.peak - donated.memory.peak == block
    assert kept.memory.xla_peak - donated.memory.xla_peak == block


@pytest.mark.parametrize("dtype, bits", [("int4", 4), ("float4_e2m1fn", 4), ("float8_e4m3fn", 8), ("bfloat16", 16)])
def test_narrow_types_are_gathered_at_their_own_width_on_a_tpu(dtype, bits):
    import ml_dtypes

    dt = getattr(jnp, dtype)
    assert (ml_dtypes.iinfo if dtype.startswith("int") else ml_dtypes.finfo)(dt).bits == bits
    mesh = shardlab.target_mesh("v5e-8", (8,), ("x",))
    f = jax.jit(jax.shard_map(lambda v: jax.lax.all_gather(v, "x", tiled=True), mesh=mesh,
                              in_specs=P("x"), out_specs=P("x")))
    prog = shardlab.compile_for(f, sds(mesh, (8 * 4096,), P("x"), dt))
    (c,) = prog.collectives
    gathered = 8 * 4096 * bits // 8
    assert c.kind == "all-gather" and c.result_bytes == gathered == prog.memory.outputs   # XLA:TPU's own size
    assert c.bytes_per_device == 7 * gathered // 8


def test_compiling_for_tpu_turns_only_a_missing_compiler_into_one_line(capsys, monkeypatch):
    def missing(target):
        raise RuntimeError("JAX TPU support not installed; cannot generate TPU topology. See https://...")

    monkeypatch.setattr(tpus, "tpu_devices", missing)
    with shardlab.compiling_for_tpu():
        shardlab.target_mesh("v5e-8", (2, 4), ("data", "model"))
        raise AssertionError("not reached")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "libtpu is not installed" in out
    with pytest.raises(ZeroDivisionError):
        with shardlab.compiling_for_tpu():
            1 / 0


def test_libtpu_start_up_warnings_are_hidden_and_other_lines_kept(capfd):
    with environment.quiet_libtpu():
        os.write(2, b"WARNING: Logging before InitGoogle() is written to STDERR\n")
        os.write(2, b"E0000 common_lib.cc] could not determine TPU worker hostnames\n")
        os.write(2, b"something else went wrong\n")
    err = capfd.readouterr().err
    assert err == "something else went wrong\n"


def test_two_processes_compile_for_a_tpu_at_once():
    # libtpu's lock file would refuse the second process; with no TPU chip here shardlab lifts it.
    code = textwrap.dedent("""
        import time, shardlab
        shardlab.setup_devices(8)
        print(len(shardlab.target_devices("v5e-8")), flush=True)
        time.sleep(3)
    """)
    env = {k: v for k, v in os.environ.items() if k != "ALLOW_MULTIPLE_LIBTPU_LOAD"}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [o.splitlines()[-1] for o, _ in outs] == ["8", "8"], outs
    assert [e for _, e in outs] == ["", ""], "libtpu's start-up warnings reached the reader"


def test_xla_tpu_fusions_of_collectives_are_read_once_and_as_what_they_do():
    # An all-gather overlapped with a matrix product: XLA:TPU copies it into three fused computations.
    mesh = shardlab.target_mesh("v5e-8", (4,), ("x",))

    def body(a, w):
        return jax.lax.all_gather(a, "x", tiled=True, to="invarying"), jax.lax.psum(a @ w, "x")

    f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P()), out_specs=(P(), P())))
    prog = shardlab.compile_for(f, sds(mesh, (512, 1024), P("x"), jnp.bfloat16),
                                sds(mesh, (1024, 1024), P(), jnp.bfloat16))
    assert prog.text.count("all-gather(") >= 2, "no overlapped copies of the all-gather: the test proves nothing"
    assert sorted(prog.collectives.kinds().items()) == [("all-gather", 1), ("all-reduce", 1)]
    assert prog.collectives.of_kind("all-gather")[0].is_async

    # A product whose output is cut where its contraction was: one reduce-scatter, fused from two ops.
    mesh = shardlab.target_mesh("v5e-8", (2, 4), ("data", "model"))
    g = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P("data", "model")))
    prog = shardlab.compile_for(g, sds(mesh, (2048, 8192), P("data", "model")), sds(mesh, (8192, 8192), P("model")))
    assert "all-reduce-scatter" in prog.text
    (c,) = prog.collectives
    assert c.kind == "reduce-scatter" and c.operand_shapes == ((1024, 8192),) and c.result_shapes == ((1024, 2048),)
    assert c.bytes_per_device == 3 * 1024 * 8192 * 4 // 4      # 3 of 4 pieces of the f32 partial sums leave


def test_a_loop_in_the_program_is_reported():
    step = jax.jit(lambda x: jax.lax.fori_loop(0, 3, lambda i, y: jnp.tanh(y), x))
    mesh = shardlab.target_mesh("v5e-8", (8,), ("x",))
    prog = shardlab.compile_for(step, sds(mesh, (64, 128), P("x")))
    assert prog.while_loops == 1 and "bodies counted once" in prog.summary()
    assert shardlab.compile_for(jnp.tanh, sds(mesh, (64, 128), P("x"))).while_loops == 0


# ---------------------------------------------------------------------------------------------------------
# GPU targets: compiled with JAX's CUDA plugin and no GPU

from shardlab.hardware import gpus as gpu_targets  # noqa: E402

needs_cuda_plugin = pytest.mark.skipif(shardlab.gpu_compiler_missing() is not None,
                                       reason="JAX's CUDA plugin is not installed here")

# XLA's H100 SXM target config (xla/backends/gpu/target_config/specs/h100_sxm.txtpb), typed from the file.
XLA_H100 = {"core_count": 132, "device_memory_size": 84942979072, "memory_bandwidth": 3352320000000,
            "l2_cache_size": 52428800, "shared_memory_per_core": 233472, "threads_per_warp": 32}


def test_the_target_config_carries_xlas_values_for_the_h100():
    import re

    text = gpu_targets.target_config("NVIDIA H100 80GB HBM3")
    for field, value in XLA_H100.items():
        (found,) = re.findall(rf"^\s*{field}: (\d+)$", text, re.M)
        assert int(found) == value, field
    assert re.search(r'^platform_name: "CUDA"$', text, re.M)
    assert re.search(r"cuda_compute_capability \{\s*major: 9\s*minor: 0\s*\}", text)
    assert 'device_description_str: "NVIDIA H100 80GB HBM3"' in text


@needs_cuda_plugin
def test_every_gpu_target_has_its_gpus_host_by_host():
    for name, t in shardlab.GPU_TARGETS.items():
        devs = shardlab.target_devices(name)
        assert len(devs) == t.hosts * t.gpus_per_host, name
        assert {d.platform for d in devs} == {"gpu"} and {d.device_kind for d in devs} == {t.spec.name}, name
        # ids 0..n-1, host h holding ids h*g .. h*g+g-1 (counted here, not read from shardlab)
        assert sorted(d.id for d in devs) == list(range(t.num_chips)), name
        assert all(d.process_index == d.id // t.gpus_per_host for d in devs), name


@needs_cuda_plugin
def test_a_gpu_mesh_puts_a_node_on_the_inner_axis():
    mesh = shardlab.target_mesh("h100-32", (4, 8), ("data", "model"))
    hosts = np.vectorize(lambda d: d.process_index)(mesh.devices)
    assert (hosts == np.arange(4)[:, None]).all()      # each row of the mesh is one node
    direct = jax.make_mesh((4, 8), ("data", "model"), devices=shardlab.target_devices("h100-32"),
                           axis_types=(jax.sharding.AxisType.Auto,) * 2)
    assert [d.id for d in mesh.devices.flat] == [d.id for d in direct.devices.flat]


@needs_cuda_plugin
def test_a_gpu_program_is_read_like_a_tpu_one():
    mesh = shardlab.target_mesh("h100-32", (4, 8), ("data", "model"))

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    d, b = 1024, 256
    w, x = sds(mesh, (d, d), P(None, "model"), jnp.bfloat16), sds(mesh, (b, d), P("data", None), jnp.bfloat16)
    prog = shardlab.compile_for(jax.grad(loss), w, x)
    assert prog.target == "NVIDIA H100 80GB HBM3 x32"
    kinds = prog.collectives.kinds()
    assert kinds.get("all-reduce", 0) >= 1, kinds
    # the weight gradient is summed over the data axis: groups of one GPU per node
    groups = {tuple(sorted(g)) for c in prog.collectives for g in prog.collectives.device_groups(c)
              if c.kind == "all-reduce"}
    assert {tuple(range(k, 32, 8)) for k in range(8)} <= groups
    # memory: arguments are the two shards, read from XLA (bf16: 2 bytes)
    assert prog.memory.arguments == 2 * (d * d // 8 + b * d // 4)
    # flops: XLA:GPU reports none here; the unsharded count shared out, against 2 matmuls of 2*b*d*d
    assert prog.flops_source != "cost_analysis"
    assert prog.flops == pytest.approx(2 * 2 * b * d * d / 32, rel=0.05)


@needs_cuda_plugin
def test_xla_gpu_compiles_a_program_larger_than_the_gpu():
    mesh = shardlab.target_mesh("h100-8", (8,), ("data",))
    big = sds(mesh, (8, 16 * 2 ** 30), P("data", None))     # 64 GiB of float32 per GPU
    prog = shardlab.compile_for(lambda a: a * 2, big)
    assert prog.memory.peak > shardlab.GPU_TARGETS["h100-8"].spec.memory_bytes


def test_gpu_target_bad_input_is_named():
    with pytest.raises(ValueError, match="target must be"):
        shardlab.target_devices("h100-9")
    with pytest.raises(ValueError, match="gpu must be"):
        gpu_targets.target_config("A100")
    with pytest.raises(ValueError, match="hosts must be a positive integer"):
        shardlab.GpuTarget("x", gpu_targets.GPUS["NVIDIA B200"], shardlab.GPU_CHIPS["B200"], 0, 8, "nowhere")


def test_compiling_for_gpu_turns_only_a_missing_compiler_into_one_line(capsys):
    with shardlab.compiling_for_gpu():
        raise shardlab.GPUCompilerUnavailable("No GPU compiler here: skipped.")
    assert capsys.readouterr().out == "No GPU compiler here: skipped.\n"
    if gpu_targets.gpu_compiler_missing() is None:      # the compiler is here: other errors are errors
        with pytest.raises(ZeroDivisionError), shardlab.compiling_for_gpu():
            1 / 0


def test_where_the_compiler_is_missing_a_cell_reading_its_programs_is_one_line(monkeypatch, capsys):
    # Where there is no GPU compiler, an earlier GPU cell compiled nothing: a later one that reads its
    # programs fails with a NameError or KeyError, which the guard reports as the same one line.
    line = "No GPU compiler here: skipped."
    monkeypatch.setattr(gpu_targets, "gpu_compiler_missing", lambda: line)
    with shardlab.compiling_for_gpu():
        {}["h100-8", "DP"]
    assert capsys.readouterr().out == line + "\n"
    monkeypatch.setattr(gpu_targets, "gpu_compiler_missing", lambda: None)
    with pytest.raises(KeyError), shardlab.compiling_for_gpu():
        {}["h100-8", "DP"]


def test_without_the_plugin_a_gpu_cell_is_one_line(monkeypatch):
    gpu_targets.gpu_compiler_missing.cache_clear()
    real = __import__("importlib.util").util.find_spec

    def no_plugins(name, *a):   # as where no JAX plugin at all is installed: no jax_plugins package
        if name.startswith("jax_plugins"):
            raise ModuleNotFoundError("No module named 'jax_plugins'")
        return real(name, *a)
    monkeypatch.setattr("importlib.util.find_spec", no_plugins)
    try:
        from shardlab.hardware.environment import cuda_plugin_installed, skip_cuda_without_driver

        assert cuda_plugin_installed() is False
        assert skip_cuda_without_driver() is None     # nothing to keep quiet
        line = shardlab.gpu_compiler_missing()
        assert line.startswith("No GPU compiler here") and "\n" not in line
        with pytest.raises(shardlab.GPUCompilerUnavailable, match="No GPU compiler here"):
            shardlab.target_devices("h100-8")
    finally:
        gpu_targets.gpu_compiler_missing.cache_clear()


def test_the_cuda_plugins_note_of_no_driver_is_hidden_and_other_lines_kept(capfd):
    with environment.quiet_libtpu():
        os.write(2, b"I0000 00:00:1.2 123 cudart_stub.cc:31] Could not find cuda drivers on your machine, "
                    b"GPU will not be used.\nsomething else\n")
    err = capfd.readouterr().err
    assert "cuda drivers" not in err and "something else" in err


# ---------------------------------------------------------------------------------------------------------
# The training step the compiling chapters use, the pictures of networks, the CUDA plugin kept quiet

from shardlab.parallelism import training_step  # noqa: E402


def test_step_flops_count_what_xla_counts_on_one_device():
    # One block (no loop to count once), one device: XLA:CPU's cost_analysis. With one block XLA keeps
    # the forward pass's products for the backward pass instead of recomputing them: 12 r d h, the
    # forward and backward products, which are 6/7 of step_flops's 14 r d h (the recompute included).
    mesh = shardlab.target_mesh("here", (1, 1), ("data", "model"))
    layers, d, rows = 1, 128, 256
    prog = training_step.compile_step(mesh, "DP", layers=layers, d=d, rows=rows)
    assert prog.flops_source == "cost_analysis"
    assert prog.flops == pytest.approx(6 / 7 * training_step.step_flops(layers, d, rows), rel=0.03)
    assert training_step.step_parameters(layers, d) == 2 * d * 4 * d


def _products_per_step(text: str) -> int:
    """Brute force, independent of shardlab: matrix products in a compiled program, each loop's body
    counted once per trip (XLA's known_trip_count). A product is a ``dot`` instruction or a cuBLAS gemm
    custom call, wherever it sits (fusions and other called computations are followed)."""
    import re

    bodies = dict(re.findall(r"^(?:ENTRY )?%?([\w.\-]+) \(.*?\n(.*?)^}", text, re.M | re.S))
    entry = re.search(r"^ENTRY %?([\w.\-]+) \(", text, re.M).group(1)

    def count(name, seen=()):
        assert name not in seen, f"recursive call through {name}"
        total = 0
        for line in bodies[name].splitlines():
            if re.search(r" dot\(|custom_call_target=\"__cublas\$(?:lt\$matmul|gemm)", line):
                total += 1
            trips = 1
            if " while(" in line:
                trips = int(re.search(r'known_trip_count":\{"n":"(\d+)"', line).group(1))
            for called in re.findall(r"(?:calls|to_apply|body)=%?([\w.\-]+)", line):
                total += trips * count(called, seen + (name,))
        return total
    return count(entry)


@pytest.mark.parametrize("layers", [2, 5])
def test_step_flops_count_the_products_of_the_scanned_program(layers):
    # Several blocks: a scanned forward loop and a scanned backward loop, run `layers` times each.
    # XLA:CPU's cost_analysis counts a loop's body once, so the products are counted here by hand.
    mesh = shardlab.target_mesh("here", (1, 1), ("data", "model"))
    d, rows = 128, 256
    prog = training_step.compile_step(mesh, "DP", layers=layers, d=d, rows=rows)
    products = _products_per_step(prog.text)
    assert products == 7 * layers                       # 2 forward, 5 backward (one recomputed)
    assert products * 2 * rows * d * 4 * d == training_step.step_flops(layers, d, rows)
    assert products != 8 * layers                       # what counting the whole recompute would give


def test_step_flops_count_the_products_of_a_gpu_program():
    # The same count in XLA:GPU's program for one H100 node, tensor parallel (one product per device
    # is an eighth of the whole): the chapter's case.
    from shardlab.hardware.gpus import gpu_compiler_missing

    if gpu_compiler_missing():
        pytest.skip(gpu_compiler_missing())
    mesh = shardlab.target_mesh("h100-8", (1, 8), ("data", "model"))
    layers, d, rows = 3, 256, 512
    prog = training_step.compile_step(mesh, "TP", layers=layers, d=d, rows=rows)
    assert _products_per_step(prog.text) == 7 * layers


def test_a_layout_uses_weights_without_the_batch_axes():
    used = {name: (lay.used(lay.w1), lay.used(lay.w2)) for name, lay in training_step.STEP_LAYOUTS.items()}
    assert used["DP"] == (P(), P())
    assert used["FSDP"] == (P(None, None), P(None, None))        # gathered over every axis
    assert used["TP"] == (P(None, "model"), P("model", None))    # Megatron's columns, then rows
    assert used["2-D"] == (P(None, "model"), P("model", None))   # FSDP's "data" gathered


def test_the_step_computes_what_one_device_computes():
    import numpy as np_

    mesh = shardlab.target_mesh("here", (2, 4), ("data", "model"))
    one = shardlab.target_mesh("here", (1, 1), ("data", "model"))
    layers, d, rows = 2, 16, 32
    rng = np_.random.default_rng(0)
    w = {"w1": rng.normal(size=(layers, d, 4 * d)).astype(np_.float32) * 0.1,
         "w2": rng.normal(size=(layers, 4 * d, d)).astype(np_.float32) * 0.1}
    x = rng.normal(size=(rows, d)).astype(jnp.bfloat16)
    y = rng.normal(size=(rows, d)).astype(np_.float32)
    results = {}
    for name, m in (("2-D", mesh), ("DP", one)):
        lay = training_step.STEP_LAYOUTS[name]
        specs = training_step.step_inputs(m, lay, layers=layers, d=d, rows=rows)
        put = lambda a, s: jax.device_put(a, s.sharding)  # noqa: E731
        params = {k: put(v, specs[0][k]) for k, v in w.items()}
        opt = {"m": {k: put(np_.zeros_like(v), specs[0][k]) for k, v in w.items()},
               "v": {k: put(np_.zeros_like(v), specs[0][k]) for k, v in w.items()}}
        _, new_opt, loss = training_step.train_step(m, lay)(params, opt, put(x, specs[2]), put(y, specs[3]))
        results[name] = (np_.asarray(new_opt["m"]["w1"]), float(loss))   # (1 - b1) * gradient
    # bfloat16 gradients (2**-8 relative) summed in another order: 5 % of the largest, per element
    scale = np_.abs(results["DP"][0]).max()
    np_.testing.assert_allclose(results["2-D"][0], results["DP"][0], atol=5e-2 * scale)
    assert not np_.allclose(results["2-D"][0], 1.2 * results["DP"][0], atol=5e-2 * scale)  # it can fail
    assert results["2-D"][1] == pytest.approx(results["DP"][1], rel=1e-2)


@pytest.mark.parametrize("call, match", [
    (lambda: training_step.compile_step(None, "ZeRO", layers=1, d=8, rows=8), "layout must be"),
    (lambda: training_step.step_flops(0, 8, 8), "layers must be a positive integer"),
    (lambda: training_step.train_step(None, "DP"), "layout must be a StepLayout"),
])
def test_training_step_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_network_picture_has_readable_text_and_the_chips_figures():
    from matplotlib.figure import Figure

    from shardlab.pictures.display import smallest_text_pt
    from shardlab.pictures.networks import draw_gpu_cluster, draw_two_networks

    fig = draw_two_networks(Figure(figsize=(7, 3.2)))
    assert smallest_text_pt(fig) >= 9
    texts = " ".join(t.get_text() for ax in fig.axes for t in ax.texts)
    assert "450 GB/s per GPU" in texts and "50 GB/s per GPU" in texts     # from GPU_CHIPS["H100"]
    with pytest.raises(ValueError, match="nodes must be an integer"):
        draw_gpu_cluster(Figure().add_subplot(), nodes=0)


def _fresh(code, **env):
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", **env})


@needs_cuda_plugin
def test_with_the_plugin_and_no_driver_jax_starts_only_the_cpu_quietly():
    r = _fresh("""
        import shardlab, jax
        shardlab.setup_devices(8)
        print(jax.config.jax_platforms, len(shardlab.target_devices("h100-8")))
    """, JAX_PLATFORMS="")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[-1] == "cpu 8" and r.stderr == ""
    r = _fresh("""
        import jax
        from shardlab.hardware.environment import skip_cuda_without_driver
        print(skip_cuda_without_driver(), jax.config.jax_platforms)
    """, JAX_PLATFORMS="cpu")                          # the reader's own choice is kept
    assert r.returncode == 0 and r.stdout.split() == ["None", "cpu"], r.stderr


@needs_cuda_plugin
def test_a_move_to_a_memory_the_target_lacks_is_warned_about():
    import warnings

    def park(x):
        return jax.device_put(jax.device_put(x, jax.memory.Space.Host), jax.memory.Space.Device) * 2

    gpu = shardlab.target_mesh("h100-8", (2, 4), ("x", "y"))
    assert shardlab.memory_kinds(gpu.devices.flat[0]) == ()     # the compile-only GPU lists no kinds
    with pytest.warns(shardlab.MemoryKindWarning, match="'pinned_host' memory, but the NVIDIA H100"):
        prog = shardlab.compile_for(park, sds(gpu, (64, 64), P("x", "y")))
    assert "S(5)" not in prog.text                              # indeed no host memory in the program
    with warnings.catch_warnings():                             # no move, no warning
        warnings.simplefilter("error")
        shardlab.compile_for(lambda x: x * 2, sds(gpu, (64, 64), P("x", "y")))
        tpu = shardlab.target_mesh("v5e-8", (2, 4), ("x", "y"))  # a TPU has the memory: no warning
        prog = shardlab.compile_for(park, sds(tpu, (64, 64), P("x", "y")))
    assert "S(5)" in prog.text


def test_a_refused_compile_keeps_xla_message_without_the_python_frames():
    import jax

    from shardlab.programs.compile import _without_python_frames

    long = jax.errors.JaxRuntimeError("INTERNAL: Shape mismatch (a != b)\n\t\n\nSuspected Python Code "
                                      "Location:\n  /some/path.py:9:35 [<lambda>]\n  /other/path.py:1:1 [f]")
    short = _without_python_frames(long)
    assert type(short) is type(long) and str(short) == "INTERNAL: Shape mismatch (a != b)"
    plain = jax.errors.JaxRuntimeError("INTERNAL: one line")
    assert _without_python_frames(plain) is plain
