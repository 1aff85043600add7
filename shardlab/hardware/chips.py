"""Chips and their published figures: TPU chips, NVIDIA GPUs, and which device kind is which chip.

``CHIPS`` holds published figures of TPU chips (bfloat16 peak, HBM, ICI bandwidth per link) and
``GPU_CHIPS`` the same for NVIDIA GPUs (NVLink within a node, a network between nodes), each with its
source. Published figures, not measured by this package; :mod:`shardlab.models.time_model` turns them
into modelled time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardlab.hardware.registry import lookup

__all__ = ["Chip", "CHIPS", "CHIP_SOURCE", "GpuChip", "GPU_CHIPS", "GPU_CHIP_SOURCE", "DEVICE_KINDS",
           "GPU_DEVICE_KINDS", "named_chip", "check_links"]


# --------------------------------------------------------------------------
# From bytes and flops to time: published chip figures.
# --------------------------------------------------------------------------


#: Where the chip figures come from (the TPU chapter of the scaling book, "TPU Specs").
CHIP_SOURCE = "How to Scale Your Model, 'All About TPUs': https://jax-ml.github.io/scaling-book/tpus/"


@dataclass(frozen=True)
class Chip:
    """One accelerator chip's published figures, the inputs of the time model.

    ``peak_flops``: bfloat16 FLOP/s; ``hbm_bytes``: memory capacity; ``hbm_bandwidth``:
    bytes/s between HBM and the cores; ``link_bandwidth``: bytes/s over one ICI link in
    one direction; ``torus_dims``: 2 or 3, so a chip has ``2 * torus_dims`` links to
    its neighbours. Published figures, not measured by this package.
    """

    name: str
    peak_flops: float
    hbm_bytes: float
    hbm_bandwidth: float
    link_bandwidth: float
    torus_dims: int

    @property
    def links(self) -> int:
        """Links from one chip to its neighbours (two per torus dimension; one for a switched GPU)."""
        return 2 * self.torus_dims if self.torus_dims else 1

    def critical_intensity(self, links: int = 1) -> float:
        """Flops per byte sent at which compute time equals communication time over ``links`` links."""
        check_links(links, self)
        return self.peak_flops / (links * self.link_bandwidth)


#: Published figures per chip (bfloat16 peak, HBM, ICI one way per link), from ``CHIP_SOURCE``.
CHIPS = {
    "TPU v4p": Chip("TPU v4p", peak_flops=2.75e14, hbm_bytes=32e9, hbm_bandwidth=1.2e12, link_bandwidth=4.5e10,
                    torus_dims=3),
    "TPU v5p": Chip("TPU v5p", peak_flops=4.59e14, hbm_bytes=96e9, hbm_bandwidth=2.8e12, link_bandwidth=9e10,
                    torus_dims=3),
    "TPU v5e": Chip("TPU v5e", peak_flops=1.97e14, hbm_bytes=16e9, hbm_bandwidth=8.1e11, link_bandwidth=4.5e10,
                    torus_dims=2),
    "TPU v6e": Chip("TPU v6e", peak_flops=9.2e14, hbm_bytes=32e9, hbm_bandwidth=1.6e12, link_bandwidth=9e10,
                    torus_dims=2),
}


#: Where the GPU figures come from (the GPU chapter of the scaling book, its spec and networking tables).
GPU_CHIP_SOURCE = ("How to Scale Your Model, 'How to Think About GPUs': https://jax-ml.github.io/scaling-book/gpus/ "
                   "(bf16 peak, HBM, NVLink per GPU; 8 x 400 Gb/s InfiniBand per node); B200's HBM from NVIDIA's DGX "
                   "B200 guide, https://docs.nvidia.com/dgx/dgxb200-user-guide/introduction-to-dgxb200.html "
                   "(8 GPUs, 1,440 GB in all: 180 GB each; the scaling book lists the chip's 192)")


@dataclass(frozen=True)
class GpuChip(Chip):
    """A GPU's published figures: a :class:`Chip` whose links are switched, not a torus.

    ``link_bandwidth``: bytes/s one GPU sends into its node's NVLink switches, one direction (all its
    NVLink ports together: a GPU reaches every GPU of its node in one hop); ``network_bandwidth``:
    bytes/s one GPU sends into the network between nodes, one direction (its own network card);
    ``node_size``: GPUs per NVLink domain. ``torus_dims`` is 0 and ``links`` 1.
    """

    network_bandwidth: float = 0.0
    node_size: int = 8


#: Published figures per GPU (bf16 dense peak, HBM, NVLink and network one way per GPU), ``GPU_CHIP_SOURCE``.
#: NVLink 4 (H100, H200): 18 links x 25 GB/s = 450 GB/s; NVLink 5 (B200): 900 GB/s; a node's
#: 8 x 400 Gb/s InfiniBand cards give each GPU 50 GB/s. A B200 in an HGX or DGX system has 180 GB of HBM.
GPU_CHIPS = {
    "H100": GpuChip("H100", peak_flops=9.9e14, hbm_bytes=80e9, hbm_bandwidth=3.35e12, link_bandwidth=4.5e11,
                    torus_dims=0, network_bandwidth=5e10, node_size=8),
    "H200": GpuChip("H200", peak_flops=9.9e14, hbm_bytes=141e9, hbm_bandwidth=4.8e12, link_bandwidth=4.5e11,
                    torus_dims=0, network_bandwidth=5e10, node_size=8),
    "B200": GpuChip("B200", peak_flops=2.25e15, hbm_bytes=180e9, hbm_bandwidth=8e12, link_bandwidth=9e11,
                    torus_dims=0, network_bandwidth=5e10, node_size=8),
}


def check_links(links, chip: Chip) -> None:
    """Raise ``ValueError`` unless ``links`` is an integer from 1 to the links of ``chip``."""
    if isinstance(links, bool) or not isinstance(links, (int, np.integer)) or not 1 <= links <= chip.links:
        raise ValueError(f"links must be an integer from 1 to {chip.links} (the links of a {chip.name} chip), "
                         f"got {links!r}")


def named_chip(value) -> Chip:
    """The :class:`Chip` ``value`` is or names (a key of ``CHIPS`` or ``GPU_CHIPS``)."""
    return lookup(value, "chip", (Chip,), ("TPU", CHIPS), ("GPU", GPU_CHIPS))


#: ``device_kind`` strings of GPU devices and the chip of :data:`shardlab.hardware.chips.GPU_CHIPS` they are.
GPU_DEVICE_KINDS = {"NVIDIA H100 80GB HBM3": "H100", "NVIDIA H200 141GB HBM3e": "H200", "NVIDIA B200": "B200"}


#: ``device_kind`` strings of TPU devices and the chip of :data:`shardlab.hardware.chips.CHIPS` they are.
DEVICE_KINDS = {"TPU v5 lite": "TPU v5e", "TPU v5e": "TPU v5e", "TPU v6 lite": "TPU v6e", "TPU v6e": "TPU v6e",
                "TPU v5": "TPU v5p", "TPU v5p": "TPU v5p", "TPU v4": "TPU v4p"}
