"""The book's figure style: integer ticks, tidy axes, bar charts that say their numbers, phone widths."""

import math

import matplotlib

matplotlib.use("Agg")
import pytest
from matplotlib.figure import Figure

from shardlab.pictures.display import (CSS_PX_PER_INCH, MIN_PHONE_TEXT_PX, PHONE_COLUMN_PX, phone_width,
                                       text_attributes)
from shardlab.pictures.style import PHONE_TEXT_PT, PHONE_WIDTH_IN, SERIES, bar_chart, integer_ticks, tidy_axes


def test_integer_ticks_only_whole_numbers():
    fig = Figure()
    ax = fig.add_subplot()
    ax.plot([0, 1, 2, 3], [0.0, 0.4, 0.8, 1.2])
    ax.set_xlim(0, 3)
    fig.canvas.draw()
    assert any(t % 1 for t in ax.get_xticks())  # matplotlib's own choice has halves here
    integer_ticks(ax, "x")
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in ax.get_xticks())
    with pytest.raises(ValueError, match="axis"):
        integer_ticks(ax, "z")


def test_bar_chart_writes_each_value_and_highlights_one():
    fig = Figure()
    ax = fig.add_subplot()
    bar_chart(ax, ["a", "b", "c"], [1.0, 2.5, 0.25], unit="ms", highlight=1)
    assert [t.get_text() for t in ax.texts] == ["1 ms", "2.5 ms", "0.25 ms"]
    widths = [p.get_width() for p in ax.patches]
    assert widths == [1.0, 2.5, 0.25]
    assert matplotlib.colors.to_hex(ax.patches[1].get_facecolor()) == SERIES[1].lower()
    assert matplotlib.colors.to_hex(ax.patches[0].get_facecolor()) == SERIES[0].lower()
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b", "c"]
    assert ax.yaxis_inverted()  # the first label on top


@pytest.mark.parametrize("kwargs, match", [
    ({"labels": ["a"], "values": [1, 2]}, "labels, values"),
    ({"labels": [], "values": []}, "labels, values"),
    ({"labels": ["a"], "values": [-1]}, "values"),
    ({"labels": ["a"], "values": [1], "colors": ["r", "g"]}, "colors"),
    ({"labels": ["a"], "values": [1], "highlight": 1}, "highlight"),
])
def test_bar_chart_refuses_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bar_chart(Figure().add_subplot(), **kwargs)


def test_tidy_axes_refuses_an_unknown_grid():
    ax = Figure().add_subplot()
    tidy_axes(ax, grid="y")
    assert not ax.spines["top"].get_visible() and ax.spines["left"].get_visible()
    with pytest.raises(ValueError, match="grid"):
        tidy_axes(ax, grid="diagonal")


def _phone_text_px(width, pt, shown):
    return pt * CSS_PX_PER_INCH / 72 * shown / width


@pytest.mark.parametrize("width, pt", [(688, 9.0), (688, 12.0), (500, 9.0), (300, 9.0), (688, 6.5)])
def test_phone_width_keeps_the_smallest_text_readable(width, pt):
    shown = phone_width(width, pt) or min(width, PHONE_COLUMN_PX)
    assert _phone_text_px(width, pt, shown) >= MIN_PHONE_TEXT_PX - 1e-9 or shown == width
    # and no wider than needed: a pixel less would be too small (unless the column already fits it)
    if phone_width(width, pt) and shown < width:
        assert _phone_text_px(width, pt, shown - 1) < MIN_PHONE_TEXT_PX


def test_phone_width_only_where_the_column_is_too_narrow():
    assert phone_width(300, 9.0) is None           # fits the phone's column as designed
    assert phone_width(688, math.inf) is None      # no text
    assert phone_width(688, 9.0) == 516            # 9 pt = 12 px as designed; 9 px needs 3/4 of 688
    assert 'data-smallest-text-pt="none"' in text_attributes(688, math.inf)
    assert "--phone-width:516px" in text_attributes(688, 9.0)


def test_the_phone_safe_figure_size_is_consistent():
    # A figure PHONE_WIDTH_IN wide with PHONE_TEXT_PT text, shown in the phone's column, has 9 px text.
    width = PHONE_WIDTH_IN * CSS_PX_PER_INCH
    assert _phone_text_px(width, PHONE_TEXT_PT, PHONE_COLUMN_PX) == pytest.approx(MIN_PHONE_TEXT_PX)
    assert phone_width(round(width), PHONE_TEXT_PT + 0.01) is None
    assert phone_width(round(width), PHONE_TEXT_PT - 0.5) is not None
