"""A hand-written ring kernel drawn step by step: each device's DMAs, products and semaphore operations.

The picture takes the events as data (objects with ``device``, ``step``, ``kind``, ``label`` and ``peer``,
as ``shardlab.parallelism.pallas_collectives.ring_events`` lists them); it never runs or compiles.
"""

from __future__ import annotations

from shardlab.pictures.draw import ShardFigure
from shardlab.pictures.style import PHONE_WIDTH_IN, SERIES

__all__ = ["EVENT_KINDS", "draw_dma_timeline"]

#: What an event can be, and how it is drawn.
EVENT_KINDS = ("dma", "compute", "wait", "signal")

_DMA, _COMPUTE, _WAIT, _SIGNAL = SERIES[1], SERIES[2], SERIES[7], SERIES[4]


def draw_dma_timeline(events, *, devices=(0, 1, 2), title: str | None = None, width: float = PHONE_WIDTH_IN):
    """One lane pair per device in ``devices``: the DMA it starts at each step (orange, the block's
    name and its destination) and the product or addition it computes (green; no lane where nothing is
    computed); each semaphore wait is a black tick (at the step's end: the receive; at its start: the right neighbour's "free"), each
    signal to the left neighbour a purple triangle. Steps, not time: the picture shows order and
    which step overlaps what, read from the kernel's structure. Returns the figure (text 10 pt)."""
    events = list(events)
    for i, e in enumerate(events):
        if not all(hasattr(e, a) for a in ("device", "step", "kind", "label")) or e.kind not in EVENT_KINDS:
            raise ValueError(f"draw_dma_timeline: events[{i}] must have device, step, kind (one of "
                             f"{', '.join(EVENT_KINDS)}) and label, got {e!r}")
    if not events:
        raise ValueError("draw_dma_timeline: events must list at least one event")
    devices = list(devices)
    known = {e.device for e in events}
    if not devices or any(d not in known for d in devices):
        raise ValueError(f"draw_dma_timeline: devices must be some of the events' devices {sorted(known)}, "
                         f"got {devices!r}")
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 3 <= width <= PHONE_WIDTH_IN:
        raise ValueError(f"draw_dma_timeline: width must be from 3 to {PHONE_WIDTH_IN} inches, got {width!r}")
    steps = max(e.step for e in events) + 1
    computes = any(e.kind == "compute" for e in events)
    lanes = 2 if computes else 1
    pitch = 2.6 if computes else 1.5
    bottom, top = 0.95, 0.15 + (0.35 if title else 0)
    height = bottom + top + 0.55 * len(devices) * lanes
    fig = ShardFigure(figsize=(width, height))
    ax = fig.add_axes((1.45 / width, bottom / height, 1 - 1.55 / width, 1 - (bottom + top) / height))
    ticks, names = [], []
    for row, d in enumerate(devices):
        base = (len(devices) - 1 - row) * pitch
        y_dma, y_compute = (base + 1.2, base) if computes else (base, None)
        ticks += [y_dma + 0.5] + ([y_compute + 0.5] if computes else [])
        names += [f"dev {d}: DMA"] + ([f"dev {d}: compute"] if computes else [])
        for e in (e for e in events if e.device == d):
            if e.kind == "dma":
                ax.broken_barh([(e.step + 0.04, 0.92)], (y_dma, 1.0), color=_DMA)
                ax.text(e.step + 0.5, y_dma + 0.5, f"{e.label}→{e.peer}", ha="center", va="center",
                        fontsize=10, color="black")
            elif e.kind == "compute":
                ax.broken_barh([(e.step + 0.04, 0.92)], (y_compute, 1.0), color=_COMPUTE)
                ax.text(e.step + 0.5, y_compute + 0.5, e.label, ha="center", va="center", fontsize=10,
                        color="black")
            elif e.kind == "wait":
                at = e.step + (0.02 if e.label == "free" else 0.98)
                ax.plot([at, at], [y_dma - 0.1, y_dma + 1.1], color=_WAIT, lw=2.5, solid_capstyle="butt")
            else:
                ax.plot([e.step + 0.98], [y_dma + 1.22], marker="v", color=_SIGNAL, markersize=7,
                        clip_on=False)
    ax.set_xlim(0, steps)
    ax.set_ylim(-0.3, (len(devices) - 1) * pitch + (2.5 if computes else 1.4))
    ax.set_xticks([s + 0.5 for s in range(steps)], [str(s) for s in range(steps)], fontsize=10)
    ax.set_yticks(ticks, names, fontsize=10)
    ax.tick_params(length=0)
    for side in ("top", "right", "left"):
        ax.spines[side].set_visible(False)
    ax.set_xlabel("ring step", fontsize=10)
    handles, names = [ax.plot([], [], color=_WAIT, lw=2.5)[0]], ["wait on a semaphore"]
    if any(e.kind == "signal" for e in events):
        handles.append(ax.plot([], [], marker="v", ls="", color=_SIGNAL, markersize=7)[0])
        names.append("signal the left neighbour")
    fig.legend(handles, names, loc="lower center", ncol=2, fontsize=10, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    if title:
        fig.suptitle(title, fontsize=10, fontweight="bold", y=0.985)
    return fig
