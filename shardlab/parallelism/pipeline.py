"""Pipeline schedules as data: which microbatch each stage works on at each time step, and their pictures.

A :class:`Schedule` is a stage x time-step table. Each slot holds a forward or a backward pass of one
microbatch through one of the stage's chunks of layers, or nothing (an idle slot, the *bubble*). Every
slot lasts the same time: one chunk's forward or backward pass, taken to cost the same (the usual model
behind the bubble formulas). A stage holding ``virtual`` chunks does a microbatch's share of its work in
``virtual`` slots, so a slot of a schedule with ``virtual=2`` lasts half a slot of one with ``virtual=1``;
:func:`draw_schedule` draws slots that wide.

* :func:`gpipe_schedule`: every forward pass, then every backward pass in reverse (what ``jax.grad``
  through a forward loop runs).
* :func:`one_f_one_b_schedule`: after a warm-up, each stage alternates one forward and one backward pass,
  so at most ``stages`` microbatches are in flight on a stage; the same bubble as GPipe.
* :func:`circular_schedule`: each stage holds ``virtual`` chunks of layers that are not adjacent in the
  model (stage ``s`` holds layers ``s, s + S, s + 2S, ...``) and a microbatch goes round the ring of
  stages ``virtual`` times; its bubble is smaller, ``(S - 1) / (virtual * M + S - 1)``.
* :func:`zero_bubble_schedule`: ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism"): the backward pass
  split into the input gradient ``B`` (which the previous stage waits for) and the weight gradient ``W``
  (which nobody waits for), each as long as a forward pass ``F``; 1F1B's order with ``W`` passes held back
  to fill the cool-down. Its bubble is ``(S - 1) / (3M + S - 1)``, a third of 1F1B's idle time, with the
  same most microbatches in flight as 1F1B's first stage. ``one_f_one_b_schedule(..., split=True)`` is
  1F1B drawn in the same units (each backward pass a ``B`` slot then a ``W`` slot).

Nothing here needs JAX: these are tables, counted and drawn.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardlab.arguments import positive_int as _positive
from shardlab.pictures.display import text_scale
from shardlab.pictures.draw import PALETTE, ShardFigure
from shardlab.pictures.style import integer_ticks

__all__ = ["Schedule", "gpipe_schedule", "one_f_one_b_schedule", "circular_schedule", "zero_bubble_schedule",
           "bubble_fraction", "bubble_model", "in_flight", "draw_schedule"]

IDLE, FORWARD, BACKWARD, WEIGHT = 0, 1, 2, 3


@dataclass(frozen=True, eq=False)
class Schedule:
    """A pipeline schedule: three ``(stages, steps)`` integer tables.

    ``phase[s, t]`` is 0 (idle), 1 (forward) or 2 (backward); ``microbatch[s, t]`` and ``chunk[s, t]``
    say which microbatch and which of the stage's chunks of layers the slot works on (-1 when idle). In a
    schedule whose backward pass is split (:func:`zero_bubble_schedule`, ``one_f_one_b_schedule(...,
    split=True)``), 2 is the input gradient ``B`` and 3 (``WEIGHT``) the weight gradient ``W``.
    """

    name: str
    stages: int
    microbatches: int
    virtual: int
    phase: np.ndarray
    microbatch: np.ndarray
    chunk: np.ndarray

    @property
    def steps(self) -> int:
        """Time steps (slots per stage) from the first slot to the last."""
        return self.phase.shape[1]

    @property
    def bubble(self) -> float:
        """This schedule's bubble fraction, as :func:`bubble_fraction` computes it."""
        return bubble_fraction(self)

    def forward_table(self) -> tuple[np.ndarray, np.ndarray]:
        """``(microbatch, chunk)`` of the forward slots only, -1 elsewhere, cut to the steps from the first
        forward slot to the last: the table a forward loop over time steps runs."""
        steps = np.flatnonzero((self.phase == FORWARD).any(axis=0))
        cols = slice(steps[0], steps[-1] + 1)
        keep = self.phase[:, cols] == FORWARD
        return np.where(keep, self.microbatch[:, cols], -1), np.where(keep, self.chunk[:, cols], -1)

    def __repr__(self) -> str:
        return (f"Schedule({self.name!r}, stages={self.stages}, microbatches={self.microbatches}, "
                f"virtual={self.virtual}, steps={self.steps}, bubble={self.bubble:.3f})")


def _mirrored(name, stages, microbatches, virtual, mb_f, chunk_f) -> Schedule:
    """The forward table followed by its mirror image in time: the backward pass that reverse-mode
    differentiation of the forward loop runs (the last step's work is differentiated first)."""
    busy = mb_f >= 0
    phase = np.concatenate([np.where(busy, FORWARD, IDLE), np.where(busy, BACKWARD, IDLE)[:, ::-1]], axis=1)
    return Schedule(name, stages, microbatches, virtual, phase,
                    np.concatenate([mb_f, mb_f[:, ::-1]], axis=1), np.concatenate([chunk_f, chunk_f[:, ::-1]], axis=1))


def circular_schedule(stages: int, microbatches: int, virtual: int = 2) -> Schedule:
    """The circular (interleaved) schedule: each stage holds ``virtual`` chunks of layers.

    At step ``t`` stage ``s`` does the ``k = t - s``-th piece of work of the ring: microbatches go in
    groups of ``stages``, and a group goes round the ring ``virtual`` times (chunk ``r`` on its ``r``-th
    round) before the next group enters. ``microbatches`` must be a multiple of ``stages`` when
    ``virtual > 1`` (so that a microbatch coming round finds stage 0 free). The backward pass is the
    forward table mirrored in time. ``virtual=1`` is GPipe.
    """
    stages, microbatches, virtual = (_positive("stages", stages), _positive("microbatches", microbatches),
                                     _positive("virtual", virtual))
    if virtual > 1 and microbatches % stages:
        raise ValueError(f"microbatches must be a multiple of stages ({stages}) when virtual > 1, "
                         f"got {microbatches}")
    group = stages if virtual > 1 else microbatches
    work = virtual * microbatches
    steps = work + stages - 1
    mb = np.full((stages, steps), -1)
    chunk = np.full((stages, steps), -1)
    for s in range(stages):
        for k in range(work):
            g, rest = divmod(k, virtual * group)
            r, i = divmod(rest, group)
            mb[s, s + k], chunk[s, s + k] = g * group + i, r
    name = "GPipe" if virtual == 1 else f"circular, {virtual} chunks per stage"
    return _mirrored(name, stages, microbatches, virtual, mb, chunk)


def gpipe_schedule(stages: int, microbatches: int) -> Schedule:
    """GPipe: stage ``s`` runs microbatch ``m``'s forward pass at step ``s + m``; then every backward
    pass, in the reverse order."""
    return circular_schedule(stages, microbatches, virtual=1)


def _in_order(name, stages, microbatches, orders, grad_after) -> Schedule:
    """Run each stage's list of passes in its order, each pass as soon as its stage is free and its input is
    ready, every pass one step: a forward pass needs the previous stage's forward pass of that microbatch;
    a backward pass ``B`` the next stage's pass ``grad_after`` (``BACKWARD`` or ``WEIGHT``: the pass after
    which the next stage sends the input's gradient), or on the last stage its own forward pass; a weight
    gradient ``W`` the stage's own ``B``. Something made at the end of step ``t`` is usable at ``t + 1``."""
    done = {}                      # (phase, stage, microbatch) -> the step it ends at
    free, nxt = [0] * stages, [0] * stages
    while any(nxt[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            if nxt[s] == len(orders[s]):
                continue
            phase, m = orders[s][nxt[s]]
            if phase == FORWARD:
                needs = (FORWARD, s - 1, m) if s > 0 else None
            elif phase == BACKWARD:
                needs = (grad_after, s + 1, m) if s < stages - 1 else (FORWARD, s, m)
            else:
                needs = (BACKWARD, s, m)
            if needs is not None and needs not in done:
                continue
            start = max(free[s], done[needs] if needs is not None else 0)
            done[(phase, s, m)] = free[s] = start + 1
            nxt[s] += 1
            progressed = True
        assert progressed, f"{name}: a schedule that cannot proceed"
    steps = max(done.values())
    phase = np.zeros((stages, steps), int)
    mb = np.full((stages, steps), -1)
    for (p, s, m), end in done.items():
        phase[s, end - 1], mb[s, end - 1] = p, m
    return Schedule(name, stages, microbatches, 1, phase, mb, np.where(mb >= 0, 0, -1))


def one_f_one_b_schedule(stages: int, microbatches: int, *, split: bool = False) -> Schedule:
    """1F1B (one forward, one backward): stage ``s`` runs ``min(stages - 1 - s, microbatches)`` forward
    passes, then alternates one forward and one backward pass, then finishes the backward passes.

    Each pass starts as soon as its stage is free and its input is ready (the previous stage's forward
    pass of that microbatch, or the next stage's backward pass), each taking one step. ``split=True``
    draws each backward pass as two steps, the input gradient ``B`` then the weight gradient ``W``, sent
    to the previous stage after both (one pass that computes both, as a ``jax.vjp`` does): the units of
    :func:`zero_bubble_schedule`, where ``F``, ``B`` and ``W`` each take one step.
    """
    stages, microbatches = _positive("stages", stages), _positive("microbatches", microbatches)
    if split not in (True, False):
        raise ValueError(f"split must be True or False, got {split!r}")
    backward = [(BACKWARD,), (BACKWARD, WEIGHT)][split]
    orders = []
    for s in range(stages):
        warm = min(stages - 1 - s, microbatches)
        order = [(FORWARD, m) for m in range(warm)]
        for i in range(microbatches - warm):
            order += [(FORWARD, warm + i)] + [(p, i) for p in backward]
        order += [(p, m) for m in range(microbatches - warm, microbatches) for p in backward]
        orders.append(order)
    return _in_order("1F1B", stages, microbatches, orders, WEIGHT if split else BACKWARD)


def zero_bubble_schedule(stages: int, microbatches: int) -> Schedule:
    """ZB-H1 (Qi et al., "Zero Bubble Pipeline Parallelism", 2024): each backward pass split into the input
    gradient ``B`` (phase ``BACKWARD``), sent to the previous stage as soon as it is done, and the weight
    gradient ``W`` (phase ``WEIGHT``), which no other pass waits for; ``F``, ``B`` and ``W`` each take one
    step.

    Stage ``s`` runs 1F1B's order (``min(stages - 1 - s, microbatches)`` forward passes, then one forward
    and one ``B`` in turn) and lets at most ``s`` ``W`` passes wait behind their ``B``: the later stages send
    their gradients back sooner, and the held-back ``W`` passes fill the cool-down. With
    ``microbatches >= stages`` the step lasts ``3M + S - 1`` steps, bubble ``(S - 1) / (3M + S - 1)``: every
    stage idles ``S - 1`` steps, against ``3(S - 1)`` for 1F1B in the same units, and ``S - 1`` is the least
    any schedule of one step can idle (the last stage waits that long for its first input). Each stage keeps
    at most ``stages`` microbatches in flight, from ``F`` to ``W``: 1F1B's first stage's number.
    """
    stages, microbatches = _positive("stages", stages), _positive("microbatches", microbatches)
    if microbatches < stages:
        raise ValueError(f"zero_bubble_schedule: microbatches must be at least stages ({stages}), got "
                         f"{microbatches}")
    orders = []
    for s in range(stages):
        warm = stages - 1 - s
        order = [(FORWARD, m) for m in range(warm)]
        backward = [(FORWARD, warm + i) for i in range(microbatches - warm)] + [None] * warm
        w_next = 0
        for i, f in enumerate(backward):
            order += ([f] if f else []) + [(BACKWARD, i)]
            if i + 1 - w_next > s:              # more than s W passes waiting: run the oldest
                order.append((WEIGHT, w_next))
                w_next += 1
        order += [(WEIGHT, m) for m in range(w_next, microbatches)]
        orders.append(order)
    return _in_order("ZB-H1", stages, microbatches, orders, BACKWARD)


def bubble_fraction(schedule: Schedule) -> float:
    """Idle slots over all slots (``stages * steps``): the share of the run the stages wait."""
    if not isinstance(schedule, Schedule):
        raise ValueError(f"schedule must be a shardlab Schedule, got {type(schedule).__name__}")
    return float((schedule.phase == IDLE).sum() / schedule.phase.size)


def bubble_model(stages: int, microbatches: int, virtual: int = 1) -> float:
    """The usual formula for the bubble fraction, ``(S - 1) / (virtual * M + S - 1)``: idle time over the
    whole step, each pass of one chunk taking ``1 / virtual`` of a stage's pass. ``virtual=1``: GPipe and
    1F1B; ``virtual > 1``: the circular schedule here and Megatron-LM's interleaved 1F1B (which writes it
    as ``(S - 1) / (virtual * M)``, idle time over busy time)."""
    stages, microbatches, virtual = (_positive("stages", stages), _positive("microbatches", microbatches),
                                     _positive("virtual", virtual))
    return (stages - 1) / (virtual * microbatches + stages - 1)


def in_flight(schedule: Schedule) -> np.ndarray:
    """Per stage, the most microbatches whose forward pass has run there and whose backward pass has
    not yet (counted over chunks, divided by ``virtual``): the activations the stage must keep. With a
    split backward pass a microbatch is in flight until its weight gradient ``W`` (which needs the
    stage's input too)."""
    if not isinstance(schedule, Schedule):
        raise ValueError(f"schedule must be a shardlab Schedule, got {type(schedule).__name__}")
    last = WEIGHT if (schedule.phase == WEIGHT).any() else BACKWARD
    delta = (schedule.phase == FORWARD).astype(int) - (schedule.phase == last).astype(int)
    return np.cumsum(delta, axis=1).max(axis=1) / schedule.virtual


# Text sizes in points as displayed (a figure wider than the page's column draws them larger, by
# display.text_scale, so that they are these sizes where the page shows them).
_LABEL_PT, _TICK_PT, _TITLE_PT = 9.0, 9.0, 9.5
_CHAR_W = 0.62         # a character's average width over its font size (DejaVu Sans digits and letters)
_MAX_W_IN = 7.0        # the widest figure drawn by default: within the page's column, so text is not shrunk


def _wrap(text: str, width_in: float, pt: float) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(text, max(12, int(width_in * 72 / (_CHAR_W * pt)))))


def _pale(rgb) -> tuple:
    """The pale tint of a microbatch's colour that backward and weight-gradient slots are filled with."""
    return tuple(float(v) for v in 0.35 * np.array(rgb) + 0.65)


def draw_schedule(schedule: Schedule, ax=None, *, title: str | None = None, labels: bool | None = None):
    """Draw a schedule: stages down, time across, one cell per slot.

    A forward slot is filled with the microbatch's colour (``shardlab.PALETTE``), a backward slot
    filled with a pale tint of it and hatched, a weight-gradient slot ``W`` (a split backward pass) a
    pale tint, dotted, an idle slot shaded grey. Cells are labelled with the
    microbatch (and, with several chunks, the chunk as a letter: ``3b`` is microbatch 3 in the stage's
    second chunk, written on two lines where the slot is narrow); a label on a hatched or dotted slot sits
    on a patch of the slot's pale fill, so that no hatching crosses it. Time is in units of one stage's
    whole pass, ticked at whole passes only: a slot of a ``virtual=2`` schedule is half as wide. Text is at least 9 pt as a page displays
    the figure (``display.text_scale``); ``labels=None`` labels the cells only if the labels fit them at
    that size, ``True`` always, ``False`` never. The title is wrapped to the figure's width. Draws on
    ``ax`` if given, else returns a new :class:`shardlab.ShardFigure` at most 7 inches wide.
    """
    from matplotlib.patches import Rectangle

    if not isinstance(schedule, Schedule):
        raise ValueError(f"schedule must be a shardlab Schedule, got {type(schedule).__name__}")
    if labels not in (None, True, False):
        raise ValueError(f"draw_schedule: labels must be None, True or False, got {labels!r}")
    S, T, V = schedule.stages, schedule.steps, schedule.virtual
    split = bool((schedule.phase == WEIGHT).any())
    if title is None:
        kinds = ("filled: forward F, hatched: input gradient B, dotted: weight gradient W" if split else
                 "filled: forward, pale and hatched: backward")
        title = (f"{schedule.name}: {S} stages, {schedule.microbatches} microbatches, "
                 f"bubble {bubble_fraction(schedule):.1%} ({kinds}, grey: idle)")
    fig = None
    row_in = 0.42
    if ax is None:
        W = min(_MAX_W_IN, 2 + 0.3 * T / V)
        title_text = _wrap(title, W - 0.2, _TITLE_PT)
        left_in, bottom_in = 0.8, 0.55
        top_in = 0.12 + (title_text.count("\n") + 1) * _TITLE_PT * 1.25 / 72
        H = round(top_in + row_in * S + bottom_in, 2)
        fig = ShardFigure(figsize=(W, H))
        ax = fig.add_axes((left_in / W, bottom_in / H, 1 - (left_in + 0.12) / W, row_in * S / H))
    from matplotlib.collections import PatchCollection
    from matplotlib.colors import to_rgb

    k = text_scale(ax.figure)
    fw, fh = ax.figure.get_size_inches()
    pos = ax.get_position()
    slot_pt = pos.width * fw * 72 / k / T            # a slot's width, in points as displayed
    row_pt = pos.height * fh * 72 / k / S             # a stage's height, likewise
    width = 1 / V

    def fits(text):
        return len(text) * _CHAR_W * _LABEL_PT + 2 <= slot_pt

    longest = f"{schedule.microbatches - 1}" + ("h" if V > 1 else "")
    stacked = V > 1 and not fits(longest) and row_pt >= 2.4 * _LABEL_PT
    if labels is None:
        labels = fits(longest) or (stacked and fits(longest[:-1]))
    boxes = {IDLE: [], FORWARD: [], BACKWARD: [], WEIGHT: []}
    colours = {IDLE: [], FORWARD: [], BACKWARD: [], WEIGHT: []}
    for s in range(S):
        for t in range(T):
            p, m, c = schedule.phase[s, t], schedule.microbatch[s, t], schedule.chunk[s, t]
            boxes[p].append(Rectangle((t * width, s), width, 1))
            colours[p].append("#e6e6e6" if p == IDLE else to_rgb(PALETTE[m % 10]))
            if labels and p != IDLE:
                text = f"{m}" + (("\n" if stacked else "") + "abcdefgh"[c] if V > 1 else "")
                # On a hatched or dotted slot the label sits on a patch of the slot's pale fill, so that
                # no line of the hatching crosses a digit.
                box = None if p == FORWARD else dict(boxstyle="square,pad=0.12", linewidth=0,
                                                     facecolor=_pale(colours[p][-1]))
                ax.text((t + 0.5) * width, s + 0.5, text, ha="center", va="center", fontsize=_LABEL_PT * k,
                        linespacing=1.1, color="white" if p == FORWARD else "black", bbox=box)
    # One collection per kind of slot (fast to draw): idle grey, forward filled, backward a pale tint, hatched.
    ax.add_collection(PatchCollection(boxes[IDLE], facecolors=colours[IDLE], edgecolors="white", linewidths=0.5))
    ax.add_collection(PatchCollection(boxes[FORWARD], facecolors=colours[FORWARD], edgecolors="white",
                                      linewidths=0.5))
    for kind, hatch in ((BACKWARD, "///"), (WEIGHT, "..")):
        pale = [_pale(rgb) for rgb in colours[kind]]
        ax.add_collection(PatchCollection(boxes[kind], facecolors=pale, edgecolors=colours[kind],
                                          linewidths=0.5, hatch=hatch))
    ax.set_xlim(0, T * width)
    integer_ticks(ax, "x")                            # time counts whole passes of a stage
    ax.set_ylim(S, 0)
    ax.set_yticks([s + 0.5 for s in range(S)], [f"stage {s}" for s in range(S)], fontsize=_TICK_PT * k)
    unit = "one pass, F, B or W," if split else "one stage's pass of one microbatch"
    ax.set_xlabel(f"time ({unit} = 1)", fontsize=_TICK_PT * k)
    ax.tick_params(axis="x", labelsize=_TICK_PT * k)
    for side in ("top", "right"):
        ax.spines[side].set_visible(False)
    ax.set_title(_wrap(title, fw / k - 0.2, _TITLE_PT), fontsize=_TITLE_PT * k, linespacing=1.25)
    return fig
