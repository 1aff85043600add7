"""Writes the data the sharding playground's script needs: ``jax.make_mesh``'s device order on TPU slices.

``jax.make_mesh`` orders a TPU slice's devices so that mesh neighbours are linked chips; the order depends
on the slice and the mesh shape. At build time, for every target in ``shardlab.targets.TARGETS`` and every
mesh shape over all of its devices (up to four axes of size > 1; axes of size 1 do not change the order),
the order JAX picks on libtpu's description of that slice is recorded, or JAX's refusal of the shape.
The result is a script (``_static/playground_topologies.js``), since a page opened from file:// cannot
``fetch`` a JSON file.
"""

from __future__ import annotations

import json
import os

from sphinx.util import logging

logger = logging.getLogger(__name__)
FILENAME = "playground_topologies.js"


def _factorizations(n: int, k: int):
    """Ordered factorizations of n into k factors, each > 1."""
    if k == 1:
        if n > 1:
            yield (n,)
        return
    for d in range(2, n + 1):
        if n % d == 0:
            for rest in _factorizations(n // d, k - 1):
                yield (d, *rest)


def topology_orders() -> dict:
    """{target name: {topology, where, devices, orders: [[ids]], meshes: {"2x4": index}, refused: {...}}}."""
    import jax

    from shardlab.targets import TARGETS, quiet_libtpu, target_devices

    out = {}
    for name, target in TARGETS.items():
        devices = target_devices(name)
        n = len(devices)
        orders, meshes, refused = [], {}, {}
        shapes = [()] if n == 1 else [f for k in range(1, 5) for f in _factorizations(n, k)]
        for sizes in shapes:
            key = "x".join(map(str, sizes))
            try:
                with quiet_libtpu():
                    mesh = jax.make_mesh(sizes or (1,), tuple("abcd"[:len(sizes or (1,))]), devices=devices)
            except Exception as e:  # noqa: BLE001 - JAX's refusal is data for the page
                refused[key] = f"{type(e).__name__}: {e}"
                continue
            order = [int(d.id) for d in mesh.devices.flat]
            if order not in orders:
                orders.append(order)
            meshes[key] = orders.index(order)
        out[name] = {"topology": target.topology, "where": target.where, "devices": n,
                     "orders": orders, "meshes": meshes, "refused": refused}
    return out


def write_data(app) -> None:
    if app.builder.format != "html":
        return
    from shardlab.targets import tpu_compiler_missing

    missing = tpu_compiler_missing()
    data = {"jax": None, "targets": {}, "missing": missing}
    if missing is None:
        import jax

        data["jax"] = jax.__version__
        data["targets"] = topology_orders()
    else:
        logger.info("playground: %s", missing)
    static = os.path.join(app.outdir, "_static")
    os.makedirs(static, exist_ok=True)
    text = ("// Written at build time by book/_ext/playground_data.py: jax.make_mesh's device orders on TPU slices.\n"
            "window.SHARDLAB_TOPOLOGIES = " + json.dumps(data, separators=(",", ":")) + ";\n")
    with open(os.path.join(static, FILENAME), "w", encoding="utf-8") as f:
        f.write(text)


def setup(app):
    app.connect("builder-inited", write_data)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
