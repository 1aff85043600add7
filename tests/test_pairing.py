"""Every chapter's .md source has an .ipynb twin that jupytext --sync leaves unchanged."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.paths import CHAPTERS, ROOT


def test_the_chapters_are_found():
    # The tests below run once per chapter: with none found they would all vanish, and the run stay green.
    # Every notebook the table of contents names is one of them.
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text())
    named = {c["file"] for part in toc["parts"] for c in part["chapters"] if c["file"].startswith("notebooks/")}
    assert named and named == {f"notebooks/{md.stem}" for md in CHAPTERS}


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_chapter_has_a_synced_ipynb_twin(md, tmp_path):
    twin = md.with_suffix(".ipynb")
    assert twin.exists(), f"{md.name} has no paired {twin.name}: run `make sync`"
    for f in (md, twin):
        shutil.copy2(f, tmp_path / f.name)
    jupytext = Path(sys.executable).parent / "jupytext"
    subprocess.run([str(jupytext), "--sync", "--quiet", str(tmp_path / md.name)], check=True,
                   capture_output=True)
    for f in (md, twin):
        assert (tmp_path / f.name).read_bytes() == f.read_bytes(), \
            f"jupytext --sync would change {f.name}: run `make sync`"


def test_every_chapter_is_in_the_table_of_contents():
    toc = (ROOT / "_toc.yml").read_text()
    for md in CHAPTERS:
        assert f"notebooks/{md.stem}" in toc, f"{md.name} is missing from _toc.yml"


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_install_cell_uses_the_configured_repository(md):
    url = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"]
    first_code = md.read_text().split("```{code-cell}", 1)[1].split("```", 1)[0]
    assert f'"git+{url}"' in first_code, f"{md.name}: the install cell must install from {url}"
    assert "shardlab.setup_devices(" in first_code
