"""Charts of parts that add up: horizontal bars made of segments (a step's time as compute, then
communication; a device's memory as parameters, optimizer state, temporaries), and a figure of bar
charts one above the other that share their labels, where a reader compares several numbers per row.

Both write their numbers on the bars, so a chart replaces a table; both use the book's style
(``shardlab.pictures.style``) and, at their default width, read on a phone without scrolling.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from shardlab.pictures.style import PHONE_WIDTH_IN, SERIES, bar_chart, tidy_axes

__all__ = ["stacked_bar_chart", "bar_panels", "TEXT_PT"]

TEXT_PT = 10.0        # every text of these charts: readable on a phone at PHONE_WIDTH_IN
_BAR_IN = 0.34        # height of one bar's row, in inches
_TITLE_IN = 0.3       # a panel's title row
_LEGEND_IN = 0.28     # a row for the legend of stacked bars
_AXIS_IN = 0.34       # the x axis' ticks under the bars
_MEASURE_DPI = 192    # the page's pixels per inch (shardlab.pictures.display: 2 x 96)


def _numbers(name: str, values, count: int | None = None) -> list[float]:
    out = [float(v) for v in values]
    if count is not None and len(out) != count:
        raise ValueError(f"{name}: expected {count} values (one per label), got {len(out)}")
    if any(not math.isfinite(v) or v < 0 for v in out):
        raise ValueError(f"{name}: expected finite numbers >= 0 (bar lengths), got {out}")
    return out


def stacked_bar_chart(ax, labels: Sequence[str], parts: Mapping[str, Sequence[float]], *, unit: str = "",
                      fmt: str = "{:.3g}", colors: Sequence[str] | None = None,
                      notes: Sequence[str] | None = None, title: str = "", legend: bool = True,
                      xmax: float | None = None) -> None:
    """Horizontal bars, one per label, top to bottom in the given order, each made of the segments
    ``parts`` (``{segment name: one value per label}``, drawn left to right in the mapping's order), with
    the bar's total written at its end (``fmt``, then ``unit``), or ``notes[i]`` in its place.

    colors: one per segment (default: the book's series colours in order); legend: the segments' names
    in one row above the bars; xmax: the axis' end (default: room for the longest bar and its text)."""
    labels = [str(label) for label in labels]
    if not labels:
        raise ValueError("labels: expected at least one bar")
    if not isinstance(parts, Mapping) or not parts:
        raise ValueError(f"parts: expected a mapping {{segment name: values}} with at least one segment, "
                         f"got {parts!r}")
    segments = {str(name): _numbers(f"parts[{name!r}]", values, len(labels)) for name, values in parts.items()}
    if colors is None:
        if len(segments) > len(SERIES):
            raise ValueError(f"colors: give one per segment beyond the {len(SERIES)} series colours")
        colors = SERIES[:len(segments)]
    if len(colors) != len(segments):
        raise ValueError(f"colors: expected one per segment ({len(segments)}), got {len(colors)}")
    if notes is not None and len(notes) != len(labels):
        raise ValueError(f"notes: expected one per label ({len(labels)}), got {len(notes)}")
    if xmax is not None and not (isinstance(xmax, (int, float)) and math.isfinite(xmax) and xmax > 0):
        raise ValueError(f"xmax: expected a positive number, got {xmax!r}")
    y = list(range(len(labels)))
    left = [0.0] * len(labels)
    for (name, values), color in zip(segments.items(), colors):
        ax.barh(y, values, left=left, color=color, height=0.62, label=name)
        left = [a + b for a, b in zip(left, values)]
    top = max(left) or 1.0
    for yi, total in zip(y, left):
        text = notes[yi] if notes is not None else fmt.format(total) + (f" {unit}" if unit else "")
        ax.text(total + 0.015 * top, yi, str(text), va="center", ha="left", fontsize=TEXT_PT)
    ax.set_yticks(y, labels)
    ax.set_ylim(len(labels) - 0.5, -0.5)
    ax.set_xlim(0, xmax if xmax is not None else top * 1.3)
    if unit:
        ax.set_xlabel(unit, fontsize=TEXT_PT)
    if legend:
        ax.legend(loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(segments), frameon=False,
                  fontsize=TEXT_PT, handlelength=1.2, columnspacing=1.2, borderaxespad=0.2)
    if title:
        ax.set_title(title, loc="left", fontsize=TEXT_PT + 1, pad=22 if legend else 6)
    ax.tick_params(axis="y", length=0)
    ax.tick_params(labelsize=TEXT_PT)
    tidy_axes(ax, grid="x")
    _plain_ticks(ax)


def bar_panels(labels: Sequence[str], panels: Sequence[Mapping], *, width: float = PHONE_WIDTH_IN - 0.1):
    """A figure of bar charts one above the other, all with the same ``labels``: one per entry of
    ``panels``, each a mapping with a ``"title"`` and either ``"values"`` (one bar per label, drawn by
    ``bar_chart``; also ``unit``, ``fmt``, ``colors``, ``highlight``) or ``"parts"`` (segments, drawn by
    ``stacked_bar_chart``; also ``unit``, ``fmt``, ``colors``, ``notes``, ``xmax``, ``legend``). Each
    panel's x range is widened until the numbers at the bars' ends fit inside it; a title (bold, 11 pt)
    must fit the width, about 60 characters at 5.3 inches. Returns the matplotlib Figure (``width``
    inches wide, by default a little under the widest that a phone shows whole with its margins; its
    text is 10 pt)."""
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    labels = [str(label) for label in labels]
    if not labels:
        raise ValueError("labels: expected at least one bar")
    if isinstance(panels, Mapping) or not panels:
        raise ValueError("panels: expected a sequence of at least one mapping with a title and values or parts")
    if isinstance(width, bool) or not isinstance(width, (int, float)) or not 2 <= width <= 7:
        raise ValueError(f"width: expected a number of inches from 2 to 7, got {width!r}")
    kinds = []
    for i, panel in enumerate(panels):
        if not isinstance(panel, Mapping) or ("values" in panel) == ("parts" in panel):
            raise ValueError(f"panels[{i}]: expected a mapping with 'values' or 'parts' (not both)")
        kind = "values" if "values" in panel else "parts"
        allowed = ({"unit", "fmt", "colors", "highlight"} if kind == "values"
                   else {"unit", "fmt", "colors", "notes", "xmax", "legend"})
        unknown = set(panel) - allowed - {"title", kind}
        if unknown:
            raise ValueError(f"panels[{i}]: unknown keys {sorted(unknown)} for "
                             f"{'a bar chart' if kind == 'values' else 'stacked bars'}")
        kinds.append(kind)
    # Inches, top to bottom: per panel a title row, a legend row (stacked bars), the bars, the x axis.
    rows = [(_TITLE_IN if panel.get("title") else 0.1,
             _LEGEND_IN if kind == "parts" and panel.get("legend", True) else 0.0,
             _BAR_IN * len(labels)) for panel, kind in zip(panels, kinds)]
    height = sum(t + g + b + _AXIS_IN for t, g, b in rows)
    # Measured at the pixel density of the page (text widths do not scale exactly with the dpi).
    fig = Figure(figsize=(width, height), dpi=_MEASURE_DPI)
    FigureCanvasAgg(fig)
    top, axes = height, []
    for (t, g, b), panel, kind in zip(rows, panels, kinds):
        if panel.get("title"):
            fig.text(0.02 / width, (top - 0.04) / height, str(panel["title"]), ha="left", va="top",
                     fontsize=TEXT_PT + 1, fontweight="bold")
        ax = fig.add_axes((0.3, (top - t - g - b) / height, 0.65, b / height))
        options = {k: v for k, v in panel.items() if k not in ("title", kind)}
        if kind == "values":
            bar_chart(ax, labels, panel["values"], **options)
            for text in ax.texts:
                text.set_fontsize(TEXT_PT)
            ax.tick_params(labelsize=TEXT_PT)
        else:
            stacked_bar_chart(ax, labels, panel["parts"], **options)
        ax.set_xlabel("")
        axes.append(ax)
        top -= t + g + b + _AXIS_IN
    # The labels' width sets where the bars start: the same in every panel.
    renderer = fig.canvas.get_renderer()
    widest = max(label.get_window_extent(renderer).width for ax in axes for label in ax.get_yticklabels())
    left = (widest / fig.dpi + 0.14) / width
    for ax in axes:
        x0, y0, _, h = ax.get_position().bounds
        ax.set_position((left, y0, 1 - left - 0.2 / width, h))  # room for the last tick label
    for ax, panel in zip(axes, panels):
        if panel.get("xmax") is None:
            _fit_texts(ax)
        _plain_ticks(ax)
    fig.set_dpi(matplotlib.rcParams["figure.dpi"])
    return fig


def _plain_ticks(ax) -> None:
    """At most five x ticks, written in full with thousands separators (no "1e6" offset text, which
    would be smaller than the chart's text); whole numbers only where every bar is a count."""
    from matplotlib.ticker import FuncFormatter, MaxNLocator

    top = ax.get_xlim()[1]
    counts = bool(ax.patches) and all(float(p.get_width()).is_integer() for p in ax.patches)
    ax.xaxis.set_major_locator(MaxNLocator(nbins=4, integer=counts))
    ax.xaxis.set_major_formatter(FuncFormatter(
        (lambda v, _: f"{v:,.0f}") if top >= 10 else (lambda v, _: f"{v:g}")))


def _fit_texts(ax) -> None:
    """Widen ``ax``'s x range so that the text written at each bar's end ends inside the axes."""
    renderer = ax.figure.canvas.get_renderer()
    box = ax.get_window_extent(renderer)
    lo, hi = ax.get_xlim()
    needed = hi
    for t in ax.texts:
        if t.get_ha() != "left" or t.get_transform() != ax.transData:
            continue
        text_width = t.get_window_extent(renderer).width + 0.03 * ax.figure.dpi  # and a margin
        if text_width < 0.8 * box.width:
            needed = max(needed, lo + (t.get_position()[0] - lo) * box.width / (box.width - text_width))
    ax.set_xlim(lo, needed)
