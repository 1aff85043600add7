"""Collectives step by step: every device's buffer before and after, computed by running them.

``run_collective(kind, devices)`` runs one of JAX's collectives (``psum``,
``all_gather``, ``psum_scatter``, ``ppermute``, ``all_to_all``) inside
``jax.shard_map`` over a 1-D mesh of the given devices, on small integer
values (device ``d`` starts with ``10*d + k`` at position ``k``), and returns
each device's buffer before and after.

``ring_steps(kind, devices)`` builds the ring algorithms of all-gather and
reduce-scatter out of ``jax.lax.ppermute`` and records every device's buffer
after each of the ring's ``n - 1`` steps; it checks that the last state equals
the built-in collective.

Where every value came from is computed the same way, by running: alongside
the values the program moves a bit mask per element (device at mesh position
``p`` starts with ``1 << p``); sums of distinct bits are their union, so after
any of these collectives the mask says which devices contributed.

``collective_view(kind, devices)`` turns either into an explorer: a slider over
the steps, each device's buffer drawn as a row of labelled cells coloured by
the device(s) the value came from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from shardlab.layout.ring_bytes import (
    bytes_all_gather,
    bytes_all_reduce,
    bytes_all_to_all,
    bytes_permute,
    bytes_reduce_scatter,
)
from shardlab.pictures.display import text_scale
from shardlab.pictures.draw import ShardFigure, device_color
from shardlab.pictures.explore import explorer
from shardlab.programs.collectives import collectives_in

__all__ = [
    "COLLECTIVE_KINDS",
    "RING_KINDS",
    "CollectiveRun",
    "RingSteps",
    "run_collective",
    "ring_steps",
    "collective_view",
    "draw_collective",
]

#: What ``run_collective`` runs (the names of the ``jax.lax`` functions).
COLLECTIVE_KINDS = ("psum", "all_gather", "psum_scatter", "ppermute", "all_to_all")
#: The ring algorithms ``ring_steps`` builds from ``ppermute``.
RING_KINDS = ("all_gather", "reduce_scatter")

_MAX_DEVICES = 31  # the origin masks are int32 bit sets
_ITEMSIZE = 4      # float32 values


# --------------------------------------------------------------------------
# Checking arguments
# --------------------------------------------------------------------------

def _check_kind(kind, valid, func: str) -> str:
    if not isinstance(kind, str) or kind not in valid:
        raise ValueError(f"{func}: kind must be one of {', '.join(map(repr, valid))}; got {kind!r}")
    return kind


def _check_devices(devices, func: str) -> list:
    import jax

    if isinstance(devices, (int, np.integer)) and not isinstance(devices, bool):
        available = jax.devices()
        if devices < 2 or devices > len(available):
            raise ValueError(f"{func}: devices must be at least 2 and at most the {len(available)} devices "
                             f"available; got {devices}")
        return list(available[:devices])
    if isinstance(devices, np.ndarray):
        devices = list(devices.flat)
    if isinstance(devices, (str, bytes)) or not hasattr(devices, "__iter__"):
        raise ValueError(f"{func}: devices must be a list of JAX devices (or a number of them), "
                         f"got {type(devices).__name__}")
    devices = list(devices)
    if not all(isinstance(d, jax.Device) for d in devices):
        bad = next(d for d in devices if not isinstance(d, jax.Device))
        raise ValueError(f"{func}: devices must be a list of JAX devices (jax.devices()[:n]); found {bad!r}")
    if len(devices) < 2:
        raise ValueError(f"{func}: devices must hold at least 2 devices for a collective; got {len(devices)}")
    if len(set(devices)) != len(devices):
        raise ValueError(f"{func}: devices must be distinct; got ids {[d.id for d in devices]}")
    if len(devices) > _MAX_DEVICES:
        raise ValueError(f"{func}: devices: at most {_MAX_DEVICES} devices for a step-by-step view; "
                         f"got {len(devices)}")
    return devices


def _check_int(value, name: str, func: str, *, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{func}: {name} must be an integer >= {minimum}; got {value!r}")
    return int(value)


def _start_values(n: int, size: int, values, func: str) -> np.ndarray:
    if values is None:
        base = 10 ** len(str(size - 1))  # 10*d + k while k has one digit, 100*d + k up to 100, ...
        return (base * np.arange(n)[:, None] + np.arange(size)[None, :]).astype(np.float32)
    arr = np.asarray(values, dtype=np.float32)
    if arr.shape != (n, size) or not np.all(np.isfinite(arr)):
        raise ValueError(f"{func}: values must be finite numbers shaped (devices, size) = ({n}, {size}); "
                         f"got shape {np.shape(values)}")
    return arr


def _masks(n: int, size: int) -> np.ndarray:
    return np.repeat((1 << np.arange(n, dtype=np.int32))[:, None], size, axis=1)


def _per_device(out, devices) -> np.ndarray:
    """Stack each device's own shard (leading axis of length 1 per device) in mesh order."""
    by_device = {s.device: np.asarray(s.data) for s in out.addressable_shards}
    return np.stack([by_device[d][0] for d in devices])


# --------------------------------------------------------------------------
# Running the built-in collectives
# --------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not runs
class CollectiveRun:
    """Every device's buffer before and after one collective, as it ran.

    ``before[p]`` and ``after[p]`` are the buffers of the device at mesh
    position ``p`` (``device_ids[p]``); ``before_origins``/``after_origins``
    hold, per element, a bit mask of the positions whose values it came from.
    ``bytes_per_device`` is modelled, not measured: what each device sends by
    the formulas of ``shardlab.layout.ring_bytes`` (the ring model, ``bytes_all_reduce``
    and friends; for ``all_to_all`` a direct exchange, ``bytes_all_to_all``).
    """

    kind: str
    device_ids: tuple
    axis_name: str
    params: dict
    before: np.ndarray
    after: np.ndarray
    before_origins: np.ndarray
    after_origins: np.ndarray
    bytes_per_device: int | float
    chunk: int
    _program: object = field(default=None, repr=False, compare=False)
    _mesh: object = field(default=None, repr=False, compare=False)
    _input: object = field(default=None, repr=False, compare=False)

    @property
    def n(self) -> int:
        """Number of devices."""
        return len(self.device_ids)

    @property
    def call(self) -> str:
        """The line of JAX that ran inside ``shard_map``, e.g. ``jax.lax.psum(x, 'i')``."""
        a, n = repr(self.axis_name), self.n
        if self.kind == "all_gather":
            return f"jax.lax.all_gather(x, {a}, tiled={self.params['tiled']})"
        if self.kind == "psum_scatter":
            if self.params["tiled"]:
                return f"jax.lax.psum_scatter(x, {a}, tiled=True)"
            return f"jax.lax.psum_scatter(x.reshape({n}, -1), {a})"
        if self.kind == "ppermute":
            return f"jax.lax.ppermute(x, {a}, [(j, (j + {self.params['shift']}) % {n}) for j in range({n})])"
        if self.kind == "all_to_all":
            return f"jax.lax.all_to_all(x, {a}, 0, 0, tiled=True)"
        return f"jax.lax.psum(x, {a})"

    def origins_of(self, which: str = "after") -> list:
        """Per device, per element: the tuple of device ids the value came from."""
        masks = {"before": self.before_origins, "after": self.after_origins}[which]
        return _decode(masks, self.device_ids)

    def report(self):
        """The collectives in the compiled program that ran (a :class:`CollectiveReport`)."""
        import jax

        with jax.set_mesh(self._mesh):  # whatever mesh the caller has set, this program has its own
            return collectives_in(self._program, self._input)


def _decode(masks: np.ndarray, ids) -> list:
    out = np.empty(masks.shape, dtype=object)
    for index, m in np.ndenumerate(masks):
        out[index] = tuple(ids[p] for p in range(len(ids)) if int(m) >> p & 1)
    return out.tolist()


def _collective_fn(kind: str, axis: str, n: int, params: dict):
    import jax

    lax = jax.lax
    if kind == "psum":
        return lambda v: lax.psum(v, axis)
    if kind == "all_gather":
        return lambda v: lax.all_gather(v, axis, tiled=params["tiled"])
    if kind == "psum_scatter":
        if params["tiled"]:
            return lambda v: lax.psum_scatter(v, axis, tiled=True)
        return lambda v: lax.psum_scatter(v.reshape(n, -1), axis)
    if kind == "ppermute":
        shift = params["shift"]
        return lambda v: lax.ppermute(v, axis, [(i, (i + shift) % n) for i in range(n)])
    return lambda v: lax.all_to_all(v, axis, 0, 0, tiled=True)


def run_collective(kind: str, devices, *, axis_name: str = "i", size: int | None = None, tiled: bool = False,
                   shift: int = 1, values=None) -> CollectiveRun:
    """Run one collective in ``jax.shard_map`` over a 1-D mesh of ``devices``; every buffer before and after.

    kind: ``"psum"``, ``"all_gather"``, ``"psum_scatter"``, ``"ppermute"`` (a ring shift by
    ``shift``: position ``p`` sends to ``(p + shift) % n``) or ``"all_to_all"`` (split and
    concatenate along the only axis).
    devices: a list of JAX devices (at least 2), or a number of them (``jax.devices()[:n]``).
    size: length of each device's buffer (default ``n`` for psum, psum_scatter and all_to_all,
    which cut it into ``n`` pieces; 2 for all_gather and ppermute).
    tiled: for all_gather and psum_scatter, as in ``jax.lax`` (untiled keeps one row per device).
    values: the starting buffers, shaped (n, size); default ``10*d + k`` on device position ``d``.
    """
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    func = "run_collective"
    kind = _check_kind(kind, COLLECTIVE_KINDS, func)
    devices = _check_devices(devices, func)
    if not isinstance(axis_name, str) or not axis_name:
        raise ValueError(f"{func}: axis_name must be a non-empty string; got {axis_name!r}")
    if not isinstance(tiled, bool):
        raise ValueError(f"{func}: tiled must be True or False; got {tiled!r}")
    shift = _check_int(shift, "shift", func, minimum=-10**9)
    n = len(devices)
    if size is None and values is not None:
        size = np.shape(values)[-1] if np.ndim(values) == 2 else 0
    if size is None:
        size = 2 if kind in ("all_gather", "ppermute") else n
    size = _check_int(size, "size", func)
    if kind in ("psum_scatter", "all_to_all") and size % n:
        raise ValueError(f"{func}: size must be a multiple of the {n} devices for {kind}; got {size}")
    params = {"size": size}
    if kind in ("all_gather", "psum_scatter"):
        params["tiled"] = tiled
    if kind == "ppermute":
        params["shift"] = shift % n

    start = _start_values(n, size, values, func)
    masks = _masks(n, size)
    mesh = jax.sharding.Mesh(np.array(devices), (axis_name,))
    sharding = NamedSharding(mesh, P(axis_name))
    collective = _collective_fn(kind, axis_name, n, params)

    def both(v, m):
        # The same collective on the values and on the origin masks, one program.
        return collective(v)[None], collective(m)[None]

    def values_only(v):
        return collective(v)[None]

    spec = P(axis_name)
    program = jax.jit(jax.shard_map(both, mesh=mesh, in_specs=(spec, spec), out_specs=(spec, spec)))
    x = jax.device_put(start.reshape(-1), sharding)
    with jax.set_mesh(mesh):  # our own mesh, whatever mesh the caller has set
        out_v, out_m = program(x, jax.device_put(masks.reshape(-1), sharding))
    after, after_m = _per_device(out_v, devices), _per_device(out_m, devices)

    nbytes = size * _ITEMSIZE
    sent = {
        "psum": lambda: bytes_all_reduce(nbytes, n),
        "all_gather": lambda: bytes_all_gather(n * nbytes, n),
        "psum_scatter": lambda: bytes_reduce_scatter(nbytes, n),
        "ppermute": lambda: bytes_permute(nbytes, params["shift"] != 0),
        "all_to_all": lambda: bytes_all_to_all(nbytes, n),
    }[kind]()
    chunk = size // n if kind in ("psum_scatter", "all_to_all") else size
    return CollectiveRun(
        kind=kind, device_ids=tuple(d.id for d in devices), axis_name=axis_name, params=params,
        before=start, after=after, before_origins=masks, after_origins=after_m,
        bytes_per_device=sent, chunk=chunk,
        _program=jax.jit(jax.shard_map(values_only, mesh=mesh, in_specs=spec, out_specs=spec)), _input=x, _mesh=mesh,
    )


# --------------------------------------------------------------------------
# Ring algorithms from ppermute
# --------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)  # holds arrays: compare fields, not runs
class RingSteps:
    """Every device's buffer after each step of a ring all-gather or reduce-scatter.

    ``states[0]`` is the start, ``states[s]`` the buffers after step ``s``
    (``s = 1 .. n-1``), shaped (steps + 1, devices, n, chunk): each device's
    buffer has one slot per piece. For the all-gather an empty slot is NaN.
    ``builtin`` is what ``jax.lax.all_gather`` / ``psum_scatter`` returned
    for the same input (checked equal to the ring's result).
    ``sends[s-1][p]`` is the piece (slot) that position ``p`` sends at step ``s``,
    always to position ``p + 1``. Each device sends ``bytes_per_step`` bytes per step.
    """

    kind: str
    device_ids: tuple
    axis_name: str
    states: np.ndarray
    origins: np.ndarray
    builtin: np.ndarray
    builtin_origins: np.ndarray
    sends: tuple
    receives: tuple
    bytes_per_step: int
    chunk: int

    @property
    def n(self) -> int:
        """Number of devices."""
        return len(self.device_ids)

    @property
    def steps(self) -> int:
        """The number of ring steps, ``n - 1``."""
        return len(self.states) - 1

    @property
    def final(self) -> np.ndarray:
        """Every device's buffer after the last step."""
        return self.states[-1]

    @property
    def result(self) -> np.ndarray:
        """What each device ends with, shaped like ``builtin``: the whole array (all-gather) or its
        own fully reduced piece (reduce-scatter)."""
        return _ring_result(self.kind, self.final)

    @property
    def total_bytes_per_device(self) -> int:
        """Bytes each device sends over all the steps (equal to the formula of the collective)."""
        return self.bytes_per_step * self.steps


def _ring_result(kind: str, final: np.ndarray) -> np.ndarray:
    # The all-gather keeps every slot; the reduce-scatter's result is slot p on position p.
    if kind == "all_gather":
        return final
    return np.stack([final[p, p] for p in range(len(final))])


def _ring_program(kind: str, axis: str, n: int):
    import jax
    import jax.numpy as jnp

    lax = jax.lax
    right = [(i, (i + 1) % n) for i in range(n)]

    def gather(x, empty):
        d = lax.axis_index(axis)
        buf = jnp.full((n,) + x.shape, empty, x.dtype).at[d].set(x)
        states, send = [buf], x
        for s in range(1, n):
            recv = lax.ppermute(send, axis, right)   # the piece my left neighbour had
            buf = buf.at[(d - s) % n].set(recv)
            states.append(buf)
            send = recv
        return jnp.stack(states), lax.all_gather(x, axis)

    def scatter(x, _):
        d = lax.axis_index(axis)
        buf, states = x, [x]
        for s in range(1, n):
            send = buf[(d - s) % n]                  # my partial sum of piece d - s
            recv = lax.ppermute(send, axis, right)
            k = (d - 1 - s) % n
            buf = buf.at[k].set(recv + x[k])         # add my own contribution and keep it
            states.append(buf)
        return jnp.stack(states), lax.psum_scatter(x, axis)

    body = gather if kind == "all_gather" else scatter

    def both(v, m):
        (sv, bv), (sm, bm) = body(v, np.float32(np.nan)), body(m, np.int32(0))
        return sv[None], bv[None], sm[None], bm[None]

    return both


def ring_steps(kind: str, devices, *, axis_name: str = "i", size: int | None = None, values=None) -> RingSteps:
    """Run a ring all-gather or reduce-scatter built from ``jax.lax.ppermute``, recording every step.

    kind: ``"all_gather"`` or ``"reduce_scatter"`` (``"psum_scatter"`` is accepted for the latter).
    devices: a list of JAX devices (at least 2), or a number of them.
    size: length of each device's starting buffer: its piece for the all-gather (default 2), its
    whole contribution for the reduce-scatter (default ``n``, a multiple of ``n``).
    values: the starting buffers, shaped (n, size); default ``10*d + k``.

    In step ``s`` every device sends one piece to its right neighbour: for the all-gather the piece
    it received in step ``s - 1`` (its own first); for the reduce-scatter its partial sum of piece
    ``d - s``, to which the neighbour adds its own contribution. After ``n - 1`` steps the buffers
    equal the built-in collective's result, which is run in the same program and checked.
    """
    import jax
    from jax.sharding import NamedSharding
    from jax.sharding import PartitionSpec as P

    func = "ring_steps"
    if kind == "psum_scatter":
        kind = "reduce_scatter"
    kind = _check_kind(kind, RING_KINDS, func)
    devices = _check_devices(devices, func)
    if not isinstance(axis_name, str) or not axis_name:
        raise ValueError(f"{func}: axis_name must be a non-empty string; got {axis_name!r}")
    n = len(devices)
    if size is None and values is not None:
        size = np.shape(values)[-1] if np.ndim(values) == 2 else 0
    if size is None:
        size = 2 if kind == "all_gather" else n
    size = _check_int(size, "size", func)
    if kind == "reduce_scatter" and size % n:
        raise ValueError(f"{func}: size must be a multiple of the {n} devices for reduce_scatter; got {size}")
    chunk = size if kind == "all_gather" else size // n

    start = _start_values(n, size, values, func)
    masks = _masks(n, size)
    local = (size,) if kind == "all_gather" else (n, chunk)
    mesh = jax.sharding.Mesh(np.array(devices), (axis_name,))
    sharding = NamedSharding(mesh, P(axis_name))
    spec = P(axis_name)
    program = jax.jit(jax.shard_map(_ring_program(kind, axis_name, n), mesh=mesh, in_specs=(spec, spec),
                                    out_specs=(spec,) * 4))
    put = lambda a: jax.device_put(a.reshape((n * local[0],) + local[1:]), sharding)  # noqa: E731
    with jax.set_mesh(mesh):  # our own mesh, whatever mesh the caller has set
        outs = program(put(start), put(masks))
    states, builtin, origins, builtin_m = (_per_device(o, devices) for o in outs)
    states, origins = np.swapaxes(states, 0, 1), np.swapaxes(origins, 0, 1)  # (step, device, ...)

    steps = RingSteps(
        kind=kind, device_ids=tuple(d.id for d in devices), axis_name=axis_name,
        states=states, origins=origins, builtin=builtin, builtin_origins=builtin_m,
        sends=tuple(tuple((p - s + (1 if kind == "all_gather" else 0)) % n for p in range(n))
                    for s in range(1, n)),
        receives=tuple(tuple((p - s - (0 if kind == "all_gather" else 1)) % n for p in range(n))
                       for s in range(1, n)),
        bytes_per_step=chunk * _ITEMSIZE, chunk=chunk,
    )
    if not (np.array_equal(steps.result, builtin) and np.array_equal(_ring_result(kind, origins[-1]), builtin_m)):
        raise RuntimeError(f"ring_steps: the ring {kind} ended with {steps.result.tolist()}, but the built-in "
                           f"collective gave {builtin.tolist()}")
    return steps


# --------------------------------------------------------------------------
# Pictures
# --------------------------------------------------------------------------

@dataclass
class _Frame:
    label: str
    values: np.ndarray    # (devices, cells)
    origins: np.ndarray   # (devices, cells) bit masks
    chunk: int
    changed: np.ndarray   # (devices, cells) bool: drawn with a heavy border
    caption: str


def _fmt_value(v: float) -> str:
    if np.isnan(v):
        return ""
    return str(int(v)) if float(v).is_integer() and abs(v) < 1e7 else f"{v:.3g}"


def _fmt_bytes(b) -> str:
    return f"{b:,} bytes" if isinstance(b, int) else f"{b:,.1f} bytes"


def _frames_of_run(run: CollectiveRun) -> list[_Frame]:
    n, kind = run.n, run.kind
    flat = lambda a: a.reshape(n, -1)  # noqa: E731
    size = run.params["size"]
    formula = {
        "psum": f"ring all-reduce: 2(n-1)/n \u00d7 {size * _ITEMSIZE} B",
        "all_gather": f"ring all-gather: (n-1)/n \u00d7 {n * size * _ITEMSIZE} B",
        "psum_scatter": f"ring reduce-scatter: (n-1)/n \u00d7 {size * _ITEMSIZE} B",
        "ppermute": f"ring model: the whole buffer, {size * _ITEMSIZE} B",
        "all_to_all": f"direct exchange: (n-1)/n \u00d7 {size * _ITEMSIZE} B",
    }[kind]
    out_chunk = {"psum": size, "all_gather": size, "psum_scatter": run.chunk, "ppermute": size,
                 "all_to_all": run.chunk}[kind]
    return [
        _Frame("before", flat(run.before), flat(run.before_origins), run.chunk,
               np.zeros((n, size), bool), f"before: each device holds {size} value(s)"),
        _Frame("after", flat(run.after), flat(run.after_origins), out_chunk,
               np.zeros(flat(run.after).shape, bool),
               f"after {run.call}: each device sent {_fmt_bytes(run.bytes_per_device)}, modelled ({formula})"),
    ]


def _frames_of_ring(ring: RingSteps) -> list[_Frame]:
    n, c = ring.n, ring.chunk
    frames = []
    flat = lambda a: a.reshape(n, -1)  # noqa: E731
    for s in range(ring.steps + 1):
        changed = np.zeros((n, n * c), bool)
        if s == 0:
            caption = ("before: each device holds its own piece" if ring.kind == "all_gather"
                       else "before: each device holds its contribution to every piece")
            label = "before"
        else:
            for p, k in enumerate(ring.receives[s - 1]):
                changed[p, k * c:(k + 1) * c] = True
            what = "the piece it received last" if ring.kind == "all_gather" and s > 1 else (
                "its own piece" if ring.kind == "all_gather" else "its partial sum of one piece")
            caption = (f"step {s} of {ring.steps}: each device sends {what} to the next device "
                       f"({_fmt_bytes(ring.bytes_per_step)}); sent so far: {_fmt_bytes(ring.bytes_per_step * s)}")
            label = f"step {s}"
        frames.append(_Frame(label, flat(ring.states[s]), flat(ring.origins[s]), c, changed, caption))
    builtin = "all_gather" if ring.kind == "all_gather" else "psum_scatter"
    frames.append(_Frame("after", flat(ring.builtin), flat(ring.builtin_origins), c,
                         np.zeros(flat(ring.builtin).shape, bool),
                         f"after: equal to jax.lax.{builtin}; each device sent "
                         f"{_fmt_bytes(ring.total_bytes_per_device)} in {ring.steps} steps"))
    return frames


def _span(frame: _Frame, gap: float) -> float:
    cells = frame.values.shape[1]
    return cells + gap * (math.ceil(cells / max(frame.chunk, 1)) - 1)


_GAP = 0.25  # between pieces of a buffer


# Text sizes in points as displayed (a figure wider than the page's column draws them larger, by
# display.text_scale, so that they are these sizes where the page shows them).
_TITLE_PT, _CAPTION_PT, _DEVICE_PT, _VALUE_PT = 11.0, 9.5, 10.0, 9.0
_LINE = 1.3          # line height over font size
_CHAR_W = 0.6        # a character's average width over its font size (DejaVu Sans)
_ROW_IN = 0.4        # height of a device's row, in inches as displayed
_MAX_W_IN = 7.0      # the widest figure drawn by default: within the column, so text is not shrunk


def _wrap(text: str, width_in: float, pt: float) -> str:
    """``text`` broken into lines that fit ``width_in`` inches at ``pt`` points."""
    import textwrap

    return "\n".join(textwrap.wrap(text, max(10, int(width_in * 72 / (_CHAR_W * pt)))))


def _draw_frame(fig, frame: _Frame, device_ids, title: str, span: float, captions=None) -> None:
    """Draw one frame on ``fig``: the title (wrapped to the figure), a row of cells per device, the
    caption (wrapped); ``captions``: every caption of the figure's frames, so that each frame places its
    rows the same way. Text is at least 9 pt as the page displays the figure."""
    from matplotlib.patches import Rectangle

    n, cells = frame.values.shape
    gap = _GAP
    W, H = fig.get_size_inches()
    k = text_scale(fig)
    lines = lambda s: s.count("\n") + 1  # noqa: E731
    title_text = _wrap(title, W / k - 0.2, _TITLE_PT)
    caption_text = _wrap(frame.caption, W / k - 0.2, _CAPTION_PT)
    caption_lines = max(lines(_wrap(c, W / k - 0.2, _CAPTION_PT)) for c in (captions or [frame.caption]))
    top_in = (0.08 + lines(title_text) * _TITLE_PT * _LINE / 72 + 0.08) * k
    bottom_in = (0.06 + caption_lines * _CAPTION_PT * _LINE / 72 + 0.1) * k
    label_in = (max(len(f"device {d}") for d in device_ids) * _CHAR_W * _DEVICE_PT / 72 + 0.15) * k
    left, right = min(0.45, label_in / W), 0.1 / W
    bottom, height = bottom_in / H, max(0.1, 1 - (top_in + bottom_in) / H)
    ax = fig.add_axes((left, bottom, 1 - left - right, height))
    ax.set_xlim(-0.1, span + 0.1)
    ax.set_ylim(n - 0.05, -0.25)
    ax.set_axis_off()
    # Value text sized to the cells as displayed (a cell is 0.92 of its slot wide, 0.72 tall), at least 9 pt.
    cell_w = W * (1 - left - right) / (span + 0.2) * 72 / k
    cell_h = H * height / (n + 0.2) * 72 / k
    font = k * max(_VALUE_PT, min(11.0, cell_w * 0.4, cell_h * 0.45))
    for p in range(n):
        ax.text(-0.25, p + 0.4, f"device {device_ids[p]}", ha="right", va="center", fontsize=_DEVICE_PT * k,
                color=device_color(device_ids[p]), fontweight="bold")
        for c in range(cells):
            x0 = c + gap * (c // max(frame.chunk, 1))
            v, mask = frame.values[p, c], int(frame.origins[p, c])
            who = [q for q in range(n) if mask >> q & 1]
            if not who or np.isnan(v):
                ax.add_patch(Rectangle((x0 + 0.04, p + 0.04), 0.92, 0.72, fc="#e6e6e6", ec="#a8a8a8",
                                       lw=0.8))  # an empty slot
                continue
            w = 0.92 / len(who)
            for j, q in enumerate(who):  # a sum is striped with its contributors' colours
                ax.add_patch(Rectangle((x0 + 0.04 + j * w, p + 0.04), w, 0.72, color=device_color(device_ids[q]),
                                       lw=0))
            ax.add_patch(Rectangle((x0 + 0.04, p + 0.04), 0.92, 0.72, fill=False,
                                   ec="black" if frame.changed[p, c] else "#666666",
                                   lw=2.0 if frame.changed[p, c] else 0.6))
            ax.text(x0 + 0.5, p + 0.4, _fmt_value(v), ha="center", va="center", fontsize=font,
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85))
    fig.text(0.5, 1 - 0.08 * k / H, title_text, ha="center", va="top", fontsize=_TITLE_PT * k,
             fontweight="bold", linespacing=_LINE)
    fig.text(0.5, 0.06 * k / H + (caption_lines - lines(caption_text)) * _CAPTION_PT * _LINE / 72 * k / H,
             caption_text, ha="center", va="bottom", fontsize=_CAPTION_PT * k, linespacing=_LINE)


def _title(kind: str, n: int, axis: str, ring: bool) -> str:
    what = f"ring {kind.replace('_', '-')} from ppermute" if ring else f"{kind} over axis {axis!r}"
    return f"{what}, {n} devices (striped cells: sums of the devices' values)" if kind in (
        "psum", "psum_scatter", "reduce_scatter") else f"{what}, {n} devices (colour: where the value came from)"


def _frames(kind, devices, ring, kwargs, func):
    if not isinstance(ring, bool):
        raise ValueError(f"{func}: ring must be True or False; got {ring!r}")
    if ring:
        ring_kind = {"all_gather": "all_gather", "psum_scatter": "reduce_scatter",
                     "reduce_scatter": "reduce_scatter"}.get(kind) if isinstance(kind, str) else None
        if ring_kind is None:
            raise ValueError(f"{func}: kind must be one of 'all_gather', 'psum_scatter' (or 'reduce_scatter') "
                             f"with ring=True; got {kind!r}")
        data = ring_steps(ring_kind, devices, **kwargs)
        return data, _frames_of_ring(data), _title(ring_kind, data.n, data.axis_name, True)
    data = run_collective(kind, devices, **kwargs)
    return data, _frames_of_run(data), _title(kind, data.n, data.axis_name, False)


def _figsize(frames, n, title: str):
    """A figure size in inches for these frames: an inch to half an inch per cell, no wider than
    ``_MAX_W_IN`` (so text shows at its size), tall enough for the rows and the wrapped texts."""
    span = max(_span(f, _GAP) for f in frames)
    W = min(max(5.0, 1.6 + 0.55 * span), _MAX_W_IN)
    lines = lambda s, pt: _wrap(s, W - 0.2, pt).count("\n") + 1  # noqa: E731
    caption_lines = max(lines(f.caption, _CAPTION_PT) for f in frames)
    H = (0.16 + lines(title, _TITLE_PT) * _TITLE_PT * _LINE / 72 + _ROW_IN * (n + 0.2)
         + 0.16 + caption_lines * _CAPTION_PT * _LINE / 72)
    return (W, round(H, 2)), span


def draw_collective(kind: str, devices, *, step: str = "after", ring: bool = False, figsize=None, **kwargs):
    """One picture of the buffers of a collective (see :func:`collective_view` for the arguments).

    step: ``"before"``, ``"after"``, or with ``ring=True`` also ``"step 1"`` .. ``"step n-1"``.
    Returns a figure that displays as PNG in a notebook.
    """

    data, frames, title = _frames(kind, devices, ring, kwargs, "draw_collective")
    labels = [f.label for f in frames]
    if step not in labels:
        raise ValueError(f"draw_collective: step must be one of {labels}; got {step!r}")
    size, span = _figsize(frames, data.n, title)
    fig = ShardFigure(figsize=figsize or size, dpi=100)
    _draw_frame(fig, frames[labels.index(step)], data.device_ids, title, span)
    return fig


def collective_view(kind: str, devices, *, ring: bool = False, figsize=None, **kwargs):
    """An explorer of a collective: a slider over its steps, each device's buffer as a row of cells.

    kind: one of ``"psum"``, ``"all_gather"``, ``"psum_scatter"``, ``"ppermute"``, ``"all_to_all"``
    (slider: before, after), or with ``ring=True`` ``"all_gather"`` / ``"psum_scatter"`` (slider:
    before, step 1 .. step n-1, after), built from ppermute.
    devices: a list of JAX devices (at least 2) or a number of them.
    Other keywords go to :func:`run_collective` or :func:`ring_steps` (``size``, ``tiled``, ``shift``,
    ``values``, ``axis_name``). Cells are coloured by the device the value came from; a sum is
    striped with its contributors' colours; cells written in a step have a heavy border; the
    caption gives the bytes each device sends.
    """

    data, frames, title = _frames(kind, devices, ring, kwargs, "collective_view")
    size, span = _figsize(frames, data.n, title)
    by_label = {f.label: f for f in frames}
    captions = [f.caption for f in frames]

    def draw(fig, step):
        _draw_frame(fig, by_label[step], data.device_ids, title, span, captions)

    return explorer({"step": {label: label for label in by_label}}, draw, figsize=figsize or size)
