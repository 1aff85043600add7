"""An MPMD pipeline: a program per stage on its own devices, gradients equal to one program's."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import shardlab

DEVICES = shardlab.setup_devices(8)


def stage(p, x):
    return x + jnp.tanh(x @ p["w1"]) @ p["w2"]


def mse(y, t):
    return jnp.mean((y - t) ** 2)


@pytest.mark.parametrize("stages", [2, 4])
def test_gradients_equal_one_programs_and_stay_on_each_stages_devices(stages):
    rng = np.random.default_rng(stages)
    d, micro = 16, 5
    host = [{"w1": rng.normal(size=(d, 32)).astype(np.float32) / 4,
             "w2": rng.normal(size=(32, d)).astype(np.float32) / 8} for _ in range(stages)]
    per = 8 // stages
    meshes = [Mesh(np.array(DEVICES[per * s:per * (s + 1)]), ("rows",)) for s in range(stages)]
    params = [jax.device_put(p, NamedSharding(m, P())) for p, m in zip(host, meshes)]
    xs = rng.normal(size=(micro, 8, d)).astype(np.float32)
    ys = rng.normal(size=(micro, 8, d)).astype(np.float32)
    run = shardlab.mpmd_pipeline(stage, params, meshes, list(xs), list(ys), mse, activation_spec=P("rows"))

    def whole(ps):
        def one(x, y):
            for p in ps:
                x = stage(p, x)
            return mse(x, y)
        return jnp.mean(jax.vmap(one)(xs, ys))
    loss, reference = jax.value_and_grad(whole)(host)
    assert float(run.loss) == pytest.approx(float(loss), rel=1e-5)
    for g, r in zip(jax.tree.leaves(run.grads), jax.tree.leaves(reference)):
        scale = float(np.abs(r).max())
        np.testing.assert_allclose(g, r, rtol=1e-4, atol=1e-5 * scale)
        assert not np.allclose(g, 1.01 * r, rtol=1e-4, atol=1e-5 * scale)  # the tolerance can fail
    for s, g in enumerate(run.grads):
        assert {dv.id for dv in g["w1"].devices()} == {dv.id for dv in meshes[s].devices.flat}
    # one activation forward and one cotangent back per microbatch and boundary
    assert run.bytes_sent == 2 * micro * (stages - 1) * xs[0].nbytes
    assert run.schedule.bubble == pytest.approx(shardlab.bubble_model(stages, micro))


def test_bad_arguments_name_what_was_expected():
    mesh = Mesh(np.array(DEVICES[:4]), ("rows",))
    with pytest.raises(ValueError, match="meshes must list at least 2"):
        shardlab.mpmd_pipeline(stage, [{}], [mesh], [np.ones(2)], [np.ones(2)], mse)
    with pytest.raises(ValueError, match="microbatches and targets"):
        shardlab.mpmd_pipeline(stage, [{}, {}], [mesh, mesh], [np.ones(2)], [], mse)
