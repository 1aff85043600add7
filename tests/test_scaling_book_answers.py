"""The time model against the scaling book's worked answers, each with its source and both sides of its tolerance.

How to Scale Your Model (https://jax-ml.github.io/scaling-book/, files at commit 0819a7d of
github.com/jax-ml/scaling-book). Where the model and the book differ, the difference is a choice the book
states: the ring's (n - 1) / n, which the book drops; latency added to the bandwidth time, where the book
takes the larger; a decode step's memory and compute overlapped, where the book adds them.
"""

import pytest

from shardlab.hardware.chips import CHIPS
from shardlab.models.network import AxisNetwork, Traffic
from shardlab.models.time_model import modelled_time
from shardlab.parallelism.serving import serving_time

V5E, V4P = CHIPS["TPU v5e"], CHIPS["TPU v4p"]


def _collective(nbytes, chip, links, hops, kind="all-gather"):
    return modelled_time(0, [Traffic(nbytes, "a", 1, kind)], chip, {"a": AxisNetwork(links, hops)})["comm"]


def test_pop_quiz_2_all_gather_on_a_v5e_axis_without_wraparound():
    """sharding, Pop Quiz 2: AllGather_Y of bf16[2048, 8192] over Y = 4 (no wraparound on a v5e axis
    below 16): 3 x 8.4e6 / 4.5e10 = 560 us; a profile measured 680 us."""
    shard = 2048 // 4 * 8192 * 2
    t = _collective(3 * shard, V5E, 1, 3)
    assert t == pytest.approx(560e-6, rel=0.02) and t != pytest.approx(560e-6, rel=0.002)
    assert t < 680e-6                                     # the measurement is slower than the model
    assert 560e-6 / 680e-6 == pytest.approx(0.82, abs=0.01)


def test_pop_quiz_2_small_all_gather_is_latency_bound():
    """Same, E = F = 256: 32 kB per shard, "roughly 3 us" of latency (3 hops); measured "closer to 8 us".
    The model adds the bandwidth time to the latency: between the two."""
    t = _collective(3 * 64 * 256 * 2, V5E, 1, 3)
    assert 3e-6 < t < 8e-6
    assert t == pytest.approx(3e-6 + 3 * 32768 / 4.5e10, rel=1e-6)


def test_question_2_all_gathers_on_a_v4p_cube():
    """sharding, Question 2: on a 4x4x4 v4p (wraparound, 9e10 bytes/s both ways per axis),
    AllGather_X([B_X, D_Y]) with B = 1024, D = 4096: 2BD / (9e10 Y) = 23 us; AllGather_XY: 46 us."""
    b, d = 1024, 4096
    one_axis = _collective(2 * b * d / 4 * 3 / 4, V4P, 2, 2)   # the ring's 3/4 of the gathered array
    assert one_axis == pytest.approx(23e-6, rel=0.2) and one_axis != pytest.approx(23e-6, rel=0.1)
    assert one_axis - 2e-6 == pytest.approx(23e-6 * 3 / 4, rel=0.02)  # the book without (n-1)/n and latency
    two_axes = _collective(2 * b * d * 15 / 16, V4P, 4, 4)
    assert two_axes == pytest.approx(46e-6, rel=0.05) and two_axes != pytest.approx(46e-6, rel=0.01)


def test_question_3_tiny_all_gather_is_two_hops():
    """sharding, Question 3: AllGather_X of bf16[128] on a 4x4x4 v4p: latency-bound, 2 hops, about 2 us."""
    t = _collective(3 / 4 * 256, V4P, 2, 2)
    assert t == pytest.approx(2e-6, rel=0.01) and t != pytest.approx(2e-6, rel=1e-4)


def test_v5e_roofline_intensity():
    """roofline: the v5e is compute-bound above 1.97e14 / 8.2e11 = 240 flops per HBM byte."""
    intensity = V5E.peak_flops / V5E.hbm_bandwidth      # the book lists 8.1e11 in its table, 8.2e11 here
    assert intensity == pytest.approx(240, rel=0.02) and intensity != pytest.approx(240, rel=0.005)


def test_decode_step_of_a_30b_model_on_16_v5e_chips():
    """inference, worked answer: int8 30B parameters, KV caches of 819 MB, 16 v5e chips. At batch 4 the
    step is memory-bound, (4 x 819e6 + 30e9) / (16 x 8.1e11) = 2.5 ms; at 256, 16.2 ms of cache reads plus
    4.9 ms of MLP compute: 21 ms, where the model overlaps them."""
    def step(batch):
        hbm = (batch * 819e6 + 30e9) / 16
        return serving_time(2 * batch * 30e9 / 16, hbm, V5E)["time"]

    assert step(4) == pytest.approx(2.5e-3, rel=0.03) and step(4) != pytest.approx(2.5e-3, rel=0.01)
    assert step(256) == pytest.approx(21e-3, rel=0.15) and step(256) != pytest.approx(21e-3, rel=0.1)
    # the model: the step reads cache and weights (18.5 ms) while it computes (4.9 ms), not after
    assert step(256) == pytest.approx((256 * 819e6 + 30e9) / 16 / 8.1e11, rel=1e-6)
