"""shardlab.memory: which memory kinds devices have, and memory placement read from program text."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from shardlab import has_memory_kind, memory_kinds, memory_placements, missing_memory_kind
from shardlab.memory import Placement


@pytest.fixture(scope="module")
def mesh():
    return jax.make_mesh((1,), ("x",), devices=jax.devices()[:1])


def test_kinds_of_a_device_include_its_default():
    d = jax.devices()[0]
    kinds = memory_kinds(d)
    assert d.default_memory().kind in kinds
    assert all(isinstance(k, str) for k in kinds)


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


# Text as JAX 0.10 prints it (shortened), and compiled HLO as a GPU build after host offloading writes it.
LOWERED = '''module @jit_f attributes {mhlo.num_partitions = 8 : i32} {
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
  %param = f32[2,2]{1,0} parameter(0), sharding={devices=[2,4]<=[8]}
  %move = f32[2,2]{1,0} custom-call(%param), custom_call_target="MoveToDevice"
  %copy-start = (f32[8]{0:S(5)}, f32[8]{0}, u32[]) copy-start(%x)
  %copy-done = f32[8]{0:S(5)} copy-done(%copy-start)
  ROOT %t = (f32[2,2]{1,0}, f32[8]{0:S(5)}) tuple(%move, %copy-done)
}
'''


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
        ("%move = MoveToDevice", "f32[2,2]", "device"),
        ("%copy-start = copy-start", "(f32[8], f32[8], u32[])", "host from device"),
        ("%copy-done = copy-done", "f32[8]", "host"),
        ("%t = tuple", "(f32[2,2], f32[8])", "host"),
    ]
    assert got[0].evidence == "f32[2,2]{1,0:S(5)}"
    assert got[4].evidence == 'custom_call_target="MoveToDevice"'


def test_live_jit_to_host_memory(mesh):
    d = jax.devices()[0]
    if not has_memory_kind(d, "pinned_host"):
        pytest.skip(missing_memory_kind(d, "pinned_host"))
    host = NamedSharding(mesh, P("x"), memory_kind="pinned_host")
    f = jax.jit(lambda a: a * 2, out_shardings=host)
    x = jnp.arange(4.0)
    out = f(x)
    assert out.sharding.memory_kind == "pinned_host"
    np.testing.assert_array_equal(np.asarray(out), np.arange(4.0) * 2)
    lowered = memory_placements(f.lower(x).as_text())
    assert ("output 0", "pinned_host") in [(p.where, p.memory) for p in lowered]
    compiled = memory_placements(f.lower(x).compile().as_text())
    assert [(p.where, p.memory) for p in compiled] == [("input 0", "device"), ("output 0", "host")]
    assert all(isinstance(p, Placement) for p in compiled)
