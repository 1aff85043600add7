"""GPU targets: NVIDIA nodes and clusters compiled for with no GPU, as TPU slices are in ``shardlab.hardware.targets``.

With JAX's CUDA plugin installed (``pip install "jax[cuda12-local]"``: ``jax-cuda12-plugin`` and
``jax-cuda12-pjrt``, without NVIDIA's libraries, Linux x86-64 only), XLA's GPU compiler runs on a machine
with no GPU and no driver. It needs what it would otherwise ask the GPU: a *target config*, a
``stream_executor.GpuTargetConfigProto`` in text form, listing the device's properties (streaming
multiprocessors, memory size and bandwidth, shared memory, compute capability). XLA's source keeps one per
GPU model (``xla/backends/gpu/target_config/specs/``, e.g. ``h100_sxm.txtpb``); :data:`GPUS` holds the
values of three of them, and :func:`target_config` writes the fields both JAX versions the book admits
read. Then ``jax.experimental.topologies.get_topology_desc(..., "cuda", target_config=...,
topology="1x<hosts>x<gpus per host>")`` describes the devices of a whole cluster (an id and a
``process_index``, the host, for each GPU), ``jax.make_mesh`` orders them, and ``jax.jit(...).lower(...)
.compile()`` returns XLA:GPU's program for them. Nothing runs; the program is read.

Where the plugin is missing, :func:`compiling_for_gpu` turns the cell into one printed line.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

from shardlab.hardware.chips import GPU_CHIPS, Chip
from shardlab.hardware.environment import cuda_plugin_installed, quiet_libtpu, skip_cuda_without_driver
from shardlab.hardware.registry import lookup

__all__ = ["GpuSpec", "GPUS", "SPEC_SOURCE", "GpuTarget", "GPU_TARGETS", "GPUCompilerUnavailable", "target_config",
           "gpu_compiler_missing", "compiling_for_gpu", "gpu_devices"]


#: Where the device facts come from: XLA's own target configs, one per GPU model.
SPEC_SOURCE = ("XLA, xla/backends/gpu/target_config/specs/ (h100_sxm.txtpb, h200.txtpb, b200.txtpb): "
               "https://github.com/openxla/xla/tree/main/xla/backends/gpu/target_config/specs")


@dataclass(frozen=True)
class GpuSpec:
    """The device facts XLA:GPU compiles against, as XLA's target config for the model lists them.

    ``name`` is the device's own name (``device_kind`` of its JAX devices); ``memory_bytes`` and
    ``memory_bandwidth`` (bytes/s) its HBM; ``cores`` its streaming multiprocessors;
    ``compute_capability`` (major, minor); ``l2_cache_bytes`` and ``clock_ghz`` as XLA lists them.
    """

    name: str
    cores: int
    memory_bytes: int
    memory_bandwidth: int
    l2_cache_bytes: int
    clock_ghz: float
    compute_capability: tuple[int, int]
    dnn_version: tuple[int, int]


#: Three GPU models, with the values of XLA's target configs for them (``SPEC_SOURCE``).
GPUS = {s.name: s for s in (
    GpuSpec("NVIDIA H100 80GB HBM3", cores=132, memory_bytes=84942979072, memory_bandwidth=3352320000000,
            l2_cache_bytes=52428800, clock_ghz=1.98, compute_capability=(9, 0), dnn_version=(8, 9)),
    GpuSpec("NVIDIA H200 141GB HBM3e", cores=132, memory_bytes=151397597184, memory_bandwidth=4800000000000,
            l2_cache_bytes=52428800, clock_ghz=1.98, compute_capability=(9, 0), dnn_version=(9, 10)),
    GpuSpec("NVIDIA B200", cores=148, memory_bytes=191514411008, memory_bandwidth=7672320000000,
            l2_cache_bytes=132644864, clock_ghz=1.965, compute_capability=(10, 0), dnn_version=(9, 7)),
)}


# Limits common to these models (the same in each of XLA's three files).
_COMMON = {"threads_per_block_limit": 1024, "threads_per_warp": 32, "shared_memory_per_block": 49152,
           "shared_memory_per_core": 233472, "threads_per_core_limit": 2048, "fpus_per_core": 128,
           "block_dim_limit_x": 2147483647, "block_dim_limit_y": 65535, "block_dim_limit_z": 65535,
           "shared_memory_per_block_optin": 232448, "registers_per_core_limit": 65536,
           "registers_per_block_limit": 65536}


def target_config(gpu) -> str:
    """The ``GpuTargetConfigProto`` text of ``gpu`` (a :class:`GpuSpec` or a key of :data:`GPUS`).

    The fields every JAX the book admits reads (newer XLA files add more, e.g. per-precision unit rates,
    which older plugins reject).
    """
    spec = _spec(gpu)
    fields = dict(_COMMON, core_count=spec.cores, memory_bandwidth=spec.memory_bandwidth,
                  l2_cache_size=spec.l2_cache_bytes, clock_rate_ghz=spec.clock_ghz,
                  device_memory_size=spec.memory_bytes)
    major, minor = spec.compute_capability
    lines = ["gpu_device_info {"] + [f"  {k}: {v}" for k, v in fields.items()]
    lines += ["  cuda_compute_capability {", f"    major: {major}", f"    minor: {minor}", "  }", "}",
              'platform_name: "CUDA"', "dnn_version_info {", f"  major: {spec.dnn_version[0]}",
              f"  minor: {spec.dnn_version[1]}", "}", f'device_description_str: "{spec.name}"']
    return "\n".join(lines) + "\n"


def _spec(gpu) -> GpuSpec:
    return lookup(gpu, "gpu", (GpuSpec,), ("", GPUS))


@dataclass(frozen=True)
class GpuTarget:
    """A named GPU cluster: ``hosts`` nodes of ``gpus_per_host`` GPUs of ``spec``, with its ``chip`` figures.

    The GPUs of one host share an NVLink domain (the node); hosts talk over the network between nodes
    (``shardlab.models.network``'s GPU part models both).
    """

    name: str
    spec: GpuSpec
    chip: Chip
    hosts: int
    gpus_per_host: int
    where: str

    def __post_init__(self):
        for field in ("hosts", "gpus_per_host"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GpuTarget: {field} must be a positive integer, got {value!r}")
        if not isinstance(self.spec, GpuSpec) or not isinstance(self.chip, Chip):
            raise ValueError(f"GpuTarget: spec must be a GpuSpec and chip a Chip, got {self.spec!r}, {self.chip!r}")

    @property
    def num_chips(self) -> int:
        return self.hosts * self.gpus_per_host

    @property
    def topology(self) -> str:
        """The ``topology`` argument of ``get_topology_desc``: one slice of hosts x GPUs per host."""
        return f"1x{self.hosts}x{self.gpus_per_host}"


_H100, _B200 = GPUS["NVIDIA H100 80GB HBM3"], GPUS["NVIDIA B200"]


#: The GPU clusters the book compiles for, nodes of 8 GPUs joined by NVLink and nodes joined by InfiniBand.
GPU_TARGETS = {t.name: t for t in (
    GpuTarget("h100-8", _H100, GPU_CHIPS["H100"], 1, 8, "one node of 8 H100 GPUs (NVLink 4 through NVSwitches)"),
    GpuTarget("h100-32", _H100, GPU_CHIPS["H100"], 4, 8, "4 nodes of 8 H100 GPUs, joined by InfiniBand"),
    GpuTarget("h100-256", _H100, GPU_CHIPS["H100"], 32, 8,
              "32 nodes of 8 H100 GPUs: one scalable unit of a DGX SuperPOD"),
    GpuTarget("b200-8", _B200, GPU_CHIPS["B200"], 1, 8, "one node of 8 B200 GPUs (NVLink 5)"),
    GpuTarget("b200-64", _B200, GPU_CHIPS["B200"], 8, 8, "8 nodes of 8 B200 GPUs, joined by InfiniBand"),
)}


class GPUCompilerUnavailable(RuntimeError):
    """JAX's CUDA plugin (XLA's GPU compiler) cannot be loaded in this Python: GPU programs cannot be compiled."""


@lru_cache(maxsize=None)
def _devices(target: GpuTarget) -> tuple:
    from jax.experimental import topologies

    skip_cuda_without_driver()      # else the plugin's version check fails where there is no driver
    with quiet_libtpu():
        return tuple(topologies.get_topology_desc(target.name, "cuda", target_config=target_config(target.spec),
                                                  topology=target.topology).devices)


@lru_cache(maxsize=None)
def gpu_compiler_missing() -> str | None:
    """``None`` when GPU programs can be compiled here; otherwise one line saying why not."""
    if not cuda_plugin_installed():
        return ('No GPU compiler here: JAX\'s CUDA plugin is not installed (pip install "jax[cuda12-local]", '
                "Linux x86-64 only), so this GPU cell is skipped.")
    try:
        _devices(GPU_TARGETS["h100-8"])
    except Exception as e:  # noqa: BLE001 - any failure to load the plugin means the same to the reader
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        return f"No GPU compiler here ({type(e).__name__}: {first[:160]}), so this GPU cell is skipped."
    return None


@contextmanager
def compiling_for_gpu():
    """Wrap a cell that compiles for a GPU: where the CUDA plugin is missing, it prints one line and stops.

    :class:`GPUCompilerUnavailable` (raised by ``gpu_devices``, and so by ``shardlab.target_devices``
    and ``shardlab.target_mesh`` on a GPU target) is caught. So is any other error, but only where the
    GPU compiler is missing: a cell that reads the programs an earlier GPU cell would have compiled then
    fails for that reason alone, and says so in the same line. Where the compiler is there, every other
    error is raised as usual.
    """
    try:
        yield
    except GPUCompilerUnavailable as e:
        print(e)
    except Exception:
        missing = gpu_compiler_missing()
        if missing is None:
            raise
        print(missing)


def _gpu_target(target) -> GpuTarget:
    return lookup(target, "target", (GpuTarget,), ("", GPU_TARGETS))


def gpu_devices(target) -> list:
    """The compile-only devices of a GPU target: ids ``0 .. n-1``, host by host, each with its ``process_index``.

    Raises :class:`GPUCompilerUnavailable` with a one-line reason where the CUDA plugin cannot be loaded.
    """
    t = _gpu_target(target)
    missing = gpu_compiler_missing()
    if missing:
        raise GPUCompilerUnavailable(missing)
    devices = list(_devices(t))
    assert len(devices) == t.num_chips == math.prod((t.hosts, t.gpus_per_host))
    return devices
