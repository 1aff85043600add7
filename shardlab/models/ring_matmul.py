"""The ring matmul, modelled: an all-gather matmul written as a ring of collective-permutes, step by step.

:func:`ring_matmul_time` times it with and without overlap, against the plain all-gather followed by the
product, by the book's one time model (:func:`shardlab.modelled_time`). What it gives is modelled, not
measured.
"""

from __future__ import annotations

import numpy as np

from shardlab.arguments import positive_int
from shardlab.hardware.chips import named_chip
from shardlab.models.network import ICI_HOP_LATENCY, AxisNetwork, Traffic
from shardlab.models.time_model import modelled_time

__all__ = ["ring_matmul_time"]


def ring_matmul_time(rows: int, contract: int, cols: int, devices: int, chip, *, network,
                     dtype_bytes: int = 2, bidirectional: bool = False,
                     hop_latency: float = ICI_HOP_LATENCY) -> dict:
    """Modelled time of ``all_gather(x) @ w`` written as a ring of ``devices`` steps, against the plain form.

    ``x`` is ``(rows, contract)``, split by rows over ``devices``; ``w`` is ``(contract, cols)``,
    split by columns, so each device computes ``rows × cols / devices`` of the result. ``network`` is
    the :class:`shardlab.AxisNetwork` of the mesh axis the devices form
    (``shardlab.mesh_network(mesh)[axis]``). Everything is timed by the book's one model,
    :func:`shardlab.modelled_time`:

    - **the ring**: at each step a device multiplies the block of ``x`` it holds by its columns of
      ``w`` (``2 · rows/devices · contract · cols/devices`` flops) while the block, ``rows/devices ·
      contract · dtype_bytes`` bytes, travels to the next device, one hop away: over 1 link, or,
      ``bidirectional``, half of it each way over 2 links (which needs an axis of at least 2 links).
      ``devices`` products and ``devices - 1`` sends, each paying one hop's latency.
    - **the plain form**: one all-gather of ``x`` over the axis (its links and hops: both directions
      of a ring with wraparound), then the whole product, which waits for it.

    Returns ``step``: one ring step's :func:`~shardlab.modelled_time` (``compute``, ``comm``, ...);
    ``overlapped``: the ring when each send hides behind a product (``compute + (devices - 1) ·
    max(compute, comm)``); ``serial``: the ring with no overlap (``devices · compute + (devices - 1) ·
    comm``); ``saved``: their difference; ``plain``: the plain form (all-gather, then product) and
    ``plain_comm``: its all-gather; ``faster``: ``"ring"`` if ``overlapped < plain`` else
    ``"plain"``; ``bound``: which one a ring step waits for. All in seconds, modelled from published
    peak figures: real steps are slower.
    """
    rows, contract, cols, devices = (positive_int(f"ring_matmul_time: {n}", v) for n, v in
                                     (("rows", rows), ("contract", contract), ("cols", cols),
                                      ("devices", devices)))
    dtype_bytes = positive_int("ring_matmul_time: dtype_bytes", dtype_bytes)
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise ValueError(f"ring_matmul_time: bidirectional must be True or False, got {bidirectional!r}")
    for name, value in (("rows", rows), ("cols", cols)):
        if value % devices:
            raise ValueError(f"ring_matmul_time: {name}={value} must be divisible by devices={devices}")
    if devices < 2:
        raise ValueError(f"ring_matmul_time: devices must be at least 2 (a ring), got {devices}")
    if not isinstance(network, AxisNetwork) or network.links == 0:
        raise ValueError(f"ring_matmul_time: network must be the AxisNetwork of the ring's mesh axis "
                         f"(shardlab.mesh_network(mesh)[axis]), with links, got {network!r}")
    ring_links = 2 if bidirectional else 1
    if network.links < ring_links:
        raise ValueError(f"ring_matmul_time: a ring both ways needs an axis of at least 2 links; network "
                         f"has {network.links}")
    chip = named_chip(chip)
    flops = 2 * (rows // devices) * contract * (cols // devices)
    nbytes = (rows // devices) * contract * dtype_bytes
    step = modelled_time(flops, [Traffic(nbytes, "ring", 1, "collective-permute")], chip,
                         {"ring": AxisNetwork(ring_links, 1)}, hop_latency=hop_latency)
    gather = modelled_time(devices * flops, [Traffic((devices - 1) * nbytes, "axis", 1, "all-gather")],
                           chip, {"axis": network}, hop_latency=hop_latency)
    overlapped = step["compute"] + (devices - 1) * step["overlapped"]
    serial = devices * step["compute"] + (devices - 1) * step["comm"]
    plain = gather["serial"]
    return {"step": step, "flops_per_step": flops, "bytes_per_step": nbytes, "steps": devices,
            "overlapped": overlapped, "serial": serial, "saved": serial - overlapped,
            "plain": plain, "plain_comm": gather["comm"],
            "faster": "ring" if overlapped < plain else "plain", "bound": step["bound"]}
