"""Device set-up: the one call at the top of every chapter.

With enough accelerator devices the chapters use them; otherwise they run on
simulated CPU devices, which JAX can only create before its backends start.
"""

from __future__ import annotations

import os

from shardlab.targets import quiet_libtpu, share_libtpu

with quiet_libtpu():    # some jaxlibs with the CUDA plugin log "no CUDA driver" as they load
    import jax

from shardlab.display import set_figure_defaults

DEFAULT_DEVICE_COUNT = 8


def _backends_started() -> bool:
    # JAX has no public query for this; the private one exists since 0.4.
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - layout of JAX changed
        return False
    return bool(xla_bridge.backends_are_initialized())


def _restart_kernel_error(found: list) -> RuntimeError:
    kinds = ", ".join(sorted({d.platform for d in found})) or "none"
    return RuntimeError(
        f"JAX has already started with {len(found)} device(s) ({kinds}), too few for this "
        "chapter, and the number of simulated CPU devices can only be set before JAX starts. "
        "Restart the kernel and run the set-up cell first, before any other JAX code."
    )


def _cuda_driver_present() -> bool:
    # A usable NVIDIA GPU needs both the driver's library and a GPU device node (/dev/nvidia0, ...; WSL2
    # exposes GPUs as /dev/dxg). A container with the library but no GPU counts as no driver: starting
    # the CUDA plugin there would only print its failed initialisation.
    import ctypes
    import glob

    if not (glob.glob("/dev/nvidia[0-9]*") or os.path.exists("/dev/dxg")):
        return False
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


def cuda_plugin_installed() -> bool:
    """Whether JAX's CUDA plugin (``jax-cuda12-plugin``) can be imported here."""
    import importlib.util

    try:
        return importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
    except ModuleNotFoundError:     # no jax_plugins package at all
        return False


def skip_cuda_without_driver() -> str | None:
    """Keep JAX's CUDA plugin from starting where no NVIDIA driver is installed; return what was chosen.

    With ``jax-cuda12-plugin`` installed (the book compiles for GPUs with it) and no driver, starting
    JAX's backends would print the plugin's failed version check (a traceback about cuDNN or CUDA)
    before falling back to the CPU. Where the plugin is installed, no driver is found and neither
    ``JAX_PLATFORMS`` nor ``jax_platforms`` says which platforms to start, this names them: the TPU
    and the CPU on a TPU host, else the CPU. The plugin still loads, so GPU programs still compile
    (``shardlab.gpu_targets``). Returns the platforms it set, or ``None`` where it changed nothing.
    Must run before JAX's backends start (``setup_devices`` calls it).
    """
    if jax.config.jax_platforms or _backends_started():
        return None
    if not cuda_plugin_installed() or _cuda_driver_present():
        return None
    try:
        from jax._src import hardware_utils   # private, in every JAX the book admits

        tpu_chips = hardware_utils.num_available_tpu_chips_and_device_id()[0]
    except Exception:  # noqa: BLE001 - if JAX cannot tell, assume no TPU
        tpu_chips = 0
    platforms = "tpu,cpu" if tpu_chips else "cpu"
    jax.config.update("jax_platforms", platforms)
    return platforms


def _brief_errors() -> None:
    # In IPython, an error shows as its type and message: the chapters' deliberate errors stay a few
    # lines instead of pages of JAX's internal frames, and print no path of the machine that ran them.
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to set
        return
    shell = get_ipython()
    if shell is not None and hasattr(shell, "InteractiveTB"):
        shell.InteractiveTB.set_mode(mode="Minimal")


def setup_devices(n: int = DEFAULT_DEVICE_COUNT) -> list:
    """Return ``n`` devices for the chapter to build meshes from.

    * At least ``n`` accelerator devices (TPU, GPU): the first ``n`` of them.
    * Otherwise (a laptop, one GPU, a single TPU chip): ``n`` simulated CPU
      devices, announced by one printed line.

    Must run before any other JAX computation in the process; if JAX already
    started with fewer than ``n`` devices, raises ``RuntimeError`` asking for a
    kernel restart. In IPython (Jupyter, Colab) it also switches errors to their
    type and message alone (``%xmode minimal``; ``%xmode context`` brings full
    tracebacks back) and shows matplotlib figures at twice the pixels of their
    displayed size, with alt text (``shardlab.display.set_figure_defaults``).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"setup_devices: n must be a positive integer number of devices, got {n!r}")
    _brief_errors()
    set_figure_defaults()  # the chapters' own matplotlib figures, sharp and sized like shardlab's

    if _backends_started():
        found = jax.devices()
        if len(found) >= n:
            return list(found[:n])
        raise _restart_kernel_error(found)

    # Harmless when an accelerator is present: it only sizes the CPU backend.
    jax.config.update("jax_num_cpu_devices", n)
    skip_cuda_without_driver()          # the CUDA plugin's failed checks where there is no GPU
    share_libtpu()                      # several notebooks may compile for a TPU at once
    with quiet_libtpu():                # libtpu's start-up warnings where there is no TPU
        found = jax.devices()
    platform = found[0].platform
    if platform == "cpu":
        print(f"No accelerator found: using {n} simulated CPU devices.")
        return list(found[:n])
    if len(found) >= n:
        return list(found[:n])

    # Too few accelerators: restart JAX on the CPU alone, so that default
    # placement, jax.devices() and jax.make_mesh all agree on the same devices.
    from jax.extend.backend import clear_backends

    clear_backends()
    jax.config.update("jax_platforms", "cpu")
    jax.config.update("jax_num_cpu_devices", n)
    cpus = jax.devices()
    print(
        f"Found {len(found)} {platform.upper()} device(s), fewer than {n}: "
        f"using {n} simulated CPU devices instead."
    )
    return list(cpus[:n])
