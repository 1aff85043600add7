"""Several TPU slices compiled for as one job: their compile-only devices and the hybrid mesh.

``jax.experimental.topologies.get_topology_desc(topology, "tpu", num_slices=S)`` describes the devices
of ``S`` copies of a slice; each carries its ``slice_index`` (0 .. S-1) beside its chip ``coords``
within its slice. ``jax.experimental.mesh_utils.create_hybrid_device_mesh(ici_sizes, dcn_sizes,
devices)`` orders them into a mesh whose axis ``i`` has ``ici_sizes[i] * dcn_sizes[i]`` devices, the
slice being the outer part of each axis: an axis with ``dcn_sizes[i] > 1`` has groups that cross the
data-centre network.
"""

from __future__ import annotations

import math
from functools import lru_cache

from shardlab.hardware.environment import quiet_libtpu, share_libtpu
from shardlab.hardware.tpus import TARGETS, Target, TPUCompilerUnavailable, tpu_compiler_missing

__all__ = ["slice_devices", "hybrid_mesh"]


def _target(target) -> Target:
    if isinstance(target, Target):
        return target
    if isinstance(target, str) and target in TARGETS:
        return TARGETS[target]
    raise ValueError(f"target must be a TPU slice, one of {sorted(TARGETS)}, got {target!r}")


@lru_cache(maxsize=None)
def _devices(target: Target, num_slices: int) -> tuple:
    from jax.experimental import topologies

    extra = {} if target.host_bounds is None else {"chips_per_host_bounds": list(target.host_bounds)}
    share_libtpu()
    with quiet_libtpu():
        return tuple(topologies.get_topology_desc(topology_name=target.topology, platform="tpu",
                                                  num_slices=num_slices, **extra).devices)


def slice_devices(target, num_slices: int) -> list:
    """The compile-only devices of ``num_slices`` copies of the TPU slice ``target`` (a key of
    ``shardlab.TARGETS``), each with its ``slice_index``. Raises :class:`~shardlab.TPUCompilerUnavailable`
    where libtpu cannot be loaded."""
    t = _target(target)
    if isinstance(num_slices, bool) or not isinstance(num_slices, int) or num_slices < 1:
        raise ValueError(f"slice_devices: num_slices must be a positive integer, got {num_slices!r}")
    missing = tpu_compiler_missing()
    if missing:
        raise TPUCompilerUnavailable(missing)
    return list(_devices(t, num_slices))


def hybrid_mesh(target, ici_sizes, dcn_sizes, axis_names, *, axis_types=None):
    """A mesh over ``prod(dcn_sizes)`` slices of ``target``: axis ``i`` has ``ici_sizes[i] * dcn_sizes[i]``
    devices, the slices outermost (``mesh_utils.create_hybrid_device_mesh``). ``ici_sizes`` must
    multiply to the chips of one slice. ``axis_types`` defaults to ``Auto`` on every axis.
    """
    import jax
    from jax.experimental import mesh_utils
    from jax.sharding import AxisType

    t = _target(target)
    for name, sizes in (("ici_sizes", ici_sizes), ("dcn_sizes", dcn_sizes)):
        if not isinstance(sizes, (tuple, list)) or not sizes or not all(
                isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in sizes):
            raise ValueError(f"hybrid_mesh: {name} must be a tuple of positive integers, got {sizes!r}")
    if len(ici_sizes) != len(dcn_sizes):
        raise ValueError(f"hybrid_mesh: ici_sizes and dcn_sizes must have one entry per axis, got "
                         f"{ici_sizes!r} and {dcn_sizes!r}")
    if math.prod(ici_sizes) != t.num_chips:
        raise ValueError(f"hybrid_mesh: ici_sizes must multiply to the {t.num_chips} chips of one {t.name}, "
                         f"got {ici_sizes!r}")
    if not isinstance(axis_names, (tuple, list)) or len(axis_names) != len(ici_sizes):
        raise ValueError(f"hybrid_mesh: axis_names must be a tuple of {len(ici_sizes)} names, got {axis_names!r}")
    devices = slice_devices(t, math.prod(dcn_sizes))
    grid = mesh_utils.create_hybrid_device_mesh(tuple(ici_sizes), tuple(dcn_sizes), devices)
    if axis_types is None:
        axis_types = (AxisType.Auto,) * len(ici_sizes)
    return jax.sharding.Mesh(grid, tuple(axis_names), axis_types=tuple(axis_types))
