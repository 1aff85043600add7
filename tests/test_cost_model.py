"""The time model of shardlab.cost_model: published chip figures, and flops and bytes turned into time."""

import pytest

from shardlab.cost_model import CHIPS, Chip, step_time


def test_the_published_threshold_of_the_scaling_book_is_reproduced():
    # Its training chapter: data parallelism on TPU v5p is compute-bound above
    # C / W_ici = 4.59e14 / 1.8e11 = 2550 flops per byte (both directions of a link).
    assert CHIPS["TPU v5p"].critical_intensity(links=2) == pytest.approx(2550, rel=1e-3)
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
