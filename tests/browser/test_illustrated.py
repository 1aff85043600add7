"""Every chapter reads as an illustrated page, not a notebook printout (measured in Chromium at a laptop's
1366 px and a phone's 390 px): code at most a third of the page and no tall code box, figure text readable
on the phone, no notebook residue, links that land on sections, and a light page.

The numbers come from tests/browser/page_metrics.py, which also prints them for every chapter.
"""

import re
from pathlib import Path

import pytest
import yaml

from tests.browser import page_metrics as pm
from tests.browser.conftest import HTML, PHONE
from tests.paths import CHAPTERS, ROOT

CHAPTER_PAGES = [HTML / "notebooks" / f"{md.stem}.html" for md in CHAPTERS]
MAX_CODE_SHARE = 1 / 3
MAX_CELL_LINES = 40
MIN_PHONE_TEXT_PX = 9.0
MIN_SECTION_SHARE = 0.75       # of the links to other chapters, at least this many land on a section
MAX_PAGE_BYTES = 1_500_000     # the page, its pictures and the theme's files together
TITLES, TOPS = pm.titles_and_tops(HTML)


def rel(p: Path) -> str:
    return str(p.relative_to(HTML))


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_code_is_at_most_a_third_of_the_page_and_no_box_is_tall(path, visit):
    m = pm.measure(visit(path).page)
    share, tallest = pm.code_share(m), pm.tallest_cell(m)
    assert share <= MAX_CODE_SHARE, f"{rel(path)}: visible code is {share:.0%} of the page"
    assert tallest["lines"] <= MAX_CELL_LINES, \
        f"{rel(path)}: a visible code box of {tallest['lines']} lines, starting {tallest['first']!r}"


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_figure_text_is_readable_on_a_phone(path, visit):
    m = pm.measure(visit(path, viewport=PHONE).page)
    sizes = pm.figure_text_px(m)
    unknown = [what for what, px in sizes if px is None]
    small = [f"{what[:50]!r}: {px:.1f} px" for what, px in sizes if px is not None and px < MIN_PHONE_TEXT_PX - 0.05]
    assert unknown == [], f"{rel(path)}: pictures that do not record their text size: {unknown[:3]}"
    assert small == [], f"{rel(path)}: figure text under {MIN_PHONE_TEXT_PX} px on a phone: {small[:4]}"


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_no_notebook_residue(path, visit):
    m = pm.measure(visit(path).page)
    assert pm.residue(m) == [], f"{rel(path)} shows notebook residue: {pm.residue(m)}"


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_links_to_other_chapters_land_on_sections_with_short_text(path, visit):
    m = pm.measure(visit(path).page)
    share = pm.section_share(m, TOPS)
    assert share >= MIN_SECTION_SHARE, \
        f"{rel(path)}: only {share:.0%} of its {len(m['links'])} links to other chapters land on a section"
    assert pm.title_links(m, TITLES) == [], \
        f"{rel(path)}: links whose text is a whole chapter title: {pm.title_links(m, TITLES)[:4]}"


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_page_with_its_pictures_and_theme_is_light(path, visit):
    v = visit(path)
    v.page.wait_for_timeout(300)   # what the page's scripts ask for after it loads
    own, shared = pm.page_bytes(v.page, path, v.loaded)
    print(f"{rel(path)}: page and pictures {own / 1e6:.2f} MB, theme {shared / 1e6:.2f} MB")
    assert own + shared <= MAX_PAGE_BYTES, \
        f"{rel(path)} weighs {(own + shared) / 1e6:.2f} MB with the theme (page {own / 1e6:.2f} MB)"
    inline = re.findall(r"data:image/(?:png|webp|jpeg);base64", path.read_text(encoding="utf-8"))
    assert inline == [], f"{rel(path)} carries {len(inline)} pictures inline as base64"


def test_front_page_has_a_picture_and_a_line_for_every_chapter(visit):
    v = visit(HTML / "book" / "intro.html")
    pictures = v.page.eval_on_selector_all("article img", "imgs => imgs.filter(i => i.naturalWidth > 0).length")
    assert pictures >= 1
    toc = yaml.safe_load((ROOT / "_toc.yml").read_text(encoding="utf-8"))
    chapters = [c["file"] for part in toc["parts"] for c in part["chapters"] if c["file"].startswith("notebooks/")]
    items = v.page.eval_on_selector_all(
        "article li", "lis => lis.map(li => ({text: li.innerText, href: (li.querySelector('a') || {}).href || ''}))")
    for chapter in chapters:
        line = next((i for i in items if i["href"].split("#")[0].endswith(Path(chapter).name + ".html")), None)
        assert line is not None, f"the front page has no line linking {chapter}"
        assert len(line["text"].split()) >= 8, f"the front page's line for {chapter} says too little"


def test_every_page_has_a_title_and_an_icon(visit):
    index = (HTML / "index.html").read_text(encoding="utf-8")
    assert re.search(r"<title>\s*\S", index), "index.html has no title"
    v = visit(HTML / "notebooks" / "01_devices_and_meshes.html")
    icon = v.page.eval_on_selector("link[rel~='icon']", "l => l.href")
    assert Path(icon.replace("file://", "")).exists(), f"the page's icon {icon} is missing"


@pytest.mark.parametrize("viewport", [None, PHONE], ids=["desktop", "phone"])
def test_search_field_text_starts_after_its_icon(viewport, visit):
    v = visit(HTML / "notebooks" / "01_devices_and_meshes.html", **({"viewport": viewport} if viewport else {}))
    v.page.locator("button.search-button__button:visible").first.click()
    field = v.page.locator("form.bd-search input:visible").first
    field.type("mesh")
    text_left, icon_right = field.evaluate(
        "i => [i.getBoundingClientRect().left + parseFloat(getComputedStyle(i).paddingLeft),"
        " i.parentElement.querySelector('i').getBoundingClientRect().right]")
    assert text_left >= icon_right, f"the search icon covers the first {icon_right - text_left:.0f} px of the text"


def test_a_search_hit_lands_at_its_match(browser):
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    try:
        path = HTML / "notebooks" / "02_named_sharding.html"
        word = "devices_indices_map"
        assert word in path.read_text(encoding="utf-8")
        page.goto(path.as_uri() + f"?highlight={word}", wait_until="load")
        page.wait_for_function("() => window.scrollY > 0 && document.querySelector('article span.highlighted')",
                               timeout=5000)
        top = page.evaluate("() => document.querySelector('article span.highlighted').getBoundingClientRect().top")
        assert 0 <= top <= 900, f"the first match is {top:.0f} px from the top of the window"
    finally:
        page.close()
