"""The explorer as one self-contained block of HTML, for a page with no kernel behind it.

Every combination of the controls' options was rendered beforehand; identical pictures are stored
once. A key (the options' positions read as a mixed-radix number, first control most significant)
indexes a table of frame numbers; the page's own inline script, scoped to the block's id, swaps the
``<img>``'s source when a slider moves. No network, no external script, nothing global.
"""

from __future__ import annotations

import base64
import hashlib
import html
import itertools
import json

__all__ = ["player_html", "PLAYER_CLASS"]

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
    img.src = "data:image/png;base64," + cfg.frames[f];
    img.alt = cfg.alts[f];
  }
  for (var i = 0; i < inputs.length; i++) {
    inputs[i].addEventListener("input", show);
    inputs[i].addEventListener("change", show);
  }
  show();
})();"""


def player_html(controls, frames, table, initial, *, alts=None, caption=None) -> str:
    """HTML of a static player.

    controls: list of (label, [option label, ...]); frames: list of PNG bytes (unique pictures);
    table: for every combination of options (mixed radix, first control most significant) the index
    of its frame; initial: the option position of each control shown first; alts: alt text per frame.
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

    b64 = [base64.b64encode(f).decode("ascii") for f in frames]
    digest = hashlib.sha1("".join(b64).encode() + json.dumps(controls).encode()).hexdigest()[:10]
    root_id = f"{PLAYER_CLASS}-{digest}-{next(_counter)}"
    key = 0
    for v, r in zip(initial, radix):
        key = key * r + v
    first = table[key]

    cfg = {"radix": radix, "labels": [list(map(str, opts)) for _, opts in controls], "table": list(table),
           "frames": b64, "alts": alts}
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
    return (
        f'<div class="{PLAYER_CLASS}" id="{root_id}" style="margin:0.5em 0">'
        '<div style="display:grid;grid-template-columns:max-content minmax(8em,24em) max-content;'
        f'gap:0.25em 0.75em;align-items:center;margin-bottom:0.4em">{"".join(rows)}</div>'
        f'<img class="shardlab-frame" style="max-width:100%;height:auto" alt="{html.escape(alts[first])}" '
        f'src="data:image/png;base64,{b64[first]}">{cap}'
        f'<script type="application/json" class="shardlab-data">{data}</script>'
        f"<script>{_SCRIPT % {'id': json.dumps(root_id)}}</script>"
        "</div>")
