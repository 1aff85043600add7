"""TPU slices compiled for ahead of time: their names, chips and compile-only devices.

With ``libtpu`` installed (``pip install "jax[tpu]"``, Linux x86-64 only), XLA's TPU compiler runs on a
machine with no TPU: ``jax.experimental.topologies.get_topology_desc`` describes the devices of a named
TPU slice (ids, chip coordinates, cores), ``jax.make_mesh`` orders them as it would on that slice, and
``jax.jit(f).lower(...).compile()`` on abstract inputs sharded over that mesh returns XLA:TPU's program
for it. Nothing runs: the program is read (collectives, memory per chip, flops), never executed.

Where libtpu is missing, :func:`compiling_for_tpu` turns the cell into one printed line.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from shardlab.hardware.chips import CHIPS, Chip
from shardlab.hardware.environment import quiet_libtpu, share_libtpu

__all__ = ["Target", "TARGETS", "TPUCompilerUnavailable", "tpu_compiler_missing", "compiling_for_tpu", "tpu_devices"]


@dataclass(frozen=True)
class Target:
    """A named TPU slice: its topology name (for ``get_topology_desc``), its chip, and where readers meet it.

    ``host_bounds``: the chips one host holds, as x, y, z (``None``: libtpu's default for the chip, 2 x 2 x 1).
    A single-host slice names its own, so that all its devices belong to process 0.
    """

    name: str
    topology: str
    chip: Chip
    where: str
    host_bounds: tuple[int, int, int] | None = None

    @property
    def num_chips(self) -> int:
        return math.prod(int(size) for size in self.topology.split(":")[1].split("x"))


#: The TPU slices the book compiles for, named as Google Cloud names them (by chips for v5e and
#: v6e, by TensorCores, two per chip, for v5p).
TARGETS = {t.name: t for t in (
    Target("v5e-1", "v5e:1x1", CHIPS["TPU v5e"], "Colab's TPU runtime: one v5e chip", (1, 1, 1)),
    Target("v5e-8", "v5e:2x4", CHIPS["TPU v5e"], "Kaggle's TPU runtime: one host with 8 v5e chips", (2, 4, 1)),
    Target("v5e-256", "v5e:16x16", CHIPS["TPU v5e"], "a full v5e pod: 16 x 16 chips, 4 per host"),
    Target("v5p-16", "v5p:2x2x2", CHIPS["TPU v5p"], "a cube of 2 x 2 x 2 v5p chips on 2 hosts of 4"),
    Target("v5p-128", "v5p:4x4x4", CHIPS["TPU v5p"], "a v5p slice of 4 x 4 x 4 chips, 4 per host"),
    Target("v6e-8", "v6e:2x4", CHIPS["TPU v6e"], "one host with 8 v6e (Trillium) chips", (2, 4, 1)),
)}


class TPUCompilerUnavailable(RuntimeError):
    """libtpu, XLA's TPU compiler, cannot be loaded in this Python: TPU programs cannot be compiled."""


@lru_cache(maxsize=None)
def tpu_devices(target: Target) -> tuple:
    """The compile-only devices libtpu describes for ``target`` (libtpu's own error where it cannot load;
    :func:`shardlab.target_devices` turns that into one line)."""
    from jax.experimental import topologies

    extra = {} if target.host_bounds is None else {"chips_per_host_bounds": list(target.host_bounds)}
    share_libtpu()
    with quiet_libtpu():
        return tuple(topologies.get_topology_desc(topology_name=target.topology, platform="tpu", **extra).devices)


def tpu_compiler_missing() -> str | None:
    """``None`` when TPU programs can be compiled here; otherwise one line saying why not."""
    try:
        tpu_devices(TARGETS["v5e-8"])
    except Exception as e:  # noqa: BLE001 - any failure to load libtpu means the same to the reader
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        if "not installed" in first:
            return ('No TPU compiler here: libtpu is not installed (pip install "jax[tpu]", Linux x86-64 '
                    "only), so this TPU cell is skipped.")
        return f"No TPU compiler here ({type(e).__name__}: {first[:160]}), so this TPU cell is skipped."
    return None


@contextmanager
def compiling_for_tpu():
    """Wrap a cell that compiles for a TPU: where libtpu is missing, it prints one line and stops there.

    Only :class:`TPUCompilerUnavailable` (raised by :func:`target_devices` and :func:`target_mesh`) is
    caught; every other error propagates.
    """
    try:
        yield
    except TPUCompilerUnavailable as e:
        print(e)
