"""A profiler trace drawn: one step as a timeline, a row per device, compute, collectives, waits and idle time."""

from __future__ import annotations

from shardlab.programs.traces import Trace, step_window

__all__ = ["COLORS", "draw_timeline"]


# ---------------------------------------------------------------------------------------------------------
# The picture


COLORS = {"compute": "#4C72B0", "collective": "#DD8452", "wait": "#C44E52"}


_SCOPE_COLORS = ("#8172B3", "#55A868", "#CCB974", "#DA8BC3", "#937860", "#64B5CD", "#8C8C8C", "#B0C4DE")


_ROW_IN = 0.32


_MAX_W_IN = 7.0


def draw_timeline(trace: Trace, step: int, *, scopes: dict | None = None, width: float = _MAX_W_IN,
                  title: str | None = None):
    """One step of ``trace`` as a timeline: a row per device, its compute ops, its collectives, the
    waits inside them (hatched) and, as white space, its idle time; in milliseconds from the step's
    first op. ``scopes``: ``{op name: scope label}`` (e.g. from :func:`scope_of`), drawn as a band
    above each device's row. Returns the matplotlib Figure (at most 7 in wide, text at 9 pt or more).
    """
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    if not isinstance(trace, Trace):
        raise ValueError(f"draw_timeline: trace must be a Trace (read_trace), got {type(trace).__name__}")
    if scopes is not None and not isinstance(scopes, dict):
        raise ValueError(f"draw_timeline: scopes must be a dict {{op name: scope label}} or None, got {scopes!r}")
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 2 <= width <= _MAX_W_IN:
        raise ValueError(f"draw_timeline: width must be a number of inches from 2 to {_MAX_W_IN}, got {width!r}")
    lo, hi = step_window(trace, step)
    labels = sorted({v for v in (scopes or {}).values() if v})
    color_of = {s: _SCOPE_COLORS[i % len(_SCOPE_COLORS)] for i, s in enumerate(labels)}
    n = len(trace.devices)
    fig, ax = plt.subplots(figsize=(width, 1.5 + _ROW_IN * n * (1.4 if labels else 1.0)))
    pitch = 1.4 if labels else 1.0
    ms = 1e-3
    for row, d in enumerate(trace.devices):
        y = (n - 1 - row) * pitch
        for op in trace.ops_in(step, d):
            ax.broken_barh([((op.start - lo) * ms, op.duration * ms)], (y, 0.8), color=COLORS[op.kind],
                           linewidth=0)
            label = (scopes or {}).get(op.name)
            if label:
                ax.broken_barh([((op.start - lo) * ms, op.duration * ms)], (y + 0.85, 0.3),
                               color=color_of[label], linewidth=0)
        for w in trace.waits_in(step, d):
            ax.broken_barh([((w.start - lo) * ms, w.duration * ms)], (y, 0.8), facecolor=COLORS["wait"],
                           edgecolor="white", hatch="////", linewidth=0)
    ax.set_yticks([(n - 1 - row) * pitch + 0.4 for row in range(n)])
    ax.set_yticklabels([f"{trace.platform} {d}" for d in trace.devices])
    ax.set_xlim(0, (hi - lo) * ms)
    ax.set_ylim(-0.2, (n - 1) * pitch + (1.25 if labels else 0.95))
    ax.set_xlabel("time from the step's first op (ms)")
    ax.spines[["top", "right", "left"]].set_visible(False)
    ax.tick_params(axis="y", length=0)
    if title:
        ax.set_title(title)
    handles = [Patch(color=COLORS["compute"], label="compute"), Patch(color=COLORS["collective"],
               label="collective"), Patch(facecolor=COLORS["wait"], edgecolor="white", hatch="////",
               label="waiting in a collective")]
    handles += [Patch(color=color_of[s], label=s) for s in labels]
    ax.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, frameon=False)
    fig.tight_layout()
    return fig
