"""The sharding playground (book/playground.md): its script against JAX, its form, its speed and weight.

The page's script is a second implementation of shardlab's layout maths. JAX's answers come from
``playground_reference.py`` in a process of its own (libtpu's compile-only devices give it meshes of up to
4096 devices; see its docstring), the page's from its script in headless Chromium.
"""

from __future__ import annotations

import json
import math
import random
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from tests.browser.conftest import HTML
from tests.paths import ROOT

PAGE = HTML / "book" / "playground.html"
OWN_FILES = [PAGE, HTML / "_static" / "playground.js", HTML / "_static" / "playground.css",
             HTML / "_static" / "playground_topologies.js"]
REFERENCE = Path(__file__).with_name("playground_reference.py")
N_CASES = 1200
WEIGHT_LIMIT = 150 * 1024
UPDATE_LIMIT_MS = 50.0
NAMES = ["x", "y", "z", "w", "data", "model"]
DTYPES = ["float32", "bfloat16", "float16", "int32", "int8"]

# The page's script, run on a batch of cases: what the page says for each (ids in mesh order, index
# ranges, typeof), or the refusal it shows. The functions are looked up on the API object at each call.
HARNESS = """(cases) => {
  const P = window.ShardingPlayground;
  return cases.map((c) => {
    const mesh = { names: c.names, sizes: c.sizes };
    const ids = Array.from(P.deviceOrder(mesh, c.order));
    let entries;
    try {
      entries = P.parseSpec(c.spec_text, "spec");
      P.checkSpec(mesh, entries, c.shape);
    } catch (e) {
      if (e instanceof P.JaxRefusal) return { ids, error: [e.type, e.message] };
      throw e;
    }
    const lay = P.layout(mesh, ids, entries, c.shape);
    return { ids, indices: P.indices(lay), typeof: P.typeofString(c.dtype, c.shape, entries) };
  });
}"""


# ------------------------------------------------------------------------------------------------
# Random cases


def _spec_text(entries, rng) -> str:
    """Python's spelling of P(*entries), in one of the ways a reader may type it."""
    q = rng.choice(["'", '"'])

    def one(e):
        if e is None:
            return rng.choice(["None", "()"])
        if isinstance(e, str):
            return rng.choice([f"{q}{e}{q}", f"({q}{e}{q},)"])
        return "(" + ", ".join(f"{q}{a}{q}" for a in e) + ")"

    body = ", ".join(one(e) for e in entries)
    return rng.choice(["P({})", "PartitionSpec({})", "jax.P({})", "{}"]).format(body)


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
        if rng.random() < 0.05:
            dims[rng.randrange(length)].append("v")               # not an axis of the mesh
        if rng.random() < 0.05 and names:
            dims[rng.randrange(length)].append(rng.choice(names))  # an axis used twice
    if length and rng.random() < 0.3:
        dims = dims[:rng.randrange(length + 1)]                   # fewer entries than dimensions
    return [None if not d else d[0] if len(d) == 1 else d for d in dims]


def _random_mesh(rng, topologies):
    if topologies and rng.random() < 0.15:                       # jax.make_mesh's order on a TPU slice
        name = rng.choice(sorted(topologies))
        shape = [int(s) for s in rng.choice(sorted(topologies[name]["meshes"])).split("x") if s]
        while len(shape) < 4 and rng.random() < 0.3:
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
            # Mostly divisible by the pieces; sometimes not; the product kept small.
            shape.append(pieces * rng.choice([1, 1, 2, 3]) + (rng.choice([1, 2]) if rng.random() < 0.07 else 0))
        if math.prod(shape) > 2 ** 24:
            continue
        cases.append({"names": names, "sizes": sizes, "order": order, "shape": shape, "dtype": rng.choice(DTYPES),
                      "spec": entries, "spec_text": _spec_text(entries, rng)})
    return cases


def jax_answers(request: dict) -> dict:
    """JAX's answers, from playground_reference.py in a process of its own."""
    done = subprocess.run([sys.executable, str(REFERENCE)], input=json.dumps(request), capture_output=True,
                          text=True, cwd=ROOT, timeout=900)
    assert done.returncode == 0, f"playground_reference.py failed:\n{done.stderr[-4000:]}"
    return json.loads(done.stdout)


def mismatches(cases, page, ref) -> list[str]:
    """Every case where the page and JAX differ, described."""
    out = []
    for c, p, r in zip(cases, page, ref):
        what = f"mesh {dict(zip(c['names'], c['sizes']))} ({c['order']}), shape {c['shape']}, spec {c['spec_text']}"
        if p["ids"] != r["ids"]:
            out.append(f"{what}: device order differs")
        elif "error" in r or "error" in p:
            if p.get("error") != r.get("error"):
                out.append(f"{what}: page says {p.get('error')}, JAX says {r.get('error')}")
        elif p["indices"] != r["indices"]:
            bad = next(i for i, (a, b) in enumerate(zip(p["indices"], r["indices"])) if a != b)
            out.append(f"{what}: device {r['ids'][bad]}: page {p['indices'][bad]}, JAX {r['indices'][bad]}")
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
    cases = random_cases(N_CASES, seed=20260101, topologies=topologies)
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
    refused = sum("error" in r for r in ref)
    big = sum(math.prod(c["sizes"]) >= 1024 for c in cases)
    tpu = sum(c["order"] != "list" for c in cases)
    kinds = sorted({r["error"][0] for r in ref if "error" in r})
    print(f"playground: {len(cases)} cases compared with JAX ({refused} refusals of kinds {kinds}, {big} meshes of "
          f">= 1024 devices, {tpu} in jax.make_mesh's TPU order)")
    assert len(cases) >= 1000 and refused >= 50 and big >= 50 and tpu >= 50
    assert len(kinds) >= 3, f"too few kinds of refusal among the cases: {kinds}"
    bad = mismatches(cases, answers, ref)
    assert bad == [], f"{len(bad)} of {len(cases)} cases differ from JAX; first ones:\n" + "\n".join(bad[:10])


@pytest.mark.parametrize("bug, plant", [
    ("mixed radix read least significant first",
     "const f = P.layout; P.layout = (m, ids, e, s) => f(m, ids, e.map((x) => Array.isArray(x) ? [...x].reverse() : x), s);"),
    ("no rank check", "const f = P.checkSpec; P.checkSpec = (m, e, s) => f(m, e.slice(0, s.length), s);"),
    ("uneven split not refused",
     "const f = P.checkSpec; P.checkSpec = (m, e, s) => { try { f(m, e, s); } catch (x) { if (x.type !== 'IndivisibleError') throw x; } };"),
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


def reshard_groups():
    """Pairs of random specs on a 2 x 4 and a 2 x 2 x 2 mesh, each for CPU devices and for a TPU slice."""
    groups = []
    for names, sizes, tpu in ((["x", "y"], [2, 4], "v5e-8"), (["x", "y", "z"], [2, 2, 2], "v5p-16")):
        rng = random.Random(len(names))
        pairs = []
        while len(pairs) < 30:
            a, b = (_random_spec_for_reshard(rng, names) for _ in range(2))
            if a != b:
                pairs.append([a, b])
        for target in ("cpu", tpu):
            groups.append({"target": target, "names": names, "sizes": sizes, "shape": [16, 16], "pairs": pairs})
    return groups


def _random_spec_for_reshard(rng, names):
    axes = list(names)
    rng.shuffle(axes)
    dims = [[], []]
    for a in axes:
        if rng.random() >= 0.35:
            dims[rng.randrange(2)].append(a)
    return [None if not d else d[0] if len(d) == 1 else d for d in dims]


def test_reshard_moves_against_xla(page):
    groups = reshard_groups()
    xla = jax_answers({"reshards": groups})["reshards"]
    table = {row["move"]: set(row["otherwise"].split()) for row in page.eval_on_selector_all(
        "#pg-xla-table tr[data-move]", "rows => rows.map(r => ({move: r.dataset.move, otherwise: r.dataset.otherwise}))")}
    text = page.inner_text("body")
    stated = re.search(r"in (\d+) of (\d+) pairs", text)
    stated_bytes = re.search(r"the same bytes in (\d+) of them", text)
    agree = {"cpu": [0, 0], "tpu": [0, 0]}      # [same collectives, pairs]
    same_bytes = {"cpu": 0, "tpu": 0}           # of the pairs with the same collectives
    unexplained, cheaper = [], []
    observed = {"cpu": set(), "tpu": set()}     # (page's moves, XLA's) where they differ
    for group, chosen in zip(groups, xla):
        platform = "cpu" if group["target"] == "cpu" else "tpu"
        plans = page.evaluate("""(g) => g.pairs.map(([a, b]) => window.ShardingPlayground.reshardPlan(
            { names: g.names, sizes: g.sizes }, a, b, g.shape, 4).map((m) => [m.kind, m.bytes]))""", group)
        for (first, second), plan, answer in zip(group["pairs"], plans, chosen):
            ours = "+".join(sorted({k for k, _ in plan if k != "slice"}))
            theirs = "+".join(answer["kinds"])
            pair = f"{group['target']}: {first} -> {second}"
            agree[platform][1] += 1
            if ours == theirs:
                agree[platform][0] += 1
                ours_bytes = sum(b for _, b in plan)
                if math.isclose(ours_bytes, answer["bytes"]):
                    same_bytes[platform] += 1
                elif ours_bytes > answer["bytes"]:   # the page says XLA's program sends more, never less
                    cheaper.append(f"{pair}: page {ours_bytes} bytes, XLA {answer['bytes']}")
            else:
                observed[platform].add((ours, theirs))
                if theirs not in table.get(ours, ()):
                    unexplained.append(f"{pair}: page {ours or 'nothing sent'}, XLA {theirs or 'nothing'}")
    for platform, (same, total) in agree.items():
        print(f"playground reshard: XLA:{platform.upper()} chose the page's collectives in {same} of {total} pairs "
              f"({same / total:.0%}), with the same modelled bytes in {same_bytes[platform]}")
        assert total >= 50
    assert unexplained == [], "XLA chose moves the page's table does not mention:\n" + "\n".join(unexplained)
    # Every alternative the table lists was seen, on both platforms ("what XLA chose instead, on CPU and TPU").
    listed = {(ours, theirs) for ours, alternatives in table.items() for theirs in alternatives}
    for platform, seen in observed.items():
        assert listed <= seen, f"the table lists choices XLA:{platform.upper()} did not make: {sorted(listed - seen)}"
    assert cheaper == [], "XLA's program sends fewer bytes than the page counts:\n" + "\n".join(cheaper)
    # The page states one count for both platforms ("on the CPU and on the TPU alike").
    assert stated and all([int(stated[1]), int(stated[2])] == counts for counts in agree.values()), \
        f"the page states {stated and stated.group(0)}; the test found {agree}"
    assert stated_bytes and all(int(stated_bytes[1]) == n for n in same_bytes.values()), \
        f"the page states {stated_bytes and stated_bytes.group(0)}; the test found {same_bytes}"


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
    from shardlab.cost_model import bytes_all_to_all, bytes_all_to_all_ring

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
    from shardlab import draw

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


# Meshes of 4096 devices whose update is timed: one tile per device, stripes of 16 holders, 36 panels.
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
