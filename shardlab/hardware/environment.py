"""The process's environment for compiling: libtpu and JAX's CUDA plugin on a machine that may have neither chip.

libtpu started where there is no TPU writes warnings about unset TPU variables to the process's stderr,
and takes a lock that keeps a second process from loading it; JAX's CUDA plugin started where there is
no NVIDIA driver prints its failed checks. The functions here quiet the first, lift the lock where there
is no chip to guard, and keep the plugin from starting where there is no driver. None of them knows a
chip or a target: :mod:`shardlab.hardware.tpus` and :mod:`shardlab.hardware.gpus` use them.
"""

from __future__ import annotations

import os
import re
import sys
import tempfile
from contextlib import contextmanager

__all__ = ["backends_started", "cuda_plugin_installed", "skip_cuda_without_driver", "share_libtpu", "quiet_libtpu",
           "libtpu_noise"]


def backends_started() -> bool:
    """Whether JAX's backends have started in this process (after which devices are fixed)."""
    # JAX has no public query for this; the private one exists since 0.4.
    try:
        from jax._src import xla_bridge
    except ImportError:  # pragma: no cover - layout of JAX changed
        return False
    return bool(xla_bridge.backends_are_initialized())


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
    (``shardlab.hardware.gpus``). Returns the platforms it set, or ``None`` where it changed nothing.
    Must run before JAX's backends start (``setup_devices`` calls it).
    """
    import jax

    if jax.config.jax_platforms or backends_started():
        return None
    if not cuda_plugin_installed() or _cuda_driver_present():
        return None
    try:
        from jax._src import hardware_utils  # private, in every JAX the book admits

        tpu_chips = hardware_utils.num_available_tpu_chips_and_device_id()[0]
    except Exception:  # noqa: BLE001 - if JAX cannot tell, assume no TPU
        tpu_chips = 0
    platforms = "tpu,cpu" if tpu_chips else "cpu"
    jax.config.update("jax_platforms", platforms)
    return platforms


# ---------------------------------------------------------------------------------------------------------
# libtpu started on a machine without a TPU writes warnings about unset TPU environment variables straight
# to the process's stderr (file descriptor 2), which a notebook shows. They say nothing about compiling.


_LIBTPU_NOISE = re.compile(r"could not determine TPU|Logging before InitGoogle|Source Location Trace"
                           r"|^learning/|libtpu_init_utils|ALLOW_MULTIPLE_LIBTPU_LOAD is set|^\s*$"
                           # JAX's CUDA plugin, loaded where there is no GPU (shardlab.hardware.gpus)
                           r"|cudart_stub\.cc.*Could not find cuda drivers"
                           r"|All log messages before absl::InitializeLog\(\) is called")


def share_libtpu() -> None:
    """Let several processes load libtpu where this machine has no TPU chip to guard.

    libtpu takes a lock file (/tmp/libtpu_lockfile) so that one process owns a host's TPU chips; a second
    process, e.g. another notebook compiling for a TPU, would fail to load it. With no chip here there is
    nothing to own, and libtpu's own switch ``ALLOW_MULTIPLE_LIBTPU_LOAD`` lifts the lock. On a TPU host
    nothing changes. Must run before libtpu loads (``setup_devices`` calls it).
    """
    try:
        from jax._src import hardware_utils  # private, in every JAX the book admits

        chips = hardware_utils.num_available_tpu_chips_and_device_id()[0]
    except Exception:  # noqa: BLE001 - if JAX cannot tell, leave libtpu's lock as it is
        return
    if chips == 0:
        os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")


@contextmanager
def quiet_libtpu():
    """Run the block with file descriptor 2 captured; pass on every line but libtpu's start-up warnings.

    Also dropped: the CUDA plugin's note that this machine has no CUDA driver (it compiles anyway).
    """
    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError):      # no descriptor 2 to capture: nothing to hide
        yield
        return
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            kept = [line for line in captured.read().decode(errors="replace").splitlines()
                    if not _LIBTPU_NOISE.search(line)]
            if kept:
                print("\n".join(kept), file=sys.stderr)


def libtpu_noise(line: str) -> bool:
    """Whether a line written to stderr is libtpu's start-up noise (or the CUDA plugin's "no driver")."""
    return bool(_LIBTPU_NOISE.search(line))
