"""Mixture-of-experts routing: the capacity rule, the priority of choices, dispatch and combine, the load."""

from fractions import Fraction

import numpy as np
import pytest

from shardlab.parallelism.experts import Routing, dispatch_and_combine, expert_capacity, expert_load, top_k_routing


def test_capacity_rule():
    assert expert_capacity(64, 16, 2, 1.25) == 10          # ceil(10.0)
    assert expert_capacity(64, 16, 2, 1.3) == 11           # ceil(10.4)
    assert expert_capacity(80, 8, 1, 1.1) == 11            # exactly 11, not 11.000000000000002 -> 12
    assert expert_capacity(256, 16, 2, 2.0) == 64
    assert expert_capacity(4, 16, 1, 0.5) == 1             # at least one slot
    assert expert_capacity(10, 4, 2, Fraction(1, 3)) == 2  # ceil(5/3)


@pytest.mark.parametrize("args,name", [((0, 4, 1, 1.0), "tokens"), ((4, 0, 1, 1.0), "experts"),
                                       ((4, 4, 0, 1.0), "k"), ((4, 4, 5, 1.0), "k"),
                                       ((4, 4, 1, 0.0), "capacity_factor"), ((4, 4, 1, float("inf")), "capacity_factor"),
                                       ((4, 4, 1, True), "capacity_factor"), ((4.0, 4, 1, 1.0), "tokens")])
def test_capacity_rejects_bad_input(args, name):
    with pytest.raises(ValueError, match=name):
        expert_capacity(*args)


def brute_force(logits, k, capacity):
    """The rule written as loops: top-k by probability, then slots by rank, then position."""
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    tokens, experts = logits.shape
    expert = np.argsort(-probs, axis=-1, kind="stable")[:, :k]
    taken = np.zeros(experts, int)
    slot = np.zeros((tokens, k), int)
    for rank in range(k):
        for t in range(tokens):
            slot[t, rank] = taken[expert[t, rank]]
            taken[expert[t, rank]] += 1
    gate = np.take_along_axis(probs, expert, -1)
    return expert, gate / gate.sum(-1, keepdims=True), slot, slot < capacity


@pytest.mark.parametrize("tokens,experts,k,capacity", [(16, 4, 1, 3), (32, 8, 2, 5), (20, 6, 3, 4), (8, 8, 2, 1)])
def test_routing_matches_the_rule(tokens, experts, k, capacity):
    logits = np.random.default_rng(tokens + experts).normal(size=(tokens, experts)).astype(np.float32)
    r = top_k_routing(logits, k, capacity)
    assert isinstance(r, Routing)
    expert, gate, slot, kept = brute_force(logits.astype(np.float64), k, capacity)
    np.testing.assert_array_equal(r.expert, expert)
    # float32 against float64: 1e-5 of each gate is a hundred times float32's rounding, and far below what a
    # wrong rule gives (the top-k probabilities not renormalised over the k chosen, the other side):
    np.testing.assert_allclose(r.gate, gate, rtol=1e-5)
    probs = np.exp(logits - logits.max(-1, keepdims=True)) / np.exp(logits - logits.max(-1, keepdims=True)).sum(
        -1, keepdims=True)
    assert not np.allclose(r.gate, np.take_along_axis(probs, expert, -1), rtol=1e-5, atol=0)
    np.testing.assert_array_equal(r.slot, slot)
    np.testing.assert_array_equal(r.kept, kept)
    assert np.asarray(r.kept).sum() <= experts * capacity


def test_first_choices_come_before_second_choices():
    # Every token prefers expert 0, then expert 1; one slot each: token 0 gets expert 0, token 0 expert 1,
    # and every later token is dropped twice. With k=2 a token's second choice never pushes out a first one.
    logits = np.tile(np.array([[3.0, 2.0, 0.0]], np.float32), (4, 1))
    r = top_k_routing(logits, 2, 1)
    assert np.asarray(r.kept).tolist() == [[True, True]] + [[False, False]] * 3
    logits[2] = [2.0, 3.0, 0.0]                 # token 2 prefers expert 1: its first choice wins slot 0
    r = top_k_routing(logits, 2, 1)
    assert np.asarray(r.kept).tolist() == [[True, False], [False, False], [True, False], [False, False]]


def test_dispatch_and_combine_move_tokens_and_back():
    rng = np.random.default_rng(0)
    x = rng.normal(size=(24, 5)).astype(np.float32)
    logits = rng.normal(size=(24, 6)).astype(np.float32)
    r = top_k_routing(logits, 2, 5)
    dispatch, combine = dispatch_and_combine(r, 6, 5, x.dtype)
    assert dispatch.shape == combine.shape == (24, 6, 5)
    dispatch, combine = np.asarray(dispatch), np.asarray(combine)
    assert dispatch.sum(axis=0).max() <= 1                  # a slot holds one token at most
    assert dispatch.sum() == np.asarray(r.kept).sum()
    buffers = np.einsum("tec,td->ecd", dispatch, x)
    # identity experts: each token comes back as the sum of its kept gates times itself
    back = np.einsum("tec,ecd->td", combine, buffers)
    kept_gate = (np.asarray(r.gate) * np.asarray(r.kept)).sum(-1)
    np.testing.assert_allclose(back, kept_gate[:, None] * x, rtol=1e-5, atol=1e-6)
    # The other side of the tolerance: a token back without its gates, or with only its first gate, is outside.
    assert not np.allclose(back, np.asarray(r.kept).any(-1)[:, None] * x, rtol=1e-5, atol=1e-6)
    first_only = (np.asarray(r.gate) * np.asarray(r.kept))[:, 0]
    assert not np.allclose(back, first_only[:, None] * x, rtol=1e-5, atol=1e-6)


def test_bfloat16_tokens_stay_bfloat16():
    """bfloat16 tokens in: bfloat16 one-hot tensors, buffers, expert outputs and results, equal to a float64
    reference within bfloat16's rounding (and not within float32's: the work really ran in bfloat16)."""
    import jax.numpy as jnp

    rng = np.random.default_rng(1)
    tokens, experts, k, capacity = 48, 8, 2, 9
    x = jnp.asarray(rng.normal(size=(tokens, 16)), jnp.bfloat16)
    scale = jnp.asarray(rng.uniform(0.5, 2.0, size=experts), jnp.bfloat16)    # expert e multiplies by scale[e]
    r = top_k_routing(rng.normal(size=(tokens, experts)).astype(np.float32), k, capacity)
    dispatch, combine = dispatch_and_combine(r, experts, capacity, x.dtype)
    buffers = jnp.einsum("tec,td->ecd", dispatch, x)
    outputs = buffers * scale[:, None, None]
    back = jnp.einsum("tec,ecd->td", combine, outputs)
    assert {a.dtype for a in (dispatch, combine, buffers, outputs, back)} == {jnp.dtype(jnp.bfloat16)}
    # The reference, on one device in float64: each token's kept choices, gate times scale times itself.
    expert, gate, kept = (np.asarray(a) for a in (r.expert, r.gate, r.kept))
    x64, scale64 = np.asarray(x, np.float64), np.asarray(scale, np.float64)
    terms = (gate * kept * scale64[expert])[..., None] * x64[:, None, :]      # (tokens, k, width)
    reference, size = terms.sum(1), np.abs(terms).sum(1)
    error = np.abs(np.asarray(back, np.float64) - reference)
    # bfloat16 keeps 8 significant bits: each rounding (gate, scaled token, gate times it, the sum) is within
    # 2**-9 of what it rounds; four of them, with room for the order the sum is taken in: 2**-6 of the terms.
    bf16_tolerance = 2.0 ** -6 * size + 1e-30
    assert (error <= bf16_tolerance).all()
    assert not (error <= 2.0 ** -21 * size + 1e-30).all()        # float32's tolerance, scaled alike: outside
    # The other side: only the first kept gate, or no gates at all, is outside bfloat16's tolerance.
    assert not (np.abs(terms[:, 0] - reference) <= bf16_tolerance).all()
    assert not (np.abs(kept.any(-1)[:, None] * x64 - reference) <= bf16_tolerance).all()
    # Float32 one-hot tensors would promote the bfloat16 tokens: what the dtype argument avoids.
    dispatch32, _ = dispatch_and_combine(r, experts, capacity, jnp.float32)
    assert jnp.einsum("tec,td->ecd", dispatch32, x).dtype == jnp.float32


def test_routing_rejects_bad_input():
    with pytest.raises(ValueError, match="logits"):
        top_k_routing(np.zeros(5, np.float32), 1, 1)
    with pytest.raises(ValueError, match="k"):
        top_k_routing(np.zeros((4, 3), np.float32), 4, 1)
    with pytest.raises(ValueError, match="capacity"):
        top_k_routing(np.zeros((4, 3), np.float32), 1, 0)
    with pytest.raises(ValueError, match="experts"):
        dispatch_and_combine(top_k_routing(np.zeros((4, 3), np.float32), 1, 1), 0, 1, np.float32)
    for dtype in (None, np.int32, bool, "no such dtype"):
        with pytest.raises(ValueError, match="dtype"):
            dispatch_and_combine(top_k_routing(np.zeros((4, 3), np.float32), 1, 1), 3, 1, dtype)


def test_expert_load():
    expert = np.array([[0, 1], [0, 2], [0, 1]])
    kept = np.array([[True, True], [True, True], [False, False]])
    kept_per, dropped_per = expert_load(expert, kept, 4)
    assert kept_per.tolist() == [2, 1, 1, 0]
    assert dropped_per.tolist() == [1, 1, 0, 0]
    with pytest.raises(ValueError, match="same shape"):
        expert_load(expert, kept[:1], 4)
    with pytest.raises(ValueError, match="outside"):
        expert_load(expert, kept, 2)
    with pytest.raises(ValueError, match="experts"):
        expert_load(expert, kept, 0)


def test_router_logits_are_float32():
    import jax.numpy as jnp

    from shardlab.parallelism.experts import router_logits

    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 16)).astype(np.float32)
    w = rng.normal(size=(16, 8)).astype(np.float32)
    got = router_logits(jnp.asarray(x, jnp.bfloat16), jnp.asarray(w, jnp.bfloat16))
    assert got.dtype == jnp.float32
    xb = np.asarray(jnp.asarray(x, jnp.bfloat16), np.float64)
    wb = np.asarray(jnp.asarray(w, jnp.bfloat16), np.float64)
    want = xb @ wb                              # the bfloat16 inputs' exact product
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want, atol=1e-5 * scale, rtol=0)
    # the bfloat16 product, rounded, is further off than that: the other side of the tolerance
    rounded = np.asarray((jnp.asarray(x, jnp.bfloat16) @ jnp.asarray(w, jnp.bfloat16)), np.float64)
    assert np.abs(rounded - want).max() > 1e-5 * scale
    for bad, name in [((x[0], w), "x"), ((x, w[:4]), "width")]:
        with pytest.raises(ValueError, match=name):
            router_logits(*bad)


def test_load_balancing_and_z_losses():
    import jax

    from shardlab.parallelism.experts import load_balancing_loss, router_z_loss

    rng = np.random.default_rng(1)
    logits = rng.normal(size=(20, 4)).astype(np.float32)
    expert = np.argsort(-logits, axis=-1)[:, :2]
    # by hand: E * sum_e f_e * p_e, f over all k choices
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    f = np.bincount(expert.ravel(), minlength=4) / expert.size
    want = 4 * np.sum(f * probs.mean(0))
    assert float(load_balancing_loss(logits, expert)) == pytest.approx(want, rel=1e-5)
    assert float(load_balancing_loss(logits, expert)) != pytest.approx(want / 4, rel=1e-5)
    # even: 1
    even = np.zeros((8, 4), np.float32)
    assert float(load_balancing_loss(even, np.arange(8).reshape(4, 2).repeat(2, 0) % 4)) == pytest.approx(1.0)
    # its gradient reaches the logits through p only: d/dlogits of E * sum_e f_e p_e
    grad = jax.grad(lambda l: load_balancing_loss(l, expert))(logits)
    dp = 4 * f / logits.shape[0]                                      # d loss / d probs[t, e]
    want_grad = probs * (dp - (probs * dp).sum(-1, keepdims=True))    # through the softmax
    np.testing.assert_allclose(grad, want_grad, rtol=1e-4, atol=1e-7)
    # z-loss: mean of logsumexp squared
    lse = np.log(np.exp(logits.astype(np.float64)).sum(-1))
    assert float(router_z_loss(logits)) == pytest.approx(np.mean(lse ** 2), rel=1e-5)
    assert float(router_z_loss(logits)) != pytest.approx(np.mean(lse) ** 2, rel=1e-5)
    with pytest.raises(ValueError, match="logits"):
        router_z_loss(logits[0])
    with pytest.raises(ValueError, match="expert"):
        load_balancing_loss(logits, expert[:3])
