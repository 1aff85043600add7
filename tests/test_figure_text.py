"""The check every executed chapter passes (tests/test_notebooks.py): each picture it displays records
its smallest text as displayed, and that is at least 9 pt."""

import nbformat
import pytest

from tests.figure_text import figure_text_sizes, small_figure_text
from tests.notebook_run import execute


def _run(source, tmp_path):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell(source)]
    return execute(nb, cwd=tmp_path)


SETUP = """
import shardlab
shardlab.setup_devices()
from matplotlib.figure import Figure
"""


@pytest.mark.parametrize("width_in, pt, ok", [(6, 9, True), (6, 7, False), (6, 8.9, False),
                                              # 14 in shown in a 688 px column: 12 pt shows as 6.1 pt
                                              (14, 12, False), (14, 18.5, True)])
def test_a_chapter_figure_passes_only_with_9_pt_text_as_displayed(tmp_path, width_in, pt, ok):
    nb = _run(SETUP + f"""
fig = Figure(figsize=({width_in}, 2))
ax = fig.add_axes((0.01, 0.01, 0.98, 0.98), xticks=[], yticks=[])   # its frame spans the figure
ax.text(0.5, 0.5, "a label", fontsize={pt})
fig
""", tmp_path)
    # By hand: the page shows min(96 w, 688) CSS px of a w-inch figure, so text shrinks by that / 96 w.
    shown = pt * min(96 * width_in, 688) / (96 * width_in)
    [(_, what, recorded)] = figure_text_sizes(nb)
    assert what == "figure" and recorded == pytest.approx(shown, rel=0.02)   # up to the crop to what is drawn
    assert (small_figure_text(nb) == []) is ok


def test_pyplot_figures_go_through_the_same_path(tmp_path):
    nb = _run(SETUP + """
import matplotlib.pyplot as plt
plt.figure(figsize=(5, 2))
plt.title("seven points", fontsize=7)
plt.show()
""", tmp_path)
    [(_, what, recorded)] = figure_text_sizes(nb)
    assert what == "figure" and recorded == pytest.approx(7, abs=0.02)
    assert len(small_figure_text(nb)) == 1


def test_a_figure_shown_outside_shardlab_display_path_fails(tmp_path):
    # No setup_devices: matplotlib's own inline display records no text size.
    nb = _run("""
import matplotlib.pyplot as plt
plt.figure(figsize=(5, 2))
plt.title("large enough", fontsize=12)
plt.show()
from IPython.display import HTML
HTML('<img src="data:image/png;base64,iVBORw0KGgo=" width="10">')
""", tmp_path)
    assert [what for _, what, _ in figure_text_sizes(nb)] == ["figure", "html image"]
    assert len(small_figure_text(nb)) == 2 and "no recorded text size" in small_figure_text(nb)[0]


def test_explorers_are_checked_by_the_text_of_their_frames(tmp_path):
    nb = _run(SETUP + """
def draw(fig, size):
    fig.text(0.1, 0.5, "label", fontsize=size)

display(shardlab.explorer({"size": [8, 12]}, draw, figsize=(5, 1)))
shardlab.explorer({"size": [9, 12]}, draw, figsize=(5, 1))
""", tmp_path)
    assert [(what, pt) for _, what, pt in figure_text_sizes(nb)] == [("explorer", 8.0), ("explorer", 9.0)]
    assert len(small_figure_text(nb)) == 1 and "8 pt" in small_figure_text(nb)[0]
