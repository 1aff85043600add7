"""Writes the data the sharding playground's script needs: ``jax.make_mesh``'s device order on TPU slices.

``jax.make_mesh`` orders a TPU slice's devices so that mesh neighbours are linked chips; the order depends
on the slice and the mesh shape. At build time, for every target in ``shardlab.hardware.tpus.TARGETS`` and every
mesh shape over all of its devices (up to four axes of size > 1; axes of size 1 do not change the order),
the order JAX picks on libtpu's description of that slice is recorded, or JAX's refusal of the shape.

Axes of size 1 do not change which axis ``jax.make_mesh`` cannot place either, only that axis's position in
the message (``logical_axis_index``). A refusal is stored once, as a template whose ``{axis}`` stands for
that position and ``axis`` for the refused axis among those of size > 1; every shape with axes of size 1
added (up to four axes in all) is refused at build time and checked against the template, and any message
the template does not give is stored whole under ``exact`` (keyed by the full shape, e.g. ``"1x8x8"``).

The result is a script (``_static/playground_topologies.js``), since a page opened from file:// cannot
``fetch`` a JSON file.
"""

from __future__ import annotations

import itertools
import json
import os
import re

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


def padded(sizes: tuple, most: int = 4):
    """`sizes` with axes of size 1 inserted anywhere, up to `most` axes in all: (full shape, positions of `sizes`)."""
    for length in range(len(sizes), most + 1):
        for places in itertools.combinations(range(length), len(sizes)):
            full = [1] * length
            for k, at in enumerate(places):
                full[at] = sizes[k]
            yield tuple(full), places


def _make_mesh(sizes, devices):
    """jax.make_mesh's device order for `sizes`, or its refusal as "Type: message"."""
    import jax

    from shardlab.hardware.environment import quiet_libtpu

    try:
        with quiet_libtpu():
            mesh = jax.make_mesh(sizes, tuple("abcd"[:len(sizes)]), devices=devices)
    except Exception as e:  # noqa: BLE001 - JAX's refusal is data for the page
        return None, f"{type(e).__name__}: {e}"
    return [int(d.id) for d in mesh.devices.flat], None


def refusal_entry(sizes: tuple, text: str, devices) -> dict:
    """The stored form of JAX's refusal of `sizes`: {text, axis, exact} (see the module's docstring)."""
    found = re.search(r"logical_axis_index (\d+)", text)
    entry = {"text": text, "axis": None, "exact": {}}
    if found:
        entry["axis"] = int(found.group(1))
        entry["text"] = text[:found.start(1)] + "{axis}" + text[found.end(1):]
    for full, places in padded(sizes):
        if full == sizes:
            continue
        _, message = _make_mesh(full, devices)
        expected = (entry["text"].replace("{axis}", str(places[entry["axis"]])) if entry["axis"] is not None
                    else entry["text"])
        if message != expected:
            entry["exact"]["x".join(map(str, full))] = message
    if not entry["exact"]:
        del entry["exact"]
    return entry


def topology_orders() -> dict:
    """{target name: {topology, where, devices, orders: [[ids]], meshes: {"2x4": index}, refused: {...}}}."""
    from shardlab.hardware.targets import target_devices
    from shardlab.hardware.tpus import TARGETS

    out = {}
    for name, target in TARGETS.items():
        devices = target_devices(name)
        n = len(devices)
        orders, meshes, refused = [], {}, {}
        shapes = [()] if n == 1 else [f for k in range(1, 5) for f in _factorizations(n, k)]
        for sizes in shapes:
            key = "x".join(map(str, sizes))
            order, message = _make_mesh(sizes or (1,), devices)
            if message is not None:
                refused[key] = refusal_entry(sizes, message, devices)
                continue
            if order not in orders:
                orders.append(order)
            meshes[key] = orders.index(order)
        out[name] = {"topology": target.topology, "where": target.where, "devices": n,
                     "orders": orders, "meshes": meshes, "refused": refused}
    return out


def write_data(app) -> None:
    if app.builder.format != "html":
        return
    from shardlab.hardware.tpus import tpu_compiler_missing

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
