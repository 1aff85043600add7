"""Every page readable as a reader meets it: in a laptop's browser and on a phone.

Code and outputs fit their boxes, tables are tables, errors are a few lines with no path of the machine
that built the book, pictures are sharp and fit the column (the page's weight: test_illustrated.py).
"""

import os
import re
import sys
from pathlib import Path

import pytest

from tests.browser.conftest import HTML, PHONE, book_pages, load_all_pictures
from tests.paths import CHAPTERS, ROOT

PAGES = book_pages()
CHAPTER_PAGES = [HTML / "notebooks" / f"{md.stem}.html" for md in CHAPTERS]
MAX_ERROR_LINES = 15
SHARP = 1.5  # a picture's pixels per displayed pixel, at least


def rel(p: Path) -> str:
    return str(p.relative_to(HTML))


def _overflowing(page, selector):
    # What is shown once a reader has opened every collapsed answer and note.
    page.eval_on_selector_all("details", "ds => ds.forEach(d => { d.open = true; })")
    return page.eval_on_selector_all(
        selector, "els => els.filter(e => e.checkVisibility() && e.scrollWidth > e.clientWidth + 1)"
                  ".map(e => e.innerText.split('\\n').find(l => l.length > 0) || '')")


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_code_and_outputs_fit_their_boxes(path, visit):
    v = visit(path)
    wide_code = _overflowing(v.page, "div.cell_input pre")
    opened = v.page.eval_on_selector_all("details[open] div.cell_input pre", "els => els.length")
    assert opened > 0 or "Show the answer" not in v.page.content(), f"{rel(path)}: no answer opened"
    assert wide_code == [], f"{rel(path)}: code boxes that scroll sideways, first lines: {wide_code[:5]}"
    wide_output = _overflowing(v.page, "div.cell_output pre")
    assert wide_output == [], f"{rel(path)}: outputs that scroll sideways: {wide_output[:5]}"


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_page_fits_a_phone(path, visit):
    v = visit(path, viewport=PHONE)
    width = v.page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{rel(path)} is {width} px wide on a {PHONE['width']} px phone"


RAW_TABLE = re.compile(r"^\s*\|(\s*:?-{3,}:?\s*\|)+\s*$", re.M)


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_errors_are_a_few_readable_lines(path, visit):
    v = visit(path)
    errors = v.page.eval_on_selector_all(
        "div.cell_output .traceback pre, div.cell_output .output.error pre",
        "els => els.map(e => ({text: e.innerText, cut: e.scrollWidth > e.clientWidth + 1}))")
    for error in errors:
        lines = [line for line in error["text"].splitlines() if line.strip()]
        assert len(lines) <= MAX_ERROR_LINES, f"{rel(path)}: a {len(lines)}-line error: {lines[0]!r}"
        assert re.match(r"\w+(Error|Exception|Exit|Interrupt)\b|\w+:", lines[0]), \
            f"{rel(path)}: an error that does not start with its exception: {lines[0]!r}"
        assert not error["cut"], f"{rel(path)}: an error message cut off at the right: {lines[0]!r}"


def _building_machine_paths():
    places = {str(ROOT), sys.prefix, sys.base_prefix, os.path.expanduser("~"), "/tmp/", "site-packages"}
    return sorted(p for p in places if p and p != "/")


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_text_has_no_raw_tables_and_no_path_of_the_building_machine(path, visit):
    text = visit(path).page.evaluate("document.querySelector('article').innerText")
    assert not RAW_TABLE.search(text), f"{rel(path)} shows a Markdown table as raw pipes"
    found = [p for p in _building_machine_paths() if p in text]
    assert found == [], f"{rel(path)} shows paths of the machine that built it: {found}"


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_pictures_are_sharp_fit_the_column_and_say_what_they_show(path, visit):
    v = visit(path)
    load_all_pictures(v.page)
    pictures = v.page.eval_on_selector_all(
        "article img",
        "imgs => imgs.filter(i => i.offsetParent !== null).map(i => ({src: i.currentSrc.slice(0, 80), "
        "natural: i.naturalWidth, shown: i.getBoundingClientRect().width, alt: i.alt || '', "
        "column: i.closest('article').getBoundingClientRect().width}))")
    problems = []
    for p in pictures:
        if p["shown"] < 40:  # icons in text
            continue
        if p["natural"] < SHARP * p["shown"]:
            problems.append(f"{p['src']}: {p['natural']} px shown at {p['shown']:.0f} px")
        if p["shown"] > p["column"] + 1:
            problems.append(f"{p['src']}: wider than the column")
        if not p["alt"].strip() or re.fullmatch(r"\S*\.(png|svg|webp|jpe?g)|(\.\./|_images/)\S*", p["alt"]):
            problems.append(f"{p['src']}: alt text {p['alt']!r} does not say what it shows")
    assert problems == [], f"{rel(path)}: " + "; ".join(problems[:6])


@pytest.mark.parametrize("path", [HTML / "notebooks" / "01_devices_and_meshes.html"], ids=rel)
def test_one_search_box_and_every_icon_drawn(path, visit):
    v = visit(path)
    boxes = v.page.eval_on_selector_all(
        "input[type=search], .search-button-field, .search-button",
        "els => els.filter(e => e.offsetParent !== null).length")
    assert boxes == 1, f"{rel(path)}: {boxes} search boxes visible at once"
    blank = v.page.eval_on_selector_all(
        "i[class*='fa-']",
        "els => els.filter(e => e.offsetParent !== null && e.getBoundingClientRect().width < 4)"
        ".map(e => e.className)")
    assert blank == [], f"{rel(path)}: icons drawn blank: {blank}"
