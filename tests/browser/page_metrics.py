"""What a reader meets on a chapter page, measured in Chromium: how much of it is code, how tall its
tallest code box is, how small the text of its pictures is on a phone, what notebook residue it shows,
where its links to other chapters land, and what it weighs.

Run it on a built book to see every chapter's numbers (the page tests hold them to the limits):
    .venv/bin/python -m tests.browser.page_metrics [_build/html] [chapter stem ...]
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

CSS_PX_PER_PT = 96 / 72
# What a web page must not show of the notebook it was built from.
RESIDUE = ['"pip", "install"', "find_spec(\"shardlab\")", "SHARDLAB_SOURCE", "# @title", "display-mode",
           "double-click to show", "Not answered yet", "No accelerator found", "simulated CPU devices."]

_MEASURE = """() => {
  const art = document.querySelector('article');
  const seen = e => e.checkVisibility() && e.getBoundingClientRect().height > 0;
  const cells = [...art.querySelectorAll('div.cell_input')].filter(seen);
  const code = cells.map(c => ({px: c.getBoundingClientRect().height,
                                lines: c.innerText.replace(/\\n+$/, '').split('\\n').length,
                                first: c.innerText.split('\\n')[0].slice(0, 60)}));
  const pictures = [...art.querySelectorAll('img')].filter(seen)
    .filter(i => i.getBoundingClientRect().width >= 40)
    .map(i => {
      const holder = i.closest('[data-smallest-text-pt]');
      return {src: i.getAttribute('src').slice(0, 80), alt: (i.alt || '').slice(0, 60),
              shown: i.getBoundingClientRect().width,
              designed: parseFloat(i.getAttribute('width')) || null,
              pt: holder ? holder.dataset.smallestTextPt : null};
    });
  const here = location.pathname;
  const links = [...art.querySelectorAll('a.reference.internal')].map(a => {
    const u = new URL(a.href);
    return {page: u.pathname, fragment: u.hash.slice(1), text: a.innerText.trim()};
  }).filter(l => l.page !== here && /\\/notebooks\\/\\d\\d_/.test(l.page));
  return {height: art.getBoundingClientRect().height, code, pictures, links,
          text: art.textContent, html: document.documentElement.outerHTML};
}"""


def measure(page) -> dict:
    """The page's numbers as laid out at its current viewport."""
    return page.evaluate(_MEASURE)


def code_share(m: dict) -> float:
    """The fraction of the article's height taken by visible code boxes."""
    return sum(c["px"] for c in m["code"]) / m["height"]


def tallest_cell(m: dict) -> dict:
    return max(m["code"], key=lambda c: c["lines"], default={"lines": 0, "px": 0, "first": ""})


def figure_text_px(m: dict) -> list[tuple[str, float | None]]:
    """(picture, its smallest text in CSS px as shown) for every picture; None: it records no size."""
    out = []
    for p in m["pictures"]:
        if p["pt"] in (None, ""):
            out.append((p["alt"] or p["src"], None))
        elif p["pt"] == "none":  # a picture with no text
            continue
        else:
            scale = p["shown"] / p["designed"] if p["designed"] else 1.0
            out.append((p["alt"] or p["src"], float(p["pt"]) * CSS_PX_PER_PT * scale))
    return out


def residue(m: dict) -> list[str]:
    """Notebook residue anywhere in the article, closed answers included."""
    return [s for s in RESIDUE if s in m["text"]]


def section_share(m: dict, tops: dict[str, set[str]]) -> float:
    """The fraction of links to other chapters that land on a section rather than the chapter's top
    (``tops``: the ids at the top of each chapter page, by file name)."""
    links = m["links"]
    if not links:
        return 1.0
    return sum(1 for link in links if _lands_on_section(link, tops)) / len(links)


def _lands_on_section(link: dict, tops: dict[str, set[str]]) -> bool:
    return bool(link["fragment"]) and link["fragment"] not in tops.get(link["page"].rsplit("/", 1)[-1], set())


def title_links(m: dict, titles: set[str]) -> list[str]:
    """Links whose whole text is a chapter's title."""
    return [link["text"] for link in m["links"] if link["text"] in titles]


def page_bytes(page, path: Path, loaded: list[str]) -> tuple[int, int]:
    """(bytes of the page and its pictures, bytes of the shared theme files) a reader downloads to read
    the whole page: what it loaded, plus every picture in it (those further down load as one scrolls)."""
    html_dir = path.parent
    while not (html_dir / "_static").is_dir() and html_dir != html_dir.parent:
        html_dir = html_dir.parent
    static = (html_dir / "_static").as_uri()
    pictures = page.eval_on_selector_all("article img", "imgs => imgs.map(i => i.currentSrc || i.src)")
    urls = set(loaded) | set(pictures) | {path.as_uri()}
    own = shared = 0
    for url in urls:
        parts = urlsplit(url)
        if parts.scheme != "file":
            continue
        size = Path(unquote(parts.path)).stat().st_size
        if url.startswith(static) or url.split("?")[0].endswith("searchindex.js"):
            shared += size
        else:
            own += size
    return own, shared


def titles_and_tops(html: Path) -> tuple[set[str], dict[str, set[str]]]:
    """Every chapter's title, and the ids that name each chapter page's top (its labels and its title's
    own anchor), read from the built pages."""
    titles, tops = set(), {}
    for page in (html / "notebooks").glob("*.html"):
        text = page.read_text(encoding="utf-8")
        m = re.search(r'<h1>([^<]*)<a class="headerlink" href="#([^"]+)"', text)
        if not m:
            continue
        titles.add(m.group(1).strip())
        head = text[text.find("<article"):m.end()]
        tops[page.name] = set(re.findall(r'id="([^"]+)"', head)) | {m.group(2)}
    return titles, tops


def main(argv: list[str]) -> None:
    from playwright.sync_api import sync_playwright

    from tests.browser.conftest import CHROMIUM_ARGS, DESKTOP, PHONE

    html = Path(argv[0]).resolve() if argv else Path("_build/html").resolve()
    stems = argv[1:] or sorted(p.stem for p in (html / "notebooks").glob("*.html"))
    titles, tops = titles_and_tops(html)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=CHROMIUM_ARGS)
        print(f"{'page':32} code  tallest  text@390  residue  sections  title-links  page+theme MB")
        for stem in stems:
            path = html / "notebooks" / f"{stem}.html"
            page = browser.new_page(viewport=DESKTOP)
            loaded: list[str] = []
            page.on("requestfinished", lambda r: loaded.append(r.url))
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_timeout(300)
            d = measure(page)
            own, shared = page_bytes(page, path, loaded)
            page.close()
            page = browser.new_page(viewport=PHONE)
            page.goto(path.as_uri(), wait_until="load")
            ph = measure(page)
            page.close()
            sizes = [px for _, px in figure_text_px(ph) if px is not None]
            unknown = sum(1 for _, px in figure_text_px(ph) if px is None)
            small = f"{min(sizes):.1f}" if sizes else "-"
            print(f"{stem:32} {code_share(d):.2f}  {tallest_cell(d)['lines']:>7}  {small:>6}"
                  f"{'+?' + str(unknown) if unknown else '':4} {len(residue(d)):>7}  {section_share(d, tops):>8.2f}"
                  f"  {len(title_links(d, titles)):>11}  {own / 1e6:.2f}+{shared / 1e6:.2f}")
        browser.close()


if __name__ == "__main__":
    main(sys.argv[1:])
