"""Several slices: DCN figures, the hybrid mesh, transfers across slices read from programs, their cost."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX


def test_dcn_figures_are_the_published_ones_per_chip():
    # Google Cloud: v5e 6.4 Tbps per pod of 256 chips, v6e 25.6 Tbps; scaling book: v5p 2.5e10 B/s per 4 chips
    published = {"TPU v5e": 6.4e12 / 8 / 256, "TPU v6e": 25.6e12 / 8 / 256, "TPU v5p": 2.5e10 / 4}
    for chip, per_chip in published.items():
        assert shardlab.dcn_link(chip).bandwidth == pytest.approx(per_chip, rel=1e-9)
        assert shardlab.dcn_link(chip).source.startswith("https://")
    with pytest.raises(ValueError, match="chip must be one of"):
        shardlab.dcn_link("TPU v4p")


def test_a_collective_over_dcn_costs_bytes_over_bandwidth_plus_its_steps():
    net = shardlab.dcn_network("TPU v5e", 4)
    assert (net.links, net.hops, net.bandwidth) == (1, 3, 3.125e9)
    nbytes = 3.125e7
    t = shardlab.modelled_time(0, [shardlab.Traffic(nbytes, "dcn", 1, "all-reduce")], "TPU v5e", {"dcn": net})
    expected = nbytes / 3.125e9 + 2 * 3 * net.hop_latency   # two passes of three steps
    assert t["comm"] == pytest.approx(expected, rel=1e-9)
    assert t["comm"] != pytest.approx(expected * 1.01, rel=1e-3)
    with pytest.raises(ValueError, match="slices must be an integer of at least 2"):
        shardlab.dcn_network("TPU v5e", 1)


def test_dcn_traffic_follows_the_ring_model_over_one_chip_per_slice():
    t = shardlab.DcnTransfer("send", "all-reduce", "SUM", "bf16", (4, 8), 64, 3, "")
    g = shardlab.DcnTransfer("send.1", "all-gather", None, "bf16", (4, 8), 64, None, "")
    reduce, gather = shardlab.dcn_traffic([t, g], 4, unknown_trips=2)
    assert reduce.nbytes == pytest.approx(2 * 3 / 4 * 64 * 3) and reduce.count == 3
    assert gather.nbytes == pytest.approx(3 * 64 * 2) and gather.count == 2   # (S-1) pieces, two trips
    with pytest.raises(ValueError, match="unknown trip count"):
        shardlab.dcn_traffic([g], 4)


def test_split_by_slice_sorts_collectives_by_their_groups():
    mesh = Mesh(np.array(DEVICES).reshape(2, 4), ("slice", "inside"))
    x = jax.device_put(np.ones((8, 16), np.float32), NamedSharding(mesh, P(("slice", "inside"))))

    def sums(x):
        def body(v):
            return jax.lax.psum(v, "inside"), jax.lax.psum(v * 2, "slice")
        return jax.shard_map(body, mesh=mesh, in_specs=P(("slice", "inside")),
                             out_specs=(P(("slice", "inside")), P(("slice", "inside"))))(x)
    compiled = jax.jit(sums).lower(x).compile()
    slice_of = {d.id: i // 4 for i, d in enumerate(mesh.devices.flat)}
    parts = shardlab.split_by_slice(shardlab.collectives_in(compiled), slice_of)
    assert [len(c.replica_groups[0]) for c in parts["inside"]] == [4]
    assert [len(c.replica_groups[0]) for c in parts["across"]] == [2]
    with pytest.raises(ValueError, match="slice_of"):
        shardlab.split_by_slice(shardlab.collectives_in(compiled), {})


@pytest.fixture(scope="module")
def two_slices():
    if shardlab.tpu_compiler_missing():
        pytest.skip("libtpu is not installed")
    return shardlab.hybrid_mesh("v5e-8", (8, 1), (1, 2), ("fsdp", "data"))


def test_the_hybrid_mesh_puts_the_slices_outermost_and_the_network_follows(two_slices):
    mesh = two_slices
    assert dict(mesh.shape) == {"fsdp": 8, "data": 2}
    assert [{d.slice_index for d in col} for col in mesh.devices.T] == [{0}, {1}]
    assert shardlab.axis_network(mesh, "data") == shardlab.dcn_network("TPU v5e", 2)
    assert shardlab.axis_network(mesh, "fsdp").bandwidth is None          # ICI
    assert shardlab.slice_mesh(mesh, 1).devices.shape == (8, 1)
    with pytest.raises(ValueError, match="ici_sizes must multiply"):
        shardlab.hybrid_mesh("v5e-8", (4, 1), (1, 2), ("fsdp", "data"))


def test_a_gradient_sum_across_two_slices_is_read_as_transfers_of_each_chips_shard(two_slices):
    mesh = two_slices
    w = jax.ShapeDtypeStruct((1024, 512), jnp.float32, sharding=NamedSharding(mesh, P("fsdp")))
    x = jax.ShapeDtypeStruct((64, 1024), jnp.float32, sharding=NamedSharding(mesh, P(("data", "fsdp"))))

    def grad(w, x):
        return jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w)))(w)
    program = shardlab.compile_for(jax.jit(grad, out_shardings=NamedSharding(mesh, P("fsdp"))), w, x)
    transfers = shardlab.dcn_transfers(program)
    assert transfers and {t.kind for t in transfers} == {"all-reduce"}
    assert {t.reduce for t in transfers} == {"SUM"}
    # what crosses is each chip's 1/8 of the float32 gradient, once (independent: the weight's size)
    assert sum(t.bytes_per_step for t in transfers) == 4 * 1024 * 512 // 8
    assert shardlab.dcn_transfers(program.text) == transfers
    traffic, network = shardlab.multislice_traffic(program, mesh)
    assert network["dcn"] == shardlab.dcn_network("TPU v5e", 2)
    assert sum(t.nbytes for t in traffic if t.axis == "dcn") == pytest.approx(4 * 1024 * 512 // 8)
    assert all(len(g) <= 8 for c in program.collectives for g in c.replica_groups)  # one slice's program
