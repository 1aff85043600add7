"""shardlab.pictures.explore and shardlab.pictures.static_player: live widgets and the static page player."""

import json
import re

import numpy as np
import pytest

import shardlab
from shardlab.pictures.explore import Explorer, explorer, sharding_explorer
from shardlab.pictures.static_player import player_html

shardlab.setup_devices(8)

WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def config_of(html):
    """The JSON configuration the player's script reads."""
    m = re.search(r'<script type="application/json" class="shardlab-data">(.*?)</script>', html, re.S)
    return json.loads(m.group(1).replace("<\\/", "</"))


def figure_texts(fig):
    return " | ".join(t.get_text() for t in fig.texts if t.get_visible())


def draw_a(fig, a, b):
    """Depends on a only: b is ignored, so frames repeat."""
    ax = fig.add_subplot()
    ax.bar([0], [a + 1])
    ax.set_ylim(0, 4)


def test_mimebundle_has_widget_and_html():
    ex = explorer({"a": [0, 1, 2], "b": ["p", "q"]}, draw_a, figsize=(2, 2))
    bundle = ex._repr_mimebundle_()
    assert WIDGET_MIME in bundle and "text/html" in bundle and "text/plain" in bundle
    assert bundle[WIDGET_MIME]["model_id"] == ex.widget.model_id


def test_static_html_one_range_per_control_and_unique_frames():
    ex = explorer({"a": [0, 1, 2], "b": ["p", "q"]}, draw_a, figsize=(2, 2))
    html = ex.to_html()
    assert html.startswith('<div class="shardlab-explorer" id="shardlab-explorer-')
    assert html.count('type="range"') == 2
    root_id = re.search(r'id="([^"]+)"', html).group(1)
    assert f"document.getElementById({json.dumps(root_id)})" in html  # scoped to its own root
    cfg = config_of(html)
    assert len(cfg["frames"]) == 3 and cfg["table"] == [0, 0, 1, 1, 2, 2]
    assert cfg["labels"] == [["0", "1", "2"], ["p", "q"]] and cfg["radix"] == [3, 2]
    # Self-contained: no network, no external script.
    assert "http" not in html and "<script src" not in html
    # Two explorers on one page get different roots.
    other = explorer({"a": [0, 1, 2], "b": ["p", "q"]}, draw_a, figsize=(2, 2)).to_html()
    assert re.search(r'id="([^"]+)"', other).group(1) != root_id


def test_player_escapes_and_checks():
    html = player_html([("x</script>", ["<b>"])], [b"\x89PNG\r\n\x1a\n"], [0], [0])
    assert "x</script>" not in html.split("<script")[0] and "&lt;b&gt;" in html
    assert config_of(html)["labels"] == [["<b>"]]
    with pytest.raises(ValueError, match="table"):
        player_html([("a", ["1", "2"])], [b"x"], [0], [0])
    with pytest.raises(ValueError, match="initial"):
        player_html([("a", ["1"])], [b"x"], [0], [3])
    with pytest.raises(ValueError, match="frames"):
        player_html([("a", ["1"])], [b"GIF89a"], [0], [0])
    with pytest.raises(ValueError, match="width"):
        player_html([("a", ["1"])], [b"\x89PNG"], [0], [0], width=0)
    with pytest.raises(ValueError, match="alts"):
        player_html([("a", ["1"])], [b"\x89PNG"], [0], [0], alts=["one", "two"])


def test_frame_cap():
    with pytest.raises(ValueError, match="max_frames"):
        explorer({"a": list(range(15)), "b": list(range(15))}, draw_a)
    explorer({"a": list(range(15)), "b": list(range(15))}, draw_a, max_frames=225)
    with pytest.raises(ValueError, match="controls"):
        explorer({}, draw_a)
    with pytest.raises(ValueError, match="controls"):
        explorer({"a": []}, draw_a)
    with pytest.raises(ValueError, match="draw"):
        explorer({"a": [1]}, "not a function")
    with pytest.raises(ValueError, match="max_frames"):
        sharding_explorer(shapes=[(8, 8), (4, 16), (16, 4)])


def test_live_widget_redraws_the_same_figure():
    ex = sharding_explorer()
    w = ex.widget
    fig = ex.figure
    sheet_image = fig._shardlab_sheet.panels[0].image
    before = ex._image.value
    assert w.children[-1] is ex._image and len(w.children) == 1 + len(ex.controls)
    slider = ex._sliders["dim 0"]
    slider.value = 2  # 'y' on the default (8,) mesh: an error picture
    assert ex.value["dim 0"] == "y"
    assert ex._image.value != before and ex.figure is fig
    assert "unknown mesh axis 'y'" in figure_texts(fig)
    ex._sliders["mesh"].value = 1  # {x: 2, y: 4}: a heatmap again, on the same artists
    assert "unknown" not in figure_texts(fig)
    assert fig._shardlab_sheet.panels[0].image is sheet_image and ex.figure is fig
    after = ex._image.value
    ex.set(**{"dim 1": "x"})
    assert ex._sliders["dim 1"].value == 1 and ex._image.value != after


def test_sharding_explorer_defaults_and_page_size():
    ex = sharding_explorer()
    assert list(ex.controls) == ["mesh", "shape", "dim 0", "dim 1"]
    assert [len(v) for v in ex.controls.values()] == [4, 2, 5, 5]
    html = ex.to_html()
    cfg = config_of(html)
    assert html.count('type="range"') == 4 and len(cfg["table"]) == 200
    # Frame bytes of the book's default explorer (chapter 2): 67 pictures at twice the displayed
    # pixels and 133 refusals; a chapter page must stay under 2 MB with everything on it.
    assert len(html) < 850_000
    # Invalid choices are drawn as their error message.
    ex.render(mesh=ex.controls["mesh"][1], shape=(4, 16), **{"dim 0": ("x", "y")})
    assert "not divide evenly" in figure_texts(ex.figure)


def test_custom_meshes_shapes_and_per_dimension_specs():
    ex = sharding_explorer(meshes=[{"data": 4, "model": 2}], shapes=[(8, 4, 2)],
                           specs=[[None, "data"], [None, "model"], [None]])
    assert list(ex.controls) == ["mesh", "shape", "dim 0", "dim 1", "dim 2"]
    assert len(ex.frames()[1]) == 4
    with pytest.raises(ValueError, match="specs"):
        sharding_explorer(specs=[[None]], shapes=[(4, 4)])


def test_choice_errors_and_repr():
    ex = explorer({"a": [0, 1], "b": [0]}, draw_a)
    assert isinstance(ex, Explorer) and "a: 2 options" in repr(ex)
    with pytest.raises(ValueError, match="choice"):
        ex.set(a=5)
    with pytest.raises(ValueError, match="choice"):
        ex.set(c=0)


def test_draw_that_cannot_take_a_label_is_refused_up_front():
    def draw(fig, shape):
        pass

    with pytest.raises(ValueError, match="cannot take the labels"):
        shardlab.explorer({"input shape": [1, 2]}, draw)
    shardlab.explorer({"shape": [1, 2]}, draw)  # named after the label: fine
    shardlab.explorer({"input shape": [1, 2]}, lambda fig, **choice: None)  # **choice: fine


# --- on the page: frames at twice the displayed size, alt texts that say what each frame shows -------

import base64  # noqa: E402
import html as html_lib  # noqa: E402
import io  # noqa: E402
from urllib.parse import unquote  # noqa: E402

import jax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402
from PIL import Image  # noqa: E402

from shardlab.pictures.display import COLUMN_PX


def img_tag(html):
    tag = re.search(r'<img class="shardlab-frame"[^>]*>', html).group(0)
    return {k: html_lib.unescape(v) for k, v in re.findall(r'(\w+)="([^"]*)"', tag)}


def decode(uri):
    head, body = uri.split(",", 1)
    if head.endswith(";base64"):
        return head, base64.b64decode(body)
    return head, unquote(body).encode()


def small_explorer():
    mesh_opts = {"{x: 2, y: 4}": (2, 4), "{x: 4, y: 2}": (4, 2)}
    return sharding_explorer(meshes=list(mesh_opts.values()), shapes=[(8, 8)],
                             specs=[None, "x", ("x", "y")])


def test_frames_have_twice_the_pixels_of_their_displayed_size():
    for ex in (small_explorer(), explorer({"a": [0, 1, 2], "b": ["p", "q"]}, draw_a, figsize=(9, 3))):
        html = ex.to_html()
        attrs = img_tag(html)
        w, h = int(attrs["width"]), int(attrs["height"])
        assert w <= COLUMN_PX and "max-width:100%" in attrs["style"]
        pictures = 0
        for uri in config_of(html)["frames"]:
            head, data = decode(uri)
            if "svg" in head:
                assert f'width="{w}"' in data.decode() and f'height="{h}"' in data.decode()
                continue
            pictures += 1
            assert Image.open(io.BytesIO(data)).size == (2 * w, 2 * h)
        assert pictures >= 3
    assert (w, h) == (COLUMN_PX, round(3 * COLUMN_PX / 9))   # 9 inches wide: shown at the column's width


def svg_text(data: bytes) -> str:
    return " ".join(html_lib.unescape(t) for t in re.findall(r"<text[^>]*>([^<]*)</text>", data.decode()))


def test_frame_alts_say_what_each_frame_shows():
    ex = small_explorer()
    table, frames, alts = ex.frames()
    cfg = config_of(ex.to_html())
    assert cfg["alts"] == alts and len(alts) == len(frames)
    assert list(ex.controls) == ["mesh", "shape", "dim 0", "dim 1"]
    meshes = [jax.make_mesh(sizes, ("x", "y")) for sizes in ((2, 4), (4, 2))]
    for key, f in enumerate(table):
        m, d0, d1 = key // 9, (key // 3) % 3, key % 3
        spec = [ex.controls["dim 0"][d0], ex.controls["dim 1"][d1]]
        while spec and spec[-1] is None:
            spec.pop()
        alt = alts[f]
        try:   # JAX decides whether the choice is a layout, and who holds the tile at the origin
            sharding = NamedSharding(meshes[m], P(*spec))
            jax.device_put(np.zeros((8, 8), np.float32), sharding)
        except Exception as e:   # ValueError, or JAX's DuplicateSpecError for an axis used twice
            assert isinstance(e, ValueError) or type(e).__name__ == "DuplicateSpecError", e
            assert "not a valid layout" in alt and "spec:" in alt        # the refusal, in words
            assert frames[f].startswith(b"<svg") and "spec:" in svg_text(frames[f])
            continue
        assert "on mesh" in alt and "(8, 8)" in alt, alt
        holders = sorted(d.id for d, idx in sharding.devices_indices_map((8, 8)).items()
                         if all((s.start or 0) == 0 for s in idx))
        if len(holders) == 8:
            said = "all 8 devices"
        elif len(holders) == 1:
            said = f"device ids in tile order: {holders[0]}"
        elif holders == list(range(holders[0], holders[-1] + 1)) and len(holders) > 2:
            said = f"tile 0 0 on {holders[0]}–{holders[-1]}"
        else:
            said = "tile 0 0 on " + ", ".join(map(str, holders))
        assert said in alt, (spec, alt)


def test_refusals_are_stored_as_words_not_pictures():
    ex = sharding_explorer()
    table, frames, alts = ex.frames()
    svgs = [f for f in frames if f.startswith(b"<svg")]
    pictures = [f for f in frames if not f.startswith(b"<svg")]
    assert len(svgs) + len(pictures) == len(frames) and len(svgs) > len(pictures) > 0
    assert max(map(len, svgs)) < 2_000 < min(map(len, pictures))


def test_live_view_shows_the_displayed_width():
    ex = sharding_explorer()
    w = ex.widget
    assert ex._image.width == str(ex.display_size[0])
    assert Image.open(io.BytesIO(ex._image.value)).size[0] == 2 * ex.display_size[0]
    assert w.children[-1] is ex._image


def test_explorer_checks_its_figure_size():
    with pytest.raises(ValueError, match="figsize"):
        explorer({"a": [1], "b": [1]}, draw_a, figsize=(0, 3))
    with pytest.raises(ValueError, match="figsize"):
        explorer({"a": [1], "b": [1]}, draw_a, figsize="big")


def test_smallest_text_of_the_frames_is_recorded():
    def draw(fig, a):
        fig.text(0.1, 0.5, f"a = {a}", fontsize=7)
        fig.text(0.1, 0.8, "title", fontsize=12)

    small = explorer({"a": [1, 2]}, draw, figsize=(4, 3)).to_html()
    assert float(re.search(r'data-smallest-text-pt="([\d.]+)"', small).group(1)) == pytest.approx(7, abs=0.01)
    wide = explorer({"a": [1, 2]}, draw, figsize=(14, 3)).to_html()   # shown at the column: smaller
    assert float(re.search(r'data-smallest-text-pt="([\d.]+)"', wide).group(1)) == \
        pytest.approx(7 * COLUMN_PX / (14 * 96), abs=0.01)
    ex = small_explorer()
    ex.to_html()
    assert ex.smallest_text_pt >= 9.0 - 1e-6
