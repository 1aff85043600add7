"""The network a collective crosses: links and hops per mesh axis, from the TPU topology or the GPU cluster.

Between TPU slices it is the data-centre network (DCN): a mesh axis whose groups hold devices of
several slices (their ``slice_index``) gets :func:`dcn_network`, one chip's share of its host's network
cards (``shardlab.hardware.dcn``: figures and sources) and a step latency assumed by this model; a
program compiled for several slices is costed by :func:`multislice_traffic`.

The links, the wraparounds and the hop latency are from *How to Scale Your Model* (the "scaling book",
https://jax-ml.github.io/scaling-book/); the sharing of links between groups is this model's own choice,
stated below. :mod:`shardlab.models.time_model` turns bytes over these networks into modelled time.

* **Links per mesh axis, from the topology.** A collective over one mesh axis runs in groups of chips
  (the devices that differ only along that axis). Where a group lies on the chip torus decides how many
  ICI links each chip sends on at once (:func:`group_network`, :func:`axis_links`):

  - along one torus axis **with wraparound** the group is a closed ring and sends both ways round:
    **2 links** (the scaling book's *bidirectional* bandwidth, "TPU Networking" and its footnote on
    bidi bandwidth, https://jax-ml.github.io/scaling-book/tpus/);
  - along an **open** torus axis (no wraparound link) it is a line: **1 link**, half that bandwidth
    (same page: smaller slices "with no wraparounds ... typically doubles the time of most
    communication"; "Sharded Matrices", https://jax-ml.github.io/scaling-book/sharding/, worked
    all-gather on a v5e 4x4: with no wraparound "we actually can't do a fully bidirectional AllGather");
  - a group that covers only **part** of a torus axis cannot close a ring: 1 link along it;
  - a group **spanning several torus axes** gets the **sum** over the axes it spans ("Sharded Matrices",
    *What happens when we AllGather over multiple axes?*: the available bandwidth grows by the number
    of axes).

  **Groups of one axis share links.** All groups of a mesh axis run their collectives at once, and
  groups that lie far apart on the torus cross the same links (``jax.make_mesh`` on a v5e-8 board as
  (2, 4) pairs chips at opposite ends of the board). :func:`axis_network` therefore caps the links of
  the axis by the torus's cuts (:func:`shared_links`): a cut splits the slice in two (one plane across
  an open torus axis; two planes across a wrapping one, which is a ring) and has ``C`` links each way;
  a ring collective whose group has chips on both sides sends, by the ring model, at least the bytes
  one device sends across it in each direction. With ``G`` groups crossing the cut, each gets at most
  ``C / G`` links, so the axis gets ``min(links of one group, min over cuts of C / G)``, a fraction
  when the groups share. Groups that do not share (the rows of a pod, one group on a board) keep
  their links. This is a bisection bound, not a routing simulation: any routing must carry at least
these bytes across the cut, so the cap can only be optimistic. (A collective-permute's pairs send one way and are not capped.)

  Which slices have wraparound (:func:`torus_wraparound`, "TPU Networking" on the TPU page): v5e and v6e
  pods are 16 x 16 tori, and a slice has a wraparound only along an axis of the full 16 chips; v4 and
  v5p slices made of whole 4 x 4 x 4 cubes (every axis a multiple of 4) have wraparounds on every
  axis, provided by the optical switches, and smaller ones (2x2x1, 2x2x2, 2x2x4) none.

* **A latency per collective.** "Each hop over an ICI link has some intrinsic overhead regardless of the
  data volume. This is typically around 1us" ("Sharded Matrices", *A note on ICI latency*):
  :data:`shardlab.models.network.ICI_HOP_LATENCY`. A collective pays it once per hop of its longest route, the group's
  diameter on the torus (half the ring with wraparound, end to end on a line, summed over the torus
  axes spanned), once for an all-gather or a reduce-scatter and twice for an all-reduce (a
  reduce-scatter, then an all-gather).

* **GPU clusters: two levels, not a torus.** GPUs are switched: the GPUs of a node reach each other in
  one hop through NVSwitches, each sending ``link_bandwidth`` one way (450 GB/s for an H100, 900 GB/s for
  a B200: all its NVLink ports), and nodes talk over a network of switches (a fat tree with full
  bisection bandwidth) through one 400 Gb/s card per GPU: 50 GB/s one way, 400 GB/s per node of 8
  (the scaling book's GPU chapter, "Networking", https://jax-ml.github.io/scaling-book/gpus/).
  :func:`gpu_group_network` gives a group within one node NVLink's bandwidth; a group spanning ``M``
  nodes is reduced hierarchically: each node must receive ``(M-1)/M`` of the result over
  its share of the node's cards (the node's 400 GB/s divided among the groups of the axis that use
  it), and its own GPUs exchange the rest over NVLink; the slower of the two sets the time. Expressed
  per byte of the ring model's count (``(n-1)/n`` of the result), the group's bandwidth is
  ``min(NVLink, share * (n-1)/n * M/(M-1))``: 50 GB/s for a group of one GPU per node, about 400 GB/s
  for a group of whole nodes (the scaling book's ``bytes / W_node egress``). This is a lower bound on
  the time: NCCL's tree and NVLS algorithms come close to it, while its ring pushes ``(n-1)/n`` of the
  buffer through each node's cards, up to about 1.3 times slower for groups of whole nodes. Latency:
  a ring's steps, ``n - 1`` within a node at :data:`NVLINK_STEP_LATENCY`, ``M - 1`` between nodes at
  :data:`NETWORK_STEP_LATENCY`; both are this model's assumptions (orders of magnitude, not measured;
  the bandwidth terms dominate the steps the book models). :func:`axis_network`, :func:`mesh_network`
  and :func:`compiled_traffic` take a GPU mesh (of ``shardlab.target_mesh`` on a GPU target), reading
  each device's node from its ``process_index`` (a modelling choice: one process per node, as
  ``get_topology_desc`` describes a cluster; a job run with one process per GPU would need the node
  from elsewhere).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from shardlab.hardware.chips import CHIPS, DEVICE_KINDS, GPU_CHIPS, GPU_DEVICE_KINDS, GpuChip, named_chip
from shardlab.hardware.dcn import DCN_STEP_LATENCY, dcn_link
from shardlab.layout.ring_bytes import bytes_all_gather, bytes_all_reduce, bytes_all_to_all, bytes_reduce_scatter
from shardlab.programs.collectives import CollectiveReport, collectives_in_compiled
from shardlab.programs.loops import collectives_per_step
from shardlab.programs.slices import dcn_transfers

__all__ = ["ICI_HOP_LATENCY", "LATENCY_SOURCE", "NVLINK_STEP_LATENCY", "NETWORK_STEP_LATENCY", "AxisNetwork",
           "Traffic", "torus_wraparound", "group_network", "shared_links", "gpu_group_network", "axis_network",
           "axis_links", "mesh_network", "compiled_traffic", "step_traffic", "dcn_network", "dcn_traffic",
           "slice_mesh", "multislice_traffic"]


#: Seconds one hop over an ICI link costs whatever the bytes, "typically around 1us" (``LATENCY_SOURCE``).
ICI_HOP_LATENCY = 1e-6


#: Where the hop latency comes from.
LATENCY_SOURCE = ("How to Scale Your Model, 'Sharded Matrices', A note on ICI latency: "
                  "https://jax-ml.github.io/scaling-book/sharding/")


#: The size of a full v5e/v6e pod axis: only an axis of this many chips has a wraparound link.
POD_AXIS_2D = 16


#: v4/v5p cubes: slices of whole cubes (every axis a multiple of this) have wraparounds.
CUBE_EDGE = 4


#: Seconds per ring step of a collective over NVLink, within a node (an assumption of this model).
NVLINK_STEP_LATENCY = 1e-6


#: Seconds per ring step between nodes, over InfiniBand (an assumption of this model).
NETWORK_STEP_LATENCY = 5e-6


#: Passes over the ring each collective kind makes (for the latency term).
PASSES = {"all-reduce": 2, "all-gather": 1, "reduce-scatter": 1, "all-to-all": 1, "collective-permute": 1}


@dataclass(frozen=True)
class AxisNetwork:
    """What one mesh axis's collectives travel over: ``links`` per chip at once, ``hops`` of the longest route.

    ``links`` multiplies a chip's one-way link bandwidth (2 for a ring with wraparound, 1 for an open
    line, summed over the torus axes spanned; 0 for an axis of one chip, which sends nothing); it is
    a fraction (a ``fractions.Fraction``) when the groups of the axis share links
    (:func:`shared_links`). ``hops`` is the group's diameter on the torus, the ICI hops one pass of a
    collective pays :data:`shardlab.models.network.ICI_HOP_LATENCY` for.
    """

    links: int | Fraction
    hops: int
    #: Bytes/s one link carries one way; ``None``: the chip's ICI ``link_bandwidth`` (GPU networks set it).
    bandwidth: float | None = None
    #: Seconds per hop; ``None``: the ``hop_latency`` given to :func:`modelled_time` (GPU networks set it).
    hop_latency: float | None = None

    def __repr__(self) -> str:
        extra = "".join(f", {f}={getattr(self, f)!r}" for f in ("bandwidth", "hop_latency")
                        if getattr(self, f) is not None)
        return f"AxisNetwork(links={self.links!r}, hops={self.hops!r}{extra})"

    def __post_init__(self):
        for field in ("bandwidth", "hop_latency"):
            value = getattr(self, field)
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or not value >= 0 or (field == "bandwidth" and value == 0)):
                raise ValueError(f"AxisNetwork: {field} must be None or a {'positive' if field == 'bandwidth' else 'non-negative'} "
                                 f"number, got {value!r}")
        links = self.links
        if isinstance(links, bool) or not isinstance(links, (int, np.integer, Fraction)) or links < 0:
            raise ValueError(f"AxisNetwork: links must be a non-negative integer or Fraction (links per chip, "
                             f"fewer than 1 where groups share links), got {links!r}")
        if isinstance(self.hops, bool) or not isinstance(self.hops, (int, np.integer)) or self.hops < 0:
            raise ValueError(f"AxisNetwork: hops must be a non-negative integer, got {self.hops!r}")
        if (self.links == 0) != (self.hops == 0):
            raise ValueError(f"AxisNetwork: links and hops are both 0 (one chip) or both positive, "
                             f"got links={self.links}, hops={self.hops}")


@dataclass(frozen=True)
class Traffic:
    """Collectives of a step on one mesh axis: ``nbytes`` one device sends in all, over ``count`` of ``kind``.

    ``nbytes`` is the ring model's count (``shardlab.layout.ring_bytes``); ``axis`` a key of the network
    given to :func:`modelled_time`; ``count`` how many separate collectives carry it (each pays the
    latency); ``kind`` one of ``PASSES`` (an all-reduce pays it twice).
    """

    nbytes: float
    axis: object
    count: int = 1
    kind: str = "all-reduce"

    def __post_init__(self):
        if isinstance(self.nbytes, bool) or not isinstance(self.nbytes, (int, float, np.integer, np.floating,
                                                                         Fraction)) or not self.nbytes >= 0:
            raise ValueError(f"Traffic: nbytes must be a non-negative number of bytes, got {self.nbytes!r}")
        if isinstance(self.count, bool) or not isinstance(self.count, (int, np.integer)) or self.count < 0:
            raise ValueError(f"Traffic: count must be a non-negative integer, got {self.count!r}")
        if self.kind not in PASSES:
            raise ValueError(f"Traffic: kind must be one of {', '.join(PASSES)}; got {self.kind!r}")
        try:
            hash(self.axis)
        except TypeError:
            raise ValueError(f"Traffic: axis must be a mesh axis name (hashable), got {self.axis!r}") from None


def _shape(name: str, slice_shape) -> tuple[int, ...]:
    if not isinstance(slice_shape, (tuple, list)) or not slice_shape or not all(
            not isinstance(s, bool) and isinstance(s, (int, np.integer)) and s >= 1 for s in slice_shape):
        raise ValueError(f"{name}: slice_shape must be a tuple of positive integers (chips along each torus "
                         f"axis), got {slice_shape!r}")
    return tuple(int(s) for s in slice_shape)


def torus_wraparound(chip, slice_shape) -> tuple[bool, ...]:
    """Which axes of a TPU slice of ``slice_shape`` chips close into a ring (have a wraparound link).

    2-D chips (v5e, v6e; pods of 16 x 16): an axis wraps only when it has the full 16 chips ("smaller
    topologies can be requested without wraps on dims < 16"; "a TPU v5e 8x16 *will* have a wraparound
    on the longer axis"). 3-D chips (v4, v5p): the wraparounds come from optical switches that only
    whole 4 x 4 x 4 cubes have, so every axis wraps when every axis is a multiple of 4 ("Any multiple of
    a full cube (e.g. 4x4x4 or 4x4x8) will have wraparounds"; "a 2x2x4 won't have any"), none
    otherwise. Source: the scaling book's TPU page, "TPU Networking",
    https://jax-ml.github.io/scaling-book/tpus/. An axis of one chip never wraps.
    """
    chip = named_chip(chip)
    shape = _shape("torus_wraparound", slice_shape)
    if chip.torus_dims == 2:
        if len(shape) == 3 and shape[2] == 1:
            shape = shape[:2]
        if len(shape) != 2:
            raise ValueError(f"torus_wraparound: slice_shape of a {chip.name} slice has 2 axes (or a third "
                             f"of 1), got {slice_shape!r}")
        wraps = tuple(s == POD_AXIS_2D for s in shape)
        return wraps + (False,) * (len(_shape("torus_wraparound", slice_shape)) - 2)
    if len(shape) != 3:
        raise ValueError(f"torus_wraparound: slice_shape of a {chip.name} slice has 3 axes, got {slice_shape!r}")
    cubes = all(s % CUBE_EDGE == 0 for s in shape)
    return tuple(cubes and s > 1 for s in shape)


def group_network(coords, slice_shape, wraparound) -> AxisNetwork:
    """Links and hops of one group of chips, from their coordinates on the torus (pure: no JAX needed).

    ``coords``: one tuple per device (chip coordinates; devices on one chip repeat them);
    ``slice_shape``: chips along each torus axis; ``wraparound``: which of those axes wrap
    (:func:`torus_wraparound`). Along each torus axis the group takes ``k`` distinct coordinates:
    ``k == 1``: not spanned; all of a wrapping axis: a bidirectional ring, 2 links and
    ``size // 2`` hops; otherwise (an open axis, or part of any axis): a line, 1 link and
    ``max - min`` hops. Links and hops add over the axes spanned (module docstring: sources).
    A group is taken to be a block of the torus, as ``jax.make_mesh`` lays groups out; a group of
    scattered chips is given the links and hops of its bounding box.
    """
    shape = _shape("group_network", slice_shape)
    if not isinstance(wraparound, (tuple, list)) or len(wraparound) != len(shape) \
            or not all(isinstance(w, (bool, np.bool_)) for w in wraparound):
        raise ValueError(f"group_network: wraparound must be a tuple of {len(shape)} booleans (one per torus "
                         f"axis), got {wraparound!r}")
    try:
        points = np.array([tuple(c) for c in coords], dtype=object)
    except TypeError:
        raise ValueError(f"group_network: coords must be a sequence of coordinate tuples, got {coords!r}") \
            from None
    if points.ndim != 2 or points.shape[0] == 0 or points.shape[1] != len(shape) or not all(
            not isinstance(v, bool) and isinstance(v, (int, np.integer)) and 0 <= v < shape[i]
            for row in points for i, v in enumerate(row)):
        raise ValueError(f"group_network: coords must be a non-empty sequence of {len(shape)}-tuples of integers "
                         f"within slice_shape {shape}, got {coords!r}")
    links = hops = 0
    for i, size in enumerate(shape):
        values = sorted({int(v) for v in points[:, i]})
        if len(values) == 1:
            continue
        if wraparound[i] and len(values) == size:
            links, hops = links + 2, hops + size // 2
        else:
            links, hops = links + 1, hops + values[-1] - values[0]
    return AxisNetwork(links, hops)


def shared_links(groups, slice_shape, wraparound):
    """The cap the torus's cuts put on the links of groups that run their collectives at once.

    ``groups``: one sequence of chip coordinates per group (the groups of one mesh axis);
    ``slice_shape`` and ``wraparound`` as for :func:`group_network`. A cut splits the slice in two:
    one plane between coordinates ``c`` and ``c + 1`` of an open torus axis, or two planes of a
    wrapping axis (a ring is only split by two). It has ``C`` links each way (the chips of one plane,
    times the planes). A group with chips on both sides sends across it, by the ring model, at least
    the bytes one device sends, each way; ``G`` such groups share the ``C`` links. Returns the
    smallest ``Fraction(C, G)`` over all cuts, or ``None`` if no cut separates any group (a group of
    one chip). :func:`axis_network` takes ``min(links of one group, this)``.
    """
    shape = _shape("shared_links", slice_shape)
    if not isinstance(wraparound, (tuple, list)) or len(wraparound) != len(shape) \
            or not all(isinstance(w, (bool, np.bool_)) for w in wraparound):
        raise ValueError(f"shared_links: wraparound must be a tuple of {len(shape)} booleans (one per torus "
                         f"axis), got {wraparound!r}")
    try:
        sets = [np.array(sorted({tuple(int(v) for v in c) for c in g}), dtype=int) for g in groups]
    except (TypeError, ValueError):
        raise ValueError(f"shared_links: groups must be a sequence of groups of coordinate tuples, got "
                         f"{groups!r}") from None
    if not sets or not all(a.ndim == 2 and a.shape[1] == len(shape) and (a >= 0).all()
                           and (a < np.array(shape)).all() for a in sets):
        raise ValueError(f"shared_links: groups must be a non-empty sequence of non-empty groups of "
                         f"{len(shape)}-tuples within slice_shape {shape}, got {groups!r}")
    best = None
    for i, size in enumerate(shape):
        plane = math.prod(shape) // size
        if wraparound[i]:      # an arc (p, q]: chips p+1 .. q on one side, two planes
            cuts = [(set(range(p + 1, q + 1)), 2) for p in range(size) for q in range(p + 1, size)]
        else:                  # chips 0 .. c on one side, one plane
            cuts = [(set(range(c + 1)), 1) for c in range(size - 1)]
        for side, planes in cuts:
            crossing = sum(1 for a in sets if len({int(v) in side for v in a[:, i]}) == 2)
            if crossing:
                cap = Fraction(plane * planes, crossing)
                best = cap if best is None else min(best, cap)
    return best


def _links(value):
    """A Fraction that is a whole number as an int (AxisNetwork(2, 4), not AxisNetwork(Fraction(2, 1), 4))."""
    return int(value) if isinstance(value, Fraction) and value.denominator == 1 else value


def gpu_group_network(groups, chip) -> AxisNetwork:
    """The network of GPU groups that run a collective at once: NVLink within a node, the network between.

    ``groups``: one sequence per group, the node (host) of each of its devices, e.g. ``[[0, 0], [1, 1]]``
    for two groups of two GPUs each within one node; ``chip``: a :class:`~shardlab.hardware.chips.GpuChip` or a
    name of :data:`~shardlab.hardware.chips.GPU_CHIPS`. Returns the slowest group's ``AxisNetwork(1, hops,
    bandwidth=..., hop_latency=...)`` (module docstring: the two-level model), or ``AxisNetwork(0, 0)``
    when no group has two devices. Pure: no JAX needed.
    """
    chip = named_chip(chip)
    if not isinstance(chip, GpuChip):
        raise ValueError(f"gpu_group_network: chip must be a GPU (a GpuChip or one of {sorted(GPU_CHIPS)}), "
                         f"got {chip.name!r}")
    try:
        sets = [[int(h) for h in g] for g in groups]
    except (TypeError, ValueError):
        raise ValueError(f"gpu_group_network: groups must be a sequence of groups of host indices, got "
                         f"{groups!r}") from None
    if not sets or not all(sets) or any(h < 0 for g in sets for h in g) \
            or any(isinstance(h, bool) for g in groups for h in g):
        raise ValueError(f"gpu_group_network: groups must be a non-empty sequence of non-empty groups of "
                         f"non-negative host indices, got {groups!r}")
    sharing = Counter(h for g in sets for h in set(g))     # groups that use each node's network cards
    worst = None
    for g in sets:
        n, per_host = len(g), Counter(g)
        if n == 1:
            continue
        if len(per_host) == 1:
            net = AxisNetwork(1, n - 1, bandwidth=float(chip.link_bandwidth), hop_latency=NVLINK_STEP_LATENCY)
        else:
            m = len(per_host)
            share = chip.network_bandwidth * chip.node_size / max(sharing[h] for h in per_host)
            across = share * (n - 1) / n * m / (m - 1)
            inside = chip.link_bandwidth if max(per_host.values()) > 1 else math.inf
            net = AxisNetwork(1, m - 1, bandwidth=float(min(across, inside)), hop_latency=NETWORK_STEP_LATENCY)
        if worst is None or (net.bandwidth, -net.hops * net.hop_latency) < \
                (worst.bandwidth, -worst.hops * worst.hop_latency):
            worst = net
    return worst if worst is not None else AxisNetwork(0, 0)


def _gpu_chip(devices: np.ndarray):
    kinds = {d.device_kind for d in devices.flat}
    if len(kinds) != 1 or next(iter(kinds)) not in GPU_DEVICE_KINDS:
        raise ValueError(f"mesh: its devices must be GPUs of one kind among {sorted(GPU_DEVICE_KINDS)}, "
                         f"got {sorted(kinds)}")
    return GPU_CHIPS[GPU_DEVICE_KINDS[next(iter(kinds))]]


def _is_gpu_mesh(mesh) -> bool:
    devices = getattr(mesh, "devices", None)
    return isinstance(devices, np.ndarray) and devices.size > 0 and all(
        getattr(d, "platform", None) in ("gpu", "cuda") for d in devices.flat)


def _gpu_axis_network(mesh, axes) -> AxisNetwork:
    devices = mesh.devices
    chip = _gpu_chip(devices)
    names = list(mesh.axis_names)
    moved = np.moveaxis(devices, [names.index(a) for a in axes], range(-len(axes), 0))
    groups = moved.reshape(-1, math.prod(moved.shape[-len(axes):]))
    return gpu_group_network([[d.process_index for d in g] for g in groups], chip)


def _mesh_devices(mesh) -> np.ndarray:
    devices = getattr(mesh, "devices", None)
    names = getattr(mesh, "axis_names", None)
    if not isinstance(devices, np.ndarray) or names is None:
        raise ValueError(f"mesh must be a jax.sharding.Mesh, got {type(mesh).__name__}")
    if not all(getattr(d, "coords", None) is not None for d in devices.flat):
        raise ValueError("mesh: its devices carry no chip coordinates (not TPU devices): links cannot be "
                         "read from the topology; use a mesh of shardlab.target_mesh on a TPU target")
    return devices


def _slice_and_chip(devices: np.ndarray, slice_shape):
    kinds = {d.device_kind for d in devices.flat}
    if len(kinds) != 1 or next(iter(kinds)) not in DEVICE_KINDS:
        raise ValueError(f"mesh: its devices must be TPU chips of one kind among {sorted(DEVICE_KINDS)}, "
                         f"got {sorted(kinds)}")
    chip = CHIPS[DEVICE_KINDS[next(iter(kinds))]]
    coords = np.array([tuple(d.coords) for d in devices.flat])
    if slice_shape is None:
        slice_shape = tuple(int(m) + 1 for m in coords.max(axis=0))
    shape = _shape("axis_network", slice_shape)
    return chip, shape, torus_wraparound(chip, shape)


def _axes(mesh, axis) -> tuple[str, ...]:
    axes = axis if isinstance(axis, tuple) else (axis,)
    if not axes or not all(a in mesh.axis_names for a in axes) or len(set(axes)) != len(axes):
        raise ValueError(f"axis must be one of the mesh's axes {tuple(mesh.axis_names)} (or a tuple of them), "
                         f"got {axis!r}")
    return axes


def axis_network(mesh, axis, *, slice_shape=None) -> AxisNetwork:
    """The :class:`AxisNetwork` of a mesh axis (or tuple of axes) of a TPU mesh, read from its devices' coords.

    Every group along ``axis`` (the devices that differ only along it) is measured with
    :func:`group_network`; the axis gets the fewest links and the most hops of its groups (the
    slowest group sets the collective's time), its links capped by the cuts the groups share
    (:func:`shared_links`; module docstring). ``slice_shape`` defaults to the extent of the mesh's
    devices' coordinates (the whole slice, for a mesh of :func:`shardlab.target_mesh`); the
    wraparounds follow from it and the chip (:func:`torus_wraparound`).
    """
    if _is_gpu_mesh(mesh):
        return _gpu_axis_network(mesh, _axes(mesh, axis))
    devices = _mesh_devices(mesh)
    axes = _axes(mesh, axis)
    chip, shape, wraps = _slice_and_chip(devices, slice_shape)
    names = list(mesh.axis_names)
    moved = np.moveaxis(devices, [names.index(a) for a in axes], range(-len(axes), 0))
    groups = moved.reshape(-1, math.prod(moved.shape[-len(axes):]))
    slices = max(len({getattr(d, "slice_index", 0) for d in g}) for g in groups)
    if slices > 1:
        return dcn_network(chip, slices)
    return _shared([[tuple(d.coords) for d in g] for g in groups], shape, wraps)


def _shared(groups, shape, wraps) -> AxisNetwork:
    """The network of groups that run at once: the worst group's, its links capped by the shared cuts."""
    net = _worst(group_network(g, shape, wraps) for g in groups)
    cap = shared_links(groups, shape, wraps) if net.links else None
    return net if cap is None or cap >= net.links else AxisNetwork(_links(cap), net.hops)


def _worst(networks) -> AxisNetwork:
    networks = list(networks)
    bandwidths = [n.bandwidth for n in networks if n.bandwidth is not None]
    if bandwidths:      # GPU networks: the slowest bandwidth, the longest latency
        return AxisNetwork(min(n.links for n in networks if n.bandwidth is not None),
                           max(n.hops for n in networks), bandwidth=min(bandwidths),
                           hop_latency=max(n.hop_latency or 0.0 for n in networks))
    return AxisNetwork(min(n.links for n in networks), max(n.hops for n in networks))


def axis_links(mesh, axis, *, slice_shape=None):
    """ICI links each chip sends on at once in a collective over ``axis``: ``axis_network(...).links``.

    An int, or a ``fractions.Fraction`` below one group's links where the axis's groups share links.
    """
    return axis_network(mesh, axis, slice_shape=slice_shape).links


def mesh_network(mesh, *, slice_shape=None) -> dict:
    """``{axis: AxisNetwork}`` for every axis of a TPU or GPU mesh (:func:`axis_network`)."""
    if not _is_gpu_mesh(mesh):
        _mesh_devices(mesh)
    return {a: axis_network(mesh, a, slice_shape=slice_shape) for a in mesh.axis_names}


def compiled_traffic(report, mesh, *, slice_shape=None) -> tuple[list, dict]:
    """The collectives of a compiled program as :class:`Traffic`, with the network each one uses.

    ``report``: a :class:`~shardlab.CollectiveReport` of a program compiled over ``mesh`` (e.g.
    ``shardlab.compile_for(...).collectives``). Each collective is labelled by the mesh axes whose
    groups are its groups (a tuple, e.g. ``("data",)`` or ``("data", "model")``), or, if none match
    (a collective-permute's pairs, say), by its kind, with the network of its own groups (capped by
    :func:`shared_links`, except a collective-permute's, whose pairs each send one way). Returns
    ``(traffic, network)``, ready for :func:`modelled_time`.
    """
    from itertools import combinations

    gpu = _is_gpu_mesh(mesh)
    devices = mesh.devices if gpu else _mesh_devices(mesh)
    if gpu:
        chip = _gpu_chip(devices)
    else:
        _, shape, wraps = _slice_and_chip(devices, slice_shape)
    if not hasattr(report, "device_groups"):
        raise ValueError(f"report must be a CollectiveReport, got {type(report).__name__}")
    by_id = {d.id: d for d in devices.flat}
    names = list(mesh.axis_names)
    partitions = {}
    for r in range(1, len(names) + 1):
        for axes in combinations(names, r):
            moved = np.moveaxis(devices, [names.index(a) for a in axes], range(-r, 0))
            groups = moved.reshape(-1, math.prod(moved.shape[-r:]))
            partitions[frozenset(frozenset(d.id for d in g) for g in groups)] = axes
    traffic, network = [], {}
    for c in report:
        groups = report.device_groups(c)
        if not all(i in by_id for g in groups for i in g):
            raise ValueError("report: its devices are not the mesh's devices")
        moving = [g for g in groups if len(set(g)) > 1]
        key = frozenset(frozenset(g) for g in groups)
        label = partitions.get(key) if c.kind != "collective-permute" else None
        if label is None and gpu:
            label = c.kind
            net = gpu_group_network([[by_id[i].process_index for i in g] for g in moving], chip) if moving \
                else AxisNetwork(0, 0)
        elif label is None:
            label = c.kind
            coords = [[tuple(by_id[i].coords) for i in g] for g in moving]
            if not moving:
                net = AxisNetwork(0, 0)
            elif c.kind == "collective-permute":   # pairs that send one way: no cut cap
                net = _worst(group_network(g, shape, wraps) for g in coords)
            else:
                net = _shared(coords, shape, wraps)
        else:
            net = axis_network(mesh, label, slice_shape=None if gpu else shape)
        if label in network and network[label] != net:
            net = _worst([network[label], net])
        network[label] = net
        traffic.append(Traffic(c.bytes_per_device, label, 1, c.kind))
    return traffic, network


def step_traffic(program, mesh, *, slice_shape=None) -> tuple[list, dict]:
    """:func:`compiled_traffic` of a whole call: each collective counted once per trip of its loops.

    ``program``: a :class:`~shardlab.CompiledProgram` (or a compiled program) over ``mesh``. A collective
    in a ``lax.scan``'s body runs once per block; its :class:`Traffic` here carries ``trips`` times the
    bytes and ``trips`` collectives (``shardlab.collectives_per_step`` reads the trips). Raises
    ``ValueError`` where a loop's trip count cannot be read.
    """

    looped = collectives_per_step(program)
    report = getattr(program, "collectives", None)
    if report is None:

        report = collectives_in_compiled(program)
    traffic, network = compiled_traffic(report, mesh, slice_shape=slice_shape)
    if len(looped) != len(traffic):
        raise ValueError("step_traffic: the program's collectives could not be matched to their loops")
    out = []
    for t, c in zip(traffic, looped):
        if c.trips is None:
            raise ValueError(f"step_traffic: a {c.collective.kind} sits in a loop of unknown trip count")
        out.append(Traffic(t.nbytes * c.trips, t.axis, t.count * c.trips, t.kind))
    return out, network


def dcn_network(chip, slices: int) -> AxisNetwork:
    """The :class:`AxisNetwork` of a collective across ``slices`` TPU slices: one link of the chip's DCN
    bandwidth (``shardlab.hardware.dcn.dcn_link``), ``slices - 1`` steps of
    :data:`shardlab.hardware.dcn.DCN_STEP_LATENCY` each."""
    link = dcn_link(chip)
    if isinstance(slices, bool) or not isinstance(slices, (int, np.integer)) or slices < 2:
        raise ValueError(f"dcn_network: slices must be an integer of at least 2, got {slices!r}")
    return AxisNetwork(1, int(slices) - 1, bandwidth=float(link.bandwidth), hop_latency=DCN_STEP_LATENCY)


_DCN_BYTES = {"all-reduce": bytes_all_reduce, "reduce-scatter": bytes_reduce_scatter,
              "all-to-all": bytes_all_to_all}


def dcn_traffic(transfers, slices: int, *, unknown_trips: int | None = None, axis="dcn") -> list:
    """The :class:`Traffic` of a program's transfers across slices (``shardlab.programs.slices.dcn_transfers``).

    Each transfer's bytes follow the ring model over ``slices`` chips, one per slice (an all-reduce of
    ``b`` bytes: ``2 (S-1)/S b``; an all-gather of a ``b``-byte piece: ``(S-1) b``), times its trips.
    ``unknown_trips``: the trips to count where the reader found none (a loop XLA peeled, say); ``None``
    raises ``ValueError`` there.
    """
    if isinstance(slices, bool) or not isinstance(slices, (int, np.integer)) or slices < 2:
        raise ValueError(f"dcn_traffic: slices must be an integer of at least 2, got {slices!r}")
    out = []
    for t in transfers:
        trips = t.trips if t.trips is not None else unknown_trips
        if trips is None:
            raise ValueError(f"dcn_traffic: transfer {t.name} sits in a loop of unknown trip count; pass "
                             f"unknown_trips")
        if t.kind == "all-gather":
            sent = bytes_all_gather(t.nbytes * slices, slices)
        elif t.kind in _DCN_BYTES:
            sent = _DCN_BYTES[t.kind](t.nbytes, slices)
        else:
            raise ValueError(f"dcn_traffic: no ring model for a {t.kind!r} across slices")
        out.append(Traffic(float(sent) * trips, axis, trips, t.kind))
    return out


def slice_mesh(mesh, index: int = 0):
    """The part of a multi-slice ``mesh`` on slice ``index``: a mesh with the same axis names over that
    slice's devices (an axis that crosses slices keeps only its part inside the slice)."""
    devices = _mesh_devices(mesh)
    inside = np.vectorize(lambda d: getattr(d, "slice_index", 0) == index)(devices)
    if not inside.any():
        raise ValueError(f"slice_mesh: the mesh has no device of slice {index!r}")
    where = np.argwhere(inside)
    box = tuple(slice(lo, hi + 1) for lo, hi in zip(where.min(axis=0), where.max(axis=0)))
    part = devices[box]
    if not inside[box].all():
        raise ValueError("slice_mesh: the slice's devices do not form a block of the mesh")
    return type(mesh)(part, mesh.axis_names, axis_types=getattr(mesh, "axis_types", None))


def multislice_traffic(program, mesh, *, unknown_trips: int | None = None) -> tuple[list, dict]:
    """Traffic and network of a program compiled for several TPU slices, ready for ``modelled_time``.

    XLA:TPU compiles one slice's program: its ordinary collectives travel on ICI (costed on
    :func:`slice_mesh`, each once per trip of its loops, as :func:`step_traffic` does) and its transfers
    to the multi-slice runtime on DCN (:func:`dcn_traffic`, labelled ``"dcn"``, with
    :func:`dcn_network`). ``unknown_trips`` as for :func:`dcn_traffic`, for both kinds.
    """
    devices = _mesh_devices(mesh)
    slices = len({getattr(d, "slice_index", 0) for d in devices.flat})
    if slices < 2:
        raise ValueError("multislice_traffic: the mesh's devices are all in one slice")
    chip = _slice_and_chip(devices, None)[0]
    part = slice_mesh(mesh)
    # the program's partitions are the slice's chips, in the order of the slice's part of the mesh
    report = program.collectives
    report = CollectiveReport(list(report), num_devices=part.devices.size,
                              device_ids=[d.id for d in part.devices.flat], hlo_text=program.text)
    traffic, network = compiled_traffic(report, part)
    looped = collectives_per_step(program)
    ici = []
    for t, c in zip(traffic, looped):
        trips = c.trips if c.trips is not None else unknown_trips
        if trips is None:
            raise ValueError(f"multislice_traffic: a {c.collective.kind} sits in a loop of unknown trip count; "
                             f"pass unknown_trips")
        ici.append(Traffic(t.nbytes * trips, t.axis, t.count * trips, t.kind))
    dcn = dcn_traffic(dcn_transfers(program), slices, unknown_trips=unknown_trips)
    network = dict(network)
    network["dcn"] = dcn_network(chip, slices)
    return ici + dcn, network
