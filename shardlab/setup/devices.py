"""Device set-up: the one call at the top of every chapter.

With enough accelerator devices the chapters use them; otherwise they run on
simulated CPU devices, which JAX can only create before its backends start.
"""

from __future__ import annotations

from shardlab.hardware.environment import backends_started, quiet_libtpu, share_libtpu, skip_cuda_without_driver

with quiet_libtpu():    # some jaxlibs with the CUDA plugin log "no CUDA driver" as they load
    import jax

from shardlab.pictures.display import set_figure_defaults

__all__ = ["setup_devices", "DEFAULT_DEVICE_COUNT"]


DEFAULT_DEVICE_COUNT = 8


def _restart_kernel_error(found: list) -> RuntimeError:
    kinds = ", ".join(sorted({d.platform for d in found})) or "none"
    return RuntimeError(
        f"JAX has already started with {len(found)} device(s) ({kinds}), too few for this "
        "chapter, and the number of simulated CPU devices can only be set before JAX starts. "
        "Restart the kernel and run the set-up cell first, before any other JAX code."
    )


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
    displayed size, with alt text (``shardlab.pictures.display.set_figure_defaults``).
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"setup_devices: n must be a positive integer number of devices, got {n!r}")
    _brief_errors()
    set_figure_defaults()  # the chapters' own matplotlib figures, sharp and sized like shardlab's

    if backends_started():
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
