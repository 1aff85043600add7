"""shardlab.draw: heatmaps of layouts and device grids."""

import io

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from PIL import Image

import shardlab
from shardlab.draw import PALETTE, ShardFigure, device_color, draw_mesh, draw_sharding, png_bytes, sheet_for
from shardlab.layout import tile_map

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


def test_replicated_tiles_show_every_holder():
    fig = draw_sharding(tile_map({"x": 2, "y": 4}, P("x"), (8, 8)))
    assert sorted(labels(fig)) == ["0,1,2,3", "4,5,6,7"]
    # The top tile is striped with the colours of devices 0..3 and nothing else.
    img = panel_image(fig)
    top = {tuple(p) for p in img[: img.shape[0] // 2 - 1].reshape(-1, 3).tolist()}
    assert top == {rgb255(device_color(i)) for i in range(4)}
    assert "each tile on 4 devices" in fig_texts(fig)
    full = draw_sharding(tile_map({"x": 2, "y": 4}, P(), (4, 4)))
    assert labels(full) == ["0,1,2,3\n4,5,6,7"]
    # Many holders: a range, a progression, or "all".
    assert labels(draw_sharding(tile_map({"x": 4, "y": 16}, P("x"), (64, 64)))) == \
        ["0–15", "16–31", "32–47", "48–63"]
    assert labels(draw_sharding(tile_map({"x": 16, "y": 4}, P(None, "y"), (4, 64)))) == \
        ["0,4,…,60", "1,5,…,61", "2,6,…,62", "3,7,…,63"]


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
    assert labels(draw_sharding(tile_map({"x": 16, "y": 256}, P(), (4,)))) == ["all 4096"]


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

from shardlab.draw import draw_links, hops, physical_links  # noqa: E402


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
