"""The ring model: how many bytes one device sends in each kind of collective.

What a collective moves is *modelled*, not measured: each function gives the
bytes one device sends under the bandwidth-optimal algorithm for its kind, for
a group of ``n`` devices. :mod:`shardlab.compiled` applies them to the shapes it
reads from compiled code; a chapter can apply them to shapes of its own.

Per kind: all-gather sends ``(n-1)/n`` of the result, reduce-scatter ``(n-1)/n``
of the operand, all-reduce ``2(n-1)/n`` of the operand (a reduce-scatter, then
an all-gather), collective-permute the whole operand. All-to-all is the
exception: ``bytes_all_to_all`` counts a *direct exchange* (every device linked
to every other), ``(n-1)/n`` of the operand, what leaves the device. On a ring,
pieces are forwarded through the devices between sender and receiver, and
``bytes_all_to_all_ring`` counts that: about ``n/4`` times the operand on a
bidirectional ring (a quarter to a third of an all-gather of the same operand)
and ``(n-1)/2`` times it on a one-way ring (half of that all-gather).

Bytes are not time. ``CHIPS`` holds published figures of TPU chips (bfloat16
peak, HBM, ICI bandwidth per link) and ``step_time`` turns a step's flops and
modelled bytes into modelled compute and communication times on one of them;
``GPU_CHIPS`` holds the same for NVIDIA GPUs (NVLink within a node, a network
between nodes).
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

import numpy as np

__all__ = [
    "bytes_all_gather",
    "bytes_reduce_scatter",
    "bytes_all_reduce",
    "bytes_all_to_all",
    "bytes_all_to_all_ring",
    "bytes_permute",
    "Chip",
    "CHIPS",
    "CHIP_SOURCE",
    "GpuChip",
    "GPU_CHIPS",
    "GPU_CHIP_SOURCE",
    "step_time",
]


def _check_formula_args(name: str, nbytes, n) -> None:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.integer, np.floating, Fraction)) \
            or not nbytes >= 0:
        raise ValueError(f"{name}: nbytes must be a non-negative number of bytes, got {nbytes!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}: n must be a positive integer number of devices in the group, got {n!r}")


def _number(x: Fraction | float):
    # An int when the count of bytes is whole (the usual case), else a float.
    if isinstance(x, Fraction):
        return int(x) if x.denominator == 1 else float(x)
    return int(x) if float(x).is_integer() else float(x)


def _fraction(nbytes) -> Fraction:
    return Fraction(nbytes) if not isinstance(nbytes, float) else Fraction(nbytes).limit_denominator(1 << 20)


def bytes_all_gather(result_nbytes, n: int):
    """Bytes one device sends in a ring all-gather over ``n`` devices: ``(n-1)/n * result_nbytes``.

    ``result_nbytes`` is the size of the gathered (whole) result on one device.
    In each of the ring's ``n - 1`` steps a device passes one ``1/n`` piece to
    its neighbour: first its own, then each piece it has just received.
    """
    _check_formula_args("bytes_all_gather", result_nbytes, n)
    return _number(_fraction(result_nbytes) * (n - 1) / n)


def bytes_reduce_scatter(operand_nbytes, n: int):
    """Bytes one device sends in a ring reduce-scatter over ``n`` devices: ``(n-1)/n * operand_nbytes``.

    ``operand_nbytes`` is the size of the full buffer each device contributes;
    each of the ``n - 1`` steps passes one ``1/n`` piece of partial sums on.
    """
    _check_formula_args("bytes_reduce_scatter", operand_nbytes, n)
    return _number(_fraction(operand_nbytes) * (n - 1) / n)


def bytes_all_reduce(nbytes, n: int):
    """Bytes one device sends in a ring all-reduce over ``n`` devices: ``2(n-1)/n * nbytes``.

    A ring all-reduce is a reduce-scatter followed by an all-gather of the
    reduced pieces, so it sends twice ``(n-1)/n`` of the buffer.
    """
    _check_formula_args("bytes_all_reduce", nbytes, n)
    return _number(_fraction(nbytes) * 2 * (n - 1) / n)


def bytes_all_to_all(nbytes, n: int):
    """Bytes one device sends in an all-to-all over ``n`` devices, direct exchange: ``(n-1)/n * nbytes``.

    The buffer is cut into ``n`` pieces; one stays, the other ``n - 1`` go to
    one peer each. This counts what leaves the device when every device has a
    link to every other (a fully connected exchange), not a ring: on a ring the
    pieces are forwarded, see :func:`bytes_all_to_all_ring`.
    """
    _check_formula_args("bytes_all_to_all", nbytes, n)
    return _number(_fraction(nbytes) * (n - 1) / n)


def bytes_all_to_all_ring(nbytes, n: int, *, bidirectional: bool = True):
    """Bytes one device sends in an all-to-all over a ring of ``n`` devices, forwarding included.

    The piece for the device ``k`` places away travels ``k`` hops on a one-way
    ring, ``min(k, n - k)`` on a bidirectional one, and every hop is a send. Summed
    over the ``n - 1`` pieces of size ``nbytes / n`` (every device does the same,
    so the forwarding one device does for others equals its own pieces' extra hops)::

        one-way:        nbytes/n * sum(k for k in 1..n-1)           = (n-1)/2 * nbytes
        bidirectional:  nbytes/n * sum(min(k, n-k) for k in 1..n-1)  = n/4 * nbytes (n even),
                                                                      (n*n-1)/(4n) * nbytes (n odd)

    An all-gather of the same ``nbytes`` per device sends ``(n-1) * nbytes``, so
    the ring all-to-all costs half of it one-way and ``n/(4(n-1))`` of it
    bidirectionally (a quarter to a third for ``n >= 3``).
    """
    _check_formula_args("bytes_all_to_all_ring", nbytes, n)
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise ValueError(f"bytes_all_to_all_ring: bidirectional must be True or False, got {bidirectional!r}")
    hops = sum(min(k, n - k) if bidirectional else k for k in range(1, n))
    return _number(_fraction(nbytes) * hops / n)


def bytes_permute(nbytes, sends: bool = True):
    """Bytes one device sends in a collective-permute: the whole buffer if it sends, else 0.

    ``sends`` says whether the device sends to a *different* device (a pair
    ``{i,i}`` keeps the buffer where it is and moves nothing).
    """
    _check_formula_args("bytes_permute", nbytes, 1)
    if not isinstance(sends, (bool, np.bool_)):
        raise ValueError(f"bytes_permute: sends must be True or False, got {sends!r}")
    return _number(_fraction(nbytes)) if sends else 0


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
        _check_links(links, self)
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
                   "(bf16 peak, HBM, NVLink per GPU; 8 x 400 Gb/s InfiniBand per node)")


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
#: 8 x 400 Gb/s InfiniBand cards give each GPU 50 GB/s.
GPU_CHIPS = {
    "H100": GpuChip("H100", peak_flops=9.9e14, hbm_bytes=80e9, hbm_bandwidth=3.35e12, link_bandwidth=4.5e11,
                    torus_dims=0, network_bandwidth=5e10, node_size=8),
    "H200": GpuChip("H200", peak_flops=9.9e14, hbm_bytes=141e9, hbm_bandwidth=4.8e12, link_bandwidth=4.5e11,
                    torus_dims=0, network_bandwidth=5e10, node_size=8),
    "B200": GpuChip("B200", peak_flops=2.25e15, hbm_bytes=192e9, hbm_bandwidth=8e12, link_bandwidth=9e11,
                    torus_dims=0, network_bandwidth=5e10, node_size=8),
}


def _check_links(links, chip: Chip) -> None:
    if isinstance(links, bool) or not isinstance(links, (int, np.integer)) or not 1 <= links <= chip.links:
        raise ValueError(f"links must be an integer from 1 to {chip.links} (the links of a {chip.name} chip), "
                         f"got {links!r}")


def _chip(chip) -> Chip:
    if isinstance(chip, Chip):
        return chip
    if chip in CHIPS:
        return CHIPS[chip]
    if chip in GPU_CHIPS:
        return GPU_CHIPS[chip]
    raise ValueError(f"chip must be a Chip or one of {sorted(CHIPS) + sorted(GPU_CHIPS)}, got {chip!r}")


def step_time(flops, nbytes, chip, *, links: int = 1, collectives: int = 0, hops: int = 0) -> dict:
    """Modelled time of a step on one chip: compute, communication, and which one bounds it.

    ``flops``: floating-point operations one chip performs; ``nbytes``: bytes it sends
    (a ring-model count); ``links``: ICI links it sends them over at once (1 for a
    one-way ring or an open line, 2 for a ring with wraparound, more for an axis spanning
    several torus axes: :func:`shardlab.axis_links` derives it from the topology).
    ``compute = flops / peak_flops`` and ``comm = nbytes / (links * link_bandwidth)``, plus
    ``collectives * hops * ICI_HOP_LATENCY`` when ``collectives`` (each one pass of ``hops``
    ICI hops) are given (default 0: bandwidth only). With perfect overlap the step takes
    their maximum (``overlapped``), with none their sum (``serial``). A one-axis use of
    :func:`shardlab.modelled_time`, which states the model's assumptions; a model of the
    chip at its published peak: real steps are slower.
    """
    from shardlab.time_model import ICI_HOP_LATENCY, AxisNetwork, Traffic, modelled_time

    chip = _chip(chip)
    for name, value in (("flops", flops), ("nbytes", nbytes)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating, Fraction)) \
                or not value >= 0:
            raise ValueError(f"step_time: {name} must be a non-negative number, got {value!r}")
    _check_links(links, chip)
    for name, value in (("collectives", collectives), ("hops", hops)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"step_time: {name} must be a non-negative integer, got {value!r}")
    t = modelled_time(flops, [Traffic(nbytes, "ici", collectives, "all-gather")], chip,
                      {"ici": AxisNetwork(links, max(hops, 1))}, hop_latency=ICI_HOP_LATENCY if hops else 0.0)
    return {k: t[k] for k in ("compute", "comm", "overlapped", "serial", "bound")}
