"""shardlab.parallelism.attention: the ring's blocks, the causal work, ring attention's memory and sends modelled."""

import numpy as np
import pytest

from shardlab.parallelism.attention import (block_kinds, causal_work, kv_block_at, longest_sequence,
                                            ring_attention_comm, ring_attention_memory, token_positions)
from shardlab.hardware.chips import CHIPS


def test_kv_block_travels_to_the_next_device():
    assert [kv_block_at(d, 0, 4) for d in range(4)] == [0, 1, 2, 3]
    assert [kv_block_at(d, 1, 4) for d in range(4)] == [3, 0, 1, 2]
    # every device sees every block once over the ring
    assert all(sorted(kv_block_at(d, s, 5) for s in range(5)) == list(range(5)) for d in range(5))


@pytest.mark.parametrize("bad", [dict(device=4, step=0, ring=4), dict(device=0, step=-1, ring=4),
                                 dict(device=0, step=0, ring=0)])
def test_kv_block_at_names_the_bad_argument(bad):
    with pytest.raises(ValueError, match="device|step|ring"):
        kv_block_at(**bad)


def test_token_positions_cover_the_sequence_once():
    for order in ("contiguous", "zigzag"):
        pos = token_positions(4, 6, order)
        assert pos.shape == (4, 6) and sorted(pos.ravel()) == list(range(24))
    assert list(token_positions(2, 4, "zigzag")[0]) == [0, 1, 6, 7]
    with pytest.raises(ValueError, match="order"):
        token_positions(2, 4, "striped-ish")
    with pytest.raises(ValueError, match="even"):
        token_positions(2, 3, "zigzag")


def test_causal_work_contiguous_and_zigzag():
    work = causal_work(4, 2, "contiguous")
    assert work.shape == (4, 4)
    np.testing.assert_allclose(work[0], 0.75)                     # the diagonal of 2 x 2 keeps 3 of 4
    np.testing.assert_allclose(work.sum(0), [0.75, 1.75, 2.75, 3.75])
    kinds = block_kinds(4)
    assert (work[kinds == "masked"] == 0).all() and (work[kinds == "visible"] == 1).all()
    assert (kinds == "masked").sum() == (kinds == "visible").sum() == 4 * 3 // 2
    zig = causal_work(4, 2, "zigzag").sum(0)
    np.testing.assert_allclose(zig, zig[0])                       # balanced
    np.testing.assert_allclose(zig.sum(), work.sum())             # the same total


def test_memory_model_counts_each_part():
    mem = ring_attention_memory(1024, 4, heads=2, head_dim=8, dtype_bytes=2)
    c, e = 256, 16
    assert mem["q, k, v, out"] == 4 * c * e * 2
    assert mem["k, v arriving"] == 2 * c * e * 2
    assert mem["scores"] == 2 * c * c * 4
    assert mem["softmax state"] == c * 2 * (2 + 8) * 4
    assert mem["total"] == sum(v for k, v in mem.items() if k != "total")
    assert ring_attention_memory(1024, 1, heads=2, head_dim=8)["k, v arriving"] == 0
    assert ring_attention_memory(1024, 4, heads=2, head_dim=8, key_tile=64)["scores"] == 2 * c * 64 * 4
    with pytest.raises(ValueError, match="seq_len"):
        ring_attention_memory(1000, 3, heads=2, head_dim=8)
    with pytest.raises(ValueError, match="heads"):
        ring_attention_memory(1024, 4, heads=0, head_dim=8)


def test_comm_model_and_the_crossing():
    chip = CHIPS["TPU v5e"]
    comm = ring_attention_comm(8 * 4096, 8, heads=4, head_dim=32, chip=chip)
    assert comm["bytes_per_step"] == 2 * 4096 * 128 * 2 and comm["sends"] == 7
    assert comm["bytes_total"] == 7 * comm["bytes_per_step"]
    assert comm["flops_per_step"] == 4 * 4096 ** 2 * 128
    assert comm["tokens_to_hide"] == pytest.approx(chip.peak_flops / chip.link_bandwidth)
    hide = int(np.ceil(comm["tokens_to_hide"]))
    assert ring_attention_comm(8 * hide, 8, heads=4, head_dim=32, chip=chip)["time"]["bound"] == "compute"
    assert ring_attention_comm(8 * (hide - 2), 8, heads=4, head_dim=32, chip=chip)["time"]["bound"] == "communication"
    with pytest.raises(ValueError, match="chip"):
        ring_attention_comm(64, 8, heads=1, head_dim=1, chip="TPU v9")


def test_longest_sequence_is_the_edge_of_fitting():
    hbm = 16e9
    longest = longest_sequence(8, hbm, heads=32, head_dim=128)
    assert longest % (8 * 1024) == 0
    assert ring_attention_memory(longest, 8, heads=32, head_dim=128)["total"] <= hbm
    assert ring_attention_memory(longest + 8 * 1024, 8, heads=32, head_dim=128)["total"] > hbm
    assert longest_sequence(8, 1.0, heads=32, head_dim=128) == 0
    assert longest_sequence(16, hbm, heads=32, head_dim=128) > longest
    with pytest.raises(ValueError, match="hbm_bytes"):
        longest_sequence(8, -1, heads=1, head_dim=1)


def test_query_tiles_shrink_the_scores_to_one_tile():
    c, heads = 256, 2
    both = ring_attention_memory(1024, 4, heads=heads, head_dim=8, key_tile=64, query_tile=32)
    assert both["scores"] == heads * 32 * 64 * 4                      # hand count: one 32 x 64 tile per head
    keys_only = ring_attention_memory(1024, 4, heads=heads, head_dim=8, key_tile=64)
    assert keys_only["scores"] == heads * c * 64 * 4
    # the rest is unchanged, and a tile larger than the block is the block
    assert both["total"] - both["scores"] == keys_only["total"] - keys_only["scores"]
    assert ring_attention_memory(1024, 4, heads=heads, head_dim=8, key_tile=64,
                                 query_tile=10**6)["scores"] == keys_only["scores"]
    with pytest.raises(ValueError, match="query_tile"):
        ring_attention_memory(1024, 4, heads=heads, head_dim=8, query_tile=0)
    # tiling queries too lets a longer sequence fit, and the edge still holds
    hbm = 16e9
    longest = longest_sequence(1, hbm, heads=32, head_dim=128, key_tile=512, query_tile=512)
    assert longest > 2 * longest_sequence(1, hbm, heads=32, head_dim=128, key_tile=512)
    fit = dict(heads=32, head_dim=128, key_tile=512, query_tile=512)
    assert ring_attention_memory(longest, 1, **fit)["total"] <= hbm
    assert ring_attention_memory(longest + 1024, 1, **fit)["total"] > hbm


def test_striped_order_and_its_causal_work_counted_by_hand():
    pos = token_positions(4, 3, "striped")
    assert pos.tolist() == [[0, 4, 8], [1, 5, 9], [2, 6, 10], [3, 7, 11]]
    work = causal_work(4, 3, "striped")
    # a block that started on a device at or before d keeps c(c+1)/2 of c*c pairs; one after d, c(c-1)/2
    for s in range(4):
        for d in range(4):
            j = kv_block_at(d, s, 4)
            assert work[s, d] == pytest.approx((6 if j <= d else 3) / 9, rel=1e-12)
    # the busiest and the idlest device differ by one row of a block at any step, and every device
    # keeps (nearly) half of each block: no block wholly masked
    assert (work > 0).all()
    assert np.ptp(work, axis=1).max() == pytest.approx(3 / 9, rel=1e-12)
    np.testing.assert_allclose(work.sum(), causal_work(4, 3, "contiguous").sum(), rtol=1e-12)


def test_score_blocks_multiply_the_scores_only_and_shorten_the_limit():
    one = ring_attention_memory(1024, 4, heads=2, head_dim=8)
    four = ring_attention_memory(1024, 4, heads=2, head_dim=8, score_blocks=4)
    c = 256
    assert four["scores"] == 4 * 2 * c * c * 4                        # hand count: four (c, c) blocks per head
    assert four["total"] - four["scores"] == one["total"] - one["scores"]
    hbm = 16e9
    fit = dict(heads=32, head_dim=128)
    longest = longest_sequence(8, hbm, score_blocks=4, **fit)
    assert ring_attention_memory(longest, 8, score_blocks=4, **fit)["total"] <= hbm
    assert ring_attention_memory(longest + 8 * 1024, 8, score_blocks=4, **fit)["total"] > hbm
    assert longest < longest_sequence(8, hbm, **fit)
    with pytest.raises(ValueError, match="score_blocks"):
        ring_attention_memory(1024, 4, heads=2, head_dim=8, score_blocks=0)


def test_kv_heads_divide_the_bytes_sent_and_the_crossing():
    chip = CHIPS["TPU v5e"]
    full = ring_attention_comm(8 * 4096, 8, heads=8, head_dim=32, chip=chip)
    gqa = ring_attention_comm(8 * 4096, 8, heads=8, head_dim=32, chip=chip, kv_heads=2)
    assert gqa["bytes_per_step"] == 2 * 4096 * 2 * 32 * 2            # hand count: K and V of 2 heads, bf16
    assert gqa["bytes_per_step"] * 4 == full["bytes_per_step"]
    assert gqa["flops_per_step"] == full["flops_per_step"]
    assert gqa["tokens_to_hide"] == pytest.approx(full["tokens_to_hide"] / 4, rel=1e-12)
    with pytest.raises(ValueError, match="kv_heads"):
        ring_attention_comm(64, 8, heads=8, head_dim=1, kv_heads=3)
