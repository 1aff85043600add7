"""shardlab.pictures.draw: heatmaps of layouts and device grids."""

import io

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from PIL import Image

import shardlab
from shardlab.pictures.display import COLUMN_PX, text_scale
from shardlab.pictures.draw import PALETTE, ShardFigure, device_color, draw_mesh, draw_sharding, png_bytes, sheet_for
from shardlab.layout.tiles import tile_map

DEVS = shardlab.setup_devices(8)

import jax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402


def labels(fig, panel=None):
    axes = [a for a in fig.axes if a.get_visible()]
    if panel is not None:
        axes = [axes[panel]]
    return [t.get_text() for a in axes for t in a.texts
            if t.get_visible() and getattr(t, "_shardlab_tile_label", False)]


def fig_texts(fig):
    return " | ".join(t.get_text() for t in fig.texts if t.get_visible())


def panel_rgb(fig, panel, r_frac, c_frac):
    """The colour drawn at a fractional position of a panel's image."""
    img = panel_image(fig, panel)
    return tuple(img[int(r_frac * img.shape[0]), int(c_frac * img.shape[1])].tolist())


def panel_image(fig, panel=0):
    """The RGB pixels of a panel's tiles as last drawn."""
    fig.canvas.draw()
    panels = [p for p in fig._shardlab_sheet.panels if p.ax.get_visible()]
    return np.asarray(panels[panel].image.get_array())[..., :3]


def rgb255(hex_color):
    return tuple(int(round(v * 255)) for v in to_rgb(hex_color))


def test_palette_is_fixed_and_distinct():
    assert len(set(PALETTE)) == len(PALETTE) >= 16
    assert device_color(0) == "#1f77b4" and device_color(3) == device_color(3 + len(PALETTE))
    assert [device_color(i) for i in range(10)] == list(PALETTE[:10])
    with pytest.raises(ValueError, match="device_id"):
        device_color(-1)


def test_2d_labels_and_colours_follow_the_devices():
    lay = tile_map({"x": 2, "y": 4}, P("x", "y"), (8, 8))
    fig = draw_sharding(lay)
    assert isinstance(fig, ShardFigure)
    assert sorted(labels(fig), key=int) == [str(i) for i in range(8)]
    # Tile (1, 2) is held by device 6: its colour is device 6's everywhere.
    assert panel_rgb(fig, 0, 0.75, 0.6) == rgb255(device_color(6))
    other = draw_sharding(tile_map({"x": 2, "y": 4}, P("y", "x"), (8, 8)))
    # There device 6 (x=1, y=2) holds rows 4:6 and columns 4:8: the same colour.
    assert panel_rgb(other, 0, 0.6, 0.75) == rgb255(device_color(6))
    assert "P('x', 'y')" in fig_texts(fig) and "{x: 2, y: 4}" in fig_texts(fig)


def rendered(fig, dpi=100):
    """The figure as Agg draws it at ``dpi`` (RGB array, top row first), with the pixel box of each
    visible panel and of each visible tile label, read after the draw."""
    fig.set_dpi(dpi)
    fig.canvas.draw()
    rgb = np.asarray(fig.canvas.buffer_rgba())[..., :3].copy()
    h = rgb.shape[0]
    renderer = fig.canvas.get_renderer()

    def box(bb, pad=0):
        return (int(bb.x0) - pad, int(h - bb.y1) - pad, int(np.ceil(bb.x1)) + pad, int(np.ceil(h - bb.y0)) + pad)

    panels = [a for a in fig.axes if a.get_visible()]
    return rgb, [box(a.bbox) for a in panels], [box(t.get_window_extent(renderer), 3) for a in panels
                                                 for t in a.texts if t.get_visible()
                                                 and getattr(t, "_shardlab_tile_label", False)]


def colours_in(rgb, box, holes=(), inset=3):
    """The distinct colours of ``rgb`` inside ``box`` (shrunk by ``inset`` px), leaving out ``holes``."""
    x0, y0, x1, y1 = box
    keep = np.zeros(rgb.shape[:2], bool)
    keep[y0 + inset:y1 - inset, x0 + inset:x1 - inset] = True
    for hx0, hy0, hx1, hy1 in holes:
        keep[max(hy0, 0):max(hy1, 0), max(hx0, 0):max(hx1, 0)] = False
    return {tuple(c) for c in rgb[keep].reshape(-1, 3).tolist()}


def test_replicated_tiles_are_one_neutral_fill_labelled_with_their_holders():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    for spec, shape in ((P("x"), (8, 8)), (P(None, "y"), (8, 8)), (P(), (4, 4))):
        x = jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
        # JAX's own map of who holds what: the holders of each distinct block, in id order.
        blocks = {}
        for d, idx in x.sharding.devices_indices_map(shape).items():
            blocks.setdefault(tuple((s.start or 0, s.stop or n) for s, n in zip(idx, shape)), []).append(d.id)
        fig = draw_sharding(x)
        expected = sorted("all 8 devices" if len(ids) == 8 else ",".join(map(str, sorted(ids)))
                          for ids in blocks.values())
        assert sorted(labels(fig)) == expected
        # Every tile is one fill, the same neutral grey for all of them, whichever devices hold it.
        rgb, (panel,), holes = rendered(fig)
        x0, y0, x1, y1 = panel
        R, C = fig._shardlab_sheet.panels[0].ax.get_ylim()[0], fig._shardlab_sheet.panels[0].ax.get_xlim()[1]
        fills = set()
        for (r0, r1), (c0, c1) in ((b[0], b[1] if len(b) > 1 else (0, 1)) for b in blocks):
            tile = (int(x0 + (x1 - x0) * c0 / C), int(y0 + (y1 - y0) * r0 / R),
                    int(x0 + (x1 - x0) * c1 / C), int(y0 + (y1 - y0) * r1 / R))
            inside = colours_in(rgb, tile, holes)
            assert len(inside) == 1, f"{spec}: a replicated tile shows {len(inside)} colours"
            fills |= inside
        assert len(fills) == 1 and all(220 <= v <= 245 for v in fills.pop())
    assert "whole array on all 8 devices" in fig_texts(fig)
    # The measure sees stripes: a tile of several device colours is not one fill.
    rgb = np.zeros((20, 20, 3), np.uint8)
    rgb[:, ::2] = (31, 119, 180)
    assert len(colours_in(rgb, (0, 0, 20, 20))) == 2


def test_tiles_held_by_one_device_keep_their_colour():
    fig = draw_sharding(tile_map({"x": 2, "y": 4}, P("x", "y"), (8, 8)))
    rgb, (panel,), holes = rendered(fig)
    x0, y0, x1, y1 = panel
    for r in range(2):
        for c in range(4):
            tile = (x0 + (x1 - x0) * c // 4, y0 + (y1 - y0) * r // 2, x0 + (x1 - x0) * (c + 1) // 4,
                    y0 + (y1 - y0) * (r + 1) // 2)
            assert colours_in(rgb, tile, holes) == {rgb255(device_color(4 * r + c))}


def test_many_holders_are_labelled_legibly():
    assert labels(draw_sharding(tile_map({"x": 4, "y": 16}, P("x"), (64, 64)))) == \
        ["0–15", "16–31", "32–47", "48–63"]
    assert labels(draw_sharding(tile_map({"x": 16, "y": 4}, P(None, "y"), (4, 64)))) == \
        ["0,4,…,60", "1,5,…,61", "2,6,…,62", "3,7,…,63"]
    # Nine to sixteen holders in a small tile: shortened, never below 9 pt as displayed.
    shuffled = np.random.default_rng(0).permutation(48)
    for mesh, spec, shape, ids in (({"x": 12, "y": 4}, P(None, "y"), (8, 8), None),
                                   ({"a": 4, "b": 4, "c": 3}, P("c"), (3, 6), shuffled),
                                   ({"x": 16, "y": 16}, P("x", None), (16, 16), None)):
        fig = draw_sharding(tile_map(mesh, spec, shape, device_ids=ids))
        sizes = [t.get_fontsize() for a in fig.axes for t in a.texts
                 if t.get_visible() and getattr(t, "_shardlab_tile_label", False)]
        assert sizes and min(sizes) >= 9.0 * text_scale(fig) - 1e-9
        assert all(len(line) <= 12 for lab in labels(fig) for line in lab.split("\n"))


def test_1d_and_nd_small_multiples():
    fig = draw_sharding(tile_map({"x": 8}, P("x"), (16,)))
    assert len(fig.axes) == 1 and sorted(labels(fig), key=int) == [str(i) for i in range(8)]
    fig = draw_sharding(tile_map({"x": 2, "y": 2, "z": 2}, P("x", "y", "z"), (4, 8, 8)))
    visible = [a for a in fig.axes if a.get_visible()]
    assert [a.get_title() for a in visible] == ["[0:2, :, :]", "[2:4, :, :]"]
    assert sorted(labels(fig, 0)) == ["0", "1", "2", "3"] and sorted(labels(fig, 1)) == ["4", "5", "6", "7"]
    fig = draw_sharding(tile_map({"x": 2, "y": 4}, P(None, "x", None, "y"), (3, 4, 2, 8)))
    visible = [a for a in fig.axes if a.get_visible()]
    assert [a.get_title() for a in visible] == ["[:, 0:2, :, :]", "[:, 2:4, :, :]"]
    assert labels(fig, 1) == ["4", "5", "6", "7"]


def test_colour_by_mesh_axis():
    lay = tile_map({"x": 2, "y": 4}, P("x", "y"), (8, 8))
    fig = draw_sharding(lay, color_by="y")
    # Devices 1 and 5 share y=1, so they share a colour; devices 1 and 2 do not.
    assert panel_rgb(fig, 0, 0.25, 0.3) == panel_rgb(fig, 0, 0.75, 0.3) != panel_rgb(fig, 0, 0.25, 0.6)
    assert fig.legends and [t.get_text() for t in fig.legends[0].get_texts()] == ["y=0", "y=1", "y=2", "y=3"]
    with pytest.raises(ValueError, match="color_by"):
        draw_sharding(lay, color_by="z")


def test_memory_kind_in_title():
    lay = tile_map({"x": 2}, P("x"), (4, 4), memory_kind="pinned_host")
    assert "memory kind: pinned_host" in fig_texts(draw_sharding(lay))
    assert "memory kind" not in fig_texts(draw_sharding(tile_map({"x": 2}, P("x"), (4, 4), memory_kind="device")))


def test_jax_arrays_and_shardings():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    x = jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(mesh, P(None, "y")))
    fig = draw_sharding(x, title="my array")
    assert sorted(labels(fig)) == ["0,4", "1,5", "2,6", "3,7"]
    assert all(s in fig_texts(fig) for s in ("my array", "P(None, 'y')", "mesh {x: 2, y: 4}"))
    fig = draw_sharding(x.sharding, shape=(4, 4))
    assert len(labels(fig)) == 4


def test_draw_mesh_1d_2d_3d():
    assert sorted(labels(draw_mesh({"x": 8})), key=int) == [str(i) for i in range(8)]
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    fig = draw_mesh(mesh)
    assert sorted(labels(fig), key=int) == [str(d.id) for d in mesh.devices.flat]
    assert "mesh {x: 2, y: 4}" in fig_texts(fig)
    fig = draw_mesh({"a": 2, "b": 2, "c": 2}, device_ids=[7, 6, 5, 4, 3, 2, 1, 0])
    visible = [a for a in fig.axes if a.get_visible()]
    assert [a.get_title() for a in visible] == ["a=0", "a=1"]
    assert labels(fig, 0) == ["7", "6", "5", "4"]
    assert panel_rgb(fig, 0, 0.25, 0.25) == rgb255(device_color(7))
    with pytest.raises(ValueError, match="mesh"):
        draw_mesh({})


def test_4096_devices_complete_with_thinned_labels():
    lay = tile_map({"x": 16, "y": 16, "z": 16}, P("x", "y", "z"), (32, 32, 32))
    fig = draw_sharding(lay)
    data = png_bytes(fig)
    assert Image.open(io.BytesIO(data)).size[0] > 100
    assert "labels on every" in fig_texts(fig)
    assert 0 < len(labels(fig)) <= 1024
    fig = draw_mesh({"x": 16, "y": 16, "z": 16})
    assert len([a for a in fig.axes if a.get_visible()]) == 16
    png_bytes(fig)
    # Replicated over all 4096 devices: one tile, labelled with the count.
    assert labels(draw_sharding(tile_map({"x": 16, "y": 256}, P(), (4,)))) == ["all 4096 devices"]


def test_not_in_pyplot_and_displays_as_png():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    fig = draw_sharding(tile_map({"x": 2}, P("x"), (4,)))
    assert plt.get_fignums() == before
    data = fig._repr_png_()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    from IPython.core.formatters import PNGFormatter

    assert PNGFormatter()(fig)[:8] == b"\x89PNG\r\n\x1a\n"


def test_into_an_existing_axes():
    from matplotlib.figure import Figure

    fig = Figure()
    ax = fig.add_subplot(1, 2, 2)
    out = draw_sharding(tile_map({"x": 2}, P("x"), (4, 4)), ax=ax)
    assert out is fig and not ax.axison
    assert sorted(labels(fig)) == ["0", "1"]


def test_sheet_reuses_its_artists():
    fig = ShardFigure(figsize=(6, 4), dpi=80)
    sheet = sheet_for(fig)
    sheet.draw(tile_map({"x": 2, "y": 4}, P("x", "y"), (8, 8)))
    image, ax = sheet.panels[0].image, sheet.panels[0].ax
    first = png_bytes(fig)
    sheet.draw(tile_map({"x": 2, "y": 4}, P("y", "x"), (8, 8)))
    assert sheet_for(fig) is sheet and sheet.panels[0].image is image and sheet.panels[0].ax is ax
    assert png_bytes(fig) != first
    sheet.draw_error("spec: unknown mesh axis 'q'")
    assert "unknown mesh axis" in fig_texts(fig) and not ax.get_visible()
    sheet.draw(tile_map({"x": 2, "y": 4}, P("x"), (8, 8)))
    assert ax.get_visible() and "unknown" not in fig_texts(fig)


def test_subtitle_wraps_to_a_narrow_panel():
    lay = tile_map({"x": 2, "y": 4}, ("x",), (8, 8))
    wide = draw_sharding(lay, figsize=(9, 3))
    fig = ShardFigure(figsize=(9, 3))
    narrow = fig.subplots(1, 3)[0]
    draw_sharding(lay, ax=narrow, title="one of three")
    lines = lambda f: max(t.get_text().count("\n") + 1 for t in f.texts if "mesh {x: 2, y: 4}" in t.get_text())
    assert lines(wide) == 1 and lines(fig) >= 2


# --- draw_links: chips at their coords, direct links, groups along a mesh axis ----------------------------

from dataclasses import dataclass  # noqa: E402
from types import SimpleNamespace  # noqa: E402

from shardlab.hardware.links import hops, physical_links
from shardlab.pictures.draw import draw_links


@dataclass(eq=False, frozen=True)
class _StandIn:
    id: int
    coords: tuple
    core_on_chip: int = 0


def _board_4x2():
    """Eight chips in a grid four wide, numbered row by row."""
    return [_StandIn(i, (i % 4, i // 4, 0)) for i in range(8)]


def _mesh(devs, order, shape, names):
    return SimpleNamespace(devices=np.array([devs[i] for i in order], dtype=object).reshape(shape),
                           axis_names=names)


def test_physical_links_of_a_grid_without_wraparound():
    devs = _board_4x2()
    links = physical_links(devs)
    assert len(links) == 3 * 2 + 4          # three per row, one per column
    assert (0, 1) in links and (0, 4) in links and (3, 7) in links
    assert (0, 3) not in links and (0, 5) not in links
    assert hops(devs[0], devs[7]) == 4 and hops(devs[2], devs[2]) == 0


def test_cores_of_one_chip_count_as_linked():
    devs = [_StandIn(i, ((i // 2) % 2, i // 4, 0), i % 2) for i in range(8)]
    assert (0, 1) in physical_links(devs) and hops(devs[0], devs[1]) == 0
    assert (0, 2) in physical_links(devs)   # chips side by side
    assert (0, 6) not in physical_links(devs)


def test_draw_links_counts_direct_steps_per_axis():
    devs = _board_4x2()
    ring = _mesh(devs, [0, 1, 2, 3, 7, 6, 5, 4], (2, 4), ("x", "y"))
    fig_y = draw_links(ring, "y")
    assert fig_y.axes[0].get_title() == "groups along 'y': 6 of 6 steps are direct links"
    fig_x = draw_links(ring, "x")
    assert fig_x.axes[0].get_title() == "groups along 'x': 0 of 4 steps are direct links"
    grid = _mesh(devs, range(8), (2, 4), ("x", "y"))
    assert draw_links(grid, "x").axes[0].get_title() == "groups along 'x': 4 of 4 steps are direct links"
    texts = sorted(t.get_text() for t in fig_y.axes[0].texts)
    assert texts == sorted(str(i) for i in range(8))
    assert png_bytes(fig_x).startswith(b"\x89PNG")


def test_draw_links_draws_into_a_given_axes_and_a_third_coordinate():
    devs = [_StandIn(i, (i % 2, (i // 2) % 2, i // 4)) for i in range(8)]
    fig = ShardFigure(figsize=(8, 3))
    left, right = fig.subplots(1, 2)
    m = _mesh(devs, range(8), (2, 2, 2), ("a", "b", "c"))
    assert draw_links(m, "a", ax=left, title="T") is fig
    assert left.get_title() == "T"
    assert any(t.get_text() == "z = 1" for t in left.texts)


def test_draw_links_refuses_devices_without_coords_and_unknown_axes():
    plain = SimpleNamespace(devices=np.array([SimpleNamespace(id=0), SimpleNamespace(id=1)], dtype=object),
                            axis_names=("x",))
    with pytest.raises(ValueError, match="no coords"):
        draw_links(plain, "x")
    with pytest.raises(ValueError, match="not an axis"):
        draw_links(_mesh(_board_4x2(), range(8), (8,), ("x",)), "y")


# --- on the page: twice the pixels of the displayed size, at most the column, 9 pt text, alt text ---------

import html as html_lib  # noqa: E402
import re  # noqa: E402

from IPython.core.formatters import DisplayFormatter  # noqa: E402

from shardlab.pictures.display import TIGHT_PAD_IN, drawn_text_sizes, figure_alt, page_image, set_figure_defaults


def shown(fig):
    """What IPython shows for ``fig``: the <img> tag's attributes, the PNG inside it (PIL) and the PNG
    of the image/png entry with its metadata."""
    data, meta = DisplayFormatter().format(fig)
    tag = re.search(r"<img [^>]*>", data["text/html"]).group(0)
    attrs = {k: html_lib.unescape(v) for k, v in re.findall(r'(\w+)="([^"]*)"', tag)}
    inline = Image.open(io.BytesIO(__import__("base64").b64decode(attrs["src"].split(",", 1)[1])))
    png = Image.open(io.BytesIO(__import__("base64").b64decode(data["image/png"])))
    return attrs, inline, png, meta.get("image/png", {})


def displayed_text_pt(fig, width_px):
    """Smallest text of ``fig`` in points where the page shows it ``width_px`` CSS px wide: the drawn
    sizes scaled by the displayed width over the width of what is drawn (96 CSS px per inch)."""
    fig.set_dpi(100)
    fig.canvas.draw()
    drawn_in = fig.get_tightbbox(fig.canvas.get_renderer()).width + 2 * TIGHT_PAD_IN
    return min(size for size, _ in drawn_text_sizes(fig)) * width_px / (drawn_in * 96)


def _pictures():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    x = jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(mesh, P("x", "y")))
    wide = ShardFigure(figsize=(14, 3.8))
    for ax, spec in zip(wide.subplots(1, 3), (P("x"), P(None, "y"), P())):
        draw_sharding(tile_map({"x": 2, "y": 4}, spec, (8, 64)), ax=ax)
    devs = [_StandIn(i, (i % 4, i // 4, 0)) for i in range(8)]
    return {
        "2-D": draw_sharding(x),
        "replicated": draw_sharding(tile_map({"x": 2, "y": 4}, P(), (8, 8))),
        "1-D": draw_sharding(tile_map({"x": 8}, P("x"), (16,))),
        "3-D": draw_sharding(tile_map({"x": 2, "y": 2, "z": 2}, P("x", "y", "z"), (4, 8, 8))),
        "many panels": draw_sharding(tile_map({"x": 4, "y": 4, "z": 4}, P("x", "y", "z"), (16, 16, 16))),
        "long names": draw_sharding(tile_map({"data": 4, "model": 2}, P(("data", "model"), None), (1024, 4096)),
                                    title="a long title that the figure has to wrap onto a second line to fit"),
        "colour by axis": draw_sharding(tile_map({"x": 2, "y": 4}, P("x"), (8, 8)), color_by="y"),
        "mesh": draw_mesh({"x": 2, "y": 4}),
        "wide figure of three": wide,
        "links": draw_links(_mesh(devs, [0, 1, 2, 3, 7, 6, 5, 4], (2, 4), ("x", "y")), "y"),
        "wide links": draw_links(_mesh([_StandIn(i, (i % 16, i // 16, 0)) for i in range(32)], range(32), (2, 16),
                                       ("x", "y")), "y"),
    }


PICTURES = _pictures()


@pytest.mark.parametrize("name", list(PICTURES))
def test_shown_at_twice_its_displayed_size_within_the_column(name):
    fig = PICTURES[name]
    attrs, inline, png, meta = shown(fig)
    w, h = int(attrs["width"]), int(attrs["height"])
    assert inline.size == (2 * w, 2 * h) and png.size == (2 * w, 2 * h)
    assert (meta["width"], meta["height"]) == (w, h)
    assert 150 <= w <= COLUMN_PX and "max-width:100%" in attrs["style"]


@pytest.mark.parametrize("name", list(PICTURES))
def test_smallest_text_is_at_least_9_pt_as_displayed(name):
    fig = PICTURES[name]
    attrs, _, _, meta = shown(fig)
    smallest = displayed_text_pt(fig, int(attrs["width"]))
    assert smallest >= 9.0 - 0.05, f"{name}: text of {smallest:.2f} pt as displayed"
    # The display's own reading (in its metadata, for tests of executed chapters) agrees.
    assert abs(meta["shardlab_smallest_text_pt"] - smallest) < 0.1


def test_the_text_measure_sees_small_text_and_shrunk_figures():
    fig = ShardFigure(figsize=(4, 2))
    fig.text(0.5, 0.5, "tiny", fontsize=7)
    fig.text(0.5, 0.8, "title", fontsize=12)
    assert abs(displayed_text_pt(fig, int(shown(fig)[0]["width"])) - 7) < 0.3
    wide = ShardFigure(figsize=(14, 2))           # shown at the column's width: everything shrinks
    wide.text(0.02, 0.5, "left", fontsize=10)
    wide.text(0.98, 0.5, "right", fontsize=10)
    attrs, _, _, meta = shown(wide)
    assert int(attrs["width"]) == COLUMN_PX
    assert displayed_text_pt(wide, int(attrs["width"])) < 9.0
    assert abs(meta["shardlab_smallest_text_pt"] - 10 * COLUMN_PX / (14 * 96)) < 0.1


def test_alt_text_says_what_the_picture_shows():
    alt = shown(PICTURES["2-D"])[0]["alt"]
    assert "P('x', 'y')" in alt and "{x: 2, y: 4}" in alt and "(8, 8)" in alt and "0 1 2 3 4 5 6 7" in alt
    alt = shown(PICTURES["replicated"])[0]["alt"]
    assert "all 8 devices" in alt
    alt = shown(PICTURES["wide figure of three"])[0]["alt"]
    assert alt.count("on mesh {x: 2, y: 4}") == 3 and "P(None, 'y')" in alt
    assert "on 0, 4" in alt                      # tile (0, 0) of P(None, 'y') is held by devices 0 and 4
    assert "groups along 'y'" in shown(PICTURES["links"])[0]["alt"]
    fig = ShardFigure(figsize=(4, 3))
    ax = fig.add_subplot()
    ax.plot([0, 1], [1, 0])
    ax.set_title("bytes sent per step")
    assert figure_alt(fig) == "bytes sent per step."
    ax.set_title("")
    ax.set_xlabel("step")
    ax.set_ylabel("bytes")
    assert figure_alt(fig) == "bytes against step."
    # A figure cleared and drawn again describes only what it shows now.
    fig = ShardFigure(figsize=(5, 4))
    draw_sharding(tile_map({"x": 2}, P("x"), (4, 4)), ax=fig.add_subplot())
    fig.clear()
    draw_sharding(tile_map({"x": 2}, P(None, "x"), (4, 4)), ax=fig.add_subplot())
    assert "P(None, 'x')" in figure_alt(fig) and "P('x'" not in figure_alt(fig)


def test_pyplot_and_plain_figures_follow_the_defaults():
    import matplotlib
    from matplotlib.figure import Figure

    shell = SimpleNamespace(display_formatter=DisplayFormatter())
    saved = dict(matplotlib.rcParams)
    try:
        set_figure_defaults(shell)
        fig = Figure(figsize=(10, 3))                 # wider than the column
        ax = fig.add_subplot()
        ax.plot([0, 1, 2], [3, 1, 2])
        ax.set_title("a plain figure")
        data, meta = shell.display_formatter.format(fig)
        tag = re.search(r"<img [^>]*>", data["text/html"]).group(0)
        width = int(re.search(r'width="(\d+)"', tag).group(1))
        png = Image.open(io.BytesIO(__import__("base64").b64decode(data["image/png"])))
        assert width == COLUMN_PX and png.size[0] == 2 * width and meta["image/png"]["width"] == width
        assert 'alt="a plain figure."' in tag
        assert matplotlib.rcParams["xtick.labelsize"] >= 9
    finally:
        matplotlib.rcParams.update(saved)


def test_page_image_checks_its_figure():
    with pytest.raises(ValueError, match="figure"):
        from shardlab.pictures.display import display_width

        display_width(0)
    image = page_image(PICTURES["1-D"])
    assert Image.open(io.BytesIO(image.data)).size == (2 * image.width, 2 * image.height)
