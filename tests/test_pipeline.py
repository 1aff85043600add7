"""The pipeline schedules: their tables, bubbles, in-flight counts and pictures."""

import numpy as np
import pytest

from shardlab.parallelism.pipeline import (BACKWARD, FORWARD, IDLE, Schedule, WEIGHT, bubble_fraction, bubble_model,
                                           circular_schedule, draw_schedule, gpipe_schedule, in_flight,
                                           one_f_one_b_schedule, zero_bubble_schedule)

SIZES = [(1, 1), (2, 1), (2, 5), (4, 4), (4, 8), (8, 16), (3, 7)]


def every_pass_once(sched: Schedule):
    """Each stage does each (phase, microbatch, chunk) exactly once."""
    for s in range(sched.stages):
        seen = [(p, m, c) for p, m, c in zip(sched.phase[s], sched.microbatch[s], sched.chunk[s]) if p != IDLE]
        expected = {(p, m, c) for p in (FORWARD, BACKWARD) for m in range(sched.microbatches)
                    for c in range(sched.virtual)}
        assert len(seen) == len(expected) and set(seen) == expected


def dependencies_hold(sched: Schedule):
    """A forward pass comes after the previous layer's, a backward pass after the next layer's."""
    S, V = sched.stages, sched.virtual
    when = {}
    for s in range(S):
        for t in range(sched.steps):
            if sched.phase[s, t] != IDLE:
                layer = sched.chunk[s, t] * S + s          # the chunk's place in the model
                when[(sched.phase[s, t], sched.microbatch[s, t], layer)] = t
    for (p, m, layer), t in when.items():
        if p == FORWARD and layer > 0:
            assert when[(FORWARD, m, layer - 1)] < t
        if p == BACKWARD:
            before = (BACKWARD, m, layer + 1) if layer < S * V - 1 else (FORWARD, m, layer)
            assert when[before] < t


@pytest.mark.parametrize("stages,microbatches", SIZES)
def test_gpipe_and_1f1b_share_the_bubble_formula(stages, microbatches):
    for sched in (gpipe_schedule(stages, microbatches), one_f_one_b_schedule(stages, microbatches)):
        every_pass_once(sched)
        dependencies_hold(sched)
        assert sched.steps == 2 * (microbatches + stages - 1)
        assert bubble_fraction(sched) == pytest.approx(bubble_model(stages, microbatches))


@pytest.mark.parametrize("stages,microbatches", SIZES)
def test_1f1b_keeps_at_most_stages_in_flight(stages, microbatches):
    assert in_flight(gpipe_schedule(stages, microbatches)).tolist() == [microbatches] * stages
    flight = in_flight(one_f_one_b_schedule(stages, microbatches))
    assert flight.tolist() == [min(stages - s, microbatches) for s in range(stages)]


def waiting_intervals(sched: Schedule, kind: str):
    """Per stage, (microbatch, first step, last step) of each buffer 1F1B's program keeps: a received
    activation ('act') or gradient ('grad') from the step after it was made to the step that uses it, or a
    stashed input ('stash') from its forward pass to its backward pass."""
    when = {(sched.phase[s, t], s, sched.microbatch[s, t]): t
            for s in range(sched.stages) for t in range(sched.steps) if sched.phase[s, t] != IDLE}
    out = []
    for s in range(sched.stages):
        spans = []
        for m in range(sched.microbatches):
            if kind == "act" and s > 0:
                spans.append((m, when[(FORWARD, s - 1, m)] + 1, when[(FORWARD, s, m)]))
            elif kind == "grad" and s < sched.stages - 1:
                spans.append((m, when[(BACKWARD, s + 1, m)] + 1, when[(BACKWARD, s, m)]))
            elif kind == "stash":
                spans.append((m, when[(FORWARD, s, m)], when[(BACKWARD, s, m)]))
        out.append(spans)
    return out


@pytest.mark.parametrize("stages,microbatches", SIZES)
def test_1f1b_buffers_one_inbox_slot_and_stages_stash_slots(stages, microbatches):
    # The chapter's 1F1B program keeps one waiting message per direction, and stashes microbatch m's
    # input in slot m mod (most in flight): no two buffers that share a slot may be alive at once.
    sched = one_f_one_b_schedule(stages, microbatches)
    slots = int(in_flight(sched).max())
    assert slots == min(stages, microbatches)
    # Every buffer is looked at below: a message per microbatch between each pair of stages, a stash per
    # microbatch on each stage.
    assert {kind: sum(map(len, waiting_intervals(sched, kind))) for kind in ("act", "grad", "stash")} == \
        {"act": (stages - 1) * microbatches, "grad": (stages - 1) * microbatches, "stash": stages * microbatches}
    for kind, size in (("act", 1), ("grad", 1), ("stash", slots)):
        for spans in waiting_intervals(sched, kind):
            for m1, a1, b1 in spans:
                assert a1 <= b1                        # a message is used after it has arrived
                for m2, a2, b2 in spans:
                    if m1 < m2 and m1 % size == m2 % size:
                        assert b1 < a2 or b2 < a1, (kind, m1, m2)


def test_1f1b_messages_wait():
    # Stage 1 receives microbatch 3's activation at step 4 and runs its forward pass at step 7.
    (span,) = [s for s in waiting_intervals(one_f_one_b_schedule(4, 8), "act")[1] if s[0] == 3]
    assert span == (3, 4, 7)


@pytest.mark.parametrize("stages,microbatches,virtual", [(4, 8, 2), (4, 4, 2), (2, 8, 4), (8, 16, 2), (3, 9, 3)])
def test_circular_bubble_is_smaller(stages, microbatches, virtual):
    sched = circular_schedule(stages, microbatches, virtual)
    every_pass_once(sched)
    dependencies_hold(sched)
    assert sched.bubble == pytest.approx(bubble_model(stages, microbatches, virtual))
    assert sched.bubble < gpipe_schedule(stages, microbatches).bubble


def test_circular_keeps_every_microbatch_in_flight():
    # GPipe's order: every forward pass (V chunks of each microbatch) before any backward pass.
    assert in_flight(circular_schedule(4, 8, 2)).tolist() == [8.0] * 4


def test_gpipe_forward_table():
    mb, chunk = gpipe_schedule(3, 2).forward_table()
    assert mb.tolist() == [[0, 1, -1, -1], [-1, 0, 1, -1], [-1, -1, 0, 1]]
    assert chunk.tolist() == [[0, 0, -1, -1], [-1, 0, 0, -1], [-1, -1, 0, 0]]


def test_circular_forward_table():
    mb, chunk = circular_schedule(2, 2, 2).forward_table()
    assert mb.tolist() == [[0, 1, 0, 1, -1], [-1, 0, 1, 0, 1]]
    assert chunk.tolist() == [[0, 0, 1, 1, -1], [-1, 0, 0, 1, 1]]


def test_backward_mirrors_forward():
    sched = circular_schedule(4, 8, 2)
    half = sched.steps // 2
    assert np.array_equal(sched.microbatch[:, half:], sched.microbatch[:, :half][:, ::-1])
    assert set(np.unique(sched.phase[:, half:])) <= {IDLE, BACKWARD}


@pytest.mark.parametrize("call", [lambda: gpipe_schedule(0, 4), lambda: gpipe_schedule(4, 2.5),
                                  lambda: one_f_one_b_schedule(2, -1), lambda: circular_schedule(4, 6, 2),
                                  lambda: circular_schedule(4, 8, 0), lambda: bubble_model(True, 4),
                                  lambda: zero_bubble_schedule(4, 3), lambda: zero_bubble_schedule(0, 3),
                                  lambda: one_f_one_b_schedule(2, 2, split="yes")])
def test_bad_sizes_are_refused(call):
    with pytest.raises(ValueError):
        call()


def test_not_a_schedule_is_refused():
    for f in (bubble_fraction, in_flight, draw_schedule):
        with pytest.raises(ValueError, match="schedule"):
            f("GPipe")


def test_draw_schedule_cells():
    sched = circular_schedule(2, 2, 2)
    fig = draw_schedule(sched)
    ax = fig.axes[0]
    assert sum(len(c.get_paths()) for c in ax.collections) == sched.stages * sched.steps
    assert ax.get_xlim() == (0, sched.steps / 2)
    labels = {t.get_text() for t in ax.texts}
    assert {"0a", "1a", "0b", "1b"} <= labels
    assert fig._repr_png_()[:4] == b"\x89PNG"


def test_schedule_ticks_are_whole_passes_and_hatched_labels_sit_on_their_fill():
    for sched in (circular_schedule(2, 4, 2), gpipe_schedule(2, 2), zero_bubble_schedule(4, 8)):
        fig = draw_schedule(sched, labels=True)
        ax = fig.axes[0]
        fig.canvas.draw()
        ticks = [t for t in ax.get_xticks() if 0 <= t <= ax.get_xlim()[1]]
        assert ticks and all(float(t).is_integer() for t in ticks), ticks
        # Forward labels stand on their solid fill; the others on a box of their slot's pale fill.
        for text in ax.texts:
            box = text.get_bbox_patch()
            if text.get_color() == "white":
                assert box is None
            else:
                assert box is not None and box.get_facecolor()[:3] != (1.0, 1.0, 1.0)
        assert any(t.get_bbox_patch() is not None for t in ax.texts)


def _smallest_displayed_pt(fig):
    """By hand: the smallest font size times the displayed width over the figure's width (96 CSS px
    per inch, at most the 688 px column; the PNG has 2 pixels per CSS px)."""
    import io

    from PIL import Image

    from shardlab.pictures.display import page_image

    # Uncropped, the page shows the whole figure's width (a cropped figure is shown no smaller).
    shown_in = Image.open(io.BytesIO(page_image(fig, tight=False).data)).size[0] / 2 / 96
    texts = [t for ax in fig.axes for t in ax.texts + [ax.title, ax.xaxis.label]] + \
        [t for ax in fig.axes for t in ax.get_xticklabels() + ax.get_yticklabels()]
    sizes = [t.get_fontsize() for t in texts if t.get_text().strip()]
    return min(sizes) * shown_in / fig.get_size_inches()[0]


@pytest.mark.parametrize("sched", [gpipe_schedule(4, 8), circular_schedule(4, 8, 2), one_f_one_b_schedule(8, 32),
                                   zero_bubble_schedule(4, 8), one_f_one_b_schedule(4, 8, split=True)],
                         ids=["gpipe", "circular", "long", "zb-h1", "1f1b-split"])
def test_schedule_text_is_at_least_9_pt_as_displayed(sched):
    fig = draw_schedule(sched)
    assert fig.get_size_inches()[0] <= 7.0
    assert _smallest_displayed_pt(fig) >= 9.0 - 1e-6
    # On a figure wider than the page's column, text is drawn larger by as much as the page shrinks it.
    from matplotlib.figure import Figure

    wide = Figure(figsize=(14, 3))
    draw_schedule(sched, ax=wide.add_subplot())
    assert _smallest_displayed_pt(wide) >= 9.0 - 1e-6


def test_schedule_labels_only_where_they_fit():
    labelled = draw_schedule(circular_schedule(4, 8, 2)).axes[0].texts   # 38 half slots: stacked labels
    assert {t.get_text() for t in labelled} >= {"3\nb", "7\na"}
    assert len(draw_schedule(one_f_one_b_schedule(8, 32)).axes[0].texts) == 0   # 78 slots: too narrow
    assert len(draw_schedule(one_f_one_b_schedule(8, 32), labels=True).axes[0].texts) == 2 * 8 * 32
    assert len(draw_schedule(gpipe_schedule(2, 2), labels=False).axes[0].texts) == 0
    with pytest.raises(ValueError, match="labels"):
        draw_schedule(gpipe_schedule(2, 2), labels="yes")


@pytest.mark.parametrize("make", [lambda: gpipe_schedule(8, 16), lambda: one_f_one_b_schedule(4, 8),
                                  lambda: circular_schedule(2, 4, 2)])
def test_idle_slots_stay_grey_in_explorer_frames(make):
    """An explorer quantises its frames to a small palette; the idle slots' light grey (#e6e6e6) must
    survive it, not turn white, in the page's frames and the live view alike."""
    import io

    from PIL import Image

    from shardlab.pictures.explore import explorer

    sched = make()

    def draw(fig, n):
        draw_schedule(sched, ax=fig.add_axes((0.12, 0.25, 0.86, 0.62)))

    ex = explorer({"n": [0]}, draw, figsize=(7, 4.4))
    idle = int((sched.phase == IDLE).sum())
    assert idle > 0
    for data in (ex.frames()[1][0], ex.render()):
        rgb = np.asarray(Image.open(io.BytesIO(data)).convert("RGB")).astype(int)
        grey = (np.abs(rgb - 230) <= 4).all(axis=2)            # the idle fill, within a few levels
        white = (rgb == 255).all(axis=2)
        # Idle cells cover a sizeable area of the frame (each slot is at least a few hundred pixels).
        assert grey.sum() > 200 * idle, (grey.sum(), idle)
        assert white.sum() > grey.sum()                       # the background stays white


# The split backward pass: F, B (input gradient) and W (weight gradient), one step each.

SPLIT_SIZES = [(1, 1), (1, 3), (2, 2), (2, 5), (3, 3), (3, 7), (4, 4), (4, 8), (8, 16), (5, 12)]


def replay(sched: Schedule, grad_after: int) -> np.ndarray:
    """A brute-force clock: keep only each stage's order of passes, then tick by tick start every stage's next
    pass whose input was made at an earlier tick. Returns the phase table this gives."""
    S = sched.stages
    orders = [[(p, m) for p, m in zip(sched.phase[s], sched.microbatch[s]) if p != IDLE] for s in range(S)]
    finished = {}                      # (phase, stage, microbatch) -> tick it ran at
    rows = [[] for _ in range(S)]
    tick = 0
    while any(orders):
        ran = []
        for s in range(S):
            if not orders[s]:
                continue
            p, m = orders[s][0]
            need = {FORWARD: (FORWARD, s - 1, m) if s else None,
                    BACKWARD: (grad_after, s + 1, m) if s < S - 1 else (FORWARD, s, m),
                    WEIGHT: (BACKWARD, s, m)}[p]
            if need is None or finished.get(need, tick) < tick:
                ran.append((p, s, m))
                orders[s].pop(0)
                rows[s].append(p)
            else:
                rows[s].append(IDLE)
        for p, s, m in ran:
            finished[(p, s, m)] = tick
        tick += 1
        assert tick < 10 * sched.phase.size
    width = max(map(len, rows))
    return np.array([r + [IDLE] * (width - len(r)) for r in rows])


def split_passes_hold(sched: Schedule, grad_after: int):
    """Each stage runs F, B and W of each microbatch once; each pass after what it needs."""
    when = {}
    for s in range(sched.stages):
        for t in range(sched.steps):
            if sched.phase[s, t] != IDLE:
                key = (sched.phase[s, t], s, sched.microbatch[s, t])
                assert key not in when
                when[key] = t
    assert len(when) == 3 * sched.stages * sched.microbatches
    S = sched.stages
    for (p, s, m), t in when.items():
        if p == FORWARD and s > 0:
            assert when[(FORWARD, s - 1, m)] < t
        if p == BACKWARD:
            assert when[(grad_after, s + 1, m) if s < S - 1 else (FORWARD, s, m)] < t
        if p == WEIGHT:
            assert when[(BACKWARD, s, m)] < t


@pytest.mark.parametrize("stages,microbatches", SPLIT_SIZES)
def test_zero_bubble_idles_a_third_of_1f1b(stages, microbatches):
    zb = zero_bubble_schedule(stages, microbatches)
    ofob = one_f_one_b_schedule(stages, microbatches, split=True)
    split_passes_hold(zb, BACKWARD)                 # B is sent on as soon as it is done
    split_passes_hold(ofob, WEIGHT)                 # 1F1B's backward is sent after B and W
    # Each pass starts as soon as its stage's order and its input allow (a separate tick-by-tick clock):
    assert np.array_equal(replay(zb, BACKWARD), zb.phase)
    assert np.array_equal(replay(ofob, WEIGHT), ofob.phase)
    S, M = stages, microbatches
    # Hand count: 3M passes per stage; 1F1B idles 3(S - 1) steps per stage (a backward pass is B + W),
    # ZB-H1 S - 1, the least possible: the last stage's first input comes after S - 1 forward passes.
    assert ofob.steps == 3 * (M + S - 1) and zb.steps == 3 * M + S - 1
    assert ((ofob.phase == IDLE).sum(axis=1) == 3 * (S - 1)).all()
    assert ((zb.phase == IDLE).sum(axis=1) == S - 1).all()
    assert np.flatnonzero(zb.phase[-1])[0] == S - 1
    assert ofob.bubble == pytest.approx(bubble_model(S, M)) == pytest.approx(gpipe_schedule(S, M).bubble)
    assert zb.bubble == pytest.approx((S - 1) / (3 * M + S - 1))
    # In flight from F to W: ZB-H1 holds no more than 1F1B's first stage does.
    assert in_flight(ofob).tolist() == [S - s for s in range(S)]
    assert in_flight(zb).max() == S
    # Unsplit 1F1B is the split one with each B + W drawn as one slot: same order of passes.
    plain = one_f_one_b_schedule(S, M)
    merged = [[(p, m) for p, m in zip(ofob.phase[s], ofob.microbatch[s]) if p in (FORWARD, BACKWARD)]
              for s in range(S)]
    assert merged == [[(p, m) for p, m in zip(plain.phase[s], plain.microbatch[s]) if p != IDLE]
                      for s in range(S)]


def test_zero_bubble_by_hand():
    # 2 stages, 2 microbatches, worked by hand: stage 1 holds one W back (B0 before W0), so stage 0's
    # B1 comes a step sooner than 1F1B's; 7 steps = 3 * 2 + 1.
    zb = zero_bubble_schedule(2, 2)
    F, B, W, _ = FORWARD, BACKWARD, WEIGHT, IDLE
    assert zb.phase.tolist() == [[F, F, _, B, W, B, W], [_, F, B, F, B, W, W]]
    assert zb.microbatch.tolist() == [[0, 1, -1, 0, 0, 1, 1], [-1, 0, 0, 1, 1, 0, 1]]
    # 4 stages, 8 microbatches: idle slots 24 of 88 (GPipe), 36 of 132 (1F1B, split), 12 of 108 (ZB-H1).
    for sched, idle, slots in ((gpipe_schedule(4, 8), 24, 88), (one_f_one_b_schedule(4, 8, split=True), 36, 132),
                               (zero_bubble_schedule(4, 8), 12, 108)):
        assert ((sched.phase == IDLE).sum(), sched.phase.size) == (idle, slots)


def test_draw_split_schedule():
    sched = zero_bubble_schedule(4, 8)
    fig = draw_schedule(sched)
    ax = fig.axes[0]
    assert sum(len(c.get_paths()) for c in ax.collections) == sched.stages * sched.steps
    hatches = sorted(c.get_hatch() or "" for c in ax.collections)
    assert hatches == ["", "", "..", "///"]
    assert "weight gradient W" in ax.get_title().replace("\n", " ")
    assert ax.get_xlabel() == "time (one pass, F, B or W, = 1)"
    assert len(ax.texts) == 3 * 4 * 8
