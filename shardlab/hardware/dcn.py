"""The data-centre network (DCN) between TPU slices: bandwidth per chip, and a latency per step.

Chips of one slice talk over ICI; chips of different slices only through their hosts' network cards.
Google Cloud publishes each generation's cards per host and its DCN bandwidth per 256-chip pod; divided
among the chips they serve, that is the bandwidth one chip has to other slices, one way (a card's rate
is per direction). The figures and their sources:

* **TPU v5e**: 2 x 100 Gbps per host of 8 chips, 6.4 Tbps per pod: 25 Gbps, 3.125e9 bytes/s per chip
  (https://cloud.google.com/tpu/docs/v6e, the table comparing v5e and v6e).
* **TPU v6e**: 4 x 200 Gbps per host of 8 chips, 25.6 Tbps per pod: 100 Gbps, 1.25e10 bytes/s per
  chip (same page).
* **TPU v5p**: "DCN bandwidth is typically around 2.5e10 bytes / second per host", 4 chips per host:
  6.25e9 bytes/s per chip (How to Scale Your Model, "All About TPUs",
  https://jax-ml.github.io/scaling-book/tpus/; the book counts it as ingress plus egress, so one way
  may be half of it).

:data:`DCN_STEP_LATENCY` is an assumption of this model, not a published figure: an order of magnitude
for one step of a collective between hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardlab.hardware.chips import named_chip

__all__ = ["DcnLink", "DCN", "DCN_STEP_LATENCY", "dcn_link"]


#: Seconds one step of a collective across slices costs whatever the bytes (an assumption of this model).
DCN_STEP_LATENCY = 1e-5


@dataclass(frozen=True)
class DcnLink:
    """One chip's share of its host's data-centre network: ``bandwidth`` bytes/s one way, and ``source``."""

    chip: str
    bandwidth: float
    source: str


#: Per-chip DCN bandwidth of the TPU generations the book compiles for; the module docstring gives sources.
DCN = {link.chip: link for link in (
    DcnLink("TPU v5e", 3.125e9, "https://cloud.google.com/tpu/docs/v6e (v5e: 2 x 100 Gbps NICs per host "
                                "of 8 chips; 6.4 Tbps per pod of 256)"),
    DcnLink("TPU v6e", 1.25e10, "https://cloud.google.com/tpu/docs/v6e (4 x 200 Gbps NICs per host of 8 "
                                "chips; 25.6 Tbps per pod of 256)"),
    DcnLink("TPU v5p", 6.25e9, "https://jax-ml.github.io/scaling-book/tpus/ (about 2.5e10 bytes/s per "
                               "host of 4 chips)"),
)}


def dcn_link(chip) -> DcnLink:
    """The :class:`DcnLink` of ``chip`` (a :class:`~shardlab.Chip` or a name of ``shardlab.CHIPS``)."""
    chip = named_chip(chip)
    if chip.name not in DCN:
        raise ValueError(f"dcn_link: chip must be one of {sorted(DCN)} (the chips whose DCN bandwidth the "
                         f"book has a source for), got {chip.name!r}")
    return DCN[chip.name]
