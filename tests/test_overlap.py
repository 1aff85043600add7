"""shardlab.overlap: the scheduled order of a compiled program, its asynchronous windows, the ring-matmul model."""

import pytest

from shardlab.cost_model import CHIPS
from shardlab.overlap import async_windows, ring_matmul_time, scheduled_order

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


def test_ring_matmul_time_model():
    chip = CHIPS["TPU v5e"]
    t = ring_matmul_time(64, 1024, 8 * 4096, 8, chip)
    assert t["flops_per_step"] == 2 * 8 * 1024 * 4096
    assert t["bytes_per_step"] == 8 * 1024 * 2
    step = t["step"]
    assert step["compute"] == pytest.approx(t["flops_per_step"] / chip.peak_flops)
    assert step["comm"] == pytest.approx(t["bytes_per_step"] / chip.link_bandwidth)
    assert t["serial"] == pytest.approx(8 * step["compute"] + 7 * step["comm"])
    assert t["overlapped"] == pytest.approx(step["compute"] + 7 * max(step["compute"], step["comm"]))
    assert t["saved"] == pytest.approx(t["serial"] - t["overlapped"]) and t["saved"] > 0
    # the break-even width per device is dtype_bytes * peak / (2 * links * bandwidth), whatever rows and contract
    width = chip.peak_flops / chip.link_bandwidth            # 2 bytes / 2 flops per multiply-add
    assert ring_matmul_time(8, 512, 8 * int(width * 1.01), 8, chip)["bound"] == "compute"
    assert ring_matmul_time(8, 512, 8 * int(width * 0.99), 8, chip)["bound"] == "communication"
    both = ring_matmul_time(8, 512, 8 * int(width * 0.6), 8, chip, bidirectional=True)
    assert both["bound"] == "compute"
    assert both["step"]["comm"] == pytest.approx(t["step"]["comm"] / 2 * both["bytes_per_step"] / t["bytes_per_step"])


@pytest.mark.parametrize("kwargs, word", [({"rows": 0}, "rows"), ({"cols": 12}, "cols"), ({"devices": 2.0}, "devices"),
                                          ({"dtype_bytes": 0}, "dtype_bytes"), ({"bidirectional": "yes"},
                                                                                 "bidirectional"),
                                          ({"chip": "TPU v99"}, "chip")])
def test_ring_matmul_time_refuses_bad_arguments(kwargs, word):
    args = {"rows": 64, "contract": 128, "cols": 256, "devices": 8, "chip": "TPU v5e"}
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
