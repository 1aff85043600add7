"""JAX's answers for the sharding playground's test, computed in a process of their own.

Run as ``python playground_reference.py < request.json > answers.json``. The request is
``{"layouts": [case, ...], "reshards": [group, ...]}``:

* a layout case ``{"names", "sizes", "order", "shape", "spec_text", "dtype"}`` (``order``: ``"list"`` or a target
  of ``shardlab.hardware.tpus.TARGETS``; ``spec_text``: a spec as a reader types it) is answered with the device ids in
  mesh order, ``devices_indices_map`` in that order (``[start, stop]`` per dimension, null for ``slice(None)``),
  the pieces (the devices holding each distinct index tuple, in mesh order) and ``str(jax.typeof(x))`` of an
  argument traced under Explicit axes; or with JAX's refusal ``[exception class, message]`` (``error``);
  or, where ``jax.make_mesh`` refuses the mesh on that slice, ``mesh_error`` ("Class: message"); or, where
  Python does not accept the text, ``rejected`` (Python's error). The text is read as Python reads it after
  ``import jax`` and ``from jax.sharding import PartitionSpec as P`` (``PartitionSpec`` also named), with
  warnings as errors: as an expression giving a ``PartitionSpec``, else as the arguments of ``P(...)``;
* a reshard group ``{"target", "names", "sizes", "shape", "pairs"}`` (``target``: ``"cpu"`` or a TPU target) is
  answered with, per pair of specs, ``{"kinds", "bytes"}``: the collective kinds ``shardlab.programs.collectives.collectives_in``
  reads from ``jax.jit(lambda x: x, out_shardings=NamedSharding(mesh, second))`` compiled for an input laid out by
  the first, and the bytes per device it models for them (``total_bytes_per_device``: the ring model, all-to-all
  as a direct exchange, as the page counts).

Devices: meshes of up to 4096 devices need that many devices. They are libtpu's compile-only descriptions of
a TPU v5p slice of 16 x 16 x 16 chips (ids 0..4095, nothing is allocated or run): list order takes the first
n by id, a TPU order is ``jax.make_mesh`` over the named target's devices. CPU programs use 8 CPU devices.
"""

from __future__ import annotations

import json
import math
import sys
import warnings

import jax

jax.config.update("jax_num_cpu_devices", 8)

import numpy as np  # noqa: E402
from jax.sharding import AxisType, Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.programs.collectives import collectives_in
from shardlab.hardware.chips import CHIPS
from shardlab.hardware.environment import quiet_libtpu
from shardlab.hardware.targets import target_devices
from shardlab.hardware.tpus import Target, tpu_devices

BIG = Target("v5p-8192", "v5p:16x16x16", CHIPS["TPU v5p"], "4096 compile-only devices for the test")


def _spec(entries):
    return P(*[tuple(e) if isinstance(e, list) else e for e in entries])


def _mesh(names, sizes, order):
    explicit = (AxisType.Explicit,) * len(names)
    if order == "list":
        with quiet_libtpu():
            devices = sorted(tpu_devices(BIG), key=lambda d: d.id)[:math.prod(sizes)]
        return Mesh(np.array(devices, dtype=object).reshape(sizes), tuple(names), axis_types=explicit)
    with quiet_libtpu():
        return jax.make_mesh(tuple(sizes), tuple(names), devices=target_devices(order), axis_types=explicit)


NAMESPACE = {"__builtins__": {}, "jax": jax, "P": P, "PartitionSpec": P}


def python_spec(text):
    """("spec", P) or ("refused", exception) where P(...) raises, or ("rejected", Python's error)."""
    why = None
    for src in (text, f"P({text})"):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                code = compile(src, "<spec>", "eval")
            value = eval(code, NAMESPACE)  # noqa: S307 - the test's own texts, with no builtins
        except ValueError as e:          # P refused its entries
            return "refused", e
        except (SyntaxError, NameError, AttributeError, TypeError) as e:
            why = why or e
            continue
        if isinstance(value, P):
            return "spec", value
    return "rejected", why


def layout_answer(case):
    try:
        mesh = _mesh(case["names"], case["sizes"], case["order"])
    except Exception as e:  # noqa: BLE001 - jax.make_mesh's refusal of the shape on that slice is the answer
        return {"mesh_error": f"{type(e).__name__}: {e}"}
    shape = tuple(case["shape"])
    answer = {"ids": [int(d.id) for d in mesh.devices.flat]}
    kind, spec = python_spec(case["spec_text"])
    if kind == "rejected":
        answer["rejected"] = f"{type(spec).__name__}: {spec}"
        return answer
    try:
        if kind == "refused":
            raise spec
        sharding = NamedSharding(mesh, spec)
        sharding.check_compatible_aval(shape)
        index_map = sharding.devices_indices_map(shape)
    except Exception as e:  # noqa: BLE001 - the refusal is the answer
        answer["error"] = [type(e).__name__, str(e)]
        return answer
    answer["indices"] = [[None if s == slice(None) else [s.start, s.stop] for s in index_map[d]]
                         for d in mesh.devices.flat]
    pieces = {}
    for d, row in zip(mesh.devices.flat, answer["indices"]):
        pieces.setdefault(json.dumps(row), []).append(int(d.id))
    answer["pieces"] = list(pieces.values())
    seen = {}

    def f(x):
        seen["type"] = str(jax.typeof(x))
        return x

    jax.jit(f).trace(jax.ShapeDtypeStruct(shape, np.dtype(case["dtype"]) if case["dtype"] != "bfloat16"
                                          else jax.numpy.bfloat16, sharding=sharding))
    answer["typeof"] = seen["type"]
    return answer


def reshard_answers(group):
    names, sizes = tuple(group["names"]), tuple(group["sizes"])
    if group["target"] == "cpu":
        devices = np.array(jax.devices("cpu")[:math.prod(sizes)], dtype=object).reshape(sizes)
        mesh = Mesh(devices, names, axis_types=(AxisType.Explicit,) * len(names))
    else:
        mesh = _mesh(names, sizes, group["target"])
    out = []
    for first, second in group["pairs"]:
        x = jax.ShapeDtypeStruct(tuple(group["shape"]), np.float32, sharding=NamedSharding(mesh, _spec(first)))
        f = jax.jit(lambda x: x, out_shardings=NamedSharding(mesh, _spec(second)))
        with quiet_libtpu():
            report = collectives_in(f, x)
        out.append({"kinds": sorted(report.kinds()), "bytes": float(report.total_bytes_per_device)})
    return out


def main():
    request = json.load(sys.stdin)
    json.dump({"layouts": [layout_answer(c) for c in request.get("layouts", [])],
               "reshards": [reshard_answers(g) for g in request.get("reshards", [])]}, sys.stdout)


if __name__ == "__main__":
    main()
