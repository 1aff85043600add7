"""Pictures of layouts: which device holds which tile of an array, and the device grid of a mesh.

One palette serves the whole book: device ``i`` is always drawn in ``device_color(i)``. A tile held
by several devices (replicated) is drawn in diagonal stripes of its holders' colours and labelled
with all of them. Figures are ``matplotlib.figure.Figure`` objects that pyplot does not know about
(so a notebook never shows one twice); as the last expression of a cell they display as PNG.

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

from shardlab.layout import Layout, format_mesh, layout_of, tile_map, _normalise_mesh

__all__ = ["PALETTE", "device_color", "draw_sharding", "draw_mesh", "draw_links", "physical_links", "hops",
           "Sheet", "sheet_for", "ShardFigure", "png_bytes"]

# tab20 reordered: ids 0-9 get the ten tab10 colours, ids 10-19 their lighter twins; then it repeats.
_TAB20 = ['#1f77b4', '#aec7e8', '#ff7f0e', '#ffbb78', '#2ca02c', '#98df8a', '#d62728', '#ff9896',
          '#9467bd', '#c5b0d5', '#8c564b', '#c49c94', '#e377c2', '#f7b6d2', '#7f7f7f', '#c7c7c7',
          '#bcbd22', '#dbdb8d', '#17becf', '#9edae5']
PALETTE: tuple[str, ...] = tuple(_TAB20[0::2] + _TAB20[1::2])
_PALETTE_RGB = np.array([[int(c[i:i + 2], 16) for i in (1, 3, 5)] for c in PALETTE], dtype=np.uint8)
_MANY_RGBA = np.array([221, 221, 221, 255], dtype=np.uint8)  # tiles with too many holders to stripe
_ERROR_RGB = "#b00020"

MAX_STRIPES = 16      # a tile with more holders than this is drawn plain grey and labelled with a count
MAX_PANELS = 36       # small multiples shown for an N-D array; the rest are summarised in a note
MAX_LABELS = 1024     # text labels per figure; beyond it labels are thinned to every k-th tile
MIN_FONT = 5.0
MAX_FONT = 11.0


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
    """A matplotlib Figure with its own Agg canvas, unknown to pyplot, shown as PNG by IPython."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        _FastCanvas(self)

    def _repr_png_(self):
        return png_bytes(self, tight=True)


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
              palette=None) -> bytes:
    """The figure as PNG bytes.

    tight: crop to the drawn content (as notebooks do); colors: quantise to a palette of that many
    colours (explorer frames); palette: instead, map to this (k, 3) array of the picture's colours
    (and their blends), much faster; compact: spend more time for a smaller file (page frames).
    """
    from PIL import Image

    if tight:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", bbox_inches="tight", facecolor="white")
        if colors is None and palette is None and not compact:
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
        img = img.quantize(colors=colors, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    out = io.BytesIO()
    if compact:
        img.save(out, format="PNG", compress_level=9, optimize=True)
    else:
        img.save(out, format="PNG", compress_level=1)
    return out.getvalue()


# --------------------------------------------------------------------------------------------
# What to draw: a layout seen as panels of 2-D tile grids


def _holder_label(ids, total: int) -> str:
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


_LABEL_BOX = dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.8)


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _slice_text(tile_idx, tile_len, shards) -> str:
    if shards == 1:
        return ":"
    return f"{tile_idx * tile_len}:{(tile_idx + 1) * tile_len}"


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


# --------------------------------------------------------------------------------------------
# The drawing engine


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

    def __init__(self, fig, rect):
        ax = fig.add_axes(rect)
        ax.set_anchor("C")
        ax.set_axis_off()
        self.ax = ax
        self.image = _TileImage(ax)
        ax.add_artist(self.image)
        self.lines = LineCollection([], colors="white", linewidths=1.5)
        ax.add_collection(self.lines)
        self.texts = []
        self.xticks, self.yticks = [], []
        self._xtrans = offset_copy(ax.get_xaxis_transform(), fig=fig, y=-2, units="points")
        self._ytrans = offset_copy(ax.get_yaxis_transform(), fig=fig, x=-3, units="points")
        self.xlabel = ax.text(0.5, 0, "", transform=offset_copy(ax.transAxes, fig=fig, y=-12, units="points"),
                              ha="center", va="top", fontsize=8)
        self.ylabel = ax.text(0, 0.5, "", transform=ax.transAxes, rotation=90, ha="right", va="center",
                              fontsize=8)
        self.ticks_key = None

    def label(self, i: int):
        if i < len(self.texts):
            t = self.texts[i]
        else:
            t = self.ax.text(0, 0, "", ha="center", va="center", linespacing=1.0, clip_on=True)
            t._shardlab_tile_label = True  # lets tests and readers tell tile labels from tick labels
            self.texts.append(t)
        t.set_visible(True)
        return t

    def set_ticks(self, xs, xlabels, ys, ylabels):
        """Tick labels along the bottom (x in data units) and the left (y in data units)."""
        for pool, pos, labs, trans, kw in ((self.xticks, xs, xlabels, self._xtrans, dict(ha="center", va="top")),
                                           (self.yticks, ys, ylabels, self._ytrans, dict(ha="right", va="center"))):
            for i, (p, lab) in enumerate(zip(pos, labs)):
                if i == len(pool):
                    pool.append(self.ax.text(0, 0, "", transform=trans, fontsize=7, color="#444444", **kw))
                t = pool[i]
                t.set_text(lab)
                t.set_position((p, 0) if pool is self.xticks else (0, p))
                t.set_visible(True)
            for t in pool[len(pos):]:
                t.set_visible(False)
        # The y label sits left of the widest y tick label.
        widest = max((len(l) for l in ylabels), default=0)
        self.ylabel.set_transform(offset_copy(self.ax.transAxes, fig=self.ax.figure,
                                              x=-(6 + 4.4 * widest), units="points"))


class Sheet:
    """Draws layouts on one figure, within ``rect`` (figure fraction); drawing again reuses the axes,
    image, line and text artists whenever the new picture has the same number of panels."""

    def __init__(self, fig: Figure, rect=(0.0, 0.0, 1.0, 1.0)):
        self.fig = fig
        self.rect = tuple(rect)
        self.panels: list[_Panel] = []
        self.structure = None
        self.title = fig.text(0, 0, "", ha="center", va="top", fontsize=11, fontweight="bold")
        self.subtitle = fig.text(0, 0, "", ha="center", va="top", fontsize=8.5, color="#333333")
        self.note = fig.text(0, 0, "", ha="center", va="bottom", fontsize=7.5, color="#555555")
        self.error = fig.text(0, 0, "", ha="center", va="center", fontsize=10, color=_ERROR_RGB,
                              wrap=False, visible=False)
        self.legend = None
        self.key_colors = np.zeros((0, 3), dtype=np.uint8)  # the colours this sheet's picture uses
        self._grids = {}
        self._place_texts()

    # geometry ----------------------------------------------------------------------------------
    def _inches(self):
        w, h = self.fig.get_size_inches()
        x0, y0, rw, rh = self.rect
        return w * rw, h * rh

    def _place_texts(self):
        x0, y0, rw, rh = self.rect
        _, h_in = self._inches()
        fh = self.fig.get_size_inches()[1]
        self.title.set_position((x0 + rw / 2, y0 + rh - 0.06 / fh))
        self.subtitle.set_position((x0 + rw / 2, y0 + rh - 0.30 / fh))
        self.note.set_position((x0 + rw / 2, y0 + 0.04 / fh))
        self.error.set_position((x0 + rw / 2, y0 + rh * 0.45))

    def _build(self, n_panels: int, ratio: float, has_panel_titles: bool, n_notes: int, n_sub_lines: int = 1):
        for p in self.panels:
            p.ax.remove()
        self.panels = []
        fw, fh = self.fig.get_size_inches()
        x0, y0, rw, rh = self.rect
        w_in, h_in = rw * fw, rh * fh
        top, bottom = 0.47 + 0.15 * n_sub_lines, 0.12 + 0.16 * n_notes
        # Choose the panel grid whose cells best fit the panels' aspect ratio.
        best = None
        for cols in range(1, n_panels + 1):
            rows = math.ceil(n_panels / cols)
            cw, ch = w_in / cols, (h_in - top - bottom) / rows
            pw, ph = cw - 0.55, ch - 0.5 - (0.18 if has_panel_titles else 0)
            if pw <= 0 or ph <= 0:
                continue
            size = min(pw, ph / ratio)  # drawn width of one panel
            if best is None or size > best[0] + 1e-9:
                best = (size, cols, rows)
        cols, rows = (best[1], best[2]) if best else (math.ceil(math.sqrt(n_panels)),) * 2
        cw, ch = w_in / cols, (h_in - top - bottom) / rows
        for p in range(n_panels):
            r, c = divmod(p, cols)
            left = c * cw + 0.5
            low = bottom + (rows - 1 - r) * ch + 0.42
            width = max(cw - 0.72, 0.05)
            height = max(ch - 0.48 - (0.2 if has_panel_titles else 0), 0.05)
            self.panels.append(_Panel(self.fig, (x0 + left / fw, y0 + low / fh, width / fw, height / fh)))

    # drawing -----------------------------------------------------------------------------------
    def draw(self, x, *, color_by: str = "device", title: str | None = None, kind: str = "array"):
        """Draw the layout ``x`` (a Layout or anything ``layout_of`` accepts)."""
        layout = x if isinstance(x, Layout) else layout_of(x)
        if color_by != "device" and color_by not in layout.mesh_axes:
            raise ValueError(f"color_by: expected 'device' or a mesh axis name "
                             f"({', '.join(map(repr, layout.mesh_axes))}), got {color_by!r}")
        view = _View(layout, kind)
        notes = []
        if view.num_panels < view.num_panels_total:
            notes.append(f"showing {view.num_panels} of {view.num_panels_total} slices")
        if color_by != "device":
            notes.append(f"colour = coordinate along mesh axis {color_by!r}")
        h_el, w_el = view.plane_shape
        if layout.ndim == 1:
            ratio = 0.14
        else:
            ratio = min(max(h_el / w_el, 0.2), 2.5) if h_el and w_el else 1.0
        sub = self._subtitle(layout, title, kind)
        structure = (view.num_panels, ratio, layout.ndim > 2, len(notes) + 1, sub.count("\n") + 1)
        if structure != self.structure:
            self._build(*structure)
            self.structure = structure
        self.error.set_visible(False)

        colors, mode_note = self._colors(layout, color_by)
        used = colors[np.unique(layout.device_ids.ravel())] if layout.num_devices else colors
        self.key_colors = np.unique(used[:, :3], axis=0)
        label_note = self._paint_panels(view, ratio, colors, color_by)
        if label_note:
            notes.append(label_note)
        if mode_note:
            notes.append(mode_note)

        self.title.set_text(title if title is not None else layout.spec_str())
        self.subtitle.set_text(sub)
        self.note.set_text("  ·  ".join(notes))
        self._set_legend(layout, color_by)
        return self.fig

    def _subtitle(self, layout: Layout, title: str | None, kind: str) -> str:
        """The line under the title, wrapped at its " · " separators to the sheet's width."""
        if kind == "mesh":
            parts = [f"{layout.num_devices} devices; each cell is one device, labelled with its id"]
        else:
            parts = [f"mesh {layout.mesh_str()}", f"array {layout.shape}", f"tile {layout.tile_shape}"]
            if title is not None:
                parts.insert(0, layout.spec_str())  # a caller's title replaces the spec line
            if layout.replication > 1:
                parts.append(f"each tile on {layout.replication} devices")
        max_chars = max(24, int(self._inches()[0] * 72 / 5.2))  # 8.5 pt text: about 5.2 pt a character
        lines = [parts[0]]
        for part in parts[1:]:
            if len(lines[-1]) + 3 + len(part) <= max_chars:
                lines[-1] += " · " + part
            else:
                lines.append(part)
        if layout.memory_kind not in (None, "device"):
            lines.append(f"memory kind: {layout.memory_kind}")
        return "\n".join(lines)

    def draw_error(self, message: str, *, title: str | None = None):
        """Show ``message`` instead of a picture (panels are hidden, kept for the next draw)."""
        for p in self.panels:
            p.ax.set_visible(False)
        self._set_legend(None, "device")
        self.title.set_text(title or "")
        self.subtitle.set_text("")
        self.note.set_text("")
        w_in, _ = self._inches()
        width = max(20, int(w_in * 72 / 6.2))
        self.error.set_text("\n".join(textwrap.wrap(str(message), width)[:12]))
        self.error.set_visible(True)
        return self.fig

    def _colors(self, layout: Layout, color_by: str):
        """A lookup table device id -> RGBA for this picture."""
        ids = layout.device_ids.ravel()
        lut = np.zeros((int(ids.max()) + 1 if ids.size else 1, 4), dtype=np.uint8)
        lut[:, 3] = 255
        if color_by == "device":
            lut[ids, :3] = _PALETTE_RGB[ids % len(_PALETTE_RGB)]
            return lut, None
        coords = layout.mesh_coords(color_by).ravel()
        lut[ids] = _coord_colors(layout.mesh_sizes[layout.mesh_axes.index(color_by)])[coords]
        return lut, None

    def _set_legend(self, layout, color_by):
        if self.legend is not None:
            self.legend.remove()
            self.legend = None
        if layout is None or color_by == "device":
            return
        n = layout.mesh_sizes[layout.mesh_axes.index(color_by)]
        cols = _coord_colors(n) / 255.0
        shown = range(n) if n <= 16 else list(range(8)) + list(range(n - 8, n))
        handles = [Patch(color=cols[i], label=f"{color_by}={i}") for i in shown]
        self.legend = self.fig.legend(handles=handles, loc="upper right", fontsize=7, frameon=False,
                                      handlelength=1.0, borderaxespad=0.2, labelspacing=0.2)

    def _paint_panels(self, view: _View, ratio: float, lut: np.ndarray, color_by: str):
        lay = view.layout
        R, C = view.grid
        h_el, w_el = view.plane_shape
        # Draw in element coordinates (tiles in their true proportions) unless the array is empty.
        H = h_el if h_el else R
        W = w_el if w_el else C
        th, tw = H / R, W / C
        rep = lay.replication

        # The drawn size of a panel, in points (the box is shrunk to its aspect ratio).
        fw, fh = self.fig.get_size_inches()
        pos = self.panels[0].ax.get_position(original=True)
        aw, ah = pos.width * fw * 72, pos.height * fh * 72
        if ah / aw > ratio:
            ah = aw * ratio
        else:
            aw = ah / ratio
        tile_w_pt, tile_h_pt = aw / C, ah / R

        # What colours a tile shows: its holders (device colours) or their coordinates along an axis.
        if color_by == "device":
            n_colors = rep if rep <= MAX_STRIPES else 0          # 0: too many, plain grey
        else:
            n_axis = lay.mesh_sizes[lay.mesh_axes.index(color_by)]
            split_by_axis = color_by in sum(lay.spec, ())
            n_colors = 1 if split_by_axis else (n_axis if n_axis <= MAX_STRIPES else 0)
            coord_colors = _coord_colors(n_axis)

        # The image is made at draw time, at the Axes' pixel size; index grids are shared.
        grids = self._grids

        def grid(w, h):
            tile_px = min(w / C, h / R)
            stripe = int(min(16, max(4, tile_px / (1.5 * max(n_colors, 1)))))
            key = (w, h, R, C, stripe)
            if key not in grids:
                if len(grids) > 8:
                    grids.clear()
                yy, xx = np.ogrid[0:h, 0:w]
                grids[key] = (yy * R // h, xx * C // w, (yy + xx) // stripe)
            return grids[key]

        # Labels: font from the widest label; thinned to every k-th tile when they cannot fit.
        max_id = int(lay.device_ids.max()) if lay.num_devices else 0
        if rep <= 8:
            worst = _holder_label([max_id] * rep, lay.num_devices)
        else:  # at most "a,b,…,z" or two lines "n devs / a,b,…"
            worst = f"{max_id},{max_id},…,{max_id}" if rep < lay.num_devices else f"all {rep}"
        lines = worst.count("\n") + 1
        chars = max(len(l) for l in worst.split("\n"))
        fs = min(MAX_FONT, tile_w_pt * 0.85 / (0.62 * chars), tile_h_pt * 0.8 / (1.25 * lines))
        stride = 1
        if fs < MIN_FONT:
            need = max(MIN_FONT * 0.62 * chars / (tile_w_pt * 0.9), MIN_FONT * 1.25 * lines / (tile_h_pt * 0.9))
            stride = int(math.ceil(need))
            fs = MIN_FONT
        while math.ceil(R / stride) * math.ceil(C / stride) * view.num_panels > MAX_LABELS:
            stride += 1
        note = None
        if stride > 1:
            note = (f"labels on every {_ordinal(stride)} tile in each direction "
                    f"({R}×{C} tiles per panel)")
        multi = n_colors != 1
        lw = 1.5 if max(R, C) <= 16 else 0.8 if max(R, C) <= 48 else 0.0
        segs = [((0, i * th), (W, i * th)) for i in range(1, R)] + \
               [((j * tw, 0), (j * tw, H)) for j in range(1, C)]

        for p, panel in enumerate(self.panels):
            ax = panel.ax
            ax.set_visible(True)
            hold = view.holders[p]                              # (R, C, rep)

            def make(w, h, hold=hold):
                tr, tc, diag = grid(w, h)
                if n_colors == 0:
                    return np.broadcast_to(_MANY_RGBA, (h, w, 4))
                if n_colors == 1:
                    return lut[hold[tr, tc, 0]]
                if color_by == "device":
                    return lut[hold[tr, tc, diag % n_colors]]
                return coord_colors[np.broadcast_to(diag % n_colors, (h, w))]

            panel.image.set_maker(make)
            ax.set_xlim(0, W)
            ax.set_ylim(H, 0)
            ax.set_box_aspect(ratio)
            panel.lines.set_segments(segs if lw else [])
            panel.lines.set_linewidth(lw)
            self._ticks(panel, view, R, C, th, tw)
            ax.set_title(view.panel_title(p), fontsize=8, pad=2)
            panel.xlabel.set_text(view.dim_label(lay.ndim - 1) if lay.ndim else "")
            ylab = view.dim_label(lay.ndim - 2) if lay.ndim >= 2 else ""
            if len(ylab) * 8 * 0.6 > ah * 1.15:  # too long for a short panel: two lines
                ylab = ylab.replace(" — ", "\n", 1)
            panel.ylabel.set_text(ylab)
            n_used = 0
            for r in range(0, R, stride):
                for c in range(0, C, stride):
                    ids = hold[r, c]
                    t = panel.label(n_used)
                    n_used += 1
                    t.set_text(_holder_label(ids, lay.num_devices))
                    t.set_position(((c + 0.5) * tw, (r + 0.5) * th))
                    t.set_fontsize(fs)
                    if multi or stride > 1:
                        t.set_color("black")
                        t.set_bbox(_LABEL_BOX)
                    else:
                        t.set_bbox(None)
                        t.set_color("black" if _luminance(lut[ids[0]]) > 0.5 else "white")
            for t in panel.texts[n_used:]:
                t.set_visible(False)
        return note

    @staticmethod
    def _ticks(panel, view: _View, R, C, th, tw):
        lay = view.layout
        key = (view.kind, lay.shape, lay.shards)
        if panel.ticks_key == key:
            return
        panel.ticks_key = key

        def pick(n_tiles, size):
            step = max(1, math.ceil((n_tiles + 1) / 9))
            if view.kind == "mesh":
                pos = list(range(0, n_tiles, step))
                return [(i + 0.5) * size for i in pos], [str(i) for i in pos]
            pos = list(range(0, n_tiles + 1, step))
            if pos[-1] != n_tiles:
                pos.append(n_tiles)
            return [i * size for i in pos], [str(int(round(i * size))) for i in pos]

        if lay.ndim == 0:
            panel.set_ticks([], [], [], [])
            return
        xt, xl = pick(C, tw)
        yt, yl = pick(R, th) if lay.ndim >= 2 else ([], [])
        panel.set_ticks(xt, xl, yt, yl)


# --------------------------------------------------------------------------------------------
# Public drawing functions


def _auto_figsize(view: _View) -> tuple[float, float]:
    n = view.num_panels
    h_el, w_el = view.plane_shape
    ratio = 0.14 if view.layout.ndim == 1 else min(max(h_el / w_el, 0.2), 2.5) if h_el and w_el else 1.0
    cols = min(n, 4)
    rows = math.ceil(n / cols)
    panel_w = min(4.6 if n == 1 else 2.8, (5.0 if n == 1 else 3.0) / ratio)
    width = cols * (panel_w + 0.6)
    height = rows * (panel_w * ratio + 0.5 + (0.2 if n > 1 else 0)) + 0.95
    return (max(width, 4.0), max(height, 1.9))


def _sheet_in(ax) -> Sheet:
    """A Sheet drawing inside an existing Axes' area (the Axes itself is hidden)."""
    ax.set_axis_off()
    return Sheet(ax.figure, ax.get_position().bounds)


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
    tile along them). Each tile is labelled with the ids of the devices holding it; a replicated
    tile is striped with all its holders' colours. color_by: "device" (the book's fixed palette)
    or a mesh axis name (colour = coordinate along that axis). The title gives spec, mesh and shape,
    and a memory kind other than "device". With ``ax``, draws inside that Axes' area and returns its
    figure; otherwise returns a new figure that displays as PNG in a notebook.
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
    names, sizes, ids = _normalise_mesh(mesh)
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


# ---------------------------------------------------------------------------------------------------------
# Physical links: where the chips of a mesh sit, and which mesh neighbours are joined by a direct link


def _chip_coords(device) -> tuple[int, ...]:
    coords = getattr(device, "coords", None)
    if coords is None:
        raise ValueError(f"device {getattr(device, 'id', device)!r} has no coords: only TPU devices (or stand-ins "
                         "carrying coords) know where their chip sits")
    return tuple(int(c) for c in coords)


def hops(a, b) -> int:
    """Direct links between the chips of devices ``a`` and ``b`` on a grid without wrap-around (0: same chip)."""
    return sum(abs(p - q) for p, q in zip(_chip_coords(a), _chip_coords(b)))


def physical_links(devices) -> list[tuple[int, int]]:
    """Pairs of device ids (smaller first, sorted) whose chips are one direct link apart, or on one chip.

    Devices are anything with ``id`` and ``coords`` (TPU devices; the book's stand-ins). The grid is taken
    without wrap-around links, as on a TPU board; a torus's closing links are not listed.
    """
    devs = list(devices)
    return sorted((min(a.id, b.id), max(a.id, b.id)) for i, a in enumerate(devs) for b in devs[i + 1:]
                  if hops(a, b) <= 1)


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
    coords = {d.id: _chip_coords(d) for d in devs}
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

    if ax is None:
        xs = [chip_xy(c)[0] for c in cores]
        ys = [chip_xy(c)[1] for c in cores]
        # Whole tenths of an inch: a figure of a fractional pixel size does not render to a buffer.
        fig = ShardFigure(figsize=figsize or (round(max(3.2, 1.15 * (max(xs) - min(xs) + 1) + 0.6), 1),
                                              round(max(2.2, 1.15 * (max(ys) - min(ys) + 1) + 0.7), 1)),
                          dpi=dpi)
        ax = fig.add_subplot()
    fig = ax.figure
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
            ax.text(x, y - size / 2 + 0.04, str(d.id), ha="center", va="top", fontsize=10, zorder=6,
                    color="white" if dark else "black", fontweight="bold")

    steps = direct = 0
    for g, group in enumerate(groups):      # the groups along the mesh axis, in mesh order
        for a, b in zip(group, group[1:]):
            steps += 1
            near = hops(a, b) <= 1
            direct += near
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
                    fontsize=9, color="#555555")
        ax.text((max(all_x) + min(all_x)) / 2, max(all_y) + 0.55, "each chip is also linked to the chip at "
                "its place in the neighbouring plane", ha="center", va="top", fontsize=8, color="#555555")
    if title is None:
        title = (f"groups along {axis!r}: {direct} of {steps} steps are direct links"
                 if steps else f"groups along {axis!r}: one device each")
    ax.set_title(title, fontsize=10)
    return fig
