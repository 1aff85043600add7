"""shardlab.programs.collectives and its ring model (shardlab.layout.ring_bytes): collectives read from HLO text
(hand-written) and from real compiled programs, and the bytes the model gives them."""

import shardlab

DEVICES = shardlab.setup_devices(8)  # at import, before anything else starts JAX

import importlib.util  # noqa: E402
import re  # noqa: E402
from collections import Counter  # noqa: E402
from fractions import Fraction  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from shardlab.programs.collectives import CollectiveReport, collectives_in, collectives_in_compiled, collectives_in_text
from shardlab.programs.hlo import KINDS
from shardlab.layout.ring_bytes import (bytes_all_gather, bytes_all_reduce, bytes_all_to_all, bytes_all_to_all_ring,
                                        bytes_permute, bytes_reduce_scatter)

ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


def module(body: str, params: str = "p = f32[16,8]{1,0} parameter(0)", n: int = 8) -> str:
    """A whole HLO module around some instructions, passed through XLA's own parser."""
    text = f"HloModule m, num_partitions={n}\n\n{ADD}\nENTRY e {{\n  {params}\n  {body}\n}}\n"
    xla_accepts(text)
    return text


def xla_accepts(text: str) -> None:
    """The hand-written HLO is real HLO: XLA's parser reads it (every admitted jaxlib has it)."""
    from jaxlib import _hlo

    _hlo.hlo_module_from_text(text)


def test_xla_parser_refuses_what_is_not_hlo():
    xla_accepts(module("ROOT r = f32[16,8]{1,0} negate(p)"))
    for broken in ("ROOT r = f32[16,8]{1,0} negate(q)",                         # an undefined operand
                   "ROOT r = f32[16,8]{1,0} all-reduce(p), replica_groups={{0,1}}, to_apply=nowhere"):
        with pytest.raises(Exception):
            xla_accepts(module(broken))


def one(text: str, **kw):
    report = collectives_in_text(text, **kw)
    assert len(report) == 1, report
    return report[0]


# ----------------------------------------------------------------------------------------------
# Formulas
# ----------------------------------------------------------------------------------------------

def test_formulas():
    assert bytes_all_gather(1024, 8) == 896
    assert bytes_reduce_scatter(1024, 8) == 896
    assert bytes_all_reduce(1024, 8) == 1792
    assert bytes_all_to_all(1024, 4) == 768
    assert bytes_permute(1024) == 1024
    assert bytes_permute(1024, sends=False) == 0
    assert isinstance(bytes_all_reduce(1024, 8), int)
    assert bytes_all_reduce(10, 3) == pytest.approx(40 / 3)
    for f in (bytes_all_gather, bytes_reduce_scatter, bytes_all_reduce, bytes_all_to_all):
        assert f(4096, 1) == 0  # a group of one sends nothing


def _ring_by_steps(kind, nbytes, n):
    """Run a ring all-gather, reduce-scatter or all-reduce piece by piece; the bytes each device sends.

    ``nbytes``: the result for the all-gather, the operand otherwise. The buffer is cut into n pieces;
    in each step every device passes one piece to the next device. Pieces are tracked as sets of the
    devices whose contributions they hold, and the loop stops when every device has what it needs.
    """
    piece = Fraction(nbytes, n)
    sent = [Fraction(0)] * n
    if kind in ("reduce-scatter", "all-reduce"):
        held = [[{d} for _ in range(n)] for d in range(n)]          # held[d][k]: who piece k on d sums
        for s in range(n - 1):                                      # device d passes piece d - 1 - s on
            moves = [(d, (d - 1 - s) % n) for d in range(n)]
            for d, k in moves:
                held[(d + 1) % n][k] = held[(d + 1) % n][k] | held[d][k]
                sent[d] += piece
        assert all(held[d][d] == set(range(n)) for d in range(n)) or n == 1   # d owns piece d, reduced
    if kind in ("all-gather", "all-reduce"):
        have = [{d} for d in range(n)]                               # the whole pieces a device holds
        for s in range(n - 1):
            passing = [(d, (d - s) % n) for d in range(n)]          # the piece d received last
            for d, k in passing:
                assert k in have[d]
                have[(d + 1) % n].add(k)
                sent[d] += piece
        assert all(h == set(range(n)) for h in have)
    assert len(set(sent)) == 1                                      # every device sends the same
    return sent[0]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("nbytes", [1024, 1000, 7])
def test_ring_formulas_equal_a_ring_run_piece_by_piece(n, nbytes):
    for f, kind in ((bytes_all_gather, "all-gather"), (bytes_reduce_scatter, "reduce-scatter"),
                    (bytes_all_reduce, "all-reduce")):
        want = _ring_by_steps(kind, nbytes, n)
        got = f(nbytes, n)
        # A whole number of bytes is an int; otherwise the float nearest the exact fraction.
        assert type(got) is (int if want.denominator == 1 else float) and got == float(want), (kind, got, want)


def _ring_all_to_all_by_hops(nbytes, n, bidirectional):
    """Route every piece of every device round a ring, count the bytes each device puts on its links."""
    piece = nbytes / n
    sent = np.zeros(n)
    for src in range(n):
        for dst in range(n):
            k = (dst - src) % n
            step = 1 if (not bidirectional or k <= n - k) else -1
            at = src
            while at != dst:
                sent[at] += piece  # the device holding the piece sends it one hop on
                at = (at + step) % n
    assert np.allclose(sent, sent[0])  # every device sends the same
    return sent[0]


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 8, 16])
@pytest.mark.parametrize("bidirectional", [True, False])
def test_all_to_all_on_a_ring(n, bidirectional):
    nbytes = 1024 * 3
    got = bytes_all_to_all_ring(nbytes, n, bidirectional=bidirectional)
    assert got == pytest.approx(_ring_all_to_all_by_hops(nbytes, n, bidirectional))
    if not bidirectional:
        assert got == pytest.approx((n - 1) / 2 * nbytes)
        if n > 1:  # half of an all-gather of the same operand
            assert got == pytest.approx(bytes_all_gather(n * nbytes, n) / 2)
    elif n % 2 == 0:
        assert got == pytest.approx(n / 4 * nbytes)
    if bidirectional and n >= 3:  # a quarter to a third of that all-gather
        assert 1 / 4 < got / bytes_all_gather(n * nbytes, n) <= 1 / 3
    assert got >= bytes_all_to_all(nbytes, n)  # never less than the direct exchange


def test_all_to_all_ring_examples_and_bad_input():
    assert bytes_all_to_all_ring(1024, 8) == 2048 and bytes_all_to_all_ring(1024, 8, bidirectional=False) == 3584
    assert bytes_all_to_all_ring(16, 4) == 16 and bytes_all_to_all(16, 4) == 12
    with pytest.raises(ValueError, match="nbytes"):
        bytes_all_to_all_ring(-1, 4)
    with pytest.raises(ValueError, match=r"\bn\b"):
        bytes_all_to_all_ring(12, 0)
    with pytest.raises(ValueError, match="bidirectional"):
        bytes_all_to_all_ring(12, 4, bidirectional="yes")


@pytest.mark.parametrize("f", [bytes_all_gather, bytes_reduce_scatter, bytes_all_reduce, bytes_all_to_all,
                               bytes_all_to_all_ring])
def test_formulas_reject_bad_input(f):
    with pytest.raises(ValueError, match="nbytes"):
        f(-1, 4)
    with pytest.raises(ValueError, match="nbytes"):
        f("12", 4)
    with pytest.raises(ValueError, match=r"\bn\b"):
        f(12, 0)
    with pytest.raises(ValueError, match=r"\bn\b"):
        f(12, 2.0)
    with pytest.raises(ValueError, match="sends"):
        bytes_permute(12, sends="yes")


# ----------------------------------------------------------------------------------------------
# Hand-written HLO: every kind, every group spelling
# ----------------------------------------------------------------------------------------------

def test_explicit_groups_all_reduce():
    text = module("ROOT r = f32[16,8]{1,0} all-reduce(p), channel_id=1, "
                  "replica_groups={{0,1},{2,3},{4,5},{6,7}}, use_global_device_ids=true, to_apply=add")
    xla_accepts(text)
    c = one(text)
    assert c.kind == "all-reduce"
    assert c.shape == (16, 8) and c.result_shape == (16, 8) and c.dtype == "f32"
    assert c.replica_groups == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert c.group_size == 2
    assert c.operand_bytes == c.result_bytes == 16 * 8 * 4
    assert c.bytes_per_device == bytes_all_reduce(512, 2) == 512
    assert c.senders == tuple(range(8))


def test_groups_of_one_send_nothing():
    text = module("ROOT r = f32[16,8]{1,0} all-reduce(p), channel_id=1, "
                  "replica_groups={{0},{1},{2},{3},{4},{5},{6},{7}}, use_global_device_ids=true, to_apply=add")
    c = one(text)
    assert c.group_size == 1 and c.senders == () and c.bytes_per_device == 0


# Every spelling of replica groups: iota, then named mesh axes.
@pytest.mark.parametrize("groups, expected", [
    ("[2,4]<=[8]", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("[1,8]<=[8]", [list(range(8))]),
    ("[4,2]<=[2,4]T(1,0)", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("[2,4]<=[2,2,2]T(1,0,2)", [[0, 1, 4, 5], [2, 3, 6, 7]]),
    ("mesh['x'=2,'y'=4] {'y'}", [[0, 1, 2, 3], [4, 5, 6, 7]]),
    ("mesh['x'=2,'y'=4] {'x'}", [[0, 4], [1, 5], [2, 6], [3, 7]]),
    ("mesh['x'=2,'y'=4] {'x','y'}", [list(range(8))]),
    # Grouped axes go last in the order written: y major, x minor.
    ("mesh['x'=2,'y'=4] {'y','x'}", [[0, 4, 1, 5, 2, 6, 3, 7]]),
    ("mesh['axis_0'=8,'axis_1'=1] {'axis_0'}", [list(range(8))]),
    ("mesh['x'=2,'y'=4], device_ids=(3,1,7,0,2,6,5,4) {'x'}", [[3, 2], [1, 6], [7, 5], [0, 4]]),
    ("mesh['x'=2,'y'=4], device_ids=([4,2]T(1,0)) {'x'}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    # A sub-axis: a:(2)2 is the middle factor of a=4 = 2 x 2 x 1.
    ("mesh['a'=4,'b'=2], device_ids=([2,2,2]T(0,2,1)) {'a':(2)2}", [[0, 1], [2, 3], [4, 5], [6, 7]]),
    ("mesh['a'=8] {'a':(2)2}", [[0, 2], [1, 3], [4, 6], [5, 7]]),
    ("mesh['a'=8] {'a':(1)2,'a':(4)2}", [[0, 1, 4, 5], [2, 3, 6, 7]]),
])
def test_replica_group_spellings(groups, expected):
    text = module(f"ROOT r = f32[16,8]{{1,0}} all-reduce(p), channel_id=1, replica_groups={groups}, "
                  "use_global_device_ids=true, to_apply=add")
    xla_accepts(text)
    c = one(text)
    assert c.replica_groups == expected
    assert c.group_size == len(expected[0])
    n = len(expected[0])
    assert c.bytes_per_device == Fraction(2 * (n - 1), n) * 512   # the ring all-reduce, by hand


def test_mesh_axes_agree_with_iota_spelling():
    # The same groups, written the two ways XLA prints them.
    mesh = one(module("ROOT r = f32[4]{0} all-reduce(p), channel_id=1, replica_groups=mesh['x'=2,'y'=4] {'x'}, "
                      "use_global_device_ids=true, to_apply=add", "p = f32[4]{0} parameter(0)"))
    iota = one(module("ROOT r = f32[4]{0} all-reduce(p), channel_id=1, replica_groups=[4,2]<=[2,4]T(1,0), "
                      "use_global_device_ids=true, to_apply=add", "p = f32[4]{0} parameter(0)"))
    assert mesh.replica_groups == iota.replica_groups


def test_empty_groups_mean_all_devices():
    body = ("ROOT r = f32[16,8]{1,0} all-reduce(p), channel_id=1, replica_groups={}, "
            "use_global_device_ids=true, to_apply=add")
    text = module(body)
    xla_accepts(text)
    c = one(text)
    assert c.replica_groups == [list(range(8))] and c.group_size == 8
    # A lone line has no header: the number of devices must be given.
    with pytest.raises(ValueError, match="num_devices"):
        collectives_in_text(body)
    assert one(body, num_devices=4).replica_groups == [[0, 1, 2, 3]]


def test_all_gather_and_reduce_scatter():
    text = module(
        "ag = f32[64,8]{1,0} all-gather(p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  ROOT rs = f32[4,8]{1,0} reduce-scatter(p), channel_id=2, replica_groups=[1,8]<=[8], "
        "use_global_device_ids=true, dimensions={0}, to_apply=add")
    xla_accepts(text)
    ag, rs = collectives_in_text(text)
    assert (ag.kind, ag.shape, ag.result_shape, ag.group_size, ag.dimensions) == ("all-gather", (16, 8), (64, 8), 4, (0,))
    assert ag.bytes_per_device == bytes_all_gather(64 * 8 * 4, 4) == 1536
    assert (rs.kind, rs.shape, rs.result_shape, rs.group_size) == ("reduce-scatter", (16, 8), (4, 8), 8)
    assert rs.bytes_per_device == bytes_reduce_scatter(16 * 8 * 4, 8) == 448


def test_operand_shape_inferred_for_a_lone_line():
    # Without the operand's definition, the shape follows from the result and the gathered dimension.
    ag = one("%ag = bf16[8,32]{1,0} all-gather(%x), channel_id=1, replica_groups={{0,1},{2,3}}, dimensions={1}")
    assert ag.shape == (8, 16) and ag.dtype == "bf16" and ag.operand_bytes == 8 * 16 * 2
    rs = one("%rs = f32[2,8]{1,0} reduce-scatter(%x), replica_groups={{0,1,2,3}}, dimensions={0}, to_apply=%add")
    assert rs.shape == (8, 8)
    assert rs.bytes_per_device == 3 * 64     # 3 of 4 pieces of 8 x 8 x 4 bytes


def test_operand_shapes_written_inline():
    c = one("%ar = f32[4]{0} all-reduce(f32[4]{0} %x), replica_groups={{0,1}}, to_apply=%add")
    assert c.shape == (4,) and c.bytes_per_device == 16     # 2 (n - 1) / n of 16 bytes, n = 2


def test_all_to_all_array_and_tuple_forms():
    text = module(
        "a = f32[16,8]{1,0} all-to-all(p), channel_id=1, replica_groups={{0,1,2,3,4,5,6,7}}, dimensions={0}\n"
        "  piece0 = f32[8,1]{1,0} slice(p), slice={[0:8], [0:1]}\n"
        "  piece1 = f32[8,1]{1,0} slice(p), slice={[8:16], [0:1]}\n"
        "  ROOT t = (f32[8,1]{1,0}, f32[8,1]{1,0}) all-to-all(piece0, piece1), channel_id=2, replica_groups={{0,1},{2,3},{4,5},{6,7}}")
    xla_accepts(text)
    a, t = collectives_in_text(text)
    assert a.kind == t.kind == "all-to-all"
    assert a.bytes_per_device == bytes_all_to_all(512, 8) == 448
    assert t.shape == ((8, 1), (8, 1)) and t.group_size == 2
    assert t.operand_bytes == 64 and t.bytes_per_device == bytes_all_to_all(64, 2) == 32
    assert a.model == "direct exchange" and "direct exchange model" in str(a)
    assert "(ring model; all-to-all: direct exchange)" in collectives_in_text(text).summary()


def test_collective_permute():
    text = module("ROOT c = f32[16,8]{1,0} collective-permute(p), channel_id=1, "
                  "source_target_pairs={{0,1},{1,2},{2,3},{3,0}}", n=4)
    xla_accepts(text)
    c = one(text)
    assert c.kind == "collective-permute"
    assert c.source_target_pairs == [(0, 1), (1, 2), (2, 3), (3, 0)]
    assert c.group_size is None and c.senders == (0, 1, 2, 3)
    assert c.bytes_per_device == bytes_permute(512) == 512
    assert "0\u21921" in c.groups_text()
    # Pairs that keep the buffer in place move nothing.
    still = one("%c = f32[4]{0} collective-permute(f32[4]{0} %x), source_target_pairs={{0,0},{1,1}}")
    assert still.bytes_per_device == 0 and still.senders == ()


def test_async_pairs_count_once_by_their_start():
    text = module(
        "ags = (f32[16,8]{1,0}, f32[64,8]{1,0}) all-gather-start(p), channel_id=1, replica_groups={{0,1,2,3},{4,5,6,7}}, "
        "dimensions={0}, use_global_device_ids=true\n"
        "  agd = f32[64,8]{1,0} all-gather-done(ags)\n"
        "  ars = f32[16,8]{1,0} all-reduce-start(p), channel_id=2, replica_groups={{0,1,2,3,4,5,6,7}}, "
        "use_global_device_ids=true, to_apply=add\n"
        "  ard = f32[16,8]{1,0} all-reduce-done(ars)\n"
        "  cps = (f32[16,8]{1,0}, f32[16,8]{1,0}, u32[], u32[]) collective-permute-start(p), channel_id=3, "
        "source_target_pairs={{0,1},{1,0}}\n"
        "  cpd = f32[16,8]{1,0} collective-permute-done(cps)\n"
        "  ROOT t = (f32[64,8]{1,0}, f32[16,8]{1,0}, f32[16,8]{1,0}) tuple(agd, ard, cpd)")
    xla_accepts(text)
    report = collectives_in_text(text)
    assert [c.kind for c in report] == ["all-gather", "all-reduce", "collective-permute"]
    assert all(c.is_async for c in report)
    ag, ar, cp = report
    assert ag.shape == (16, 8) and ag.result_shape == (64, 8) and ag.bytes_per_device == 3 * 512   # 3 of 4 pieces
    assert ar.result_shape == (16, 8) and ar.bytes_per_device == 2 * 7 * 64                     # 2 x 7 of 8 pieces
    assert cp.shape == (16, 8) and cp.bytes_per_device == 512


def test_async_wrapped_computation_counts_once():
    # GPU style: an async-start calling a computation that holds the collective.
    text = f"""HloModule m, num_partitions=8

{ADD}
wrapped {{
  q = f32[16,8]{{1,0}} parameter(0)
  ROOT rs = f32[2,8]{{1,0}} reduce-scatter(q), channel_id=1, replica_groups={{{{0,1,2,3,4,5,6,7}}}}, use_global_device_ids=true, dimensions={{0}}, to_apply=add
}}

ENTRY e {{
  p = f32[16,8]{{1,0}} parameter(0)
  s = ((f32[16,8]{{1,0}}), f32[2,8]{{1,0}}) async-start(p), calls=wrapped
  ROOT d = f32[2,8]{{1,0}} async-done(s)
}}
"""
    xla_accepts(text)
    c = one(text)
    assert c.kind == "reduce-scatter" and c.shape == (16, 8) and c.result_shape == (2, 8)


def test_combined_all_reduce_of_several_arrays():
    text = module("ROOT r = (f32[16,8]{1,0}, s32[10]{0}) all-reduce(p, q), channel_id=1, replica_groups=[1,8]<=[8], "
                  "use_global_device_ids=true, to_apply=add",
                  "p = f32[16,8]{1,0} parameter(0)\n  q = s32[10]{0} parameter(1)")
    c = one(text)
    assert c.shape == ((16, 8), (10,)) and c.dtypes == ("f32", "s32") and c.dtype == "f32,s32"
    assert c.operand_bytes == 512 + 40
    assert c.bytes_per_device == 2 * 7 * 552 / 8      # both arrays, one ring all-reduce of 552 bytes


def test_names_inside_metadata_do_not_count():
    text = module('ROOT r = f32[16,8]{1,0} add(p, p), metadata={op_name="all-reduce(x) all-gather(y)"}')
    assert len(collectives_in_text(text)) == 0


def test_report_api():
    text = module(
        "ag = f32[64,8]{1,0} all-gather(p), channel_id=1, replica_groups=[1,4]<=[4], dimensions={0}\n"
        "  ar = f32[64,8]{1,0} all-reduce(ag), channel_id=2, replica_groups=[1,4]<=[4], to_apply=add\n"
        "  ROOT ar2 = f32[64,8]{1,0} all-reduce(ar), channel_id=3, replica_groups=[2,2]<=[4], to_apply=add", n=4)
    r = collectives_in_text(text)
    assert isinstance(r, CollectiveReport) and len(r) == 3
    assert r.kinds() == Counter({"all-reduce": 2, "all-gather": 1})
    assert r.total_bytes_per_device == sum(c.bytes_per_device for c in r) == 1536 + 3072 + 2048
    assert "3 collectives" in r.summary() and "6,656 bytes (ring model)" in r.summary()
    assert all(c.model == "ring" for c in r) and "(ring model)" in str(r[0])
    html = r._repr_html_()
    assert html.count("<tr>") == 4 and "all-gather" in html
    assert "f32[16,8] -&gt; f32[64,8]" in html
    text_form = str(r)
    assert "bytes/device (model)" in text_form and "bytes/device (model)" in html and "all-reduce" in text_form and repr(r) == text_form
    assert len(r.of_kind("all-reduce")) == 2 and isinstance(r[1:], CollectiveReport)
    with pytest.raises(ValueError, match="kind"):
        r.of_kind("allreduce")
    assert "ag" in r[0].hlo and "metadata" not in r[0].hlo
    with pytest.raises(ValueError, match="device assignment"):
        r.device_groups(r[0])
    assert collectives_in_text("").summary().startswith("No collectives")


def test_text_input_is_checked():
    with pytest.raises(ValueError, match="hlo_text"):
        collectives_in_text(b"HloModule m")
    with pytest.raises(ValueError, match="num_devices"):
        collectives_in_text("", num_devices=0)


# ----------------------------------------------------------------------------------------------
# Real compiled programs on 8 simulated CPU devices
# ----------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def line():
    return jax.sharding.Mesh(np.array(DEVICES), ("x",))


@pytest.fixture(scope="module")
def grid():
    return jax.sharding.Mesh(np.array(DEVICES).reshape(2, 4), ("x", "y"))


def test_not_a_function():
    with pytest.raises(ValueError, match=r"\bf\b"):
        collectives_in(42)
    with pytest.raises(ValueError, match="compiled"):
        collectives_in_compiled("HloModule")


def test_no_communication(line):
    x = jax.device_put(jnp.ones((16, 8)), NamedSharding(line, P("x")))
    r = collectives_in(lambda x: jnp.sin(x) * 2, x)
    assert len(r) == 0 and r.total_bytes_per_device == 0


def test_matmul_with_sharded_contraction_all_reduces(line):
    a = jax.device_put(jnp.ones((16, 32)), NamedSharding(line, P(None, "x")))
    b = jax.device_put(jnp.ones((32, 8)), NamedSharding(line, P("x", None)))
    r = collectives_in(lambda a, b: a @ b, a, b)
    assert r.kinds() == Counter({"all-reduce": 1})
    c = r[0]
    assert c.shape == c.result_shape == (16, 8) and c.dtype == "f32" and c.group_size == 8
    assert c.bytes_per_device == 2 * 7 * 64      # 2 x 7 pieces of 512 / 8 bytes
    assert r.device_ids == tuple(d.id for d in DEVICES)


def test_sharded_output_of_a_contraction(line):
    # The result sharded over the contracted axis: a reduce-scatter in principle. The CPU backend
    # of JAX 0.10 writes an all-reduce followed by a local dynamic-slice; accept either.
    a = jax.device_put(jnp.ones((16, 32)), NamedSharding(line, P(None, "x")))
    b = jax.device_put(jnp.ones((32, 8)), NamedSharding(line, P("x", None)))
    f = jax.jit(lambda a, b: a @ b, out_shardings=NamedSharding(line, P("x")))
    (c,) = collectives_in(f, a, b)
    if c.kind == "reduce-scatter":
        assert c.result_shape == (2, 8) and c.bytes_per_device == 7 * 64
    else:
        assert c.kind == "all-reduce" and c.result_shape == (16, 8)


def test_gather_to_replicated(line):
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(line, P("x")))
    r = collectives_in(lambda x: jax.lax.with_sharding_constraint(x * 2, NamedSharding(line, P())), x)
    (c,) = r
    assert c.kind == "all-gather" and c.shape == (2, 32) and c.result_shape == (16, 32)
    assert c.group_size == 8 and c.bytes_per_device == bytes_all_gather(16 * 32 * 4, 8) == 1792


def test_gather_over_one_axis_of_a_grid(grid):
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(grid, P("x", "y")))
    (c,) = collectives_in(lambda x: jax.lax.with_sharding_constraint(x * 2, NamedSharding(grid, P(None, "y"))), x)
    assert c.kind == "all-gather" and c.result_shape == (16, 8) and c.group_size == 2
    assert sorted(map(sorted, c.replica_groups)) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_groups_follow_a_permuted_device_order():
    order = [3, 1, 7, 0, 2, 6, 5, 4]
    mesh = jax.sharding.Mesh(np.array(DEVICES)[order].reshape(2, 4), ("x", "y"))
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(mesh, P("x", "y")))
    r = collectives_in(lambda x: jax.lax.with_sharding_constraint(x * 2, NamedSharding(mesh, P("x", None))), x)
    (c,) = r
    # Gathering over y: each group is one row of the mesh, in Device.id terms.
    rows = sorted(sorted(d.id for d in row) for row in mesh.devices)
    assert sorted(map(sorted, r.device_groups(c))) == rows


def test_transposing_a_layout_uses_sub_axis_groups(grid):
    # P('x','y') -> P('y','x') on a 2x4 grid: XLA exchanges pieces between neighbours along y
    # (a sub-axis of size 2 in its own mesh) and then moves whole tiles with a collective-permute.
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(grid, P("x", "y")))
    r = collectives_in(lambda x: jax.lax.with_sharding_constraint(x * 2, NamedSharding(grid, P("y", "x"))), x)
    assert r.kinds() == Counter({"all-to-all": 1, "collective-permute": 1})     # JAX 0.10 and 0.12 alike
    (a2a,) = r.of_kind("all-to-all")
    assert a2a.replica_groups == [[0, 1], [2, 3], [4, 5], [6, 7]] and a2a.group_size == 2
    # Its two operands, 1 x 4 x 8 floats each: half of the 256 bytes leave (a direct exchange of two).
    assert a2a.operand_bytes == 2 * 4 * 8 * 4 and a2a.bytes_per_device == 128
    (perm,) = r.of_kind("collective-permute")
    assert perm.shape == (4, 16) and perm.senders == (2, 3, 4, 5) and perm.bytes_per_device == 4 * 16 * 4


def shard_map(f, mesh, in_specs, out_specs):
    return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs)


def test_shard_map_collectives(line):
    x = jax.device_put(jnp.arange(512.0).reshape(64, 8), NamedSharding(line, P("x")))  # 8x8 per device
    cases = {
        "all-reduce": lambda v: jax.lax.psum(v, "x"),
        "all-gather": lambda v: jax.lax.all_gather(v, "x", tiled=True),
        "reduce-scatter": lambda v: jax.lax.psum_scatter(v, "x", tiled=True),
        "all-to-all": lambda v: jax.lax.all_to_all(v, "x", 1, 0, tiled=True),
        "collective-permute": lambda v: jax.lax.ppermute(v, "x", [(i, (i + 1) % 8) for i in range(8)]),
    }
    local = 8 * 8 * 4
    expected_bytes = {                # by hand: a piece is 1/8 of the 256 bytes (of 2,048 gathered)
        "all-reduce": 2 * 7 * 32,         # 7 pieces scattered, 7 gathered
        "all-gather": 7 * 256,            # 7 pieces of the 2,048-byte result
        "reduce-scatter": 7 * 32,
        "all-to-all": 7 * 32,             # 7 of 8 pieces leave
        "collective-permute": 256,        # the whole buffer
    }
    for kind, f in cases.items():
        r = collectives_in(shard_map(f, line, P("x"), P("x")), x)
        assert r.kinds() == Counter({kind: 1}), (kind, r)
        (c,) = r
        assert c.dtype == "f32" and c.operand_bytes == local
        if kind == "collective-permute":
            assert sorted(c.source_target_pairs) == [(i, (i + 1) % 8) for i in range(8)]
        else:
            assert c.replica_groups == [list(range(8))] and c.group_size == 8
        assert c.bytes_per_device == expected_bytes[kind], kind
    assert collectives_in(shard_map(cases["all-gather"], line, P("x"), P("x")), x)[0].result_shape == (64, 8)
    assert collectives_in(shard_map(cases["reduce-scatter"], line, P("x"), P("x")), x)[0].result_shape == (1, 8)


def test_psum_over_one_axis_of_a_grid(grid):
    x = jax.device_put(jnp.ones((8, 8)), NamedSharding(grid, P("x", "y")))
    f = shard_map(lambda v: jax.lax.psum(v, "x"), grid, P("x", "y"), P(None, "y"))
    (c,) = collectives_in(f, x)
    assert c.kind == "all-reduce" and c.group_size == 2
    assert sorted(map(sorted, c.replica_groups)) == [[0, 4], [1, 5], [2, 6], [3, 7]]


def test_gradients_combine_into_one_all_reduce(line):
    w = (jnp.ones((8, 4)), jnp.ones((4, 2)))
    x = jax.device_put(jnp.ones((64, 8)), NamedSharding(line, P("x")))
    r = collectives_in(jax.grad(lambda w, x: jnp.sum(jnp.tanh(x @ w[0]) @ w[1])), w, x)
    assert set(r.kinds()) == {"all-reduce"}
    total = sum(c.operand_bytes for c in r)
    assert total == (8 * 4 + 4 * 2) * 4
    assert r.total_bytes_per_device == 2 * 7 * total / 8


def test_jitted_lowered_and_compiled_inputs(line):
    x = jax.device_put(jnp.ones((16, 32)), NamedSharding(line, P("x")))
    f = jax.jit(lambda x, k: jnp.sum(x) * k, static_argnums=1)
    a = collectives_in(f, x, 3)
    lowered = f.lower(x, 3)
    assert collectives_in(lowered) == a == collectives_in_compiled(lowered.compile())
    assert a.kinds() == Counter({"all-reduce": 1})
    with pytest.raises(ValueError, match="compiled"):
        collectives_in(lowered, x)


# Every element type JAX knows, by its name in jax.numpy or ml_dtypes.
DTYPES = ["bool", "int2", "uint2", "int4", "uint4", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64",
          "uint64", "float16", "bfloat16", "float32", "float64", "complex64", "complex128", "float8_e4m3fn",
          "float8_e5m2", "float8_e4m3b11fnuz", "float8_e4m3fnuz", "float8_e5m2fnuz", "float8_e4m3", "float8_e3m4",
          "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn", "float6_e3m2fn"]


def _ml_bits(name: str) -> int:
    """Bits of one element of an int or float type, by ml_dtypes (which knows int2, int4, float4, ...)."""
    import ml_dtypes

    dt = getattr(ml_dtypes, name, None) or getattr(np, name)
    return (ml_dtypes.iinfo if name.startswith(("int", "uint")) else ml_dtypes.finfo)(dt).bits


def test_element_widths_are_those_xla_and_ml_dtypes_give():
    import re

    import ml_dtypes

    from shardlab.programs.hlo import BITS, Array

    count, seen, refused = 1024, set(), []
    for name in DTYPES:
        dt = getattr(jnp, name, None) or getattr(ml_dtypes, name, None)
        if dt is None:
            continue
        dt = np.dtype(dt)
        assert jnp.dtype(dt).itemsize == dt.itemsize
        with jax.enable_x64(True):      # 64-bit types exist only with x64 on
            try:
                compiled = jax.jit(lambda x: x).lower(jax.ShapeDtypeStruct((count,), dt)).compile()
            except Exception as e:       # JAX 0.10's XLA has no float6 yet; nothing else may be refused
                assert name.startswith("float6") and "Invalid XLA PrimitiveType" in str(e), (name, e)
                refused.append(name)
                continue
        text = compiled.as_text()
        layout = re.search(r"entry_computation_layout=\{\((\w+)\[(\d+)\]\{([^}]*)\}", text)
        hlo, packed = layout.group(1), re.search(r"E\((\d+)\)", layout.group(3))
        seen.add(hlo)
        nbytes = Array(hlo, (count,)).nbytes
        # XLA's own size of the buffer, and the width ml_dtypes gives: sub-byte types packed where XLA's
        # layout says so (E(bits)), one element per byte (or more) otherwise.
        assert nbytes == compiled.memory_analysis().argument_size_in_bytes, name
        if packed:
            bits = _ml_bits(name)
            assert int(packed.group(1)) == bits < 8 and nbytes == count * bits // 8, name
        else:
            assert nbytes == count * dt.itemsize, name
    assert seen >= {"pred", "s4", "u4", "s8", "bf16", "f32", "s64", "f64", "c128", "f8e4m3fn", "f8e5m2", "f4e2m1fn"}
    # Every width shardlab knows is checked here (the 6-bit floats only where XLA compiles them).
    unchecked = {"f6e2m3fn", "f6e3m2fn"} if refused else set()
    assert set(BITS) - {"token"} - seen == unchecked, "a width no dtype of JAX checks"
    assert set(refused) <= {"float6_e2m3fn", "float6_e3m2fn"}


def test_a_sub_byte_collective_sends_its_packed_bytes(line):
    import ml_dtypes

    # An all-gather of int2 values, 8 per device, over 8 devices: 64 values of 2 bits gathered, 16 bytes.
    x = jax.ShapeDtypeStruct((64,), jnp.int2, sharding=NamedSharding(line, P("x")))
    (c,) = collectives_in(shard_map(lambda v: jax.lax.all_gather(v, "x", tiled=True), line, P("x"), P("x")), x)
    assert c.dtype == "s2" and c.result_shape == (64,)
    assert c.result_bytes == 64 * ml_dtypes.iinfo(jnp.int2).bits // 8 == 16
    assert c.bytes_per_device == 7 * 16 / 8


def test_kinds_constant():
    assert KINDS == ("all-reduce", "all-gather", "reduce-scatter", "all-to-all", "collective-permute")


def test_traffic_ignores_instruction_names():
    a = collectives_in_text("%all-reduce = f32[8]{0} all-reduce(f32[8]{0} %p), replica_groups={{0,1}}, to_apply=%add")
    b = collectives_in_text("%psum.7 = f32[8]{0} all-reduce(f32[8]{0} %q), replica_groups={{0,1}}, to_apply=%add")
    assert a != b and a.traffic() == b.traffic() == [("all-reduce", (8,), (8,), [[0, 1]], 32)]


# ----------------------------------------------------------------------------------------------
# Collectives the hosts run: XLA:TPU's gather into host memory
# ----------------------------------------------------------------------------------------------

HOST_GATHER = """HloModule m, num_partitions=8

%on_host (q: f32[1,2,2]) -> f32[8,2,2] {
  %q = f32[1,2,2]{2,1,0} parameter(0)
  %t = token[] after-all()
  %in = f32[1,2,2]{2,1,0} custom-call(%q, %t), custom_call_target="MegaScaleCollectiveInputStart", custom_call_has_side_effect=true
  %ind = s32[] custom-call(%in), custom_call_target="MegaScaleCollectiveInputDone", custom_call_has_side_effect=true
  %out = f32[8,2,2]{2,1,0} custom-call(%t), custom_call_target="MegaScaleCollectiveOutputStart", custom_call_has_side_effect=true
  ROOT %outd = f32[8,2,2]{2,1,0} custom-call(%out, %ind), custom_call_target="MegaScaleCollectiveOutputDone", custom_call_has_side_effect=true
}, execution_thread="host"

ENTRY %e (p: f32[1,2,2]) -> f32[8,2,2] {
  %p = f32[1,2,2]{2,1,0} parameter(0)
  ROOT %r = f32[8,2,2]{2,1,0} call(%p), to_apply=%on_host
}
"""


def test_host_side_collective_custom_calls_are_named_not_counted():
    xla_accepts(HOST_GATHER)
    report = collectives_in_text(HOST_GATHER)
    assert len(report) == 0 and report.total_bytes_per_device == 0
    assert report.host_collective_calls == 4                      # counted by hand in the text
    assert report.summary() == ("No collectives between the devices, but 4 host-side collective "
                                "custom-calls (MegaScaleCollective*), not counted.")
    # The same custom-calls outside a host computation are not host-side; a program without them
    # keeps the plain sentence.
    on_device = HOST_GATHER.replace(', execution_thread="host"', "")
    xla_accepts(on_device)
    assert collectives_in_text(on_device).host_collective_calls == 0
    assert collectives_in_text(module("ROOT r = f32[16,8]{1,0} negate(p)")).summary() == \
        "No collectives: every device computes on its own data."
    # Next to a counted collective, the summary adds them.
    with_reduce = HOST_GATHER.replace(
        "ROOT %r = f32[8,2,2]{2,1,0} call(%p), to_apply=%on_host",
        "%r = f32[8,2,2]{2,1,0} call(%p), to_apply=%on_host\n"
        "  ROOT %s = f32[8,2,2]{2,1,0} all-reduce(%r), replica_groups={{0,1,2,3,4,5,6,7}}, "
        "to_apply=%add").replace("\n%on_host", "\n" + ADD.replace("add {", "%add {") + "\n%on_host")
    xla_accepts(with_reduce)
    both = collectives_in_text(with_reduce)
    assert both.kinds() == Counter({"all-reduce": 1}) and both.host_collective_calls == 4
    assert both.summary().endswith(" Plus 4 host-side collective custom-calls "
                                   "(MegaScaleCollective*), not counted.")


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None, reason="needs libtpu to compile for a TPU")
def test_xla_tpu_gathers_into_host_memory_with_host_side_collectives():
    with shardlab.compiling_for_tpu():
        m = shardlab.target_mesh("v5e-8", (2, 4), ("x", "y"))
        x = jax.ShapeDtypeStruct((4, 8), jnp.float32, sharding=NamedSharding(m, P("x", "y")))
        whole = NamedSharding(m, P(), memory_kind="pinned_host")
        text = shardlab.compile_for(jax.jit(lambda v: v, out_shardings=whole), x).text
    report = collectives_in_text(text)
    # XLA's own text, read independently of shardlab: the host computations' custom-call targets.
    host_bodies = [body for body, after in zip(text.split("\n}"), text.split("\n}")[1:])
                   if after.startswith(', execution_thread="host"')]
    targets = Counter(t for body in host_bodies for t in re.findall(r'custom_call_target="(\w+)"', body))
    mega = sum(v for t, v in targets.items() if t.startswith("MegaScaleCollective"))
    assert mega >= 1 and report.host_collective_calls == mega
    assert len(report) == 0 and "host-side collective" in report.summary()
