/* The sharding playground: a second implementation of shardlab's layout maths, in the browser.
 *
 * Python stays the definition (shardlab/layout.py for layouts, shardlab/draw.py for pictures,
 * shardlab/cost_model.py for the bytes collectives send); this file mirrors them so that a reader can try any mesh
 * and PartitionSpec with no kernel. tests/browser/test_playground.py compares it with JAX.
 *
 * The maths is exposed as window.ShardingPlayground (pure functions, no DOM); the page wiring at the
 * bottom runs only when the page has the playground's form.
 */
(function (root) {
  "use strict";

  // ------------------------------------------------------------------------------------------------
  // Conventions shared with shardlab/draw.py

  // tab20 reordered: ids 0-9 get the ten tab10 colours, ids 10-19 their lighter twins (draw.PALETTE).
  const TAB20 = ["#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896",
    "#9467bd", "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7",
    "#bcbd22", "#dbdb8d", "#17becf", "#9edae5"];
  const PALETTE = TAB20.filter((_, i) => i % 2 === 0).concat(TAB20.filter((_, i) => i % 2 === 1));
  const PALETTE_RGB = PALETTE.map((c) => [1, 3, 5].map((i) => parseInt(c.slice(i, i + 2), 16)));
  const MANY_RGB = [221, 221, 221];   // a tile with more holders than MAX_STRIPES: plain grey
  const MAX_STRIPES = 16;
  const MAX_PANELS = 36;
  const MAX_LABELS = 1024;
  const MIN_FONT = 5.0;               // points, as in draw.py; the canvas works in CSS pixels (4/3 per point)
  const MAX_FONT = 11.0;
  const PX_PER_PT = 4 / 3;

  const MAX_AXES = 4;
  const MAX_DEVICES = 4096;
  const MAX_RANK = 8;
  const NAME_RE = /^[A-Za-z_][A-Za-z0-9_]*$/;
  const DTYPES = { float32: 4, bfloat16: 2, float16: 2, int32: 4, int8: 1 };

  /** Bad input: the message names the field and says what was expected. */
  class InputError extends Error {
    constructor(field, message) {
      super(`${field}: ${message}`);
      this.field = field;
    }
  }

  /** A layout JAX refuses; `type` and `message` are JAX's exception class and text. */
  class JaxRefusal extends Error {
    constructor(type, message) {
      super(message);
      this.type = type;
    }
  }

  const prod = (xs) => xs.reduce((a, b) => a * b, 1);

  // ------------------------------------------------------------------------------------------------
  // Python's spelling of values (JAX's messages embed reprs)

  // Axis names are identifiers (checked on input), so repr needs no escaping.
  const pyStr = (s) => `'${s}'`;
  const pyTuple = (items) => (items.length === 1 ? `(${items[0]},)` : `(${items.join(", ")})`);

  /** repr(P(*entries)): entries are null, a name, or an array of two or more names. */
  function specRepr(entries) {
    const parts = entries.map((e) => (e === null ? "None" : typeof e === "string" ? pyStr(e)
      : pyTuple(e.map(pyStr))));
    return `P(${parts.join(", ")}${parts.length === 1 ? "," : ""})`;
  }

  /** The axes of one spec entry, as an array. */
  const entryAxes = (e) => (e === null ? [] : typeof e === "string" ? [e] : e);

  // ------------------------------------------------------------------------------------------------
  // Parsing the form's text

  /** Mesh rows [{name, size}] (empty rows skipped) -> {names, sizes}. */
  function parseMesh(rows) {
    const names = [];
    const sizes = [];
    rows.forEach((row, i) => {
      const name = row.name.trim();
      const sizeText = String(row.size).trim();
      if (!name && !sizeText) return;
      const field = `mesh axis ${i + 1}`;
      if (!NAME_RE.test(name)) {
        throw new InputError(field, "expected a name made of letters, digits and _ (not starting with a digit), "
          + `got ${JSON.stringify(name)}`);
      }
      if (names.includes(name)) throw new InputError(field, `the name '${name}' is already used by another axis`);
      if (!/^\d+$/.test(sizeText) || Number(sizeText) < 1) {
        throw new InputError(field, `expected a positive whole size for axis '${name}', got ${JSON.stringify(sizeText)}`);
      }
      names.push(name);
      sizes.push(Number(sizeText));
    });
    if (names.length === 0) throw new InputError("mesh axes", "expected at least one axis with a name and a size");
    if (names.length > MAX_AXES) throw new InputError("mesh axes", `expected at most ${MAX_AXES} axes`);
    const n = prod(sizes);
    if (n > MAX_DEVICES) {
      throw new InputError("mesh axes", `the sizes multiply to ${n} devices; the playground draws at most ${MAX_DEVICES}`);
    }
    return { names, sizes };
  }

  /** "8, 8" or "(8, 8)" or "()" -> [8, 8]. */
  function parseShape(text) {
    let t = text.trim();
    if (t.startsWith("(") && t.endsWith(")")) t = t.slice(1, -1).trim();
    if (t.endsWith(",")) t = t.slice(0, -1).trim();
    if (t === "") return [];
    const parts = t.split(",").map((s) => s.trim());
    if (parts.some((p) => !/^\d+$/.test(p))) {
      throw new InputError("shape", `expected whole numbers separated by commas, such as (8, 16), got ${JSON.stringify(text)}`);
    }
    if (parts.length > MAX_RANK) throw new InputError("shape", `expected at most ${MAX_RANK} dimensions`);
    const dims = parts.map(Number);
    if (dims.some((d) => d > 2 ** 31)) throw new InputError("shape", "each dimension must be at most 2**31");
    return dims;
  }

  /**
   * A PartitionSpec written as in Python: P('x', ('y', 'z'), None), PartitionSpec(...), jax.P(...), or
   * the bare entries. Returns the entries normalised as JAX's P normalises them: () -> None, ('x',) -> 'x'.
   */
  function parseSpec(text, field) {
    const src = text.trim();
    let i = 0;
    const fail = (what) => {
      throw new InputError(field, `${what} at character ${i + 1} of ${JSON.stringify(src)}; `
        + "expected entries such as P('x', ('y', 'z'), None)");
    };
    const skip = () => { while (i < src.length && /\s/.test(src[i])) i++; };
    const name = () => {
      const quote = src[i];
      const end = src.indexOf(quote, i + 1);
      if (end < 0) fail("an unclosed quote");
      const s = src.slice(i + 1, end);
      if (!NAME_RE.test(s)) fail(`the axis name ${JSON.stringify(s)} is not a name`);
      i = end + 1;
      return s;
    };
    // A comma-separated list up to `close`, each item read by `item`.
    const list = (close, item) => {
      const items = [];
      skip();
      while (src[i] !== close) {
        if (i >= src.length) fail(`a missing '${close}'`);
        items.push(item());
        skip();
        if (src[i] === ",") {
          i++;
          skip();
        } else if (src[i] !== close) {
          fail(i < src.length ? "a missing comma" : `a missing '${close}'`);
        }
      }
      i++;
      return items;
    };
    const entry = () => {
      if (src.startsWith("None", i)) { i += 4; return null; }
      if (src[i] === "'" || src[i] === '"') return name();
      if (src[i] === "(") {
        i++;
        const names = list(")", () => {
          if (src[i] !== "'" && src[i] !== '"') fail("an entry of a tuple that is not a quoted axis name");
          return name();
        });
        return names.length === 0 ? null : names.length === 1 ? names[0] : names;
      }
      return fail("an entry that is not None, a quoted axis name or a tuple of them");
    };
    const head = /^(?:(?:jax\.)?(?:sharding\.)?(?:P|PartitionSpec))\s*\(/.exec(src);
    let entries;
    if (head) {
      i = head[0].length;
      entries = list(")", entry);
    } else {
      entries = list(undefined, entry);   // bare entries run to the end of the text
      i = src.length;
    }
    skip();
    if (i < src.length) fail("text after the closing ')'");
    return entries;
  }

  // ------------------------------------------------------------------------------------------------
  // JAX's checks, in JAX's order (NamedSharding(mesh, spec), then rank, then divisibility)

  function meshRepr(mesh) {
    const axes = mesh.names.map((n, k) => `'${n}': ${mesh.sizes[k]}`).join(", ");
    return `Mesh(${axes}, axis_types=${pyTuple(mesh.names.map(() => "Explicit"))})`;
  }

  const shardingRepr = (mesh, entries) =>
    `NamedSharding(mesh=${meshRepr(mesh)}, spec=${specRepr(entries)}, memory_kind=device)`;

  /** Throws the JaxRefusal JAX raises for this mesh, spec and shape (mesh axes Explicit), if any. */
  function checkSpec(mesh, entries, shape) {
    // jax/_src/named_sharding.py: _check_unique_resources, then _check_mesh_resource_axis.
    const counts = new Map();
    entries.forEach((e) => entryAxes(e).forEach((a) => counts.set(a, (counts.get(a) || 0) + 1)));
    const twice = [...counts].filter(([, c]) => c > 1).map(([a]) => `\`${a}\``).sort();
    if (twice.length) {
      throw new JaxRefusal("DuplicateSpecError", "A single NamedSharding spec specification can map every mesh "
        + `axis to at most one positional dimension, but ${specRepr(entries)} has duplicate entries for ${twice.join(", ")}`);
    }
    for (const e of entries) {
      for (const a of entryAxes(e)) {
        if (!mesh.names.includes(a)) {
          throw new JaxRefusal("ValueError", `Resource axis: ${a} of ${specRepr(entries)} is not found in mesh: `
            + `${pyTuple(mesh.names.map(pyStr))}.`);
        }
      }
    }
    // NamedSharding.check_compatible_aval
    if (shape.length < entries.length) {
      throw new JaxRefusal("ValueError", `Sharding ${shardingRepr(mesh, entries)} is only valid for values of rank `
        + `at least ${entries.length}, but was applied to a value of rank ${shape.length}.`
        + (shape.length === 0 ? " For scalars the PartitionSpec should be P()" : ""));
    }
    // jax/_src/sharding.py: _common_shard_shape
    const shards = shardCounts(mesh, entries, shape.length);
    const dim = shape.findIndex((s, d) => s % shards[d] !== 0);
    if (dim >= 0) {
      throw new JaxRefusal("IndivisibleError", `${shardingRepr(mesh, entries)} implies that array axis ${dim} is `
        + `partitioned ${shards[dim]} times, but the dimension size is ${shape[dim]} (full shape: `
        + `${pyTuple(shape.map(String))}, per-dimension tiling factors: ${pyTuple(shards.map(String))} should `
        + "evenly divide the shape)");
    }
  }

  /** Pieces along each dimension (1 where the spec is shorter than the rank). */
  function shardCounts(mesh, entries, ndim) {
    const size = (a) => mesh.sizes[mesh.names.indexOf(a)];
    return Array.from({ length: ndim }, (_, d) => prod(entryAxes(entries[d] ?? null).map(size)));
  }

  // ------------------------------------------------------------------------------------------------
  // Layout maths (shardlab/layout.py): which tile each device holds

  /**
   * The layout of `shape` on `mesh` (with device `ids` in mesh order) under the spec `entries`, which
   * must pass checkSpec. A dimension split by (a1, a2, ...) is cut into size(a1) * size(a2) * ...
   * pieces; a device takes the piece numbered by its coordinates along a1, a2, ... read as a
   * mixed-radix number, a1 most significant.
   */
  function layout(mesh, ids, entries, shape) {
    const n = prod(mesh.sizes);
    const ndim = shape.length;
    const shards = shardCounts(mesh, entries, ndim);
    const tileShape = shape.map((s, d) => s / shards[d]);
    const numTiles = prod(shards);
    const replication = n / numTiles;
    // Stride of each mesh axis in the flat (row-major) mesh order.
    const stride = mesh.sizes.map((_, k) => prod(mesh.sizes.slice(k + 1)));
    const tiles = new Int32Array(n * ndim);        // device (mesh order) -> tile coordinate per dim
    const flatTile = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      let flat = 0;
      for (let d = 0; d < ndim; d++) {
        let t = 0;
        for (const a of entryAxes(entries[d] ?? null)) {
          const k = mesh.names.indexOf(a);
          t = t * mesh.sizes[k] + (Math.floor(i / stride[k]) % mesh.sizes[k]);
        }
        tiles[i * ndim + d] = t;
        flat = flat * shards[d] + t;
      }
      flatTile[i] = flat;
    }
    // Holders of each tile, in mesh order (the stable order of tile_holders).
    const holders = new Int32Array(n);
    const filled = new Int32Array(numTiles);
    for (let i = 0; i < n; i++) {
      const t = flatTile[i];
      holders[t * replication + filled[t]++] = ids[i];
    }
    return { mesh, ids, entries, shape, shards, tileShape, replication, numTiles, tiles, holders, n };
  }

  /** devices_indices_map: per device in mesh order, per dim [start, stop], or null for slice(None). */
  function indices(lay) {
    const ndim = lay.shape.length;
    const out = [];
    for (let i = 0; i < lay.n; i++) {
      const row = [];
      for (let d = 0; d < ndim; d++) {
        const t = lay.tiles[i * ndim + d];
        row.push(lay.shards[d] === 1 ? null : [t * lay.tileShape[d], (t + 1) * lay.tileShape[d]]);
      }
      out.push(row);
    }
    return out;
  }

  /** str(jax.typeof(x)) for an array laid out with Explicit mesh axes, e.g. float32[16@(y,x),3]. */
  function typeofString(dtype, shape, entries) {
    const dims = shape.map((s, d) => {
      const axes = entryAxes(entries[d] ?? null);
      return axes.length === 0 ? `${s}` : axes.length === 1 ? `${s}@${axes[0]}` : `${s}@(${axes.join(",")})`;
    });
    return `${dtype}[${dims.join(",")}]`;
  }

  // ------------------------------------------------------------------------------------------------
  // Resharding: the moves and the bytes each device sends (shardlab/cost_model.py)

  // Bytes one device sends, per kind, for a group of n devices (the formulas of cost_model.py). All-to-all
  // is not a ring formula there: bytes_all_to_all counts a direct exchange (every device linked to every
  // other), and bytes_all_to_all_ring the same exchange forwarded around a bidirectional ring.
  const MODEL = {
    "all-gather": (resultBytes, n) => (resultBytes * (n - 1)) / n,         // bytes_all_gather
    "all-to-all": (operandBytes, n) => (operandBytes * (n - 1)) / n,       // bytes_all_to_all (direct exchange)
    "collective-permute": (operandBytes) => operandBytes,                  // bytes_permute, for a device that sends
  };

  /** bytes_all_to_all_ring(operandBytes, n): the piece for the device k places away travels min(k, n-k) hops. */
  function allToAllRingBytes(operandBytes, n) {
    let hops = 0;
    for (let k = 1; k < n; k++) hops += Math.min(k, n - k);
    return (operandBytes * hops) / n;
  }

  const fromAxes = (axes) => (axes.length === 0 ? null : axes.length === 1 ? axes[0] : axes);

  /** How many devices hold, in layout `a`, a tile that does not contain their tile of layout `b`. */
  function devicesMissingTheirTile(a, b) {
    const ndim = a.shape.length;
    let missing = 0;
    for (let i = 0; i < a.n; i++) {
      for (let d = 0; d < ndim; d++) {
        // With a's count dividing b's, b's tile t sits inside a's tile floor(t / (kb / ka)).
        if (a.tiles[i * ndim + d] !== Math.floor(b.tiles[i * ndim + d] / (b.shards[d] / a.shards[d]))) {
          missing++;
          break;
        }
      }
    }
    return missing;
  }

  /**
   * What resharding `from` -> `to` (two spec entry lists, both valid for `shape`) costs, as the list of
   * moves of the page's model. When every tile of `to` lies inside a tile of `from` (each dimension's
   * piece count divides the new one), no gather is needed: a device cuts its new tile out of its old one
   * (a local slice, nothing sent) or receives it from a device that holds it (a collective-permute of the
   * new tile). Otherwise, in order: a local slice for the axes `to` adds, an all-to-all for the axes that
   * change dimension (one per pair of dimensions), one all-gather over the axes `to` drops, and a
   * collective-permute when the tiles then sit on other devices than `to` puts them on. Slicing first and
   * gathering last keep the shards that travel small; XLA often gathers first and sends more (the page's
   * prose gives the counts). Axes of size 1 move nothing and are ignored.
   * Each move: {kind, axes, group (devices per group), bytes (sent per device that sends, cost_model.py's
   * count), ringBytes (all-to-all only: bytes_all_to_all_ring), receivers (devices that receive data)}.
   */
  function reshardPlan(mesh, from, to, shape, itemsize) {
    const size = (a) => mesh.sizes[mesh.names.indexOf(a)];
    const n = prod(mesh.sizes);
    const positions = [...Array(n).keys()];     // which device is which does not change the moves
    const ndim = shape.length;
    const dimsOf = (entries) => Array.from({ length: ndim },
      (_, d) => entryAxes(entries[d] ?? null).filter((a) => size(a) > 1));
    const layoutOf = (dims) => layout(mesh, positions, dims.map(fromAxes), shape);
    const cur = dimsOf(from);
    const want = dimsOf(to);
    const target = layoutOf(want);
    const dimOf = (dims, a) => dims.findIndex((axes) => axes.includes(a));
    const total = prod(shape) * itemsize;
    const shardBytes = (dims) => total / prod(dims.map((axes) => prod(axes.map(size))));
    const moves = [];
    // The last step: cut each new tile out of an old one, here or on another device.
    const finish = (dims) => {
      const now = layoutOf(dims);
      const receivers = devicesMissingTheirTile(now, target);
      if (receivers) {
        moves.push({ kind: "collective-permute", axes: want.flat(), group: n,
          bytes: MODEL["collective-permute"](shardBytes(want)), receivers });
      } else if (now.shards.some((k, d) => k !== target.shards[d])) {
        moves.push({ kind: "slice", axes: want.flat().filter((a) => dimOf(dims, a) < 0),
          group: prod(target.shards) / prod(now.shards), bytes: 0, receivers: 0 });
      }
      return moves;
    };
    if (cur.every((axes, d) => target.shards[d] % prod(axes.map(size)) === 0)) return finish(cur);

    const added = want.flat().filter((a) => dimOf(cur, a) < 0);
    if (added.length) {
      added.forEach((a) => cur[dimOf(want, a)].push(a));
      moves.push({ kind: "slice", axes: added, group: prod(added.map(size)), bytes: 0, receivers: 0 });
    }
    // Axes that leave the same dimension for the same other one go in one all-to-all over their product:
    // one exchange in a group of n1*n2 sends less than two in groups of n1 and n2 (XLA does the same).
    const moving = new Map();   // "from>to" -> axes, in the order `to` lists them
    for (const a of want.flat()) {
      const at = dimOf(cur, a);
      const goal = dimOf(want, a);
      if (at === goal) continue;
      const key = `${at}>${goal}`;
      if (!moving.has(key)) moving.set(key, []);
      moving.get(key).push(a);
    }
    for (const [key, axes] of moving) {
      const [at, goal] = key.split(">").map(Number);
      const operand = shardBytes(cur);
      const group = prod(axes.map(size));
      cur[at] = cur[at].filter((a) => !axes.includes(a));
      cur[goal].push(...axes);
      moves.push({ kind: "all-to-all", axes, group, bytes: MODEL["all-to-all"](operand, group),
        ringBytes: allToAllRingBytes(operand, group), receivers: n });
    }
    const dropped = cur.flat().filter((a) => dimOf(want, a) < 0);
    if (dropped.length) {
      cur.forEach((axes, d) => { cur[d] = axes.filter((a) => !dropped.includes(a)); });
      const group = prod(dropped.map(size));
      moves.push({ kind: "all-gather", axes: dropped, group, bytes: MODEL["all-gather"](shardBytes(cur), group), receivers: n });
    }
    return finish(cur);
  }

  // ------------------------------------------------------------------------------------------------
  // Text of the picture (shardlab/draw.py and layout.py)

  /** A tile's label: its holders' ids, shortened as draw._holder_label shortens them. */
  function holderLabel(ids, total) {
    const n = ids.length;
    if (n === 1) return String(ids[0]);
    if (n > 8) {
      if (n === total) return `all ${n}`;
      const step = ids[1] - ids[0];
      if (step > 0 && ids.every((v, k) => k === 0 || v - ids[k - 1] === step)) {
        return step === 1 ? `${ids[0]}–${ids[n - 1]}` : `${ids[0]},${ids[1]},…,${ids[n - 1]}`;
      }
      return `${n} devs\n${ids[0]},${ids[1]},…`;
    }
    const perLine = n > 4 ? 4 : n;
    const lines = [];
    for (let k = 0; k < n; k += perLine) lines.push(ids.slice(k, k + perLine).join(","));
    return lines.join("\n");
  }

  const ordinal = (n) => {
    const suffix = n % 100 >= 10 && n % 100 <= 20 ? "th" : { 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th";
    return `${n}${suffix}`;
  };
  /** layout.format_spec: every dimension spelled out, e.g. P('x', None) (the picture's title). */
  const formatSpec = (entries, ndim) => `P(${Array.from({ length: ndim }, (_, d) => {
    const axes = entryAxes(entries[d] ?? null);
    return axes.length === 0 ? "None" : axes.length === 1 ? pyStr(axes[0]) : `(${axes.map(pyStr).join(", ")})`;
  }).join(", ")})`;
  const formatMesh = (mesh) => `{${mesh.names.map((a, k) => `${a}: ${mesh.sizes[k]}`).join(", ")}}`;
  const formatShape = (shape) => pyTuple(shape.map(String));
  const sliceText = (t, len, k) => (k === 1 ? ":" : `${t * len}:${(t + 1) * len}`);

  function dimLabel(lay, d) {
    const axes = entryAxes(lay.entries[d] ?? null);
    const split = axes.length ? ` — split by ${axes.map(pyStr).join(" × ")}` : " — not split";
    return `dim ${d} (${lay.shape[d]})${split}`;
  }

  /** Tick positions (in tiles) and labels (in elements) along one side: at most about 9. */
  function ticks(nTiles, size) {
    const step = Math.max(1, Math.ceil((nTiles + 1) / 9));
    const pos = [];
    for (let k = 0; k <= nTiles; k += step) pos.push(k);
    if (pos[pos.length - 1] !== nTiles) pos.push(nTiles);
    return pos.map((k) => [k, String(Math.round(k * size))]);
  }

  const luminance = ([r, g, b]) => (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;

  // ------------------------------------------------------------------------------------------------
  // Drawing on a canvas: tiles as pixels (as draw._TileImage renders them), then lines and labels

  /**
   * Draw `lay` on `canvas` (its CSS width is kept; its height is set). The tile image is computed per
   * device pixel, like draw.py's numpy renderer: pixel -> tile -> colour, so thousands of tiles cost
   * no more than a few. Returns the notes shown under the picture.
   */
  function draw(canvas, lay, title) {
    const ctx = canvas.getContext("2d");
    const ndim = lay.shape.length;
    // Panels: 2-D slices over the leading dimensions (one per tile along them), at most MAX_PANELS.
    const R = ndim >= 2 ? lay.shards[ndim - 2] : 1;
    const C = ndim >= 1 ? lay.shards[ndim - 1] : 1;
    const lead = lay.shards.slice(0, Math.max(0, ndim - 2));
    const panelsTotal = prod(lead);
    const panels = Math.min(panelsTotal, MAX_PANELS);
    const hEl = ndim >= 2 ? lay.shape[ndim - 2] : 1;
    const wEl = ndim >= 1 ? lay.shape[ndim - 1] : 1;
    const ratio = ndim === 1 ? 0.14 : hEl && wEl ? Math.min(Math.max(hEl / wEl, 0.2), 2.5) : 1;
    const notes = [];
    if (panels < panelsTotal) notes.push(`showing ${panels} of ${panelsTotal} slices`);

    // Geometry, in CSS pixels: the panel grid whose panels come out largest.
    const width = canvas.clientWidth || 640;
    const top = 54;
    const padL = 58;
    const padR = 14;
    const padB = 44;
    const titleH = ndim > 2 ? 16 : 0;
    const maxH = Math.max(260, Math.min(640, width * 0.9));
    let best = null;
    for (let cols = 1; cols <= panels; cols++) {
      const rows = Math.ceil(panels / cols);
      const pw = width / cols - padL - padR;
      const ph = (maxH - top - 24) / rows - padB - titleH;
      const w = Math.min(pw, ph / ratio);
      if (pw > 0 && ph > 0 && (!best || w > best.w + 1e-9)) best = { w, cols, rows };
    }
    if (!best) best = { w: 40, cols: Math.ceil(Math.sqrt(panels)), rows: Math.ceil(Math.sqrt(panels)) };
    const pw = Math.max(8, Math.floor(best.w));
    const ph = Math.max(8, Math.floor(pw * ratio));
    const cellW = width / best.cols;
    const cellH = ph + padB + titleH;
    const height = Math.ceil(top + best.rows * cellH + 22);

    const dpr = root.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.height = `${height}px`;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, canvas.width, canvas.height);

    // Colours: a tile shows its holders' colours in diagonal stripes, or grey when they are too many.
    const rep = lay.replication;
    const nColors = rep <= MAX_STRIPES ? rep : 0;
    const maxId = lay.ids.reduce((m, v) => Math.max(m, v), 0);
    const lut = new Uint32Array(maxId + 1);
    const pack = ([r, g, b]) => ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;   // little-endian RGBA
    for (const id of lay.ids) lut[id] = pack(PALETTE_RGB[id % PALETTE_RGB.length]);
    const grey = pack(MANY_RGB);

    // Labels: the font from the widest label; thinned to every k-th tile when they cannot fit.
    const worst = rep <= 8 ? holderLabel(Array(rep).fill(maxId), lay.n)
      : rep < lay.n ? `${maxId},${maxId},…,${maxId}` : `all ${rep}`;
    const lines = worst.split("\n");
    const chars = Math.max(...lines.map((l) => l.length));
    const tileWpt = pw / C / PX_PER_PT;
    const tileHpt = ph / R / PX_PER_PT;
    let fs = Math.min(MAX_FONT, (tileWpt * 0.85) / (0.62 * chars), (tileHpt * 0.8) / (1.25 * lines.length));
    let stride = 1;
    if (fs < MIN_FONT) {
      const need = Math.max((MIN_FONT * 0.62 * chars) / (tileWpt * 0.9),
        (MIN_FONT * 1.25 * lines.length) / (tileHpt * 0.9));
      stride = Math.ceil(need);
      fs = MIN_FONT;
    }
    while (Math.ceil(R / stride) * Math.ceil(C / stride) * panels > MAX_LABELS) stride++;
    if (stride > 1) notes.push(`labels on every ${ordinal(stride)} tile in each direction (${R}×${C} tiles per panel)`);
    const boxed = nColors !== 1 || stride > 1;
    const lw = Math.max(R, C) <= 16 ? 1.5 : Math.max(R, C) <= 48 ? 0.8 : 0;

    const pxW = Math.round(pw * dpr);
    const pxH = Math.round(ph * dpr);
    const tileOfX = new Int32Array(pxW);
    const tileOfY = new Int32Array(pxH);
    for (let x = 0; x < pxW; x++) tileOfX[x] = Math.floor((x * C) / pxW);
    for (let y = 0; y < pxH; y++) tileOfY[y] = Math.floor((y * R) / pxH);
    const stripe = Math.floor(Math.min(16, Math.max(4, Math.min(pw / C, ph / R) / (1.5 * Math.max(nColors, 1))))) * dpr;
    const image = ctx.createImageData(pxW, pxH);
    const pixels = new Uint32Array(image.data.buffer);
    const perPanel = R * C * rep;

    ctx.scale(dpr, dpr);
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    ctx.fillStyle = "#000000";
    ctx.font = "bold 15px sans-serif";
    ctx.fillText(title, width / 2, 6);
    const sub = [`mesh ${formatMesh(lay.mesh)}`, `array ${formatShape(lay.shape)}`, `tile ${formatShape(lay.tileShape)}`];
    if (rep > 1) sub.push(`each tile on ${rep} devices`);
    ctx.font = "12px sans-serif";
    ctx.fillStyle = "#333333";
    ctx.fillText(sub.join(" · "), width / 2, 28, width - 8);

    for (let p = 0; p < panels; p++) {
      const col = p % best.cols;
      const row = Math.floor(p / best.cols);
      const x0 = Math.round(col * cellW + padL + Math.max(0, (cellW - padL - padR - pw) / 2));
      const y0 = Math.round(top + row * cellH + titleH);
      const base = p * perPanel;
      for (let y = 0; y < pxH; y++) {
        const rowBase = base + tileOfY[y] * C * rep;
        for (let x = 0; x < pxW; x++) {
          const t = rowBase + tileOfX[x] * rep;
          pixels[y * pxW + x] = nColors === 0 ? grey
            : nColors === 1 ? lut[lay.holders[t]] : lut[lay.holders[t + (Math.floor((x + y) / stripe) % nColors)]];
        }
      }
      ctx.putImageData(image, Math.round(x0 * dpr), Math.round(y0 * dpr));

      if (lw) {   // white borders between tiles
        ctx.strokeStyle = "#ffffff";
        ctx.lineWidth = lw;
        ctx.beginPath();
        for (let r = 1; r < R; r++) { ctx.moveTo(x0, y0 + (r * ph) / R); ctx.lineTo(x0 + pw, y0 + (r * ph) / R); }
        for (let c = 1; c < C; c++) { ctx.moveTo(x0 + (c * pw) / C, y0); ctx.lineTo(x0 + (c * pw) / C, y0 + ph); }
        ctx.stroke();
      }
      drawAxes(ctx, lay, p, lead, { x0, y0, pw, ph, R, C });
      drawLabels(ctx, lay, base, { x0, y0, pw, ph, R, C, rep, stride, fs, boxed, lut });
    }
    if (notes.length) {
      ctx.font = "11px sans-serif";
      ctx.fillStyle = "#555555";
      ctx.textBaseline = "bottom";
      ctx.fillText(notes.join("  ·  "), width / 2, height - 4, width - 8);
    }
    return notes;
  }

  function drawAxes(ctx, lay, p, lead, g) {
    const ndim = lay.shape.length;
    ctx.fillStyle = "#444444";
    ctx.font = "10px sans-serif";
    if (ndim > 2) {   // the panel's slice of the leading dimensions
      let rest = p;
      const idx = lead.map((_, k) => {   // the panel number as a mixed-radix tuple over the leading dims
        const m = prod(lead.slice(k + 1));
        const v = Math.floor(rest / m);
        rest %= m;
        return v;
      });
      const parts = idx.map((t, k) => sliceText(t, lay.tileShape[k], lead[k])).concat([":", ":"]);
      ctx.textAlign = "center";
      ctx.textBaseline = "bottom";
      ctx.fillText(`[${parts.join(", ")}]`, g.x0 + g.pw / 2, g.y0 - 2);
    }
    if (ndim === 0) return;
    ctx.textAlign = "center";
    ctx.textBaseline = "top";
    for (const [k, text] of ticks(g.C, lay.tileShape[ndim - 1])) {
      ctx.fillText(text, g.x0 + (k * g.pw) / g.C, g.y0 + g.ph + 3);
    }
    ctx.font = "11px sans-serif";
    ctx.fillStyle = "#000000";
    ctx.fillText(dimLabel(lay, ndim - 1), g.x0 + g.pw / 2, g.y0 + g.ph + 17, g.pw + 50);
    if (ndim < 2) return;
    ctx.font = "10px sans-serif";
    ctx.fillStyle = "#444444";
    ctx.textAlign = "right";
    ctx.textBaseline = "middle";
    let widest = 0;
    for (const [k, text] of ticks(g.R, lay.tileShape[ndim - 2])) {
      ctx.fillText(text, g.x0 - 3, g.y0 + (k * g.ph) / g.R);
      widest = Math.max(widest, ctx.measureText(text).width);
    }
    ctx.save();
    ctx.translate(g.x0 - widest - 8, g.y0 + g.ph / 2);
    ctx.rotate(-Math.PI / 2);
    ctx.font = "11px sans-serif";
    ctx.fillStyle = "#000000";
    ctx.textAlign = "center";
    ctx.textBaseline = "bottom";
    ctx.fillText(dimLabel(lay, ndim - 2), 0, 0, Math.max(g.ph, 120));
    ctx.restore();
  }

  function drawLabels(ctx, lay, base, g) {
    const px = g.fs * PX_PER_PT;
    const lineH = px * 1.05;
    ctx.font = `${px.toFixed(2)}px sans-serif`;
    ctx.textAlign = "center";
    ctx.textBaseline = "middle";
    for (let r = 0; r < g.R; r += g.stride) {
      for (let c = 0; c < g.C; c += g.stride) {
        const t = base + (r * g.C + c) * g.rep;
        const ids = Array.from(lay.holders.subarray(t, t + g.rep));
        const lines = holderLabel(ids, lay.n).split("\n");
        const cx = g.x0 + ((c + 0.5) * g.pw) / g.C;
        const cy = g.y0 + ((r + 0.5) * g.ph) / g.R;
        const y1 = cy - ((lines.length - 1) * lineH) / 2;
        if (g.boxed) {   // a white box keeps the label readable on stripes (draw._LABEL_BOX)
          const w = Math.max(...lines.map((l) => ctx.measureText(l).width)) + px * 0.3;
          const h = lines.length * lineH + px * 0.3;
          ctx.fillStyle = "rgba(255, 255, 255, 0.8)";
          ctx.fillRect(cx - w / 2, cy - h / 2, w, h);
          ctx.fillStyle = "#000000";
        } else {
          const rgb = PALETTE_RGB[ids[0] % PALETTE_RGB.length];
          ctx.fillStyle = luminance(rgb) > 0.5 ? "#000000" : "#ffffff";
        }
        lines.forEach((l, k) => ctx.fillText(l, cx, y1 + k * lineH));
      }
    }
  }

  /** Device ids in mesh order: 0..n-1, or jax.make_mesh's order on a TPU slice (exported at build time). */
  function deviceOrder(mesh, order) {
    const n = prod(mesh.sizes);
    if (order === "list") return [...Array(n).keys()];
    const data = (root.SHARDLAB_TOPOLOGIES || { targets: {} }).targets[order];
    if (!data) throw new InputError("device order", `no TPU slice named ${JSON.stringify(order)} in this build`);
    if (n !== data.devices) {
      throw new InputError("device order", `${order} has ${data.devices} devices; the mesh axes multiply to ${n}`);
    }
    const key = mesh.sizes.filter((s) => s > 1).join("x");
    if (key in data.refused) throw new JaxRefusal("jax.make_mesh", data.refused[key]);
    if (!(key in data.meshes)) throw new InputError("device order", `no order recorded for a ${key} mesh on ${order}`);
    return data.orders[data.meshes[key]];
  }

  // ------------------------------------------------------------------------------------------------
  // Bytes in words

  function formatBytes(b) {
    const units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let k = 0;
    let v = b;
    while (v >= 1024 && k < units.length - 1) { v /= 1024; k++; }
    const text = k === 0 ? `${Math.round(v * 100) / 100} B` : `${v.toFixed(v < 10 ? 2 : 1)} ${units[k]}`;
    return Number.isInteger(b) && k > 0 ? `${text} (${b.toLocaleString("en-US")} bytes)` : text;
  }

  const api = {
    PALETTE, MAX_DEVICES, DTYPES, InputError, JaxRefusal, parseMesh, parseShape, parseSpec, specRepr, checkSpec,
    layout, indices, typeofString, reshardPlan, holderLabel, draw, formatBytes, deviceOrder,
  };
  root.ShardingPlayground = api;

  // ------------------------------------------------------------------------------------------------
  // The page: form -> URL fragment -> pictures and text

  const doc = root.document;
  if (!doc) return;

  function byId(id) { return doc.getElementById(id); }

  const FIELDS = ["shape", "dtype", "spec", "spec2", "order"];

  /** The inputs an InputError's field names, so that they can be marked invalid for assistive technology. */
  function inputsOf(field) {
    const axis = /^mesh axis (\d)$/.exec(field);
    if (axis) return [`pg-axis-name-${axis[1] - 1}`, `pg-axis-size-${axis[1] - 1}`];
    return { "mesh axes": [...Array(MAX_AXES).keys()].map((k) => `pg-axis-size-${k}`), shape: ["pg-shape"],
      spec: ["pg-spec"], "second spec": ["pg-spec2"], "device order": ["pg-order"] }[field] || [];
  }

  /** Marks the inputs of `field` (or none) invalid and ties them to the error message. */
  function markInvalid(field) {
    for (const el of byId("pg-form").querySelectorAll("input, select")) {
      const bad = field !== null && inputsOf(field).includes(el.id);
      if (bad) el.setAttribute("aria-invalid", "true");   // an empty aria-invalid means false
      else el.removeAttribute("aria-invalid");
      // Keep the input's own descriptions (the device order's note) and add or remove the error's.
      const ids = (el.getAttribute("aria-describedby") || "").split(" ").filter((id) => id && id !== "pg-error");
      if (bad) ids.unshift("pg-error");
      if (ids.length) el.setAttribute("aria-describedby", ids.join(" "));
      else el.removeAttribute("aria-describedby");
    }
  }

  /** The form's state as a plain object (what the URL fragment holds). */
  function readForm() {
    const state = { mesh: [] };
    for (let k = 0; k < MAX_AXES; k++) {
      state.mesh.push({ name: byId(`pg-axis-name-${k}`).value, size: byId(`pg-axis-size-${k}`).value });
    }
    for (const f of FIELDS) state[f] = byId(`pg-${f}`).value;
    return state;
  }

  function writeForm(state) {
    state.mesh.forEach((row, k) => {
      if (k >= MAX_AXES) return;
      byId(`pg-axis-name-${k}`).value = row.name;
      byId(`pg-axis-size-${k}`).value = row.size;
    });
    for (const f of FIELDS) {
      if (state[f] === undefined) continue;
      const el = byId(`pg-${f}`);
      if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === state[f])) continue;
      el.value = state[f];
    }
  }

  const toFragment = (state) => "#" + new URLSearchParams({
    mesh: state.mesh.filter((r) => r.name || r.size).map((r) => `${r.name}:${r.size}`).join(","),
    ...Object.fromEntries(FIELDS.map((f) => [f, state[f]])),
  }).toString();

  function fromFragment(hash) {
    const q = new URLSearchParams(hash.replace(/^#/, ""));
    if (!q.has("mesh")) return null;
    const rows = q.get("mesh").split(",").filter(Boolean).map((pair) => {
      const [name, size = ""] = pair.split(":");
      return { name, size };
    });
    while (rows.length < MAX_AXES) rows.push({ name: "", size: "" });
    const state = { mesh: rows };
    for (const f of FIELDS) if (q.has(f)) state[f] = q.get(f);
    return state;
  }

  /** The row of the page's XLA table for these moves (kinds sorted, slices left out, as the test keys them). */
  function xlaRow(moves) {
    const key = [...new Set(moves.map((m) => m.kind).filter((k) => k !== "slice"))].sort().join("+");
    return key ? doc.querySelector(`#pg-xla-table tr[data-move="${key}"]`) : null;
  }

  function describeMove(m) {
    const axes = m.axes.map(pyStr).join(", ");
    switch (m.kind) {
      case "slice":
        return `<strong>local slice</strong> along ${axes}: each device keeps 1/${m.group} of what it holds; `
          + "nothing is sent";
      case "collective-permute":
        return `<strong>collective-permute</strong>: ${m.receivers} of the ${m.group} devices do not hold their `
          + `new tile and receive it whole from a device that does: ${formatBytes(m.bytes)} sent by each device `
          + "that sends";
      case "all-to-all":
        return `<strong>all-to-all</strong> over ${axes} (groups of ${m.group}): ${formatBytes(m.bytes)} sent per `
          + `device as a direct exchange; ${formatBytes(m.ringBytes)} when the pieces are forwarded around a `
          + "bidirectional ring";
      default:   // all-gather
        return `<strong>all-gather</strong> over ${axes} (groups of ${m.group}): ${formatBytes(m.bytes)} sent per `
          + "device (ring)";
    }
  }

  function describeMoves(moves) {
    if (moves.length === 0) return "<p>Nothing moves: both specs put the same tiles on the same devices.</p>";
    const sum = (bytesOf) => moves.reduce((total, m) => total + bytesOf(m), 0);
    const total = sum((m) => m.bytes);
    const ringTotal = sum((m) => m.ringBytes ?? m.bytes);
    const ring = moves.some((m) => m.kind === "all-to-all")
      ? ` (all-to-all as a direct exchange; ${formatBytes(ringTotal)} with it forwarded around a ring)` : "";
    const row = xlaRow(moves);
    const xla = row ? `<p class="pg-xla">Where XLA chose otherwise for these moves in the book's tests: `
      + `${escapeHtml(row.cells[1].textContent)} (see the table below).</p>` : "";
    return `<ol>${moves.map((m) => `<li>${describeMove(m)}</li>`).join("")}</ol>`
      + `<p>Total: <strong>${formatBytes(total)}</strong> sent per device${ring}.</p>${xla}`;
  }

  function escapeHtml(s) {
    return s.replace(/[&<>"]/g, (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;" }[c]));
  }

  /** One spec's block of results: the picture and its text, or JAX's refusal. Returns the layout or null. */
  function showSpec(which, mesh, ids, text, shape, dtype) {
    const out = byId(`pg-out-${which}`);
    const canvas = byId(`pg-canvas-${which}`);
    const field = which === 1 ? "spec" : "second spec";
    let entries;
    try {
      entries = parseSpec(text, field);
      checkSpec(mesh, entries, shape);
    } catch (e) {
      canvas.hidden = true;
      if (e instanceof JaxRefusal) {
        out.innerHTML = '<p class="pg-refusal-head">JAX refuses this layout:</p>'
          + `<pre class="pg-refusal">${escapeHtml(`${e.type}: ${e.message}`)}</pre>`;
        return null;
      }
      throw e;
    }
    const lay = layout(mesh, ids, entries, shape);
    canvas.hidden = false;
    const title = formatSpec(entries, shape.length);
    const notes = draw(canvas, lay, title);
    canvas.setAttribute("aria-label", `${title} on mesh ${formatMesh(mesh)}: array ${formatShape(shape)} cut into `
      + `${lay.numTiles} tiles of ${formatShape(lay.tileShape)}, each held by ${lay.replication} device(s). ${notes.join(". ")}`);
    const shardBytes = prod(lay.tileShape) * DTYPES[dtype];
    out.innerHTML = `<dl class="pg-facts">
      <dt>shard shape</dt><dd><code>${formatShape(lay.tileShape)}</code> (${formatBytes(shardBytes)} per device)</dd>
      <dt>copies per tile</dt><dd>${lay.replication}${lay.replication > 1
    ? " (the tile is replicated over the mesh axes the spec does not use)" : ""}</dd>
      <dt><code>jax.typeof</code> (Explicit axes)</dt><dd><code>${escapeHtml(typeofString(dtype, shape, entries))}</code></dd>
    </dl>`;
    return lay;
  }

  /** A spec's result in a few words, for the status line. */
  function summary(field, lay) {
    if (!lay) return `${field}: JAX refuses this layout`;
    return `${field}: shard ${formatShape(lay.tileShape)}, ${lay.replication} ${lay.replication === 1 ? "copy" : "copies"} per tile`;
  }

  const ADDRESS_DELAY_MS = 250;
  let addressTimer = 0;

  function update() {
    const start = root.performance.now();
    const state = readForm();
    const error = byId("pg-error");
    // The address follows once typing pauses: rewriting it costs milliseconds, and Chromium throttles a
    // page that rewrites it on every key.
    root.clearTimeout(addressTimer);
    addressTimer = root.setTimeout(() => root.history.replaceState(null, "", toFragment(state)), ADDRESS_DELAY_MS);
    const status = [];   // one short line for screen readers (the results themselves are not live)
    try {
      const mesh = parseMesh(state.mesh);
      const shape = parseShape(state.shape);
      const ids = deviceOrder(mesh, state.order);
      const a = showSpec(1, mesh, ids, state.spec, shape, state.dtype);
      status.push(summary("spec", a));
      const second = state.spec2.trim() !== "";
      byId("pg-second").hidden = !second;
      const reshard = byId("pg-reshard");
      reshard.innerHTML = "";
      if (second) {
        const b = showSpec(2, mesh, ids, state.spec2, shape, state.dtype);
        status.push(summary("second spec", b));
        if (a && b) {
          const moves = reshardPlan(mesh, a.entries, b.entries, shape, DTYPES[state.dtype]);
          reshard.innerHTML = "<h3>Resharding from the first spec to the second</h3>" + describeMoves(moves);
          status.push(`reshard: ${moves.filter((m) => m.kind !== "slice").map((m) => m.kind).join(", ")
            || "nothing sent"}`);
        }
      }
      error.textContent = "";
      markInvalid(null);
    } catch (e) {
      if (!(e instanceof InputError || e instanceof JaxRefusal)) throw e;
      // A JaxRefusal here is jax.make_mesh's, from deviceOrder: the slice cannot take this mesh shape.
      error.textContent = e instanceof JaxRefusal
        ? `device order: JAX refuses this mesh shape on that slice (${e.message})` : e.message;
      markInvalid(e instanceof JaxRefusal ? "device order" : e.field);
      status.splice(0, status.length, `error: ${error.textContent}`);
      for (const k of [1, 2]) { byId(`pg-canvas-${k}`).hidden = true; byId(`pg-out-${k}`).innerHTML = ""; }
      byId("pg-reshard").innerHTML = "";
    }
    byId("pg-status").textContent = status.join(". ");
    return root.performance.now() - start;
  }

  function fillOrders() {
    const data = root.SHARDLAB_TOPOLOGIES;
    const select = byId("pg-order");
    if (!data || data.missing) {
      byId("pg-order-note").textContent = data ? `TPU orders are not in this build: ${data.missing}` : "";
      return;
    }
    for (const [name, t] of Object.entries(data.targets)) {
      if (t.devices < 2) continue;
      const opt = doc.createElement("option");
      opt.value = name;
      opt.textContent = `jax.make_mesh on ${name} (${t.topology}, ${t.devices} devices)`;
      select.appendChild(opt);
    }
    byId("pg-order-note").textContent = "TPU orders: jax.make_mesh on libtpu's description of each slice, "
      + `recorded with JAX ${data.jax} when this book was built.`;
  }

  function start() {
    const form = byId("pg-form");
    if (!form) return;
    fillOrders();
    const state = fromFragment(root.location.hash);
    if (state) writeForm(state);
    form.addEventListener("input", update);
    form.addEventListener("submit", (e) => { e.preventDefault(); update(); });
    root.addEventListener("hashchange", () => {
      const s = fromFragment(root.location.hash);
      if (s) { writeForm(s); update(); }
    });
    let width = 0;
    root.addEventListener("resize", () => {   // redraw at the new width only when it changed
      const w = byId("pg-canvas-1").clientWidth;
      if (w && w !== width) { width = w; update(); }
    });
    api.update = update;
    api.setState = (s) => { writeForm({ ...readForm(), ...s }); return update(); };
    update();
  }

  if (doc.readyState === "loading") doc.addEventListener("DOMContentLoaded", start);
  else start();
}(typeof window !== "undefined" ? window : globalThis));
