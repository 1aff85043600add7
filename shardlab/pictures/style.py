"""The book's figure style: one palette for compared series, integer ticks on counted axes, text sizes
that stay readable on a phone, and bar charts where a reader compares numbers.

A figure at most ``PHONE_WIDTH_IN`` wide whose text is at least ``PHONE_TEXT_PT`` is readable on a phone
without scrolling: shown 358 CSS px wide (a 390 px screen's column), its smallest text is still 9 CSS px.
Wider figures are shown at their designed size on a phone and scroll sideways inside their own box.
Device colours are not here: a device has one colour everywhere (``shardlab.pictures.draw.device_color``).
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["SERIES", "MUTED", "PHONE_WIDTH_IN", "PHONE_TEXT_PT", "STYLE_RC", "style_rc", "integer_ticks",
           "tidy_axes", "bar_chart"]

#: The colours of compared series, in order. They are Okabe and Ito's eight, told apart with every
#: common colour-vision deficiency (black last).
SERIES: tuple[str, ...] = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442",
                           "#000000")
MUTED = "#9a9a9a"            # what a chart shows for context (a baseline, the rest of a step)
PHONE_COLUMN_PX = 358        # the text column on a phone 390 CSS px wide (measured in Chromium)
PHONE_WIDTH_IN = 5.4         # the widest figure that needs no sideways scrolling on a phone ...
PHONE_TEXT_PT = 9.0 * PHONE_WIDTH_IN * 96 / PHONE_COLUMN_PX * 72 / 96   # ... with text at least this size (9.8 pt)

# Applied to every figure with the text sizes of shardlab.pictures.display.FIGURE_RC.
STYLE_RC = {
    "axes.prop_cycle": None,          # filled in below (a cycler is built lazily: matplotlib is heavy)
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.titleweight": "bold",
    "axes.edgecolor": "#555555",
    "axes.labelcolor": "#222222",
    "xtick.color": "#444444",
    "ytick.color": "#444444",
    "grid.color": "#e3e3e3",
    "grid.linewidth": 0.8,
    "legend.frameon": False,
    "figure.facecolor": "white",
    "savefig.facecolor": "white",
}


def style_rc() -> dict:
    """STYLE_RC with its colour cycle built."""
    from cycler import cycler

    return {**STYLE_RC, "axes.prop_cycle": cycler(color=list(SERIES))}


def integer_ticks(ax, axis: str = "both") -> None:
    """Ticks at whole numbers only on ``axis`` ("x", "y" or "both"): steps, devices, stages, layers."""
    from matplotlib.ticker import MaxNLocator

    if axis not in ("x", "y", "both"):
        raise ValueError(f"axis: expected 'x', 'y' or 'both', got {axis!r}")
    for name in ("x", "y") if axis == "both" else (axis,):
        getattr(ax, f"{name}axis").set_major_locator(MaxNLocator(integer=True))


def tidy_axes(ax, *, grid: str | None = "x") -> None:
    """The book's axes: no top or right frame, light grid lines behind the data along ``grid``
    ("x", "y", "both" or None)."""
    if grid not in ("x", "y", "both", None):
        raise ValueError(f"grid: expected 'x', 'y', 'both' or None, got {grid!r}")
    ax.spines[["top", "right"]].set_visible(False)
    ax.set_axisbelow(True)
    if grid:
        ax.grid(True, axis=grid)


def bar_chart(ax, labels: Sequence[str], values: Sequence[float], *, unit: str = "", fmt: str = "{:.3g}",
              colors: Sequence[str] | None = None, highlight: int | None = None, title: str = "") -> None:
    """Horizontal bars, one per label, top to bottom in the given order, each with its value written at
    its end (a reader compares lengths and reads the number without a table).

    unit: written after each value and under the axis; fmt: the value's format; colors: one per bar
    (default: the first series colour); highlight: the index of the bar drawn in the second series colour
    (the one the text talks about)."""
    labels, values = [str(label) for label in labels], [float(v) for v in values]
    if not labels or len(labels) != len(values):
        raise ValueError(f"labels, values: expected the same positive number of each, got {len(labels)} "
                         f"and {len(values)}")
    if any(v < 0 for v in values) or not all(v == v for v in values):
        raise ValueError("values: expected numbers >= 0 (bar lengths)")
    if colors is not None and len(colors) != len(values):
        raise ValueError(f"colors: expected one per bar ({len(values)}), got {len(colors)}")
    if highlight is not None and not (isinstance(highlight, int) and 0 <= highlight < len(values)):
        raise ValueError(f"highlight: expected a bar index from 0 to {len(values) - 1}, got {highlight!r}")
    shown = list(colors) if colors is not None else [SERIES[0]] * len(values)
    if highlight is not None:
        shown[highlight] = SERIES[1]
    y = list(range(len(values)))
    ax.barh(y, values, color=shown, height=0.62)
    ax.set_yticks(y, labels)
    ax.invert_yaxis()
    top = max(values) or 1.0
    for yi, v in zip(y, values):
        ax.text(v + 0.015 * top, yi, fmt.format(v) + (f" {unit}" if unit else ""), va="center", ha="left")
    ax.set_xlim(0, top * 1.25)
    if unit:
        ax.set_xlabel(unit)
    if title:
        ax.set_title(title)
    ax.tick_params(axis="y", length=0)
    tidy_axes(ax, grid="x")

