"""markdown_table: the page's tables, read back by a Markdown parser (markdown-it, which renders the book)."""

import pytest
from markdown_it import MarkdownIt

from shardlab import markdown_table


def _cells(md):
    # Parse as the book does (GitHub tables) and read each cell's text and alignment.
    tokens = MarkdownIt("commonmark").enable("table").parse(md.data)
    rows, row = [], None
    for i, tok in enumerate(tokens):
        if tok.type == "tr_open":
            row = []
        elif tok.type in ("th_open", "td_open"):
            style = tok.attrGet("style") or ""
            row.append((tokens[i + 1].content, "right" if "right" in style else "left"))
        elif tok.type == "tr_close":
            rows.append(row)
    return rows


def test_numbers_after_the_first_column_are_right_aligned():
    rows = _cells(markdown_table(("form", "MiB", "note"), [("ring", "1,024.5", "a"), ("all", "–", "b")]))
    assert rows[0] == [("form", "left"), ("MiB", "right"), ("note", "left")]
    assert rows[2] == [("all", "left"), ("–", "right"), ("b", "left")]


def test_a_first_column_of_numbers_stays_left():
    assert _cells(markdown_table(("step", "loss"), [(0, 3.25), (25, 1.5)]))[1] == [("0", "left"), ("3.25", "right")]


def test_numbers_from_aligns_by_position():
    rows = _cells(markdown_table(("a", "b", "c"), [("x", "y", 3)], numbers_from=1))
    assert [a for _, a in rows[1]] == ["left", "right", "right"]
    rows = _cells(markdown_table(("a", "b"), [("x", "y")], numbers_from=0))
    assert [a for _, a in rows[1]] == ["right", "right"]


@pytest.mark.parametrize("kwargs, message", [
    (dict(head=(), rows=[]), "head"),
    (dict(head=("a", "b"), rows=[("x",)]), r"rows\[0\]"),
    (dict(head=("a",), rows=[], numbers_from=2), "numbers_from"),
    (dict(head=("a",), rows=[], numbers_from=True), "numbers_from"),
])
def test_bad_input_names_the_argument(kwargs, message):
    with pytest.raises(ValueError, match=message):
        markdown_table(**kwargs)
