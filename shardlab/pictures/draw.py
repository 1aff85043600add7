"""Pictures of layouts: which device holds which tile of an array, and the device grid of a mesh.

One palette serves the whole book: device ``i`` is always drawn in ``device_color(i)``. A tile held
by one device is filled with that device's colour; a tile held by several devices (replicated) is
filled with one neutral grey and labelled with its holders ("0,1,2,3", "16–31", "all 8 devices").
Figures are ``matplotlib.figure.Figure`` objects that pyplot does not know about (so a notebook never
shows one twice); as the last expression of a cell they display at twice the pixels of their displayed
size, no wider than the page's text column, with text of at least 9 pt as displayed and an alt text
that says what they show (``shardlab.pictures.display``).

The drawing is done by ``Sheet``, which keeps its artists: drawing another layout on the same
figure updates the image, labels and titles in place (that is what makes explorers fast).
"""

from __future__ import annotations

import io
import math
import textwrap

import numpy as np
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg, RendererAgg, get_hinting_flag
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.patches import Patch
from matplotlib.transforms import offset_copy

from shardlab.hardware.links import chip_coords, hops
from shardlab.layout.tiles import Layout, format_mesh, layout_of, normalise_mesh, tile_map
from shardlab.pictures.display import COLUMN_PX, CSS_PX_PER_INCH, figure_bundle, page_image, quantize, text_scale

__all__ = ["PALETTE", "device_color", "draw_sharding", "draw_mesh", "draw_links", "Sheet", "sheet_for", "ShardFigure",
           "png_bytes"]

# tab20 reordered: ids 0-9 get the ten tab10 colours, ids 10-19 their lighter twins; then it repeats.
_TAB20 = ['#1f77b4', '#aec7e8', '#ff7f0e', '#ffbb78', '#2ca02c', '#98df8a', '#d62728', '#ff9896',
          '#9467bd', '#c5b0d5', '#8c564b', '#c49c94', '#e377c2', '#f7b6d2', '#7f7f7f', '#c7c7c7',
          '#bcbd22', '#dbdb8d', '#17becf', '#9edae5']
#: The book's colour of each device id, in order (tab20's strong colours, then its light ones).
PALETTE: tuple[str, ...] = tuple(_TAB20[0::2] + _TAB20[1::2])
_PALETTE_RGB = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in PALETTE], dtype=np.uint8)
_ERROR_RGB = "#b00020"

MAX_PANELS = 36       # small multiples shown for an N-D array; the rest are summarised in a note
MAX_LABELS = 1024     # text labels per figure; beyond it labels are thinned to every k-th tile
MIN_FONT = 9.0        # tile labels, in points as displayed: smallest (else labels are thinned) ...
MAX_FONT = 12.0       # ... and largest


def device_color(device_id: int) -> str:
    """The book's colour for a device id (hex string); the same id gets the same colour everywhere."""
    if isinstance(device_id, bool) or not isinstance(device_id, (int, np.integer)) or device_id < 0:
        raise ValueError(f"device_id: expected a non-negative integer, got {device_id!r}")
    return PALETTE[int(device_id) % len(PALETTE)]


def _coord_colors(n: int) -> np.ndarray:
    # Mesh coordinates are ordered, so a sequential map says "0 < 1 < 2" at a glance.
    from matplotlib import colormaps

    vals = np.linspace(0.12, 0.92, n) if n > 1 else np.array([0.55])
    return (np.asarray(colormaps["viridis"](vals)) * 255).round().astype(np.uint8)  # RGBA


def _luminance(rgb) -> float:
    r, g, b = (np.asarray(rgb, dtype=float)[:3] / 255.0)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


class _TextCachingRenderer(RendererAgg):
    """Agg renderer that keeps the bitmap of every string it has drawn.

    Explorer frames redraw the same labels, ticks and titles over and over; rasterising their glyphs
    is most of Agg's time. A string's bitmap (rendered once, as matplotlib <= 3.10 draws text) is
    reused and placed at the nearest pixel. Anything unusual goes to matplotlib's own path.
    """

    _cache: dict = {}
    _heights: dict = {}
    _enabled = True
    MAX_ENTRIES = 4096

    def _get_font_height_metrics(self, prop):
        # matplotlib >= 3.11 asks the renderer for a font's line metrics before laying out text,
        # and reads them from the font file each time unless the renderer knows them.
        key = (hash(prop), self.dpi)
        hit = self._heights.get(key)
        if hit is None:
            try:
                from matplotlib.font_manager import fontManager, get_font

                font = get_font(fontManager._find_fonts_by_props(prop))
                hit = (None, None, None)
                for table, gap, asc, desc in (("OS/2", "sTypoLineGap", "sTypoAscender", "sTypoDescender"),
                                              ("hhea", "lineGap", "ascent", "descent")):
                    t = font.get_sfnt_table(table)
                    if t is None:
                        continue
                    scale = prop.get_size_in_points() * self.dpi / 72 / font.get_sfnt_table("head")["unitsPerEm"]
                    hit = (t[asc] * scale, -t[desc] * scale, t[gap] * scale)
                    break
            except Exception:
                hit = (None, None, None)  # matplotlib measures the text itself
            self._heights[key] = hit
        return hit

    def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
        if ismath or not _TextCachingRenderer._enabled:
            return super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)
        try:
            key = (s, hash(prop), self.dpi, bool(gc.get_antialiased()))
            hit = self._cache.get(key)
            if hit is None:
                font = self._prepare_font(prop)
                font.set_text(s, 0, flags=get_hinting_flag())
                font.draw_glyphs_to_bitmap(antialiased=gc.get_antialiased())
                xo, yo = font.get_bitmap_offset()
                hit = (np.array(font.get_image(), dtype=np.uint8), xo / 64.0, yo / 64.0,
                       font.get_descent() / 64.0)
                if len(self._cache) >= self.MAX_ENTRIES:
                    self._cache.clear()
                self._cache[key] = hit
            img, xo, yo, d = hit
            xd, yd = d * math.sin(math.radians(angle)), d * math.cos(math.radians(angle))
            self._renderer.draw_text_image(img, round(x + xo + xd), round(y + yo + yd) + 1, angle, gc)
        except Exception:  # a matplotlib whose internals differ: use its own text path from now on
            _TextCachingRenderer._enabled = False
            return super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)


class _FastCanvas(FigureCanvasAgg):
    def get_renderer(self, *args, **kwargs):
        w, h = self.figure.bbox.size
        key = (w, h, self.figure.dpi)
        if getattr(self, "_lastKey", None) != key or not isinstance(getattr(self, "renderer", None),
                                                                     _TextCachingRenderer):
            self.renderer = _TextCachingRenderer(w, h, self.figure.dpi)
            self._lastKey = key
        return self.renderer


class ShardFigure(Figure):
    """A matplotlib Figure with its own Agg canvas, unknown to pyplot. IPython shows it as an HTML
    ``<img>`` (and PNG) at twice the pixels of its displayed size, at most the page's column wide, with
    an alt text saying what it shows (``shardlab.pictures.display.figure_bundle``)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _FastCanvas(self)

    def _repr_mimebundle_(self, include=None, exclude=None):
        return figure_bundle(self, include, exclude)

    def _repr_png_(self):
        return page_image(self).data


_PALETTE_CACHE: dict = {}


def _palette_image(key_colors: np.ndarray):
    """A PIL palette holding the picture's own colours, their blends with white and black (edges,
    label boxes, antialiased text on them), a grey ramp and the error red: every pixel of a sheet
    maps to a near-exact entry, so no per-frame colour search is needed."""
    from PIL import Image

    key = key_colors.tobytes()
    img = _PALETTE_CACHE.get(key)
    if img is None:
        base = key_colors[:, :3].astype(float)
        white, black = np.full(3, 255.0), np.zeros(3)
        parts = [base]
        for t in (0.2, 0.45, 0.7, 0.85):
            parts.append(base * (1 - t) + white * t)
        for t in (0.3, 0.6):
            parts.append(base * (1 - t) + black * t)
        parts.append(np.repeat(np.linspace(0, 255, 40)[:, None], 3, axis=1))
        red = np.array(to_rgb(_ERROR_RGB)) * 255
        parts.append(np.array([red * (1 - t) + white * t for t in np.linspace(0, 0.9, 8)]))
        cols = np.unique(np.clip(np.vstack(parts).round(), 0, 255).astype(np.uint8), axis=0)[:256]
        flat = np.zeros((256, 3), dtype=np.uint8)
        flat[: len(cols)] = cols
        flat[len(cols):] = cols[0]
        img = Image.new("P", (1, 1))
        img.putpalette(flat.ravel().tolist())
        if len(_PALETTE_CACHE) > 64:
            _PALETTE_CACHE.clear()
        _PALETTE_CACHE[key] = img
    return img


def png_bytes(fig: Figure, *, tight: bool = False, colors: int | None = None, compact: bool = False,
              palette=None, format: str = "png") -> bytes:
    """The figure as PNG bytes (or lossless WebP with ``format="webp"``), at the figure's dpi.

    tight: crop to the drawn content; colors: quantise to a palette of that many colours (explorer
    frames); palette: instead, map to this (k, 3) array of the picture's colours (and their blends),
    much faster; compact: spend more time for a smaller file (page frames).
    """
    from PIL import Image

    if format not in ("png", "webp"):
        raise ValueError(f"format: expected 'png' or 'webp', got {format!r}")
    if tight:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight", facecolor="white")
        if colors is None and palette is None and not compact and format == "png":
            return buf.getvalue()
        img = Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    else:
        canvas = fig.canvas if isinstance(fig.canvas, FigureCanvasAgg) else _FastCanvas(fig)
        canvas.draw()
        w, h = canvas.get_width_height(physical=True)
        img = Image.frombuffer("RGBA", (w, h), canvas.buffer_rgba(), "raw", "RGBA", 0, 1).convert("RGB")
    if palette is not None:
        img = img.quantize(palette=_palette_image(np.asarray(palette, dtype=np.uint8)), dither=Image.Dither.NONE)
    elif colors:
        img = quantize(img, colors)
    out = io.BytesIO()
    if format == "webp":
        img.save(out, format="WEBP", lossless=True, quality=100, method=2 if compact else 0)
    elif compact:
        img.save(out, format="PNG", compress_level=9, optimize=True)
    else:
        img.save(out, format="PNG", compress_level=1)
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# What to draw: a layout seen as panels of 2-D tile grids


def _holder_label(ids, total: int) -> str:
    """The holders of a tile, listed (up to 8, in lines of 4) or shortened (a range, a progression,
    "all n"). The sharding playground labels its tiles with the same rule."""
    ids = [int(i) for i in ids]
    n = len(ids)
    if n == 1:
        return str(ids[0])
    if n > 8:
        if n == total:
            return f"all {n}"
        step = ids[1] - ids[0]
        if step > 0 and all(b - a == step for a, b in zip(ids, ids[1:])):
            return f"{ids[0]}–{ids[-1]}" if step == 1 else f"{ids[0]},{ids[1]},…,{ids[-1]}"
        return f"{n} devs\n{ids[0]},{ids[1]},…"
    per_line = 4 if n > 4 else n
    return "\n".join(",".join(map(str, ids[i:i + per_line])) for i in range(0, n, per_line))


def _tile_labels(ids, total: int) -> list[str]:
    """A tile's label at each level of detail, most explicit first: the holders listed (up to 8),
    then shortened to a range ("16–31"), a progression ("0,4,…,60") or a count. A tile held by every
    device of the mesh says so ("all 8 devices")."""
    ids = [int(i) for i in ids]
    n = len(ids)
    if n == 1:
        return [str(ids[0])]
    if n == total:
        return [f"all {n} devices", f"all {n}\ndevices", f"all {n}"]
    step = ids[1] - ids[0]
    regular = step > 0 and all(b - a == step for a, b in zip(ids, ids[1:]))
    short = (f"{ids[0]}–{ids[-1]}" if regular and step == 1 and n > 2 else
             f"{ids[0]},{ids[1]},…,{ids[-1]}" if regular and n > 4 else None)
    levels = []
    if n <= 8:
        levels.append(_holder_label(ids, total))
    if short:
        levels.append(short)
    elif n > 8:
        levels.append(f"{n} devices\n{ids[0]},{ids[1]},…,{ids[-1]}")
    levels.append(f"{n} devices" if n > 4 or not levels else levels[-1])
    return list(dict.fromkeys(levels))


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _slice_text(tile_idx, tile_len, shards) -> str:
    if shards == 1:
        return ":"
    return f"{tile_idx * tile_len}:{(tile_idx + 1) * tile_len}"


def _ids_text(ids) -> str:
    ids = [int(i) for i in ids]
    if len(ids) > 2 and ids == list(range(ids[0], ids[0] + len(ids))):
        return f"{ids[0]}–{ids[-1]}"
    return ", ".join(map(str, ids))


class _View:
    """A layout prepared for drawing: its panels, each a 2-D grid of tiles with their holders."""

    def __init__(self, layout: Layout, kind: str = "array"):
        self.layout = layout
        self.kind = kind
        nd = layout.ndim
        holders = layout.tile_holders
        if nd == 0:
            self.plane_shape, self.grid = (1, 1), (1, 1)
            self.lead_shards = ()
            holders = holders.reshape(1, 1, 1, -1)
        elif nd == 1:
            self.plane_shape, self.grid = (1, layout.shape[0]), (1, layout.shards[0])
            self.lead_shards = ()
            holders = holders.reshape(1, 1, layout.shards[0], -1)
        else:
            self.plane_shape = layout.shape[-2:]
            self.grid = layout.shards[-2:]
            self.lead_shards = layout.shards[:-2]
            holders = holders.reshape(-1, *self.grid, layout.replication)
        self.holders = holders                      # (panels, R, C, rep)
        self.num_panels_total = holders.shape[0]
        self.num_panels = min(self.num_panels_total, MAX_PANELS)

    @property
    def ratio(self) -> float:
        """Height over width of a panel (1-D arrays are a strip)."""
        if self.layout.ndim == 1:
            return 0.14
        h_el, w_el = self.plane_shape
        return min(max(h_el / w_el, 0.2), 2.5) if h_el and w_el else 1.0

    def panel_title(self, p: int) -> str:
        lay = self.layout
        if lay.ndim <= 2:
            return ""
        idx = np.unravel_index(p, self.lead_shards)
        if self.kind == "mesh":
            return ", ".join(f"{a}={int(i)}" for a, i in zip(lay.mesh_axes, idx))
        lead = [_slice_text(int(i), t, k) for i, t, k in zip(idx, lay.tile_shape, self.lead_shards)]
        return "[" + ", ".join(lead + [":", ":"]) + "]"

    def dim_label(self, d: int) -> str:
        lay = self.layout
        if self.kind == "mesh":
            return f"mesh axis {lay.mesh_axes[d]!r} ({lay.mesh_sizes[d]})"
        axes = lay.spec[d]
        split = f" — split by {' × '.join(map(repr, axes))}" if axes else " — not split"
        return f"dim {d} ({lay.shape[d]}){split}"

    def tick_chars(self, d: int) -> int:
        """Characters of the longest tick label along dimension ``d`` (0 for none)."""
        lay = self.layout
        if d < 0 or d >= lay.ndim:
            return 0
        if self.kind == "mesh":
            return len(str(max(lay.mesh_sizes[d] - 1, 0)))
        return len(str(lay.shape[d]))

    def describe(self, title: str) -> str:
        """The picture in words (its alt text): what is drawn, and who holds which tile."""
        lay = self.layout
        if self.kind == "mesh":
            s = f"{title}: {lay.num_devices} devices, one cell each"
            if lay.num_devices <= 64:
                if lay.ndim == 2:
                    rows = "; ".join(" ".join(map(str, r)) for r in lay.device_ids.tolist())
                    s += f"; device ids by row along {lay.mesh_axes[0]!r}: {rows}"
                else:
                    s += f"; device ids in mesh order: {' '.join(map(str, lay.device_ids.ravel().tolist()))}"
            return s
        s = title if title != lay.spec_str() else f"Layout {lay.spec_str()}"
        s += f": {lay.spec_str()} on mesh {lay.mesh_str()}, array {lay.shape}" if title != lay.spec_str() \
            else f" on mesh {lay.mesh_str()}, array {lay.shape}"
        n_tiles = math.prod(lay.shards)
        rep = lay.replication
        if lay.memory_kind not in (None, "device"):
            s += f" in memory kind {lay.memory_kind}"
        if n_tiles == 1:
            return s + (f"; the whole array on all {rep} devices ({_ids_text(lay.device_ids.ravel())})"
                        if rep > 1 else f"; the whole array on device {int(lay.device_ids.ravel()[0])}")
        s += f"; {n_tiles} tiles of {lay.tile_shape}"
        s += ", each on one device" if rep == 1 else f", each on {rep} devices"
        if n_tiles <= 16:
            holders = lay.tile_holders.reshape(-1, rep)
            tiles = [" ".join(map(str, np.unravel_index(t, lay.shards))) for t in range(n_tiles)]
            said = [f"tile {t} on {_ids_text(h)}" if rep > 1 else f"{int(h[0])}" for t, h in zip(tiles, holders)]
            s += ("; holders in tile order: " + "; ".join(said)) if rep > 1 else \
                ("; device ids in tile order: " + " ".join(said))
        return s


# --------------------------------------------------------------------------------------------
# The drawing engine

# Text sizes in points as displayed; a figure wider than the page's column draws them larger
# (display.text_scale), so that they are these sizes where the page shows them.
TITLE_PT = 12.0
SUBTITLE_PT = 9.5
NOTE_PT = 9.0
PANEL_TITLE_PT = 9.5
AXIS_LABEL_PT = 9.5
TICK_PT = 9.0
LEGEND_PT = 9.0
ERROR_PT = 10.5
LINE = 1.25           # line height over font size
CHAR_W = 0.62         # a character's average width over font size (DejaVu Sans, digits and letters)
_PT = 1 / 72          # inches per point


class _TileImage(Artist):
    """The tiles of a panel, rendered by numpy at the Axes' exact pixel size and copied straight
    into the canvas (no resampling pass, unlike imshow)."""

    def __init__(self, ax):
        super().__init__()
        self.axes = ax
        self.set_figure(ax.figure)
        self.set_zorder(0.5)
        self._make = None
        self._array = None
        self._key = None

    def set_maker(self, make):
        """make(width_px, height_px) -> RGBA uint8 array, top row first."""
        self._make = make
        self._key = None
        self.stale = True

    def get_array(self):
        """The last rendered RGBA array (top row first), or None before the first draw."""
        return self._array

    def get_window_extent(self, renderer=None):
        return self.axes.bbox

    def draw(self, renderer):
        if not self.get_visible() or self._make is None:
            return
        bb = self.axes.bbox
        x0, y0 = int(round(bb.x0)), int(round(bb.y0))
        w, h = int(round(bb.x1)) - x0, int(round(bb.y1)) - y0
        if w <= 0 or h <= 0:
            return
        if self._key != (w, h):
            self._array = np.ascontiguousarray(self._make(w, h))
            self._key = (w, h)
        gc = renderer.new_gc()
        renderer.draw_image(gc, x0, y0, self._array[::-1])  # the renderer fills bottom-up
        gc.restore()
        self.stale = False


class _Panel:
    """One Axes with an image of tiles, their borders, labels, and its own tick and axis labels
    (plain texts: matplotlib's Axis machinery is half the cost of a frame and is not needed)."""

    def __init__(self, fig, rect, k: float):
        ax = fig.add_axes(rect)
        ax.set_anchor("C")
        ax.set_axis_off()
        self.ax = ax
        self.k = k
        self.image = _TileImage(ax)
        ax.add_artist(self.image)
        self.lines = LineCollection([], colors="white", linewidths=1.5)
        ax.add_collection(self.lines)
        self.texts = []
        self.xticks, self.yticks = [], []
        tick = TICK_PT * k
        self._xtrans = offset_copy(ax.get_xaxis_transform(), fig=fig, y=-3, units="points")
        self._ytrans = offset_copy(ax.get_yaxis_transform(), fig=fig, x=-3, units="points")
        self.xlabel = ax.text(0.5, 0, "", transform=offset_copy(ax.transAxes, fig=fig, y=-(5 + tick * LINE),
                                                                 units="points"),
                              ha="center", va="top", fontsize=AXIS_LABEL_PT * k, linespacing=1.1)
        self.ylabel = ax.text(0, 0.5, "", transform=ax.transAxes, rotation=90, ha="right", va="center",
                              fontsize=AXIS_LABEL_PT * k, linespacing=1.1)
        self.ticks_key = None

    def label(self, i: int):
        if i < len(self.texts):
            t = self.texts[i]
        else:
            t = self.ax.text(0, 0, "", ha="center", va="center", linespacing=1.0, clip_on=False)
            t._shardlab_tile_label = True  # lets tests and readers tell tile labels from tick labels
            self.texts.append(t)
        t.set_visible(True)
        return t

    def set_ticks(self, xs, xlabels, ys, ylabels):
        """Tick labels along the bottom (x in data units) and the left (y in data units)."""
        size = TICK_PT * self.k
        for pool, pos, labs, trans, kw in ((self.xticks, xs, xlabels, self._xtrans, dict(ha="center", va="top")),
                                           (self.yticks, ys, ylabels, self._ytrans, dict(ha="right", va="center"))):
            for i, (p, lab) in enumerate(zip(pos, labs)):
                if i == len(pool):
                    pool.append(self.ax.text(0, 0, "", transform=trans, fontsize=size, color="#333333", **kw))
                t = pool[i]
                t.set_text(lab)
                t.set_position((p, 0) if pool is self.xticks else (0, p))
                t.set_visible(True)
            for t in pool[len(pos):]:
                t.set_visible(False)
        # The y label sits left of the widest y tick label.
        widest = max((len(l) for l in ylabels), default=0)
        self.ylabel.set_transform(offset_copy(self.ax.transAxes, fig=self.ax.figure,
                                              x=-(3 + 3 + CHAR_W * size * widest + 2), units="points"))


def _wrap(text: str, width_pt: float, size: float, max_lines: int = 3) -> str:
    """``text`` wrapped to lines of at most ``width_pt`` at font ``size`` (existing line breaks kept)."""
    chars = max(12, int(width_pt / (CHAR_W * size)))
    lines = []
    for para in str(text).split("\n"):
        lines.extend(textwrap.wrap(para, chars, break_on_hyphens=False) or [""])
    if len(lines) > max_lines:
        lines = lines[:max_lines]
        lines[-1] = textwrap.shorten(lines[-1] + " …", chars, placeholder=" …")
    return "\n".join(lines)


def _wrap_parts(parts, width_pt: float, size: float, sep: str = " · ") -> str:
    """Join ``parts`` with ``sep``, starting a new line where the next part would not fit."""
    chars = max(12, int(width_pt / (CHAR_W * size)))
    lines = [parts[0]] if parts else []
    for part in parts[1:]:
        if len(lines[-1]) + len(sep) + len(part) <= chars:
            lines[-1] += sep + part
        else:
            lines.append(part)
    return "\n".join(_wrap(l, width_pt, size, max_lines=2) for l in lines)


_LABEL_BOX = dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85)
_NEUTRAL = np.array([232, 232, 232, 255], dtype=np.uint8)   # a tile held by several devices
_NEUTRAL_EDGE = "#8c8c8c"                                    # borders between such tiles


class Sheet:
    """Draws layouts on one figure, within ``rect`` (figure fraction); drawing again reuses the axes,
    image, line and text artists whenever the new picture has the same structure.

    Text is sized for the page: at least 9 pt where the page displays the figure (a figure wider than
    the text column is shown smaller, so its text is drawn larger by ``display.text_scale``). A tile
    held by one device is filled with that device's colour; a tile held by several is filled with one
    neutral grey and labelled with its holders, so replication reads as replication.
    """

    def __init__(self, fig: Figure, rect=(0.0, 0.0, 1.0, 1.0)):
        self.fig = fig
        self.rect = tuple(rect)
        self.panels: list[_Panel] = []
        self.structure = None
        self.k = text_scale(fig)
        self.title = fig.text(0, 0, "", ha="center", va="top", fontweight="bold", linespacing=1.1)
        self.subtitle = fig.text(0, 0, "", ha="center", va="top", color="#333333", linespacing=1.15)
        self.note = fig.text(0, 0, "", ha="center", va="bottom", color="#444444", linespacing=1.15)
        self.error = fig.text(0, 0, "", ha="center", va="center", color=_ERROR_RGB, wrap=False, visible=False)
        self.legend = None
        self.key_colors = np.zeros((0, 3), dtype=np.uint8)  # the colours this sheet's picture uses
        self._description = ""
        self._error = None
        self._set_font_sizes()

    def _set_font_sizes(self):
        k = self.k = text_scale(self.fig)
        self.title.set_fontsize(TITLE_PT * k)
        self.subtitle.set_fontsize(SUBTITLE_PT * k)
        self.note.set_fontsize(NOTE_PT * k)
        self.error.set_fontsize(ERROR_PT * k)

    def owned_texts(self) -> list:
        """The figure-level texts this sheet draws (title, subtitle, note, error, legend)."""
        texts = [self.title, self.subtitle, self.note, self.error]
        if self.legend is not None:
            texts += list(self.legend.get_texts())
        return texts

    def describe(self) -> str:
        """What the sheet shows now, in words (an alt text)."""
        return self._description

    # geometry ----------------------------------------------------------------------------------
    def _inches(self):
        w, h = self.fig.get_size_inches()
        x0, y0, rw, rh = self.rect
        return w * rw, h * rh

    def _line(self, size_pt: float) -> float:
        """Height of one line of text of ``size_pt`` (as displayed), in figure inches."""
        return size_pt * self.k * LINE * _PT

    def _bands(self, n_title: int, n_sub: int, n_note: int, n_legend: int):
        """Inches above the panels (title, subtitle) and below them (notes, legend)."""
        top = 0.05 + n_title * self._line(TITLE_PT) * 0.9 + n_sub * self._line(SUBTITLE_PT) * 0.92 + 0.06
        bottom = 0.03 + n_note * self._line(NOTE_PT) * 0.92 + n_legend * self._line(LEGEND_PT) * 1.15 + \
            (0.05 if n_note or n_legend else 0.0)
        return top, bottom

    def _place_texts(self, n_title: int, n_note: int):
        x0, y0, rw, rh = self.rect
        fh = self.fig.get_size_inches()[1]
        self.title.set_position((x0 + rw / 2, y0 + rh - 0.05 / fh))
        self.subtitle.set_position((x0 + rw / 2, y0 + rh - (0.07 + n_title * self._line(TITLE_PT) * 0.9) / fh))
        self.note.set_position((x0 + rw / 2, y0 + 0.03 / fh))
        self.error.set_position((x0 + rw / 2, y0 + rh * 0.45))
        self._legend_y = y0 + (0.03 + n_note * self._line(NOTE_PT) * 0.92 + (0.03 if n_note else 0)) / fh

    def _geometry(self, s):
        """Panel rectangles (figure fraction) and a panel's drawn size in points, for structure ``s``."""
        fw, fh = self.fig.get_size_inches()
        x0, y0, rw, rh = self.rect
        w_in, h_in = rw * fw, rh * fh
        k = self.k
        top, bottom = self._bands(s["title_lines"], s["sub_lines"], s["note_lines"], s["legend_rows"])
        tick_w = CHAR_W * TICK_PT * k * _PT
        left = 0.04 + (3 + 3) * _PT + s["ytick_chars"] * tick_w + 2 * _PT + s["ylabel_lines"] * self._line(AXIS_LABEL_PT)
        right = 0.06 + 0.5 * s["xtick_chars"] * tick_w
        below = 0.07 + (3 + 2) * _PT + self._line(TICK_PT) + s["xlabel_lines"] * self._line(AXIS_LABEL_PT) * 0.9
        above = (self._line(PANEL_TITLE_PT) + 0.06) if s["panel_titles"] else 0.05
        n, ratio = s["panels"], s["ratio"]
        best = None
        for cols in range(1, n + 1):
            rows = math.ceil(n / cols)
            cw, ch = w_in / cols, (h_in - top - bottom) / rows
            pw, ph = cw - left - right, ch - below - above
            if pw <= 0 or ph <= 0:
                continue
            size = min(pw, ph / ratio)  # drawn width of one panel
            if best is None or size > best[0] + 1e-9:
                best = (size, cols, rows)
        cols, rows = (best[1], best[2]) if best else (math.ceil(math.sqrt(n)),) * 2
        cw, ch = w_in / cols, (h_in - top - bottom) / rows
        width, height = max(cw - left - right, 0.05), max(ch - below - above, 0.05)
        rects = []
        for p in range(n):
            r, c = divmod(p, cols)
            lo = bottom + (rows - 1 - r) * ch + below
            rects.append((x0 + (c * cw + left) / fw, y0 + lo / fh, width / fw, height / fh))
        aw, ah = width * 72, height * 72
        if ah / aw > ratio:
            ah = aw * ratio
        else:
            aw = ah / ratio
        return rects, (aw, ah)

    def _build(self, s):
        """Panels placed for structure ``s``: the existing ones moved (Axes are slow to make), new ones
        made, extra ones removed."""
        rects, _ = self._geometry(s)
        keep = [p for p in self.panels if p.k == self.k][: len(rects)]
        for p in self.panels:
            if p not in keep:
                p.ax.remove()
        for p, r in zip(keep, rects):
            p.ax.set_position(r)
        self.panels = keep + [_Panel(self.fig, r, self.k) for r in rects[len(keep):]]
        for p in self.panels:
            p.ax.set_box_aspect(s["ratio"])
            p.ticks_key = None

    # drawing -----------------------------------------------------------------------------------
    def draw(self, x, *, color_by: str = "device", title: str | None = None, kind: str = "array"):
        """Draw the layout ``x`` (a Layout or anything ``layout_of`` accepts)."""
        layout = x if isinstance(x, Layout) else layout_of(x)
        if color_by != "device" and color_by not in layout.mesh_axes:
            raise ValueError(f"color_by: expected 'device' or a mesh axis name "
                             f"({', '.join(map(repr, layout.mesh_axes))}), got {color_by!r}")
        self._set_font_sizes()
        k = self.k
        view = _View(layout, kind)
        w_pt = self._inches()[0] * 72 - 8
        notes = []
        if view.num_panels < view.num_panels_total:
            notes.append(f"showing {view.num_panels} of {view.num_panels_total} slices")
        colors, neutral_any = self._tile_colors(view, color_by)
        legend = self._legend_entries(layout, color_by, neutral_any)
        legend_cols = max(1, min(len(legend), int(w_pt // ((max((len(l) for _, l in legend), default=1) + 3)
                                                              * CHAR_W * LEGEND_PT * k))))
        legend_rows = math.ceil(len(legend) / legend_cols) if legend else 0
        title_text = _wrap(title if title is not None else layout.spec_str(), w_pt, TITLE_PT * k, max_lines=2)
        sub = self._subtitle(layout, title, kind, w_pt)
        xlab = view.dim_label(layout.ndim - 1) if layout.ndim else ""
        ylab = view.dim_label(layout.ndim - 2) if layout.ndim >= 2 else ""
        def layout_for(label_note):
            note_text = _wrap_parts(notes + ([label_note] if label_note else []), w_pt, NOTE_PT * k)
            s = dict(panels=view.num_panels, ratio=view.ratio, panel_titles=layout.ndim > 2,
                     title_lines=title_text.count("\n") + 1, sub_lines=sub.count("\n") + 1,
                     note_lines=note_text.count("\n") + 1 if note_text else 0, legend_rows=legend_rows,
                     ytick_chars=view.tick_chars(layout.ndim - 2) if layout.ndim >= 2 else 0,
                     xtick_chars=view.tick_chars(layout.ndim - 1) if layout.ndim else 0,
                     xlabel_lines=1 if xlab else 0, ylabel_lines=1 if ylab else 0, k=k)
            # Axis labels too long for their side of a panel go on two lines, or lose their second half.
            for _ in range(2):
                _, (aw, ah) = self._geometry(s)
                x_text, y_text = self._axis_label(xlab, aw + 40), self._axis_label(ylab, ah + 10)
                lines = (x_text.count("\n") + 1 if x_text else 0, y_text.count("\n") + 1 if y_text else 0)
                if lines == (s["xlabel_lines"], s["ylabel_lines"]):
                    break
                s["xlabel_lines"], s["ylabel_lines"] = lines
            return s, note_text, x_text, y_text, (aw, ah), self._label_plan(view, aw, ah)

        s, note_text, x_text, y_text, (aw, ah), plan = layout_for(None)
        if plan["note"]:
            # Say that labels are thinned, unless the line saying it leaves less room for them (then
            # the thinning speaks for itself).
            with_note = layout_for(plan["note"])
            if with_note[-1]["stride"] == plan["stride"]:
                s, note_text, x_text, y_text, (aw, ah), plan = with_note
        key = tuple(sorted(s.items()))
        if key != self.structure:
            self._build(s)
            self.structure = key
        self._place_texts(s["title_lines"], s["note_lines"])
        self.error.set_visible(False)

        used = colors.reshape(-1, 4)[:, :3]
        extra = [to_rgb(_NEUTRAL_EDGE)] if neutral_any else []
        self.key_colors = np.unique(np.vstack([used, np.round(np.array(extra).reshape(-1, 3) * 255)]).astype(np.uint8),
                                    axis=0)
        self._paint_panels(view, colors, neutral_any, plan, x_text, y_text, aw, ah)

        self.title.set_text(title_text)
        self.subtitle.set_text(sub)
        self.note.set_text(note_text)
        self._set_legend(legend, legend_cols)
        self._description = view.describe(title if title is not None else layout.spec_str())
        return self.fig

    def _subtitle(self, layout: Layout, title: str | None, kind: str, w_pt: float) -> str:
        """The line under the title, wrapped at its " · " separators to the sheet's width."""
        # (priority, text): where two lines cannot hold them all, the least needed go first.
        if kind == "mesh":
            parts = [(0, f"{layout.num_devices} devices"), (2, "each cell is one device, labelled with its id")]
        else:
            parts = [(1, f"mesh {layout.mesh_str()}"), (2, f"array {layout.shape}"), (4, f"tile {layout.tile_shape}")]
            if title is not None:
                parts.insert(0, (0, layout.spec_str()))  # a caller's title replaces the spec line
            rep = layout.replication
            if rep > 1:
                parts.append((3, f"whole array on all {rep} devices (grey)" if rep == layout.num_devices
                              else f"each tile on {rep} devices (grey)"))
        if layout.memory_kind not in (None, "device"):
            parts.append((1, f"memory kind: {layout.memory_kind}"))
        while True:
            text = _wrap_parts([t for _, t in parts], w_pt, SUBTITLE_PT * self.k)
            if text.count("\n") < 2 or len(parts) == 1:
                return text
            parts.remove(max(parts, key=lambda p: p[0]))

    def draw_error(self, message: str, *, title: str | None = None):
        """Show ``message`` instead of a picture (panels are hidden, kept for the next draw)."""
        self._set_font_sizes()
        for p in self.panels:
            p.ax.set_visible(False)
        self._set_legend([], 1)
        w_pt = self._inches()[0] * 72 - 8
        self.title.set_text(_wrap(title or "", w_pt, TITLE_PT * self.k, max_lines=3))
        self._place_texts(1, 0)
        self.subtitle.set_text("")
        self.note.set_text("")
        self.error.set_text(_wrap(str(message), w_pt, ERROR_PT * self.k, max_lines=12))
        self.error.set_visible(True)
        self._error = (title or "", str(message))
        self._description = (f"{title}: " if title else "") + " ".join(str(message).split())
        return self.fig

    def error_shown(self):
        """(title, message) while the sheet shows an error instead of a picture, else None."""
        return self._error if self.error.get_visible() else None

    def _tile_colors(self, view: _View, color_by: str):
        """RGBA of every tile, (panels, R, C, 4), and whether any tile is held by several devices
        whose colours differ (drawn neutral)."""
        lay = view.layout
        hold = view.holders[: view.num_panels]                       # (P, R, C, rep)
        ids = lay.device_ids.ravel()
        if color_by == "device":
            lut = np.zeros((int(ids.max()) + 1 if ids.size else 1, 4), dtype=np.uint8)
            lut[:, 3] = 255
            lut[ids, :3] = _PALETTE_RGB[ids % len(_PALETTE_RGB)]
            if lay.replication == 1:
                return lut[hold[..., 0]], False
            return np.broadcast_to(_NEUTRAL, hold.shape[:3] + (4,)).copy(), True
        coord = np.zeros(int(ids.max()) + 1 if ids.size else 1, dtype=np.int64)
        coord[ids] = lay.mesh_coords(color_by).ravel()
        cols = _coord_colors(lay.mesh_sizes[lay.mesh_axes.index(color_by)])
        c = coord[hold]                                              # (P, R, C, rep)
        same = (c == c[..., :1]).all(axis=-1)
        out = np.where(same[..., None], cols[c[..., 0]], _NEUTRAL)
        return out.astype(np.uint8), bool((~same).any())

    def _legend_entries(self, layout, color_by, neutral_any):
        if color_by == "device":
            return []
        n = layout.mesh_sizes[layout.mesh_axes.index(color_by)]
        cols = _coord_colors(n) / 255.0
        shown = range(n) if n <= 16 else list(range(8)) + list(range(n - 8, n))
        entries = [(cols[i], f"{color_by}={i}") for i in shown]
        if neutral_any:
            entries.append((_NEUTRAL / 255.0, "several"))
        return entries

    def _set_legend(self, entries, ncol):
        if self.legend is not None:
            self.legend.remove()
            self.legend = None
        if not entries:
            return
        x0, y0, rw, rh = self.rect
        handles = [Patch(facecolor=c, edgecolor="#999999" if lab == "several" else c, label=lab) for c, lab in entries]
        self.legend = self.fig.legend(handles=handles, loc="lower center", bbox_to_anchor=(x0 + rw / 2, self._legend_y),
                                      fontsize=LEGEND_PT * self.k, frameon=False, ncol=ncol, handlelength=1.0,
                                      borderaxespad=0.0, borderpad=0.1, labelspacing=0.2, columnspacing=1.0,
                                      handletextpad=0.4)

    def _axis_label(self, full: str, room_pt: float) -> str:
        """``full`` ("dim 0 (8) — split by 'x'") on one line, on two, or its first half, whichever first
        fits in ``room_pt``; empty if none does."""
        if not full:
            return ""
        head = full.split(" — ")[0]
        for text in (full, full.replace(" — ", "\n", 1), head):
            if max(len(l) for l in text.split("\n")) * CHAR_W * AXIS_LABEL_PT * self.k <= room_pt:
                return text
        return ""

    def _label_plan(self, view: _View, aw: float, ah: float) -> dict:
        """The tile labels' level of detail, font size and thinning stride for panels ``aw`` x ``ah`` points."""
        lay = view.layout
        R, C = view.grid
        k = self.k
        tile_w_pt, tile_h_pt = aw / C, ah / R
        hold = view.holders[0]
        total = lay.num_devices
        if lay.replication == 1:
            max_id = int(lay.device_ids.max()) if lay.num_devices else 0
            candidates = [[str(max_id)]]
        else:
            per_tile = [_tile_labels(hold[r, c], total) for r in range(R) for c in range(C)]
            depth = max(len(p) for p in per_tile)
            candidates = [[p[min(i, len(p) - 1)] for p in per_tile] for i in range(depth)]

        def fit(labels):
            lines = max(l.count("\n") + 1 for l in labels)
            chars = max(len(x) for l in labels for x in l.split("\n"))
            return min(MAX_FONT * k, tile_w_pt * 0.88 / (CHAR_W * chars), tile_h_pt * 0.82 / (LINE * lines)), \
                chars, lines

        level = 0
        for level, labels in enumerate(candidates):
            fs, chars, lines = fit(labels)
            if fs >= MIN_FONT * k:
                break
        stride = 1
        boxed = fs < MIN_FONT * k
        if boxed:
            # At the smallest size a label may cover its tile's borders (in a white box), not its
            # neighbours' labels: where it is wider or taller than a tile, only every stride-th is shown.
            fs = MIN_FONT * k
            need_x = fs * CHAR_W * chars / (tile_w_pt * 0.95) if C > 1 else 1.0
            need_y = fs * LINE * lines / (tile_h_pt * 0.95) if R > 1 else 1.0
            need = max(need_x, need_y)
            stride = 1 if need <= 1.2 else int(math.ceil(need - 1e-9))   # boxes may touch, not cover
        while math.ceil(R / stride) * math.ceil(C / stride) * view.num_panels > MAX_LABELS:
            stride += 1
        note = None
        if stride > 1:
            room = self._inches()[0] * 72 - 8
            note = f"labels on every {_ordinal(stride)} tile"
            for more in (f" in each direction ({R}×{C} tiles per panel)", " in each direction"):
                if len(note + more) * CHAR_W * NOTE_PT * k <= room * 0.9:
                    note += more
                    break
        return dict(level=level, font=fs, stride=stride, note=note, chars=chars, lines=lines, boxed=boxed)

    def _paint_panels(self, view: _View, colors, neutral, plan, xlab, ylab, aw, ah):
        lay = view.layout
        R, C = view.grid
        h_el, w_el = view.plane_shape
        # Draw in element coordinates (tiles in their true proportions) unless the array is empty.
        H = h_el if h_el else R
        W = w_el if w_el else C
        th, tw = H / R, W / C
        total = lay.num_devices
        level, fs, stride = plan["level"], plan["font"], plan["stride"]
        lw = 1.5 if max(R, C) <= 16 else 0.8 if max(R, C) <= 48 else 0.0
        edge = _NEUTRAL_EDGE if neutral else "white"
        segs = [((0, i * th), (W, i * th)) for i in range(1, R)] + \
               [((j * tw, 0), (j * tw, H)) for j in range(1, C)]
        max_x = max(2, int(aw // (view.tick_chars(lay.ndim - 1) * CHAR_W * TICK_PT * self.k + 10)))
        max_y = max(2, int(ah // (TICK_PT * self.k * LINE + 4)))
        # Labelled tiles: every one, or every stride-th from the middle of the first stride, leaving out
        # those whose label would stick out of the panel.
        rows, cols = list(range(R)), list(range(C))
        if stride > 1:
            lab_w = plan["chars"] * CHAR_W * fs / aw * C     # in tiles
            lab_h = plan["lines"] * LINE * fs / ah * R
            rows = [r for r in range(stride // 2, R, stride) if lab_h / 2 <= r + 0.5 <= R - lab_h / 2] or [R // 2]
            cols = [c for c in range(stride // 2, C, stride) if lab_w / 2 <= c + 0.5 <= C - lab_w / 2] or [C // 2]
        grids = {}

        def grid(w, h):
            # Column of each pixel, and how many pixel rows each tile row covers.
            if (w, h) not in grids:
                grids[(w, h)] = (np.arange(w) * C // w, np.bincount(np.arange(h) * R // h, minlength=R))
            return grids[(w, h)]

        for p, panel in enumerate(self.panels):
            ax = panel.ax
            ax.set_visible(True)
            hold = view.holders[p]                              # (R, C, rep)
            tile_rgba = colors[p]                               # (R, C, 4)

            def make(w, h, tile_rgba=tile_rgba):
                tc, rows_per_tile = grid(w, h)
                return np.repeat(tile_rgba[:, tc], rows_per_tile, axis=0)   # one pixel row per tile row

            panel.image.set_maker(make)
            ax.set_xlim(0, W)
            ax.set_ylim(H, 0)
            panel.lines.set_segments(segs if lw else [])
            panel.lines.set_linewidth(lw)
            panel.lines.set_color(edge)
            self._ticks(panel, view, R, C, th, tw, max_x, max_y)
            ax.set_title(view.panel_title(p), fontsize=PANEL_TITLE_PT * self.k, pad=3)
            panel.xlabel.set_text(xlab)
            panel.ylabel.set_text(ylab)
            n_used = 0
            for r in rows:
                for c in cols:
                    ids = hold[r, c]
                    t = panel.label(n_used)
                    n_used += 1
                    levels = _tile_labels(ids, total)
                    t.set_text(levels[min(level, len(levels) - 1)])
                    t.set_position(((c + 0.5) * tw, (r + 0.5) * th))
                    t.set_fontsize(fs)
                    if plan["boxed"]:  # a label larger than its tile: a white box keeps it readable
                        t.set_color("black")
                        t.set_bbox(_LABEL_BOX)
                    else:
                        t.set_bbox(None)
                        t.set_color("black" if _luminance(tile_rgba[r, c]) > 0.5 else "white")
            for t in panel.texts[n_used:]:
                t.set_visible(False)

    @staticmethod
    def _ticks(panel, view: _View, R, C, th, tw, max_x, max_y):
        lay = view.layout
        key = (view.kind, lay.shape, lay.shards, max_x, max_y)
        if panel.ticks_key == key:
            return
        panel.ticks_key = key

        def pick(n_tiles, size, most):
            step = max(1, math.ceil((n_tiles + 1) / min(9, most)))
            if view.kind == "mesh":
                pos = list(range(0, n_tiles, step))
                return [(i + 0.5) * size for i in pos], [str(i) for i in pos]
            pos = list(range(0, n_tiles + 1, step))
            if pos[-1] != n_tiles:
                if n_tiles - pos[-1] >= 0.75 * step or len(pos) == 1:
                    pos.append(n_tiles)
                else:  # too close to the last: the end of the array replaces it
                    pos[-1] = n_tiles
            return [i * size for i in pos], [str(int(round(i * size))) for i in pos]

        if lay.ndim == 0:
            panel.set_ticks([], [], [], [])
            return
        xt, xl = pick(C, tw, max_x)
        yt, yl = pick(R, th, max_y) if lay.ndim >= 2 else ([], [])
        panel.set_ticks(xt, xl, yt, yl)


# --------------------------------------------------------------------------------------------
# Public drawing functions


def _auto_figsize(view: _View) -> tuple[float, float]:
    """A figure size that the page shows at its natural size (no wider than the column), with room
    for the panels' labels at 9 pt."""
    n = view.num_panels
    ratio = view.ratio
    max_w = COLUMN_PX / CSS_PX_PER_INCH
    cols = 1 if n == 1 else 2 if n <= 4 else 3 if n <= 9 else 4
    rows = math.ceil(n / cols)
    side = 0.75 + 0.09 * max(view.tick_chars(view.layout.ndim - 2), 1)   # y ticks and label
    if n == 1:
        panel_w = min(4.4, 4.6 / ratio)
    else:
        panel_w = min(3.0, 3.6 / ratio, max_w / cols - side - 0.1)
    width = min(max_w, cols * (panel_w + side + 0.1))
    title = 0.62
    below = 0.62 + (0.3 if n > 1 else 0.0)
    height = rows * (panel_w * ratio + below) + title + 0.2
    return (round(max(width, 4.4), 2), round(max(height, 2.2), 2))


def _sheet_in(ax) -> Sheet:
    """A Sheet drawing inside an existing Axes' area (the Axes itself is hidden)."""
    ax.set_axis_off()
    sheet = Sheet(ax.figure, ax.get_position().bounds)
    sheets = getattr(ax.figure, "_shardlab_sheets", None)
    if sheets is None:
        sheets = ax.figure._shardlab_sheets = []
    sheets.append(sheet)
    return sheet


def sheet_for(fig: Figure) -> Sheet:
    """The Sheet attached to ``fig`` (created on first use); drawing on it again reuses its artists."""
    sheet = getattr(fig, "_shardlab_sheet", None)
    if sheet is None:
        sheet = Sheet(fig)
        fig._shardlab_sheet = sheet
    return sheet


def draw_sharding(x, *, shape=None, ax=None, color_by: str = "device", title: str | None = None,
                  figsize=None, dpi: float = 100) -> Figure:
    """Heatmap of which device holds which tile of an array.

    x: a Layout, a jax.Array, or a sharding (then pass ``shape``). 1-D arrays are drawn as a strip,
    2-D as a grid, N-D as small multiples of 2-D slices over the leading dimensions (one panel per
    tile along them). Each tile is labelled with the ids of the devices holding it; a tile held by one
    device is filled with its colour, a tile held by several (replicated) with one neutral grey.
    color_by: "device" (the book's fixed palette) or a mesh axis name (colour = coordinate along that
    axis; grey where a tile's holders differ along it). The title gives spec, mesh and shape, and a
    memory kind other than "device". With ``ax``, draws inside that Axes' area and returns its
    figure; otherwise returns a new figure that displays at twice the pixels of its size on the page
    (at most the text column's width), with an alt text saying what it shows.
    """
    layout = x if isinstance(x, Layout) else layout_of(x, shape)
    if ax is not None:
        sheet = _sheet_in(ax)
        return sheet.draw(layout, color_by=color_by, title=title)
    fig = ShardFigure(figsize=figsize or _auto_figsize(_View(layout)), dpi=dpi)
    return sheet_for(fig).draw(layout, color_by=color_by, title=title)


def draw_mesh(mesh, *, ax=None, title: str | None = None, device_ids=None, figsize=None,
              dpi: float = 100) -> Figure:
    """The device grid of a mesh: one cell per device, labelled with its id, in the book's palette.

    mesh: a jax.sharding.Mesh, a dict {axis name: size}, (name, size) pairs, or a Layout (its mesh).
    1-D meshes are a row, 2-D a grid (first axis down), 3-D and more small multiples over the
    leading axes. device_ids: ids in mesh order when ``mesh`` does not carry them.
    """
    names, sizes, ids = normalise_mesh(mesh)
    if not names:
        raise ValueError("mesh: a mesh with no axes has nothing to draw")
    layout = tile_map(dict(zip(names, sizes)), tuple((a,) for a in names), sizes,
                      device_ids=device_ids if device_ids is not None else ids)
    if title is None:
        title = "mesh " + format_mesh(names, sizes)
    if ax is not None:
        return _sheet_in(ax).draw(layout, title=title, kind="mesh")
    fig = ShardFigure(figsize=figsize or _auto_figsize(_View(layout, "mesh")), dpi=dpi)
    return sheet_for(fig).draw(layout, title=title, kind="mesh")


def _axis_groups(mesh, axis: str) -> list[list]:
    names = tuple(mesh.axis_names)
    if axis not in names:
        raise ValueError(f"axis: {axis!r} is not an axis of the mesh (axes {names})")
    arr = np.moveaxis(np.asarray(mesh.devices), names.index(axis), -1)
    return [list(row) for row in arr.reshape(-1, arr.shape[-1])]


def draw_links(mesh, axis: str, *, ax=None, title: str | None = None, figsize=None, dpi: float = 100) -> Figure:
    """The chips of a mesh at their physical places, their direct links, and the groups along one mesh axis.

    Each device is a square in the book's colour for its id, inside its chip (a chip with several cores
    holds several squares); grey bars are the direct links between neighbouring chips of one plane (the
    links between planes, from each chip to the chip at the same place in the next plane, are not drawn). The devices of each
    group along ``axis`` (those that take part in one collective over that axis) are joined in mesh order:
    a solid black line where the step is a direct link (or stays on one chip), a red dashed arc where it
    crosses several links. The devices must carry ``coords`` (TPU devices, or stand-ins with ``id`` and
    ``coords``); a third coordinate places chips in side-by-side planes.
    """
    from matplotlib.patches import FancyArrowPatch, Rectangle

    devs = list(np.asarray(mesh.devices).flat)
    groups = _axis_groups(mesh, axis)
    coords = {d.id: chip_coords(d) for d in devs}
    dims = max(len(c) for c in coords.values())
    full = {i: c + (0,) * (3 - len(c)) for i, c in coords.items()}
    width = max(c[0] for c in full.values()) + 1

    def chip_xy(c):
        return (c[0] + c[2] * (width + 0.6), c[1])

    cores: dict[tuple, list] = {}
    for d in sorted(devs, key=lambda d: (getattr(d, "core_on_chip", 0), d.id)):
        cores.setdefault(full[d.id], []).append(d)
    centre = {}
    size = 0.62
    for chip, on_chip in cores.items():
        cx, cy = chip_xy(chip)
        w = size / len(on_chip)
        for k, d in enumerate(on_chip):
            centre[d.id] = (cx - size / 2 + w * (k + 0.5), cy)

    steps = direct = 0
    for group in groups:
        for a, b in zip(group, group[1:]):
            steps += 1
            direct += hops(a, b) <= 1
    if title is None:
        title = (f"groups along {axis!r}: {direct} of {steps} steps are direct links"
                 if steps else f"groups along {axis!r}: one device each")
    own = ax is None
    if own:
        xs = [chip_xy(c)[0] for c in cores]
        ys = [chip_xy(c)[1] for c in cores]
        # An inch per chip or so, no wider than the page's column (the height follows the aspect), and
        # wide enough for a one-line title.
        max_w = COLUMN_PX / CSS_PX_PER_INCH
        per_chip = min(1.15, (max_w - 0.6) / (max(xs) - min(xs) + 1))
        title_w = min(max_w, len(title) * CHAR_W * 11 / 72 + 0.3)
        # Whole tenths of an inch: a figure of a fractional pixel size does not render to a buffer.
        fig = ShardFigure(figsize=figsize or (round(max(3.6, title_w, per_chip * (max(xs) - min(xs) + 1) + 0.6), 1),
                                              round(max(2.4, per_chip * (max(ys) - min(ys) + 1) + 0.9), 1)),
                          dpi=dpi)
        ax = fig.add_subplot()
    fig = ax.figure
    k = text_scale(fig)
    ax.set_aspect("equal")
    ax.set_axis_off()

    chips = list(cores)
    for i, a in enumerate(chips):           # direct links between neighbouring chips
        for b in chips[i + 1:]:
            if sum(abs(p - q) for p, q in zip(a, b)) == 1:
                (x0, y0), (x1, y1) = chip_xy(a), chip_xy(b)
                if a[2] == b[2]:   # links between planes drawn side by side would cross chips: said in words
                    ax.plot([x0, x1], [y0, y1], color="#c8c8c8", lw=7, solid_capstyle="butt", zorder=1)
    for chip, on_chip in cores.items():
        cx, cy = chip_xy(chip)
        pad = 0.07
        ax.add_patch(Rectangle((cx - size / 2 - pad, cy - size / 2 - pad), size + 2 * pad, size + 2 * pad,
                               facecolor="white", edgecolor="#555555", lw=1.2, zorder=2))
        for d in on_chip:
            x, y = centre[d.id]
            w = size / len(on_chip)
            rgb = to_rgb(device_color(d.id))
            ax.add_patch(Rectangle((x - w / 2, y - size / 2), w, size, facecolor=rgb, edgecolor="white",
                                   lw=1, zorder=3))
            dark = _luminance(np.array(rgb) * 255) < 0.55
            ax.text(x, y - size / 2 + 0.04, str(d.id), ha="center", va="top", fontsize=10 * k, zorder=6,
                    color="white" if dark else "black", fontweight="bold")

    for g, group in enumerate(groups):      # the groups along the mesh axis, in mesh order
        for a, b in zip(group, group[1:]):
            near = hops(a, b) <= 1
            rad = 0.0 if near else 0.18 + 0.1 * (g % 4)
            (xa, ya), (xb, yb) = centre[a.id], centre[b.id]
            ax.add_patch(FancyArrowPatch((xa, ya + 0.08), (xb, yb + 0.08), connectionstyle=f"arc3,rad={rad}",
                                         arrowstyle="-", color="black" if near else "#d62728",
                                         lw=2.4 if near else 1.8, linestyle="-" if near else (0, (4, 3)),
                                         zorder=5, shrinkA=4, shrinkB=4))
    all_x = [p[0] for p in centre.values()]
    all_y = [p[1] for p in centre.values()]
    ax.set_xlim(min(all_x) - 0.65, max(all_x) + 0.65)
    ax.set_ylim(max(all_y) + 0.65, min(all_y) - 0.65)   # first row of chips at the top
    if dims == 3 and len({c[2] for c in full.values()}) > 1:
        for z in sorted({c[2] for c in full.values()}):
            ax.text(z * (width + 0.6) + (width - 1) / 2, min(all_y) - 0.5, f"z = {z}", ha="center",
                    fontsize=9.5 * k, color="#444444")
        ax.text((max(all_x) + min(all_x)) / 2, max(all_y) + 0.55, "each chip is also linked to the chip at "
                "its place in the neighbouring plane", ha="center", va="top", fontsize=9 * k, color="#444444",
                wrap=True)
    # The title may reach past the axes to the figure's edges when the figure is ours.
    fw = fig.get_size_inches()[0] * 72
    ax_w_pt = fw - 12 if own else ax.get_position().width * fw
    ax.set_title(_wrap(title, ax_w_pt, 11 * k, max_lines=8), fontsize=11 * k)
    return fig
