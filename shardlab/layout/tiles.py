"""Layout maths: which part of an array each device of a mesh holds.

A mesh is a grid of devices with named axes; a PartitionSpec says, for each
dimension of an array, which mesh axes split it. This module computes the
result of that pairing with numpy alone (it imports JAX only to read a JAX
object it is given), so it is fast enough for meshes of thousands of devices.

The rule, the same one ``NamedSharding.devices_indices_map`` follows: a
dimension whose entry is ``(a1, a2, ...)`` is cut into ``size(a1) * size(a2) *
...`` equal pieces, and a device takes the piece whose number is its mesh
coordinates along ``a1, a2, ...`` read as a mixed-radix number with ``a1`` the
most significant digit. Mesh axes that no dimension uses replicate the tiles.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from functools import cached_property

import numpy as np

__all__ = ["Layout", "tile_map", "layout_of", "format_spec", "format_mesh"]


# --------------------------------------------------------------------------------------------
# Input normalisation (every ValueError names the argument it is about)


def _is_int(v) -> bool:
    return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_))


def _jax_attr(module: str, name: str):
    """A JAX class if JAX is already imported, else None (we never import JAX ourselves)."""
    mod = sys.modules.get(module)
    return getattr(mod, name, None) if mod is not None else None


def _is_jax_mesh(mesh) -> bool:
    for name in ("Mesh", "AbstractMesh"):
        cls = _jax_attr("jax.sharding", name)
        if cls is not None and isinstance(mesh, cls):
            return True
    return False


def _mesh_from_jax(mesh):
    names = tuple(mesh.axis_names)
    sizes = tuple(int(s) for s in mesh.axis_sizes)
    ids = None
    abstract = _jax_attr("jax.sharding", "AbstractMesh")
    if abstract is None or not isinstance(mesh, abstract):
        ids = np.vectorize(lambda d: d.id, otypes=[np.int64])(mesh.devices).reshape(sizes)
    return names, sizes, ids


def normalise_mesh(mesh):
    """-> (axis names, axis sizes, device ids from the mesh or None)."""
    if _is_jax_mesh(mesh):
        return _mesh_from_jax(mesh)
    if isinstance(mesh, Layout):
        return mesh.mesh_axes, mesh.mesh_sizes, mesh.device_ids
    if isinstance(mesh, Mapping):
        pairs = list(mesh.items())
    elif isinstance(mesh, Sequence) and not isinstance(mesh, (str, bytes)):
        pairs = list(mesh)
        for p in pairs:
            if not (isinstance(p, Sequence) and not isinstance(p, (str, bytes)) and len(p) == 2):
                raise ValueError(
                    "mesh: expected a dict {axis name: size}, a sequence of (name, size) pairs or a "
                    f"jax.sharding.Mesh; got the entry {p!r} in {mesh!r}")
    else:
        raise ValueError(
            "mesh: expected a dict {axis name: size}, a sequence of (name, size) pairs or a "
            f"jax.sharding.Mesh, got {type(mesh).__name__} {mesh!r}")
    names, sizes = [], []
    for name, size in pairs:
        if not isinstance(name, str) or not name:
            raise ValueError(f"mesh: axis names must be non-empty strings, got {name!r}")
        if name in names:
            raise ValueError(f"mesh: axis name {name!r} appears twice in {mesh!r}")
        if not _is_int(size) or size < 1:
            raise ValueError(f"mesh: the size of axis {name!r} must be a positive integer, got {size!r}")
        names.append(name)
        sizes.append(int(size))
    return tuple(names), tuple(sizes), None


def _normalise_device_ids(device_ids, sizes) -> np.ndarray:
    n = math.prod(sizes)
    if device_ids is None:
        return np.arange(n, dtype=np.int64).reshape(sizes)
    try:
        arr = np.asarray(device_ids)
    except Exception as e:  # ragged nested lists
        raise ValueError(f"device_ids: expected {n} integer device ids, got {device_ids!r}") from e
    if arr.dtype == object and arr.size and hasattr(arr.flat[0], "id"):
        arr = np.vectorize(lambda d: d.id, otypes=[np.int64])(arr)  # jax Device objects
    if arr.size != n:
        raise ValueError(f"device_ids: the mesh of shape {tuple(sizes)} has {n} devices, but "
                         f"{arr.size} device ids were given")
    if arr.ndim > 1 and arr.shape != tuple(sizes):
        raise ValueError(f"device_ids: shape {arr.shape} does not match the mesh shape {tuple(sizes)}")
    if arr.size and not (np.issubdtype(arr.dtype, np.integer) and not np.issubdtype(arr.dtype, np.bool_)):
        raise ValueError(f"device_ids: expected integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64).reshape(sizes)
    if arr.size and arr.min() < 0:
        raise ValueError(f"device_ids: ids must be non-negative, got {int(arr.min())}")
    uniq, counts = np.unique(arr, return_counts=True)
    if (counts > 1).any():
        raise ValueError(f"device_ids: each device may appear once; repeated: {uniq[counts > 1].tolist()}")
    return arr


def _normalise_shape(shape) -> tuple[int, ...]:
    if _is_int(shape):
        shape = (shape,)
    if not isinstance(shape, Sequence) or isinstance(shape, (str, bytes)):
        raise ValueError(f"shape: expected a tuple of non-negative integers, got {shape!r}")
    for s in shape:
        if not _is_int(s) or s < 0:
            raise ValueError(f"shape: expected a tuple of non-negative integers, got {tuple(shape)!r}")
    return tuple(int(s) for s in shape)


def _spec_entries(spec) -> tuple:
    """The raw entries of a PartitionSpec, tuple or list (None means P())."""
    if spec is None:
        return ()
    pspec = _jax_attr("jax.sharding", "PartitionSpec")
    if pspec is not None and isinstance(spec, pspec):
        if getattr(spec, "unreduced", None) or getattr(spec, "reduced", None):
            raise ValueError(f"spec: {spec} has unreduced/reduced axes, which hold partial values; "
                             "only the layout of a fully reduced array is described here")
        return tuple(spec)
    if isinstance(spec, (str, bytes)) or not isinstance(spec, Sequence):
        raise ValueError("spec: expected a PartitionSpec or a tuple of entries (None, an axis name or "
                         f"a tuple of axis names), got {spec!r}")
    return tuple(spec)


def _normalise_spec(spec, names, ndim) -> tuple[tuple[str, ...], ...]:
    entries = _spec_entries(spec)
    if len(entries) > ndim:
        raise ValueError(f"spec: {format_spec(_loose(entries))} has {len(entries)} entries, more than the "
                         f"{ndim} dimension(s) of the array")
    out, used = [], {}
    for dim, entry in enumerate(entries):
        if entry is None:
            axes = ()
        elif isinstance(entry, str):
            axes = (entry,)
        elif isinstance(entry, (tuple, list)):
            axes = tuple(entry)
        else:
            raise ValueError(f"spec: entry {dim} must be None, an axis name or a tuple of axis names, "
                             f"got {entry!r}")
        for a in axes:
            if not isinstance(a, str):
                raise ValueError(f"spec: entry {dim} must be None, an axis name or a tuple of axis names, "
                                 f"got {entry!r}")
            if a not in names:
                raise ValueError(f"spec: unknown mesh axis {a!r} in entry {dim}; the mesh has axes "
                                 f"{', '.join(map(repr, names)) or 'none'}")
            if a in used:
                where = "twice in entry %d" % dim if used[a] == dim else f"in entries {used[a]} and {dim}"
                raise ValueError(f"spec: mesh axis {a!r} is used {where}; each axis may split at most "
                                 "one dimension, once")
            used[a] = dim
        out.append(axes)
    out += [()] * (ndim - len(out))
    return tuple(out)


def _loose(entries):
    # For error messages only: entries as a tuple-of-axis tuples, whatever they are.
    return tuple(() if e is None else (e,) if isinstance(e, str) else tuple(e) if isinstance(e, (tuple, list))
                 else (repr(e),) for e in entries)


# --------------------------------------------------------------------------------------------
# Formatting


def format_spec(spec) -> str:
    """``(('x',), (), ('x', 'y'))`` -> ``"P('x', None, ('x', 'y'))"`` (the way JAX prints it)."""
    parts = []
    for axes in spec:
        axes = tuple(axes) if axes is not None else ()
        parts.append("None" if not axes else repr(axes[0]) if len(axes) == 1 else
                     "(" + ", ".join(map(repr, axes)) + ")")
    return "P(" + ", ".join(parts) + ")"


def format_mesh(axes, sizes) -> str:
    """``('x', 'y'), (2, 4)`` -> ``"{x: 2, y: 4}"``."""
    return "{" + ", ".join(f"{a}: {s}" for a, s in zip(axes, sizes)) + "}"


# --------------------------------------------------------------------------------------------
# The result


class Layout:
    """Where every tile of an array lives on a mesh (immutable; build it with ``tile_map``).

    Attributes: ``shape``, ``mesh_axes``, ``mesh_sizes``, ``spec`` (one tuple of axis names per
    dimension, ``()`` when the dimension is not split), ``device_ids`` (int array shaped like the
    mesh), ``memory_kind`` (None when not given).
    """

    __slots__ = ("shape", "mesh_axes", "mesh_sizes", "spec", "device_ids", "memory_kind", "__dict__")

    def __init__(self, shape, mesh_axes, mesh_sizes, spec, device_ids, memory_kind=None):
        # Private: inputs are already validated by tile_map.
        ids = np.array(device_ids, dtype=np.int64)
        ids.flags.writeable = False
        for k, v in (("shape", tuple(shape)), ("mesh_axes", tuple(mesh_axes)),
                     ("mesh_sizes", tuple(mesh_sizes)), ("spec", tuple(map(tuple, spec))),
                     ("device_ids", ids), ("memory_kind", memory_kind)):
            object.__setattr__(self, k, v)

    def __setattr__(self, name, value):
        if name in Layout.__slots__:
            raise AttributeError(f"Layout is immutable; cannot set {name!r}")
        object.__setattr__(self, name, value)  # cached_property storage

    # -- derived, all vectorised over devices ------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def num_devices(self) -> int:
        return int(self.device_ids.size)

    @property
    def mesh(self) -> dict:
        """The mesh, as a dict ``{axis name: size}``."""
        return dict(zip(self.mesh_axes, self.mesh_sizes))

    @cached_property
    def shards(self) -> tuple[int, ...]:
        """Number of pieces along each dimension."""
        size = dict(zip(self.mesh_axes, self.mesh_sizes))
        return tuple(math.prod(size[a] for a in axes) for axes in self.spec)

    @cached_property
    def tile_shape(self) -> tuple[int, ...]:
        """Shape of the block each device holds."""
        return tuple(s // k for s, k in zip(self.shape, self.shards))

    @cached_property
    def replication(self) -> int:
        """How many devices hold each tile (the same number for every tile)."""
        return self.num_devices // math.prod(self.shards)

    @cached_property
    def device_tiles(self) -> np.ndarray:
        """Each device's tile coordinates, an int array ``(num_devices, ndim)`` with devices in mesh
        order (aligned with ``device_ids.ravel()``)."""
        n = self.num_devices
        coords = np.unravel_index(np.arange(n), self.mesh_sizes) if self.mesh_sizes else ()
        pos = {a: i for i, a in enumerate(self.mesh_axes)}
        out = np.zeros((n, self.ndim), dtype=np.int64)
        for d, axes in enumerate(self.spec):
            for a in axes:  # mixed radix, first axis most significant
                out[:, d] = out[:, d] * self.mesh_sizes[pos[a]] + coords[pos[a]]
        out.flags.writeable = False
        return out

    @cached_property
    def tile_holders(self) -> np.ndarray:
        """The device ids holding each tile, an int array shaped ``(*shards, replication)``, holders in
        mesh order."""
        flat_tile = (np.ravel_multi_index(self.device_tiles.T, self.shards) if self.ndim
                     else np.zeros(self.num_devices, dtype=np.int64))
        order = np.argsort(flat_tile, kind="stable")  # stable: keeps mesh order among holders
        out = self.device_ids.ravel()[order].reshape(*self.shards, self.replication)
        out.flags.writeable = False
        return out

    def mesh_coords(self, axis: str) -> np.ndarray:
        """Every device's coordinate along mesh axis ``axis``, shaped like the mesh."""
        if axis not in self.mesh_axes:
            raise ValueError(f"axis: unknown mesh axis {axis!r}; the mesh has axes {self.mesh_axes}")
        i = self.mesh_axes.index(axis)
        shape = [1] * len(self.mesh_sizes)
        shape[i] = self.mesh_sizes[i]
        return np.broadcast_to(np.arange(self.mesh_sizes[i]).reshape(shape), self.mesh_sizes)

    # -- the contract's dictionaries -----------------------------------------------------------
    def indices(self) -> dict:
        """{device id: tuple of slices}, equal to ``NamedSharding.devices_indices_map`` keyed by id
        (a dimension cut into one piece is ``slice(None)``, as JAX writes it)."""
        ids = self.device_ids.ravel().tolist()
        per_dim = []
        for d, (k, t) in enumerate(zip(self.shards, self.tile_shape)):
            if k == 1:
                per_dim.append([slice(None)] * len(ids))
            else:
                table = [slice(i * t, (i + 1) * t) for i in range(k)]
                per_dim.append([table[i] for i in self.device_tiles[:, d].tolist()])
        return dict(zip(ids, zip(*per_dim))) if per_dim else {i: () for i in ids}

    def tile_of(self) -> dict:
        """{device id: tile grid coordinate tuple}."""
        return dict(zip(self.device_ids.ravel().tolist(), map(tuple, self.device_tiles.tolist())))

    def holders(self) -> dict:
        """{tile grid coordinate: tuple of device ids holding it, in mesh order}."""
        h = self.tile_holders.reshape(-1, self.replication).tolist()
        return dict(zip(np.ndindex(*self.shards), map(tuple, h)))

    def tile_slices(self, tile) -> tuple:
        """The index ranges (a tuple of slices with explicit bounds) of tile ``tile``."""
        tile = tuple(tile)
        if len(tile) != self.ndim or any(not 0 <= i < k for i, k in zip(tile, self.shards)):
            raise ValueError(f"tile: expected a coordinate in the tile grid {self.shards}, got {tile!r}")
        return tuple(slice(i * t, (i + 1) * t) for i, t in zip(tile, self.tile_shape))

    # -- text ---------------------------------------------------------------------------------
    def spec_str(self) -> str:
        return format_spec(self.spec)

    def mesh_str(self) -> str:
        return format_mesh(self.mesh_axes, self.mesh_sizes)

    def describe(self) -> str:
        """E.g. ``"P('x', None) on mesh {x: 2, y: 4}, shape (8, 8)"``."""
        s = f"{self.spec_str()} on mesh {self.mesh_str()}, shape {self.shape}"
        if self.memory_kind not in (None, "device"):
            s += f", memory {self.memory_kind}"
        return s

    def __repr__(self):
        return f"Layout({self.describe()})"

    def _key(self):
        return (self.shape, self.mesh_axes, self.mesh_sizes, self.spec, self.device_ids.tobytes(),
                self.memory_kind)

    def __eq__(self, other):
        return isinstance(other, Layout) and self._key() == other._key()

    def __hash__(self):
        return hash(self._key())


# --------------------------------------------------------------------------------------------
# Constructors


def tile_map(mesh, spec, shape, *, device_ids=None, memory_kind=None) -> Layout:
    """Lay an array of ``shape`` out on ``mesh`` according to ``spec``.

    mesh: ``{axis name: size}`` (ordered, any rank), a sequence of ``(name, size)`` pairs, or a
    ``jax.sharding.Mesh`` / ``AbstractMesh`` (a Mesh brings its device ids).
    spec: a ``PartitionSpec`` or a tuple/list of entries, each None, an axis name or a tuple of
    axis names; fewer entries than dimensions leave the rest unsplit.
    shape: the array's shape (any rank). device_ids: the ids in mesh order, flat or shaped like the
    mesh (default ``0..n-1``; overrides a Mesh's own devices). memory_kind: recorded and shown.

    Raises ValueError naming the argument for an unknown axis, an axis used twice, a spec longer
    than the rank, a dimension its shard count does not divide, non-positive sizes, bad ids.
    """
    names, sizes, mesh_ids = normalise_mesh(mesh)
    shape = _normalise_shape(shape)
    norm = _normalise_spec(spec, names, len(shape))
    size = dict(zip(names, sizes))
    for d, (n, axes) in enumerate(zip(shape, norm)):
        k = math.prod(size[a] for a in axes)
        if n % k:
            raise ValueError(f"shape: dimension {d} has size {n}, which its {k} shards (mesh axes "
                             f"{', '.join(map(repr, axes))}) do not divide evenly; "
                             f"spec {format_spec(norm)}, mesh {format_mesh(names, sizes)}")
    if memory_kind is not None and not isinstance(memory_kind, str):
        raise ValueError(f"memory_kind: expected a string such as 'device' or 'pinned_host', got {memory_kind!r}")
    ids = _normalise_device_ids(device_ids if device_ids is not None else mesh_ids, sizes)
    return Layout(shape, names, sizes, norm, ids, memory_kind)


def layout_of(x, shape=None) -> Layout:
    """The Layout of a ``jax.Array`` (or anything with ``.sharding`` and ``.shape``, such as a
    ``ShapeDtypeStruct``), or of a JAX sharding together with ``shape``.

    NamedSharding (over a Mesh or AbstractMesh) and SingleDeviceSharding are understood.
    """
    sharding = x
    if hasattr(x, "sharding") and hasattr(x, "shape"):
        sharding = x.sharding
        if shape is None:
            shape = tuple(x.shape)
    if sharding is None:
        raise ValueError(f"x: {type(x).__name__} carries no sharding")
    base = _jax_attr("jax.sharding", "Sharding")
    if base is None or not isinstance(sharding, base):
        raise ValueError(f"x: expected a jax.Array, or a NamedSharding / SingleDeviceSharding with shape=..., "
                         f"got {type(x).__name__}")
    if shape is None:
        raise ValueError(f"shape: required when x is a sharding ({type(sharding).__name__}), not an array")
    memory_kind = getattr(sharding, "memory_kind", None)
    named = _jax_attr("jax.sharding", "NamedSharding")
    single = _jax_attr("jax.sharding", "SingleDeviceSharding")
    if named is not None and isinstance(sharding, named):
        return tile_map(sharding.mesh, sharding.spec, shape, memory_kind=memory_kind)
    if single is not None and isinstance(sharding, single):
        (dev,) = sharding.device_set
        return tile_map({}, (), shape, device_ids=np.array(dev.id), memory_kind=memory_kind)
    raise ValueError(f"x: expected a jax.Array or a NamedSharding / SingleDeviceSharding, got "
                     f"{type(sharding).__name__}")
