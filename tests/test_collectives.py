"""shardlab.parallelism.collective_steps: buffers before/after each collective and each ring step, run on 8 CPU devices."""

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from shardlab.parallelism.collective_steps import (COLLECTIVE_KINDS, RING_KINDS, collective_view, draw_collective,
                                                   ring_steps, run_collective)
from shardlab.layout.ring_bytes import (bytes_all_gather, bytes_all_reduce, bytes_all_to_all, bytes_permute,
                                        bytes_reduce_scatter)


def start(n, size):
    return 10 * np.arange(n)[:, None] + np.arange(size)[None, :]


def reference(kind, x, *, tiled=False, shift=1):
    """numpy's answer: every device's buffer after the collective, given every device's buffer x (n, size)."""
    n, size = x.shape
    if kind == "psum":
        return np.repeat(x.sum(0)[None], n, 0)
    if kind == "all_gather":
        return np.repeat((x.reshape(-1) if tiled else x)[None], n, 0)
    if kind == "psum_scatter":
        return x.sum(0).reshape(n, size // n)
    if kind == "ppermute":
        return np.stack([x[(p - shift) % n] for p in range(n)])
    if kind == "all_to_all":
        pieces = x.reshape(n, n, size // n)  # [sender, piece]
        return np.stack([pieces[:, p].reshape(-1) for p in range(n)])
    raise AssertionError(kind)


@pytest.mark.parametrize("n", [2, 4, 8])
@pytest.mark.parametrize("kind", COLLECTIVE_KINDS)
def test_before_and_after_equal_numpy(kind, n):
    run = run_collective(kind, DEVICES[:n])
    size = run.params["size"]
    x = start(n, size)
    assert run.before.shape == (n, size)
    np.testing.assert_array_equal(run.before, x)
    np.testing.assert_array_equal(run.after.reshape(n, -1), reference(kind, x).reshape(n, -1))
    assert run.device_ids == tuple(d.id for d in DEVICES[:n])
    assert run.kind == kind and run.n == n


@pytest.mark.parametrize("kind, tiled, shape", [
    ("all_gather", False, (4, 4, 2)), ("all_gather", True, (4, 8)),
    ("psum_scatter", False, (4, 2)), ("psum_scatter", True, (4, 2)),
])
def test_tiled_and_untiled(kind, tiled, shape):
    run = run_collective(kind, DEVICES[:4], tiled=tiled, size=8 if kind == "psum_scatter" else 2)
    assert run.after.shape == shape
    x = start(4, run.params["size"])
    np.testing.assert_array_equal(run.after, reference(kind, x, tiled=tiled).reshape(shape))


def test_shift_and_custom_values():
    x = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    run = run_collective("ppermute", DEVICES[:3], shift=2, values=x)
    np.testing.assert_array_equal(run.after, reference("ppermute", x, shift=2))
    assert "(j + 2) % 3" in run.call
    still = run_collective("ppermute", DEVICES[:3], shift=3)
    np.testing.assert_array_equal(still.after, still.before)
    assert still.bytes_per_device == 0


def test_origins_say_where_values_came_from():
    ids = tuple(d.id for d in DEVICES[:4])
    psum = run_collective("psum", DEVICES[:4])
    assert psum.origins_of("after")[2][1] == ids
    assert psum.origins_of("before")[2][1] == (ids[2],)
    a2a = run_collective("all_to_all", DEVICES[:4])
    # After an all-to-all, piece q of every device came from device q.
    assert a2a.origins_of("after")[1] == [(ids[q],) for q in range(4)]
    perm = run_collective("ppermute", DEVICES[:4])
    assert [row[0] for row in perm.origins_of("after")] == [(ids[3],), (ids[0],), (ids[1],), (ids[2],)]


def test_devices_in_any_order_keep_their_ids():
    devs = [DEVICES[5], DEVICES[2], DEVICES[7]]
    run = run_collective("ppermute", devs)
    assert run.device_ids == (5, 2, 7)
    np.testing.assert_array_equal(run.after, reference("ppermute", start(3, 2)))
    assert run.origins_of("after")[0][0] == (7,)


def test_bytes_follow_the_formulas():
    # By hand, 8 devices: psum, psum_scatter and all_to_all hold 8 floats (32 bytes, 8 pieces of 4), all_gather
    # and ppermute 2 floats (8 bytes; gathered, 64).
    n = 8
    expected = {"psum": 2 * 7 * 4,          # 7 pieces scattered, 7 gathered
                "all_gather": 7 * 8,        # 7 of the 8 pieces of the gathered 64 bytes
                "psum_scatter": 7 * 4,
                "ppermute": 8,              # the whole buffer
                "all_to_all": 7 * 4}        # 7 of 8 pieces leave
    assert {kind: run_collective(kind, n).bytes_per_device for kind in COLLECTIVE_KINDS} == expected
    # ...and they are what the ring formulas give.
    assert expected == {"psum": bytes_all_reduce(32, n), "all_gather": bytes_all_gather(64, n),
                        "psum_scatter": bytes_reduce_scatter(32, n), "ppermute": bytes_permute(8),
                        "all_to_all": bytes_all_to_all(32, n)}


def test_report_of_the_program_that_ran():
    run = run_collective("psum_scatter", 4, tiled=True)
    (c,) = run.report()
    assert c.kind == "reduce-scatter" and c.group_size == 4 and c.shape == (4,) and c.result_shape == (1,)
    assert c.bytes_per_device == run.bytes_per_device == 3 * 4      # 3 of 4 one-float pieces


# ----------------------------------------------------------------------------------------------
# Rings
# ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("n", [2, 3, 4, 8])
@pytest.mark.parametrize("kind", RING_KINDS)
def test_ring_ends_where_the_builtin_does(kind, n):
    ring = ring_steps(kind, DEVICES[:n])
    assert ring.steps == n - 1 and len(ring.states) == n
    np.testing.assert_array_equal(ring.result, ring.builtin)
    size = 2 if kind == "all_gather" else n
    x = start(n, size)
    if kind == "all_gather":
        np.testing.assert_array_equal(ring.builtin, reference("all_gather", x))
        # Before: only my own slot is filled.
        for p in range(n):
            filled = ~np.isnan(ring.states[0, p, :, 0])
            assert filled.tolist() == [q == p for q in range(n)]
        # Each step fills exactly one more slot on every device.
        for s in range(n):
            assert (~np.isnan(ring.states[s, :, :, 0])).sum(axis=1).tolist() == [s + 1] * n
        total = bytes_all_gather(n * size * 4, n)
    else:
        np.testing.assert_array_equal(ring.builtin.reshape(n, -1), reference("psum_scatter", x))
        np.testing.assert_array_equal(ring.states[0].reshape(n, -1), x)
        total = bytes_reduce_scatter(size * 4, n)
    assert ring.total_bytes_per_device == total


@pytest.mark.parametrize("n", [3, 8])
@pytest.mark.parametrize("kind", RING_KINDS)
def test_replaying_the_recorded_sends_gives_the_recorded_states(kind, n):
    # Start from the first state and apply the recorded sends, step by step: position p sends slot
    # sends[s-1][p] to p + 1, which keeps it (all-gather) or adds its own contribution (reduce-scatter).
    ring = ring_steps(kind, DEVICES[:n])
    values, origins = ring.states[0].copy(), ring.origins[0].copy()
    assert ring.steps == n - 1 and len(ring.sends) == len(ring.receives) == n - 1
    for s in range(1, n):
        after, after_origins = values.copy(), origins.copy()
        for p in range(n):
            k, q = ring.sends[s - 1][p], (p + 1) % n
            assert ring.receives[s - 1][q] == k            # what p sends is the slot p + 1 receives
            assert not np.isnan(values[p, k]).any()          # p holds what it sends
            if kind == "all_gather":
                assert np.isnan(values[q, k]).all()         # and p + 1 did not have it yet
                after[q, k], after_origins[q, k] = values[p, k], origins[p, k]
            else:
                after[q, k] = values[p, k] + ring.states[0][q, k]
                after_origins[q, k] = origins[p, k] | ring.origins[0][q, k]
        np.testing.assert_array_equal(after, ring.states[s])
        np.testing.assert_array_equal(after_origins, ring.origins[s])
        values, origins = after, after_origins
    # Each step every device sends one piece of chunk floats.
    assert ring.bytes_per_step == ring.chunk * 4 and ring.total_bytes_per_device == (n - 1) * ring.chunk * 4


def test_ring_reduce_scatter_partial_sums():
    n = 4
    ring = ring_steps("reduce_scatter", DEVICES[:n])
    x = start(n, n).astype(float)
    # After step s, the piece a device just received holds the sum of s + 1 consecutive devices' values.
    for s in range(1, n):
        for p in range(n):
            k = ring.receives[s - 1][p]
            contributors = [(p - j) % n for j in range(s + 1)]
            assert ring.states[s, p, k, 0] == sum(x[q, k] for q in contributors)
            assert int(ring.origins[s, p, k, 0]) == sum(1 << q for q in contributors)
    assert ring.sends[0] == tuple((p - 1) % n for p in range(n))


def test_ring_with_bigger_pieces_and_own_values():
    vals = np.arange(24, dtype=float).reshape(3, 8) * 0.5
    ring = ring_steps("all_gather", DEVICES[:3], values=vals)
    assert ring.chunk == 8 and ring.bytes_per_step == 32
    np.testing.assert_array_equal(ring.result, np.repeat(vals[None], 3, 0))
    rs = ring_steps("psum_scatter", DEVICES[:3], size=6)
    assert rs.kind == "reduce_scatter" and rs.chunk == 2
    np.testing.assert_array_equal(rs.builtin.reshape(3, -1), reference("psum_scatter", start(3, 6)))


# ----------------------------------------------------------------------------------------------
# Bad input
# ----------------------------------------------------------------------------------------------

def test_bad_kind_names_kind_and_lists_valid_ones():
    with pytest.raises(ValueError, match="kind") as e:
        run_collective("allreduce", DEVICES[:2])
    for k in COLLECTIVE_KINDS:
        assert repr(k) in str(e.value)
    with pytest.raises(ValueError, match="kind.*'all_gather', 'reduce_scatter'"):
        ring_steps("psum", DEVICES[:2])
    with pytest.raises(ValueError, match="kind"):
        collective_view("psum", DEVICES[:2], ring=True)
    with pytest.raises(ValueError, match="kind"):
        draw_collective(3, DEVICES[:2])


@pytest.mark.parametrize("devices", [DEVICES[:1], [], 1, 0, 99, "cpu", [0, 1], [DEVICES[0], DEVICES[0]], None, True])
def test_bad_devices(devices):
    with pytest.raises(ValueError, match="devices"):
        run_collective("psum", devices)
    with pytest.raises(ValueError, match="devices"):
        ring_steps("all_gather", devices)


def test_bad_sizes_and_options():
    with pytest.raises(ValueError, match="size"):
        run_collective("psum_scatter", DEVICES[:4], size=6)
    with pytest.raises(ValueError, match="size"):
        run_collective("psum", DEVICES[:4], size=0)
    with pytest.raises(ValueError, match="size"):
        ring_steps("reduce_scatter", DEVICES[:4], size=5)
    with pytest.raises(ValueError, match="tiled"):
        run_collective("all_gather", DEVICES[:4], tiled="yes")
    with pytest.raises(ValueError, match="axis_name"):
        run_collective("psum", DEVICES[:4], axis_name="")
    with pytest.raises(ValueError, match="values"):
        run_collective("psum", DEVICES[:4], values=np.ones((3, 4)))
    with pytest.raises(ValueError, match="values"):
        ring_steps("all_gather", DEVICES[:2], values=[[1.0, np.nan], [2.0, 3.0]])
    with pytest.raises(ValueError, match="step"):
        draw_collective("psum", DEVICES[:2], step="step 1")
    with pytest.raises(ValueError, match="ring"):
        draw_collective("psum", DEVICES[:2], ring="yes")


# ----------------------------------------------------------------------------------------------
# Pictures
# ----------------------------------------------------------------------------------------------

def test_draw_collective_frames():
    fig = draw_collective("all_gather", DEVICES[:4], ring=True, step="step 2")
    texts = [t.get_text() for t in fig.texts] + [t.get_text() for ax in fig.axes for t in ax.texts]
    assert any("step 2 of 3" in t for t in texts)
    assert any(t == "device 3" for t in texts)
    assert fig._repr_png_()[:4] == b"\x89PNG"
    fig = draw_collective("psum", DEVICES[:4])
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("60") == 4  # 0 + 10 + 20 + 30, on every device


def test_collective_view_is_an_explorer_over_steps():
    view = collective_view("all_gather", DEVICES[:4], ring=True)
    assert view.controls == {"step": ["before", "step 1", "step 2", "step 3", "after"]}
    assert view.render(step="step 2")[:4] == b"\x89PNG"
    texts = [t.get_text() for t in view.figure.texts]
    assert any("step 2 of 3" in t and "8 bytes" in t for t in texts)   # captions wrap, words stay whole
    html = view.to_html()
    assert 'class="shardlab-explorer"' in html and html.count('type="range"') == 1
    plain = collective_view("psum", 4)
    assert plain.controls == {"step": ["before", "after"]}
    plain.render(step="after")
    assert any("each device sent 24 bytes, modelled (ring all-reduce" in " ".join(t.get_text().split())
               for t in plain.figure.texts)
    a2a = collective_view("all_to_all", 4)
    a2a.render(step="after")
    assert any("modelled (direct exchange" in " ".join(t.get_text().split()) for t in a2a.figure.texts)
    rs = collective_view("psum_scatter", DEVICES[:3], ring=True)
    assert rs.controls["step"] == ["before", "step 1", "step 2", "after"]


def test_runs_whatever_mesh_the_caller_has_set():
    import jax

    with jax.set_mesh(jax.make_mesh((2, 4), ("x", "y"))):
        run = run_collective("psum", DEVICES[:4])
        np.testing.assert_array_equal(run.after, reference("psum", start(4, 4)))
        assert run.report().kinds() == {"all-reduce": 1}
        ring = ring_steps("reduce_scatter", DEVICES[:4])
        np.testing.assert_array_equal(ring.result, ring.builtin)


def _smallest_displayed_pt(fig):
    """The smallest text of a figure as the page shows it, by hand: its font sizes times the displayed
    width over the figure's width (the page shows 96 CSS px per inch, at most the column; the PNG has
    2 pixels per CSS px)."""
    import io

    from PIL import Image

    from shardlab.pictures.display import page_image

    image = page_image(fig, tight=False)
    shown_in = Image.open(io.BytesIO(image.data)).size[0] / 2 / 96
    sizes = [t.get_fontsize() for t in fig.texts if t.get_text().strip()]
    sizes += [t.get_fontsize() for ax in fig.axes for t in ax.texts if t.get_text().strip()]
    return min(sizes) * shown_in / fig.get_size_inches()[0]


@pytest.mark.parametrize("kind, n, ring, figsize", [("all_gather", 4, False, None), ("all_gather", 8, True, None),
                                                    ("psum", 8, False, None), ("psum", 4, False, (12, 4))])
def test_collective_text_is_at_least_9_pt_as_displayed(kind, n, ring, figsize):
    fig = draw_collective(kind, DEVICES[:n], ring=ring, size=4, figsize=figsize)
    assert fig.get_size_inches()[0] <= 7.0 or figsize is not None
    assert _smallest_displayed_pt(fig) >= 9.0 - 1e-6
    view = collective_view(kind, DEVICES[:n], ring=ring, size=4, figsize=figsize)
    view.to_html()
    assert view.smallest_text_pt >= 9.0 - 1e-6
