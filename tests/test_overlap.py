"""shardlab.programs.schedule: the scheduled order of a compiled program, its asynchronous windows, the ring-matmul model."""

import importlib.util

import pytest

from shardlab.hardware.chips import CHIPS
from shardlab.models.network import AxisNetwork
from shardlab.models.ring_matmul import ring_matmul_time
from shardlab.programs.schedule import async_windows, scheduled_order

# A scheduled module in the shape XLA:TPU prints it: a product fused in a computation of its own,
# one collective-permute whose start and done surround it, a second whose window is empty.
HLO = """HloModule jit_ring, is_scheduled=true

%fused_computation (param_0: bf16[8,128], param_1: bf16[128,32]) -> bf16[8,32] {
  %param_0 = bf16[8,128]{1,0} parameter(0)
  %param_1 = bf16[128,32]{1,0} parameter(1)
  ROOT %convolution.1 = bf16[8,32]{1,0} convolution(%param_0, %param_1), dim_labels=bf_io->bf
}

%add_computation (a: bf16[8,32], b: bf16[8,32]) -> bf16[8,32] {
  %a = bf16[8,32]{1,0} parameter(0)
  %b = bf16[8,32]{1,0} parameter(1)
  ROOT %add.1 = bf16[8,32]{1,0} add(%a, %b)
}

ENTRY %main (x: bf16[8,128], w: bf16[128,32]) -> bf16[8,32] {
  %x = bf16[8,128]{1,0} parameter(0)
  %w = bf16[128,32]{1,0} parameter(1)
  %collective-permute-start = (bf16[8,128]{1,0}, bf16[8,128]{1,0}, u32[], u32[]) collective-permute-start(%x), channel_id=1, source_target_pairs={{0,1},{1,0}}
  %fusion = bf16[8,32]{1,0} fusion(%x, %w), kind=kOutput, calls=%fused_computation
  %collective-permute-done = bf16[8,128]{1,0} collective-permute-done(%collective-permute-start)
  %collective-permute-start.1 = (bf16[8,128]{1,0}, bf16[8,128]{1,0}, u32[], u32[]) collective-permute-start(%collective-permute-done), channel_id=2, source_target_pairs={{0,1},{1,0}}
  %collective-permute-done.1 = bf16[8,128]{1,0} collective-permute-done(%collective-permute-start.1)
  %fusion.1 = bf16[8,32]{1,0} fusion(%collective-permute-done.1, %w), kind=kOutput, calls=%fused_computation
  %all-gather = bf16[8,32]{1,0} all-gather(%fusion.1), channel_id=3, replica_groups={{0,1}}, dimensions={0}
  ROOT %sum = bf16[8,32]{1,0} fusion(%fusion, %all-gather), kind=kLoop, calls=%add_computation
}
"""


def xla_accepts(text: str) -> None:
    """The hand-written HLO is real HLO: XLA's parser reads it."""
    from jaxlib import _hlo

    _hlo.hlo_module_from_text(text)


def test_scheduled_order_classifies_each_instruction_in_order():
    xla_accepts(HLO)
    ops = scheduled_order(HLO)
    assert [op.name for op in ops][:3] == ["x", "w", "collective-permute-start"]
    kinds = [(op.name, op.kind, op.collective) for op in ops if op.kind != "other"]
    assert kinds == [("collective-permute-start", "start", "collective-permute"),
                     ("fusion", "product", ""),
                     ("collective-permute-done", "done", "collective-permute"),
                     ("collective-permute-start.1", "start", "collective-permute"),
                     ("collective-permute-done.1", "done", "collective-permute"),
                     ("fusion.1", "product", ""),
                     ("all-gather", "collective", "all-gather")]
    assert [op.position for op in ops] == list(range(len(ops)))
    # a fusion whose body holds no product is not one
    assert next(op for op in ops if op.name == "sum").kind == "other"


def test_async_windows_name_the_products_between_start_and_done():
    windows = async_windows(HLO)
    assert [(w.start, w.done, w.products, w.overlapped) for w in windows] == [
        ("collective-permute-start", "collective-permute-done", ("fusion",), True),
        ("collective-permute-start.1", "collective-permute-done.1", (), False)]


def test_other_computations_and_bad_input():
    assert [op.opcode for op in scheduled_order(HLO, "fused_computation")][-1] == "convolution"
    with pytest.raises(ValueError, match="computation"):
        scheduled_order(HLO, "no_such_computation")
    with pytest.raises(ValueError, match="compiled"):
        scheduled_order(42)
    with pytest.raises(ValueError, match="ENTRY"):
        scheduled_order("HloModule empty\n")


needs_libtpu = pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="libtpu is not installed")
RING16 = AxisNetwork(2, 8)      # a full v5e pod axis: a ring of 16 with wraparound (tests/test_time_model.py)
LAT = 1e-6


def test_ring_matmul_time_model():
    chip = CHIPS["TPU v5e"]
    t = ring_matmul_time(64, 1024, 8 * 4096, 8, chip, network=AxisNetwork(2, 4))
    assert t["flops_per_step"] == 2 * 8 * 1024 * 4096
    assert t["bytes_per_step"] == 8 * 1024 * 2
    step = t["step"]
    # by hand: one link to the next device, one hop's latency per send
    assert step["compute"] == pytest.approx(t["flops_per_step"] / chip.peak_flops)
    assert step["comm"] == pytest.approx(t["bytes_per_step"] / chip.link_bandwidth + LAT)
    assert t["serial"] == pytest.approx(8 * step["compute"] + 7 * step["comm"])
    assert t["overlapped"] == pytest.approx(step["compute"] + 7 * max(step["compute"], step["comm"]))
    assert t["saved"] == pytest.approx(t["serial"] - t["overlapped"]) and t["saved"] > 0
    # the plain form: 7/8 of x gathered over both links, 4 hops, then the whole product
    gather = 7 * t["bytes_per_step"] / (2 * chip.link_bandwidth) + 4 * LAT
    assert t["plain_comm"] == pytest.approx(gather)
    assert t["plain"] == pytest.approx(gather + 8 * step["compute"])
    # with no latency, the break-even width per device is dtype_bytes * peak / (2 * links * bandwidth)
    width = chip.peak_flops / chip.link_bandwidth            # 2 bytes / 2 flops per multiply-add
    for factor, bound in ((1.01, "compute"), (0.99, "communication")):
        t = ring_matmul_time(8, 512, 8 * int(width * factor), 8, chip, network=RING16, hop_latency=0)
        assert t["bound"] == bound
    both = ring_matmul_time(8, 512, 8 * int(width * 0.6), 8, chip, network=RING16, bidirectional=True,
                            hop_latency=0)
    assert both["bound"] == "compute"
    one = ring_matmul_time(8, 512, 8 * int(width * 0.6), 8, chip, network=RING16, hop_latency=0)
    assert both["step"]["comm"] == pytest.approx(one["step"]["comm"] / 2)


@pytest.mark.parametrize("ratio, faster", [(1.9, "ring"), (2.1, "plain")])
def test_one_way_ring_beats_the_plain_form_while_a_send_takes_under_twice_a_product(ratio, faster):
    # comm/compute per step = ratio; by hand (no latency): ring = c + (n-1)·m, plain = n·c + (n-1)·m/2
    chip = CHIPS["TPU v5e"]
    width = round(chip.peak_flops / chip.link_bandwidth / ratio)
    t = ring_matmul_time(16 * 2048, 8192, 16 * width, 16, chip, network=RING16, hop_latency=0)
    c, m = t["step"]["compute"], t["step"]["comm"]
    assert m / c == pytest.approx(ratio, rel=1e-3)
    assert t["overlapped"] == pytest.approx(c + 15 * m) and t["plain"] == pytest.approx(16 * c + 15 * m / 2)
    assert t["faster"] == faster
    # both ways round the ring is never slower than the plain form
    assert ring_matmul_time(16 * 2048, 8192, 16 * width, 16, chip, network=RING16, bidirectional=True,
                            hop_latency=0)["faster"] == "ring"


@needs_libtpu
def test_ring_matmul_time_on_a_compiled_mesh_network():
    from shardlab import compiling_for_tpu, mesh_network, target_mesh

    with compiling_for_tpu():
        network = mesh_network(target_mesh("v5e-256", (16, 16), ("data", "model")))["model"]
    assert network == RING16
    t = ring_matmul_time(16 * 2048, 8192, 4 * 8192, 16, "TPU v5e", network=network)
    assert (round(t["overlapped"] * 1e6), round(t["plain"] * 1e6)) == (11549, 11182)
    assert t["faster"] == "plain"


@pytest.mark.parametrize("kwargs, word", [({"rows": 0}, "rows"), ({"cols": 12}, "cols"), ({"devices": 2.0}, "devices"),
                                          ({"dtype_bytes": 0}, "dtype_bytes"), ({"bidirectional": "yes"},
                                                                                 "bidirectional"),
                                          ({"chip": "TPU v99"}, "chip"), ({"network": 2}, "network"),
                                          ({"network": AxisNetwork(0, 0)}, "network"),
                                          ({"network": AxisNetwork(1, 7), "bidirectional": True}, "links"),
                                          ({"rows": 1, "cols": 1, "devices": 1}, "devices")])
def test_ring_matmul_time_refuses_bad_arguments(kwargs, word):
    args = {"rows": 64, "contract": 128, "cols": 256, "devices": 8, "chip": "TPU v5e", "network": RING16}
    args.update(kwargs)
    with pytest.raises(ValueError, match=word):
        ring_matmul_time(**args)


# A loop whose body wraps an all-gather in an async computation (the async-start/async-done form), around a dot.
LOOP_HLO = """HloModule jit_loop, is_scheduled=true

%ag_computation (p: bf16[4,8]) -> bf16[32,8] {
  %p = bf16[4,8]{1,0} parameter(0)
  ROOT %all-gather.2 = bf16[32,8]{1,0} all-gather(%p), channel_id=4, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}
}

%body (t: (bf16[4,8], bf16[8,8])) -> (bf16[4,8], bf16[8,8]) {
  %t = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) parameter(0)
  %a = bf16[4,8]{1,0} get-tuple-element(%t), index=0
  %b = bf16[8,8]{1,0} get-tuple-element(%t), index=1
  %async-start = ((bf16[4,8]{1,0}), bf16[32,8]{1,0}) async-start(%a), calls=%ag_computation
  %dot.3 = bf16[4,8]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  %async-done = bf16[32,8]{1,0} async-done(%async-start)
  ROOT %r = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) tuple(%dot.3, %b)
}

%cond (t: (bf16[4,8], bf16[8,8])) -> pred[] {
  %t = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) parameter(0)
  ROOT %c = pred[] constant(false)
}

ENTRY %main (x: bf16[4,8], w: bf16[8,8]) -> (bf16[4,8], bf16[8,8]) {
  %x = bf16[4,8]{1,0} parameter(0)
  %w = bf16[8,8]{1,0} parameter(1)
  %init = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) tuple(%x, %w)
  ROOT %while = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) while(%init), condition=%cond, body=%body
}
"""


@pytest.mark.parametrize("done_calls", ["", ", calls=%ag_computation"])   # XLA prints it without; older with
def test_loops_and_async_wrapped_collectives(done_calls):
    hlo = LOOP_HLO.replace("async-done(%async-start)", "async-done(%async-start)" + done_calls)
    xla_accepts(hlo)
    assert [op.kind for op in scheduled_order(hlo) if op.kind != "other"] == ["loop"]
    assert async_windows(hlo) == []                          # the window is inside the loop's body, not the entry
    body = [(op.kind, op.collective) for op in scheduled_order(hlo, "body") if op.kind != "other"]
    assert body == [("start", "all-gather"), ("product", ""), ("done", "all-gather")]
    [window] = async_windows(hlo, "body")
    assert (window.collective, window.start, window.done, window.products) == ("all-gather", "async-start",
                                                                               "async-done", ("dot.3",))


# XLA:TPU's reduce-scatter as it compiles a large one: an all-reduce and a slice fused into a computation
# named all-reduce-scatter (a synchronous collective), then a collective-permute overlapped with a product.
FUSED_SCATTER_HLO = """HloModule jit_scatter, is_scheduled=true

%sum (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %add = f32[] add(%a, %b)
}

%all-reduce-scatter (input: f32[16,8]) -> f32[2,8] {
  %input = f32[16,8]{1,0} parameter(0)
  %all-reduce.1 = f32[16,8]{1,0} all-reduce(%input), channel_id=2, replica_groups={{0,1,2,3,4,5,6,7}}, use_global_device_ids=true, to_apply=%sum
  %zero = u32[] constant(0)
  ROOT %dynamic-slice.1 = f32[2,8]{1,0} dynamic-slice(%all-reduce.1, %zero, %zero), dynamic_slice_sizes={2,8}
}

%product (p: f32[2,8]) -> f32[2,2] {
  %p = f32[2,8]{1,0} parameter(0)
  ROOT %dot.1 = f32[2,2]{1,0} dot(%p, %p), lhs_contracting_dims={1}, rhs_contracting_dims={1}
}

ENTRY %main (x: f32[16,8], y: f32[2,8]) -> (f32[2,8], f32[2,2]) {
  %x = f32[16,8]{1,0} parameter(0)
  %y = f32[2,8]{1,0} parameter(1)
  %fusion = f32[2,8]{1,0} fusion(%x), kind=kCustom, calls=%all-reduce-scatter
  %collective-permute-start = (f32[2,8]{1,0}, f32[2,8]{1,0}, u32[], u32[]) collective-permute-start(%fusion), channel_id=1, source_target_pairs={{0,1},{1,2}}
  %fusion.1 = f32[2,2]{1,0} fusion(%y), kind=kOutput, calls=%product
  %collective-permute-done = f32[2,8]{1,0} collective-permute-done(%collective-permute-start)
  ROOT %tuple = (f32[2,8]{1,0}, f32[2,2]{1,0}) tuple(%collective-permute-done, %fusion.1)
}
"""


def test_a_fused_reduce_scatter_is_a_synchronous_collective():
    xla_accepts(FUSED_SCATTER_HLO)
    kinds = [(op.name, op.kind, op.collective) for op in scheduled_order(FUSED_SCATTER_HLO) if op.kind != "other"]
    assert kinds == [("fusion", "collective", "reduce-scatter"),
                     ("collective-permute-start", "start", "collective-permute"),
                     ("fusion.1", "product", ""),
                     ("collective-permute-done", "done", "collective-permute")]
    # the same fusion under another name is the all-reduce it holds
    renamed = FUSED_SCATTER_HLO.replace("all-reduce-scatter", "fused_all_reduce")
    assert scheduled_order(renamed)[2].collective == "all-reduce"
    # a fused computation marked as an asynchronous start is not a synchronous collective
    marked = FUSED_SCATTER_HLO.replace(
        "%zero = u32[] constant(0)",
        '%zero = u32[] constant(0)\n  %m = u32[] custom-call(), custom_call_target="AsyncCollectiveStart"')
    assert scheduled_order(marked)[2].kind == "other"


@needs_libtpu
def test_xla_tpu_fused_reduce_scatter_read_in_a_compiled_program():
    # XLA:TPU compiles a large psum_scatter to an all-reduce-scatter fusion, then a collective-permute it
    # overlaps with a product: the schedule shows the fusion as the synchronous reduce-scatter that
    # shardlab's collective reader (an independent reader of the same text) lists.
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import shardlab

    def body(partial_sums, block):
        return jax.lax.psum_scatter(partial_sums, "i", scatter_dimension=0, tiled=True), block @ block.T

    with shardlab.compiling_for_tpu():
        mesh = shardlab.target_mesh("v5e-8", (8,), ("i",))
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P(), P("i", None)),
                                  out_specs=(P("i", None), P("i", None))))
        args = [jax.ShapeDtypeStruct((8192, 4096), jnp.float32, sharding=NamedSharding(mesh, spec))
                for spec in (P(), P("i", None))]
        compiled = f.lower(*args).compile()
    order = [(op.kind, op.collective) for op in scheduled_order(compiled) if op.kind != "other"]
    assert order == [("collective", "reduce-scatter"), ("start", "collective-permute"), ("product", ""),
                     ("done", "collective-permute")]
    listed = shardlab.collectives_in_compiled(compiled)
    assert sorted(listed.kinds()) == ["collective-permute", "reduce-scatter"]
    [window] = async_windows(compiled)
    assert window.collective == "collective-permute" and window.overlapped


# XLA:TPU's asynchronous collective fusions, in the shape it prints them: the start fusion's root calls
# AsyncCollectiveStart, the work scheduled meanwhile (an async_collective_fusion holding the product and a
# copy of the collective) takes the start's tuple, and the done fusion takes the work's outputs, not the
# start itself. A second such collective has nothing between its halves; an elementwise work fusion that
# also holds a copy of the collective is neither a product nor a synchronous collective.
ASYNC_FUSION_HLO = """HloModule jit_async_fusion, is_scheduled=true

%start_computation (p0: bf16[2,8]) -> (bf16[2,8], bf16[8,8]) {
  %p0 = bf16[2,8]{1,0} parameter(0)
  %all-gather.1 = bf16[8,8]{1,0} all-gather(%p0), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %custom-call.1 = (bf16[2,8]{1,0}, bf16[8,8]{1,0}) custom-call(%all-gather.1), custom_call_target="AsyncCollectiveStart"
}

%async_collective_fusion (w0: bf16[2,8], w1: bf16[8,8], w2: bf16[2,8], w3: bf16[8,8]) -> (bf16[2,2], bf16[2,8], bf16[8,8]) {
  %w2 = bf16[2,8]{1,0} parameter(2)
  %w3 = bf16[8,8]{1,0} parameter(3)
  %convolution.1 = bf16[2,8]{1,0} convolution(%w2, %w3), dim_labels=bf_io->bf
  %w0 = bf16[2,8]{1,0} parameter(0)
  %w1 = bf16[8,8]{1,0} parameter(1)
  %all-gather.2 = bf16[8,8]{1,0} all-gather(%w0), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  %slice.1 = bf16[2,2]{1,0} slice(%convolution.1), slice={[0:2], [0:2]}
  ROOT %tuple.1 = (bf16[2,2]{1,0}, bf16[2,8]{1,0}, bf16[8,8]{1,0}) tuple(%slice.1, %w0, %w1)
}

%done_computation (d0: bf16[2,8], d1: bf16[8,8]) -> bf16[8,8] {
  %d0 = bf16[2,8]{1,0} parameter(0)
  %d1 = bf16[8,8]{1,0} parameter(1)
  %all-gather.3 = bf16[8,8]{1,0} all-gather(%d0), channel_id=1, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %custom-call.2 = bf16[8,8]{1,0} custom-call(%d0, %d1, %all-gather.3), custom_call_target="AsyncCollectiveDone"
}

%async_collective_fusion.1 (e0: bf16[2,8], e1: bf16[2,8]) -> bf16[2,8] {
  %e0 = bf16[2,8]{1,0} parameter(0)
  %e1 = bf16[2,8]{1,0} parameter(1)
  %all-gather.4 = bf16[8,8]{1,0} all-gather(%e0), channel_id=2, replica_groups={{0,1,2,3}}, dimensions={0}
  ROOT %add.1 = bf16[2,8]{1,0} add(%e0, %e1)
}

ENTRY %main (x: bf16[2,8], w: bf16[8,8], y: bf16[2,8]) -> (bf16[8,8], bf16[2,2], bf16[8,8], bf16[2,8]) {
  %x = bf16[2,8]{1,0} parameter(0)
  %w = bf16[8,8]{1,0} parameter(1)
  %y = bf16[2,8]{1,0} parameter(2)
  %async-collective-start = (bf16[2,8]{1,0}, bf16[8,8]{1,0}) fusion(%x), kind=kCustom, calls=%start_computation
  %get-tuple-element.1 = bf16[2,8]{1,0} get-tuple-element(%async-collective-start), index=0
  %get-tuple-element.2 = bf16[8,8]{1,0} get-tuple-element(%async-collective-start), index=1
  %fusion.1 = (bf16[2,2]{1,0}, bf16[2,8]{1,0}, bf16[8,8]{1,0}) fusion(%get-tuple-element.1, %get-tuple-element.2, %y, %w), kind=kOutput, calls=%async_collective_fusion
  %get-tuple-element.3 = bf16[2,8]{1,0} get-tuple-element(%fusion.1), index=1
  %get-tuple-element.4 = bf16[8,8]{1,0} get-tuple-element(%fusion.1), index=2
  %async-collective-done = bf16[8,8]{1,0} fusion(%get-tuple-element.3, %get-tuple-element.4), kind=kCustom, calls=%done_computation
  %get-tuple-element.5 = bf16[2,2]{1,0} get-tuple-element(%fusion.1), index=0
  %async-collective-start.1 = (bf16[2,8]{1,0}, bf16[8,8]{1,0}) fusion(%y), kind=kCustom, calls=%start_computation
  %get-tuple-element.6 = bf16[2,8]{1,0} get-tuple-element(%async-collective-start.1), index=0
  %get-tuple-element.7 = bf16[8,8]{1,0} get-tuple-element(%async-collective-start.1), index=1
  %fusion.2 = bf16[2,8]{1,0} fusion(%get-tuple-element.6, %y), kind=kLoop, calls=%async_collective_fusion.1
  %async-collective-done.1 = bf16[8,8]{1,0} fusion(%get-tuple-element.6, %get-tuple-element.7), kind=kCustom, calls=%done_computation
  ROOT %tuple = (bf16[8,8]{1,0}, bf16[2,2]{1,0}, bf16[8,8]{1,0}, bf16[2,8]{1,0}) tuple(%async-collective-done, %get-tuple-element.5, %async-collective-done.1, %fusion.2)
}
"""


def test_xla_tpu_async_collective_fusions_are_a_start_and_a_done():
    xla_accepts(ASYNC_FUSION_HLO)
    kinds = [(op.name, op.kind, op.collective) for op in scheduled_order(ASYNC_FUSION_HLO) if op.kind != "other"]
    assert kinds == [("async-collective-start", "start", "all-gather"),
                     ("fusion.1", "product", ""),
                     ("async-collective-done", "done", "all-gather"),
                     ("async-collective-start.1", "start", "all-gather"),
                     ("async-collective-done.1", "done", "all-gather")]
    # the done reaches its start only through the work's outputs; each pairs with its own start
    assert [(w.start, w.done, w.products, w.overlapped) for w in async_windows(ASYNC_FUSION_HLO)] == [
        ("async-collective-start", "async-collective-done", ("fusion.1",), True),
        ("async-collective-start.1", "async-collective-done.1", (), False)]
    # the same halves without their markers are neither a start nor a done
    unmarked = ASYNC_FUSION_HLO.replace('"AsyncCollectiveStart"', '"Other"').replace('"AsyncCollectiveDone"',
                                                                                       '"Other"')
    xla_accepts(unmarked)
    assert async_windows(unmarked) == []


@needs_libtpu
def test_xla_tpu_async_collective_fusion_read_in_a_compiled_program():
    # An all-gather XLA:TPU overlaps with a product (the case tests/test_targets.py reads for its bytes):
    # it writes async-collective-start / work / async-collective-done fusions, no *-start opcode.
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding, PartitionSpec as P

    import shardlab

    def body(a, w):
        return jax.lax.all_gather(a, "x", tiled=True, to="invarying"), jax.lax.psum(a @ w, "x")

    with shardlab.compiling_for_tpu():
        mesh = shardlab.target_mesh("v5e-8", (4,), ("x",))
        f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=(P("x"), P()), out_specs=(P(), P())))
        args = [jax.ShapeDtypeStruct(shape, jnp.bfloat16, sharding=NamedSharding(mesh, spec))
                for shape, spec in (((512, 1024), P("x")), ((1024, 1024), P()))]
        text = f.lower(*args).compile().as_text()
    assert "AsyncCollectiveStart" in text and "all-gather-start" not in text, "no async fusion: proves nothing"
    # the collective reader, independent of the overlap reader, lists the same all-gather as asynchronous
    [gather] = shardlab.collectives_in_text(text).of_kind("all-gather")
    assert gather.is_async
    [window] = async_windows(text)
    assert window.collective == "all-gather" and window.overlapped
    # the product between is the one of a @ w: a fusion whose body holds the convolution
    ops = {op.name: op for op in scheduled_order(text)}
    assert [ops[p].kind for p in window.products] == ["product"]
    assert ops[window.start].position < ops[window.products[0]].position < ops[window.done].position


def _permute_loop(product_between: bool) -> str:
    """LOOP_HLO with its body's all-gather replaced by a collective-permute, the dot inside its window or after."""
    body = """%body (t: (bf16[4,8], bf16[8,8])) -> (bf16[4,8], bf16[8,8]) {
  %t = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) parameter(0)
  %a = bf16[4,8]{1,0} get-tuple-element(%t), index=0
  %b = bf16[8,8]{1,0} get-tuple-element(%t), index=1
  %collective-permute-start = (bf16[4,8]{1,0}, bf16[4,8]{1,0}, u32[], u32[]) collective-permute-start(%a), channel_id=5, source_target_pairs={{0,1},{1,0}}
  DOT_BEFORE
  %collective-permute-done = bf16[4,8]{1,0} collective-permute-done(%collective-permute-start)
  DOT_AFTER
  ROOT %r = (bf16[4,8]{1,0}, bf16[8,8]{1,0}) tuple(%dot.3, %collective-permute-done)
}
"""
    dot = "%dot.3 = bf16[4,8]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}"
    body = body.replace("DOT_BEFORE", dot if product_between else "").replace(
        "DOT_AFTER", "" if product_between else dot)
    start = LOOP_HLO.index("%body (")
    end = LOOP_HLO.index("%cond (")
    text = LOOP_HLO[:start] + body + "\n" + LOOP_HLO[end:]
    # the async all-gather's computation is no longer called: drop it, as XLA would
    start, end = text.index("%ag_computation"), text.index("%body (")
    return text[:start] + text[end:]


@pytest.mark.parametrize("product_between", [True, False])
def test_loop_bodies_and_windowed_loops(product_between):
    from shardlab.programs.schedule import loop_bodies, windowed_loops

    hlo = _permute_loop(product_between)
    xla_accepts(hlo)
    assert loop_bodies(hlo) == ["body"]
    # counted independently: the body's order as written in the text above
    order = [op.kind for op in scheduled_order(hlo, "body") if op.kind != "other"]
    assert order == (["start", "product", "done"] if product_between else ["start", "done", "product"])
    assert windowed_loops(hlo) == (["body"] if product_between else [])
    # an all-gather window in a loop is not a windowed einsum's collective-permute
    assert loop_bodies(LOOP_HLO) == ["body"] and windowed_loops(LOOP_HLO) == []
    assert loop_bodies(HLO) == [] and windowed_loops(HLO) == []
    with pytest.raises(ValueError, match="computation"):
        loop_bodies(hlo, "no_such")


def test_xla_gpu_side_thread_computations_and_fusion_starts():
    from shardlab.programs.schedule import windowed_loops

    # XLA:GPU closes a computation run on another stream with '}, execution_thread="parallel"' and launches
    # its product there with a fusion-start: the loop's body must still be found, the product still read.
    hlo = _permute_loop(True).replace(
        "%cond (", '%prod (p: bf16[4,8], q: bf16[8,8]) -> bf16[4,8] {\n'
        '  %p = bf16[4,8]{1,0} parameter(0)\n  %q = bf16[8,8]{1,0} parameter(1)\n'
        '  ROOT %dot.9 = bf16[4,8]{1,0} dot(%p, %q), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n'
        '}, execution_thread="parallel"\n\n%cond (')
    hlo = hlo.replace("%dot.3 = bf16[4,8]{1,0} dot(%a, %b), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                      "%dot.3 = ((bf16[4,8]{1,0}, bf16[8,8]{1,0}), bf16[4,8]{1,0}) fusion-start(%a, %b), "
                      "kind=kCustom, calls=%prod")
    kinds = [op.kind for op in scheduled_order(hlo, "body") if op.kind != "other"]
    assert kinds == ["start", "product", "done"]
    assert windowed_loops(hlo) == ["body"]
    # a fusion-start of work without a product is not a product
    plain = hlo.replace("ROOT %dot.9 = bf16[4,8]{1,0} dot(%p, %q), lhs_contracting_dims={1}, "
                        "rhs_contracting_dims={0}", "ROOT %dot.9 = bf16[4,8]{1,0} add(%p, %p)")
    assert [op.kind for op in scheduled_order(plain, "body") if op.kind != "other"] == ["start", "done"]
    assert windowed_loops(plain) == []
