"""shardlab.parallelism.backward: forward collective -> backward collective, collectives counted per trip, microbatches."""

import platform
import re
import sys

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.parallelism.backward import split_microbatches, transpose_table, transposed_collectives
from shardlab.programs.loops import _loop_depths, _loop_trips, collectives_per_step

MESH = jax.make_mesh((8,), ("x",))
X = jax.device_put(np.arange(64 * 4, dtype=np.float32).reshape(64, 4), NamedSharding(MESH, P("x")))
# requirements.txt installs libtpu (XLA's TPU compiler) on Linux x86-64: there the TPU tests must run.
LIBTPU_PLATFORM = sys.platform == "linux" and platform.machine() == "x86_64"
needs_libtpu = pytest.mark.skipif(not LIBTPU_PLATFORM, reason="libtpu is installed on Linux x86-64 only")


def xla_accepts(text: str) -> None:
    """The hand-written HLO is real HLO: XLA's parser reads it."""
    from jaxlib import _hlo

    _hlo.hlo_module_from_text(text)


def smap(f, in_specs, out_specs):
    return jax.shard_map(f, mesh=MESH, in_specs=in_specs, out_specs=out_specs)


# Nested loops: an outer loop of 4 trips whose body holds an inner loop of 3 trips, and a loop
# without a recorded trip count.
NESTED = """HloModule nested

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (c: f32[4]) -> pred[] {
  %c = f32[4]{0} parameter(0)
  ROOT %go = pred[] constant(true)
}

%inner_body (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %all-reduce.inner = f32[4]{0} all-reduce(%p), replica_groups={{0,1}}, to_apply=%add
}

%outer_body (q: f32[4]) -> f32[4] {
  %q = f32[4]{0} parameter(0)
  %all-reduce.outer = f32[4]{0} all-reduce(%q), replica_groups={{0,1}}, to_apply=%add
  ROOT %while.inner = f32[4]{0} while(%all-reduce.outer), condition=%cond, body=%inner_body, backend_config={"known_trip_count":{"n":"3"}}
}

%unknown_body (r: f32[4]) -> f32[4] {
  %r = f32[4]{0} parameter(0)
  ROOT %all-reduce.unknown = f32[4]{0} all-reduce(%r), replica_groups={{0,1}}, to_apply=%add
}

ENTRY %main (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %all-reduce.top = f32[4]{0} all-reduce(%x), replica_groups={{0,1}}, to_apply=%add
  %while.outer = f32[4]{0} while(%all-reduce.top), condition=%cond, body=%outer_body, backend_config={"known_trip_count":{"n":"4"}}
  ROOT %while.unknown = f32[4]{0} while(%while.outer), condition=%cond, body=%unknown_body
}
"""


def test_loop_trips_multiply_through_nested_loops():
    xla_accepts(NESTED)
    trips = _loop_trips(NESTED)
    assert trips["all-reduce.top"] == 1
    assert trips["all-reduce.outer"] == 4
    assert trips["all-reduce.inner"] == 12
    assert trips["all-reduce.unknown"] is None


def test_loop_depths_count_the_enclosing_loops_even_without_trip_counts():
    depths = _loop_depths(NESTED)
    assert (depths["all-reduce.top"], depths["all-reduce.outer"], depths["all-reduce.inner"]) == (0, 1, 2)
    assert depths["all-reduce.unknown"] == 1


# A counted loop as XLA:TPU writes it, with no known_trip_count: the counter (element 0 of the state)
# starts at a copy of constant(0), is copied to another memory space and 1 is added in the body, and the
# condition compares it with constant(5). The variants change one thing each.
def counted_loop(direction="LT", step="1", start="%copy.1", bound="5", prefix="%", first="0"):
    text = f"""HloModule counted

%add (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %add.0 = f32[] add(%x, %y)
}}

%wide.region_0.1_spmd.sunk (wide.param.5: (s32[], f32[4])) -> (s32[], f32[4]) {{
  %constant.98.clone..sunk = s32[]{{:T(128)}} constant({step})
  %wide.param.5 = (s32[]{{:T(128)}}, f32[4]{{0:T(256)}}) parameter(0)
  %get-tuple-element.466 = s32[]{{:T(128)}} get-tuple-element(%wide.param.5), index=0
  %copy.9 = s32[]{{:T(128)S(6)}} copy(%get-tuple-element.466), backend_config={{"flag_configs":[]}}
  %add.138 = s32[]{{:T(128)}} add(%copy.9, %constant.98.clone..sunk), metadata={{op_name="jit(f)/while/body/add"}}
  %get-tuple-element.467 = f32[4]{{0:T(256)}} get-tuple-element(%wide.param.5), index=1
  %all-reduce.3 = f32[4]{{0:T(256)}} all-reduce(%get-tuple-element.467), replica_groups={{{{0,1}}}}, to_apply=%add
  ROOT %tuple.102 = (s32[]{{:T(128)}}, f32[4]{{0:T(256)}}) tuple(%add.138, /*index=1*/%all-reduce.3)
}}

%wide.region_1.2_spmd (wide.param.1: (s32[], f32[4])) -> pred[] {{
  %constant.93.clone.1 = s32[]{{:T(128)}} constant({bound}), metadata={{op_name="jit(f)/while/cond/lt"}}
  %wide.param.1 = (s32[]{{:T(128)}}, f32[4]{{0:T(256)}}) parameter(0)
  %get-tuple-element.347 = s32[]{{:T(128)}} get-tuple-element(%wide.param.1), index=0
  ROOT %lt.50 = pred[]{{:T(512)}} compare(%get-tuple-element.347, %constant.93.clone.1), direction={direction}
}}

ENTRY %main.7_spmd (param.7: f32[4], param.8: s32[]) -> f32[4] {{
  %constant.103.clone = s32[]{{:T(128)}} constant({first})
  %param.7 = f32[4]{{0:T(256)}} parameter(0)
  %param.8 = s32[]{{:T(128)}} parameter(1)
  %copy.1 = s32[]{{:T(128)}} copy(%constant.103.clone)
  %tuple.100 = (s32[]{{:T(128)}}, f32[4]{{0:T(256)}}) tuple({start}, %param.7)
  %while.137 = (s32[]{{:T(128)}}, f32[4]{{0:T(256)}}) while(%tuple.100), condition=%wide.region_1.2_spmd, body=%wide.region_0.1_spmd.sunk, metadata={{op_name="jit(f)/while"}}
  ROOT %get-tuple-element.1 = f32[4]{{0:T(256)}} get-tuple-element(%while.137), index=1
}}
"""
    text = text if prefix == "%" else text.replace("%", "")
    xla_accepts(text)
    return text


def test_a_counted_loop_without_known_trip_count_reads_its_bound():
    assert _loop_trips(counted_loop())["all-reduce.3"] == 5
    assert _loop_trips(counted_loop(prefix=""))["all-reduce.3"] == 5          # names printed without %
    assert _loop_trips(counted_loop(start="%constant.103.clone"))["all-reduce.3"] == 5    # no copy
    assert _loop_trips(counted_loop(bound="-3"))["all-reduce.3"] == 0         # never enters the body


@pytest.mark.parametrize("change", [dict(step="2"), dict(direction="LE"), dict(direction="GT"),
                                    dict(start="%param.8"), dict(step="-1"), dict(first="2")],
                         ids=["step 2", "direction LE", "direction GT", "start from a parameter", "step -1",
                              "start from 2"])
def test_loops_that_are_not_provably_counted_keep_an_unknown_trip_count(change):
    text = counted_loop(**change)
    assert _loop_trips(text)["all-reduce.3"] is None
    assert _loop_depths(text)["all-reduce.3"] == 1


def test_a_condition_with_more_logic_keeps_an_unknown_trip_count():
    more = counted_loop().replace(
        "  ROOT %lt.50 = pred[]{:T(512)} compare(%get-tuple-element.347, %constant.93.clone.1), direction=LT",
        "  %lt.50 = pred[]{:T(512)} compare(%get-tuple-element.347, %constant.93.clone.1), direction=LT\n"
        "  %flag = pred[] constant(true)\n"
        "  ROOT %and.1 = pred[] and(%lt.50, %flag)")
    assert "ROOT %and.1" in more
    xla_accepts(more)
    assert _loop_trips(more)["all-reduce.3"] is None


# XLA:CPU wraps the loop's compare and add each in a fusion of that one instruction.
WRAPPERS = """
%wrapped_compare_computation (param_0.33: s32[], param_1.52: s32[]) -> pred[] {
  %param_0.33 = s32[] parameter(0)
  %param_1.52 = s32[] parameter(1)
  ROOT %lt.11 = pred[] compare(%param_0.33, %param_1.52), direction=LT
}

%not_a_wrapper (param_0.34: s32[], param_1.53: s32[]) -> pred[] {
  %param_0.34 = s32[] parameter(0)
  %param_1.53 = s32[] parameter(1)
  %one = s32[] constant(1)
  %plus = s32[] add(%param_0.34, %one)
  ROOT %lt.12 = pred[] compare(%plus, %param_1.53), direction=LT
}
"""


@pytest.mark.parametrize("called, trips", [("%wrapped_compare_computation", 5), ("%not_a_wrapper", None)])
def test_a_fusion_counts_as_its_instruction_only_where_it_wraps_that_one_instruction(called, trips):
    text = counted_loop().replace(
        "  ROOT %lt.50 = pred[]{:T(512)} compare(%get-tuple-element.347, %constant.93.clone.1), direction=LT",
        f"  ROOT %wrapped_compare = pred[] fusion(%get-tuple-element.347, %constant.93.clone.1), kind=kLoop, "
        f"calls={called}").replace("\n%wide.region_0", WRAPPERS + "\n%wide.region_0")   # callees first
    xla_accepts(text)
    assert _loop_trips(text)["all-reduce.3"] == trips


def scan_of_psums(steps):
    """A shard_map'd scan of ``steps`` steps, each with a psum that depends on the carry (so it cannot
    leave the loop)."""
    def body(c, b):
        return jnp.tanh(c + jax.lax.psum(b * c, "x")), None

    def f(xs):
        return jax.lax.scan(body, jnp.ones(xs.shape[1:], xs.dtype), xs)[0]
    return f


def test_the_counted_loop_reading_agrees_with_known_trip_count_on_the_cpu():
    f = smap(scan_of_psums(5), P(None, "x"), P())
    xs = jax.device_put(np.ones((5, 16, 4), np.float32), NamedSharding(MESH, P(None, "x")))
    compiled = jax.jit(f).lower(xs).compile()
    text = compiled.as_text()
    assert '"known_trip_count":{"n":"5"}' in text
    without = re.sub(r'"known_trip_count":\{"n":"\d+"\},?', "", text)
    assert '"known_trip_count"' not in without
    names = [c.name for c in shardlab.collectives_in_compiled(compiled)]
    assert names and [_loop_trips(text)[n] for n in names] == [5] * len(names)
    assert [_loop_trips(without)[n] for n in names] == [5] * len(names)     # read from the condition alone


@needs_libtpu
def test_collectives_per_step_reads_the_trip_count_of_a_tpu_scan():
    mesh = shardlab.target_mesh("v5e-8", (8,), ("x",))
    f = jax.shard_map(scan_of_psums(5), mesh=mesh, in_specs=P(None, "x"), out_specs=P())
    xs = jax.ShapeDtypeStruct((5, 16, 4), jnp.float32, sharding=NamedSharding(mesh, P(None, "x")))
    prog = shardlab.compile_for(f, xs)
    assert '"known_trip_count"' not in prog.compiled.as_text()          # XLA:TPU records none
    steps = collectives_per_step(prog)
    looped = [c for c in steps if c.loops == 1]
    assert looped and all(c.trips == 5 for c in looped), str(steps)
    assert "runs 5 times" in str(steps)


@needs_libtpu
def test_a_tpu_reduce_scatter_fusion_is_a_call_not_a_loop():
    # XLA:TPU writes a reduce-scatter as an all-reduce and a slice fused into a computation that a fusion
    # calls: a call, not a loop. Outside any loop it runs once; in the body of a scan of 3 steps, 3 times.
    mesh = shardlab.target_mesh("v5e-8", (2, 4), ("data", "model"))
    scatter = NamedSharding(mesh, P("data", "model"))
    w = jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P("model")))
    x = jax.ShapeDtypeStruct((256, 1024), jnp.float32, sharding=scatter)
    xs = jax.ShapeDtypeStruct((3, 256, 1024), jnp.float32, sharding=NamedSharding(mesh, P(None, "data", "model")))

    def scanned(xs, w):
        def body(acc, x):
            return acc + jax.lax.with_sharding_constraint(x @ w, scatter), None
        return jax.lax.scan(body, jax.lax.with_sharding_constraint(jnp.zeros((256, 1024)), scatter), xs)[0]

    # Per device: a (128, 256) block of x times a (256, 1024) block of w, summed over the 4 devices of
    # "model" and scattered: 3 of 4 pieces of 128 x 1024 floats sent.
    sent = 3 * 128 * 1024 * 4 // 4
    once = shardlab.compile_for(jax.jit(lambda x, w: x @ w, out_shardings=scatter), x, w)
    thrice = shardlab.compile_for(jax.jit(scanned), xs, w)
    for prog, loops, trips in ((once, 0, 1), (thrice, 1, 3)):
        assert "all-reduce-scatter" in prog.text and prog.while_loops == loops    # the fusion, in XLA's program
        (c,) = collectives_per_step(prog)
        assert (c.collective.kind, c.loops, c.trips) == ("reduce-scatter", loops, trips), str(prog)
        assert c.collective.bytes_per_device == sent and c.bytes_per_step == trips * sent


def test_collectives_per_step_counts_a_scan_body_once_per_trip():
    def psum_each(xs):
        def body(c, b):
            return c + jax.lax.psum(b, "x"), None
        return jax.lax.scan(body, jnp.zeros(xs.shape[1:], xs.dtype), xs)[0]

    f = smap(psum_each, P(None, "x"), P())
    xs = jax.device_put(np.ones((5, 16, 4), np.float32), NamedSharding(MESH, P(None, "x")))
    compiled = jax.jit(f).lower(xs).compile()
    steps = collectives_per_step(compiled)
    assert len(shardlab.collectives_in_compiled(compiled)) == 1      # written once
    assert steps.runs == 5 and steps.kinds()["all-reduce"] == 5       # run once per trip
    assert steps[0].loops == 1 and "runs 5 times" in str(steps)
    assert steps.bytes_per_step == 5 * steps[0].collective.bytes_per_device
    np.testing.assert_allclose(jax.jit(f)(xs), 5 * 8 * np.ones((2, 4)))


def test_collectives_per_step_accepts_a_compiled_program_and_refuses_other_things():
    prog = shardlab.compile_for(smap(lambda b: jax.lax.psum(b, "x"), P("x"), P()), X)
    assert collectives_per_step(prog).runs == 1
    with pytest.raises(ValueError, match="compiled"):
        collectives_per_step("not a program")


def test_transposes_of_shard_map_collectives():
    assert transposed_collectives(smap(lambda b: jax.lax.psum(b, "x"), P("x"), P()), X).backward_kinds == "none"
    gather = transposed_collectives(smap(lambda b: jax.lax.all_gather(b, "x", tiled=True), P("x"), P("x")), X)
    assert (gather.forward_kinds, gather.backward_kinds) == ("all-gather", "reduce-scatter")
    ring = [(i, (i + 3) % 8) for i in range(8)]
    permute = transposed_collectives(smap(lambda b: jax.lax.ppermute(b, "x", ring), P("x"), P("x")), X)
    assert sorted(permute.backward[0].source_target_pairs) == sorted((t, s) for s, t in ring)


def test_transpose_of_a_replicated_weight_is_an_all_reduce_under_jit():
    w = jax.device_put(np.ones((4, 4), np.float32), NamedSharding(MESH, P()))
    with jax.set_mesh(MESH):
        table = transpose_table({"x @ w": (lambda x, w: x @ w, (X, w))})
    assert (table["x @ w"].forward_kinds, table["x @ w"].backward_kinds) == ("none", "all-reduce")
    assert "x @ w" in str(table) and "<table>" in table._repr_html_()


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="f must be a function"):
        transposed_collectives(3, X)
    with pytest.raises(ValueError, match="args"):
        transposed_collectives(lambda x: x)
    with pytest.raises(ValueError, match="one array"):
        transposed_collectives(lambda x: (x, x), X)
    with pytest.raises(ValueError, match="cases"):
        transpose_table({})
    with pytest.raises(ValueError, match=r"cases\['a'\]"):
        transpose_table({"a": (lambda x: x, X)})


def test_split_microbatches():
    batch = np.arange(24).reshape(12, 2)
    parts = split_microbatches(batch, 3)
    assert parts.shape == (3, 4, 2)
    np.testing.assert_array_equal(parts[1], batch[4:8])
    with pytest.raises(ValueError, match="divide"):
        split_microbatches(batch, 5)
    with pytest.raises(ValueError, match="positive integer"):
        split_microbatches(batch, 0)
    with pytest.raises(ValueError, match="leading batch axis"):
        split_microbatches(np.float32(1.0), 1)
