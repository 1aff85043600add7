"""Explorers: sliders that redraw a picture, live in a kernel and on a page with no kernel.

An ``Explorer`` is displayed by being the last expression of a cell. Its display carries two forms:
an ipywidgets view (sliders + an image, redrawn on one reused figure whenever a slider moves) for a
live notebook, and a self-contained HTML player (every picture pre-rendered, switched by the page's
own script) for the built book, which is configured to show the HTML form.

Pictures have twice the pixels of their displayed size (96 CSS px per inch of the figure, at most the
page's text column wide). A choice that ``draw`` refuses (a ValueError) is stored in the page as an
SVG of its message, a few hundred bytes, and every frame carries an alt text saying what it shows.
"""

from __future__ import annotations

import inspect
import itertools
import math
import textwrap

from shardlab.layout.tiles import format_mesh, format_spec, normalise_mesh, tile_map
from shardlab.pictures.display import PIXEL_DENSITY, _TextSizes, display_width, figure_alt, page_dpi, phone_width
from shardlab.pictures.draw import ShardFigure, png_bytes, sheet_for
from shardlab.pictures.static_player import message_svg, player_html

__all__ = ["Explorer", "explorer", "sharding_explorer", "MAX_FRAMES"]

_WIDGET_MIME = "application/vnd.jupyter.widget-view+json"
MAX_FRAMES = 200        # combinations an explorer may ask to pre-render
LIVE_COLORS = 64        # PNG palette of a live frame (fast to encode)
PAGE_COLORS = 32        # palette of a frame stored in the page (small)
# Frames stored in the page: lossless WebP (which every current browser shows) is about 0.6 x the
# bytes of the same palette PNG; PNG where Pillow was built without WebP.
try:
    from PIL import features as _pil_features

    PAGE_FORMAT = "webp" if _pil_features.check("webp") else "png"
except Exception:  # pragma: no cover - a Pillow without its features module
    PAGE_FORMAT = "png"


def _median_cut_bytes(figure, colors: int, *, compact: bool = False, format: str = "png") -> bytes:
    """The figure as a palette image of at most ``colors`` colours chosen by median cut: a large pale
    area keeps its own entry (an octree palette merges light greys, such as a pipeline's idle slots,
    into white). Entries within a few levels of white or black become white or black, as in
    ``shardlab.pictures.display.quantize``."""
    import io

    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(png_bytes(figure))).convert("RGB")
    q = img.quantize(colors=colors, method=Image.Quantize.MEDIANCUT, dither=Image.Dither.NONE)
    pal = np.asarray(q.getpalette(), dtype=np.int16).reshape(-1, 3)
    pal[(pal >= 248).all(axis=1)] = 255
    pal[(pal <= 6).all(axis=1)] = 0
    q.putpalette(pal.astype(np.uint8).ravel().tolist())
    out = io.BytesIO()
    if format == "webp":
        q.save(out, format="WEBP", lossless=True, quality=100, method=2 if compact else 0)
    else:
        q.save(out, format="PNG", compress_level=9 if compact else 1, optimize=compact)
    return out.getvalue()


def _option_label(v) -> str:
    """How an option reads next to its slider: strings as they are, anything else as str()."""
    return v if isinstance(v, str) else str(v)


def _spec_entry_label(v) -> str:
    """A PartitionSpec entry as it is written in code: None, 'x', ('x', 'y')."""
    return repr(v)


def _same(a, b) -> bool:
    try:
        return bool(a == b)
    except Exception:  # e.g. numpy arrays, whose == is elementwise
        return False


def _check_draw_accepts(draw, controls) -> None:
    """Fail now, not while pre-rendering frames, if ``draw`` cannot take every label as a keyword."""
    try:
        sig = inspect.signature(draw)
    except (TypeError, ValueError):  # a builtin without a signature: nothing to check
        return
    try:
        sig.bind(None, **{label: None for label in controls})
    except TypeError as e:
        raise ValueError(f"controls: draw(fig, **choice) cannot take the labels {list(controls)} as keyword "
                         f"arguments ({e}); name its parameters after the labels, or give it **choice") from None


class Explorer:
    """Sliders over ``controls`` driving ``draw(fig, **choice)`` on one reused figure.

    Use ``explorer(...)`` or ``sharding_explorer(...)`` to make one. Attributes: ``controls``
    ({label: [option values]}), ``figure`` (the one figure every redraw draws on), ``value`` (the
    current choice), ``widget`` (the live ipywidgets view, made on first use).
    """

    def __init__(self, controls, draw, *, figsize=(6, 4), dpi=None, clear=True,
                 max_frames=MAX_FRAMES, caption=None):
        if not isinstance(controls, dict) or not controls:
            raise ValueError("controls: expected a non-empty dict {label: list of option values}")
        self.controls: dict = {}
        self._labels: dict = {}
        for label, options in controls.items():
            if not isinstance(label, str) or not label:
                raise ValueError(f"controls: each label must be a non-empty string (it is passed to draw "
                                 f"as a keyword argument), got {label!r}")
            if isinstance(options, dict):
                labels, values = [str(k) for k in options], list(options.values())
            elif isinstance(options, (list, tuple)):
                values = list(options)
                labels = [_option_label(v) for v in values]
            else:
                raise ValueError(f"controls: the options of {label!r} must be a list (or a dict "
                                 f"{{option label: value}}), got {type(options).__name__}")
            if not values:
                raise ValueError(f"controls: {label!r} has no options")
            self.controls[label] = values
            self._labels[label] = labels
        n = math.prod(len(v) for v in self.controls.values())
        if n > max_frames:
            counts = " × ".join(f"{len(v)} {k}" for k, v in self.controls.items())
            raise ValueError(f"controls: {counts} = {n} combinations, more than max_frames={max_frames} "
                             "pictures to pre-render; offer fewer options")
        if not callable(draw):
            raise ValueError(f"draw: expected a function draw(fig, **choice), got {draw!r}")
        _check_draw_accepts(draw, self.controls)
        self._draw = draw
        self._clear = clear
        self._caption = caption
        try:
            fw, fh = (float(v) for v in figsize)
        except (TypeError, ValueError):
            raise ValueError(f"figsize: expected (width, height) in inches, got {figsize!r}") from None
        if not (fw > 0 and fh > 0):
            raise ValueError(f"figsize: expected a positive width and height in inches, got {figsize!r}")
        if dpi is not None and not (isinstance(dpi, (int, float)) and dpi > 0):
            raise ValueError(f"dpi: expected a positive number or None (twice the displayed size), got {dpi!r}")
        # Displayed at 96 CSS px per inch (at most the column), with PIXEL_DENSITY x those pixels; the
        # height is rounded to whole displayed pixels so that every frame has exactly that size.
        self.display_size = (display_width(fw), max(1, int(round(fh * display_width(fw) / fw))))
        dpi = dpi or page_dpi(fw)
        self.figure = ShardFigure(figsize=(fw, PIXEL_DENSITY * self.display_size[1] / dpi), dpi=dpi)
        self._pos = {k: 0 for k in self.controls}
        self._error_text = None
        self._widget = None
        self._sliders = {}
        self._image = None
        self._frames = None
        self._drawn = None
        self._drawn_error = None   # (title, message) when the last choice drawn was refused
        self.smallest_text_pt = math.inf   # known once the frames are rendered

    # -- state ---------------------------------------------------------------------------------
    @property
    def value(self) -> dict:
        """The current choice, as ``{label: option value}``."""
        return {k: self.controls[k][i] for k, i in self._pos.items()}

    def _positions(self, choice: dict) -> dict:
        pos = dict(self._pos)
        for k, v in choice.items():
            if k not in self.controls:
                raise ValueError(f"choice: unknown control {k!r}; controls are {list(self.controls)}")
            matches = [i for i, o in enumerate(self.controls[k]) if o is v or _same(o, v)]
            if not matches:
                raise ValueError(f"choice: {v!r} is not an option of {k!r}: {self.controls[k]!r}")
            pos[k] = matches[0]
        return pos

    def set(self, **choice):
        """Move controls to the given option values (the live view follows) and redraw."""
        self._pos = self._positions(choice)
        if self._widget is not None:
            for k, s in self._sliders.items():
                s.value = self._pos[k]  # the first change redraws; later ones find it drawn
            if tuple(self._pos.values()) != self._drawn:
                self._refresh()
        return self

    # -- drawing -------------------------------------------------------------------------------
    def _draw_positions(self, pos: dict):
        """Draw one choice on the figure (an invalid choice draws its error message)."""
        fig = self.figure
        choice = {k: self.controls[k][i] for k, i in pos.items()}
        if self._clear:
            fig.clear()
            self._error_text = None
            fig._shardlab_sheets = []           # the layouts drawn before the clear are gone
            if hasattr(fig, "_shardlab_sheet"):
                del fig._shardlab_sheet
        self._drawn_error = None
        try:
            self._draw(fig, **choice)
        except ValueError as e:
            self._show_error(str(e))
            self._drawn_error = ("", str(e))
        else:
            if self._error_text is not None:
                self._error_text.set_visible(False)
            sheet = getattr(fig, "_shardlab_sheet", None)
            if sheet is not None and sheet.error_shown():
                self._drawn_error = sheet.error_shown()
        self._drawn = tuple(pos.values())

    def _show_error(self, message: str):
        fig = self.figure
        for ax in fig.axes:
            ax.set_visible(False)
        if self._error_text is None:
            self._error_text = fig.text(0.5, 0.5, "", ha="center", va="center", fontsize=10, color="#b00020")
        width = max(20, int(fig.get_size_inches()[0] * 72 / 6.2))
        self._error_text.set_text("\n".join(textwrap.wrap(message, width)[:12]))
        self._error_text.set_visible(True)

    def render(self, **choice) -> bytes:
        """Draw a choice (default: the current one; it does not move the controls) and return the
        picture as PNG bytes, as the live view shows it."""
        self._draw_positions(self._positions(choice))
        sheet = getattr(self.figure, "_shardlab_sheet", None)
        if sheet is not None and not self._clear:
            # A sheet knows its colours: map pixels to them instead of searching for a palette.
            return png_bytes(self.figure, palette=sheet.key_colors)
        return _median_cut_bytes(self.figure, LIVE_COLORS)

    def _refresh(self):
        data = self.render()
        if self._image is not None:
            self._image.value = data
        return data

    # -- the live view -------------------------------------------------------------------------
    @property
    def widget(self):
        """The ipywidgets view, one slider per control (the current option shown as text) above the image."""
        if self._widget is None:
            import ipywidgets as w

            for k, values in self.controls.items():
                s = w.SelectionSlider(options=[(lab, i) for i, lab in enumerate(self._labels[k])],
                                      value=self._pos[k], description=k, continuous_update=True,
                                      readout=True, style={"description_width": "initial"},
                                      layout=w.Layout(width="min(100%, 34em)"))
                s.observe(self._on_slider, names="value")
                self._sliders[k] = s
            self._image = w.Image(value=self.render(), format="png", width=str(self.display_size[0]),
                                  layout=w.Layout(max_width="100%", height="auto"))
            self._widget = w.VBox([*self._sliders.values(), self._image])
        return self._widget

    def _on_slider(self, change):
        for k, s in self._sliders.items():
            if s is change["owner"]:
                self._pos[k] = change["new"]
        if tuple(self._pos.values()) != self._drawn:
            self._refresh()

    # -- the page view -------------------------------------------------------------------------
    def frames(self):
        """Every combination pre-rendered: (table, frames, alts). ``table[key]`` is the index in
        ``frames`` (unique pictures: PNG, or SVG for a refused choice) of the combination whose option
        positions, read as a mixed-radix number with the first control most significant, equal
        ``key``; ``alts[i]`` says what frame ``i`` shows."""
        if self._frames is None:
            saved = dict(self._pos)
            unique, table, alts = {}, [], []
            w, h = self.display_size
            smallest = math.inf
            for combo in itertools.product(*(range(len(v)) for v in self.controls.values())):
                pos = dict(zip(self.controls, combo))
                self._draw_positions(pos)
                if self._drawn_error is not None:
                    title, message = self._drawn_error
                    data = message_svg(message, title=title, width=w, height=h)
                    alt = f"{title}: {message}" if title else message
                else:
                    with _TextSizes() as seen:
                        data = _median_cut_bytes(self.figure, PAGE_COLORS, compact=True, format=PAGE_FORMAT)
                    smallest = min([smallest] + seen.sizes)
                    alt = figure_alt(self.figure)
                if data not in unique:
                    unique[data] = len(unique)
                    alts.append(" ".join(alt.split()))
                table.append(unique[data])
            self._frames = (table, list(unique), alts)
            # The smallest text in any picture frame, in points as displayed (refusals are 10.5 pt).
            self.smallest_text_pt = smallest * w / (self.figure.get_size_inches()[0] * 96)
            self._pos = saved
            self._draw_positions(saved)  # leave the live figure showing the current choice
        return self._frames

    def to_html(self) -> str:
        """The self-contained static player (no kernel, no network needed)."""
        table, frames, alts = self.frames()
        controls = [(k, self._labels[k]) for k in self.controls]
        html = player_html(controls, frames, table, list(self._pos.values()), alts=alts,
                           caption=self._caption, width=self.display_size[0], height=self.display_size[1])
        if math.isfinite(self.smallest_text_pt):   # for a test of the executed chapters
            html = html.replace(" style=", f' data-smallest-text-pt="{self.smallest_text_pt:.2f}" style=', 1)
            phone = phone_width(self.display_size[0], self.smallest_text_pt)
            if phone:   # the frame's width on a phone, where the column would make its text too small
                html = html.replace('style="max-width:100%;height:auto;display:block"',
                                    f'style="max-width:100%;height:auto;display:block;--phone-width:{phone}px"', 1)
        return html

    def _repr_mimebundle_(self, include=None, exclude=None):
        bundle = {"text/plain": repr(self), "text/html": self.to_html()}
        try:
            widget = self.widget
        except ImportError:  # no ipywidgets: the static player alone still works
            return bundle
        make = getattr(widget, "_repr_mimebundle_", None)
        view = (make() or {}).get(_WIDGET_MIME) if make else None
        if view is None and getattr(widget, "model_id", None):  # ipywidgets 7 has no _repr_mimebundle_
            view = {"version_major": 2, "version_minor": 0, "model_id": widget.model_id}
        if view is not None:
            bundle[_WIDGET_MIME] = view
        return bundle

    def __repr__(self):
        parts = ", ".join(f"{k}: {len(v)} options" for k, v in self.controls.items())
        return f"Explorer({parts})"


def explorer(controls, draw, *, figsize=(6, 4), clear=True, max_frames=MAX_FRAMES, caption=None) -> Explorer:
    """A generic explorer.

    ``controls`` maps each label to its options, ``{label: [option values]}`` or
    ``{label: {option label: value}}``; ``draw(fig, **choice)`` draws one choice. With ``clear=True`` (default) the figure is cleared
    before each draw; with ``clear=False`` draw is handed the figure as it left it and should update
    its own artists. A ValueError raised by draw is shown in the picture. At most ``max_frames``
    combinations (they are all pre-rendered for the page). ``figsize`` in inches: the page shows 96
    CSS px per inch, at most its text column (about 7.2 inches); a wider figure is shown smaller,
    text included, so keep it within the column or draw text larger (``shardlab.pictures.display.text_scale``)."""
    return Explorer(controls, draw, figsize=figsize, clear=clear, max_frames=max_frames, caption=caption)


DEFAULT_MESHES = ((8,), (2, 4), (4, 2), (2, 2, 2))
DEFAULT_SHAPES = ((8, 8), (4, 16))
DEFAULT_SPECS = (None, "x", "y", ("x", "y"), ("y", "x"))
_AXIS_NAMES = ("x", "y", "z", "w", "v", "u")


def _mesh_option(m):
    """(label, mesh) for a mesh given as sizes (axes named x, y, z...), a dict or a jax Mesh."""
    if isinstance(m, (tuple, list)) and all(isinstance(s, int) for s in m):
        if len(m) > len(_AXIS_NAMES):
            raise ValueError(f"meshes: at most {len(_AXIS_NAMES)} axes, got {m!r}")
        m = dict(zip(_AXIS_NAMES, m))
    names, sizes, _ = normalise_mesh(m)
    return format_mesh(names, sizes), m


def sharding_explorer(meshes=DEFAULT_MESHES, shapes=DEFAULT_SHAPES, specs=DEFAULT_SPECS, *,
                      color_by="device", figsize=(6, 4.2), max_frames=MAX_FRAMES) -> Explorer:
    """An explorer of layouts: the reader picks the mesh, the array shape and each dimension's spec
    entry; the heatmap follows (an invalid choice shows JAX's rule it breaks).

    meshes: mesh sizes (axes named x, y, z...), dicts {name: size} or jax Meshes; default (8,),
    (2, 4), (4, 2), (2, 2, 2). shapes: array shapes; default (8, 8), (4, 16). specs: the options for
    every dimension's entry (None, an axis, a tuple of axes; a tuple's order matters), or one list
    of options per dimension; default None, 'x', 'y', ('x', 'y'), ('y', 'x').
    """
    mesh_opts = dict(_mesh_option(m) for m in meshes)
    if not mesh_opts:
        raise ValueError("meshes: expected at least one mesh")
    shape_opts = {}
    for s in shapes:
        if not isinstance(s, (tuple, list)) or not all(isinstance(d, int) and d >= 0 for d in s):
            raise ValueError(f"shapes: each shape must be a tuple of non-negative integers, got {s!r}")
        shape_opts[str(tuple(s))] = tuple(s)
    if not shape_opts:
        raise ValueError("shapes: expected at least one array shape")
    rank = max(len(s) for s in shape_opts.values())
    specs = list(specs)
    per_dim = specs and all(isinstance(o, list) for o in specs)
    if per_dim and len(specs) < rank:
        raise ValueError(f"specs: {len(specs)} option lists given, but the shapes have {rank} dimensions")
    dim_opts = [list(specs[d]) if per_dim else specs for d in range(rank)]
    controls = {"mesh": mesh_opts, "shape": shape_opts}
    for d, opts in enumerate(dim_opts):
        if not opts:
            raise ValueError(f"specs: no options for dimension {d}")
        controls[f"dim {d}"] = {_spec_entry_label(o): o for o in opts}

    def draw(fig, mesh, shape, **entries):
        sheet = sheet_for(fig)
        spec = [entries[f"dim {d}"] for d in range(len(shape))]
        while spec and spec[-1] is None:
            spec.pop()
        try:
            layout = tile_map(mesh, spec, shape)
            sheet.draw(layout, color_by=color_by)
        except ValueError as e:
            loose = [() if e_ is None else (e_,) if isinstance(e_, str) else tuple(e_) for e_ in spec]
            names, sizes, _ = normalise_mesh(mesh)
            sheet.draw_error(str(e), title=f"{format_spec(loose)} on mesh {format_mesh(names, sizes)}, "
                                           f"array {shape}: not a valid layout")

    return Explorer(controls, draw, figsize=figsize, clear=False, max_frames=max_frames,
                    caption="Each tile is labelled with the devices holding it; a grey tile is held by "
                            "several devices (replicated).")
