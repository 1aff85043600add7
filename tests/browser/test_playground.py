"""The sharding playground (book/playground.md): its script against JAX, its form, its speed and weight.

The page's script is a second implementation of shardlab's layout maths. JAX's answers come from
``playground_reference.py`` in a process of its own (libtpu's compile-only devices give it meshes of up to
4096 devices; see its docstring), and Python's reading of the spec text from the same process; the page's
answers come from its script in headless Chromium.

``PLAYGROUND_HTML`` may name another build of the page than the book's ``_build/html`` (e.g. Sphinx run on
``book/playground.md`` alone, with ``playground_data`` among its extensions).
"""

from __future__ import annotations

import json
import math
import os
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser.conftest import HTML
from tests.paths import ROOT

BUILT = Path(os.environ.get("PLAYGROUND_HTML", HTML))
PAGE = BUILT / "book" / "playground.html"
OWN_FILES = [PAGE, BUILT / "_static" / "playground.js", BUILT / "_static" / "playground.css",
             BUILT / "_static" / "playground_topologies.js"]
REFERENCE = Path(__file__).with_name("playground_reference.py")
N_CASES = 1200
WEIGHT_LIMIT = 150 * 1024
UPDATE_LIMIT_MS = 50.0
MIN_TEXT_PX = 12.0   # 9 pt at the size shown
NAMES = ["x", "y", "z", "w", "data", "model"]
DTYPES = ["float32", "bfloat16", "float16", "int32", "int8"]
# Axis names no mesh of the test has, as a reader may type them: JAX refuses them ("not found in mesh"),
# except '', which P reads as None where it is a whole entry.
ODD_NAMES = ["v", "1x", "a b", "a'b", 'q"', "é", "", "None", "x\\y", "\t", "\u200b", "\U0001f600", "data-1"]

# The page's script, run on a batch of cases: what the page says for each (ids in mesh order, index
# ranges, the devices holding each distinct piece, typeof), or the refusal it shows (JAX's refusal of
# the spec, jax.make_mesh's of the mesh on a TPU slice, or the page's own input error where the text is
# not a spec). The functions are looked up on the API object at each call.
HARNESS = """(cases) => {
  const P = window.ShardingPlayground;
  return cases.map((c) => {
    const mesh = { names: c.names, sizes: c.sizes };
    let ids;
    try {
      ids = Array.from(P.deviceOrder(mesh, c.order));
    } catch (e) {
      if (e instanceof P.JaxRefusal) return { mesh_error: e.message };
      throw e;
    }
    let entries;
    try {
      entries = P.parseSpec(c.spec_text, "spec");
      P.checkSpec(mesh, entries, c.shape);
    } catch (e) {
      if (e instanceof P.JaxRefusal) return { ids, error: [e.type, e.message] };
      if (e instanceof P.InputError) return { ids, input_error: e.message };
      throw e;
    }
    const lay = P.layout(mesh, ids, entries, c.shape);
    const pieces = Array.from({ length: lay.numTiles },   // holders of tile t: holders[t * replication ...]
      (_, t) => Array.from(lay.holders.slice(t * lay.replication, (t + 1) * lay.replication)));
    return { ids, indices: P.indices(lay), pieces, typeof: P.typeofString(c.dtype, c.shape, entries) };
  });
}"""

# Views a reader met where the page and JAX disagreed, kept among the compared cases.
SEEN_CASES = [
    # jax.make_mesh refuses (8, 8) on v5p-128: with an axis of size 1 first, the refused axis is the third.
    {"names": ["x", "y", "z"], "sizes": [1, 8, 8], "order": "v5p-128", "shape": [16, 16, 16], "dtype": "float32",
     "spec_text": "P('y', 'z')"},
    {"names": ["x", "y", "z", "w"], "sizes": [8, 1, 8, 1], "order": "v5p-128", "shape": [16, 16], "dtype": "int8",
     "spec_text": "P('x')"},
    # A dimension of length 0: devices that differ only along the axis that splits it hold the same piece.
    {"names": ["x", "y"], "sizes": [2, 4], "order": "list", "shape": [0, 8], "dtype": "float32",
     "spec_text": "P('x', 'y')"},
    {"names": ["x", "y", "z"], "sizes": [2, 2, 2], "order": "list", "shape": [4, 0, 0], "dtype": "float32",
     "spec_text": "P(None, ('x', 'y'), 'z')"},
    # Text Python does not accept: JAX has no jax.sharding.P.
    {"names": ["x", "y"], "sizes": [2, 4], "order": "list", "shape": [8, 8], "dtype": "float32",
     "spec_text": "jax.sharding.P('x', 'y')"},
    # Names that are not identifiers are still names to P, and JAX's "not found in mesh" is the answer.
    {"names": ["x", "y"], "sizes": [2, 4], "order": "list", "shape": [8, 8], "dtype": "float32",
     "spec_text": "P('1x')"},
    {"names": ["x", "y"], "sizes": [2, 4], "order": "list", "shape": [8, 8], "dtype": "float32",
     "spec_text": "P(('x', \"it's\"), '\\u200b')"},
]


# ------------------------------------------------------------------------------------------------
# Random cases


def _literal(name: str, rng) -> str:
    """A Python string literal for `name`, in one of the ways a reader may write it."""
    forms = [repr(name)]
    if name.isidentifier():
        forms += [f'"{name}"', f"u'{name}'", f"r'{name}'", f'"""{name}"""']
        if len(name) > 1:
            forms.append(f"'{name[0]}' \"{name[1:]}\"")                     # adjacent literals are one
        if name.isascii():
            forms.append("'" + "".join(f"\\x{ord(c):02x}" for c in name) + "'")
    return rng.choice(forms)


def _spec_text(entries, rng) -> str:
    """Python's spelling of P(*entries), in one of the ways a reader may type it."""

    def one(e):
        if e is None:
            return rng.choice(["None", "()", "[]", "(None)", "''"])
        if isinstance(e, str):
            lit = _literal(e, rng)
            return rng.choice([lit, lit, f"({lit},)", f"[{lit}]", f"({lit})"])
        body = ", ".join(_literal(a, rng) if a is not None else "None" for a in e)
        return rng.choice([f"({body})", f"({body},)", f"[{body}]"])

    body = ", ".join(one(e) for e in entries)
    if entries and rng.random() < 0.1:
        body += ","
    head = rng.choice(["P({})", "PartitionSpec({})", "jax.P({})", "jax.sharding.PartitionSpec({})", "{}"])
    text = head.format(body)
    if rng.random() < 0.05:                                      # text Python does not accept
        text = rng.choice([
            "jax.sharding.P({})".format(body), "Q({})".format(body), "P({}".format(body), "P({},,)".format(body),
            "P({}))".format(body), "P('x\\d')", "P('x)", "jax.PartitionSpec({})".format(body), "P(x)",
        ])
    return text


def _random_spec(rng, names, ndim):
    """Entries (None, a name or a list of names), sometimes ones JAX refuses."""
    axes = list(names)
    rng.shuffle(axes)
    length = ndim + (1 if rng.random() < 0.06 else 0)            # longer than the rank
    dims = [[] for _ in range(length)]
    if length:
        for a in axes:
            if rng.random() < 0.7:
                dims[rng.randrange(length)].append(a)
        if rng.random() < 0.08:
            dims[rng.randrange(length)].append(rng.choice(ODD_NAMES))  # not an axis of the mesh
        if rng.random() < 0.05 and names:
            dims[rng.randrange(length)].append(rng.choice(names))  # an axis used twice
        if rng.random() < 0.02:
            dims[rng.randrange(length)] += [rng.choice(names), None]  # None inside a tuple
    if length and rng.random() < 0.3:
        dims = dims[:rng.randrange(length + 1)]                   # fewer entries than dimensions
    return [None if not d else d[0] if len(d) == 1 else d for d in dims]


def _random_mesh(rng, topologies):
    if topologies and rng.random() < 0.15:                       # jax.make_mesh's order on a TPU slice
        name = rng.choice(sorted(topologies))
        t = topologies[name]
        shape = [int(s) for s in rng.choice(sorted(t["meshes"]) + sorted(t["refused"])).split("x") if s]
        while len(shape) < 4 and rng.random() < 0.4:
            shape.insert(rng.randrange(len(shape) + 1), 1)
        return shape or [1], name
    big = rng.random() < 0.12
    while True:
        k = rng.randint(1, 4)
        sizes = [rng.choice([1, 2, 2, 3, 4, 4, 8, 16] if not big else [4, 8, 16, 16]) for _ in range(k)]
        if math.prod(sizes) <= 4096:
            return sizes, "list"


def random_cases(n: int, seed: int, topologies: dict) -> list[dict]:
    rng = random.Random(seed)
    cases = []
    while len(cases) < n:
        sizes, order = _random_mesh(rng, topologies)
        names = rng.sample(NAMES, len(sizes))
        ndim = rng.choice([0, 1, 1, 2, 2, 2, 3, 3, 4])
        entries = _random_spec(rng, names, ndim)
        size = dict(zip(names, sizes))
        shape = []
        for d in range(ndim):
            e = entries[d] if d < len(entries) else None
            pieces = math.prod(size.get(a, 1) for a in ([] if e is None else [e] if isinstance(e, str) else e))
            # Mostly divisible by the pieces; sometimes not; sometimes empty; the product kept small.
            shape.append(0 if rng.random() < 0.06 else
                         pieces * rng.choice([1, 1, 2, 3]) + (rng.choice([1, 2]) if rng.random() < 0.07 else 0))
        if math.prod(shape) > 2 ** 24:
            continue
        cases.append({"names": names, "sizes": sizes, "order": order, "shape": shape, "dtype": rng.choice(DTYPES),
                      "spec_text": _spec_text(entries, rng)})
    return cases


def jax_answers(request: dict) -> dict:
    """JAX's answers, from playground_reference.py in a process of its own."""
    done = subprocess.run([sys.executable, str(REFERENCE)], input=json.dumps(request), capture_output=True,
                          text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, f"playground_reference.py failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout)


def mismatches(cases, page, ref) -> list[str]:
    """Every case where the page and JAX (or Python, reading the spec's text) differ, described."""
    out = []
    for c, p, r in zip(cases, page, ref):
        what = (f"mesh {dict(zip(c['names'], c['sizes']))} ({c['order']}), shape {c['shape']}, "
                f"spec {c['spec_text']}")
        if "mesh_error" in r or "mesh_error" in p:
            if p.get("mesh_error") != r.get("mesh_error"):
                out.append(f"{what}: jax.make_mesh: page {p.get('mesh_error')}, JAX {r.get('mesh_error')}")
        elif p["ids"] != r["ids"]:
            out.append(f"{what}: device order differs")
        elif "rejected" in r or "input_error" in p:
            if "rejected" not in r or "input_error" not in p:
                out.append(f"{what}: page {p.get('input_error', 'reads the text')}, "
                           f"Python {r.get('rejected', 'reads the text')}")
        elif "error" in r or "error" in p:
            if p.get("error") != r.get("error"):
                out.append(f"{what}: page says {p.get('error')}, JAX says {r.get('error')}")
        elif p["indices"] != r["indices"]:
            bad = next(i for i, (a, b) in enumerate(zip(p["indices"], r["indices"])) if a != b)
            out.append(f"{what}: device {r['ids'][bad]}: page {p['indices'][bad]}, JAX {r['indices'][bad]}")
        elif sorted(p["pieces"]) != sorted(r["pieces"]):
            out.append(f"{what}: pieces: page has {len(p['pieces'])} on {len(p['pieces'][0])} device(s) each, "
                       f"JAX {len(r['pieces'])} on {len(r['pieces'][0])}")
        elif p["typeof"] != r["typeof"]:
            out.append(f"{what}: typeof: page {p['typeof']}, JAX {r['typeof']}")
    return out


# ------------------------------------------------------------------------------------------------
# Fixtures


@pytest.fixture(scope="module")
def page(browser):
    p = browser.new_page(viewport={"width": 1280, "height": 900})
    errors = []
    p.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
    p.on("pageerror", lambda e: errors.append(str(e)))
    p.goto(PAGE.as_uri(), wait_until="load")
    p.wait_for_function("window.ShardingPlayground && window.ShardingPlayground.update")
    yield p
    assert errors == [], f"console errors on the playground: {errors}"
    p.close()


@pytest.fixture(scope="module")
def topologies(page):
    data = page.evaluate("window.SHARDLAB_TOPOLOGIES")
    assert data["missing"] is None, f"the book was built without TPU orders: {data['missing']}"
    return data["targets"]


@pytest.fixture(scope="module")
def compared(page, topologies):
    cases = SEEN_CASES + random_cases(N_CASES, seed=20260101, topologies=topologies)
    ref = jax_answers({"layouts": cases})["layouts"]
    return cases, ref


def page_answers(page, cases):
    out = []
    for i in range(0, len(cases), 100):   # batches keep each answer a modest message
        out += page.evaluate(HARNESS, cases[i:i + 100])
    return out


# ------------------------------------------------------------------------------------------------
# The maths against JAX


def test_layouts_and_refusals_match_jax(page, compared):
    cases, ref = compared
    answers = page_answers(page, cases)
    count = lambda test: sum(1 for c, r in zip(cases, ref) if test(c, r))  # noqa: E731
    refused = count(lambda c, r: "error" in r)
    kinds = sorted({r["error"][0] for r in ref if "error" in r})
    tally = {
        "refusals": refused,
        "meshes of >= 1024 devices": count(lambda c, r: math.prod(c["sizes"]) >= 1024),
        "in jax.make_mesh's TPU order": count(lambda c, r: c["order"] != "list"),
        "meshes jax.make_mesh refuses": count(lambda c, r: "mesh_error" in r),
        "  of them with axes of size 1": count(lambda c, r: "mesh_error" in r and 1 in c["sizes"]),
        "texts Python does not accept": count(lambda c, r: "rejected" in r),
        "names not found in the mesh": count(lambda c, r: "error" in r and "is not found in mesh" in r["error"][1]),
        "  of them not identifiers": count(lambda c, r: "error" in r and "is not found in mesh" in r["error"][1]
                                           and not re.match(r"Resource axis: [A-Za-z_]\w* of", r["error"][1])),
        "laid out with a dimension of length 0": count(lambda c, r: "pieces" in r and 0 in c["shape"]),
        "  of them split (the pieces shared)": count(
            lambda c, r: "indices" in r and r["indices"] and [0, 0] in r["indices"][0]),
    }
    bad = mismatches(cases, answers, ref)
    print(f"playground: {len(cases)} cases compared with JAX, {len(cases) - len(bad)} agree; refusals of kinds "
          f"{kinds}; " + ", ".join(f"{k.strip()}: {v}" for k, v in tally.items()))
    assert len(cases) >= 1000 and refused >= 50, tally
    assert min(tally.values()) >= 5, f"too few cases of some kind: {tally}"
    assert len(kinds) >= 3, f"too few kinds of refusal among the cases: {kinds}"
    assert bad == [], f"{len(bad)} of {len(cases)} cases differ from JAX; first ones:\n" + "\n".join(bad[:10])


def test_views_readers_met_match_jax(page, compared):
    """The views where the page once disagreed with JAX or Python, each said by name when it fails."""
    cases, ref = compared
    n = len(SEEN_CASES)
    assert cases[:n] == SEEN_CASES
    bad = mismatches(cases[:n], page_answers(page, cases[:n]), ref[:n])
    assert bad == [], "\n".join(bad)
    assert "logical_axis_index 2 " in ref[0]["mesh_error"]
    assert "rejected" in ref[4] and "is not found in mesh" in ref[5]["error"][1]


# Spec text Python reads (JAX then refuses most of it) but the page does not: what the page says instead.
UNREAD = [
    ("P(1)", "an entry that is not None"),
    ("P(True)", "an entry that is not None"),
    ("P(P.UNCONSTRAINED)", "an entry that is not None"),
    ("P('x', unreduced={'y'})", "does not read keyword arguments (unreduced=)"),
    ("P(b'x')", "does not read bytes literals"),
    ("P(f'x')", "does not read f-strings"),
    ("P('\\N{BULLET}')", "does not read \\N{...} escapes"),
]


def test_spec_text_the_page_does_not_read(page):
    cases = [{"names": ["x", "y"], "sizes": [2, 4], "order": "list", "shape": [8, 8], "dtype": "float32",
              "spec_text": text} for text, _ in UNREAD]
    python = jax_answers({"layouts": cases})["layouts"]
    for (text, expected), answer, ref in zip(UNREAD, page_answers(page, cases), python):
        assert "rejected" not in ref, f"Python rejects {text}; the test expected it to read it"
        assert expected in answer.get("input_error", ""), (text, answer)


@pytest.mark.parametrize("bug, plant", [
    ("mixed radix read least significant first",
     "const f = P.layout; P.layout = (m, ids, e, s) => f(m, ids, e.map((x) => Array.isArray(x) ? [...x].reverse() : x), s);"),
    ("no rank check", "const f = P.checkSpec; P.checkSpec = (m, e, s) => f(m, e.slice(0, s.length), s);"),
    ("uneven split not refused",
     "const f = P.checkSpec; P.checkSpec = (m, e, s) => { try { f(m, e, s); } catch (x) { if (x.type !== 'IndivisibleError') throw x; } };"),
    ("make_mesh's refused axis counted among the axes of size > 1 only",
     "const f = P.deviceOrder; P.deviceOrder = (m, o) => f({ names: m.names.filter((_, k) => m.sizes[k] > 1), "
     "sizes: m.sizes.filter((s) => s > 1) }, o);"),
    ("jax.sharding.P read as P",
     "const f = P.parseSpec; P.parseSpec = (t, fl) => f(t.replace('jax.sharding.P(', 'P('), fl);"),
    ("names that are not identifiers refused as input",
     "const f = P.parseSpec; P.parseSpec = (t, fl) => { const e = f(t, fl); if (e.flat().some((a) => a !== null "
     "&& !/^[A-Za-z_]\\w*$/.test(a))) throw new P.InputError(fl, 'not a name'); return e; };"),
    ("empty pieces counted apart",
     "const f = P.layout; P.layout = (m, ids, e, s) => { const lay = f(m, ids, e, s); return s.includes(0) "
     "? { ...lay, numTiles: lay.n, replication: 1, holders: Int32Array.from(lay.ids) } : lay; };"),
])
def test_comparison_catches_a_planted_bug(browser, compared, bug, plant):
    cases, ref = compared
    p = browser.new_page()
    try:
        p.goto(PAGE.as_uri(), wait_until="load")
        p.evaluate(f"() => {{ const P = window.ShardingPlayground; {plant} }}")
        bad = mismatches(cases, page_answers(p, cases), ref)
    finally:
        p.close()
    assert bad, f"the comparison with JAX did not notice the planted bug: {bug}"


# ------------------------------------------------------------------------------------------------
# Resharding against XLA's choices

RESHARD_SHAPES = {2: [16, 16], 3: [8, 8, 8]}
# A pair a reader met where XLA gathers everything and the page counts an all-to-all: kept among the 3-D pairs.
SEEN_PAIR = [[["x", "y"], "z", None], [None, None, ["x", "y", "z"]]]


def reshard_groups():
    """Pairs of random specs of 2-D and of 3-D arrays on a 2 x 4 and a 2 x 2 x 2 mesh, each for CPU devices and
    for a TPU slice."""
    groups = []
    for rank, shape in RESHARD_SHAPES.items():
        for names, sizes, tpu in ((["x", "y"], [2, 4], "v5e-8"), (["x", "y", "z"], [2, 2, 2], "v5p-16")):
            rng = random.Random(len(names) + 10 * (rank - 2))
            pairs = [SEEN_PAIR] if rank == 3 and len(names) == 3 else []
            while len(pairs) < 30:
                a, b = (_random_spec_for_reshard(rng, names, rank) for _ in range(2))
                if a != b:
                    pairs.append([a, b])
            for target in ("cpu", tpu):
                groups.append({"target": target, "names": names, "sizes": sizes, "shape": shape, "pairs": pairs})
    return groups


def _random_spec_for_reshard(rng, names, rank):
    axes = list(names)
    rng.shuffle(axes)
    dims = [[] for _ in range(rank)]
    for a in axes:
        if rng.random() >= 0.35:
            dims[rng.randrange(rank)].append(a)
    return [None if not d else d[0] if len(d) == 1 else d for d in dims]


def _xla_table(page):
    """The page's table: {the page's moves: {XLA's choice: {platforms where the table says it was seen}}}."""
    rows = page.eval_on_selector_all("#pg-xla-table tr[data-move]",
                                     "rows => rows.map(r => [r.dataset.move, r.dataset.otherwise])")
    table = {}
    for move, otherwise in rows:
        for token in otherwise.split():
            kinds, platforms = token.split("@")
            table.setdefault(move, {})[kinds] = set(platforms.split(","))
    return table


def test_reshard_moves_against_xla(page):
    groups = reshard_groups()
    xla = jax_answers({"reshards": groups})["reshards"]
    table = _xla_table(page)
    counts = {}          # (rank, platform) -> [pairs, same collectives, of them with the same bytes]
    unexplained, cheaper = [], []
    ratios = {"same": 0.0, "other": 0.0}   # the most XLA sends over the page's count, same collectives or not
    observed = {}        # (the page's moves, XLA's) -> platforms where they differ so
    for group, chosen in zip(groups, xla):
        platform = "cpu" if group["target"] == "cpu" else "tpu"
        tally = counts.setdefault((len(group["shape"]), platform), [0, 0, 0])
        plans = page.evaluate("""(g) => g.pairs.map(([a, b]) => window.ShardingPlayground.reshardPlan(
            { names: g.names, sizes: g.sizes }, a, b, g.shape, 4).map((m) => [m.kind, m.bytes]))""", group)
        for (first, second), plan, answer in zip(group["pairs"], plans, chosen):
            ours = "+".join(sorted({k for k, _ in plan if k != "slice"}))
            theirs = "+".join(answer["kinds"])
            pair = f"{group['target']}: {first} -> {second} ({'x'.join(map(str, group['shape']))})"
            tally[0] += 1
            ours_bytes = sum(b for _, b in plan)
            if ours_bytes:
                kind = "same" if ours == theirs else "other"
                ratios[kind] = max(ratios[kind], answer["bytes"] / ours_bytes)
            if [first, second] == SEEN_PAIR:
                assert (theirs, answer["bytes"], ours, ours_bytes) == ("all-gather", 1792, "all-to-all", 320), pair
            if ours == theirs:
                tally[1] += 1
                if math.isclose(ours_bytes, answer["bytes"]):
                    tally[2] += 1
                elif ours_bytes > answer["bytes"]:   # the page says XLA's program sends more, never less
                    cheaper.append(f"{pair}: page {ours_bytes} bytes, XLA {answer['bytes']}")
            else:
                observed.setdefault((ours, theirs), set()).add(platform)
                if platform not in table.get(ours, {}).get(theirs, ()):
                    unexplained.append(f"{pair}: page {ours or 'nothing sent'}, XLA {theirs or 'nothing'}")
    for (rank, platform), (total, same, same_bytes) in sorted(counts.items()):
        print(f"playground reshard, {rank}-D arrays: XLA:{platform.upper()} chose the page's collectives in {same} "
              f"of {total} pairs ({same / total:.0%}), with the same modelled bytes in {same_bytes}")
        assert total >= 50
    print("playground reshard: where XLA chose otherwise:", sorted((k, sorted(v)) for k, v in observed.items()))
    assert unexplained == [], "XLA chose moves the page's table does not mention:\n" + "\n".join(unexplained)
    # Every alternative the table lists was seen, on each platform it names.
    for ours, alternatives in table.items():
        for theirs, platforms in alternatives.items():
            seen = observed.get((ours, theirs), set())
            assert platforms <= seen, f"the table lists {ours} -> {theirs} on {platforms}; XLA chose it on {seen}"
    assert cheaper == [], "XLA's program sends fewer bytes than the page counts:\n" + "\n".join(cheaper)
    # The page's table of counts.
    stated = page.eval_on_selector_all("#pg-xla-counts tr[data-rank] td[data-count]",
                                       "cells => cells.map(c => [c.parentElement.dataset.rank, c.dataset.count, c.textContent])")
    found = {}
    for (rank, platform), (total, same, same_bytes) in counts.items():
        assert found.setdefault((str(rank), "pairs"), total) == total   # the same pairs for both platforms
        found[(str(rank), f"{platform}-same")] = same
        found[(str(rank), f"{platform}-bytes")] = same_bytes
    assert {(r, k): int(v) for r, k, v in stated} == found, f"the page states {stated}; the test found {found}"
    stated_ratios = dict(page.eval_on_selector_all("[data-ratio]", "els => els.map(e => [e.dataset.ratio, e.textContent])"))
    assert {k: float(v) for k, v in stated_ratios.items()} == {k: round(v, 1) for k, v in ratios.items()}, \
        f"the page states ratios {stated_ratios}; the test found {ratios}"


def test_reshard_rules(page):
    plans = page.evaluate("""() => {
      const P = window.ShardingPlayground, mesh = { names: ["x", "y"], sizes: [2, 4] };
      const plan = (a, b) => P.reshardPlan(mesh, P.parseSpec(a, "a"), P.parseSpec(b, "b"), [16, 16], 4)
        .map((m) => [m.kind, m.axes.join(","), m.bytes].concat(m.kind === "all-to-all" ? [m.ringBytes] : []));
      return {
        drop: plan("P('x', 'y')", "P('x', None)"), add: plan("P('x', None)", "P('x', 'y')"),
        move: plan("P('x', None)", "P(None, 'x')"), move4: plan("P('y', None)", "P(None, 'y')"),
        move_both: plan("P(('x', 'y'), None)", "P(None, ('x', 'y'))"),
        permute: plan("P(('x', 'y'))", "P(('y', 'x'))"), same: plan("P('x')", "P(('x',), None)"),
      };
    }""")
    # 16 x 16 float32 = 1024 bytes; the shards: P('x', 'y') 128, P('x', None) 512, P('y', None) 256,
    # P(('x', 'y'), None) 128. All-to-all: bytes_all_to_all (n-1)/n, then bytes_all_to_all_ring (n/4 for even n).
    assert plans["drop"] == [["all-gather", "y", 512 * 3 / 4]]
    assert plans["add"] == [["slice", "y", 0]]
    assert plans["move"] == [["all-to-all", "x", 512 / 2, 512 / 2]]
    assert plans["move4"] == [["all-to-all", "y", 256 * 3 / 4, 256]]
    assert plans["move_both"] == [["all-to-all", "x,y", 128 * 7 / 8, 128 * 8 / 4]]   # one exchange in groups of 8
    assert plans["permute"] == [["collective-permute", "y,x", 128]]
    assert plans["same"] == []


def test_reshard_bytes_follow_cost_model(page):
    """The page's formulas are cost_model.py's: checked on a range of group sizes and byte counts."""
    from shardlab.layout.ring_bytes import bytes_all_to_all, bytes_all_to_all_ring

    cases = [(nbytes, n) for nbytes in (64, 1000, 4096) for n in (2, 3, 4, 5, 8, 16)]
    page_ring = page.evaluate("""(cases) => cases.map(([b, n]) => window.ShardingPlayground.reshardPlan(
        { names: ["x"], sizes: [n] }, ["x", null], [null, "x"], [n * n, b / 4], 1))""",
        [[nbytes, n] for nbytes, n in cases])
    for (nbytes, n), plan in zip(cases, page_ring):
        operand = n * (nbytes / 4) * 1          # the shard: (n*n / n) x (nbytes / 4) items of 1 byte
        assert [m["kind"] for m in plan] == ["all-to-all"]
        assert math.isclose(plan[0]["bytes"], bytes_all_to_all(operand, n))
        assert math.isclose(plan[0]["ringBytes"], bytes_all_to_all_ring(operand, n))


# ------------------------------------------------------------------------------------------------
# The page as a reader meets it


DEFAULTS = {"mesh": [{"name": "x", "size": "2"}, {"name": "y", "size": "4"}] + [{"name": "", "size": ""}] * 2,
            "shape": "(8, 8)", "dtype": "float32", "spec": "P('x', 'y')", "spec2": "", "order": "list"}


def test_link_reproduces_the_view(browser, page):
    page.fill("#pg-axis-name-2", "z")
    page.fill("#pg-axis-size-2", "2")
    page.fill("#pg-shape", "(8, 16, 4)")
    page.fill("#pg-spec", "P('x', ('y', 'z'))")
    page.fill("#pg-spec2", "P(None, 'y')")
    page.wait_for_function("() => location.hash.includes('spec2=P')")   # the address follows once typing pauses
    url = page.url
    other = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        other.goto(url, wait_until="load")
        other.wait_for_function("window.ShardingPlayground && window.ShardingPlayground.update")
        for sel in ("#pg-spec", "#pg-spec2", "#pg-shape", "#pg-axis-name-2"):
            assert other.input_value(sel) == page.input_value(sel)
        assert other.inner_text("#pg-out-1") == page.inner_text("#pg-out-1")
        assert other.inner_text("#pg-reshard") == page.inner_text("#pg-reshard")
        assert other.locator("#pg-canvas-1").screenshot() == page.locator("#pg-canvas-1").screenshot()
    finally:
        other.close()
    assert "float32[8@x,16@(y,z),4]" in page.inner_text("#pg-out-1")
    assert "all-gather over 'x', 'z' (groups of 4)" in page.inner_text("#pg-reshard")
    page.evaluate("() => window.ShardingPlayground.setState(DEFAULTS)".replace("DEFAULTS", json.dumps(DEFAULTS)))


@pytest.mark.parametrize("field, value, expected", [
    ("#pg-shape", "(8, eight)", "shape: expected whole numbers"),
    ("#pg-axis-size-0", "0", "mesh axis 1: expected a positive whole size"),
    ("#pg-spec", "P(x)", "spec: an entry that is not None"),
    ("#pg-axis-size-1", "4096", "mesh axes: the sizes multiply to 8192 devices; the playground draws at most 4096"),
])
def test_bad_input_names_the_field(page, field, value, expected):
    before = page.input_value(field)
    page.fill(field, value)
    try:
        assert expected in page.inner_text("#pg-error")
        assert page.get_attribute(field, "aria-invalid") == "true", f"{field} is not marked invalid"
        assert "pg-error" in page.get_attribute(field, "aria-describedby").split()
        assert expected in page.inner_text("#pg-status")   # what a screen reader announces
    finally:
        page.fill(field, before)
    assert page.inner_text("#pg-error") == ""
    assert page.get_attribute(field, "aria-invalid") is None


def test_picture_conventions_are_draw_py_s(page):
    from shardlab.pictures import draw

    assert page.evaluate("Array.from(window.ShardingPlayground.PALETTE)") == list(draw.PALETTE)
    holders = [[3], [0, 1], [0, 1, 2, 3, 4, 5], list(range(12)), list(range(0, 24, 2)), [5, 1, 9, 2, 7, 3, 8, 4, 6],
               list(range(16))]
    labels = page.evaluate("(hs) => hs.map((ids) => window.ShardingPlayground.holderLabel(ids, 16))", holders)
    assert labels == [draw._holder_label(ids, 16) for ids in holders]


def test_refusal_shown_in_jax_terms(page):
    page.fill("#pg-spec", "P('x', 'x')")
    try:
        text = page.inner_text("#pg-out-1")
        assert "DuplicateSpecError: A single NamedSharding spec specification" in text
        assert not page.locator("#pg-canvas-1").is_visible()
    finally:
        page.fill("#pg-spec", "P('x', 'y')")


def test_keyboard_and_labels(page):
    unlabelled = page.eval_on_selector_all("#pg-form input, #pg-form select",
                                           "els => els.filter(e => !e.labels || e.labels.length === 0).map(e => e.id)")
    assert unlabelled == []
    page.focus("#pg-axis-name-0")
    seen = []
    for _ in range(12):
        seen.append(page.evaluate("document.activeElement.id"))
        page.keyboard.press("Tab")
    assert seen[:8] == [f"pg-axis-{w}-{k}" for k in range(4) for w in ("name", "size")]
    assert {"pg-order", "pg-shape", "pg-dtype", "pg-spec"} <= set(seen)
    page.focus("#pg-order")
    page.keyboard.press("ArrowDown")   # a TPU order, chosen from the keyboard
    assert page.input_value("#pg-order") != "list"
    page.select_option("#pg-order", "list")


def _contrast(page, selector):
    return page.evaluate("""(sel) => {
      const lum = (c) => { const v = c.match(/[\\d.]+/g).slice(0, 3).map(Number).map((x) => x / 255)
        .map((x) => (x <= 0.03928 ? x / 12.92 : ((x + 0.055) / 1.055) ** 2.4)); return 0.2126 * v[0] + 0.7152 * v[1] + 0.0722 * v[2]; };
      const el = document.querySelector(sel);
      let bg = el, back = "rgba(0, 0, 0, 0)";
      while (bg && (back = getComputedStyle(bg).backgroundColor).endsWith(", 0)")) bg = bg.parentElement;
      const [a, b] = [lum(getComputedStyle(el).color), lum(back)].sort((x, y) => y - x);
      return (a + 0.05) / (b + 0.05);
    }""", selector)


def test_readable_in_dark_mode(page):
    page.evaluate("document.documentElement.dataset.theme = 'dark'")
    try:
        for sel in ("label[for=pg-spec]", "#pg-spec", "#pg-order", ".pg-facts dd", "#pg-xla-table td"):
            assert _contrast(page, sel) >= 4.5, f"{sel} is hard to read in dark mode"
    finally:
        page.evaluate("document.documentElement.dataset.theme = 'light'")


# ------------------------------------------------------------------------------------------------
# Weight and speed


def page_weight() -> int:
    """The page and its own files (the theme's shared CSS and scripts, cached across pages, not counted)."""
    return sum(p.stat().st_size for p in OWN_FILES)


def test_page_weight():
    weight = page_weight()
    print(f"playground page weight: {weight / 1024:.1f} KiB (" + ", ".join(
        f"{p.name} {p.stat().st_size / 1024:.1f}" for p in OWN_FILES) + ")")
    assert weight <= WEIGHT_LIMIT


# Meshes of 4096 devices whose update is timed: one tile per device, grey tiles of 16 holders, 36 panels.
BIG_VIEWS = [
    {"mesh": [("x", 16), ("y", 16), ("z", 16)], "shape": "(4096, 64)", "spec": "P(('x', 'y', 'z'), None)"},
    {"mesh": [("x", 16), ("y", 16), ("z", 16)], "shape": "(64, 64)", "spec": "P('x', 'y')"},
    {"mesh": [("x", 16), ("y", 16), ("z", 16)], "shape": "(16, 16, 16)", "spec": "P('x', 'y', 'z')"},
    {"mesh": [("x", 64), ("y", 64)], "shape": "(64, 64)", "spec": "P('x', 'y')"},
]


def update_times(page, repeats: int = 7, rounds: int = 3) -> dict:
    """Milliseconds of one update (parse, layout, drawing, text, address) per view of BIG_VIEWS: the best of
    `rounds` medians (a busy neighbour on a shared machine only ever makes a round slower). Each update is a
    real change, the dtype toggled, so the address is rewritten every time, as when a reader types."""
    out = {}
    for view in BIG_VIEWS:
        state = {"mesh": [{"name": n, "size": str(s)} for n, s in view["mesh"]] + [{"name": "", "size": ""}] * (
            4 - len(view["mesh"])), "shape": view["shape"], "spec": view["spec"], "spec2": "", "order": "list"}
        page.evaluate("(s) => window.ShardingPlayground.setState(s)", state)
        medians = []
        for _ in range(rounds):
            times = [page.evaluate("(d) => window.ShardingPlayground.setState({ dtype: d })",
                                   "bfloat16" if k % 2 else "float32") for k in range(repeats)]
            medians.append(statistics.median(times))
        out[f"{view['spec']} on {'x'.join(str(s) for _, s in view['mesh'])}"] = min(medians)
    return out


def test_update_of_a_4096_device_mesh_is_fast(browser):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        page.goto(PAGE.as_uri(), wait_until="load")
        page.wait_for_function("window.ShardingPlayground && window.ShardingPlayground.update")
        times = update_times(page)
        assert page.inner_text("#pg-error") == ""
    finally:
        page.close()
    for name, ms in times.items():
        print(f"playground update, {name}: {ms:.1f} ms")
    assert max(times.values()) <= UPDATE_LIMIT_MS, times


# ------------------------------------------------------------------------------------------------
# Links the page cannot follow to the letter


def test_link_values_not_offered_are_said(browser):
    from urllib.parse import urlencode

    link = urlencode({"mesh": "x:2,y:2,z:2,w:1,v:1", "shape": "(8, 8)", "dtype": "float64", "order": "v4-32",
                      "colour": "red"})   # no spec, a fifth axis, a dtype and an order the page does not offer
    p = browser.new_page(viewport={"width": 1280, "height": 900})
    try:
        p.goto(PAGE.as_uri() + "#" + link, wait_until="load")
        p.wait_for_function("window.ShardingPlayground && window.ShardingPlayground.update")
        assert p.is_visible("#pg-link-note")
        note = p.inner_text("#pg-link-note")
        for words in ("dtype \"float64\"", "float32", "device order \"v4-32\"", "list order", "v:1",
                      "no spec: showing P('x', 'y')", "colour=red"):
            assert words in note, f"the note does not say {words!r}: {note}"
        assert p.input_value("#pg-dtype") == "float32" and p.input_value("#pg-order") == "list"
        assert [p.input_value(f"#pg-axis-name-{k}") for k in range(4)] == ["x", "y", "z", "w"]
        p.fill("#pg-shape", "(8, 16)")                    # the reader takes over: the note goes
        assert not p.is_visible("#pg-link-note")
        # A link the page follows to the letter shows no note, on a page's first load or on a new address.
        p.evaluate("(h) => { location.hash = h; }", "#" + urlencode(
            {"mesh": "x:2,y:4", "shape": "(8, 8)", "dtype": "int8", "spec": "P('x')", "spec2": "", "order": "list"}))
        p.wait_for_function("() => document.getElementById('pg-dtype').value === 'int8'")
        assert not p.is_visible("#pg-link-note")
        p.evaluate("(h) => { location.hash = h; }", "#" + urlencode(
            {"mesh": "x:2,y:4", "shape": "(8, 8)", "dtype": "float64", "spec": "P('x')", "order": "list"}))
        p.wait_for_function("() => !document.getElementById('pg-link-note').hidden")
        assert "float64" in p.inner_text("#pg-link-note") and p.input_value("#pg-dtype") == "float32"
    finally:
        p.close()


# ------------------------------------------------------------------------------------------------
# A phone's screen


PHONE = {"width": 390, "height": 844}

# Everything on the page's main column that sticks out of the screen (outside boxes that scroll themselves).
OVERFLOW = """() => {
  const w = document.documentElement.clientWidth;
  const out = [];
  const scrolls = (el) => { for (let a = el.parentElement; a; a = a.parentElement) {
    const o = getComputedStyle(a).overflowX; if (o === "auto" || o === "scroll" || o === "hidden") return true; }
    return false; };
  for (const el of document.querySelectorAll("main *")) {
    const r = el.getBoundingClientRect();
    if (!r.width || getComputedStyle(el).visibility === "hidden" || scrolls(el)) continue;
    if (r.right > w + 0.5 || r.left < -0.5) out.push(`${el.tagName.toLowerCase()}#${el.id}.${el.className}: ${Math.round(r.left)}..${Math.round(r.right)}`);
  }
  return { scrollWidth: document.documentElement.scrollWidth, width: w, out: out.slice(0, 10) };
}"""

# Each form control: inside the screen, and what a finger meets at its centre once scrolled to.
CONTROLS = """() => [...document.querySelectorAll("#pg-form input, #pg-form select")].map((el) => {
  el.scrollIntoView({ block: "center", inline: "nearest" });
  const r = el.getBoundingClientRect();
  const hit = document.elementFromPoint(r.left + r.width / 2, r.top + r.height / 2);
  return { id: el.id, left: r.left, right: r.right, width: r.width, height: r.height,
           reached: hit === el || el.contains(hit) };
})"""


@pytest.mark.parametrize("state", [
    {},
    {"spec2": "P(None, ('x', 'y'))", "order": "v5e-256", "mesh": [{"name": "data", "size": "16"},
     {"name": "model", "size": "16"}] + [{"name": "", "size": ""}] * 2, "shape": "(4096, 4096)",
     "spec": "P('data', 'model')"},
    {"spec": "P(('x', 'y'), None, 'x')"},                          # JAX's refusal, a long message
    {"shape": "(8, eight)"},                                      # the page's input error
    {"mesh": [{"name": "x", "size": "2"}, {"name": "y", "size": "4"}, {"name": "z", "size": "2"},
              {"name": "w", "size": "2"}], "shape": "(8, 16, 4)", "spec": "P('x', ('y', 'z'), 'w')",
     "spec2": "P(None, None, ('w', 'x'))"},
], ids=["default", "TPU order and reshard", "refusal", "input error", "3-D panels"])
def test_fits_a_phone(browser, state):
    p = browser.new_page(viewport=PHONE, device_scale_factor=3, is_mobile=True, has_touch=True)
    try:
        p.goto(PAGE.as_uri(), wait_until="load")
        p.wait_for_function("window.ShardingPlayground && window.ShardingPlayground.update")
        if state:
            p.evaluate("(s) => window.ShardingPlayground.setState(s)", state)
        overflow = p.evaluate(OVERFLOW)
        assert overflow["width"] == PHONE["width"]
        assert overflow["scrollWidth"] <= PHONE["width"] and overflow["out"] == [], overflow
        for c in p.evaluate(CONTROLS):
            assert c["width"] > 20 and c["height"] > 10, f"{c['id']} is squeezed: {c}"
            assert 0 <= c["left"] and c["right"] <= PHONE["width"], f"{c['id']} is off the screen: {c}"
            assert c["reached"], f"{c['id']} is covered or clipped: {c}"
    finally:
        p.close()


# ------------------------------------------------------------------------------------------------
# The pictures: sharp, and readable


# Records every text drawn on the playground's canvases: its words, its size and its ink box as shown
# (CSS pixels of the canvas), and whether it was squeezed to a width.
TEXT_SPY = """() => {
  const proto = CanvasRenderingContext2D.prototype;
  window.__texts = [];
  if (proto.__pgFillText) return;
  proto.__pgFillText = proto.fillText;
  proto.fillText = function (text, x, y, maxWidth) {
    const m = this.measureText(text);
    const t = this.getTransform();
    const perCss = this.canvas.width / this.canvas.clientWidth;   // backing pixels per CSS pixel shown
    const corners = [[x - m.actualBoundingBoxLeft, y - m.actualBoundingBoxAscent],
      [x + m.actualBoundingBoxRight, y - m.actualBoundingBoxAscent],
      [x - m.actualBoundingBoxLeft, y + m.actualBoundingBoxDescent],
      [x + m.actualBoundingBoxRight, y + m.actualBoundingBoxDescent]]
      .map(([u, v]) => [(t.a * u + t.c * v + t.e) / perCss, (t.b * u + t.d * v + t.f) / perCss]);
    const xs = corners.map((c) => c[0]);
    const ys = corners.map((c) => c[1]);
    window.__texts.push({ canvas: this.canvas.id, text: String(text), squeezed: maxWidth !== undefined,
      px: parseFloat(/([\\d.]+)px/.exec(this.font)[1]) * Math.hypot(t.a, t.b) / perCss,
      box: [Math.min(...xs), Math.min(...ys), Math.max(...xs), Math.max(...ys)] });
    return proto.__pgFillText.call(this, text, x, y, maxWidth);
  };
}"""

PICTURES = [
    {},
    {"spec": "P('x')"},                                                         # 4 holders, one grey tile each
    {"mesh": [{"name": "x", "size": "12"}, {"name": "y", "size": "2"}] + [{"name": "", "size": ""}] * 2,
     "shape": "(8, 6)", "spec": "P(None, 'y')"},                               # 12 holders per tile
    {"mesh": [{"name": "x", "size": "2"}, {"name": "y", "size": "4"}, {"name": "z", "size": "2"},
              {"name": "", "size": ""}], "shape": "(8, 16, 4)", "spec": "P('x', ('y', 'z'))"},
    {"shape": "(1024,)", "spec": "P(('x', 'y'))"},
] + [{"mesh": [{"name": n, "size": str(s)} for n, s in v["mesh"]] + [{"name": "", "size": ""}] * (4 - len(v["mesh"])),
      "shape": v["shape"], "spec": v["spec"]} for v in [
    {"mesh": [("x", 16), ("y", 16), ("z", 16)], "shape": "(4096, 64)", "spec": "P(('x', 'y', 'z'), None)"},
    {"mesh": [("x", 16), ("y", 16), ("z", 16)], "shape": "(64, 64)", "spec": "P('x', 'y')"},
    {"mesh": [("x", 16), ("y", 16), ("z", 16)], "shape": "(16, 16, 16)", "spec": "P('x', 'y', 'z')"},
    {"mesh": [("x", 64), ("y", 64)], "shape": "(64, 64)", "spec": "P('x', 'y')"},
    {"mesh": [("x", 8), ("y", 8)], "shape": "(64, 64)", "spec": "P('x', 'y')"},
]]


SLACK_PX = 0.5   # ink boxes are measured; half a CSS pixel of antialiasing is not a spill


def _overlap(a, b):
    return min(a[2], b[2]) - max(a[0], b[0]) > SLACK_PX and min(a[3], b[3]) - max(a[1], b[1]) > SLACK_PX


def _inside(box, frame):
    return (box[0] >= frame[0] - SLACK_PX and box[1] >= frame[1] - SLACK_PX and box[2] <= frame[2] + SLACK_PX
            and box[3] <= frame[3] + SLACK_PX)


def text_problems(texts, size, geometry):
    """What is wrong with the texts drawn on a picture of `size` (CSS px) whose tiles `geometry` places:
    (problems, number of tile labels)."""
    w, h = size
    problems = []
    for t in texts:
        if t["px"] < MIN_TEXT_PX:
            problems.append(f"{t['text']!r} at {t['px']:.2f} px")
        if t["squeezed"]:
            problems.append(f"{t['text']!r} squeezed to a width")
        if not _inside(t["box"], [0, 0, w, h]):
            problems.append(f"{t['text']!r} outside the {w} x {h} picture: {t['box']}")
    for i, a in enumerate(texts):
        problems += [f"{a['text']!r} overlaps {b['text']!r}" for b in texts[i + 1:] if _overlap(a["box"], b["box"])]
    labels = 0
    R, C = geometry["R"], geometry["C"]
    for t in texts:   # a text centred in a panel is a tile's label: it must lie inside that tile
        cx, cy = (t["box"][0] + t["box"][2]) / 2, (t["box"][1] + t["box"][3]) / 2
        for g in geometry["panels"]:
            if g["x0"] <= cx < g["x0"] + g["pw"] and g["y0"] <= cy < g["y0"] + g["ph"]:
                c, r = math.floor((cx - g["x0"]) * C / g["pw"]), math.floor((cy - g["y0"]) * R / g["ph"])
                tile = [g["x0"] + c * g["pw"] / C, g["y0"] + r * g["ph"] / R,
                        g["x0"] + (c + 1) * g["pw"] / C, g["y0"] + (r + 1) * g["ph"] / R]
                if not _inside(t["box"], tile):
                    problems.append(f"label {t['text']!r} spills out of its tile {tile}: {t['box']}")
                labels += 1
    return problems, labels


def test_text_checks_catch_what_they_should():
    """Both sides of each threshold of text_problems."""
    geometry = {"R": 2, "C": 2, "panels": [{"x0": 0, "y0": 0, "pw": 100, "ph": 100}]}

    def text(box, px=12.0, squeezed=False):
        return {"text": "t", "px": px, "squeezed": squeezed, "box": box}

    ok = [text([10, 10, 40, 25]), text([60, 10, 90, 25]), text([0, 110, 30, 120])]
    assert text_problems(ok, (100, 120), geometry) == ([], 2)
    for bad, what in [
        (text([10, 10, 40, 25], px=11.99), "px"), (text([10, 10, 40, 25], squeezed=True), "squeezed"),
        (text([10, 10, 50.6, 25]), "spills"),                      # 0.6 px into the next tile
        (text([-0.6, 110, 30, 120]), "outside"), (text([0, 110, 30, 120.6]), "outside"),
    ]:
        problems, _ = text_problems([bad], (100, 120), geometry)
        assert problems and what in problems[0], (what, problems)
    assert text_problems([text([10, 10, 50.4, 25])], (100, 120), geometry)[0] == []   # within the slack
    assert "overlaps" in text_problems([text([0, 110, 30, 120]), text([29.4, 110, 50, 120])], (100, 120),
                                       geometry)[0][0]
    assert text_problems([text([0, 110, 30, 120]), text([29.6, 110, 50, 120])], (100, 120), geometry)[0] == []


@pytest.mark.parametrize("viewport", [{"width": 1280, "height": 900}, PHONE], ids=["desktop", "phone"])
def test_picture_text_is_readable(browser, viewport):
    """Every text at least 9 pt as shown, never squeezed, inside the picture, clear of every other text; a
    tile's ids inside that tile; what is not drawn is said under the picture and read by pointing."""
    p = browser.new_page(viewport=viewport, device_scale_factor=2)
    try:
        p.goto(PAGE.as_uri(), wait_until="load")
        p.wait_for_function("window.ShardingPlayground && window.ShardingPlayground.update")
        p.evaluate(TEXT_SPY)
        for state in PICTURES:
            full = {**DEFAULTS, **state}
            p.evaluate("() => { window.__texts = []; }")
            p.evaluate("(s) => window.ShardingPlayground.setState(s)", full)
            texts = [t for t in p.evaluate("window.__texts") if t["canvas"] == "pg-canvas-1"]
            view = f"{full['spec']} on {[r['size'] for r in full['mesh'] if r['size']]}, {full['shape']}"
            size = p.evaluate("() => { const c = document.getElementById('pg-canvas-1'); "
                              "return [c.clientWidth, c.clientHeight]; }")
            assert texts, view
            problems, _ = text_problems(texts, size, {"R": 1, "C": 1, "panels": []})
            assert problems == [], f"{view}: {problems[:5]}"
            geometry = p.evaluate("""() => { const g = document.getElementById('pg-canvas-1').pgGeometry;
                return { panels: g.panels, R: g.R, C: g.C, labelPx: g.labelPx, notes: g.notes }; }""")
            problems, labels = text_problems(texts, size, geometry)
            assert problems == [], f"{view}: {problems[:5]}"
            if not geometry["labelPx"]:
                assert labels == 0 and any("device ids not drawn" in n for n in geometry["notes"]), view
            else:
                assert labels > 0, view
            # Pointing at the first tile of the first panel reads its devices, all of them up to 16.
            g = geometry["panels"][0]
            p.locator("#pg-canvas-1").hover(position={"x": g["x0"] + 1, "y": g["y0"] + 1})
            said = p.inner_text("#pg-hover-1")
            first = p.evaluate("""(g) => window.ShardingPlayground.tileAt(
                document.getElementById('pg-canvas-1').pgGeometry, g.x0 + 1, g.y0 + 1).ids""", g)
            assert said.startswith("tile ["), f"{view}: {said}"
            if len(first) <= 16:
                assert re.findall(r"\d+", said.split("]: ", 1)[1]) == [str(i) for i in first] or \
                    (len(first) == math.prod(int(r["size"]) for r in full["mesh"] if r["size"])
                     and f"all {len(first)} devices" in said), f"{view}: {said} for {first}"
    finally:
        p.close()


def test_tile_readout_matches_jax(page):
    """What pointing at a tile says (its slice and holders) is JAX's devices_indices_map, read back."""
    state = {**DEFAULTS, "mesh": [{"name": "x", "size": "12"}, {"name": "y", "size": "2"}] + [{"name": "", "size": ""}] * 2,
             "shape": "(8, 6)", "spec": "P(None, 'y')"}
    page.evaluate("(s) => window.ShardingPlayground.setState(s)", state)
    g = page.evaluate("() => document.getElementById('pg-canvas-1').pgGeometry.panels[0]")
    said = [page.evaluate("""([g, f]) => window.ShardingPlayground.tileAt(document.getElementById('pg-canvas-1')
        .pgGeometry, g.x0 + f * g.pw, g.y0 + 1).text""", [g, f]) for f in (0.25, 0.75)]
    ref = jax_answers({"layouts": [{"names": ["x", "y"], "sizes": [12, 2], "order": "list", "shape": [8, 6],
                                    "dtype": "float32", "spec_text": "P(None, 'y')"}]})["layouts"][0]
    for text in said:
        slice_text, holders = re.match(r"tile \[(.*)\]: devices (.*)", text).groups()
        start, stop = map(int, slice_text.split(", ")[1].split(":"))
        expected = [d for d, idx in zip(ref["ids"], ref["indices"]) if idx[1] == [start, stop]]
        assert [int(i) for i in holders.split(", ")] == expected, text
    page.evaluate("(s) => window.ShardingPlayground.setState(s)", DEFAULTS)


PALETTE_PIXELS = """(g) => {
  const c = document.getElementById('pg-canvas-1');
  const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
  const perCss = c.width / c.clientWidth;
  const colours = new Set(window.ShardingPlayground.PALETTE.map((h) => h.toLowerCase()).concat(['#ffffff', '#e8e8e8']));
  const hex = (i) => '#' + [d[i], d[i + 1], d[i + 2]].map((v) => v.toString(16).padStart(2, '0')).join('');
  const odd = [];
  for (const panel of g.panels) {
    for (let r = 0; r < g.R; r++) {   // a row of pixels 15% into each row of tiles, across the whole panel
      const y = Math.round((panel.y0 + (r + 0.15) * panel.ph / g.R) * perCss);
      for (let x = Math.round(panel.x0 * perCss); x < Math.round((panel.x0 + panel.pw) * perCss); x++) {
        const h = hex((y * c.width + x) * 4);
        if (!colours.has(h)) odd.push(`${x},${y}: ${h}`);
      }
    }
  }
  return { backing: [c.width, c.height], shown: [c.clientWidth, c.clientHeight], odd: odd.slice(0, 8), n: odd.length };
}"""


@pytest.mark.parametrize("ratio", [1, 2, 3])
def test_pictures_are_sharp(browser, ratio):
    """One backing pixel per device pixel, and tiles drawn with no blur: across every row of tiles, only the
    palette's colours and the white of the borders."""
    p = browser.new_page(viewport={"width": 1280, "height": 900}, device_scale_factor=ratio)
    try:
        p.goto(PAGE.as_uri(), wait_until="load")
        p.wait_for_function("window.ShardingPlayground && window.ShardingPlayground.update")
        for state in PICTURES[:4]:
            p.evaluate("(s) => window.ShardingPlayground.setState(s)", {**DEFAULTS, **state})
            g = p.evaluate("() => { const g = document.getElementById('pg-canvas-1').pgGeometry; "
                           "return { panels: g.panels, R: g.R, C: g.C }; }")
            seen = p.evaluate(PALETTE_PIXELS, g)
            (bw, bh), (sw, sh) = seen["backing"], seen["shown"]
            assert bw == round(sw * ratio) and bh == round(sh * ratio), seen
            assert seen["n"] == 0, f"{state}: blurred pixels {seen}"
    finally:
        p.close()
