"""Mixture-of-experts routing: top-k choices, a capacity per expert, and which choices are dropped.

The rule, one group of tokens at a time (a group is the tokens one device holds):

* each token picks its ``k`` experts of highest router probability (``softmax`` of the logits); its gates are
  those ``k`` probabilities divided by their sum;
* every expert takes at most ``capacity`` choices from the group, where
  ``capacity = ceil(capacity_factor * tokens * k / experts)`` (:func:`expert_capacity`);
* priority is by choice rank, then by position: every token's first choice is served before any second
  choice, and among choices of one rank the earlier token comes first. A choice that finds its expert full is
  *dropped*: it contributes nothing to the token's output.

:func:`top_k_routing` computes this with ``jax.numpy`` (inside ``jax.jit`` or ``jax.shard_map`` as well as
outside), :func:`dispatch_and_combine` turns it into the dense one-hot tensors that move tokens into the
experts' slots and back, and :func:`expert_load` counts the kept and dropped choices per expert.
"""

from __future__ import annotations

import math
from fractions import Fraction
from typing import NamedTuple

import numpy as np

from shardlab.arguments import positive_int

__all__ = ["Routing", "expert_capacity", "router_logits", "top_k_routing", "dispatch_and_combine", "expert_load",
           "load_balancing_loss", "router_z_loss"]


def expert_capacity(tokens: int, experts: int, k: int, capacity_factor) -> int:
    """Slots per expert for a group of ``tokens`` tokens: ``ceil(capacity_factor * tokens * k / experts)``, at least 1.

    ``tokens * k / experts`` is what each expert would get if the router spread the choices evenly; the
    capacity factor scales it. The product is taken in exact rational arithmetic (``capacity_factor`` as the
    decimal it prints as), so ``1.1 * 80 * 1 / 8`` gives 11, not 12.
    """
    tokens = positive_int("expert_capacity: tokens", tokens)
    experts = positive_int("expert_capacity: experts", experts)
    k = positive_int("expert_capacity: k", k)
    if k > experts:
        raise ValueError(f"expert_capacity: k must be at most experts ({experts}), got {k}")
    if isinstance(capacity_factor, bool) or not isinstance(capacity_factor, (int, float, np.integer, np.floating,
                                                                              Fraction)) \
            or not capacity_factor > 0 or not math.isfinite(capacity_factor):
        raise ValueError(f"expert_capacity: capacity_factor must be a positive number, got {capacity_factor!r}")
    factor = capacity_factor if isinstance(capacity_factor, Fraction) else Fraction(repr(float(capacity_factor)))
    return max(1, math.ceil(factor * tokens * k / experts))


class Routing(NamedTuple):
    """Where each of a group's token choices goes (arrays of shape ``(tokens, k)``).

    ``expert``: the chosen expert; ``gate``: its weight in the token's output; ``slot``: the choice's place in
    its expert's queue (0, 1, ...; by choice rank, then position); ``kept``: ``slot < capacity``.
    """

    expert: object
    gate: object
    slot: object
    kept: object


def router_logits(x, w_router):
    """The router's scores ``x @ w_router``, shape ``(tokens, experts)``, computed and returned in float32.

    Whatever the tokens' dtype, the product accumulates and is returned in float32
    (``preferred_element_type``): logits rounded to bfloat16's 8 bits of mantissa tie and swap experts that
    float32 tells apart, and the softmax, the top-k and the gates all read them. (The Switch Transformer
    computes its router in float32 for this reason; MaxText's ``float32_gate_logits`` does the same.)
    """
    import jax.numpy as jnp

    if getattr(x, "ndim", None) != 2 or getattr(w_router, "ndim", None) != 2:
        raise ValueError(f"router_logits: x must be (tokens, width) and w_router (width, experts), got shapes "
                         f"{getattr(x, 'shape', None)} and {getattr(w_router, 'shape', None)}")
    if x.shape[1] != w_router.shape[0]:
        raise ValueError(f"router_logits: x's width ({x.shape[1]}) must equal w_router's rows "
                         f"({w_router.shape[0]})")
    return jnp.dot(x, w_router, preferred_element_type=jnp.float32)


def top_k_routing(logits, k: int, capacity: int) -> Routing:
    """Route a group of tokens: each picks ``k`` experts, each expert keeps at most ``capacity`` choices.

    ``logits``: the router's scores, shape ``(tokens, experts)``. Choices are served by rank, then position
    (all first choices before any second choice; earlier tokens first), so which ones are dropped depends
    only on the logits. Uses ``jax.numpy``: call it inside a jitted function or ``jax.shard_map``, or on its own.
    """
    import jax
    import jax.numpy as jnp

    k = positive_int("top_k_routing: k", k)
    capacity = positive_int("top_k_routing: capacity", capacity)
    if getattr(logits, "ndim", None) != 2:
        raise ValueError(f"top_k_routing: logits must have shape (tokens, experts), got shape "
                         f"{getattr(logits, 'shape', None)}")
    tokens, experts = logits.shape
    if k > experts:
        raise ValueError(f"top_k_routing: k must be at most the number of experts ({experts}), got {k}")
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    top, expert = jax.lax.top_k(probs, k)                                # (tokens, k), best first
    gate = top / top.sum(axis=-1, keepdims=True)
    by_rank = jax.nn.one_hot(expert.T.reshape(-1), experts, dtype=jnp.int32)    # (k * tokens, experts), rank-major
    slot = ((jnp.cumsum(by_rank, axis=0) - 1) * by_rank).sum(axis=-1)   # place in its expert's queue
    slot = slot.reshape(k, tokens).T
    return Routing(expert=expert, gate=gate, slot=slot, kept=slot < capacity)


def dispatch_and_combine(routing: Routing, experts: int, capacity: int, dtype):
    """The one-hot tensors of a routing, shape ``(tokens, experts, capacity)``: ``(dispatch, combine)``.

    ``dispatch[t, e, c]`` is 1 where token ``t`` fills slot ``c`` of expert ``e`` (kept choices only), so
    ``einsum("tec,td->ecd", dispatch, x)`` fills the experts' buffers; ``combine`` holds the gates in the
    same places, so ``einsum("tec,ecd->td", combine, y)`` brings the experts' outputs back, weighted.

    ``dtype`` is the tokens' dtype (``x.dtype``), a floating one: both tensors are made in it, so the einsums
    keep the tokens' dtype. (Float32 tensors with bfloat16 tokens would promote the buffers, the experts'
    inputs and the layer's output to float32.)
    """
    import jax
    import jax.numpy as jnp

    experts = positive_int("dispatch_and_combine: experts", experts)
    capacity = positive_int("dispatch_and_combine: capacity", capacity)
    given = dtype
    try:
        dtype = None if dtype is None else np.dtype(dtype)
    except TypeError:
        dtype = None
    if dtype is None or not jnp.issubdtype(dtype, jnp.floating):
        raise ValueError(f"dispatch_and_combine: dtype must be a floating dtype (the tokens' dtype, x.dtype), "
                         f"got {given!r}")
    where = (jax.nn.one_hot(routing.expert, experts, dtype=dtype)[..., :, None]
             * jax.nn.one_hot(jnp.where(routing.kept, routing.slot, capacity), capacity, dtype=dtype)[..., None, :])
    dispatch = where.sum(axis=1)                                          # over the k choices
    combine = (where * routing.gate.astype(dtype)[..., None, None]).sum(axis=1)
    return dispatch, combine


def expert_load(expert, kept, experts: int) -> tuple[np.ndarray, np.ndarray]:
    """Choices kept and dropped per expert, as two integer arrays of length ``experts``.

    ``expert`` and ``kept`` are a routing's fields (any shape, the same for both; several groups may be
    stacked). Their sum per expert is the expert's demand, what the router asked of it.
    """
    experts = positive_int("expert_load: experts", experts)
    expert, kept = np.asarray(expert), np.asarray(kept, bool)
    if expert.shape != kept.shape:
        raise ValueError(f"expert_load: expert and kept must have the same shape, got {expert.shape} and "
                         f"{kept.shape}")
    if expert.size and (expert.min() < 0 or expert.max() >= experts):
        raise ValueError(f"expert_load: expert holds values outside 0..{experts - 1}")
    kept_per = np.bincount(expert[kept], minlength=experts)
    dropped_per = np.bincount(expert[~kept], minlength=experts)
    return kept_per, dropped_per


def load_balancing_loss(logits, expert):
    """The Switch Transformer's auxiliary loss of one group, ``experts * sum_e f_e * p_e``.

    ``logits``: the router's scores ``(tokens, experts)``; ``expert``: the routing's chosen experts
    ``(tokens, k)``. ``f_e`` is the fraction of the choices that went to expert ``e`` (counted before the
    capacity, and carrying no gradient); ``p_e`` the mean router probability of expert ``e`` over the
    tokens. It is 1 when both are even and grows as they concentrate on the same experts; its gradient
    reaches the router through ``p_e`` only.
    """
    import jax
    import jax.numpy as jnp

    if getattr(logits, "ndim", None) != 2:
        raise ValueError(f"load_balancing_loss: logits must have shape (tokens, experts), got shape "
                         f"{getattr(logits, 'shape', None)}")
    if getattr(expert, "ndim", None) != 2 or expert.shape[0] != logits.shape[0]:
        raise ValueError(f"load_balancing_loss: expert must have shape (tokens, k) with {logits.shape[0]} "
                         f"tokens, got shape {getattr(expert, 'shape', None)}")
    experts = logits.shape[1]
    probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1)
    f = jax.nn.one_hot(expert, experts, dtype=jnp.float32).mean(axis=(0, 1))
    return experts * jnp.sum(jax.lax.stop_gradient(f) * probs.mean(axis=0))


def router_z_loss(logits):
    """ST-MoE's z-loss of one group: the mean over tokens of ``logsumexp(logits)**2`` (in float32).

    It keeps the logits small, so that the router's softmax stays well within float range and its
    rounding small.
    """
    import jax
    import jax.numpy as jnp

    if getattr(logits, "ndim", None) != 2:
        raise ValueError(f"router_z_loss: logits must have shape (tokens, experts), got shape "
                         f"{getattr(logits, 'shape', None)}")
    return jnp.mean(jax.nn.logsumexp(logits.astype(jnp.float32), axis=-1) ** 2)
