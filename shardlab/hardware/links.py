"""Direct links between TPU chips: where a device's chip sits, and how many links apart two chips are.

A TPU device carries its chip's coordinates on the slice's grid (``device.coords``); chips one step apart
along one grid axis are joined by a direct ICI link. Counted here without the torus's wraparound links,
as on a TPU board. :func:`~shardlab.draw_links` draws them.
"""

from __future__ import annotations

__all__ = ["chip_coords", "hops", "physical_links"]


def chip_coords(device) -> tuple[int, ...]:
    """The grid coordinates of the chip ``device`` is on (``device.coords``); ``ValueError`` if it has none."""
    coords = getattr(device, "coords", None)
    if coords is None:
        raise ValueError(f"device {getattr(device, 'id', device)!r} has no coords: only TPU devices (or stand-ins "
                         "carrying coords) know where their chip sits")
    return tuple(int(c) for c in coords)


def hops(a, b) -> int:
    """Direct links between the chips of devices ``a`` and ``b`` on a grid without wrap-around (0: same chip)."""
    return sum(abs(p - q) for p, q in zip(chip_coords(a), chip_coords(b)))


def physical_links(devices) -> list[tuple[int, int]]:
    """Pairs of device ids (smaller first, sorted) whose chips are one direct link apart, or on one chip.

    Devices are anything with ``id`` and ``coords`` (TPU devices; the book's stand-ins). The grid is taken
    without wrap-around links, as on a TPU board; a torus's closing links are not listed.
    """
    devs = list(devices)
    return sorted((min(a.id, b.id), max(a.id, b.id)) for i, a in enumerate(devs) for b in devs[i + 1:]
                  if hops(a, b) <= 1)
