"""Charts of parts that add up: stacked bars that write their totals, panels of bars sharing labels."""

import matplotlib

matplotlib.use("Agg")
import pytest
from matplotlib.figure import Figure

from shardlab.pictures.display import page_image
from shardlab.pictures.stacked import TEXT_PT, bar_panels, stacked_bar_chart
from shardlab.pictures.style import PHONE_TEXT_PT, SERIES


def test_stacked_bars_add_their_segments_and_write_the_totals():
    ax = Figure().add_subplot()
    stacked_bar_chart(ax, ["a", "b"], {"compute": [1.0, 2.0], "comm": [0.5, 0.0]}, unit="ms")
    bars = ax.patches
    assert [p.get_width() for p in bars] == [1.0, 2.0, 0.5, 0.0]
    assert [p.get_x() for p in bars] == [0.0, 0.0, 1.0, 2.0]  # the second segment starts where the first ends
    assert [matplotlib.colors.to_hex(p.get_facecolor()) for p in bars[::2]] == [SERIES[0].lower(),
                                                                               SERIES[1].lower()]
    assert [t.get_text() for t in ax.texts] == ["1.5 ms", "2 ms"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["compute", "comm"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert ax.yaxis_inverted()  # the first label on top
    assert ax.get_xlim()[1] == pytest.approx(2.0 * 1.3)


def test_large_numbers_are_written_in_full_on_the_axis():
    fig = bar_panels(["a", "b"], [{"title": "bytes", "values": [2_500_000, 1_000_000]}])
    fig.canvas.draw()
    ax = fig.axes[0]
    assert ax.xaxis.get_offset_text().get_text() == ""  # no "1e6" at a smaller size
    assert any("," in t.get_text() for t in ax.get_xticklabels())
    assert page_image(fig).smallest_text_pt >= TEXT_PT - 1e-6


def test_counts_get_whole_ticks():
    fig = bar_panels(["a", "b", "c"], [{"title": "copies", "values": [0, 4, 0]}])
    fig.canvas.draw()
    assert all(float(t).is_integer() for t in fig.axes[0].get_xticks())


def test_notes_replace_the_totals():
    ax = Figure().add_subplot()
    stacked_bar_chart(ax, ["a"], {"x": [3]}, notes=["3 ms, 10 tok/s"], legend=False, xmax=10)
    assert [t.get_text() for t in ax.texts] == ["3 ms, 10 tok/s"]
    assert ax.get_legend() is None and ax.get_xlim()[1] == 10


@pytest.mark.parametrize("kwargs, match", [
    ({"labels": [], "parts": {"x": []}}, "labels"),
    ({"labels": ["a"], "parts": {}}, "parts"),
    ({"labels": ["a"], "parts": {"x": [1, 2]}}, r"parts\['x'\]"),
    ({"labels": ["a"], "parts": {"x": [-1]}}, r"parts\['x'\]"),
    ({"labels": ["a"], "parts": {"x": [float("nan")]}}, r"parts\['x'\]"),
    ({"labels": ["a"], "parts": {"x": [1]}, "colors": ["r", "g"]}, "colors"),
    ({"labels": ["a"], "parts": {"x": [1]}, "notes": []}, "notes"),
    ({"labels": ["a"], "parts": {"x": [1]}, "xmax": 0}, "xmax"),
])
def test_stacked_bars_refuse_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        stacked_bar_chart(Figure().add_subplot(), **kwargs)


def test_panels_share_labels_and_read_on_a_phone():
    fig = bar_panels(["DP", "FSDP"], [
        {"title": "held per device", "values": [4.0, 1.0], "unit": "GB"},
        {"title": "step", "parts": {"compute": [2, 2], "comm": [1, 3]}, "unit": "ms"}])
    top, bottom = fig.axes
    assert [t.get_text() for t in top.texts] == ["4 GB", "1 GB"]
    assert [t.get_text() for t in bottom.texts] == ["3 ms", "5 ms"]
    assert [t.get_text() for t in fig.texts] == ["held per device", "step"]
    assert top.get_position().x0 == bottom.get_position().x0  # the bars start at the same place
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:  # the numbers end inside their panel
        assert all(t.get_window_extent(renderer).x1 <= ax.get_window_extent(renderer).x1 for t in ax.texts)
    for ax in fig.axes:
        assert [t.get_text() for t in ax.get_yticklabels()] == ["DP", "FSDP"]
    image = page_image(fig)
    assert image.smallest_text_pt >= TEXT_PT - 1e-6 > PHONE_TEXT_PT
    assert fig.get_size_inches()[0] == pytest.approx(5.3)
    assert image.width <= 5.4 * 96  # with its margins, whole on a phone


@pytest.mark.parametrize("kwargs, match", [
    ({"labels": [], "panels": [{"values": []}]}, "labels"),
    ({"labels": ["a"], "panels": []}, "panels"),
    ({"labels": ["a"], "panels": {"values": [1]}}, "panels"),
    ({"labels": ["a"], "panels": [{"title": "t"}]}, r"panels\[0\]"),
    ({"labels": ["a"], "panels": [{"values": [1], "parts": {"x": [1]}}]}, r"panels\[0\]"),
    ({"labels": ["a"], "panels": [{"values": [1], "notes": ["n"]}]}, "panels"),
    ({"labels": ["a"], "panels": [{"values": [1]}], "width": 9}, "width"),
])
def test_panels_refuse_bad_input(kwargs, match):
    with pytest.raises(ValueError, match=match):
        bar_panels(**kwargs)
