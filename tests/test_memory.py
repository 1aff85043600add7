"""shardlab.hardware.memory_kinds: which memory kinds devices have, and memory placement read from program text."""

import platform
import sys

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab import has_memory_kind, memory_kinds, memory_placements, missing_memory_kind  # noqa: E402
from shardlab.hardware import memory_kinds as kinds  # noqa: E402
from shardlab.programs.placements import Placement

# What JAX's CPU client gives every CPU device (the reference for the CPU runs of these tests).
CPU_KINDS = {"device", "pinned_host", "unpinned_host"}
# requirements.txt installs libtpu (XLA's TPU compiler) on Linux x86-64: there the TPU test must run.
LIBTPU_PLATFORM = sys.platform == "linux" and platform.machine() == "x86_64"


def jax_kinds(device) -> set:
    """The memory kinds of a device, asked of JAX itself (not of shardlab)."""
    return {m.kind for m in device.addressable_memories()}


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])


def test_kinds_of_a_device_include_its_default():
    d = jax.devices()[0]
    kinds = memory_kinds(d)
    assert d.default_memory().kind in kinds
    assert all(isinstance(k, str) for k in kinds)


def test_kinds_are_the_ones_jax_lists_for_every_device():
    for d in jax.devices():
        assert memory_kinds(d) == tuple(m.kind for m in d.addressable_memories()), d
        if d.platform == "cpu":             # JAX's CPU devices expose all three: a missing one is a failure
            assert set(memory_kinds(d)) == CPU_KINDS == jax_kinds(d), d
        for kind in jax_kinds(d):
            assert has_memory_kind(d, kind) and missing_memory_kind(d, kind) is None


@pytest.mark.parametrize("form", ["list", "mesh", "sharding", "array"])
def test_every_device_is_asked_not_only_the_first(monkeypatch, form):
    # One device of eight lacks pinned_host (a stand-in: JAX's CPU devices all have it): whatever form
    # names the eight, the answer is no, and the reason names that device.
    lacking = DEVICES[5]
    real = kinds.memory_kinds
    monkeypatch.setattr(kinds, "memory_kinds",
                        lambda d: tuple(k for k in real(d) if not (d == lacking and k == "pinned_host")))
    grid = jax.make_mesh((2, 4), ("x", "y"), devices=DEVICES)
    sharding = NamedSharding(grid, P("x", "y"))
    where = {"list": DEVICES, "mesh": grid, "sharding": sharding,
             "array": jax.device_put(jnp.zeros((2, 4)), sharding)}[form]
    assert has_memory_kind(where, "pinned_host") is False
    assert f"device {lacking.id} has no 'pinned_host'" in missing_memory_kind(where, "pinned_host")
    assert has_memory_kind(where, "device") is True
    assert has_memory_kind([d for d in DEVICES if d != lacking], "pinned_host") is True


def test_every_form_of_where_is_accepted(mesh):
    d = jax.devices()[0]
    kind = d.default_memory().kind
    s = NamedSharding(mesh, P("x"))
    x = jax.device_put(jnp.zeros(4), s)
    for where in (d, [d], (d,), mesh, s, x):
        assert has_memory_kind(where, kind)
        assert missing_memory_kind(where, kind) is None


def test_missing_kind_names_the_device_and_what_it_has(capsys, mesh):
    d = jax.devices()[0]
    reason = missing_memory_kind(mesh, "no_such_memory")
    assert f"device {d.id}" in reason and "'no_such_memory'" in reason
    assert d.default_memory().kind in reason
    assert has_memory_kind(mesh, "no_such_memory") is False
    assert capsys.readouterr().out == ""  # silent unless asked
    assert has_memory_kind(mesh, "no_such_memory", explain=True) is False
    assert capsys.readouterr().out.startswith("Skipped: ")


@pytest.mark.parametrize("where, match", [
    ("cpu", "where must be"), (3, "where must be"), ([], "at least one device"),
    ([jax.devices()[0], 1], "only jax.Device"),
])
def test_bad_where_is_refused(where, match):
    with pytest.raises(ValueError, match=match):
        has_memory_kind(where, "device")


@pytest.mark.parametrize("kind", ["", None, 5])
def test_bad_kind_is_refused(kind):
    with pytest.raises(ValueError, match="kind must be"):
        has_memory_kind(jax.devices()[0], kind)


def test_memory_kinds_wants_a_device():
    with pytest.raises(ValueError, match="device must be a jax.Device"):
        memory_kinds("cpu:0")


def test_text_must_be_program_text():
    with pytest.raises(ValueError, match="text must be"):
        memory_placements(b"HloModule m")
    with pytest.raises(ValueError, match="lowered module"):
        memory_placements("hello")


# Text as JAX 0.10 prints it (shortened), and compiled HLO as a TPU build after host offloading writes it.
# Both are checked by the parsers of MLIR and XLA below, and fresh programs are read the same way further down.
LOWERED = '''module @jit_f attributes {mhlo.num_partitions = 8 : i32} {
  sdy.mesh @mesh = <["x"=2, "y"=4]>
  func.func public @main(%arg0: tensor<4x8xf32> {mhlo.memory_kind = "pinned_host", sdy.sharding = #sdy.sharding<@mesh, [{"x"}, {"y"}]>}, %arg1: tensor<f32>) -> (tensor<4x8xf32> {jax.result_info = "result[0]", mhlo.memory_kind = "device"}, tensor<f32> {jax.result_info = "result[1]"}) {
    %0 = stablehlo.sine %arg0 : tensor<4x8xf32>
    %1 = stablehlo.custom_call @annotate_device_placement(%0) {backend_config = "", has_side_effect = true, mhlo.frontend_attributes = {_xla_buffer_placement = "pinned_host"}} : (tensor<4x8xf32>) -> tensor<4x8xf32>
    return %1, %arg1 : tensor<4x8xf32>, tensor<f32>
  }
}
'''

LOWERED_ONE_RESULT = '''module @jit_g {
  func.func public @main(%arg0: tensor<2xf32>) -> tensor<2xf32> {
    return %arg0 : tensor<2xf32>
  }
}
'''

COMPILED = '''HloModule jit_f, is_scheduled=true, entry_computation_layout={(f32[2,2]{1,0:S(5)}, f32[])->(f32[2,2]{1,0}, f32[8]{0:T(256)S(5)})}, num_partitions=8

ENTRY %main (param: f32[2,2], p1: f32[]) -> (f32[2,2], f32[8]) {
  %param = f32[2,2]{1,0:S(5)} parameter(0), sharding={devices=[2,4]<=[8]}
  %p1 = f32[] parameter(1), sharding={replicated}
  %move = f32[2,2]{1,0} custom-call(%param), custom_call_target="MoveToDevice"
  %x = f32[8]{0} broadcast(%p1), dimensions={}
  %copy-start = (f32[8]{0:S(5)}, f32[8]{0}, u32[]) copy-start(%x)
  %copy-done = f32[8]{0:S(5)} copy-done(%copy-start)
  ROOT %t = (f32[2,2]{1,0}, f32[8]{0:S(5)}) tuple(%move, %copy-done)
}
'''


def mlir_accepts(text: str) -> None:
    """The lowered text is real StableHLO: MLIR's parser, with JAX's dialects, reads it."""
    from jax._src.interpreters import mlir
    from jax._src.lib.mlir import ir

    with mlir.make_ir_context():
        ir.Module.parse(text)


def xla_accepts(text: str) -> None:
    """The compiled text is real HLO: XLA's parser reads it."""
    from jaxlib import _hlo

    _hlo.hlo_module_from_text(text)


def test_the_fixtures_are_real_programs():
    mlir_accepts(LOWERED)
    mlir_accepts(LOWERED_ONE_RESULT)
    xla_accepts(COMPILED)
    with pytest.raises(Exception):      # the parsers do refuse what is not a program
        mlir_accepts(LOWERED.replace("stablehlo.sine", "stablehlo.no_such_op"))
    with pytest.raises(Exception):
        xla_accepts(COMPILED.replace("copy-start(%x)", "copy-start(%undefined)"))


def test_lowered_text_inputs_outputs_and_annotations():
    got = memory_placements(LOWERED)
    assert [(p.where, p.shape, p.memory) for p in got] == [
        ("input 0", "tensor<4x8xf32>", "pinned_host"),
        ("input 1", "tensor<f32>", "device (default)"),
        ("output 0", "tensor<4x8xf32>", "device"),
        ("output 1", "tensor<f32>", "device (default)"),
        ("%1 = annotate_device_placement(%0)", "tensor<4x8xf32>", "pinned_host"),
    ]
    assert got[0].evidence == 'mhlo.memory_kind = "pinned_host"'
    assert "input 0" in str(got[0]) and "pinned_host" in str(got[0])


def test_lowered_text_with_one_bare_result():
    got = memory_placements(LOWERED_ONE_RESULT)
    assert [(p.where, p.shape, p.memory) for p in got] == [
        ("input 0", "tensor<2xf32>", "device (default)"),
        ("output 0", "tensor<2xf32>", "device (default)"),
    ]


def test_compiled_text_layouts_and_moves():
    got = memory_placements(COMPILED)
    assert [(p.where, p.shape, p.memory) for p in got] == [
        ("input 0", "f32[2,2]", "host"),
        ("input 1", "f32[]", "device"),
        ("output 0", "f32[2,2]", "device"),
        ("output 1", "f32[8]", "host"),
        ("%param = parameter", "f32[2,2]", "host"),
        ("%move = MoveToDevice", "f32[2,2]", "device"),
        ("%copy-start = copy-start", "(f32[8], f32[8], u32[])", "host from device"),
        ("%copy-done = copy-done", "f32[8]", "host"),
        ("%t = tuple", "(f32[2,2], f32[8])", "host"),
    ]
    assert got[0].evidence == "f32[2,2]{1,0:S(5)}"
    assert got[5].evidence == 'custom_call_target="MoveToDevice"'


def placed(mesh, kind):
    return NamedSharding(mesh, P("x"), memory_kind=kind)


def to_host_and_back(mesh):
    """A program whose first input and first output live in host memory: the product is computed on the
    device (the input is brought in) and put back on the host."""
    def f(a, b):
        return jax.device_put(jax.device_put(a, placed(mesh, "device")) * 2, placed(mesh, "pinned_host")), b + 1
    return jax.jit(f, out_shardings=(placed(mesh, "pinned_host"), placed(mesh, "device")))


def test_live_jit_to_host_memory():
    d = DEVICES[0]
    # Decided by JAX, not by the code under test: CPU devices have pinned_host (a failure if not).
    if d.platform != "cpu" and "pinned_host" not in jax_kinds(d):
        pytest.skip(f"JAX lists no pinned_host memory on {d.platform} device {d.id}")
    assert has_memory_kind(d, "pinned_host")
    mesh = jax.make_mesh((8,), ("x",), devices=DEVICES)
    f = to_host_and_back(mesh)
    x = jax.device_put(jnp.arange(16.0), placed(mesh, "pinned_host"))
    y = jax.device_put(jnp.arange(8.0), placed(mesh, "device"))
    out, other = f(x, y)
    assert (out.sharding.memory_kind, other.sharding.memory_kind) == ("pinned_host", "device")
    np.testing.assert_array_equal(np.asarray(out), np.arange(16.0) * 2)
    lowered = memory_placements(f.lower(x, y).as_text())
    # The memory each input and output was given, as the shardings say.
    assert {p.where: p.memory for p in lowered if p.where.startswith(("input", "output"))} == {
        "input 0": "pinned_host", "input 1": "device", "output 0": "pinned_host", "output 1": "device"}
    # Inside, the input is brought to the device and the product put back on the host: one annotation each.
    assert sorted(p.memory for p in lowered if "annotate_device_placement" in p.where) == ["device", "pinned_host"]
    compiled = memory_placements(f.lower(x, y).compile().as_text())
    assert [(p.where, p.shape, p.memory) for p in compiled if p.where.startswith(("input", "output"))] == [
        ("input 0", "f32[2]", "host"), ("input 1", "f32[1]", "device"),        # per device: 16 / 8, 8 / 8
        ("output 0", "f32[2]", "host"), ("output 1", "f32[1]", "device")]
    assert all(isinstance(p, Placement) for p in compiled)


@pytest.mark.skipif(not LIBTPU_PLATFORM, reason="libtpu is installed on Linux x86-64 only")
def test_a_tpu_program_moves_between_host_and_device():
    # XLA:TPU's own program (libtpu, compiled here with no TPU): it copies the host input in and the
    # product out, asynchronously, and lays out each input and output in the memory its sharding names.
    mesh = shardlab.target_mesh("v5e-8", (8,), ("x",))
    f = to_host_and_back(mesh)
    args = (jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=placed(mesh, "pinned_host")),
            jax.ShapeDtypeStruct((64, 128), jnp.float32, sharding=placed(mesh, "device")))
    text = f.lower(*args).compile().as_text()
    xla_accepts(text)
    got = memory_placements(text)
    assert [(p.where, p.shape, p.memory) for p in got if p.where.startswith(("input", "output"))] == [
        ("input 0", "f32[8,128]", "host"), ("input 1", "f32[8,128]", "device"),
        ("output 0", "f32[8,128]", "host"), ("output 1", "f32[8,128]", "device")]
    copies = {p.memory for p in got if p.where.endswith("= copy-start")}
    assert {"device from host", "host from device"} <= copies, copies
