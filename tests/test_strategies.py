"""shardlab.parallelism.strategies: the analytic step model, checked by hand and against compiled steps."""

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.programs.collectives import collectives_in, collectives_in_text
import math  # noqa: E402

from shardlab.hardware.chips import CHIPS, Chip
from shardlab.parallelism.strategies import (MLPSizes, STRATEGIES, Transfer, compute_bound_from, mlp_bytes, mlp_flops,
                                             mlp_memory, mlp_pass_flops, mlp_transfers, phase_of, step_times)

SIZES = MLPSizes(batch=16, d_model=8, d_hidden=32, layers=2)
W = 8 * 32 * 4          # bytes of one weight
PARAMS = 4 * W          # two blocks, two weights each
ACT = 16 * 8 * 4        # one block output, whole batch


def test_sizes():
    assert SIZES.weight_bytes == W and SIZES.param_bytes == PARAMS
    assert SIZES.activation_bytes() == ACT and SIZES.activation_bytes(4) == ACT // 4


def test_transfer_uses_the_ring_formulas():
    assert Transfer("all-reduce", "g", 800, 8, "backward").bytes_per_device == 1400
    assert Transfer("all-gather", "w", 800, 8, "forward").bytes_per_device == 700
    assert Transfer("reduce-scatter", "g", 800, 8, "backward").bytes_per_device == 700


def test_dp_is_one_gradient_all_reduce_plus_the_loss():
    ts = mlp_transfers("dp", SIZES, data=8)
    assert [(t.kind, t.nbytes, t.group_size) for t in ts] == [("all-reduce", 4, 8), ("all-reduce", PARAMS, 8)]
    assert mlp_bytes("dp", SIZES, data=8) == 2 * 7 * (PARAMS + 4) // 8


def test_fsdp_minimum_equals_dp_and_the_variants_add_what_they_should():
    minimum = mlp_bytes("fsdp", SIZES, data=8)
    assert minimum == mlp_bytes("dp", SIZES, data=8)
    kinds = [t.kind for t in mlp_transfers("fsdp", SIZES, data=8)]
    assert kinds.count("all-gather") == 4 and kinds.count("reduce-scatter") == 4
    assert mlp_bytes("fsdp", SIZES, data=8, gradient_reduction="all-reduce") == minimum + 7 * PARAMS // 8
    assert mlp_bytes("fsdp", SIZES, data=8, regather=True) == minimum + 7 * PARAMS // 8


def test_tp_has_2L_minus_1_activation_all_reduces():
    ts = mlp_transfers("tp", SIZES, model=4)
    assert [t.phase for t in ts] == ["forward", "forward", "backward"]
    assert all(t.kind == "all-reduce" and t.nbytes == ACT and t.group_size == 4 for t in ts)
    assert mlp_bytes("tp", SIZES, model=4) == 3 * 2 * 3 * ACT // 4


def test_dp_tp_splits_each_term_by_the_other_axis():
    expected = 3 * 2 * 3 * (ACT // 2) // 4 + 2 * 1 * (PARAMS // 4 + 4) // 2
    assert mlp_bytes("dp+tp", SIZES, data=2, model=4) == expected


def test_one_device_moves_nothing():
    for strategy in STRATEGIES:
        assert mlp_transfers(strategy, SIZES) == []


def test_memory():
    assert mlp_memory("dp", SIZES, data=8, optimizer_states=2) == {
        "params": PARAMS, "grads": PARAMS, "optimizer": 2 * PARAMS,
        "activations": 2 * 2 * (8 + 32) * 4, "gathered": 0}
    fsdp = mlp_memory("fsdp", SIZES, data=8)
    assert fsdp["params"] == PARAMS // 8 and fsdp["gathered"] == PARAMS
    regather = mlp_memory("fsdp", SIZES, data=8, regather=True)
    assert regather["gathered"] == PARAMS // 2 and regather["activations"] == 2 * 2 * 8 * 4
    tp = mlp_memory("tp", SIZES, model=4)
    assert tp["params"] == PARAMS // 4 and tp["activations"] == 2 * 16 * (8 + 8) * 4
    mix = mlp_memory("dp+tp", SIZES, data=2, model=4)
    assert mix["params"] == PARAMS // 4 and mix["activations"] == 2 * 8 * (8 + 8) * 4


def test_flops_count_the_matrix_products():
    one = mlp_flops(SIZES)
    assert one == (12 * 2 - 2) * 16 * 8 * 32
    assert mlp_flops(SIZES, data=2, model=4) == one // 8


def test_flops_against_cost_analysis():
    # XLA counts every operation; the matrix products are most of it.
    params = [{"w1": jnp.ones((8, 32)), "w2": jnp.ones((32, 8))}] * SIZES.layers
    x = jnp.ones((SIZES.batch, SIZES.d_model))
    cost = jax.jit(_step()).lower(params, x, x).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    assert mlp_flops(SIZES) <= cost["flops"] < 1.2 * mlp_flops(SIZES)


def test_transfers_name_their_mesh_axis():
    axes = {(t.what.split(" of ")[0], t.axis) for t in mlp_transfers("dp+tp", SIZES, data=2, model=4)}
    assert ("output", "model") in axes and ("gradients", "data") in axes and ("loss", "data") in axes
    assert {t.axis for t in mlp_transfers("fsdp", SIZES, data=8)} == {"data"}


def test_pass_flops_add_up():
    split = mlp_pass_flops(SIZES, data=2, model=4)
    assert split["forward"] == 4 * 2 * 16 * 8 * 32 // 8
    assert split["forward"] + split["backward"] == mlp_flops(SIZES, data=2, model=4)


# A chip with round numbers: 1e12 flops/s, 1e9 bytes/s per link each way, a 2-D torus (4 links).
ROUND = Chip("round", peak_flops=1e12, hbm_bytes=1e9, hbm_bandwidth=1e11, link_bandwidth=1e9, torus_dims=2)


def test_step_times_by_hand():
    big = MLPSizes(batch=64, d_model=8, d_hidden=32, layers=2, itemsize=2)
    t = step_times("dp", big, ROUND, data=8, data_links=2)
    flops = mlp_pass_flops(big, data=8)
    grads = 2 * 7 / 8 * big.param_bytes
    loss = 2 * 7 / 8 * 4
    assert t["forward"]["compute"] == pytest.approx(flops["forward"] / 1e12)
    assert t["forward"]["comm"] == pytest.approx(loss / 2e9)
    assert t["backward"]["comm"] == pytest.approx(grads / 2e9)
    assert t["backward"]["comm_model"] == 0
    assert t["time"] == pytest.approx(sum(max(t[p]["compute"], t[p]["comm"]) for p in ("forward", "backward")))
    assert t["bound"] == "communication" and t["comm"] > t["compute"]
    # Two mesh axes overlap: a pass communicates for the longer of the two.
    mix = step_times("dp+tp", big, ROUND, data=2, model=4)
    for phase in ("forward", "backward"):
        assert mix[phase]["comm"] == max(mix[phase]["comm_data"], mix[phase]["comm_model"])
    # Four links halve the time of two.
    assert step_times("dp", big, ROUND, data=8, data_links=4)["backward"]["comm"] == pytest.approx(grads / 4e9)


def test_compute_bound_from_solves_the_balance():
    base = MLPSizes(batch=8, d_model=64, d_hidden=256, layers=4, itemsize=2)
    b = compute_bound_from("dp", base, ROUND, data=8)
    # Just above it the step is compute-bound, just below it is not (batches here are real numbers).
    above = step_times("dp", MLPSizes(8 * math.ceil(b / 8 * 1.01), 64, 256, 4, 2), ROUND, data=8)
    below = step_times("dp", MLPSizes(8 * math.floor(b / 8 * 0.99), 64, 256, 4, 2), ROUND, data=8)
    assert above["bound"] == "compute" and below["bound"] == "communication"
    # Closed form: backward flops (8L-2) B d h / n against 2(n-1)/n P bytes over 2 links (the loss is tiny).
    alpha = ROUND.critical_intensity(links=2)
    # Exact but for float rounding (rel 1e-9). Without the factor of the first block's input gradient, which
    # nothing needs (8L / (8L - 2)), it would be 6 % lower: far outside.
    assert b / 8 == pytest.approx(alpha * 8 * 4 / (8 * 4 - 2) * 7 / 8, rel=1e-9)
    assert b / 8 != pytest.approx(alpha * 7 / 8, rel=1e-9)
    # Tensor parallelism: its bytes grow with the batch like its flops, so the answer is all or nothing ...
    assert compute_bound_from("tp", base, ROUND, model=4) == math.inf
    wide = MLPSizes(batch=8, d_model=64, d_hidden=4 * 4096, layers=4, itemsize=2)
    assert compute_bound_from("tp", wide, ROUND, model=4) == 0.0
    # ... and in the hidden width it is h / n > (n-1)/n of the chip's ratio (forward pass).
    h = compute_bound_from("tp", base, ROUND, vary="d_hidden", model=4)
    assert h / 4 == pytest.approx(alpha * 3 / 4)


def test_compute_bound_from_refuses_bad_input():
    with pytest.raises(ValueError, match="vary"):
        compute_bound_from("dp", SIZES, ROUND, vary="width", data=8)
    with pytest.raises(ValueError, match="data_links"):
        step_times("dp", SIZES, ROUND, data=8, data_links=0)
    with pytest.raises(ValueError, match="6 links, more than a TPU v5e chip has"):
        step_times("dp", SIZES, CHIPS["TPU v5e"], data=8, data_links=6)


def test_phase_of_reads_the_fusion_that_calls_a_collective():
    # XLA:TPU's all-reduce-scatter fusion: the all-reduce has no op_name; the fusion calling it has.
    text = (
        "HloModule m, num_partitions=2\n"
        "%add (a: f32[], b: f32[]) -> f32[] {\n"
        "  %a = f32[] parameter(0)\n"
        "  %b = f32[] parameter(1)\n"
        "  ROOT %s = f32[] add(%a, %b)\n"
        "}\n"
        "%ars (p: f32[4]) -> f32[2] {\n"
        "  %p = f32[4]{0} parameter(0)\n"
        "  %ar.9 = f32[4]{0} all-reduce(f32[4]{0} %p), channel_id=1, replica_groups={{0,1}}, to_apply=%add\n"
        "  %i = u32[] partition-id()\n"
        "  ROOT %ds = f32[2]{0} dynamic-slice(%ar.9, %i), dynamic_slice_sizes={2}\n"
        "}\n"
        "ENTRY %main (q: f32[4]) -> f32[2] {\n"
        "  %q = f32[4]{0} parameter(0)\n"
        '  ROOT %f = f32[2]{0} fusion(%q), kind=kCustom, calls=%ars, '
        'metadata={op_name="jit(f)/transpose(jvp())/dot_general"}\n'
        "}\n"
    )
    from jaxlib import _hlo

    _hlo.hlo_module_from_text(text)         # real HLO: XLA's parser reads it
    report = collectives_in_text(text)
    assert [phase_of(c, report) for c in report] == ["backward"]


@pytest.mark.parametrize("call, match", [
    (lambda: mlp_transfers("zero", SIZES), "strategy"),
    (lambda: mlp_transfers("dp", SIZES, model=2), "model"),
    (lambda: mlp_transfers("tp", SIZES, data=2), "data"),
    (lambda: mlp_transfers("dp", SIZES, data=0), "data"),
    (lambda: mlp_transfers("dp", SIZES, data=3), "batch"),
    (lambda: mlp_transfers("tp", SIZES, model=3), "d_hidden"),
    (lambda: mlp_transfers("fsdp", SIZES, data=2, gradient_reduction="psum"), "gradient_reduction"),
    (lambda: mlp_transfers("fsdp", SIZES, data=2, regather=1), "regather"),
    (lambda: mlp_transfers("dp", (16, 8, 32, 2)), "sizes"),
    (lambda: mlp_memory("dp", SIZES, optimizer_states=-1), "optimizer_states"),
    (lambda: mlp_memory("dp", SIZES, data=2, regather=True), "regather"),
    (lambda: mlp_flops(SIZES, data=0), "data"),
    (lambda: mlp_flops(SIZES, model=3), "d_hidden"),
    (lambda: MLPSizes(batch=0, d_model=8, d_hidden=32, layers=2), "batch"),
    (lambda: MLPSizes(batch=2, d_model=8, d_hidden=32, layers=True), "layers"),
])
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_phase_of_reads_op_names():
    text = (
        "HloModule m, num_partitions=2\n"
        '  %ar.1 = f32[4]{0} all-reduce(f32[4]{0} %p), replica_groups={{0,1}}, '
        'metadata={op_name="jit(f)/jvp()/dot_general"}\n'
        '  %ar.2 = f32[4]{0} all-reduce(f32[4]{0} %q), replica_groups={{0,1}}, '
        'metadata={op_name="jit(f)/transpose(jvp())/dot_general"}\n'
        '  %ar.3 = (f32[4]{0}, f32[]) all-reduce(f32[4]{0} %q, f32[] %r), replica_groups={{0,1}}, '
        'metadata={op_name="jit(f)/(transpose(jvp())/dot_general:jvp()/reduce_sum)"}\n'
    )
    report = collectives_in_text(text)
    assert [phase_of(c, report) for c in report] == ["forward", "backward", "forward+backward"]
    with pytest.raises(ValueError, match="collective"):
        phase_of("ar.1", report)
    with pytest.raises(ValueError, match="report"):
        phase_of(report[0], text)


# --- against compiled steps: the model of the training chapter, small -----------------------------

def _loss(params, x, y, gather=None):
    for block in params:
        w1, w2 = block["w1"], block["w2"]
        if gather is not None:
            w1, w2 = gather(w1), gather(w2)
        x = x + jax.nn.relu(x @ w1) @ w2
    return jnp.mean((x - y) ** 2)


def _step(gather=None):
    def step(params, x, y):
        loss, grads = jax.value_and_grad(lambda p: _loss(p, x, y, gather))(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), loss
    return step


def _compiled_bytes(shape, names, w1, w2, batch, gather=None):
    mesh = jax.make_mesh(shape, names, axis_types=(AxisType.Auto,) * len(shape), devices=DEVICES)
    ws = [{"w1": NamedSharding(mesh, w1), "w2": NamedSharding(mesh, w2)}] * SIZES.layers
    bs = NamedSharding(mesh, batch)
    g = None if gather is None else (lambda w: jax.lax.with_sharding_constraint(w, NamedSharding(mesh, P())))
    step = jax.jit(_step(g), in_shardings=(ws, bs, bs), out_shardings=(ws, NamedSharding(mesh, P())))
    params = [{"w1": jnp.ones((8, 32)), "w2": jnp.ones((32, 8))}] * SIZES.layers
    x = jnp.ones((SIZES.batch, SIZES.d_model))
    return collectives_in(step, params, x, x)


def test_formulas_match_compiled_steps():
    dp = _compiled_bytes((8,), ("data",), P(), P(), P("data"))
    assert dp.total_bytes_per_device == mlp_bytes("dp", SIZES, data=8)
    tp = _compiled_bytes((4,), ("model",), P(None, "model"), P("model"), P())
    assert tp.total_bytes_per_device == mlp_bytes("tp", SIZES, model=4)
    assert [phase_of(c, tp) for c in tp] == ["forward", "forward", "backward"]
    mix = _compiled_bytes((2, 4), ("data", "model"), P(None, "model"), P("model"), P("data"))
    assert mix.total_bytes_per_device == mlp_bytes("dp+tp", SIZES, data=2, model=4)
    fsdp = _compiled_bytes((8,), ("data",), P("data"), P("data"), P("data"), gather=True)
    reduction = "reduce-scatter" if fsdp.of_kind("reduce-scatter") else "all-reduce"
    assert fsdp.total_bytes_per_device == mlp_bytes("fsdp", SIZES, data=8, gradient_reduction=reduction)
    np.testing.assert_equal(fsdp.kinds()["all-gather"], 4)


def test_fsdp_with_remat_gathers_again_in_the_backward_pass():
    mesh = jax.make_mesh((8,), ("data",), axis_types=(AxisType.Auto,), devices=DEVICES)
    whole = lambda w: jax.lax.with_sharding_constraint(w, NamedSharding(mesh, P()))

    @jax.checkpoint
    def block(b, x):
        return x + jax.nn.relu(x @ whole(b["w1"])) @ whole(b["w2"])

    def step(params, x, y):
        def loss(p):
            h = x
            for b in p:
                h = block(b, h)
            return jnp.mean((h - y) ** 2)
        value, grads = jax.value_and_grad(loss)(params)
        return jax.tree.map(lambda p, g: p - 0.1 * g, params, grads), value

    ws = [{"w1": NamedSharding(mesh, P("data")), "w2": NamedSharding(mesh, P("data"))}] * SIZES.layers
    bs = NamedSharding(mesh, P("data"))
    jitted = jax.jit(step, in_shardings=(ws, bs, bs), out_shardings=(ws, NamedSharding(mesh, P())))
    params = [{"w1": jnp.ones((8, 32)), "w2": jnp.ones((32, 8))}] * SIZES.layers
    x = jnp.ones((SIZES.batch, SIZES.d_model))
    report = collectives_in(jitted, params, x, x)
    assert [phase_of(c, report) for c in report.of_kind("all-gather")].count("backward") == 4
    reduction = "reduce-scatter" if report.of_kind("reduce-scatter") else "all-reduce"
    assert report.total_bytes_per_device == mlp_bytes("fsdp", SIZES, data=8, regather=True,
                                                      gradient_reduction=reduction)
