"""A realistic training step to compile for a target: a stack of residual MLP blocks trained with AdamW.

The model of the compiling chapters: ``x = x + relu(x @ W1) @ W2`` per block, the blocks' weights stacked
and run with ``jax.lax.scan`` (one compiled block whatever the depth), each block under ``jax.checkpoint``
(only its input kept for the backward pass), float32 weights and two float32 AdamW moments, bfloat16
arithmetic, and the weights and moments donated so the new ones overwrite the old. A :class:`StepLayout`
says where each array lives on a mesh; :func:`compile_step` compiles the step for a target's mesh with
nothing but shapes (``jax.ShapeDtypeStruct``), so that no device ever holds the arrays.
"""

from __future__ import annotations

from dataclasses import dataclass

from jax.sharding import PartitionSpec as P

from shardlab.models.network import Traffic, step_traffic
from shardlab.parallelism.strategies import phase_of
from shardlab.programs.compile import compile_for

__all__ = ["StepLayout", "STEP_LAYOUTS", "CASTS", "step_inputs", "train_step", "compile_step", "step_parameters",
           "step_flops", "step_passes"]

# AdamW (without bias correction, to keep it short)
_LR, _B1, _B2, _EPS, _WD = 1e-3, 0.9, 0.95, 1e-8, 0.1


@dataclass(frozen=True)
class StepLayout:
    """Where the step's arrays live on a mesh: ``PartitionSpec``s of the stacked ``W1`` ``(L, d, h)`` and
    ``W2`` ``(L, h, d)`` (their moments follow them) and of the batch ``(rows, d)``.

    Inside a block each weight is used without the mesh axes that split the batch: a weight stored split
    over an axis the batch is also split over is gathered over it before its product (FSDP); one split over
    any other axis stays split (tensor parallelism).
    """

    w1: P
    w2: P
    batch: P

    def used(self, spec: P) -> P:
        """One block's weight as its product uses it: ``spec`` less its leading (blocks) entry and the batch's axes."""
        batch_axes = {a for e in self.batch for a in _axes(e)}

        def keep(entry):
            names = tuple(a for a in _axes(entry) if a not in batch_axes)
            return None if not names else names[0] if len(names) == 1 else names
        return P(*[keep(e) for e in tuple(spec)[1:]])


def _axes(entry) -> tuple:
    if entry is None:
        return ()
    return (entry,) if isinstance(entry, str) else tuple(entry)


_ALL = ("data", "model")
#: Four layouts over a mesh ``("data", "model")``: data parallel, FSDP, tensor parallel over ``"model"``
#: (data parallel over ``"data"``), and 2-D (FSDP over ``"data"``, tensor parallel over ``"model"``).
STEP_LAYOUTS = {
    "DP": StepLayout(P(), P(), P(_ALL, None)),
    "FSDP": StepLayout(P(None, _ALL, None), P(None, _ALL, None), P(_ALL, None)),
    "TP": StepLayout(P(None, None, "model"), P(None, "model", None), P("data", None)),
    "2-D": StepLayout(P(None, "data", "model"), P(None, "model", "data"), P("data", None)),
}


def step_parameters(layers: int, d: int, hidden: int | None = None) -> int:
    """Parameters of ``layers`` blocks of width ``d`` and hidden width ``hidden`` (default ``4 d``)."""
    _check_sizes(layers=layers, d=d, hidden=4 * d if hidden is None else hidden)
    return layers * 2 * d * (4 * d if hidden is None else hidden)


def step_flops(layers: int, d: int, rows: int, hidden: int | None = None) -> int:
    """Matrix-product flops of one step over all devices: ``14 * rows * d * hidden`` per block.

    A product of ``(rows, d)`` by ``(d, hidden)`` is ``2 * rows * d * hidden`` flops. Per block the
    forward pass makes two; the backward pass four (for each product, the gradient of its input and of its
    weight) and, because of ``jax.checkpoint``, recomputes the first, ``relu(x @ W1)``, whose output the
    gradients need: the second product's output is needed by nothing, so XLA drops its recomputation.
    Seven products in all, as the compiled loop bodies hold (``tests/test_targets.py`` counts them). With
    a single block there is no loop and XLA keeps the forward product instead of recomputing it: 12, not
    14. Elementwise work (relu, AdamW) is left out: a few flops per parameter or activation, far fewer.
    """
    hidden = 4 * d if hidden is None else hidden
    _check_sizes(layers=layers, d=d, rows=rows, hidden=hidden)
    return layers * 7 * 2 * rows * d * hidden


def step_passes(program, mesh, *, layers: int, d: int, rows: int, hidden: int | None = None):
    """The step's work on one device, pass by pass, ready for :func:`shardlab.modelled_passes`.

    ``program``: the step compiled over ``mesh`` (:func:`compile_step`, or a layout of one's own of the same
    model). Returns ``(passes, network)``: ``passes = {"forward": (flops, [Traffic]), "backward": (flops,
    [Traffic])}``, with :func:`step_flops` spread evenly over the devices, 2 of its 7 products in the forward
    pass and 5 in the backward pass (the recomputation runs there); each collective of the program counted
    once per run (:func:`shardlab.models.network.step_traffic`) in the pass it serves, read from the program
    (:func:`shardlab.parallelism.strategies.phase_of`: a collective of both passes, or of neither, counts as backward);
    ``network``: the network of each mesh axis.
    """
    report = getattr(program, "collectives", None)
    if report is None or not hasattr(program, "compiled"):
        raise ValueError(f"program must be a shardlab CompiledProgram (compile_step), got {type(program).__name__}")
    flops = step_flops(layers, d, rows, hidden) / mesh.size
    traffic, network = step_traffic(program, mesh)
    passes = {"forward": (flops * 2 / 7, []), "backward": (flops * 5 / 7, [])}
    for c, t in zip(report, traffic):
        try:
            phase = phase_of(c, report).split("+")[-1]
        except ValueError:
            phase = "backward"
        passes[phase][1].append(Traffic(t.nbytes, t.axis, t.count, t.kind))
    return passes, network


def _check_sizes(**sizes) -> None:
    for name, value in sizes.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be a positive integer, got {value!r}")


#: Where the step casts its float32 weights to bfloat16: in each block (under ``jax.checkpoint``), or once
#: before the scan, outside the checkpointed blocks.
CASTS = ("in block", "before scan")


def train_step(mesh, layout: StepLayout, *, cast: str = "in block"):
    """The jitted AdamW step ``(params, opt, x, y) -> (params, opt, loss)`` for ``layout`` on ``mesh``.

    ``cast``: where the float32 weights become bfloat16. ``"in block"`` (the default) casts each weight
    inside its checkpointed block, so the backward pass's recomputation repeats the cast, and XLA may
    gather the float32 weight for it; ``"before scan"`` casts the stacked weights once, outside the
    checkpointed blocks, so every gather the blocks need is of bfloat16 (the gradients are the same).
    """
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    if not isinstance(layout, StepLayout):
        raise ValueError(f"layout must be a StepLayout (e.g. shardlab.parallelism.training_step.STEP_LAYOUTS['FSDP']), "
                         f"got {layout!r}")
    if cast not in CASTS:
        raise ValueError(f"cast must be one of {CASTS}, got {cast!r}")

    def use(w, spec):
        w = w.astype(jnp.bfloat16)
        return jax.lax.with_sharding_constraint(w, NamedSharding(mesh, layout.used(spec)))

    def loss_fn(params, x, y):
        @jax.checkpoint
        def block(x, w):
            hidden = jax.nn.relu(x @ use(w["w1"], layout.w1))
            return x + hidden @ use(w["w2"], layout.w2), None
        if cast == "before scan":
            params = jax.tree.map(lambda w: w.astype(jnp.bfloat16), params)
        out, _ = jax.lax.scan(block, x, params)
        return jnp.mean((out.astype(jnp.float32) - y) ** 2)

    def step(params, opt, x, y):
        loss, g = jax.value_and_grad(loss_fn)(params, x, y)
        m = jax.tree.map(lambda m, g: _B1 * m + (1 - _B1) * g, opt["m"], g)
        v = jax.tree.map(lambda v, g: _B2 * v + (1 - _B2) * g * g, opt["v"], g)
        params = jax.tree.map(lambda p, m, v: p - _LR * (m / (jnp.sqrt(v) + _EPS) + _WD * p), params, m, v)
        return params, {"m": m, "v": v}, loss

    weights = {"w1": NamedSharding(mesh, layout.w1), "w2": NamedSharding(mesh, layout.w2)}
    outs = (weights, {"m": weights, "v": weights}, NamedSharding(mesh, P()))
    return jax.jit(step, out_shardings=outs, donate_argnums=(0, 1))


def step_inputs(mesh, layout: StepLayout, *, layers: int, d: int, rows: int, hidden: int | None = None):
    """``ShapeDtypeStruct``s of the step's inputs: float32 weights and moments, a bfloat16 batch ``x`` of
    ``rows`` rows and its float32 target ``y``, laid out by ``layout`` on ``mesh``."""
    import jax
    import jax.numpy as jnp
    from jax.sharding import NamedSharding

    hidden = 4 * d if hidden is None else hidden
    _check_sizes(layers=layers, d=d, rows=rows, hidden=hidden)

    def like(shape, dtype, spec):
        return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, spec))
    weights = {"w1": like((layers, d, hidden), jnp.float32, layout.w1),
               "w2": like((layers, hidden, d), jnp.float32, layout.w2)}
    return (weights, {"m": weights, "v": weights}, like((rows, d), jnp.bfloat16, layout.batch),
            like((rows, d), jnp.float32, layout.batch))


def compile_step(mesh, layout, *, layers: int, d: int, rows: int, hidden: int | None = None,
                 cast: str = "in block"):
    """:func:`shardlab.compile_for` of the step on ``mesh``: a :class:`~shardlab.CompiledProgram`.

    ``layout``: a :class:`StepLayout` or a key of :data:`STEP_LAYOUTS`; ``cast``: see :func:`train_step`.
    """

    if isinstance(layout, str):
        if layout not in STEP_LAYOUTS:
            raise ValueError(f"layout must be a StepLayout or one of {list(STEP_LAYOUTS)}, got {layout!r}")
        layout = STEP_LAYOUTS[layout]
    return compile_for(train_step(mesh, layout, cast=cast),
                       *step_inputs(mesh, layout, layers=layers, d=d, rows=rows, hidden=hidden))
