"""The training step of the compiling chapters: where it casts its weights, and its work pass by pass.

References are independent of the code under test: the step's gradients computed with the other cast,
ring formulas written out by hand, and the step's flops counted from its shapes.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import shardlab
from shardlab.parallelism import training_step

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX


def _step_results(cast, name="2-D"):
    mesh = shardlab.target_mesh("here", (2, 4), ("data", "model"))
    layers, d, rows = 2, 16, 32
    rng = np.random.default_rng(0)
    w = {"w1": rng.normal(size=(layers, d, 4 * d)).astype(np.float32) * 0.1,
         "w2": rng.normal(size=(layers, 4 * d, d)).astype(np.float32) * 0.1}
    x = rng.normal(size=(rows, d)).astype(jnp.bfloat16)
    y = rng.normal(size=(rows, d)).astype(np.float32)
    lay = training_step.STEP_LAYOUTS[name]
    specs = training_step.step_inputs(mesh, lay, layers=layers, d=d, rows=rows)
    put = lambda a, s: jax.device_put(a, s.sharding)  # noqa: E731
    params = {k: put(v, specs[0][k]) for k, v in w.items()}
    zeros = lambda: {k: put(np.zeros_like(v), specs[0][k]) for k, v in w.items()}  # noqa: E731
    step = training_step.train_step(mesh, lay, cast=cast)
    _, opt, loss = step(params, {"m": zeros(), "v": zeros()}, put(x, specs[2]), put(y, specs[3]))
    return np.asarray(opt["m"]["w1"]), float(loss)     # m = (1 - b1) * gradient after one step


@pytest.mark.parametrize("name", ["2-D", "FSDP"])
def test_casting_before_the_scan_gives_the_same_step(name):
    m_block, loss_block = _step_results("in block", name)
    m_once, loss_once = _step_results("before scan", name)
    scale = np.abs(m_block).max()
    # bfloat16 products summed in another order: 5 % of the largest gradient, per element
    np.testing.assert_allclose(m_once, m_block, atol=5e-2 * scale)
    assert not np.allclose(m_once, 1.2 * m_block, atol=5e-2 * scale)   # the comparison can fail
    assert loss_once == pytest.approx(loss_block, rel=1e-2)


def test_an_unknown_cast_is_named():
    mesh = shardlab.target_mesh("here", (1, 1), ("data", "model"))
    with pytest.raises(ValueError, match="cast must be one of"):
        training_step.train_step(mesh, training_step.STEP_LAYOUTS["DP"], cast="late")


def test_casting_before_the_scan_gathers_only_bfloat16_on_a_gpu():
    from shardlab.hardware.gpus import gpu_compiler_missing

    if gpu_compiler_missing():
        pytest.skip(gpu_compiler_missing())
    mesh = shardlab.target_mesh("h100-32", (4, 8), ("data", "model"))
    sizes = dict(layers=3, d=1024, rows=32 * 512)
    types = {}
    for cast in training_step.CASTS:
        prog = training_step.compile_step(mesh, "FSDP", cast=cast, **sizes)
        types[cast] = ",".join(c.dtype for c in prog.collectives.of_kind("all-gather"))
    assert "f32" in types["in block"] and "bf16" in types["in block"]   # the recomputation's gather
    assert "f32" not in types["before scan"] and "bf16" in types["before scan"]


def test_step_passes_split_the_flops_and_the_collectives():
    # Tensor parallel on a 2 x 4 mesh of H100s: forward, each block's output all-reduced over "model";
    # backward, the gradient of each block's input over "model" and the weight gradients over "data".
    from shardlab.hardware.gpus import gpu_compiler_missing

    if gpu_compiler_missing():
        pytest.skip(gpu_compiler_missing())
    mesh = shardlab.target_mesh("h100-8", (2, 4), ("data", "model"))
    layers, d, rows = 3, 64, 128
    prog = training_step.compile_step(mesh, "TP", layers=layers, d=d, rows=rows)
    passes, network = training_step.step_passes(prog, mesh, layers=layers, d=d, rows=rows)
    products = 2 * rows * d * 4 * d / 8                 # one product's flops per device, by hand
    assert passes["forward"][0] == pytest.approx(2 * layers * products, rel=1e-12)
    assert passes["backward"][0] == pytest.approx(5 * layers * products, rel=1e-12)
    activation = rows // 2 * d * 2                       # one block's bfloat16 output, per "data" row
    fwd = [t for t in passes["forward"][1] if t.nbytes > 64]   # not the loss's scalar all-reduce
    assert {t.axis for t in fwd} == {("model",)}
    assert sum(t.nbytes for t in fwd) == pytest.approx(layers * 2 * 3 / 4 * activation, rel=1e-12)
    assert sum(t.count for t in fwd) == layers
    both = sum(t.nbytes for p in passes.values() for t in p[1])
    assert both == pytest.approx(shardlab.collectives_per_step(prog).bytes_per_step, rel=1e-12)
    assert set(network) >= {("model",), ("data",)}
    with pytest.raises(ValueError, match="program must be"):
        training_step.step_passes(prog.compiled, mesh, layers=layers, d=d, rows=rows)
