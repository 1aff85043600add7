"""The book's one time model: links and hops per mesh axis from the topology, latency, modelled time.

References are independent of the code under test: coordinate groups built by hand, the scaling book's
statements about wraparound (https://jax-ml.github.io/scaling-book/tpus/, "TPU Networking"), the device
descriptions libtpu gives for real slices, and times worked out by hand.
"""

import importlib.util
import itertools

import jax
import jax.numpy as jnp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import shardlab
from shardlab.hardware.chips import CHIPS, Chip
from shardlab.models.time_model import step_time
from shardlab.parallelism.strategies import MLPSizes, compute_bound_from, mlp_pass_flops, step_times
from fractions import Fraction

from shardlab.models.network import AxisNetwork, ICI_HOP_LATENCY, LATENCY_SOURCE, Traffic, axis_links, axis_network, compiled_traffic, group_network, mesh_network, shared_links, torus_wraparound
from shardlab.models.time_model import modelled_passes, modelled_time

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

# Decided here, not by the code under test: libtpu is the package that describes TPU slices.
needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")

# A chip with round numbers: 1e12 flops/s, 1e9 bytes/s per link each way, a 2-D torus (4 links).
ROUND = Chip("round", peak_flops=1e12, hbm_bytes=1e9, hbm_bandwidth=1e11, link_bandwidth=1e9, torus_dims=2)


def line(n, axis=0, dims=2, fixed=0):
    """Chips 0..n-1 along one torus axis, the other coordinates at `fixed`."""
    return [tuple(i if d == axis else fixed for d in range(dims)) for i in range(n)]


# --- links and hops of hand-built groups -------------------------------------------------------------


def test_ring_with_wraparound_sends_both_ways():
    assert group_network(line(16), (16, 16), (True, True)) == AxisNetwork(links=2, hops=8)
    assert group_network(line(4, dims=3), (4, 4, 4), (True,) * 3) == AxisNetwork(2, 2)


def test_open_line_sends_one_way_and_crosses_end_to_end():
    assert group_network(line(4), (4, 4), (False, False)) == AxisNetwork(links=1, hops=3)
    # The same 16 chips without wraparound: a line, 15 hops end to end.
    assert group_network(line(16), (16, 16), (False, False)) == AxisNetwork(1, 15)


def test_partial_axis_has_no_wraparound():
    assert group_network(line(8), (16, 16), (True, True)) == AxisNetwork(links=1, hops=7)
    # Two chips half a ring apart: a line of 8 hops.
    assert group_network([(0, 0), (8, 0)], (16, 16), (True, True)) == AxisNetwork(1, 8)


def test_spanning_several_axes_adds_them():
    whole = list(itertools.product(range(16), range(16)))
    assert group_network(whole, (16, 16), (True, True)) == AxisNetwork(links=4, hops=16)
    square = list(itertools.product(range(2), range(2)))
    assert group_network(square, (2, 4), (False, False)) == AxisNetwork(2, 2)
    mixed = list(itertools.product(range(16), range(8)))   # a full wrapping axis and half of another
    assert group_network(mixed, (16, 16), (True, True)) == AxisNetwork(2 + 1, 8 + 7)
    cube = list(itertools.product(range(4), repeat=3))
    assert group_network(cube, (4, 4, 4), (True,) * 3) == AxisNetwork(6, 6)


def test_one_chip_has_no_links_even_with_two_cores():
    assert group_network([(3, 1), (3, 1)], (16, 16), (True, True)) == AxisNetwork(0, 0)


def test_wraparound_follows_the_scaling_book():
    v5e, v6e, v5p, v4 = (CHIPS[n] for n in ("TPU v5e", "TPU v6e", "TPU v5p", "TPU v4p"))
    # "smaller topologies can be requested without wraps on dims < 16"; "a TPU v5e 8x16 will have a
    # wraparound on the longer axis".
    assert torus_wraparound(v5e, (16, 16)) == (True, True)
    assert torus_wraparound(v5e, (8, 16)) == (False, True)
    assert torus_wraparound(v6e, (2, 4)) == (False, False)
    assert torus_wraparound(v5e, (2, 4, 1)) == (False, False, False)
    # "Any multiple of a full cube (e.g. 4x4x4 or 4x4x8) will have wraparounds"; "a 2x2x4 won't have any".
    assert torus_wraparound(v5p, (4, 4, 4)) == (True, True, True)
    assert torus_wraparound(v4, (4, 4, 8)) == (True, True, True)
    assert torus_wraparound(v5p, (2, 2, 4)) == (False, False, False)
    assert torus_wraparound("TPU v5p", (2, 2, 2)) == (False, False, False)


def test_bad_groups_are_refused_naming_the_argument():
    with pytest.raises(ValueError, match="slice_shape"):
        group_network(line(4), (4, 0), (False, False))
    with pytest.raises(ValueError, match="wraparound"):
        group_network(line(4), (4, 4), (False,))
    with pytest.raises(ValueError, match="coords"):
        group_network([(0, 0), (4, 0)], (4, 4), (False, False))     # outside the slice
    with pytest.raises(ValueError, match="coords"):
        group_network([], (4, 4), (False, False))
    with pytest.raises(ValueError, match="coords"):
        group_network([(0, 0, 0)], (4, 4), (False, False))
    with pytest.raises(ValueError, match="slice_shape"):
        torus_wraparound("TPU v5p", (4, 4))
    with pytest.raises(ValueError, match="chip"):
        torus_wraparound("TPU v9", (4, 4))
    with pytest.raises(ValueError, match="links"):
        AxisNetwork(-1, 2)
    with pytest.raises(ValueError, match="links and hops"):
        AxisNetwork(2, 0)


def test_groups_that_cross_one_cut_share_its_links():
    # Hand counts on a 4 x 4 torus with no wraparound: a cut between x = c and c + 1 has 4 links each way.
    rows = [line(4, axis=1, fixed=x) for x in range(4)]          # 4 rows along y, one per x
    assert shared_links(rows, (4, 4), (False, False)) == 1       # 4 rows cross each y-cut of 4 links: 1 each
    columns_far = [[(0, y), (3, y)] for y in range(4)]           # 4 pairs, all across every x-cut of 4
    assert shared_links(columns_far, (4, 4), (False, False)) == Fraction(4, 4)
    one_row_pairs = [[(0, 0), (0, 3)], [(0, 1), (0, 2)]]         # both cross y 1|2, which has 4 links
    assert shared_links(one_row_pairs, (4, 4), (False, False)) == 2
    # A 16-ring with wraparound: a cut is two planes (2 links each way). Pairs 8 apart: all 8 cross y 0..7.
    ring_pairs = [[(0, y), (0, y + 8)] for y in range(8)]
    assert shared_links(ring_pairs, (1, 16), (False, True)) == Fraction(2, 8)
    assert shared_links([line(16, axis=1)], (1, 16), (False, True)) == 2   # one ring alone: its 2 links
    assert shared_links([[(1, 1)]], (4, 4), (False, False)) is None         # one chip crosses nothing
    # The cap only lowers: groups that do not share keep group_network's links (axis_network takes the min).
    assert group_network(line(4), (4, 4), (False, False)).links <= shared_links([line(4)], (4, 4), (False, False))
    with pytest.raises(ValueError, match="groups"):
        shared_links([[(5, 0)]], (4, 4), (False, False))
    with pytest.raises(ValueError, match="wraparound"):
        shared_links(rows, (4, 4), (False,))
    assert AxisNetwork(Fraction(1, 2), 4).links == 0.5
    with pytest.raises(ValueError, match="links"):
        AxisNetwork(0.5, 4)


def test_a_shared_axis_is_modelled_slower_by_the_share():
    # 1 MB sent over half a link of 1e9 bytes/s: 2 ms, plus 2 passes * 4 hops * 1 us.
    t = modelled_time(0, [Traffic(1e6, "data")], ROUND, {"data": AxisNetwork(Fraction(1, 2), 4)})
    assert t["comm"] == pytest.approx(2e-3 + 8e-6, rel=1e-9)
    assert t["comm"] != pytest.approx(1e-3 + 8e-6, rel=1e-3)


def test_a_mesh_without_chip_coordinates_is_refused():
    mesh = jax.make_mesh((2, 4), ("data", "model"), devices=DEVICES)
    with pytest.raises(ValueError, match="mesh"):
        axis_links(mesh, "data")
    with pytest.raises(ValueError, match="mesh"):
        mesh_network("not a mesh")


# --- links and hops of real slices, from libtpu's device descriptions ---------------------------------


@needs_libtpu
def test_v5e_8_has_no_wraparound():
    # A 2 x 4 board, no axis of 16: every axis is open. The 8-chip axis spans both torus axes (1 + 1 links,
    # 1 + 3 hops); each group of 4 of a (2, 4) mesh is a 2 x 2 square (1 + 1 links, 1 + 1 hops).
    devices = shardlab.target_devices("v5e-8")
    assert {tuple(d.coords) for d in devices} == set(itertools.product(range(2), range(4), range(1)))
    assert axis_network(shardlab.target_mesh("v5e-8", (8,), ("data",)), "data") == AxisNetwork(2, 4)
    mesh = shardlab.target_mesh("v5e-8", (2, 4), ("data", "model"))
    groups = {frozenset(tuple(d.coords[:2]) for d in row) for row in mesh.devices}
    assert all(len({c[0] for c in g}) == 2 and len({c[1] for c in g}) == 2 for g in groups)
    assert axis_links(mesh, "model") == 2
    assert mesh_network(mesh)["model"] == AxisNetwork(2, 2)
    # The data pairs join opposite ends of the board, and all four cross the cut between y = 1 and y = 2,
    # which has 2 links each way (x = 0, 1; no wraparound): 2 / 4 = 1/2 link each, not one pair's 2.
    pairs = {frozenset(tuple(d.coords[:2]) for d in mesh.devices[:, j]) for j in range(4)}
    assert pairs == {frozenset(p) for p in [((0, 0), (1, 3)), ((1, 0), (0, 3)), ((0, 1), (1, 2)),
                                            ((1, 1), (0, 2))]}
    assert mesh_network(mesh)["data"] == AxisNetwork(Fraction(1, 2), 4)
    assert axis_links(mesh, "data") == Fraction(1, 2)


@needs_libtpu
def test_v5e_256_rings_and_their_sums():
    pod = shardlab.target_mesh("v5e-256", (16, 16), ("data", "model"))
    for axis in ("data", "model"):      # each group is one full torus axis of 16: a ring, 8 hops
        assert axis_network(pod, axis) == AxisNetwork(2, 8)
    whole = shardlab.target_mesh("v5e-256", (256,), ("data",))
    assert axis_network(whole, "data") == AxisNetwork(4, 16)
    assert axis_network(pod, ("data", "model")) == AxisNetwork(4, 16)
    # (2, 128): the 128-chip groups hold 16 x 8 chips (a ring and half an axis), the pairs are 8 apart.
    halves = shardlab.target_mesh("v5e-256", (2, 128), ("data", "model"))
    assert {tuple(d.coords[:2]) for d in halves.devices[:, 0]} == {(0, 0), (0, 8)}
    # Hand count: every pair is 8 apart on a 16-ring; cutting each ring into y 0..7 and 8..15 (two planes
    # of 16 links each way, 32) separates all 128 pairs: 32 / 128 = 1/4 link each, not one pair's 1.
    pairs = {frozenset(tuple(d.coords[:2]) for d in halves.devices[:, j]) for j in range(128)}
    assert len(pairs) == 128 and all({abs(a[1] - b[1]) for a, b in [tuple(p)]} == {8} for p in pairs)
    assert mesh_network(halves) == {"data": AxisNetwork(Fraction(1, 4), 8), "model": AxisNetwork(3, 15)}
    # The rows of the (16, 16) pod do not share links: each keeps its ring's 2 (above).


@needs_libtpu
def test_v5p_128_is_a_cube_with_wraparounds():
    cube = shardlab.target_mesh("v5p-128", (64,), ("data",))
    assert axis_network(cube, "data") == AxisNetwork(6, 6)
    small = shardlab.target_mesh("v5p-16", (8,), ("data",))       # 2 x 2 x 2: no wraparound
    assert axis_network(small, "data") == AxisNetwork(3, 3)


@needs_libtpu
def test_compiled_collectives_are_labelled_by_their_mesh_axes():
    mesh = shardlab.target_mesh("v5e-256", (16, 16), ("data", "model"))
    x = jax.ShapeDtypeStruct((256, 1024), jnp.bfloat16, sharding=NamedSharding(mesh, P("data", "model")))
    w = jax.ShapeDtypeStruct((1024, 512), jnp.bfloat16, sharding=NamedSharding(mesh, P("model", None)))
    f = jax.jit(lambda x, w: x @ w, out_shardings=NamedSharding(mesh, P("data", None)))
    prog = shardlab.compile_for(f, x, w)
    traffic, network = compiled_traffic(prog.collectives, mesh)
    assert [(t.axis, t.kind) for t in traffic] == [(("model",), "all-reduce")]
    assert network == {("model",): AxisNetwork(2, 8)}
    # The (16, 512) bfloat16 partial product, all-reduced over 16: 2 * 15/16 of 16 KiB.
    assert traffic[0].nbytes == 2 * 15 * 16 * 512 * 2 // 16
    with pytest.raises(ValueError, match="report"):
        compiled_traffic("no report", mesh)


@needs_libtpu
def test_compiled_collectives_on_a_shared_axis_get_the_share():
    # v5e-8 (2, 4): an all-reduce over "data" runs on the four pairs that share the board's middle.
    mesh = shardlab.target_mesh("v5e-8", (2, 4), ("data", "model"))
    x = jax.ShapeDtypeStruct((64, 512), jnp.bfloat16, sharding=NamedSharding(mesh, P("data", "model")))
    f = jax.jit(lambda x: x.sum(axis=0), out_shardings=NamedSharding(mesh, P("model")))
    traffic, network = compiled_traffic(shardlab.compile_for(f, x).collectives, mesh)
    assert [(t.axis, t.kind) for t in traffic] == [(("data",), "all-reduce")]
    assert network == {("data",): AxisNetwork(Fraction(1, 2), 4)}


# --- modelled time, by hand --------------------------------------------------------------------------


def test_modelled_time_by_hand():
    net = {"data": AxisNetwork(2, 8), "model": AxisNetwork(1, 3)}
    traffic = [Traffic(4e6, "data", 3, "all-reduce"),       # 4e6 / 2e9 s + 3 * 2 passes * 8 hops * 1 us
               (1e6, "model", 35, "all-gather")]             # 1e6 / 1e9 s + 35 * 1 pass * 3 hops * 1 us
    t = modelled_time(1e9, traffic, ROUND, net)
    data, model = 2e-3 + 48e-6, 1e-3 + 105e-6
    assert t["compute"] == pytest.approx(1e-3, rel=1e-12)
    assert t["by_axis"] == pytest.approx({"data": data, "model": model}, rel=1e-12)
    assert t["comm"] == pytest.approx(data, rel=1e-12) and t["latency"] == pytest.approx(48e-6, rel=1e-12)
    assert t["overlapped"] == pytest.approx(data, rel=1e-12)
    assert t["serial"] == pytest.approx(1e-3 + data, rel=1e-12)
    assert t["bound"] == "communication"
    # The other side: without the latency the data axis would be 2.4 % shorter, far outside rel 1e-12.
    assert t["comm"] != pytest.approx(2e-3, rel=1e-12)
    assert ICI_HOP_LATENCY == 1e-6 and "scaling-book/sharding" in LATENCY_SOURCE


def test_axes_one_after_another_add_their_times():
    # The same step with its two axes' collectives in turn (one collective stream, as on XLA:GPU).
    net = {"data": AxisNetwork(2, 8), "model": AxisNetwork(1, 3)}
    traffic = [Traffic(4e6, "data", 3, "all-reduce"), Traffic(1e6, "model", 35, "all-gather")]
    at_once = modelled_time(1e9, traffic, ROUND, net)
    in_turn = modelled_time(1e9, traffic, ROUND, net, axes_at_once=False)
    data, model = 2e-3 + 48e-6, 1e-3 + 105e-6
    assert in_turn["by_axis"] == at_once["by_axis"]
    assert in_turn["comm"] == pytest.approx(data + model, rel=1e-12)
    assert in_turn["latency"] == pytest.approx(48e-6 + 105e-6, rel=1e-12)
    assert in_turn["serial"] == pytest.approx(1e-3 + data + model, rel=1e-12)
    assert in_turn["overlapped"] == pytest.approx(data + model, rel=1e-12)
    assert in_turn["comm"] != pytest.approx(at_once["comm"], rel=1e-3)     # the other side
    # Compute-bound at once, communication-bound in turn: 2.5 ms of arithmetic between the two sums.
    between = modelled_time(2.5e9, traffic, ROUND, net)
    assert between["bound"] == "compute"
    assert modelled_time(2.5e9, traffic, ROUND, net, axes_at_once=False)["bound"] == "communication"
    with pytest.raises(ValueError, match="axes_at_once"):
        modelled_time(1e9, traffic, ROUND, net, axes_at_once="no")


def test_many_small_collectives_are_not_free():
    # 35 all-reduces of 1 KiB over a ring of 16 v5e chips: the bytes take under a microsecond, the
    # latency 35 * 2 * 8 us = 560 us.
    v5e = CHIPS["TPU v5e"]
    t = modelled_time(0, [Traffic(35 * 2 * 15 / 16 * 1024, "model", 35)], v5e, {"model": AxisNetwork(2, 8)})
    assert t["latency"] == pytest.approx(560e-6, rel=1e-9)
    assert t["comm"] - t["latency"] == pytest.approx(35 * 1920 / 9e10, rel=1e-9)
    assert t["bound"] == "communication"


def test_compute_bound_when_communication_is_shorter():
    t = modelled_time(1e10, [Traffic(1e6, "data")], ROUND, {"data": AxisNetwork(2, 1)})
    assert t["bound"] == "compute" and t["overlapped"] == t["compute"] == pytest.approx(1e-2, rel=1e-12)


def test_modelled_time_refuses_bad_input_naming_the_argument():
    net = {"data": AxisNetwork(2, 8)}
    with pytest.raises(ValueError, match="flops"):
        modelled_time(-1, [], ROUND, net)
    with pytest.raises(ValueError, match="network"):
        modelled_time(1, [Traffic(1, "data")], ROUND, {"data": 2})
    with pytest.raises(ValueError, match="network has no entry"):
        modelled_time(1, [Traffic(1, "model")], ROUND, net)
    with pytest.raises(ValueError, match="more than a round chip has"):
        modelled_time(1, [Traffic(1, "data")], ROUND, {"data": AxisNetwork(6, 6)})
    with pytest.raises(ValueError, match="no links"):
        modelled_time(1, [Traffic(1, "data")], ROUND, {"data": AxisNetwork(0, 0)})
    with pytest.raises(ValueError, match="traffic"):
        modelled_time(1, Traffic(1, "data"), ROUND, net)
    with pytest.raises(ValueError, match="chip"):
        modelled_time(1, [], "TPU v9", net)
    with pytest.raises(ValueError, match="kind"):
        Traffic(1, "data", 1, "broadcast")
    with pytest.raises(ValueError, match="count"):
        Traffic(1, "data", -1)
    with pytest.raises(ValueError, match="nbytes"):
        Traffic(-5, "data")


# --- the older entry points are uses of the same model ------------------------------------------------


def test_step_time_is_modelled_time_on_one_axis():
    t = step_time(2e9, 3e6, ROUND, links=2)
    assert t.pop("bound") == "compute"
    assert t == pytest.approx({"compute": 2e-3, "comm": 1.5e-3, "overlapped": 2e-3, "serial": 3.5e-3},
                              rel=1e-12)
    # With latency: 10 collectives of 8 hops add 80 us.
    lat = step_time(2e9, 3e6, ROUND, links=2, collectives=10, hops=8)
    assert lat["comm"] == pytest.approx(1.5e-3 + 80e-6, rel=1e-12)
    assert lat["comm"] != pytest.approx(1.5e-3, rel=1e-6)
    with pytest.raises(ValueError, match="hops"):
        step_time(1, 1, ROUND, hops=-1)


def test_step_times_with_a_network_adds_the_latency_of_each_collective():
    big = MLPSizes(batch=64, d_model=8, d_hidden=32, layers=2, itemsize=2)
    net = {"data": AxisNetwork(2, 4)}
    t = step_times("dp", big, ROUND, data=8, network=net)
    flops = mlp_pass_flops(big, data=8)
    grads = 2 * 7 / 8 * big.param_bytes
    loss = 2 * 7 / 8 * 4
    # One all-reduce per pass (the loss forward, the gradients backward), 2 passes of 4 hops each.
    assert t["forward"]["compute"] == pytest.approx(flops["forward"] / 1e12, rel=1e-12)
    assert t["forward"]["comm"] == pytest.approx(loss / 2e9 + 8e-6, rel=1e-12)
    assert t["backward"]["comm"] == pytest.approx(grads / 2e9 + 8e-6, rel=1e-12)
    assert t["backward"]["comm_model"] == 0
    # The older form (links by hand) has no latency.
    old = step_times("dp", big, ROUND, data=8, data_links=2)
    assert old["backward"]["comm"] == pytest.approx(grads / 2e9, rel=1e-12)
    assert compute_bound_from("dp", big, ROUND, data=8, network=net) > \
        compute_bound_from("dp", big, ROUND, data=8, data_links=2)
    with pytest.raises(ValueError, match="network"):
        step_times("dp", big, ROUND, data=8, network=net, data_links=2)
    with pytest.raises(ValueError, match="network has no entry"):
        step_times("tp", big, ROUND, model=4, network=net)


@needs_libtpu
def test_pod_layout_through_step_times_equals_modelled_time():
    # DP over a whole v5e pod: one call of the model per pass, links and hops from libtpu's coordinates.
    v5e = CHIPS["TPU v5e"]
    sizes = MLPSizes(batch=256 * 1024, d_model=4096, d_hidden=4 * 4096, layers=1, itemsize=2)
    net = mesh_network(shardlab.target_mesh("v5e-256", (256,), ("data",)))
    t = step_times("dp", sizes, v5e, data=256, network=net)
    grads = 2 * 255 / 256 * sizes.param_bytes
    assert t["backward"]["comm"] == pytest.approx(grads / (4 * 4.5e10) + 2 * 16e-6, rel=1e-9)


def test_modelled_passes_hides_each_pass_behind_its_own_arithmetic():
    net = {"data": AxisNetwork(2, 8)}
    # Forward: 1 ms of compute, 0.5 ms + 16 us of comm; backward: 1 ms of compute, 3 ms + 16 us of comm.
    t = modelled_passes({"forward": (1e9, [Traffic(1e6, "data")]), "backward": (1e9, [Traffic(6e6, "data")])},
                        ROUND, net)
    assert t["forward"]["overlapped"] == pytest.approx(1e-3, rel=1e-12)
    assert t["time"] == pytest.approx(1e-3 + 3e-3 + 16e-6, rel=1e-12)
    # One window for the whole step would hide more: 2 ms of compute against 3.5 ms + 32 us.
    whole = modelled_time(2e9, [Traffic(7e6, "data", 2)], ROUND, net)
    assert whole["overlapped"] == pytest.approx(3.5e-3 + 32e-6, rel=1e-12)
    assert whole["overlapped"] < t["time"]
    assert t["comm"] == pytest.approx(whole["comm"], rel=1e-12) and t["bound"] == "communication"
    with pytest.raises(ValueError, match="passes"):
        modelled_passes({}, ROUND, net)


# ---------------------------------------------------------------------------------------------------------
# GPU clusters: NVLink within a node, the network between nodes

from shardlab.hardware.chips import GPU_CHIPS
from shardlab.layout.ring_bytes import bytes_all_gather
from shardlab.models.network import NETWORK_STEP_LATENCY, NVLINK_STEP_LATENCY, gpu_group_network
from shardlab.models.time_model import modelled_time

H100 = GPU_CHIPS["H100"]


def _cluster_groups(nodes, axis):
    """Groups of a (nodes, 8) mesh, host of each device: the 'node' axis or the 'gpu' axis."""
    if axis == "gpu":
        return [[n] * 8 for n in range(nodes)]
    return [list(range(nodes)) for _ in range(8)]


def test_a_group_within_a_node_sends_over_nvlink():
    net = gpu_group_network(_cluster_groups(4, "gpu"), "H100")
    assert net == AxisNetwork(1, 7, bandwidth=450e9, hop_latency=NVLINK_STEP_LATENCY)
    assert gpu_group_network([[0, 0]], "B200").bandwidth == 900e9


def test_one_gpu_per_node_gets_its_own_network_card():
    # 8 groups on every node, each with one GPU there: one 400 Gb/s card each, 50 GB/s
    for nodes in (2, 4, 32):
        net = gpu_group_network(_cluster_groups(nodes, "node"), H100)
        assert net.bandwidth == pytest.approx(400e9 / 8)     # the node's 8 cards, one per group
        assert net.hops == nodes - 1 and net.hop_latency == NETWORK_STEP_LATENCY


def test_whole_nodes_gather_at_the_node_egress_as_the_scaling_book_says():
    # All 256 GPUs of 32 nodes in one group: an all-gather of B bytes takes B (M-1)/M / 400 GB/s, the
    # scaling book's cross-node cost (bytes / W_node egress), not NVLink's B (n-1)/n / 450 GB/s.
    hosts = [h for h in range(32) for _ in range(8)]
    net = gpu_group_network([hosts], H100)
    result = 2 ** 30
    t = modelled_time(0, [Traffic(bytes_all_gather(result, 256), "x", 1, "all-gather")], H100, {"x": net},
                      hop_latency=0)
    bandwidth_part = t["comm"] - t["latency"]
    assert bandwidth_part == pytest.approx(result * 31 / 32 / 400e9, rel=1e-9)
    assert bandwidth_part > result * 255 / 256 / 450e9      # the network, not NVLink, bounds it


def test_two_whole_nodes_are_bound_by_nvlink():
    # The scaling book's 2-node all-gather: the node level (B 7/8 / 450 GB/s) is slower than the
    # network's B (2-1)/2 / 400 GB/s, so NVLink sets the time.
    net = gpu_group_network([[0] * 8 + [1] * 8], H100)
    assert net.bandwidth == 450e9


def test_groups_sharing_a_nodes_cards_share_their_bandwidth():
    # (nodes=4, 2, 4) mesh, groups over nodes x the middle axis: 4 groups per node, 2 GPUs of each
    groups = [[h for h in range(4) for _ in range(2)] for _ in range(4)]
    net = gpu_group_network(groups, H100)
    n, m = 8, 4
    assert net.bandwidth == pytest.approx(400e9 / 4 * (n - 1) / n * m / (m - 1))


def test_an_axis_of_one_gpu_sends_nothing():
    assert gpu_group_network([[0], [1]], H100) == AxisNetwork(0, 0)


@pytest.mark.parametrize("call, match", [
    (lambda: gpu_group_network([[0, 1]], "TPU v5e"), "must be a GPU"),
    (lambda: gpu_group_network([], H100), "non-empty"),
    (lambda: gpu_group_network([[0, -1]], H100), "non-negative host"),
    (lambda: gpu_group_network([["a"]], H100), "groups must be"),
    (lambda: AxisNetwork(1, 1, bandwidth=0), "bandwidth must be"),
    (lambda: AxisNetwork(1, 1, hop_latency=-1e-6), "hop_latency must be"),
])
def test_gpu_network_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_a_tpu_network_prints_as_before():
    assert repr(AxisNetwork(2, 4)) == "AxisNetwork(links=2, hops=4)"


@pytest.mark.skipif(shardlab.gpu_compiler_missing() is not None, reason="JAX's CUDA plugin is not installed")
def test_a_compiled_gpu_programs_collectives_get_their_level():
    mesh = shardlab.target_mesh("h100-32", (4, 8), ("data", "model"))
    net = shardlab.mesh_network(mesh)
    assert net["model"].bandwidth == 450e9 and net["data"].bandwidth == 50e9

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    w = jax.ShapeDtypeStruct((1024, 1024), jnp.float32, sharding=NamedSharding(mesh, P(None, "model")))
    x = jax.ShapeDtypeStruct((256, 1024), jnp.float32, sharding=NamedSharding(mesh, P("data", None)))
    prog = shardlab.compile_for(jax.grad(loss), w, x)
    traffic, network = shardlab.compiled_traffic(prog.collectives, mesh)
    assert ("data",) in network and network[("data",)] == net["data"]
    sent = sum(t.nbytes for t in traffic if t.axis == ("data",))
    t = modelled_time(0, traffic, "H100", network)
    assert t["by_axis"][("data",)] == pytest.approx(
        sent / 50e9 + sum(t.count * 2 if t.kind == "all-reduce" else t.count
                          for t in traffic if t.axis == ("data",)) * 3 * NETWORK_STEP_LATENCY, rel=1e-9)


def test_modelled_passes_can_add_the_axes_of_each_pass():
    # Forward: 1 ms of compute; all-reduces (2 passes of the hops): 0.5 ms + 16 us on "data" (2 links,
    # 8 hops) and 0.25 ms + 8 us on "model" (2 links, 4 hops).
    net = {"data": AxisNetwork(2, 8), "model": AxisNetwork(2, 4)}
    fwd = [Traffic(1e6, "data"), Traffic(5e5, "model")]
    passes = {"forward": (1e9, fwd)}
    at_once = modelled_passes(passes, ROUND, net)
    one_by_one = modelled_passes(passes, ROUND, net, axes_at_once=False)
    assert at_once["comm"] == pytest.approx(0.5e-3 + 16e-6, rel=1e-12)
    assert one_by_one["comm"] == pytest.approx(0.75e-3 + 24e-6, rel=1e-12)
    assert one_by_one["forward"]["latency"] == pytest.approx(24e-6, rel=1e-12)
    with pytest.raises(ValueError, match="axes_at_once"):
        modelled_passes(passes, ROUND, net, axes_at_once="no")


def test_memory_term_takes_the_larger_of_flops_and_bytes():
    """``hbm_bytes``: local time is max(flops/peak, bytes/HBM bandwidth), checked by hand on the v5e."""
    v5e = CHIPS["TPU v5e"]
    net = {"x": AxisNetwork(links=2, hops=4)}
    traffic = [Traffic(9e6, "x", 1, "all-gather")]
    plain = modelled_time(1e9, traffic, "TPU v5e", net)
    comm = 9e6 / (2 * v5e.link_bandwidth) + 4 * ICI_HOP_LATENCY       # by hand
    for hbm, bound in ((1e6, "communication"), (2e8, "memory")):
        t = modelled_time(1e9, traffic, "TPU v5e", net, hbm_bytes=hbm)
        memory = hbm / v5e.hbm_bandwidth
        local = max(1e9 / v5e.peak_flops, memory)
        assert t["memory"] == pytest.approx(memory, rel=1e-12)
        assert t["local"] == pytest.approx(local, rel=1e-12)
        assert t["comm"] == pytest.approx(comm, rel=1e-12)
        assert t["serial"] == pytest.approx(local + comm, rel=1e-12)
        assert t["overlapped"] == pytest.approx(max(local, comm), rel=1e-12)
        assert t["bound"] == bound
        assert t["compute"] == plain["compute"]        # the flops term is unchanged
    # without the keyword the result is what it was: no memory keys, serial = compute + comm
    assert "memory" not in plain and plain["serial"] == pytest.approx(plain["compute"] + comm)
    # few bytes: the memory term is below compute, and local is compute itself
    few = modelled_time(1e12, traffic, "TPU v5e", net, hbm_bytes=1.0)
    assert few["local"] == few["compute"] and few["bound"] == "compute"
    for bad in (-1, "1e9", True, float("nan")):
        with pytest.raises(ValueError, match="hbm_bytes"):
            modelled_time(1e9, traffic, "TPU v5e", net, hbm_bytes=bad)
