"""Memory kinds: which memories a device can address.

A JAX device can address more than one memory: its own (``"device"``: HBM on an
accelerator) and, on most platforms, host RAM seen from that device
(``"pinned_host"``, ``"unpinned_host"``). Which kinds exist depends on the
platform and the JAX version, so every use of a kind starts with
:func:`has_memory_kind`. Where a program places its buffers is read by
:mod:`shardlab.programs.placements`.
"""

from __future__ import annotations

from typing import Iterable

__all__ = ["memory_kinds", "missing_memory_kind", "has_memory_kind"]


# ----------------------------------------------------------------------------------------------
# Which memories a device has
# ----------------------------------------------------------------------------------------------


def _is_device(x) -> bool:
    import jax

    return isinstance(x, jax.Device)


def _devices_of(where) -> list:
    """The devices named by ``where`` (a device, mesh, sharding, array or iterable of devices)."""
    import jax
    from jax.sharding import Mesh, Sharding

    if _is_device(where):
        return [where]
    if isinstance(where, jax.Array):
        where = where.sharding
    if isinstance(where, Mesh):
        return list(where.devices.flat)
    if isinstance(where, Sharding):
        return sorted(where.device_set, key=lambda d: d.id)
    if isinstance(where, (str, bytes)) or not isinstance(where, Iterable):
        raise ValueError(
            "where must be a jax.Device, a Mesh, a Sharding, a jax.Array or a list of devices, "
            f"got {type(where).__name__}"
        )
    devices = list(where)
    if not devices:
        raise ValueError("where must name at least one device, got an empty collection")
    for d in devices:
        if not _is_device(d):
            raise ValueError(f"where must contain only jax.Device objects, found {type(d).__name__}")
    return devices


def memory_kinds(device) -> tuple[str, ...]:
    """The memory kinds ``device`` can address, in the order the runtime lists them.

    On CPU with JAX 0.10 this is ``('device', 'pinned_host', 'unpinned_host')``.
    The default kind (where arrays go when nothing else is asked) is
    ``device.default_memory().kind``.
    """
    if not _is_device(device):
        raise ValueError(f"device must be a jax.Device, got {type(device).__name__}")
    try:
        memories = device.addressable_memories()
    except Exception:  # a backend without memory spaces: only its default memory exists
        try:
            return (device.default_memory().kind,)
        except Exception:
            return ()
    return tuple(m.kind for m in memories)


def missing_memory_kind(where, kind: str) -> str | None:
    """``None`` if every device of ``where`` has memory kind ``kind``; otherwise why not, in words.

    ``where`` is a device, a mesh, a sharding, an array, or a list of devices.
    """
    if not isinstance(kind, str) or not kind:
        raise ValueError(f"kind must be a memory kind name such as 'pinned_host', got {kind!r}")
    for d in _devices_of(where):
        kinds = memory_kinds(d)
        if kind not in kinds:
            have = ", ".join(kinds) or "none listed"
            return f"{d.platform.upper()} device {d.id} has no {kind!r} memory (it has: {have})"
    return None


def has_memory_kind(where, kind: str, *, explain: bool = False) -> bool:
    """Whether every device of ``where`` can address memory kind ``kind``.

    ``where`` is a device, a mesh, a sharding, an array, or a list of devices.
    With ``explain=True`` a missing kind is announced with one printed line
    saying which device lacks it, so that a notebook cell can skip its work
    with a reason instead of failing::

        if shardlab.has_memory_kind(mesh, "pinned_host", explain=True):
            ...
    """
    reason = missing_memory_kind(where, kind)
    if reason is not None and explain:
        print(f"Skipped: {reason}.")
    return reason is None
