"""How a picture is shown on a page: at twice the pixels of its displayed size, never wider than the
book's text column, and with an alt text that says what it shows.

Sizes follow CSS: a figure ``w`` inches wide is displayed ``96 w`` CSS pixels wide (so a 9 pt label
is 12 CSS px), unless that is wider than the text column (``COLUMN_PX``); then it is displayed at
the column's width and everything in it is smaller by the same factor, which ``text_scale`` tells a
drawing in advance. The PNG always has ``PIXEL_DENSITY`` times the pixels of its displayed size, so
it stays sharp on high-density screens.

A figure displays as HTML (an ``<img>`` with its width, height and alt text, the PNG inline), which
both notebooks and the built book show, and as PNG for frontends without HTML.
"""

from __future__ import annotations

import base64
import html
import io
import math
import textwrap
from dataclasses import dataclass

import numpy as np

from shardlab.pictures.style import PHONE_COLUMN_PX, style_rc

__all__ = ["CSS_PX_PER_INCH", "PIXEL_DENSITY", "COLUMN_PX", "MIN_TEXT_PT", "PageImage", "display_width",
           "display_scale", "text_scale", "page_dpi", "page_image", "figure_alt", "figure_bundle", "img_html",
           "drawn_text_sizes", "smallest_text_pt", "set_figure_defaults", "phone_width", "text_attributes",
           "PHONE_COLUMN_PX", "MIN_PHONE_TEXT_PX", "FIGURE_RC", "quantize", "encode_png",
           "markdown_table"]

CSS_PX_PER_INCH = 96      # CSS pixels per inch; a point is 1/72 inch, so 9 pt = 12 CSS px
PIXEL_DENSITY = 2         # image pixels per CSS pixel
# The text column of the book's theme (sphinx-book-theme 1.3), measured in Chromium: 688 CSS px in a
# window 1280 px wide (the narrowest among desktop windows 1024-1920 px wide), 757 px at 1366, at most 790.
COLUMN_PX = 688
MIN_TEXT_PT = 9.0         # the smallest text at displayed size
MIN_PHONE_TEXT_PX = 9.0   # the smallest text on a phone, in CSS px
TIGHT_PAD_IN = 0.06       # white margin around what is drawn, in inches, when a figure is cropped to it

# matplotlib's defaults for figures a chapter draws itself (10 pt text, 9 pt ticks and legends).
FIGURE_RC = {
    "font.size": 10.0,
    "axes.titlesize": 11.0,
    "axes.labelsize": 10.0,
    "xtick.labelsize": 9.0,
    "ytick.labelsize": 9.0,
    "legend.fontsize": 9.0,
    "legend.title_fontsize": 9.5,
    "figure.titlesize": 12.0,
    "figure.labelsize": 10.0,
    "figure.dpi": 96.0,
    "figure.figsize": (6.4, 4.0),
}


def _width_inches(fig_or_inches) -> float:
    if isinstance(fig_or_inches, (int, float, np.integer, np.floating)):
        w = float(fig_or_inches)
    else:
        w = float(fig_or_inches.get_size_inches()[0])
    if not w > 0:
        raise ValueError(f"figure: expected a positive width in inches, got {w!r}")
    return w


def display_width(fig_or_inches) -> int:
    """CSS pixels a figure (or a width in inches) is displayed at: 96 per inch, at most the column."""
    return max(1, min(COLUMN_PX, int(round(_width_inches(fig_or_inches) * CSS_PX_PER_INCH))))


def display_scale(fig_or_inches) -> float:
    """Displayed size over natural size (1 unless the figure is wider than the column)."""
    return min(1.0, COLUMN_PX / (_width_inches(fig_or_inches) * CSS_PX_PER_INCH))


def text_scale(fig_or_inches) -> float:
    """How much larger than its displayed size text must be drawn in this figure (>= 1)."""
    return 1.0 / display_scale(fig_or_inches)


def page_dpi(fig_or_inches) -> float:
    """The dpi at which a figure of this width renders to PIXEL_DENSITY x its displayed width in pixels."""
    w = _width_inches(fig_or_inches)
    return PIXEL_DENSITY * display_width(w) / w


@dataclass(frozen=True)
class PageImage:
    """A picture ready for a page: ``data`` (PNG bytes, ``PIXEL_DENSITY`` x the displayed size in
    pixels), ``width`` and ``height`` (displayed CSS px), ``alt`` (what it shows), ``dpi`` (the dpi it
    was rendered at: text of ``p`` points in the figure shows at ``displayed_pt(p)`` points) and
    ``smallest_text_pt`` (the smallest text it draws, as displayed)."""

    data: bytes
    width: int
    height: int
    alt: str
    dpi: float
    mime: str = "image/png"
    smallest_text_pt: float = math.inf   # the smallest text drawn, in points as displayed

    def displayed_pt(self, points: float) -> float:
        """The displayed size of text drawn at ``points`` in the figure."""
        return points * self.dpi / (PIXEL_DENSITY * CSS_PX_PER_INCH)

    def html(self) -> str:
        return img_html(self)

    def b64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")


def _even(img):
    """Pad a PIL image with white to an even width and height (so its displayed size is whole CSS px)."""
    from PIL import Image

    w, h = img.size
    W, H = w + (w % PIXEL_DENSITY and PIXEL_DENSITY - w % PIXEL_DENSITY), \
        h + (h % PIXEL_DENSITY and PIXEL_DENSITY - h % PIXEL_DENSITY)
    if (W, H) == (w, h):
        return img
    out = Image.new(img.mode, (W, H), "white" if img.mode != "P" else 0)
    if img.mode == "P":
        out.putpalette(img.getpalette())
        white = _palette_index(img, (255, 255, 255))
        out.paste(white, (0, 0, W, H))
    out.paste(img, (0, 0))
    return out


def _palette_index(img, rgb) -> int:
    pal = np.asarray(img.getpalette()[: 3 * 256], dtype=int).reshape(-1, 3)
    return int(np.abs(pal - np.asarray(rgb)).sum(axis=1).argmin())


def quantize(img, colors: int):
    """A PIL RGB image mapped to a palette of at most ``colors`` colours (no dithering), with entries
    within a few levels of white or black made exactly white or black (the background stays white)."""
    from PIL import Image

    q = img.quantize(colors=colors, method=Image.Quantize.FASTOCTREE, dither=Image.Dither.NONE)
    pal = np.asarray(q.getpalette(), dtype=np.int16).reshape(-1, 3)
    pal[(pal >= 248).all(axis=1)] = 255
    pal[(pal <= 6).all(axis=1)] = 0
    q.putpalette(pal.astype(np.uint8).ravel().tolist())
    return q


def encode_png(img, *, colors: int | None = 256) -> bytes:
    """PNG bytes of a PIL RGB image; ``colors``: quantise to a palette of at most that many colours
    (flat drawings lose nothing visible and shrink 2-4x); None keeps full colour."""
    if colors:
        img = quantize(img, colors)
    out = io.BytesIO()
    img.save(out, format="PNG", optimize=True)
    return out.getvalue()


class _TextSizes:
    """Within ``with``: the size in points of every text matplotlib draws (visible and not blank)."""

    def __enter__(self):
        from matplotlib.text import Text

        self.sizes: list[float] = []
        self._orig = Text.draw
        sizes, orig = self.sizes, self._orig

        def draw(text, renderer):
            if text.get_visible() and text.get_text().strip():
                sizes.append(float(text.get_fontsize()))
            return orig(text, renderer)

        Text.draw = draw
        return self

    def __exit__(self, *exc):
        from matplotlib.text import Text

        Text.draw = self._orig
        return False


def _render_rgb(fig, dpi: float, tight: bool, sizes: list | None = None):
    from PIL import Image

    buf = io.BytesIO()
    with _TextSizes() as seen:
        fig.savefig(buf, format="png", dpi=dpi, facecolor="white",
                    **({"bbox_inches": "tight", "pad_inches": TIGHT_PAD_IN} if tight else {}))
    if sizes is not None:
        sizes[:] = seen.sizes
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def page_image(fig, *, tight: bool = True, alt: str | None = None, colors: int | None = 256) -> PageImage:
    """Render ``fig`` for a page: PIXEL_DENSITY x its displayed size in pixels, displayed at 96 CSS px per
    inch of what is drawn (cropped to it when ``tight``), at most COLUMN_PX wide.

    colors: quantise the PNG to a palette of that many colours (None: full colour). alt: the alt text
    (default: ``figure_alt(fig)``).
    """
    sizes: list = []
    if tight:
        dpi = PIXEL_DENSITY * CSS_PX_PER_INCH
        img = _render_rgb(fig, dpi, True, sizes)
        if img.size[0] > PIXEL_DENSITY * COLUMN_PX:
            # Wider than the column: render again at the dpi that makes it exactly the column's width.
            # The cropped box is a size in inches, so it scales with the dpi (up to a pixel of rounding).
            dpi = dpi * (PIXEL_DENSITY * COLUMN_PX - 0.5) / img.size[0]
            img = _render_rgb(fig, dpi, True, sizes)
            if img.size[0] > PIXEL_DENSITY * COLUMN_PX:
                img = img.crop((0, 0, PIXEL_DENSITY * COLUMN_PX, img.size[1]))
        img = _even(img)
    else:
        dpi = page_dpi(fig)
        img = _render_rgb(fig, dpi, False, sizes)
        w = PIXEL_DENSITY * display_width(fig)
        if img.size[0] != w:  # a rounding pixel
            img = img.crop((0, 0, w, img.size[1])) if img.size[0] > w else _even(img)
        img = _even(img)
    data = encode_png(img, colors=colors)
    return PageImage(data, img.size[0] // PIXEL_DENSITY, img.size[1] // PIXEL_DENSITY,
                     figure_alt(fig) if alt is None else str(alt), dpi,
                     smallest_text_pt=min(sizes) * dpi / (PIXEL_DENSITY * CSS_PX_PER_INCH) if sizes else math.inf)


def phone_width(width: int, smallest_text_pt: float) -> int | None:
    """The width in CSS px at which a picture designed ``width`` px wide must be shown on a phone so that
    its smallest text (``smallest_text_pt`` as designed) stays MIN_PHONE_TEXT_PX; None when the phone's
    column (PHONE_COLUMN_PX) is wide enough already. The book's style sheet shows it at that width on a
    phone, in a box that scrolls sideways."""
    if not math.isfinite(smallest_text_pt) or smallest_text_pt <= 0:
        return None
    needed = math.ceil(width * MIN_PHONE_TEXT_PX / (smallest_text_pt * CSS_PX_PER_INCH / 72))
    return min(width, needed) if needed > PHONE_COLUMN_PX else None


def text_attributes(width: int, smallest_text_pt: float) -> str:
    """The attributes that tell the page a picture's smallest text (``data-smallest-text-pt``, "none"
    for a picture without text) and, where the phone's column would make it too small, the width to show
    it at on a phone (``--phone-width`` in its style)."""
    pt = f"{smallest_text_pt:.2f}" if math.isfinite(smallest_text_pt) else "none"
    phone = phone_width(width, smallest_text_pt)
    style = "max-width:100%;height:auto" + (f";--phone-width:{phone}px" if phone else "")
    return f'data-smallest-text-pt="{pt}" style="{style}"'


def img_html(image: PageImage, *, css_class: str = "shardlab-figure") -> str:
    """An ``<img>`` of a PageImage: the data inline, its displayed width and height, its alt text and
    smallest text (``text_attributes``); it shrinks with a narrower column and keeps its proportions."""
    return (f'<img class="{css_class}" src="data:{image.mime};base64,{image.b64()}" width="{image.width}" '
            f'height="{image.height}" alt="{html.escape(image.alt, quote=True)}" '
            f'{text_attributes(image.width, image.smallest_text_pt)}>')


# ---------------------------------------------------------------------------------------------------------
# What a figure shows, in words


def _clean(s: str) -> str:
    return " ".join(str(s).split())


def _sheets_of(fig) -> list:
    """The shardlab sheets drawn on ``fig`` that are still on it (a cleared figure loses its texts)."""
    sheets = list(getattr(fig, "_shardlab_sheets", []))
    own = getattr(fig, "_shardlab_sheet", None)
    if own is not None and own not in sheets:
        sheets.insert(0, own)
    texts = {id(t) for t in fig.texts}
    return [s for s in sheets if id(s.title) in texts]


def figure_alt(fig, max_chars: int = 700) -> str:
    """An alt text for a figure: what its shardlab layouts show (spec, mesh, array, who holds which tile),
    then its titles, axis labels and captions. Ends with a period; at most ``max_chars`` characters."""
    parts: list[str] = []
    seen: set = set()

    def add(s):
        s = _clean(s)
        if s and s not in seen:
            seen.add(s)
            parts.append(s)

    own_texts = set()
    sheets = _sheets_of(fig)
    for sheet in sheets:
        own_texts.update(id(t) for t in sheet.owned_texts())
    suptitle = getattr(fig, "_suptitle", None)
    if suptitle is not None and suptitle.get_visible():
        add(suptitle.get_text())
    for sheet in sheets:
        add(sheet.describe())
    panel_axes = {id(p.ax) for s in sheets for p in s.panels}
    for ax in fig.axes:
        if id(ax) in panel_axes or not ax.get_visible():
            continue
        titles = [ax.get_title(loc) for loc in ("left", "center", "right")]
        title = " ".join(t for t in titles if t)
        if title:
            add(title)
        elif ax.axison and (ax.get_xlabel() or ax.get_ylabel()):
            add(f"{ax.get_ylabel() or 'values'} against {ax.get_xlabel() or 'position'}")
    for t in fig.texts:
        if id(t) not in own_texts and t.get_visible() and t is not suptitle:
            add(t.get_text())
    text = ". ".join(p.rstrip(".") for p in parts)
    if not text:
        n = sum(1 for ax in fig.axes if ax.get_visible())
        text = f"A figure with {n} plot{'s' if n != 1 else ''}" if n else "A figure"
    if len(text) > max_chars:
        text = textwrap.shorten(text, max_chars - 1, placeholder=" …")
    return text if text.endswith((".", "…")) else text + "."


def figure_bundle(fig, include=None, exclude=None):
    """IPython's display of a figure: HTML (an ``<img>`` with width, height and alt text) and PNG with its
    displayed size in metadata; both at PIXEL_DENSITY x the displayed size."""
    if not fig.axes and not fig.texts and not getattr(fig, "lines", None) and not fig.images:
        return None  # an empty figure shows nothing, as with matplotlib's own display
    image = page_image(fig)
    data = {"text/html": img_html(image), "image/png": image.b64(), "text/plain": f"<Figure: {image.alt}>"}
    # The smallest text as displayed rides along in the metadata, for a test of the executed chapters.
    smallest = round(image.smallest_text_pt, 2) if math.isfinite(image.smallest_text_pt) else None
    return data, {"image/png": {"width": image.width, "height": image.height, "shardlab_smallest_text_pt": smallest}}


# ---------------------------------------------------------------------------------------------------------
# The text a figure draws, as drawn


def drawn_text_sizes(fig, dpi: float | None = None) -> list[tuple[float, str]]:
    """(size in points, string) of every text the figure draws (visible, non-empty), as drawn by Agg."""
    from matplotlib.backends.backend_agg import RendererAgg

    sizes: list[tuple[float, str]] = []

    class _Recorder(RendererAgg):
        def draw_text(self, gc, x, y, s, prop, angle, ismath=False, mtext=None):
            if s and s.strip():
                sizes.append((float(prop.get_size_in_points()), s))
            return super().draw_text(gc, x, y, s, prop, angle, ismath=ismath, mtext=mtext)

    old = fig.dpi
    if dpi is not None:
        fig.dpi = dpi
    try:
        w, h = fig.bbox.size
        fig.draw(_Recorder(max(int(w), 1), max(int(h), 1), fig.dpi))
    finally:
        fig.dpi = old
    return sizes


def smallest_text_pt(fig) -> float:
    """The smallest text of a figure, in points at the size it is displayed on a page (``page_image``)."""
    return page_image(fig).smallest_text_pt


# ---------------------------------------------------------------------------------------------------------
# Figures a chapter draws itself


def set_figure_defaults(shell=None) -> None:
    """Make figures that chapters draw with matplotlib (pyplot or Figure) display like shardlab's own:
    at PIXEL_DENSITY x their displayed size, at most the column's width, with an alt text, text sizes of
    FIGURE_RC. Call once, before drawing (``setup_devices`` does). Outside IPython only the sizes change."""
    import matplotlib

    matplotlib.rcParams.update(FIGURE_RC)
    matplotlib.rcParams.update(style_rc())
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return
        shell = get_ipython()
    if shell is None or not hasattr(shell, "display_formatter"):
        return
    backend = matplotlib.rcParams._get("backend") if hasattr(matplotlib.rcParams, "_get") else ""
    if "inline" in str(backend):
        # The inline backend registers its own PNG printer for figures once, when it is first loaded;
        # load it now so that the printers below replace it rather than the other way round.
        try:
            import matplotlib_inline.backend_inline  # noqa: F401
        except ImportError:
            pass
    from matplotlib.figure import Figure

    formatters = shell.display_formatter.formatters
    for formatter in formatters.values():
        formatter.pop(Figure, None)
    shell.display_formatter.mimebundle_formatter.for_type(Figure, figure_bundle)


def _number_like(cell) -> bool:
    digits = str(cell).replace(",", "").replace(".", "").replace("%", "").lstrip("-")
    return digits.isdigit() or str(cell) in ("", "\u2013", "-")


def markdown_table(head, rows, *, numbers_from=None):
    """A table for the page, as IPython ``Markdown`` (the book renders it as a real table).

    ``head``: the column titles; ``rows``: one sequence of cells per row, as many as ``head``.
    Columns from ``numbers_from`` on are right-aligned; with ``None``, every column after the
    first whose cells are all numbers (digits with ``,`` ``.`` ``%`` or a sign), blank or a dash.
    """
    from IPython.display import Markdown

    head, rows = list(head), [list(r) for r in rows]
    if not head:
        raise ValueError("markdown_table: head must name at least one column")
    for k, row in enumerate(rows):
        if len(row) != len(head):
            raise ValueError(f"markdown_table: rows[{k}] has {len(row)} cells, head has {len(head)} columns")
    if numbers_from is None:
        right = [i > 0 and bool(rows) and all(_number_like(r[i]) for r in rows) for i in range(len(head))]
    elif isinstance(numbers_from, bool) or not isinstance(numbers_from, int) or not 0 <= numbers_from <= len(head):
        raise ValueError(f"markdown_table: numbers_from must be a column index from 0 to {len(head)} or None, "
                         f"got {numbers_from!r}")
    else:
        right = [i >= numbers_from for i in range(len(head))]
    align = ["---:" if r else "---" for r in right]
    lines = ["| " + " | ".join(map(str, row)) + " |" for row in [head, align, *rows]]
    return Markdown("\n".join(lines))
