"""Every page of the built book, opened in a real browser from file://, as a reader would."""

import re
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
import yaml

from tests.browser.conftest import HTML, SCREENSHOTS, book_pages, load_all_pictures
from tests.paths import CHAPTERS, NUMBERED, ROOT

PAGES = book_pages()
CHAPTER_PAGES = [HTML / "notebooks" / f"{md.stem}.html" for md in CHAPTERS]
EXERCISE_PAGES = [HTML / "notebooks" / f"{md.stem}.html" for md in NUMBERED]


def rel(p: Path) -> str:
    return str(p.relative_to(HTML))


class _Refs(HTMLParser):
    def __init__(self):
        super().__init__()
        self.ids, self.links, self.images = set(), [], []

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if "id" in a:
            self.ids.add(a["id"])
        if tag == "a" and a.get("href"):
            self.links.append(a["href"])
        if tag == "img" and a.get("src"):
            self.images.append(a["src"])


def refs(path: Path) -> _Refs:
    parser = _Refs()
    parser.feed(path.read_text(encoding="utf-8"))
    return parser


def local_target(page: Path, href: str):
    parts = urlsplit(href)
    if parts.scheme or href.startswith("//"):
        return None, None  # external (launch buttons, repository): not fetched
    target = (page.parent / unquote(parts.path)).resolve() if parts.path else page
    return target, parts.fragment


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_page_loads_cleanly_offline(path, visit):
    v = visit(path)
    assert v.errors == [], f"console errors on {rel(path)}: {v.errors}"
    assert v.remote == [], f"{rel(path)} asked the network for {v.remote}"
    assert v.failed == [], f"failed requests on {rel(path)}: {v.failed}"
    load_all_pictures(v.page)
    broken = v.page.eval_on_selector_all(
        "img", "imgs => imgs.filter(i => !(i.complete && i.naturalWidth > 0)).map(i => i.src)")
    assert broken == [], f"images that did not load on {rel(path)}: {broken}"


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_internal_links_and_images_resolve(path):
    page_refs = refs(path)
    problems = []
    for href in page_refs.links + page_refs.images:
        target, fragment = local_target(path, href)
        if target is None:
            continue
        if not target.exists():
            problems.append(f"{href}: no such file")
        elif fragment and target.suffix == ".html" and fragment not in refs(target).ids:
            problems.append(f"{href}: no element with id {fragment!r}")
    assert problems == [], f"{rel(path)}: " + "; ".join(problems)


def _explorer_picture(explorer):
    img = explorer.locator("img").first
    img.evaluate("i => { i.loading = 'eager'; return i.decode(); }")   # its frame is a file: wait until drawn
    return img.screenshot()


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_static_explorers_respond_to_their_sliders(path, visit):
    v = visit(path)
    explorers = v.page.locator(".shardlab-explorer")
    for i in range(explorers.count()):
        explorer = explorers.nth(i)
        explorer.scroll_into_view_if_needed()
        before = _explorer_picture(explorer)
        if i == 0:
            SCREENSHOTS.mkdir(parents=True, exist_ok=True)
            explorer.screenshot(path=str(SCREENSHOTS / f"{path.stem}.png"))
        slider = explorer.locator("input[type=range]").first
        # Move the slider the way a reader does: keyboard focus, then an arrow key.
        slider.focus()
        slider.press("End" if slider.input_value() != slider.get_attribute("max") else "Home")
        after = _explorer_picture(explorer)
        assert before != after, f"explorer {i} on {rel(path)}: moving its first slider did not change the picture"
    assert v.errors == [], f"console errors while using explorers on {rel(path)}: {v.errors}"


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_launch_buttons_open_the_chapter_notebook(path):
    repo = yaml.safe_load((ROOT / "_config.yml").read_text())["repository"]["url"].rstrip("/")
    blob = repo.split("github.com/", 1)[1] + f"/blob/main/notebooks/{path.stem}.ipynb"
    links = refs(path).links
    assert f"https://colab.research.google.com/github/{blob}" in links
    assert any(re.fullmatch(r"https://www\.kaggle\.com/kernels/welcome\?src=https://github\.com/" + re.escape(blob), h)
               for h in links), f"no Kaggle link to {blob} on {rel(path)}"


@pytest.mark.parametrize("path", EXERCISE_PAGES, ids=rel)
def test_exercise_answers_stay_hidden_until_asked_for(path, visit):
    v = visit(path)
    answers = v.page.locator(".cell.tag_hide-cell:has(summary:has-text('Show the answer'))")
    assert answers.count() > 0, f"{rel(path)}: no answer cells on the page"
    for i in range(answers.count()):
        cell = answers.nth(i)
        code = cell.locator("div.cell_input pre").first
        outputs = cell.locator(".cell_output")
        assert not code.is_visible(), f"answer {i} on {rel(path)} is shown before the reader asks"
        assert all(not outputs.nth(k).is_visible() for k in range(outputs.count())), \
            f"the output of answer {i} on {rel(path)} is shown before the reader asks"
        toggle = cell.locator("summary").first
        assert "Show the answer" in toggle.inner_text(), f"answer {i} on {rel(path)}: toggle does not say so"
        toggle.click()  # the reader asks
        assert code.is_visible(), f"answer {i} on {rel(path)} does not open when asked for"


@pytest.mark.parametrize("path", CHAPTER_PAGES, ids=rel)
def test_published_pages_show_their_tpu_programs(path):
    # The book is built where libtpu is installed: a TPU cell that printed its one-line skip (libtpu
    # missing, or refused to load) would publish a page without the programs its prose describes.
    text = path.read_text(encoding="utf-8")
    assert "No TPU compiler here" not in text, f"{rel(path)} was built with a TPU cell skipped"
