"""Compile targets: the chapter's own devices (``"here"``), a TPU slice, or a GPU cluster, by name.

:func:`target_devices` gives a target's devices and :func:`target_mesh` the mesh ``jax.make_mesh`` makes
over them; the TPU slices are in :mod:`shardlab.hardware.tpus`, the GPU clusters in
:mod:`shardlab.hardware.gpus`. Compiling for one and reading the program is :mod:`shardlab.programs.compile`.
"""

from __future__ import annotations

import math

from shardlab.hardware.gpus import GPU_TARGETS, GpuTarget, gpu_devices
from shardlab.hardware.registry import lookup
from shardlab.hardware.tpus import TARGETS, Target, TPUCompilerUnavailable, tpu_compiler_missing, tpu_devices

__all__ = ["HERE", "named_target", "target_devices", "target_mesh"]


#: The chapter's own devices (simulated CPU devices, or the accelerators ``setup_devices`` found).
HERE = "here"


def named_target(value):
    """The target ``value`` is or names: ``"here"``, a :class:`~shardlab.Target` (a key of ``TARGETS``) or
    a :class:`~shardlab.GpuTarget` (a key of ``GPU_TARGETS``)."""
    return lookup(value, "target", (Target, GpuTarget), ("", {HERE: HERE}), ("TPU", TARGETS), ("GPU", GPU_TARGETS))


def target_devices(target) -> list:
    """The devices of ``target``: ``"here"`` (the chapter's devices), a TPU slice named in ``TARGETS``, or a
    GPU cluster named in ``shardlab.GPU_TARGETS`` (``shardlab.hardware.gpus.gpu_devices``; raises
    :class:`~shardlab.GPUCompilerUnavailable` where JAX's CUDA plugin is missing).

    A TPU slice's devices are compile-only descriptions from libtpu: they carry ``id``, ``coords``,
    ``core_on_chip`` and ``device_kind`` like real TPU devices, but hold no memory. Raises
    :class:`TPUCompilerUnavailable` with a one-line reason where libtpu cannot be loaded.
    """
    t = named_target(target)
    if t == HERE:
        import jax

        return list(jax.devices())
    if isinstance(t, GpuTarget):
        return gpu_devices(t)
    missing = tpu_compiler_missing()
    if missing:
        raise TPUCompilerUnavailable(missing)
    return list(tpu_devices(t))


def target_mesh(target, axis_sizes, axis_names, *, axis_types=None):
    """``jax.make_mesh(axis_sizes, axis_names, devices=target_devices(target))``: the order JAX picks there.

    ``axis_types`` defaults to ``Auto`` on every axis. ``make_mesh`` may refuse a shape for a topology
    (its error is JAX's, unchanged).
    """
    import jax
    from jax.sharding import AxisType

    if not isinstance(axis_sizes, (tuple, list)) or not all(isinstance(s, int) and s > 0 for s in axis_sizes):
        raise ValueError(f"target_mesh: axis_sizes must be a tuple of positive integers, got {axis_sizes!r}")
    if not isinstance(axis_names, (tuple, list)) or len(axis_names) != len(axis_sizes) \
            or not all(isinstance(a, str) for a in axis_names):
        raise ValueError(f"target_mesh: axis_names must be a tuple of {len(axis_sizes)} strings (one per size), "
                         f"got {axis_names!r}")
    devices = target_devices(target)
    if axis_types is None:
        axis_types = (AxisType.Auto,) * len(axis_sizes)
    if target == HERE:
        devices = devices[:math.prod(axis_sizes)]
    return jax.make_mesh(tuple(axis_sizes), tuple(axis_names), devices=devices, axis_types=tuple(axis_types))
