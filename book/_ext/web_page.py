"""What the web page shows of a notebook, and what a reader downloads to read it.

A chapter's ``.ipynb`` keeps what Colab and Kaggle need: the set-up cell (left off the page by its
``remove-cell`` tag), the ``# @title`` line that folds an answer in Colab, the check that says an exercise
is not answered yet. On the web page these are noise, so while each page is written this extension

* drops a code cell's ``# @title ...`` first line (Colab's form view; on the page the cell sits in a
  "Show the answer" box already);
* shows an unanswered exercise's check as a quiet note instead of "Not answered yet: ...";

and after the build it makes every page lighter:

* pictures inline as base64 (figures, every frame of an explorer) become files in ``_images/``, named by
  their content, so a page carries its text and loads a picture when it is shown;
* the saved state of the live widgets, which the page never shows (it shows the static player), is
  dropped;
* the search scripts and the search index load on the search page only;
* the site's ``index.html`` (a redirect to the front page) gets the book's title.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
from pathlib import Path

from docutils import nodes

TITLE_LINE = re.compile(r"\A# @title[^\n]*\n")
NOT_ANSWERED = "Not answered yet"
NOTE = "Run this chapter in Colab or Kaggle (the rocket button at the top) to check your answer here."

DATA_URI = re.compile(r"data:image/(png|webp|jpeg);base64,([A-Za-z0-9+/=]+)")
WIDGET_STATE = re.compile(r'<script type="application/vnd\.jupyter\.widget-state\+json">.*?</script>\s*', re.S)
SEARCH_SCRIPTS = re.compile(
    r'\s*<script src="[^"]*(?:_static/searchtools\.js|_static/language_data\.js|searchindex\.js)[^"]*"></script>')
PICTURE_DIR = "_images"


def clean_cells(app, doctree, docname):
    for block in list(doctree.findall(nodes.literal_block)):
        text = block.astext()
        if TITLE_LINE.match(text) and "cell_input" in block.parent.get("classes", []):
            rest = TITLE_LINE.sub("", text, count=1)
            block.children = [nodes.Text(rest)]
            block.rawsource = rest
        elif text.startswith(NOT_ANSWERED) and "output" in block.get("classes", []):
            block.replace_self(nodes.paragraph(NOTE, NOTE, classes=["exercise-note"]))


def _picture_file(out: Path, kind: str, data: str) -> Path:
    raw = base64.b64decode(data)
    name = f"sl-{hashlib.sha1(raw).hexdigest()[:20]}.{'jpg' if kind == 'jpeg' else kind}"
    path = out / PICTURE_DIR / name
    if not path.exists():
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(raw)
    return path


def lighten_page(page: Path, out: Path) -> None:
    text = page.read_text(encoding="utf-8")
    new = WIDGET_STATE.sub("", text)
    if page.name != "search.html":
        new = SEARCH_SCRIPTS.sub("", new)

    def to_file(m):
        path = _picture_file(out, m.group(1), m.group(2))
        return Path(os.path.relpath(path, page.parent)).as_posix()

    new = DATA_URI.sub(to_file, new)
    # Pictures below the first screen load as the reader reaches them.
    new = re.sub(r'<img class="(shardlab-figure|shardlab-frame)"', r'<img loading="lazy" class="\1"', new)
    if new != text:
        page.write_text(new, encoding="utf-8")


def lighten_pages(app, exception):
    if exception is not None or app.builder.format != "html":
        return
    out = Path(app.outdir)
    skip = {"_static", "_sources", PICTURE_DIR}
    for page in out.rglob("*.html"):
        if not skip & set(page.relative_to(out).parts):
            lighten_page(page, out)
    index = out / "index.html"
    if index.exists():
        html = index.read_text(encoding="utf-8")
        if "<title>" not in html:
            title = f"<title>{app.config.project}</title>"
            html = html.replace("<head>", f"<head>\n    {title}", 1) if "<head>" in html else title + html
            index.write_text(html, encoding="utf-8")


def setup(app):
    app.connect("doctree-resolved", clean_cells)
    # After small_icons (priority 500 by default) has written the icon script: the order does not matter
    # to either, but each page is rewritten once.
    app.connect("build-finished", lighten_pages, priority=900)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
