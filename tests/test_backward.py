"""shardlab.backward: forward collective -> backward collective, collectives counted per trip, microbatches."""

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.backward import (_loop_depths, _loop_trips, collectives_per_step, split_microbatches, transpose_table,  # noqa: E402
                               transposed_collectives)

MESH = jax.make_mesh((8,), ("x",))
X = jax.device_put(np.arange(64 * 4, dtype=np.float32).reshape(64, 4), NamedSharding(MESH, P("x")))


def smap(f, in_specs, out_specs):
    return jax.shard_map(f, mesh=MESH, in_specs=in_specs, out_specs=out_specs)


# Nested loops: an outer loop of 4 trips whose body holds an inner loop of 3 trips, and a loop
# without a recorded trip count.
NESTED = """HloModule nested

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
    trips = _loop_trips(NESTED)
    assert trips["all-reduce.top"] == 1
    assert trips["all-reduce.outer"] == 4
    assert trips["all-reduce.inner"] == 12
    assert trips["all-reduce.unknown"] is None


def test_loop_depths_count_the_enclosing_loops_even_without_trip_counts():
    depths = _loop_depths(NESTED)
    assert (depths["all-reduce.top"], depths["all-reduce.outer"], depths["all-reduce.inner"]) == (0, 1, 2)
    assert depths["all-reduce.unknown"] == 1


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
