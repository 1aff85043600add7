"""The pinned build and the oldest-JAX run stay consistent with the ranges readers install."""

import pytest
from packaging.requirements import Requirement

from tests.paths import ROOT


def _lines(name):
    return [line.split("#")[0].strip() for line in (ROOT / name).read_text().splitlines()
            if line.split("#")[0].strip() and not line.startswith("-")]


def _pins(name):
    pins = {}
    for line in _lines(name):
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{name}: {line} is not a pin"
        pins[req.name.lower().replace("_", "-")] = spec.version
    return pins


def test_the_lock_satisfies_every_range():
    pins = _pins("requirements-lock.txt")
    for line in _lines("requirements.txt"):
        req = Requirement(line)
        name = req.name.lower().replace("_", "-")
        assert name in pins, f"requirements-lock.txt has no pin for {req.name}: run `make lock`"
        assert req.specifier.contains(pins[name], prereleases=True), \
            f"requirements-lock.txt pins {name}=={pins[name]}, outside {req}: run `make lock`"


def test_the_oldest_run_takes_the_floor_of_jax():
    jax_reqs = [Requirement(line) for line in _lines("requirements.txt") if Requirement(line).name == "jax"]
    assert len({str(r.specifier) for r in jax_reqs}) == 1, \
        f"requirements.txt gives jax and jax[tpu] different ranges: {[str(r) for r in jax_reqs]}"
    jax_req = jax_reqs[0]
    floor = [s.version for s in jax_req.specifier if s.operator == ">="]
    assert floor, "requirements.txt must give JAX a lower bound (>=)"
    pins = _pins("constraints-oldest.txt")
    assert pins == {"jax": floor[0], "jaxlib": floor[0]}, \
        f"constraints-oldest.txt must pin jax and jaxlib to {floor[0]}, the floor in requirements.txt"


def test_libtpu_is_the_one_jax_pairs_with():
    # jax[tpu] names the libtpu its compiler was built against; another one may not load.
    import platform
    import sys
    from importlib.metadata import requires, version

    if not (sys.platform == "linux" and platform.machine() == "x86_64"):
        pytest.skip("requirements.txt installs libtpu on Linux x86-64 only: nothing here to pair")
    (wanted,) = [Requirement(r.split(";")[0]) for r in requires("jax") if r.startswith("libtpu")]
    assert wanted.specifier.contains(version("libtpu")), \
        f"libtpu {version('libtpu')} is installed, but jax {version('jax')} pairs with {wanted}"
    pins = _pins("requirements-lock.txt")
    if pins["jax"] == version("jax"):       # the book's build (the oldest run installs from ranges)
        assert "libtpu" in pins and wanted.specifier.contains(pins["libtpu"]), \
            f"requirements-lock.txt pins libtpu=={pins.get('libtpu')}, but jax {pins['jax']} pairs with {wanted}"


def test_the_cuda_plugin_is_the_one_jax_pairs_with():
    # jax[cuda12-local] names the plugin of jax's own version; the plugin names its PJRT library's.
    import platform
    import sys
    from importlib.metadata import PackageNotFoundError, requires, version

    if not (sys.platform == "linux" and platform.machine() == "x86_64"):
        pytest.skip("requirements.txt installs the CUDA plugin on Linux x86-64 only: nothing here to pair")
    (wanted,) = [Requirement(r.split(";")[0]) for r in requires("jax")
                 if r.startswith("jax-cuda12-plugin") and "cuda12-local" in r]
    try:
        plugin, pjrt = version("jax-cuda12-plugin"), version("jax-cuda12-pjrt")
    except PackageNotFoundError as e:
        pytest.fail(f"requirements.txt installs jax[cuda12-local], but {e.name} is missing: pip install -r requirements.txt")
    assert wanted.specifier.contains(plugin) and plugin == version("jax"), \
        f"jax-cuda12-plugin {plugin} is installed, but jax {version('jax')} pairs with {wanted}"
    assert pjrt == plugin, f"jax-cuda12-pjrt {pjrt} is installed beside jax-cuda12-plugin {plugin}"
    pins = _pins("requirements-lock.txt")
    assert pins.get("jax-cuda12-plugin") == pins["jax"] == pins.get("jax-cuda12-pjrt"), \
        f"requirements-lock.txt must pin jax-cuda12-plugin and jax-cuda12-pjrt to jax's {pins['jax']}"
