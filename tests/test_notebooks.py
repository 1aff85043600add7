"""Every chapter executed top to bottom; each success is kept for the book build to reuse."""

import importlib.util

import nbformat
import pytest
from jupyter_cache import get_cache

from tests.figure_text import small_figure_text
from tests.notebook_run import execute, read_chapter
from tests.paths import CACHE, CHAPTERS, EXECUTED, HAND_TO_BOOK


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_executes(md):
    nb = execute(read_chapter(md), cwd=md.parent)
    if importlib.util.find_spec("libtpu") is not None:   # here every TPU cell must compile, not skip
        skipped = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "code"
                   and any("No TPU compiler here" in o.get("text", "") for o in c.get("outputs", []))]
        assert skipped == [], f"TPU cells skipped although libtpu is installed: {skipped}"
    if importlib.util.find_spec("jax_plugins") and importlib.util.find_spec("jax_plugins.xla_cuda12"):
        skipped = [c.source.splitlines()[0] for c in nb.cells if c.cell_type == "code"
                   and any("No GPU compiler here" in o.get("text", "") for o in c.get("outputs", []))]
        assert skipped == [], f"GPU cells skipped although JAX's CUDA plugin is installed: {skipped}"
    # Every picture's text is at least 9 pt as the page displays it, and every picture records it.
    assert small_figure_text(nb) == [], f"{md.stem}: figure text too small or unrecorded"
    # The book build reuses this execution only if it hashes like the chapter it reads itself.
    cache = get_cache(str(CACHE))
    assert cache.create_hashed_notebook(nb)[1] == cache.create_hashed_notebook(read_chapter(md))[1]
    if HAND_TO_BOOK:
        EXECUTED.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, EXECUTED / f"{md.stem}.ipynb")


def test_deprecation_warnings_fail_a_chapter(tmp_path):
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell("import warnings\nwarnings.warn('old API', DeprecationWarning)")]
    from nbclient.exceptions import CellExecutionError

    with pytest.raises(CellExecutionError, match="DeprecationWarning"):
        execute(nb, cwd=tmp_path)


def _chapter_like(source):
    # As in a chapter: shardlab is imported by the set-up cell, checks come in later cells.
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3", "language": "python",
                                                           "display_name": "Python 3"}})
    nb.cells = [nbformat.v4.new_code_cell("import numpy as np, shardlab"), nbformat.v4.new_code_cell(source)]
    return nb


def test_a_check_that_depends_on_round_off_fails_a_chapter(tmp_path):
    from nbclient.exceptions import CellExecutionError

    exact = "shardlab.check(np.array([1.0, 8e-5]), np.array([1.0, 8e-5]), rtol=0)"
    with pytest.raises(CellExecutionError, match="float32 round-off"):
        execute(_chapter_like(exact), cwd=tmp_path)
    scaled = exact.replace("rtol=0", "rtol=1e-5")
    nb = execute(_chapter_like(scaled), cwd=tmp_path)
    assert nb.cells[1].outputs[0]["text"] == "Correct.\n"   # printed once, by the check itself
