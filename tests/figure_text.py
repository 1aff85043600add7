"""The text of every figure an executed chapter displays, in points as displayed on the page.

A figure shown through shardlab's display path records its smallest text as displayed: a PNG in the
``shardlab_smallest_text_pt`` entry of its ``image/png`` metadata (None: it draws no text), an
explorer in the ``data-smallest-text-pt`` attribute of its static player. A picture that records
nothing was not shown through that path, so its text size is unknown: it counts as a failure.
"""

from __future__ import annotations

import re

MIN_TEXT_PT = 9.0    # shardlab.pictures.display.MIN_TEXT_PT, repeated here so that the test does not trust it
ROUNDING_PT = 0.01   # recorded sizes are rounded to hundredths of a point

_IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
_PLAYER = re.compile(r'<div class="shardlab-explorer"[^>]*>')
_PLAYER_PT = re.compile(r'data-smallest-text-pt="([^"]*)"')
_IMG = re.compile(r"<img\b[^>]*>")


def figure_text_sizes(nb) -> list[tuple[int, str, float | None | str]]:
    """(cell index, what, smallest text in pt as displayed) for every picture the notebook displays.
    The size is None for a figure that records that it draws no text, the string "unrecorded" for a
    picture that records nothing."""
    found = []
    for i, cell in enumerate(nb.cells):
        if cell.get("cell_type") != "code":
            continue
        for out in cell.get("outputs", []):
            if out.get("output_type") not in ("display_data", "execute_result"):
                continue
            data, meta = out.get("data", {}), out.get("metadata", {})
            html = data.get("text/html", "")
            html = "".join(html) if isinstance(html, list) else html
            players = _PLAYER.findall(html)
            for tag in players:
                m = _PLAYER_PT.search(tag)
                found.append((i, "explorer", float(m.group(1)) if m else "unrecorded"))
            images = [mime for mime in _IMAGE_MIMES if mime in data]
            if images:
                record = meta.get(images[0], {})
                pt = record.get("shardlab_smallest_text_pt", "unrecorded") if isinstance(record, dict) \
                    else "unrecorded"
                found.append((i, "figure", pt))
            elif not players and _IMG.search(html):
                found.append((i, "html image", "unrecorded"))   # an <img> with no record beside it
    return found


def small_figure_text(nb, min_pt: float = MIN_TEXT_PT) -> list[str]:
    """What is wrong with the text of the notebook's pictures: one line per picture whose smallest
    text is under ``min_pt`` as displayed, or whose text size was not recorded."""
    bad = []
    for cell, what, pt in figure_text_sizes(nb):
        if pt == "unrecorded":
            bad.append(f"cell {cell}: a {what} with no recorded text size (not shown through shardlab's "
                       "display path)")
        elif pt is not None and pt < min_pt - ROUNDING_PT:
            bad.append(f"cell {cell}: a {what} with {pt:g} pt text as displayed (at least {min_pt:g} pt)")
    return bad
