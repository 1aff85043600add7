"""A headless Chromium (Debian's) that may read only files: any network request is recorded and refused."""

import re

import pytest
from playwright.sync_api import sync_playwright

from tests.paths import ROOT

HTML = ROOT / "_build" / "html"
SCREENSHOTS = ROOT / "_build" / "screenshots"
# A laptop's screen (the width at which the code box shows about 84 characters) and a phone's.
DESKTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]


def book_pages():
    if not (HTML / "index.html").exists():
        raise RuntimeError("No built book in _build/html: run `make book` before the page tests.")
    skip_dirs = {"_static", "_sources", "_images", "jupyter_execute"}
    return sorted(p for p in HTML.rglob("*.html") if not skip_dirs & set(p.relative_to(HTML).parts))


def load_all_pictures(page):
    """Pictures load as the reader scrolls to them (loading="lazy"): load every one of them now."""
    page.eval_on_selector_all("img", "imgs => imgs.forEach(i => { i.loading = 'eager'; })")
    page.wait_for_function("() => [...document.images].every(i => i.complete)", timeout=10_000)


@pytest.fixture(scope="session")
def browser():
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        yield b
        b.close()


class PageVisit:
    """One page opened from file://, with everything it logged and asked for."""

    def __init__(self, browser, path, viewport=DESKTOP):
        self.page = browser.new_page(viewport=viewport)
        self.errors, self.failed, self.remote, self.loaded = [], [], [], []
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("requestfailed", lambda r: self.failed.append(r.url))
        self.page.on("requestfinished", lambda r: self.loaded.append(r.url))
        self.page.route("**/*", self._only_files)
        text = path.read_text(encoding="utf-8")
        redirect = re.search(r'http-equiv="refresh" content="0; url=([^"]+)"', text, re.IGNORECASE)
        self.page.goto(path.as_uri(), wait_until="load")
        if redirect:  # the book's index.html: wait until the page it names has loaded
            self.page.wait_for_url((path.parent / redirect.group(1)).resolve().as_uri())
            self.page.wait_for_load_state("load")

    def _only_files(self, route):
        url = route.request.url
        if url.startswith(("file://", "data:", "blob:")):
            route.continue_()
        else:
            self.remote.append(url)
            route.abort()


@pytest.fixture
def visit(browser):
    visits = []

    def open_page(path, viewport=DESKTOP):
        v = PageVisit(browser, path, viewport)
        visits.append(v)
        return v

    yield open_page
    for v in visits:
        v.page.close()
