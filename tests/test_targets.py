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
from shardlab import targets

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

    monkeypatch.setattr(targets, "_topology_devices", missing)
    with shardlab.compiling_for_tpu():
        shardlab.target_mesh("v5e-8", (2, 4), ("data", "model"))
        raise AssertionError("not reached")
    out = capsys.readouterr().out
    assert out.count("\n") == 1 and "libtpu is not installed" in out
    with pytest.raises(ZeroDivisionError):
        with shardlab.compiling_for_tpu():
            1 / 0


def test_libtpu_start_up_warnings_are_hidden_and_other_lines_kept(capfd):
    with targets.quiet_libtpu():
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
