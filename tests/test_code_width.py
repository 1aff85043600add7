"""Code that fits the page: no line of a chapter's code cell is wider than the page's code box."""

import re

import pytest

from tests.paths import CHAPTERS

# The code box of today's theme shows about 84 characters at 1366 px (a browser test checks the page).
MAX_CODE_COLUMNS = 84
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```", re.S | re.M)


@pytest.mark.parametrize("md", CHAPTERS, ids=[p.stem for p in CHAPTERS])
def test_code_lines_fit_the_code_box(md):
    text = md.read_text(encoding="utf-8")
    too_wide = []
    for cell in CODE_CELL.finditer(text):
        first = text.count("\n", 0, cell.start(1)) + 1
        body = cell.group(1)
        if body.startswith("---\n"):     # the cell's metadata block is not shown on the page
            end = body.index("\n---\n", 4) + 5
            first += body.count("\n", 0, end)
            body = body[end:]
        too_wide += [f"line {first + k}: {len(line)} columns" for k, line in enumerate(body.splitlines())
                     if len(line) > MAX_CODE_COLUMNS]
    assert too_wide == [], f"{md.name}: {len(too_wide)} code lines wider than {MAX_CODE_COLUMNS}: {too_wide[:10]}"
