"""shardlab.parallelism.pallas_collectives: Pallas ring kernels run in TPU interpret mode on 8 CPU devices, checked
against jax.lax's collectives; the race detector; the kernels compiled for a v5e-8; the DMA timeline picture."""

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import functools  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.parallelism import pallas_collectives as pc  # noqa: E402
from shardlab.pictures.dma_timeline import draw_dma_timeline  # noqa: E402

N = 8
MESH = jax.make_mesh((N,), ("i",), devices=DEVICES)


def per_device(f, in_specs=P("i"), out_specs=P("i")):
    return jax.jit(jax.shard_map(f, mesh=MESH, in_specs=in_specs, out_specs=out_specs, check_vma=False))


def by_lax(f, in_specs=P("i"), out_specs=P("i")):
    return jax.jit(jax.shard_map(f, mesh=MESH, in_specs=in_specs, out_specs=out_specs))


def sharded(array, spec=P("i")):
    return jax.device_put(array, NamedSharding(MESH, spec))


def integers(key, shape):
    return jax.random.randint(jax.random.key(key), shape, -8, 8).astype(jnp.float32)


@pytest.fixture(scope="module")
def blocks():
    return sharded(integers(0, (N * 8, 128)))


@pytest.fixture(scope="module")
def partial_sums():
    return sharded(jax.random.normal(jax.random.key(1), (N * N * 8, 128), jnp.float32))


@pytest.mark.parametrize("gather", [pc.ring_all_gather, pc.bidirectional_all_gather])
def test_gathers_equal_lax_all_gather_exactly_without_races(gather, blocks):
    f = per_device(functools.partial(gather, axis="i", interpret=pc.interpret_mode(detect_races=True)))
    out, report = pc.catch_races(f, blocks)
    expected = by_lax(lambda b: jax.lax.all_gather(b, "i", tiled=True))(blocks)
    assert np.array_equal(out, expected)
    assert not report.found and len(report) == 0


def test_reduce_scatter_equals_psum_scatter_within_a_scaled_tolerance(partial_sums):
    f = per_device(functools.partial(pc.ring_reduce_scatter, axis="i", interpret=pc.interpret_mode(True)))
    out, report = pc.catch_races(f, partial_sums)
    expected = np.asarray(by_lax(lambda s: jax.lax.psum_scatter(s, "i", tiled=True))(partial_sums))
    scale = np.abs(expected).max()
    error = np.abs(np.asarray(out) - expected).max()
    assert error <= 1e-6 * N * scale           # the order of 8 float32 additions differs
    assert not report.found
    # the other side of the tolerance: the sum without device 0's part is far outside it
    without_device_0 = expected - np.asarray(partial_sums).reshape(N, N * 8, 128)[0]
    assert np.abs(np.asarray(out) - without_device_0).max() > 1e-6 * N * scale


def test_reduce_scatter_of_whole_numbers_is_exact():
    sums = sharded(integers(2, (N * N * 8, 128)))
    f = per_device(functools.partial(pc.ring_reduce_scatter, axis="i", interpret=pc.interpret_mode()))
    expected = by_lax(lambda s: jax.lax.psum_scatter(s, "i", tiled=True))(sums)
    assert np.array_equal(f(sums), expected)


def test_a_wrong_accumulation_step_gives_a_wrong_sum():
    sums = sharded(integers(3, (N * N * 8, 128)))
    f = per_device(functools.partial(pc.ring_reduce_scatter, axis="i", interpret=pc.interpret_mode(),
                                     block_at=lambda me, step, n: (me - step - 1) % n))
    expected = by_lax(lambda s: jax.lax.psum_scatter(s, "i", tiled=True))(sums)
    assert not np.array_equal(f(sums), expected)


def test_collective_matmul_equals_the_product_on_one_device():
    x, w = integers(4, (64, 128)), integers(5, (128, 256))
    f = per_device(functools.partial(pc.collective_matmul, axis="i", interpret=pc.interpret_mode(True)),
                   in_specs=(P("i", None), P(None, "i")), out_specs=P(None, "i"))
    out, report = pc.catch_races(f, sharded(x, P("i", None)), sharded(w, P(None, "i")))
    assert np.array_equal(out, np.asarray(x) @ np.asarray(w))
    assert not report.found


def test_the_detector_catches_the_missing_handshake(partial_sums):
    f = per_device(functools.partial(pc.ring_reduce_scatter, axis="i", interpret=pc.interpret_mode(True),
                                     handshake=False))
    _, report = pc.catch_races(f, partial_sums)
    assert report.found and len(report) >= 1
    assert {r.memory for r in report.races} == {"vmem"}
    assert all(0 <= r.device < N for r in report.races)


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="detect_races"):
        pc.interpret_mode("yes")
    with pytest.raises(ValueError, match="catch_races: f"):
        pc.catch_races(3)
    with pytest.raises(ValueError, match="ring_events: kernel"):
        pc.ring_events("all_reduce")
    with pytest.raises(ValueError, match="ring_events: n"):
        pc.ring_events("all_gather", 1)
    with pytest.raises(ValueError, match="draw_dma_timeline: devices"):
        draw_dma_timeline(pc.ring_events("all_gather", 4), devices=(7,))
    with pytest.raises(ValueError, match="draw_dma_timeline: events"):
        draw_dma_timeline([object()])


@pytest.mark.parametrize("kernel", pc.RING_KERNELS)
def test_ring_events_follow_the_ring(kernel):
    events = pc.ring_events(kernel, N)
    dmas = [e for e in events if e.kind == "dma"]
    assert len(dmas) == N * (N - 1)                       # n - 1 sends per device
    assert all(e.peer == (e.device + 1) % N for e in dmas)
    # what a device sends at step s + 1 is what its left neighbour sent at step s (the ring)
    sent = {(e.device, e.step): e.label for e in dmas}
    assert all(sent[d, s + 1] == sent[(d - 1) % N, s] for d in range(N) for s in range(N - 2))
    waits = sum(e.kind == "wait" and e.label == "free" for e in events)
    signals = sum(e.kind == "signal" for e in events)
    assert waits == signals                               # every semaphore ends at zero
    fig = draw_dma_timeline(events, devices=(0, 1, 2))
    assert fig.get_size_inches()[0] <= 5.4


def test_the_kernels_compile_for_a_v5e_8_as_one_custom_call():
    if shardlab.tpu_compiler_missing():
        pytest.skip("libtpu is not installed")
    with shardlab.compiling_for_tpu():
        mesh = shardlab.target_mesh("v5e-8", (N,), ("i",))
        arg = jax.ShapeDtypeStruct((N * 256, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, P("i")))
        f = jax.jit(jax.shard_map(functools.partial(pc.ring_all_gather, axis="i"), mesh=mesh,
                                  in_specs=P("i"), out_specs=P("i"), check_vma=False))
        compiled = f.lower(arg).compile()
        assert compiled.as_text().count('custom_call_target="tpu_custom_call"') == 1
        assert len(list(shardlab.collectives_in_compiled(compiled))) == 0
