"""The explorer as one self-contained block of HTML, for a page with no kernel behind it.

Every combination of the controls' options was rendered beforehand; identical pictures are stored
once. A key (the options' positions read as a mixed-radix number, first control most significant)
indexes a table of frame numbers; the page's own inline script, scoped to the block's id, swaps the
``<img>``'s source and alt text when a slider moves. No network, no external script, nothing global.

Frames are PNG, WebP or SVG bytes (told apart by their first bytes); the ``<img>`` is given its
displayed width and height, and a frame has twice those in pixels, so it is sharp on dense screens.
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json
import textwrap
from urllib.parse import quote

__all__ = ["player_html", "frame_mime", "message_svg", "PLAYER_CLASS"]

PLAYER_CLASS = "shardlab-explorer"
_counter = itertools.count()

# The script reads its configuration from the JSON block beside it, so no value is ever
# interpolated into JavaScript source.
_SCRIPT = """(function () {
  var root = document.getElementById(%(id)s);
  if (!root || root.dataset.ready) { return; }
  root.dataset.ready = "1";
  var cfg = JSON.parse(root.querySelector("script.shardlab-data").textContent);
  var inputs = root.querySelectorAll("input.shardlab-slider");
  var outputs = root.querySelectorAll("output.shardlab-option");
  var img = root.querySelector("img.shardlab-frame");
  function show() {
    var key = 0;
    for (var i = 0; i < inputs.length; i++) {
      var v = parseInt(inputs[i].value, 10);
      key = key * cfg.radix[i] + v;
      outputs[i].textContent = cfg.labels[i][v];
    }
    var f = cfg.table[key];
    img.src = cfg.frames[f];
    img.alt = cfg.alts[f];
  }
  for (var i = 0; i < inputs.length; i++) {
    inputs[i].addEventListener("input", show);
    inputs[i].addEventListener("change", show);
  }
  show();
})();"""


def frame_mime(data: bytes) -> str:
    """The image type of a frame's bytes: PNG, WebP or SVG."""
    if data[:4] == b"\x89PNG":
        return "image/png"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    head = data[:256].lstrip()
    if head.startswith(b"<svg") or (head.startswith(b"<?xml") and b"<svg" in data[:512]):
        return "image/svg+xml"
    raise ValueError("frames: each frame must be PNG, WebP or SVG bytes")


def message_svg(message: str, *, title: str = "", width: int = 576, height: int = 400,
                color: str = "#b00020") -> bytes:
    """A frame that is only words (an explorer's refusal of a choice): an SVG of ``width`` x ``height``
    CSS px with ``title`` in bold and ``message`` below it, wrapped to the width, as text (sharp at any
    density and a few hundred bytes, where a picture of the same words takes tens of kilobytes)."""
    title_px, text_px = 16, 14                     # 12 pt and 10.5 pt
    chars = max(16, int((width - 24) / (0.56 * text_px)))
    t_lines = textwrap.wrap(" ".join(str(title).split()), max(16, int((width - 24) / (0.6 * title_px))))[:3]
    m_lines = []
    for para in str(message).split("\n"):
        m_lines.extend(textwrap.wrap(para, chars, break_on_hyphens=False))
    room = max(1, int((height - 24 - len(t_lines) * title_px * 1.3) // (text_px * 1.3)))
    if len(m_lines) > room:
        m_lines = m_lines[:room]
        m_lines[-1] = textwrap.shorten(m_lines[-1] + " …", chars, placeholder=" …")
    y = 12 + title_px
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="DejaVu Sans, Verdana, Arial, sans-serif">'
           '<rect width="100%" height="100%" fill="white"/>']
    for line in t_lines:
        out.append(f'<text x="{width / 2:g}" y="{y:g}" text-anchor="middle" font-size="{title_px}" '
                   f'font-weight="bold">{html.escape(line)}</text>')
        y += title_px * 1.3
    y = max(y + text_px, (height - len(m_lines) * text_px * 1.3) / 2 + text_px)
    for line in m_lines:
        out.append(f'<text x="{width / 2:g}" y="{y:g}" text-anchor="middle" font-size="{text_px}" '
                   f'fill="{color}">{html.escape(line)}</text>')
        y += text_px * 1.3
    out.append("</svg>")
    return "".join(out).encode("utf-8")


def _data_uri(data: bytes) -> str:
    mime = frame_mime(data)
    if mime == "image/svg+xml":  # text: percent-encoded, smaller than base64
        return "data:image/svg+xml;charset=utf-8," + quote(data.decode("utf-8"), safe=" =:/;,'()<>.-_!*?@&+$~")
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def player_html(controls, frames, table, initial, *, alts=None, caption=None, width=None, height=None) -> str:
    """HTML of a static player.

    controls: list of (label, [option label, ...]); frames: list of image bytes (unique pictures: PNG,
    WebP or SVG); table: for every combination of options (mixed radix, first control most
    significant) the index of its frame; initial: the option position of each control shown first;
    alts: alt text per frame (what it shows); width, height: the pictures' displayed size in CSS px
    (the frames have more pixels for dense screens; the picture shrinks with a narrower column).
    """
    radix = [len(opts) for _, opts in controls]
    n_keys = 1
    for r in radix:
        n_keys *= r
    if len(table) != n_keys:
        raise ValueError(f"table: expected {n_keys} entries (one per combination), got {len(table)}")
    if any(not 0 <= t < len(frames) for t in table):
        raise ValueError("table: every entry must be the index of a frame")
    if len(initial) != len(controls) or any(not 0 <= v < r for v, r in zip(initial, radix)):
        raise ValueError(f"initial: expected one valid option position per control, got {initial!r}")
    alts = list(alts) if alts is not None else [""] * len(frames)
    if len(alts) != len(frames):
        raise ValueError(f"alts: expected one alt text per frame ({len(frames)}), got {len(alts)}")
    for name, v in (("width", width), ("height", height)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise ValueError(f"{name}: expected a positive whole number of CSS pixels, got {v!r}")

    uris = [_data_uri(f) for f in frames]
    digest = hashlib.sha1("".join(uris).encode() + json.dumps(controls).encode()).hexdigest()[:10]
    root_id = f"{PLAYER_CLASS}-{digest}-{next(_counter)}"
    key = 0
    for v, r in zip(initial, radix):
        key = key * r + v
    first = table[key]

    cfg = {"radix": radix, "labels": [list(map(str, opts)) for _, opts in controls], "table": list(table),
           "frames": uris, "alts": alts}
    # "</" inside the JSON would end the <script> element early.
    data = json.dumps(cfg, separators=(",", ":")).replace("</", "<\\/")

    rows = []
    for i, ((label, opts), v) in enumerate(zip(controls, initial)):
        rows.append(
            '<label style="display:contents">'
            f'<span style="font-weight:600;white-space:nowrap">{html.escape(str(label))}</span>'
            f'<input class="shardlab-slider" type="range" min="0" max="{len(opts) - 1}" step="1" '
            f'value="{v}" aria-label="{html.escape(str(label))}" style="width:100%;min-width:8em">'
            f'<output class="shardlab-option" style="font-family:monospace;white-space:nowrap">'
            f'{html.escape(str(opts[v]))}</output></label>')
    cap = f'<div style="font-size:90%;color:#555">{html.escape(caption)}</div>' if caption else ""
    size = (f' width="{width}"' if width else "") + (f' height="{height}"' if height else "")
    return (
        f'<div class="{PLAYER_CLASS}" id="{root_id}" style="margin:0.5em 0">'
        '<div style="display:grid;grid-template-columns:max-content minmax(8em,24em) max-content;'
        f'gap:0.25em 0.75em;align-items:center;margin-bottom:0.4em">{"".join(rows)}</div>'
        f'<img class="shardlab-frame"{size} style="max-width:100%;height:auto;display:block" '
        f'alt="{html.escape(alts[first])}" src="{html.escape(uris[first])}">{cap}'
        f'<script type="application/json" class="shardlab-data">{data}</script>'
        f"<script>{_SCRIPT % {'id': json.dumps(root_id)}}</script>"
        "</div>")
