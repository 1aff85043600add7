"""One time model for the whole book: flops and collectives turned into modelled time.

Its inputs: a step's flops, its collectives as :class:`~shardlab.Traffic` and the network of each mesh axis
(:mod:`shardlab.models.network`: links and hops from the topology, a latency per hop).

* **Time.** :func:`modelled_time` turns a step's flops and its collectives (:class:`Traffic`: bytes one
  device sends by the ring model, mesh axis, how many collectives) into ``compute = flops / peak``,
  per axis ``bytes / (links * link_bandwidth) + collectives * passes * hops * ICI_HOP_LATENCY``, and
  the step's ``overlapped`` and ``serial`` times and its bound. Latency and bandwidth time are
  *added*, the standard latency-plus-bandwidth (alpha-beta) sum; the scaling book instead takes the
  larger of the two (``T = max(T_min * hops, V / (W * N_axes))``, "Sharded Matrices"), so this model is
  the more pessimistic where the two are comparable; the book is the source only for the links, the
  wraparounds and the hop latency. Its assumptions, stated once here:
  collectives on different mesh axes use different links and overlap each other (a step communicates
  for the longest axis); communication overlaps the step's arithmetic perfectly in ``overlapped`` and
  not at all in ``serial``. :func:`modelled_passes` applies it pass by pass (forward, backward): a
  pass's communication hides only behind that pass's arithmetic, as in the scaling book's training
  chapter. Published peak figures: real steps are slower. Everything it gives is
  *modelled*, never measured.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

from shardlab.hardware.chips import check_links, named_chip
from shardlab.models.network import ICI_HOP_LATENCY, PASSES, AxisNetwork, Traffic

__all__ = ["modelled_time", "modelled_passes", "step_time"]


def modelled_time(flops, traffic, chip, network, *, hop_latency: float = ICI_HOP_LATENCY,
                  axes_at_once: bool = True, hbm_bytes=None) -> dict:
    """Modelled time of a step on one chip: compute, communication per axis, overlapped, serial, bound.

    ``flops``: floating-point operations one chip performs; ``traffic``: :class:`Traffic` items (or
    ``(nbytes, axis, count[, kind])`` tuples); ``chip``: a :class:`~shardlab.Chip` or a name of
    :data:`shardlab.hardware.chips.CHIPS`; ``network``: ``{axis: AxisNetwork}`` (:func:`mesh_network`, or built by
    hand). Per axis ``comm = nbytes / (links * link_bandwidth) + count * passes * hops * hop_latency``
    (passes: 2 for an all-reduce, else 1). Returns, in seconds::

        {"compute": flops / peak, "comm": the longest axis, "latency": that axis's latency part,
         "by_axis": {axis: comm}, "overlapped": max(compute, comm), "serial": compute + comm,
         "bound": "communication" if comm > compute else "compute"}

    Collectives on different axes overlap each other (``comm`` is the longest axis's); with
    ``axes_at_once=False`` they run one after another and ``comm`` (and ``latency``) is the sum over the
    axes: XLA:GPU normally issues its asynchronous collectives one at a time, on one collective stream.

    ``hbm_bytes`` (bytes one chip reads and writes in its memory, e.g. ``bytes_accessed`` of
    :func:`~shardlab.compile_for`'s program, XLA's ``cost_analysis()``) adds memory traffic: the result gains
    ``"memory": hbm_bytes / hbm_bandwidth`` and ``"local": max(compute, memory)`` (the chip streams while it
    multiplies, as :func:`shardlab.serving_time` models it), and ``overlapped``, ``serial`` and
    ``bound`` use ``local`` in place of ``compute`` (``bound`` may then be ``"memory"``). Without it the result
    is as above. Either way the model leaves out per-op overheads and kernel efficiency.
    See the module docstring for every assumption.
    """
    chip = named_chip(chip)
    if isinstance(flops, bool) or not isinstance(flops, (int, float, np.integer, np.floating, Fraction)) \
            or not flops >= 0:
        raise ValueError(f"modelled_time: flops must be a non-negative number, got {flops!r}")
    if not isinstance(network, dict) or not all(isinstance(v, AxisNetwork) for v in network.values()):
        raise ValueError(f"modelled_time: network must be a dict {{axis: AxisNetwork}}, got {network!r}")
    if isinstance(hop_latency, bool) or not isinstance(hop_latency, (int, float)) or not hop_latency >= 0:
        raise ValueError(f"modelled_time: hop_latency must be a non-negative number of seconds, "
                         f"got {hop_latency!r}")
    if isinstance(traffic, (Traffic, str, bytes)) or not hasattr(traffic, "__iter__"):
        raise ValueError(f"modelled_time: traffic must be a list of Traffic, got {traffic!r}")
    if not isinstance(axes_at_once, bool):
        raise ValueError(f"modelled_time: axes_at_once must be True or False, got {axes_at_once!r}")
    if hbm_bytes is not None and (isinstance(hbm_bytes, bool) or not isinstance(
            hbm_bytes, (int, float, np.integer, np.floating)) or not hbm_bytes >= 0):
        raise ValueError(f"modelled_time: hbm_bytes must be None or a non-negative number of bytes, "
                         f"got {hbm_bytes!r}")
    items = [t if isinstance(t, Traffic) else Traffic(*t) for t in traffic]
    bandwidth, latency = {}, {}
    for t in items:
        if t.axis not in network:
            raise ValueError(f"modelled_time: traffic names axis {t.axis!r}, which network has no entry for "
                             f"(it has {list(network)})")
        net = network[t.axis]
        if net.links > chip.links:
            raise ValueError(f"modelled_time: network gives axis {t.axis!r} {net.links} links, more than a "
                             f"{chip.name} chip has ({chip.links})")
        if t.nbytes == 0 and net.links == 0:
            continue
        if net.links == 0:
            raise ValueError(f"modelled_time: traffic sends {t.nbytes} bytes over axis {t.axis!r}, whose "
                             f"network has no links (one chip)")
        link = chip.link_bandwidth if net.bandwidth is None else net.bandwidth
        per_hop = hop_latency if net.hop_latency is None else net.hop_latency
        bandwidth[t.axis] = bandwidth.get(t.axis, 0.0) + float(t.nbytes) / (net.links * link)
        latency[t.axis] = latency.get(t.axis, 0.0) + t.count * PASSES[t.kind] * net.hops * per_hop
    by_axis = {a: bandwidth[a] + latency[a] for a in bandwidth}
    slowest = max(by_axis, key=by_axis.get) if by_axis else None
    compute = float(flops) / chip.peak_flops
    comm = by_axis[slowest] if by_axis else 0.0
    waiting = latency[slowest] if by_axis else 0.0
    if not axes_at_once:
        comm, waiting = sum(by_axis.values()), sum(latency.values())
    if hbm_bytes is None:
        return {"compute": compute, "comm": comm, "latency": waiting,
                "by_axis": by_axis, "overlapped": max(compute, comm), "serial": compute + comm,
                "bound": "communication" if comm > compute else "compute"}
    memory = float(hbm_bytes) / chip.hbm_bandwidth
    local = max(compute, memory)
    terms = {"memory": memory, "compute": compute, "communication": comm}
    return {"compute": compute, "memory": memory, "local": local, "comm": comm, "latency": waiting,
            "by_axis": by_axis, "overlapped": max(local, comm), "serial": local + comm,
            "bound": max(terms, key=terms.get)}


def modelled_passes(passes: dict, chip, network, *, hop_latency: float = ICI_HOP_LATENCY,
                    axes_at_once: bool = True) -> dict:
    """:func:`modelled_time` pass by pass: ``passes`` is ``{name: (flops, traffic)}`` (e.g. forward, backward).

    A pass's communication hides only behind that pass's arithmetic. Returns ``{name: modelled_time(...)
    for each pass, "compute": sum, "comm": sum, "time": sum of each pass's overlapped time, "serial":
    sum of each pass's serial time, "bound": "communication" if any pass communicates for longer than
    it computes, else "compute"}``, in seconds. ``axes_at_once`` is passed on to :func:`modelled_time`
    (``False``: within a pass, the collectives of different axes run one after another).
    """
    if not isinstance(passes, dict) or not passes or not all(
            isinstance(v, (tuple, list)) and len(v) == 2 for v in passes.values()):
        raise ValueError(f"modelled_passes: passes must be a non-empty dict {{name: (flops, traffic)}}, "
                         f"got {passes!r}")
    out: dict = {name: modelled_time(flops, traffic, chip, network, hop_latency=hop_latency,
                                     axes_at_once=axes_at_once)
                 for name, (flops, traffic) in passes.items()}
    rows = [out[name] for name in passes]
    out["compute"] = sum(r["compute"] for r in rows)
    out["comm"] = sum(r["comm"] for r in rows)
    out["time"] = sum(r["overlapped"] for r in rows)
    out["serial"] = sum(r["serial"] for r in rows)
    out["bound"] = "communication" if any(r["comm"] > r["compute"] for r in rows) else "compute"
    return out


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

    chip = named_chip(chip)
    for name, value in (("flops", flops), ("nbytes", nbytes)):
        if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating, Fraction)) \
                or not value >= 0:
            raise ValueError(f"step_time: {name} must be a non-negative number, got {value!r}")
    check_links(links, chip)
    for name, value in (("collectives", collectives), ("hops", hops)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"step_time: {name} must be a non-negative integer, got {value!r}")
    t = modelled_time(flops, [Traffic(nbytes, "ici", collectives, "all-gather")], chip,
                      {"ici": AxisNetwork(links, max(hops, 1))}, hop_latency=ICI_HOP_LATENCY if hops else 0.0)
    return {k: t[k] for k in ("compute", "comm", "overlapped", "serial", "bound")}
