"""shardlab.layout: the layout maths agree with JAX, case by case and on random meshes and specs."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import shardlab
from shardlab.layout.tiles import Layout, format_spec, layout_of, tile_map

DEVS = shardlab.setup_devices(8)  # before any other JAX use in this worker

import jax  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

AXES = ("a", "b", "c")


def jax_indices(mesh, spec, shape):
    return {d.id: idx for d, idx in NamedSharding(mesh, spec).devices_indices_map(shape).items()}


def jax_mesh(sizes, names, order=None):
    devs = [DEVS[i] for i in (order or range(8))][: int(np.prod(sizes))]
    return Mesh(np.array(devs).reshape(sizes), names)


# --------------------------------------------------------------------------------------------
# Named cases


def test_multi_axis_entry_order_matters_on_2x2():
    mesh = jax_mesh((2, 2), ("a", "b"))
    ab = tile_map(mesh, P(("a", "b"), None), (8, 2))
    ba = tile_map(mesh, P(("b", "a"), None), (8, 2))
    rows = lambda lay: {d: (s[0].start, s[0].stop) for d, s in lay.indices().items()}
    # ('a', 'b'): a major, so device (a=0, b=1) = id 1 gets the second quarter.
    assert rows(ab) == {0: (0, 2), 1: (2, 4), 2: (4, 6), 3: (6, 8)}
    # ('b', 'a'): b major, so device id 1 (a=0, b=1) gets the third quarter.
    assert rows(ba) == {0: (0, 2), 1: (4, 6), 2: (2, 4), 3: (6, 8)}
    assert ab.indices() == jax_indices(mesh, P(("a", "b"), None), (8, 2))
    assert ba.indices() == jax_indices(mesh, P(("b", "a"), None), (8, 2))
    assert ab.holders() == {(0, 0): (0,), (1, 0): (1,), (2, 0): (2,), (3, 0): (3,)}
    assert ba.holders() == {(0, 0): (0,), (1, 0): (2,), (2, 0): (1,), (3, 0): (3,)}


def test_replicated_tiles_and_attributes():
    lay = tile_map({"x": 2, "y": 4}, P("x"), (8, 6))
    assert lay.spec == (("x",), ())
    assert lay.shards == (2, 1) and lay.tile_shape == (4, 6) and lay.replication == 4
    assert lay.holders() == {(0, 0): (0, 1, 2, 3), (1, 0): (4, 5, 6, 7)}
    assert lay.tile_of() == {0: (0, 0), 1: (0, 0), 2: (0, 0), 3: (0, 0),
                             4: (1, 0), 5: (1, 0), 6: (1, 0), 7: (1, 0)}
    assert lay.describe() == "P('x', None) on mesh {x: 2, y: 4}, shape (8, 6)"
    assert isinstance(lay, Layout)
    assert lay.device_ids.shape == (2, 4) and lay.tile_holders.shape == (2, 1, 4)
    assert lay.tile_slices((1, 0)) == (slice(4, 8), slice(0, 6))
    with pytest.raises(AttributeError):
        lay.shape = (1,)
    assert lay == tile_map([("x", 2), ("y", 4)], ("x", None), (8, 6))
    assert hash(lay) == hash(tile_map({"x": 2, "y": 4}, ["x"], [8, 6]))


def test_fully_replicated_scalar_and_empty():
    lay = tile_map({"x": 2}, P(), ())
    assert lay.indices() == {0: (), 1: ()} and lay.holders() == {(): (0, 1)}
    assert tile_map({"x": 2}, None, (4,)).indices() == {0: (slice(None),), 1: (slice(None),)}
    empty = tile_map({"x": 2}, ("x",), (0, 3))
    assert empty.indices() == {0: (slice(0, 0), slice(None)), 1: (slice(0, 0), slice(None))}


def test_device_ids_and_jax_mesh_ids():
    order = [3, 1, 7, 5, 0, 2, 4, 6]
    mesh = jax_mesh((2, 4), ("x", "y"), order)
    lay = tile_map(mesh, P("y", "x"), (8, 4))
    assert lay.device_ids.tolist() == [[3, 1, 7, 5], [0, 2, 4, 6]]
    assert lay.indices() == jax_indices(mesh, P("y", "x"), (8, 4))
    same = tile_map({"x": 2, "y": 4}, P("y", "x"), (8, 4), device_ids=order)
    assert same.indices() == lay.indices()
    assert list(lay.indices()) == order  # keyed in mesh order


def test_layout_of_arrays_shardings_and_abstract_meshes():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    x = jax.device_put(np.zeros((8, 8), np.float32), NamedSharding(mesh, P("x", "y")))
    lay = layout_of(x)
    assert lay.shape == (8, 8) and lay.memory_kind == "device"
    assert lay.indices() == {d.id: i for d, i in x.sharding.devices_indices_map(x.shape).items()}
    assert layout_of(x.sharding, (16, 8)).shape == (16, 8)
    assert layout_of(jax.ShapeDtypeStruct((8, 4), np.float32, sharding=NamedSharding(mesh, P("y")))).shards == (4, 1)
    assert layout_of(jax.typeof(x)).spec == (("x",), ("y",))  # AbstractMesh: ids 0..n-1
    single = layout_of(jax.device_put(np.zeros(3), DEVS[5]))
    assert single.indices() == {5: (slice(None),)}
    with pytest.raises(ValueError, match="shape"):
        layout_of(x.sharding)
    with pytest.raises(ValueError, match="x:"):
        layout_of(object(), (3,))


def test_memory_kind_is_recorded():
    mesh = jax.make_mesh((2, 4), ("x", "y"))
    # Decided by JAX: its CPU devices have pinned_host memory, so there a missing one is a failure.
    if DEVS[0].platform != "cpu" and "pinned_host" not in {m.kind for m in DEVS[0].addressable_memories()}:
        pytest.skip(f"JAX lists no pinned_host memory on {DEVS[0].platform} devices")
    x = jax.device_put(np.zeros((8, 8)), NamedSharding(mesh, P("x"), memory_kind="pinned_host"))
    lay = layout_of(x)
    assert lay.memory_kind == "pinned_host" and "memory pinned_host" in lay.describe()


def test_format_spec_reads_like_python():
    mesh = {"x": 1, "y": 1, "z": 1}
    assert tile_map(mesh, P(), ()).spec_str() == "P()"
    assert tile_map(mesh, P("x"), (1,)).spec_str() == "P('x')"
    assert tile_map(mesh, P(("x", "y"), None, "z"), (1, 1, 1)).spec_str() == "P(('x', 'y'), None, 'z')"
    for spec in [P("x", None), P(("x", "y"), None, "z")]:  # as JAX prints them
        assert format_spec(tile_map(mesh, spec, (1,) * len(spec)).spec) == repr(spec)


def test_big_mesh_is_exact_and_vectorised():
    lay = tile_map({"x": 16, "y": 16, "z": 16}, (("z", "x"), None, "y"), (256, 4, 32))
    assert lay.num_devices == 4096 and lay.replication == 1 and lay.shards == (256, 1, 16)
    # Device with mesh coordinates (x, y, z) = (3, 5, 7): piece 7*16+3 of dim 0, 5 of dim 2.
    dev = 3 * 256 + 5 * 16 + 7
    assert lay.indices()[dev] == (slice(115, 116), slice(None), slice(10, 12))
    assert len(lay.holders()) == 256 * 16


# --------------------------------------------------------------------------------------------
# Errors: each names its argument; where JAX decides too, we decide the same way.


@pytest.mark.parametrize("mesh, spec, shape, device_ids, match", [
    ({"x": 2}, ("y",), (4,), None, "spec: unknown mesh axis 'y'"),
    ({"x": 2, "y": 2}, ("x", "x"), (4, 4), None, "spec: mesh axis 'x' is used in entries 0 and 1"),
    ({"x": 2, "y": 2}, (("x", "x"),), (4,), None, "spec: mesh axis 'x' is used twice in entry 0"),
    ({"x": 2}, ("x",), (3,), None, "shape: dimension 0 has size 3"),
    ({"x": 2, "y": 3}, (None, ("x", "y")), (4, 8), None, "shape: dimension 1 has size 8.*6 shards"),
    ({"x": 2}, ("x", None), (4,), None, "spec: .* has 2 entries, more than the 1 dimension"),
    ({"x": 0}, (), (4,), None, "mesh: the size of axis 'x' must be a positive integer"),
    ({"x": -2}, (), (4,), None, "mesh: the size of axis 'x'"),
    ({"x": 2.0}, (), (4,), None, "mesh: the size of axis 'x'"),
    ({"x": True}, (), (4,), None, "mesh: the size of axis 'x'"),
    ([("x", 2), ("x", 2)], (), (4,), None, "mesh: axis name 'x' appears twice"),
    ({3: 2}, (), (4,), None, "mesh: axis names must be non-empty strings"),
    ("x", (), (4,), None, "mesh: expected"),
    ({"x": 2}, (), (4,), [0], "device_ids: the mesh of shape \\(2,\\) has 2 devices, but 1"),
    ({"x": 2}, (), (4,), [1, 1], "device_ids: each device may appear once"),
    ({"x": 2, "y": 2}, (), (4,), [[0, 1, 2, 3]], "device_ids: shape \\(1, 4\\) does not match"),
    ({"x": 2}, (), (4,), [0.5, 1], "device_ids: expected integers"),
    ({"x": 2}, (), (4,), [-1, 1], "device_ids: ids must be non-negative"),
    ({"x": 2}, (), (-4,), None, "shape: expected a tuple of non-negative integers"),
    ({"x": 2}, (), "ab", None, "shape: expected"),
    ({"x": 2}, "x", (4,), None, "spec: expected a PartitionSpec"),
    ({"x": 2}, (3,), (4,), None, "spec: entry 0 must be None, an axis name or a tuple"),
    ({"x": 2}, ((3,),), (4,), None, "spec: entry 0 must be None"),
    ({"x": 2}, P(P.UNCONSTRAINED), (4,), None, "spec: entry 0 must be None"),
])
def test_errors_name_their_argument(mesh, spec, shape, device_ids, match):
    with pytest.raises(ValueError, match=match):
        tile_map(mesh, spec, shape, device_ids=device_ids)


def test_unreduced_specs_are_refused():
    with pytest.raises(ValueError, match="spec: .*unreduced"):
        tile_map({"x": 2, "y": 2}, P("x", unreduced={"y"}), (4,))


def jax_accepts(mesh, spec, shape) -> bool:
    try:
        jax.device_put(np.zeros(shape, np.float32), NamedSharding(mesh, spec))
    except Exception:  # JAX raises ValueError, its DuplicateSpecError, IndivisibleError...
        return False
    return True


def we_accept(mesh, spec, shape) -> bool:
    try:
        tile_map(mesh, spec, shape)
    except ValueError:
        return False
    return True


@pytest.mark.parametrize("spec, shape", [
    (P("a", "a"), (4, 4)),             # axis used twice
    (P(("a", "b"), "a"), (4, 4)),
    (P(("b", "b")), (4,)),
    (P("a", None, None), (4, 4)),      # longer than the rank
    (P(None, "a"), (4,)),
    (P("a"), ()),
    (P("q"), (4,)),                    # unknown axis
    (P(None, ("a", "q")), (4, 4)),
    (P("a"), (3,)),                    # uneven
    (P(("a", "b")), (6,)),
    (P(None, "b"), (4, 2)),
    (P("a", "b"), (2, 2)),             # fine
    (P(("b", "a"), None), (4, 3)),
    (P(), ()),
])
def test_accept_and_reject_exactly_like_jax(spec, shape):
    mesh = jax_mesh((2, 2), ("a", "b"))
    assert we_accept(mesh, spec, shape) == jax_accepts(mesh, spec, shape)


# --------------------------------------------------------------------------------------------
# Property tests against NamedSharding.devices_indices_map


@st.composite
def valid_cases(draw):
    k_exp = draw(st.integers(0, 3))                          # 1, 2, 4 or 8 devices
    rank = draw(st.integers(1, 3))
    cuts = sorted(draw(st.lists(st.integers(0, k_exp), min_size=rank - 1, max_size=rank - 1)))
    exps = [b - a for a, b in zip([0] + cuts, cuts + [k_exp])]
    sizes = tuple(2 ** e for e in exps)
    names = tuple(draw(st.permutations(AXES))[:rank])
    order = draw(st.permutations(range(8)))
    ndim = draw(st.integers(0, 4))
    entries = [[] for _ in range(ndim)]
    if ndim:
        for a in draw(st.permutations(names)):               # random order inside each entry
            d = draw(st.integers(-1, ndim - 1))
            if d >= 0:
                entries[d].append(a)
    spec = []
    for e in entries:
        style = draw(st.integers(0, 2))
        if not e:
            spec.append(None if style else ())
        elif len(e) == 1:
            spec.append(e[0] if style else (e[0],))
        else:
            spec.append(tuple(e))
    while spec and spec[-1] is None and draw(st.booleans()):
        spec.pop()                                          # fewer entries than dimensions
    size = dict(zip(names, sizes))
    shape = tuple(int(np.prod([size[a] for a in e])) * draw(st.integers(0, 3) if draw(st.integers(0, 9)) == 0
                                                             else st.integers(1, 3)) for e in entries)
    return sizes, names, list(order), P(*spec), shape


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(valid_cases())
def test_indices_agree_with_jax(case):
    sizes, names, order, spec, shape = case
    mesh = jax_mesh(sizes, names, order)
    expected = jax_indices(mesh, spec, shape)
    lay = tile_map(mesh, spec, shape)
    assert lay.indices() == expected
    # The same without JAX objects: a dict mesh, ids given, the spec as a tuple.
    plain = tile_map(dict(zip(names, sizes)), tuple(spec), shape, device_ids=order[: lay.num_devices])
    assert plain.indices() == expected
    # holders() and tile_of() are the same facts seen from the tiles.
    tiles = plain.tile_of()
    for tile, ids in plain.holders().items():
        assert len(ids) == plain.replication
        assert all(tiles[i] == tile for i in ids)
        assert list(ids) == [i for i in plain.device_ids.ravel().tolist() if i in ids]  # mesh order
        assert all(expected[i] == expected[ids[0]] for i in ids)


@st.composite
def any_cases(draw):
    names = ("a", "b")
    pool = [None, "a", "b", "q", ("a", "b"), ("b", "a"), ("a", "a"), ("a", "q"), ()]
    spec = draw(st.lists(st.sampled_from(pool), max_size=3))
    shape = tuple(draw(st.lists(st.integers(0, 6), max_size=3)))
    return names, P(*spec), shape


@settings(max_examples=300, deadline=None)
@given(any_cases())
def test_accepts_exactly_what_jax_accepts(case):
    names, spec, shape = case
    mesh = jax_mesh((2, 2), names)
    assert we_accept(mesh, spec, shape) == jax_accepts(mesh, spec, shape), (spec, shape)


@pytest.mark.parametrize("bad", [42, "a", [1, 2]])
def test_layout_of_names_what_it_expected(bad):
    with pytest.raises(ValueError, match="x: expected a jax.Array"):
        layout_of(bad)


def test_layout_of_a_sharding_needs_a_shape():
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:2]), ("x",))
    with pytest.raises(ValueError, match="shape: required"):
        layout_of(jax.sharding.NamedSharding(mesh, P("x")))
