"""Every exercise hides its answer until the reader asks: on the page, in JupyterLab and in Colab.

The reader's cell (``answer_N = ...``) comes first, then the visible check, then the book's answer in a
cell collapsed with its output on the page (``hide-cell``, behind a toggle that says it is the answer), in
JupyterLab (``jupyter.source_hidden`` and ``outputs_hidden``) and in Colab (``cellView: form`` with an
``@title`` line).
"""

import re

import nbformat
import pytest

from shardlab.setup.exercises import ANSWER_TITLE
from tests.paths import NUMBERED

CHECK = re.compile(r"shardlab\.check\(\s*(answer_\w+)")


def _answer_cells(nb):
    return [(i, c) for i, c in enumerate(nb.cells) if c.cell_type == "code" and c.source.startswith(ANSWER_TITLE)]


@pytest.mark.parametrize("md", NUMBERED, ids=[p.stem for p in NUMBERED])
def test_answers_are_hidden_in_every_frontend(md):
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    answers = _answer_cells(nb)
    assert answers, f"{md.name}: no exercise answer cells (first line {ANSWER_TITLE!r})"
    for i, cell in answers:
        where = f"{md.name}, cell {i}"
        assert "hide-cell" in cell.metadata.get("tags", []), f"{where}: answer needs the hide-cell tag"
        prompts = cell.metadata.get("mystnb", {})
        assert "answer" in prompts.get("code_prompt_show", ""), f"{where}: the page's toggle must say 'answer'"
        assert "answer" in prompts.get("code_prompt_hide", ""), f"{where}: the page's toggle must say 'answer'"
        hidden = cell.metadata.get("jupyter", {})
        assert hidden.get("source_hidden") is True and hidden.get("outputs_hidden") is True, \
            f"{where}: answer needs jupyter.source_hidden and outputs_hidden (JupyterLab)"
        assert cell.metadata.get("cellView") == "form", f"{where}: answer needs cellView: form (Colab)"


@pytest.mark.parametrize("md", NUMBERED, ids=[p.stem for p in NUMBERED])
def test_each_answer_follows_an_unanswered_cell_and_its_check(md):
    nb = nbformat.read(md.with_suffix(".ipynb"), as_version=4)
    for i, cell in _answer_cells(nb):
        found = CHECK.search(cell.source)
        assert found, f"{md.name}, cell {i}: an answer cell must call shardlab.check(answer_N, ...)"
        name = found.group(1)
        before = [c.source for c in nb.cells[:i] if c.cell_type == "code"]
        placeholder = re.compile(rf"^{name} = \.\.\.", re.M)
        slot = [k for k, src in enumerate(before) if placeholder.search(src)]
        assert slot, f"{md.name}: no reader's cell `{name} = ...` before its answer"
        between = [src for src in before[slot[-1] + 1:] if (m := CHECK.search(src)) and m.group(1) == name]
        assert any(not src.startswith(ANSWER_TITLE) for src in between), \
            f"{md.name}: no visible shardlab.check({name}, ...) between the reader's cell and the answer"
        assert all(not src.startswith(ANSWER_TITLE) for src in between), f"{md.name}: two answer cells for {name}"
