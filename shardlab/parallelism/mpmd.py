"""An MPMD pipeline: each stage its own jitted program on its own devices, driven from Python in 1F1B order.

Chapter 14's pipeline is one SPMD program in which every stage runs the same code. Here each stage is
a separate program on a separate :class:`~jax.sharding.Mesh` (the devices of one slice, say): its
forward ``jax.jit(stage)``, its backward a second program that recomputes the stage's forward under
``jax.vjp`` and applies the cotangent (a full rematerialisation: no residuals cross programs), and
``jax.device_put`` to the next mesh's ``NamedSharding`` moves activations forward and cotangents back.
The order is :func:`shardlab.one_f_one_b_schedule`'s table, read slot by slot; dispatch is
asynchronous, so Python only decides the order in which each device's work is queued.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from shardlab.parallelism.pipeline import BACKWARD, FORWARD, one_f_one_b_schedule

__all__ = ["MpmdRun", "mpmd_pipeline"]


@dataclass
class MpmdRun:
    """What :func:`mpmd_pipeline` returns: the mean ``loss``, each stage's ``grads`` (on its mesh), the
    ``bytes_sent`` between meshes (activations forward, cotangents back), the ``schedule`` followed, and
    each stage's compiled programs ``programs[s] = {"forward": ..., "backward": ...}``."""

    loss: object
    grads: list
    bytes_sent: int
    schedule: object
    programs: list = field(default_factory=list)


def mpmd_pipeline(stage, params, meshes, microbatches, targets, loss, *, activation_spec=None):
    """Gradients of ``mean(loss(last output, target))`` over ``microbatches``, stage by stage on ``meshes``.

    ``stage(p, x) -> x``: one stage's computation (the same function for every stage, with that stage's
    parameters); ``params``: one pytree per stage, each placed on its mesh; ``meshes``: one
    ``jax.sharding.Mesh`` per stage; ``microbatches`` and ``targets``: sequences of arrays, one per
    microbatch; ``loss(y, target) -> scalar``. ``activation_spec``: the ``PartitionSpec`` of an
    activation on each mesh (default: replicated).
    """
    stages = len(meshes)
    if stages < 2 or not isinstance(params, (list, tuple)) or len(params) != stages:
        raise ValueError(f"mpmd_pipeline: meshes must list at least 2 meshes and params one pytree per mesh, "
                         f"got {stages} meshes and {type(params).__name__} params")
    if len(microbatches) != len(targets) or not len(microbatches):
        raise ValueError("mpmd_pipeline: microbatches and targets must be non-empty and of the same length")
    spec = P() if activation_spec is None else activation_spec
    placed = [NamedSharding(m, spec) for m in meshes]
    m_count = len(microbatches)

    def last(p, x, y):
        return loss(stage(p, x), y) / m_count

    forward = [jax.jit(stage) for _ in range(stages - 1)]
    backward = [jax.jit(lambda p, x, g: jax.vjp(stage, p, x)[1](g)) for _ in range(stages - 1)]
    final = jax.jit(jax.value_and_grad(last, argnums=(0, 1)))
    schedule = one_f_one_b_schedule(stages, m_count)
    inputs = [[None] * m_count for _ in range(stages)]     # each stage's input, per microbatch
    cotangents = [[None] * m_count for _ in range(stages)]  # d loss / d stage output, per microbatch
    grads = [None] * stages
    total, sent = 0.0, 0
    add = jax.jit(lambda a, b: jax.tree.map(lambda u, v: u + v, a, b))
    for t in range(schedule.steps):
        for s in range(stages):
            phase, m = int(schedule.phase[s, t]), int(schedule.microbatch[s, t])
            if phase == FORWARD:
                x = jax.device_put(microbatches[m], placed[0]) if s == 0 else inputs[s][m]
                inputs[s][m] = x
                if s < stages - 1:
                    y = forward[s](params[s], x)
                    inputs[s + 1][m] = jax.device_put(y, placed[s + 1])
                    sent += y.nbytes
            elif phase == BACKWARD:
                x = inputs[s][m]
                if s == stages - 1:
                    value, (gp, gx) = final(params[s], x, jax.device_put(targets[m], placed[s]))
                    total = total + value
                else:
                    gp, gx = backward[s](params[s], x, cotangents[s][m])
                grads[s] = gp if grads[s] is None else add(grads[s], gp)
                inputs[s][m] = None
                if s > 0:
                    cotangents[s - 1][m] = jax.device_put(gx, placed[s - 1])
                    sent += gx.nbytes
    programs = [{"forward": forward[s], "backward": backward[s]} for s in range(stages - 1)]
    programs.append({"forward_and_backward": final})
    return MpmdRun(total, grads, sent, schedule, programs)
