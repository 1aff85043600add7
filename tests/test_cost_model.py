"""The time model of shardlab.layout.ring_bytes: published chip figures, and flops and bytes turned into time."""

import math

import pytest

from shardlab.hardware.chips import CHIPS, CHIP_SOURCE, Chip
from shardlab.models.time_model import step_time
from shardlab.parallelism.strategies import MLPSizes, compute_bound_from

# The published figures, written here as the sources print them (not computed from shardlab).
#
# How to Scale Your Model, "All About TPUs", section "TPU Specs" (https://jax-ml.github.io/scaling-book/tpus/;
# tpus.md at commit 0819a7d of github.com/jax-ml/scaling-book): per chip, HBM capacity, HBM BW (bytes/s),
# FLOPs/s (bf16), and ICI BW per link one-way and bidi (bytes/s); and "ICI connects the 4 nearest neighbors
# (2D torus)" for v5e and v6e, "the nearest 6 neighbors (3D torus)" for v4 and v5p.
SCALING_BOOK = {  # name: (HBM bytes, HBM bytes/s, bf16 FLOP/s, ICI one-way, ICI bidi, neighbours)
    "TPU v4p": (32e9, 1.2e12, 2.75e14, 4.5e10, 9e10, 6),
    "TPU v5p": (96e9, 2.8e12, 4.59e14, 9e10, 1.8e11, 6),
    "TPU v5e": (16e9, 8.1e11, 1.97e14, 4.5e10, 9e10, 4),
    "TPU v6e": (32e9, 1.6e12, 9.20e14, 9e10, 1.8e11, 4),
}

# Google Cloud's TPU pages (https://cloud.google.com/tpu/docs/v4, /v5e, /v5p, /v6e), per chip: bf16 peak,
# HBM capacity and bandwidth (GB, GB/s), and the interconnect topology. v4's page gives its HBM as 32 GiB,
# the scaling book 32 GB: that one figure is compared with the book only.
GOOGLE_CLOUD = {  # name: (bf16 FLOP/s, HBM bytes or None, HBM bytes/s, torus dimensions)
    "TPU v4p": (275e12, None, 1200e9, 3),
    "TPU v5p": (459e12, 95e9, 2765e9, 3),
    "TPU v5e": (197e12, 16e9, 819e9, 2),
    "TPU v6e": (918e12, 32e9, 1638e9, 2),
}
# The two publications round differently (v6e's HBM bandwidth: 1.6e12 against 1,638 GB/s, 2.3 %).
CLOUD_ROUNDING = 0.025


def test_chip_figures_are_the_published_table():
    assert "scaling-book/tpus" in CHIP_SOURCE
    assert set(CHIPS) == set(SCALING_BOOK)
    for name, (hbm, hbm_bw, flops, one_way, bidi, neighbours) in SCALING_BOOK.items():
        chip = CHIPS[name]
        assert (chip.name, chip.hbm_bytes, chip.hbm_bandwidth, chip.peak_flops, chip.link_bandwidth) == \
            (name, hbm, hbm_bw, flops, one_way), name
        assert 2 * chip.link_bandwidth == bidi and chip.links == neighbours, name


def _within(value, reference, rel=CLOUD_ROUNDING):
    return abs(value - reference) <= rel * reference


def test_chip_figures_agree_with_google_cloud_within_rounding():
    fields = ("peak_flops", "hbm_bytes", "hbm_bandwidth")
    for name, (flops, hbm, hbm_bw, dims) in GOOGLE_CLOUD.items():
        chip = CHIPS[name]
        assert chip.torus_dims == dims, name
        for field, ref in zip(fields, (flops, hbm, hbm_bw)):
            if ref is not None:
                assert _within(getattr(chip, field), ref), (name, field)
    # The other side of the tolerance: too narrow to take another chip's figure, or GiB for GB.
    for name, row in GOOGLE_CLOUD.items():
        for field, ref in zip(fields, row):
            if ref is None:
                continue
            others = {getattr(chip, field) for chip in CHIPS.values()} - {getattr(CHIPS[name], field)}
            assert not any(_within(value, ref) for value in others), (name, field)
            assert not _within(getattr(CHIPS[name], field) * 2 ** 30 / 1e9, ref), (name, field)


def test_the_published_threshold_of_the_scaling_book_is_reproduced():
    # Its training chapter: data parallelism on TPU v5p is compute-bound above
    # C / W_ici = 4.59e14 / 1.8e11 = 2550 flops per byte (both directions of a link).
    assert CHIPS["TPU v5p"].critical_intensity(links=2) == pytest.approx(2550, rel=1e-12)
    assert CHIPS["TPU v5e"].critical_intensity(links=1) == pytest.approx(1.97e14 / 4.5e10)


def test_links_follow_the_torus():
    assert {name: chip.links for name, chip in CHIPS.items()} == {"TPU v4p": 6, "TPU v5p": 6, "TPU v5e": 4,
                                                                 "TPU v6e": 4}


def test_step_time_is_compute_or_communication_bound():
    chip = CHIPS["TPU v5e"]
    balanced_bytes = 1e9
    flops = chip.critical_intensity() * balanced_bytes
    at_balance = step_time(flops, balanced_bytes, chip)
    assert at_balance["compute"] == pytest.approx(at_balance["comm"])
    assert at_balance["serial"] == pytest.approx(2 * at_balance["overlapped"])
    assert step_time(2 * flops, balanced_bytes, chip)["bound"] == "compute"
    assert step_time(flops, 2 * balanced_bytes, "TPU v5e")["bound"] == "communication"
    # Two links halve the communication time and nothing else.
    one, two = step_time(flops, balanced_bytes, chip), step_time(flops, balanced_bytes, chip, links=2)
    assert two["comm"] == pytest.approx(one["comm"] / 2) and two["compute"] == one["compute"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(flops=-1, nbytes=0, chip="TPU v5e"), "flops must be a non-negative number"),
    (dict(flops=1, nbytes="a", chip="TPU v5e"), "nbytes must be a non-negative number"),
    (dict(flops=1, nbytes=1, chip="TPU v9"), "chip must be a Chip or one of"),
    (dict(flops=1, nbytes=1, chip="TPU v5e", links=5), "links must be an integer from 1 to 4"),
    (dict(flops=1, nbytes=1, chip="TPU v5p", links=0), "links must be an integer from 1 to 6"),
])
def test_bad_input_is_refused_by_name(kwargs, message):
    with pytest.raises(ValueError, match=message):
        step_time(**kwargs)


def test_a_chip_of_ones_own_can_be_modelled():
    mine = Chip("mine", peak_flops=1e12, hbm_bytes=1e9, hbm_bandwidth=1e11, link_bandwidth=1e9, torus_dims=1)
    assert step_time(1e12, 2e9, mine, links=2) == {"compute": 1.0, "comm": 1.0, "overlapped": 1.0, "serial": 2.0,
                                                  "bound": "compute"}


# --- The scaling book's thresholds (training chapter, https://jax-ml.github.io/scaling-book/training/), as the
# training chapter's table states them: its C / W_ici uses both directions of a link; its per-layer counts assume
# many layers (every block's input gradient is computed) and large groups ((n-1)/n ~ 1).

DEEP = MLPSizes(batch=256, d_model=8192, d_hidden=32768, layers=64, itemsize=2)
N = 256


@pytest.mark.parametrize("chip, alpha", [("TPU v5e", 1.97e14 / 9e10), ("TPU v5p", 2550), ("TPU v6e", 9.2e14 / 1.8e11)])
def test_critical_intensity_both_directions_of_a_link(chip, alpha):
    assert CHIPS[chip].critical_intensity(links=2) == pytest.approx(alpha, rel=1e-12)


@pytest.mark.parametrize("chip", ["TPU v5e", "TPU v5p", "TPU v6e"])
def test_data_parallel_thresholds_are_the_critical_intensity(chip):
    c = CHIPS[chip]
    alpha = c.critical_intensity(links=2)
    # DP: the backward pass's flops against the gradient all-reduce; FSDP: the forward pass's against the
    # weight gathers, (n-1)/n of the all-reduce's bytes.
    # Exact up to float rounding (rel 1e-9); FSDP's (n-1)/n is 0.4 % below DP, far outside that.
    assert compute_bound_from("dp", DEEP, c, data=N) / N == pytest.approx(alpha, rel=1e-9)
    assert compute_bound_from("fsdp", DEEP, c, data=N) / N == pytest.approx(alpha * (N - 1) / N, rel=1e-9)
    assert compute_bound_from("fsdp", DEEP, c, data=N) / N != pytest.approx(alpha, rel=1e-9)
    # Over every torus axis: M times the links, 1/M of the batch.
    every = compute_bound_from("dp", DEEP, c, data=N, data_links=2 * c.torus_dims) / N
    assert every == pytest.approx(alpha / c.torus_dims, rel=1e-9)


def test_the_printed_v5p_numbers():
    v5p = CHIPS["TPU v5p"]
    # "batch size per chip must be at least 2,550"; "BS=850 per TPU" over the three axes.
    assert compute_bound_from("dp", DEEP, v5p, data=N) / N == pytest.approx(2550, rel=1e-9)
    assert compute_bound_from("dp", DEEP, v5p, data=N, data_links=6) / N == pytest.approx(850, rel=1e-9)
    # "The required F for 8 way model sharding is 20k": the book's F > Y * C / W_ici = 20,400. The ring sends
    # (n-1)/n of each activation, so this model's smallest width for 8-way is 7/8 of that.
    h = compute_bound_from("tp", DEEP, v5p, vary="d_hidden", model=8)
    assert h == pytest.approx(8 * 2550 * 7 / 8, rel=1e-6)
    # Mixed: the book's B/N > alpha / (M_X * Y) at a fixed Y (its optimum Y = F/alpha gives alpha^2 / (M_X M_Y F),
    # about 99 for F = 32,768): with Y = 8 and the data axis over two torus axes, 2550 / 16.
    mix = compute_bound_from("dp+tp", DEEP, v5p, data=N // 8, model=8, data_links=4) / N
    # This model's exact count adds two factors the book rounds away: the ring's (n-1)/n over the 32 devices
    # of "data", and the first block's input gradient that nothing needs (backward flops 4L-1 of 4L).
    assert mix == pytest.approx(2550 / 16 * (31 / 32) * (4 * 64) / (4 * 64 - 1), rel=1e-9)
    assert mix == pytest.approx(2550 / 16, rel=0.03) and mix != pytest.approx(2550 / 16, rel=0.02)
    assert 2550 ** 2 / (2 * 32768) == pytest.approx(99.2, abs=0.1)


def test_tensor_parallelism_is_never_compute_bound_when_its_shard_is_too_narrow():
    v6e = CHIPS["TPU v6e"]   # h / 8 = 4,096 is below its 5,111 flops per byte
    assert compute_bound_from("tp", DEEP, v6e, model=8) == math.inf
    assert compute_bound_from("dp+tp", DEEP, v6e, data=N // 8, model=8) == math.inf


# GPUs: the scaling book's GPU tables (bf16 dense peak, HBM, HBM bandwidth; NVLink per GPU one way;
# 400 GB/s per node of 8 between nodes), typed from https://jax-ml.github.io/scaling-book/gpus/.
SCALING_BOOK_GPUS = {"H100": (9.9e14, 80e9, 3.4e12, 450e9, 400e9), "H200": (9.9e14, 141e9, 4.8e12, 450e9, 400e9),
                     "B200": (2.3e15, 192e9, 8.0e12, 900e9, 400e9)}


# NVIDIA's DGX B200 guide: 8 B200 GPUs with 1,440 GB of GPU memory in all, 180 GB each (the scaling book
# lists 192 GB, the chip's full HBM): https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html
VENDOR_HBM = {"B200": 1440e9 / 8}


def test_b200_memory_is_what_nvidia_lists_for_its_systems():
    from shardlab.hardware.chips import GPU_CHIPS

    assert GPU_CHIPS["B200"].hbm_bytes == pytest.approx(180e9, rel=1e-3)
    assert GPU_CHIPS["B200"].hbm_bytes != pytest.approx(192e9, rel=0.05)


def test_gpu_figures_are_the_published_ones():
    from shardlab.hardware.chips import GPU_CHIPS

    assert set(GPU_CHIPS) == set(SCALING_BOOK_GPUS)
    for name, (peak, hbm, hbm_bw, nvlink, node_egress) in SCALING_BOOK_GPUS.items():
        chip = GPU_CHIPS[name]
        assert chip.peak_flops == pytest.approx(peak, rel=0.03), name       # the table rounds to 2 digits
        assert chip.hbm_bytes == VENDOR_HBM.get(name, hbm) and chip.link_bandwidth == nvlink, name
        assert chip.hbm_bandwidth == pytest.approx(hbm_bw, rel=0.02), name
        assert chip.network_bandwidth * chip.node_size == node_egress, name
        assert chip.links == 1 and chip.torus_dims == 0, name


def test_gpu_figures_agree_with_xlas_target_configs():
    from shardlab.hardware.chips import GPU_CHIPS
    from shardlab.hardware.gpus import GPU_TARGETS

    for t in GPU_TARGETS.values():
        # XLA lists memory in bytes as the driver reports it (nominal "GB" are GiB for some models, GB
        # for others) and HBM bandwidth as measured or derated: within 8 % of the published figures.
        assert t.spec.memory_bytes == pytest.approx(t.chip.hbm_bytes, rel=0.08), t.name
        assert t.spec.memory_bandwidth == pytest.approx(t.chip.hbm_bandwidth, rel=0.05), t.name
        assert t.chip is GPU_CHIPS[t.chip.name]


def test_the_time_model_takes_a_gpu_by_name():
    from shardlab.hardware.chips import GPU_CHIPS

    assert step_time(9.9e14, 0, "H100")["compute"] == pytest.approx(1.0)
    assert step_time(0, 450e9, "H100")["comm"] == pytest.approx(1.0)   # NVLink, one second per 450 GB
    assert GPU_CHIPS["H100"].critical_intensity(1) == pytest.approx(2200)   # the book's 990e12 / 450e9
    with pytest.raises(ValueError, match="links must be an integer from 1 to 1"):
        step_time(0, 1, "H100", links=2)
