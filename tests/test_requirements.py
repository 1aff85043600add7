"""The pinned build and the oldest-JAX run stay consistent with the ranges readers install."""

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
    (jax_req,) = [Requirement(line) for line in _lines("requirements.txt") if Requirement(line).name == "jax"]
    floor = [s.version for s in jax_req.specifier if s.operator == ">="]
    assert floor, "requirements.txt must give JAX a lower bound (>=)"
    pins = _pins("constraints-oldest.txt")
    assert pins == {"jax": floor[0], "jaxlib": floor[0]}, \
        f"constraints-oldest.txt must pin jax and jaxlib to {floor[0]}, the floor in requirements.txt"
