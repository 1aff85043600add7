"""The decoder cost model and the published runs it is calibrated against.

References are independent of the code under test: counts worked by hand, the scaling book's worked
answers (https://jax-ml.github.io/scaling-book/training/ and /applied-training/), a brute-force search
over the FSDP x TP split, MaxText's published tables (each MFU against its own TFLOP/s column).
"""

import math

import numpy as np
import pytest

from shardlab.hardware.chips import CHIPS
from shardlab.models.decoder_cost import (REMAT_POLICIES, DecoderShape, decoder_params, fsdp_tp_critical_batch,
                                          layout_traffic, optimal_fsdp, torus_network, training_flops,
                                          training_step)
from shardlab.models.network import AxisNetwork
from shardlab.models.published_runs import INCOMPLETE_RUNS, MAXTEXT_SCALES, MEASURED_RUNS, calibration

# A small decoder, every term worked by hand below: d 8, 2 layers, 4 query heads of width 3 (not 8 / 4),
# 2 KV heads, a gated MLP of 16, vocabulary 10, sequences of 6.
TINY = DecoderShape(d_model=8, layers=2, heads=4, mlp=16, vocab=10, seq=6, kv_heads=2, head_dim=3)
# LLaMA 3-70B, as the scaling book tabulates it (applied-training, "LLaMA 3-70B").
LLAMA3_70B = DecoderShape(d_model=8192, layers=80, heads=64, mlp=28672, vocab=128256, seq=4096, kv_heads=8)


def test_parameters_of_a_small_decoder_by_hand():
    qkv = 8 * (4 + 2 * 2) * 3          # 192: q is 8 x 12, k and v 8 x 6 each
    out = 4 * 3 * 8                    # 96
    mlp = 3 * 8 * 16                   # 384: gated, three matrices
    assert decoder_params(TINY) == 2 * (qkv + out + mlp) + 2 * 10 * 8
    ungated = DecoderShape(8, 2, 4, 16, 10, 6, kv_heads=2, head_dim=3, gated=False, tied_embedding=True)
    assert decoder_params(ungated) == 2 * (qkv + out + 2 * 8 * 16) + 10 * 8
    plain = DecoderShape(8, 2, 4, 16, 10, 6)  # head width 8 / 4 = 2, as many KV heads as query heads
    assert decoder_params(plain) == 2 * (8 * 12 * 2 + 8 * 8 + 3 * 8 * 16) + 160


def test_llama3_70b_parameters_are_the_scaling_books():
    """applied-training: MLP 56.3e9, vocabulary 2.1e9, attention 12e9, about 70B in all."""
    mlp = 3 * 8192 * 28672 * 80
    assert mlp == pytest.approx(56.3e9, rel=2e-3) and mlp != pytest.approx(56.3e9, rel=1e-3)
    total = decoder_params(LLAMA3_70B)
    assert total == pytest.approx(56.3e9 + 2.1e9 + 12e9, rel=0.01)
    assert total != pytest.approx(56.3e9 + 2.1e9 + 12e9, rel=0.001)   # the book rounds each part
    assert total == pytest.approx(70e9, rel=0.01) and total != pytest.approx(70e9, rel=0.005)


def test_maxtexts_scaled_models_have_the_size_they_are_named_for():
    """global_parameter_scale s gives about s billion parameters (MaxText's own naming)."""
    for scale, shape in MAXTEXT_SCALES.items():
        assert shape.width == 128 and shape.gated
        assert decoder_params(shape) == pytest.approx(scale * 1e9, rel=0.03), scale
    # 16B: embedding 4,096, 64 heads of 128 (a head width other than 4,096 / 64), MLP 28,672, 32 layers
    assert MAXTEXT_SCALES[16] == DecoderShape(4096, 32, 64, 28672, 32000, 2048, head_dim=128)
    assert MAXTEXT_SCALES[128] == DecoderShape(8192, 64, 128, 57344, 32000, 2048, head_dim=128)


def test_training_flops_of_a_small_decoder_by_hand():
    tokens = 12                                      # two sequences of 6
    matmuls = 2 * tokens * 2 * (192 + 96 + 384)      # 2 per weight per token, both blocks
    unembed = 2 * tokens * 10 * 8
    attention = 4 * tokens * 6 * 4 * 3 * 2           # q.k and p.v, 2 layers, not yet halved
    f = training_flops(TINY, tokens, causal=False)
    assert f["model"] == 3 * (matmuls + unembed + attention) and f["recompute"] == 0 and f["ceiling"] == 1
    causal = training_flops(TINY, tokens)
    assert causal["model"] == 3 * (matmuls + unembed + attention // 2)
    assert causal["attention"] == 3 * attention // 2
    full = training_flops(TINY, tokens, remat="full")
    assert full["recompute"] == matmuls + attention // 2       # blocks again, not the unembedding
    assert full["ceiling"] == pytest.approx(causal["model"] / (causal["model"] + matmuls + attention // 2))
    minimal = training_flops(TINY, tokens, remat="minimal")
    assert minimal["recompute"] == attention // 2
    qkv = training_flops(TINY, tokens, remat="save_qkv_proj")
    assert qkv["recompute"] == 2 * tokens * 2 * (96 + 384) + attention // 2


def test_full_remat_caps_mfu_near_three_quarters():
    """Recomputing the forward adds a third of the model flops: the ceiling is just above 75 %."""
    ceiling = training_flops(MAXTEXT_SCALES[32], 2048, remat="full")["ceiling"]
    assert 0.75 < ceiling < 0.76


def test_layout_traffic_of_fsdp_tp_and_dp_by_hand():
    params = decoder_params(TINY)                    # 1,504
    t = layout_traffic(TINY, 6, fsdp=4, tp=2, data=3)
    by = {(x.axis, x.kind): x for x in t}
    shard = params / 2 * 3 / 4
    assert by["fsdp", "all-gather"].nbytes == pytest.approx(2 * shard * 2) and by["fsdp", "all-gather"].count == 4
    assert by["fsdp", "reduce-scatter"].nbytes == pytest.approx(shard * 2)
    per = 6 * 2 * 8 * 2 * (1 / 2)                    # a group's tokens x d_model x bytes x (Y - 1) / Y
    assert by["tp", "all-gather"].nbytes == pytest.approx(2 * 2 * per * 2)   # 2 blocks, 2 passes, 2 layers
    assert by["tp", "all-gather"].count == 8
    assert by["data", "all-reduce"].nbytes == pytest.approx(2 * params / 8 * 2 * 2 / 3)
    full = {(x.axis, x.kind): x for x in layout_traffic(TINY, 6, tp=2, remat="full")}
    assert full["tp", "reduce-scatter"].nbytes == pytest.approx(2 * 3 * per * 2)
    assert layout_traffic(TINY, 6) == []


def test_torus_network_gives_two_links_per_dimension_and_half_its_size_in_hops():
    net = torus_network({"fsdp": (16, 16), "tp": (4,), "one": (1,)})
    assert net == {"fsdp": AxisNetwork(4, 16), "tp": AxisNetwork(2, 2), "one": AxisNetwork(0, 0)}


def test_training_step_by_hand_on_one_chip():
    """One chip: no communication, time = max(flops / peak, HBM bytes / bandwidth)."""
    v5e = CHIPS["TPU v5e"]
    t = training_step(TINY, 6, v5e, {})
    flops = training_flops(TINY, 6)["model"]
    assert t["compute"] == pytest.approx(flops / v5e.peak_flops)
    hbm = 3 * decoder_params(TINY) * 2 + 28 * decoder_params(TINY)
    assert t["memory"] == pytest.approx(hbm / v5e.hbm_bandwidth)
    assert t["bound"] == "memory" and t["mfu"]["overlapped"] == pytest.approx(t["compute"] / t["memory"])


def test_the_fsdp_tp_threshold_is_the_scaling_books_453():
    """applied-training: communication-bound below 2 * 2550^2 / F = 453 tokens per chip for LLaMA 3-70B;
    X_opt = sqrt(2 B N / F) = 1618 for B = 4.19e6 tokens on 8,960 chips."""
    threshold = fsdp_tp_critical_batch("TPU v5p", 28672, fsdp_axes=2, tp_axes=1)
    assert threshold == pytest.approx(453, abs=1) and threshold != pytest.approx(453, abs=0.5)
    x = optimal_fsdp(4_190_000, 28672, 8960, fsdp_axes=2, tp_axes=1)
    assert x == pytest.approx(1618, abs=1) and x != pytest.approx(1618, abs=0.1)
    # training: F = 32,768 and M_X M_Y = 2 give "roughly B/N > 400"
    assert fsdp_tp_critical_batch("TPU v5p", 32768, fsdp_axes=2, tp_axes=1) == pytest.approx(400, rel=0.01)


def test_the_threshold_agrees_with_a_brute_force_search_over_the_split():
    """The scaling book's forward-pass times, minimised over X on a grid: compute-bound from 4 a^2/(M F)."""
    v5p, f, d, n = CHIPS["TPU v5p"], 28672, 8192, 8960
    w = 2 * v5p.link_bandwidth

    def compute_bound(tokens_per_chip):
        b = tokens_per_chip * n
        x = np.geomspace(1, n, 20001)
        comms = 4 * d * f / (n / x * w * 2) + 4 * b * d / (x * w * 1)
        return comms.min() <= 4 * b * d * f / (n * v5p.peak_flops)

    threshold = fsdp_tp_critical_batch(v5p, f, fsdp_axes=2, tp_axes=1)
    assert compute_bound(threshold * 1.01) and not compute_bound(threshold * 0.99)


def test_published_mfus_agree_with_their_tflops_columns():
    """MaxText's tables give TFLOP/s per chip beside each MFU: MFU = TFLOP/s / peak, to the rounding."""
    tflops = {("16B", "v5e-256"): 120, ("32B", "v5e-256"): 132, ("64B", "v5e-256"): 118,
              ("128B", "v5e-256"): 110, ("32B", "v5p-128"): 328, ("64B", "v5p-128"): 323,
              ("128B", "v5p-256"): 315, ("128B", "v5p-512"): 316, ("256B", "v5p-1024"): 308,
              ("512B", "v5p-1024"): 294, ("1024B", "v5p-2048"): 254, ("1024B", "v5p-4096"): 297}
    assert len(MEASURED_RUNS) == len(tflops)
    for run in MEASURED_RUNS:
        peak = CHIPS[run.chip].peak_flops / 1e12
        assert run.measured_mfu == pytest.approx(tflops[run.name, run.slice] / peak, abs=0.003), run
        assert run.chips * (2 if run.chip == "TPU v5p" else 1) == int(run.slice.split("-")[1])
        assert math.prod(s for sizes in run.spans.values() for s in sizes) == run.chips
        assert run.remat in REMAT_POLICIES
        assert run.source.startswith("https://github.com/AI-Hypercomputer/maxtext/")
        assert run.config.startswith("https://github.com/AI-Hypercomputer/maxtext/")


def test_every_measured_run_is_below_its_modelled_bound():
    """The model is a bound: every measured MFU lies below it, by a factor the calibration page shows."""
    ratios = [calibration(run)["ratio"] for run in MEASURED_RUNS]
    assert all(0.5 < r < 1 for r in ratios)
    for run in MEASURED_RUNS:
        c = calibration(run)
        assert c["bound"] <= c["ceiling"] + 1e-9 and c["serial"] <= c["bound"]
    for what, measured, source, missing in INCOMPLETE_RUNS:
        assert source.startswith("https://") and missing and measured


def test_the_helpers_name_the_argument_they_refuse():
    with pytest.raises(ValueError, match="kv_heads"):
        DecoderShape(8, 2, 4, 16, 10, 6, kv_heads=3)
    with pytest.raises(ValueError, match="head_dim"):
        DecoderShape(8, 2, 4, 16, 10, 6, head_dim=0)
    with pytest.raises(ValueError, match="remat"):
        training_flops(TINY, 6, remat="some")
    with pytest.raises(ValueError, match="tokens"):
        training_flops(TINY, 0)
    with pytest.raises(ValueError, match="tp"):
        layout_traffic(TINY, 6, tp=0)
    with pytest.raises(ValueError, match="spans"):
        torus_network({"fsdp": 16})
    with pytest.raises(ValueError, match="run"):
        calibration("16B")
    with pytest.raises(ValueError, match="mlp"):
        fsdp_tp_critical_batch("TPU v5p", 0, fsdp_axes=2, tp_axes=1)
