"""Every chapter reads in one sitting: at most PROSE_LIMIT words of prose a reader meets without opening a note.

Counted: Markdown text outside code cells, fenced blocks and collapsed notes (a `{dropdown}` directive or one
with `:class: dropdown`); headings, tables and exercises count. A word is a token holding a letter or digit.
"""

import re

import pytest

from tests.paths import NUMBERED

PROSE_LIMIT = 3500
FENCE = re.compile(r"^(`{3,}|~{3,})")
DIRECTIVE = re.compile(r"^(:{3,})\{([\w-]+)\}")


def prose_words(text: str) -> int:
    lines = text.splitlines()
    i = lines.index("---", 1) + 1 if lines and lines[0].strip() == "---" else 0   # front matter
    words = 0
    while i < len(lines):
        s = lines[i].strip()
        fence = FENCE.match(s)
        if fence:   # a code cell or any fenced block: skip to its closing fence
            i += 1
            while i < len(lines) and lines[i].strip() != fence.group(1):
                i += 1
            i += 1
            continue
        directive = DIRECTIVE.match(s)
        if directive:
            mark, end = directive.group(1), i + 1
            collapsed = directive.group(2) == "dropdown"
            while end < len(lines) and lines[end].strip() != mark:
                collapsed |= bool(re.match(r":class:.*\bdropdown\b", lines[end].strip()))
                end += 1
            i = end + 1 if collapsed else i + 1   # a shown admonition's body is read
            continue
        if not (s.startswith(("+++", ":")) or re.fullmatch(r"\(.+\)=", s)):
            words += sum(1 for token in s.split() if re.search(r"[A-Za-z0-9]", token))
        i += 1
    return words


def test_the_count_skips_code_and_collapsed_notes_and_reads_shown_ones():
    page = "\n".join([
        "---", "jupytext: x", "---", "(label)=", "# A title",
        "One two three.",
        "```{code-cell} ipython3", "print('not prose at all')", "```",
        ":::{admonition} Shown note", "Four five.", ":::",
        ":::{admonition} Collapsed note", ":class: dropdown", "Not counted here.", ":::",
        "::::{dropdown} Also collapsed", "Nor here.", "::::",
        "| six | — | seven |",
    ])
    # "A title" 2, "One two three." 3, the shown note's title line is a directive (0) and its body 2,
    # the table 2 (the dash holds no letter or digit).
    assert prose_words(page) == 9


@pytest.mark.parametrize("md", NUMBERED, ids=[p.stem for p in NUMBERED])
def test_chapter_prose_fits_one_sitting(md):
    words = prose_words(md.read_text(encoding="utf-8"))
    assert words <= PROSE_LIMIT, \
        f"{md.name}: {words} words of prose outside collapsed notes (at most {PROSE_LIMIT})"
