"""Each branch of setup_devices, each in a fresh interpreter (JAX can start only once per process)."""

import subprocess
import sys
import textwrap

import pytest


def run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=120, env={"PATH": "/usr/bin:/bin", "JAX_PLATFORMS": ""})


def test_no_accelerator_gives_simulated_cpu_devices():
    r = run("""
        import shardlab
        devs = shardlab.setup_devices(8)
        import jax
        assert [d.platform for d in devs] == ["cpu"] * 8, devs
        assert len(jax.devices()) == 8
        print("OK", len(devs))
    """)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", f"libtpu's start-up warnings (or others) reached the reader: {r.stderr}"
    assert "simulated CPU devices" in r.stdout and "OK 8" in r.stdout
    assert r.stdout.count("simulated") == 1


def test_other_counts():
    r = run("""
        import shardlab
        print("OK", len(shardlab.setup_devices(4)))
    """)
    assert r.returncode == 0, r.stderr
    assert "OK 4" in r.stdout


def test_started_too_early_asks_for_restart():
    r = run("""
        import jax, jax.numpy as jnp
        jnp.zeros(3)  # JAX starts with one CPU device
        import shardlab
        shardlab.setup_devices(8)
    """)
    assert r.returncode != 0
    assert "RuntimeError" in r.stderr and "Restart the kernel" in r.stderr


def test_started_with_enough_devices_is_fine():
    r = run("""
        import jax
        jax.config.update("jax_num_cpu_devices", 8)
        jax.devices()
        import shardlab
        print("OK", len(shardlab.setup_devices(8)))
    """)
    assert r.returncode == 0, r.stderr
    assert "OK 8" in r.stdout and "simulated" not in r.stdout


FAKE_ACCELERATOR = """
    import jax
    from jax.extend import backend

    class FakeDevice:
        platform = "tpu"
        def __init__(self, i): self.id = i

    real_devices = jax.devices
    state = {{"cleared": False}}
    def fake_devices(*args):
        # A machine with {count} accelerator devices, until the CPU fallback clears the backends.
        return real_devices(*args) if state["cleared"] else [FakeDevice(i) for i in range({count})]
    real_clear = backend.clear_backends
    def clear():
        state["cleared"] = True
        real_clear()
    jax.devices = fake_devices
    backend.clear_backends = clear

    import shardlab
    devs = shardlab.setup_devices(8)
    print("PLATFORMS", sorted({{d.platform for d in devs}}), len(devs))
"""


def test_enough_accelerators_are_used_as_they_are():
    r = run(FAKE_ACCELERATOR.format(count=16))
    assert r.returncode == 0, r.stderr
    assert "PLATFORMS ['tpu'] 8" in r.stdout and "simulated" not in r.stdout


def test_too_few_accelerators_fall_back_to_cpu():
    r = run(FAKE_ACCELERATOR.format(count=1) + """
    assert jax.numpy.zeros(2).devices().pop().platform == "cpu"
    print("DEFAULT ON CPU")
    """)
    assert r.returncode == 0, r.stderr
    assert "Found 1 TPU device(s), fewer than 8: using 8 simulated CPU devices instead." in r.stdout
    assert "PLATFORMS ['cpu'] 8" in r.stdout and "DEFAULT ON CPU" in r.stdout


@pytest.mark.parametrize("bad", [0, -1, 2.0, "8", True])
def test_bad_count_is_refused(bad):
    import shardlab

    with pytest.raises(ValueError, match="n must be a positive integer"):
        shardlab.setup_devices(bad)


def test_a_driver_library_without_a_gpu_device_is_no_driver(monkeypatch):
    # The CUDA plugin is only started where a GPU can be used: the driver's library alone is not enough.
    import ctypes
    import glob

    from shardlab.hardware import environment as dev

    monkeypatch.setattr(ctypes, "CDLL", lambda name: object())          # the library loads
    monkeypatch.setattr(glob, "glob", lambda pattern: [])                 # but no /dev/nvidia0
    monkeypatch.setattr(dev.os.path, "exists", lambda path: False)
    assert dev._cuda_driver_present() is False
    monkeypatch.setattr(glob, "glob", lambda pattern: ["/dev/nvidia0"])   # a GPU device node
    assert dev._cuda_driver_present() is True

    def missing(name):
        raise OSError(name)
    monkeypatch.setattr(ctypes, "CDLL", missing)                          # a device node, no library
    assert dev._cuda_driver_present() is False
