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
  const SHARED_RGB = [232, 232, 232];   // a tile held by several devices: one neutral grey, as in the chapters
  const MAX_PANELS = 36;
  const MAX_LABELS = 1024;

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
  // Python's spelling of values (JAX's messages embed reprs and strs)

  // Characters repr() escapes outside ASCII: str.isprintable() is false for categories C* and Z* but space.
  const NOT_PRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;
  const hex = (code, digits) => code.toString(16).padStart(digits, "0");

  /** repr(s) of a Python str, as CPython's unicode_repr writes it. */
  function pyRepr(s) {
    const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
    let out = quote;
    for (const ch of s) {
      const code = ch.codePointAt(0);
      if (ch === quote || ch === "\\") out += `\\${ch}`;
      else if (ch === "\t") out += "\\t";
      else if (ch === "\n") out += "\\n";
      else if (ch === "\r") out += "\\r";
      else if (code < 0x20 || code === 0x7f) out += `\\x${hex(code, 2)}`;
      else if (code < 0x7f || !NOT_PRINTABLE.test(ch)) out += ch;
      else if (code <= 0xff) out += `\\x${hex(code, 2)}`;
      else if (code <= 0xffff) out += `\\u${hex(code, 4)}`;
      else out += `\\U${hex(code, 8)}`;
    }
    return out + quote;
  }

  /** str() of an axis name as JAX's messages print it: the name itself, or None. */
  const pyStr = (a) => (a === null ? "None" : a);
  const pyTuple = (items) => (items.length === 1 ? `(${items[0]},)` : `(${items.join(", ")})`);
  const reprAxis = (a) => (a === null ? "None" : pyRepr(a));

  /** repr(P(*entries)): entries are null, a name, or an array of names (or None, which JAX refuses). */
  function specRepr(entries) {
    const parts = entries.map((e) => (Array.isArray(e) ? pyTuple(e.map(reprAxis)) : reprAxis(e)));
    return `P(${parts.join(", ")}${parts.length === 1 ? "," : ""})`;
  }

  /** The axes of one spec entry, as an array. */
  const entryAxes = (e) => (e === null ? [] : Array.isArray(e) ? e : [e]);

  /** Python's sort of strings: by code points (JavaScript's sort compares UTF-16 units). */
  function byCodePoints(a, b) {
    const x = [...a];
    const y = [...b];
    for (let k = 0; k < Math.min(x.length, y.length); k++) {
      const d = x[k].codePointAt(0) - y[k].codePointAt(0);
      if (d) return d;
    }
    return x.length - y.length;
  }

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

  // The spellings of P that Python knows after `import jax` and `from jax.sharding import PartitionSpec as P`
  // (or `PartitionSpec`): JAX has jax.P and jax.sharding.PartitionSpec, and no jax.sharding.P.
  const HEAD = /^(?:P|PartitionSpec|jax\s*\.\s*P|jax\s*\.\s*sharding\s*\.\s*PartitionSpec)\s*\(/;
  const OTHER_CALL = /^[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*\s*\(/;
  const SPELLINGS = "P(...), PartitionSpec(...), jax.P(...) or jax.sharding.PartitionSpec(...)";
  const IDENT_CHAR = /[\p{L}\p{N}\p{Mn}\p{Mc}\p{Pc}]/u;

  /**
   * A PartitionSpec written as in Python: P('x', ('y', 'z'), None), PartitionSpec(...), jax.P(...),
   * jax.sharding.PartitionSpec(...), or the bare entries (read as P's arguments). Entries are None, string
   * literals (quotes, escapes, u and r prefixes, adjacent literals joined, as Python reads them) and tuples
   * or lists of them, in any parentheses. Text Python would not accept is an InputError naming `field`; so
   * is what Python accepts but the page does not read (numbers, keyword arguments, bytes, \N{...}). Returns
   * the entries as JAX's P canonicalises them: None, '', () and [] -> None; a one-item tuple -> its item;
   * lists -> tuples. A tuple inside a tuple is JAX's refusal (ValueError), as P raises it.
   */
  function parseSpec(text, field) {
    const src = text.trim();
    let i = 0;
    const fail = (what) => {
      throw new InputError(field, `${what} at character ${i + 1} of ${JSON.stringify(src)}; `
        + "expected entries such as P('x', ('y', 'z'), None)");
    };
    const unsupported = (what) => {
      throw new InputError(field, `the playground does not read ${what} (character ${i + 1} of `
        + `${JSON.stringify(src)}); write axis names as plain quoted strings, such as P('x', ('y', 'z'), None)`);
    };
    const skip = () => { while (i < src.length && /\s/.test(src[i])) i++; };

    // A string literal starts here: its prefix (letters before the quote) and quote, or null.
    const literalAt = () => {
      const m = /^([A-Za-z]{0,2})(['"])/.exec(src.slice(i, i + 3));
      if (!m || (i > 0 && m[1] && IDENT_CHAR.test(src[i - 1]))) return null;
      return ["", "u", "r", "b", "br", "rb", "f", "fr", "rf"].includes(m[1].toLowerCase()) ? m : null;
    };
    const SIMPLE = new Map([["\\", "\\"], ["'", "'"], ['"', '"'], ["a", "\x07"], ["b", "\b"], ["f", "\f"],
      ["n", "\n"], ["r", "\r"], ["t", "\t"], ["v", "\v"], ["\n", ""]]);
    const readString = () => {
      const m = literalAt();
      const prefix = m[1].toLowerCase();
      if (prefix.includes("b")) unsupported("bytes literals (b'...')");
      if (prefix.includes("f")) unsupported("f-strings");
      const raw = prefix === "r";
      i += m[1].length;
      const close = src.startsWith(m[2].repeat(3), i) ? m[2].repeat(3) : m[2];
      i += close.length;
      let out = "";
      for (;;) {
        if (i >= src.length) fail("an unclosed quote");
        if (src.startsWith(close, i)) {
          i += close.length;
          return out;
        }
        const ch = src[i];
        if (ch !== "\\") {
          out += ch;
          i++;
          continue;
        }
        const next = src[i + 1];
        if (next === undefined) fail("an unclosed quote");
        if (raw) {   // the backslash stays, and the character after it cannot end the string
          out += ch + next;
          i += 2;
          continue;
        }
        if (SIMPLE.has(next)) {
          out += SIMPLE.get(next);
          i += 2;
          continue;
        }
        if (/[0-7]/.test(next)) {   // up to three octal digits
          let j = i + 2;
          while (j < i + 4 && /[0-7]/.test(src[j] ?? "")) j++;
          out += String.fromCodePoint(parseInt(src.slice(i + 1, j), 8));
          i = j;
          continue;
        }
        const width = { x: 2, u: 4, U: 8 }[next];
        if (width) {
          const digits = src.slice(i + 2, i + 2 + width);
          if (!new RegExp(`^[0-9A-Fa-f]{${width}}$`).test(digits)) fail(`a truncated \\${next} escape`);
          const code = parseInt(digits, 16);
          if (code > 0x10ffff) fail(`the escape \\${next}${digits}, beyond Unicode`);
          out += String.fromCodePoint(code);
          i += 2 + width;
          continue;
        }
        if (next === "N") unsupported("\\N{...} escapes");
        fail(`the invalid escape sequence \\${next} (Python warns about it, and will refuse it)`);
      }
    };
    const strings = () => {   // adjacent literals are one string, as in Python
      let s = readString();
      for (;;) {
        const save = i;
        skip();
        if (!literalAt()) {
          i = save;
          return s;
        }
        s += readString();
      }
    };
    // A value: {kind: "none"} | {kind: "str", value} | {kind: "tuple" | "list", items}.
    const value = () => {
      skip();
      if (src.startsWith("None", i) && !IDENT_CHAR.test(src[i + 4] ?? " ")) {
        i += 4;
        return { kind: "none" };
      }
      if (literalAt()) return { kind: "str", value: strings() };
      if (src[i] === "(") {
        i++;
        skip();
        if (src[i] === ")") {
          i++;
          return { kind: "tuple", items: [] };
        }
        const first = value();
        skip();
        if (src[i] === ")") {   // parentheses around one value
          i++;
          return first;
        }
        if (src[i] !== ",") fail(i < src.length ? "a missing comma" : "a missing ')'");
        i++;
        return { kind: "tuple", items: [first, ...items(")")] };
      }
      if (src[i] === "[") {
        i++;
        return { kind: "list", items: items("]") };
      }
      const word = /^[A-Za-z_]\w*\s*=(?!=)/.exec(src.slice(i));
      if (word) unsupported(`keyword arguments (${word[0].replace(/\s/g, "")})`);
      return fail("an entry that is not None, a quoted axis name or a tuple of them");
    };
    // Values separated by commas up to `close`, a trailing comma allowed; `close` undefined: the end of the text.
    const more = (close) => (close === undefined ? i < src.length : src[i] !== close);
    const items = (close) => {
      const out = [];
      skip();
      while (more(close)) {
        if (i >= src.length) fail(`a missing '${close}'`);
        out.push(value());
        skip();
        if (src[i] === ",") {
          i++;
          skip();
        } else if (more(close)) {
          fail(i < src.length ? "a missing comma" : `a missing '${close}'`);
        }
      }
      if (close !== undefined) i++;
      return out;
    };

    let args;
    const head = HEAD.exec(src);
    if (head) {
      i = head[0].length;
      args = items(")");
      skip();
      if (i < src.length) fail("text after the closing ')'");
    } else if (OTHER_CALL.test(src)) {
      const name = OTHER_CALL.exec(src)[0].replace(/[\s(]/g, "");
      throw new InputError(field, `Python knows no ${name} after \`import jax\` and \`from jax.sharding import `
        + `PartitionSpec as P\`: write ${SPELLINGS}, or the bare entries`);
    } else {
      args = items(undefined);
    }

    const reprValue = (v) => (v.kind === "none" ? "None" : v.kind === "str" ? pyRepr(v.value)
      : v.kind === "list" ? `[${v.items.map(reprValue).join(", ")}]` : pyTuple(v.items.map(reprValue)));
    return args.map((v) => {
      if (v.kind === "none") return null;
      if (v.kind === "str") return v.value === "" ? null : v.value;
      const nested = v.items.find((x) => x.kind === "tuple" || x.kind === "list");
      if (nested) {
        throw new JaxRefusal("ValueError", "A tuple inside PartitionSpec cannot contain a nested tuple. Got "
          + `partition: ${reprValue(v)} and the nested tuple: ${reprValue(nested)}`);
      }
      const axes = v.items.map((x) => (x.kind === "none" ? null : x.value));
      return axes.length === 0 ? null : axes.length === 1 ? axes[0] : axes;
    });
  }

  // ------------------------------------------------------------------------------------------------
  // JAX's checks, in JAX's order (P(...), NamedSharding(mesh, spec), then rank, then divisibility)

  function meshRepr(mesh) {
    const axes = mesh.names.map((n, k) => `${pyRepr(n)}: ${mesh.sizes[k]}`).join(", ");
    return `Mesh(${axes}, axis_types=${pyTuple(mesh.names.map(() => "Explicit"))})`;
  }

  const shardingRepr = (mesh, entries) =>
    `NamedSharding(mesh=${meshRepr(mesh)}, spec=${specRepr(entries)}, memory_kind=device)`;

  /** Throws the JaxRefusal JAX raises for this mesh, spec and shape (mesh axes Explicit), if any. */
  function checkSpec(mesh, entries, shape) {
    // jax/_src/named_sharding.py: _check_unique_resources (None inside a tuple counts), then
    // _check_mesh_resource_axis; mesh.show_axes sorts the names written between backquotes.
    const counts = new Map();
    entries.forEach((e) => entryAxes(e).forEach((a) => counts.set(a, (counts.get(a) || 0) + 1)));
    const twice = [...counts].filter(([, c]) => c > 1).map(([a]) => `\`${pyStr(a)}\``).sort(byCodePoints);
    if (twice.length) {
      throw new JaxRefusal("DuplicateSpecError", "A single NamedSharding spec specification can map every mesh "
        + `axis to at most one positional dimension, but ${specRepr(entries)} has duplicate entries for ${twice.join(", ")}`);
    }
    for (const e of entries) {
      for (const a of entryAxes(e)) {
        if (a === null || !mesh.names.includes(a)) {
          throw new JaxRefusal("ValueError", `Resource axis: ${pyStr(a)} of ${specRepr(entries)} is not found in mesh: `
            + `${pyTuple(mesh.names.map(pyRepr))}.`);
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

  /** Cuts along each dimension (1 where the spec is shorter than the rank). */
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
   * mixed-radix number, a1 most significant. A dimension of length 0 is cut into empty pieces that are all
   * the same slice (0:0), so along it every device holds the same piece: `shards` counts the cuts JAX makes
   * (devices_indices_map), `pieces` the distinct pieces (what the picture draws and the copies count).
   */
  function layout(mesh, ids, entries, shape) {
    const n = prod(mesh.sizes);
    const ndim = shape.length;
    const shards = shardCounts(mesh, entries, ndim);
    const pieces = shards.map((k, d) => (shape[d] === 0 ? 1 : k));
    const tileShape = shape.map((s, d) => s / shards[d]);
    const numTiles = prod(pieces);
    const replication = n / numTiles;
    // Stride of each mesh axis in the flat (row-major) mesh order.
    const stride = mesh.sizes.map((_, k) => prod(mesh.sizes.slice(k + 1)));
    const tiles = new Int32Array(n * ndim);        // device (mesh order) -> piece coordinate per dim
    const flatTile = new Int32Array(n);
    for (let i = 0; i < n; i++) {
      let flat = 0;
      for (let d = 0; d < ndim; d++) {
        let t = 0;
        if (pieces[d] > 1) {
          for (const a of entryAxes(entries[d] ?? null)) {
            const k = mesh.names.indexOf(a);
            t = t * mesh.sizes[k] + (Math.floor(i / stride[k]) % mesh.sizes[k]);
          }
        }
        tiles[i * ndim + d] = t;
        flat = flat * pieces[d] + t;
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
    return { mesh, ids, entries, shape, shards, pieces, tileShape, replication, numTiles, tiles, holders, n };
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
   * prose gives the counts). Axes of size 1 move nothing and are ignored; an empty array moves nothing.
   * Each move: {kind, axes, group (devices per group), bytes (sent per device that sends, cost_model.py's
   * count), ringBytes (all-to-all only: bytes_all_to_all_ring), receivers (devices that receive data)}.
   *
   * Where the mesh has several axes of one size, the page also tries moving another axis of the same size
   * in place of each (the target with those axes' names swapped), then one collective-permute to put the
   * tiles on their devices, and keeps that plan when it sends fewer bytes (XLA does the same).
   */
  function reshardPlan(mesh, from, to, shape, itemsize) {
    if (prod(shape) === 0) return [];   // an empty array: nothing to send
    const total = (moves) => moves.reduce((sum, m) => sum + m.bytes, 0);
    let best = movesTo(mesh, from, to, shape, itemsize, to);
    for (const swap of sizeKeepingSwaps(mesh)) {
      const other = to.map((e) => (e === null ? null : Array.isArray(e) ? e.map((a) => swap.get(a) ?? a)
        : swap.get(e) ?? e));
      const moves = movesTo(mesh, from, other, shape, itemsize, to);
      if (total(moves) < total(best)) best = moves;
    }
    return best;
  }

  /** Every renaming of the mesh's axes of size > 1 that maps each axis to one of the same size, but none. */
  function sizeKeepingSwaps(mesh) {
    const axes = mesh.names.filter((_, k) => mesh.sizes[k] > 1);
    const size = (a) => mesh.sizes[mesh.names.indexOf(a)];
    const out = [];
    const extend = (done, rest) => {
      if (rest.length === 0) {
        if (done.some((a, k) => a !== axes[k])) out.push(new Map(axes.map((a, k) => [a, done[k]])));
        return;
      }
      const a = axes[done.length];
      for (const b of rest) if (size(b) === size(a)) extend([...done, b], rest.filter((c) => c !== b));
    };
    if (axes.length <= 4) extend([], axes);
    return out;
  }

  /** reshardPlan's moves of the axes towards `to`, ending with the tiles where `goal` puts them. */
  function movesTo(mesh, from, to, shape, itemsize, goal) {
    const size = (a) => mesh.sizes[mesh.names.indexOf(a)];
    const n = prod(mesh.sizes);
    const positions = [...Array(n).keys()];     // which device is which does not change the moves
    const ndim = shape.length;
    const dimsOf = (entries) => Array.from({ length: ndim },
      (_, d) => entryAxes(entries[d] ?? null).filter((a) => size(a) > 1));
    const layoutOf = (dims) => layout(mesh, positions, dims.map(fromAxes), shape);
    const cur = dimsOf(from);
    const want = dimsOf(to);
    const target = layoutOf(dimsOf(goal));   // the same tile shape as `to`'s: goal's axes renamed by size
    const dimOf = (dims, a) => dims.findIndex((axes) => axes.includes(a));
    const total = prod(shape) * itemsize;
    const shardBytes = (dims) => total / prod(dims.map((axes) => prod(axes.map(size))));
    const moves = [];
    // The last step: cut each new tile out of an old one, here or on another device.
    const finish = (dims) => {
      const now = layoutOf(dims);
      const receivers = devicesMissingTheirTile(now, target);
      if (receivers) {
        moves.push({ kind: "collective-permute", axes: dimsOf(goal).flat(), group: n,
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

  /** A tile's holders in words (the line under the picture that answers a pointer). */
  function holdersText(ids, total) {
    const n = ids.length;
    if (n === 1) return `device ${ids[0]}`;
    if (n === total) return `all ${n} devices`;
    if (n <= 16) return `devices ${ids.join(", ")}`;
    const step = ids[1] - ids[0];
    if (step > 0 && ids.every((v, k) => k === 0 || v - ids[k - 1] === step)) {
      return `${n} devices: ${ids[0]}, ${ids[1]}, …, ${ids[n - 1]}${step === 1 ? "" : ` (every ${ordinal(step)})`}`;
    }
    return `${n} devices: ${ids.slice(0, 12).join(", ")}, …`;
  }

  const ordinal = (n) => {
    const suffix = n % 100 >= 10 && n % 100 <= 20 ? "th" : { 1: "st", 2: "nd", 3: "rd" }[n % 10] || "th";
    return `${n}${suffix}`;
  };
  /** layout.format_spec: every dimension spelled out, e.g. P('x', None) (the picture's title). */
  const formatSpec = (entries, ndim) => `P(${Array.from({ length: ndim }, (_, d) => {
    const axes = entryAxes(entries[d] ?? null);
    return axes.length === 0 ? "None" : axes.length === 1 ? pyRepr(axes[0]) : `(${axes.map(pyRepr).join(", ")})`;
  }).join(", ")})`;
  const formatMesh = (mesh) => `{${mesh.names.map((a, k) => `${a}: ${mesh.sizes[k]}`).join(", ")}}`;
  const formatShape = (shape) => pyTuple(shape.map(String));
  const sliceText = (t, len, k) => (k === 1 ? ":" : `${t * len}:${(t + 1) * len}`);

  function dimLabel(lay, d) {
    const axes = entryAxes(lay.entries[d] ?? null);
    const split = axes.length ? ` — split by ${axes.map(pyRepr).join(" × ")}` : " — not split";
    return `dim ${d} (${lay.shape[d]})${split}`;
  }

  /** Tick positions (in tiles) along a side of `extent` px cut into `nTiles`, labels `space` px apart. */
  function ticks(nTiles, extent, space) {
    if (extent < space) return [];
    const need = Math.max(1, Math.ceil(space / (extent / nTiles)), Math.ceil((nTiles + 1) / 9));
    // A round step: a power of two (meshes are mostly made of them) or 1, 2 or 5 times a power of ten.
    let step = 1;
    while (step < need) step *= 2;
    for (let ten = 1; ten <= step; ten *= 10) {
      for (const k of [1, 2, 5]) if (k * ten >= need && k * ten < step) step = k * ten;
    }
    const pos = [];
    for (let k = 0; k <= nTiles; k += step) pos.push(k);
    if (pos[pos.length - 1] !== nTiles) {
      if ((nTiles - pos[pos.length - 1]) * (extent / nTiles) < space) pos.pop();
      pos.push(nTiles);
    }
    return pos;
  }

  const luminance = ([r, g, b]) => (0.2126 * r + 0.7152 * g + 0.0722 * b) / 255;

  /**
   * Greedy line breaking, at the context's current font: `units` joined by `sep` where they fit in
   * `maxWidth`, a unit kept whole on a line of its own where it fits one, else broken at its spaces, and a
   * word at its characters.
   */
  function wrapLines(ctx, units, sep, maxWidth) {
    const fits = (text) => ctx.measureText(text).width <= maxWidth;
    const lines = [];
    const add = (before, text) => {   // onto the last line if it fits there, else on a new line
      const joined = lines.length ? lines[lines.length - 1] + before + text : null;
      if (joined !== null && fits(joined)) lines[lines.length - 1] = joined;
      else lines.push(text);
    };
    units.forEach((unit, k) => {
      if (fits(unit)) {
        add(k ? sep : "", unit);
        return;
      }
      unit.split(" ").forEach((word, j) => {
        let before = j ? " " : k ? sep : "";
        let rest = word;
        while (rest.length > 1 && !fits(rest)) {
          let cut = rest.length - 1;
          while (cut > 1 && !fits(rest.slice(0, cut))) cut--;
          add(before, rest.slice(0, cut));
          lines.push("");   // what follows a broken word starts a line
          before = "";
          rest = rest.slice(cut);
        }
        add(lines.length && lines[lines.length - 1] === "" ? "" : before, rest);
      });
    });
    return lines.filter((l) => l !== "");
  }

  // ------------------------------------------------------------------------------------------------
  // Drawing on a canvas: tiles as pixels (as draw._TileImage renders them), then borders and text

  const TEXT_PX = 12;            // 9 pt at the size shown (the canvas is drawn at its CSS width): the smallest text
  const TITLE_PX = 15;
  const LABEL_MAX_PX = 44 / 3;   // 11 pt, the largest tile label
  const LINE = 1.25;             // line height, in font sizes
  const GAP = 4;
  const MIN_PANEL_PX = 64;       // several panels narrower than this go without element numbers

  /**
   * Draw `lay` on `canvas` at its CSS width (its height is set), with one backing pixel per device pixel
   * (devicePixelRatio). The tile image is computed per device pixel, like draw.py's numpy renderer:
   * pixel -> tile -> colour, so thousands of tiles cost no more than a few; tile borders are whole
   * device pixels on the image's own tile boundaries. Text is never below TEXT_PX and never squeezed: a
   * tile is labelled only when its label fits inside it, and what does not fit is said in the notes.
   * Returns {notes, panels: [{p, x0, y0, pw, ph}], R, C, labelPx} (CSS pixels; labelPx 0: no labels).
   */
  function draw(canvas, lay, title) {
    const ctx = canvas.getContext("2d");
    const ndim = lay.shape.length;
    // Panels: 2-D slices over the leading dimensions (one per piece along them), at most MAX_PANELS.
    const R = ndim >= 2 ? lay.pieces[ndim - 2] : 1;
    const C = ndim >= 1 ? lay.pieces[ndim - 1] : 1;
    const lead = lay.pieces.slice(0, Math.max(0, ndim - 2));
    const multi = ndim > 2;
    const panelsTotal = prod(lead);
    const panels = Math.min(panelsTotal, MAX_PANELS);
    const hEl = ndim >= 2 ? lay.shape[ndim - 2] : 1;
    const wEl = ndim >= 1 ? lay.shape[ndim - 1] : 1;
    const ratio = ndim === 1 ? 0.14 : hEl && wEl ? Math.min(Math.max(hEl / wEl, 0.2), 2.5) : 1;
    const notes = [];
    if (panels < panelsTotal) notes.push(`showing ${panels} of ${panelsTotal} slices`);

    const width = canvas.clientWidth || 640;
    const textW = width - 2 * GAP;
    const lineH = TEXT_PX * LINE;
    const fontOf = (px, bold = false) => `${bold ? "bold " : ""}${px}px sans-serif`;
    const widthOf = (text, px = TEXT_PX) => {
      ctx.font = fontOf(px);
      return ctx.measureText(text).width;
    };

    // Geometry, in CSS pixels: the panel grid whose panels come out largest. Each panel has its element
    // numbers (ticks) beside it, unless there are several panels and the numbers leave them narrower than
    // MIN_PANEL_PX: then the panels go without, and grow.
    const rowTickW = ndim >= 2 ? widthOf(String(lay.shape[ndim - 2])) : 0;
    const colTickW = ndim >= 1 ? widthOf(String(lay.shape[ndim - 1])) : 0;
    const maxH = Math.max(260, Math.min(640, width * 0.9));
    const topGuess = 14 + TITLE_PX * LINE + lineH * (multi ? 4 : 2);
    const titleH = multi ? lineH + 4 : 0;
    const arrange = (withTicks) => {
      const padL = GAP + (withTicks ? Math.max(colTickW / 2, ndim >= 2 ? rowTickW + 6 : 0) : 0)
        + (!multi && ndim >= 2 ? lineH + 4 : 0);
      const padR = GAP + Math.max(6, withTicks ? colTickW / 2 : 0);
      const padB = (withTicks && ndim >= 1 ? 8 + lineH : 0) + (!multi && ndim >= 1 ? lineH + 2 : 0) + 8;
      let found = null;
      for (let cols = 1; cols <= panels; cols++) {
        const rows = Math.ceil(panels / cols);
        const w = Math.min(width / cols - padL - padR, ((maxH - topGuess) / rows - padB - titleH) / ratio);
        if (w > 0 && (!found || w > found.w + 1e-9)) found = { w, cols, rows };
      }
      if (!found) found = { w: 8, cols: Math.ceil(Math.sqrt(panels)), rows: Math.ceil(panels / Math.ceil(Math.sqrt(panels))) };
      return { ...found, padL, padR, padB, withTicks };
    };
    let best = arrange(ndim >= 1);
    if (multi && best.w < MIN_PANEL_PX) best = arrange(false);
    const { padL, padR, padB } = best;
    const pw = Math.max(8, Math.floor(best.w));
    const ph = Math.max(8, Math.floor(pw * ratio));
    const cellW = width / best.cols;
    const cellH = ph + padB + titleH;

    // What rows, columns and panels are: beside a single panel where the words fit, else in the header.
    const header = [];
    const rowText = ndim >= 2 ? dimLabel(lay, ndim - 2) : null;
    const colText = ndim >= 1 ? dimLabel(lay, ndim - 1) : null;
    let rowBeside = false;
    let colBeside = false;
    if (multi) {
      header.push(`panels: ${lead.map((_, d) => dimLabel(lay, d)).join("; ")}`, `rows: ${rowText}`, `columns: ${colText}`);
    } else {
      if (colText !== null && widthOf(colText) <= textW) colBeside = true;
      else if (colText !== null) header.push(`columns: ${colText}`);
      if (rowText !== null && widthOf(rowText) <= ph) rowBeside = true;
      else if (rowText !== null) header.push(`rows: ${rowText}`);
    }
    ctx.font = fontOf(TITLE_PX, true);
    const titleLines = wrapLines(ctx, [title], " ", textW);
    const facts = [`mesh ${formatMesh(lay.mesh)}`, `array ${formatShape(lay.shape)}`, `tile ${formatShape(lay.tileShape)}`];
    const rep = lay.replication;
    if (rep > 1) facts.push(`each tile on ${rep} devices`);
    ctx.font = fontOf(TEXT_PX);
    const factLines = wrapLines(ctx, facts, " · ", textW);
    const headerLines = header.length ? wrapLines(ctx, header, " · ", textW) : [];
    const top = Math.ceil(6 + titleLines.length * TITLE_PX * LINE + (factLines.length + headerLines.length) * lineH + 8);

    // Panel titles (the slice of the leading dimensions), where they fit the panel's cell.
    const panelTitle = (p) => {
      let rest = p;
      const idx = lead.map((_, k) => {   // the panel number as a mixed-radix tuple over the leading dims
        const m = prod(lead.slice(k + 1));
        const v = Math.floor(rest / m);
        rest %= m;
        return v;
      });
      return `[${idx.map((t, k) => sliceText(t, lay.tileShape[k], lead[k])).concat([":", ":"]).join(", ")}]`;
    };
    const titleRoom = cellW - 2 * GAP - Math.abs(padL - padR);
    const titlesFit = multi && [...Array(panels).keys()].every((p) => widthOf(panelTitle(p)) <= titleRoom);
    if (multi && !titlesFit) {
      notes.push(`panel titles left out (narrow panels): the panels follow the pieces of the leading dimensions, `
        + "left to right, then top to bottom");
    }

    // Ticks, where their numbers fit side by side.
    const colTicks = best.withTicks ? ticks(C, pw, colTickW + 8) : [];
    const rowTicks = best.withTicks && ndim >= 2 ? ticks(R, ph, lineH + 2) : [];
    if ((ndim >= 1 && colTicks.length === 0) || (ndim >= 2 && rowTicks.length === 0)) {
      notes.push("element numbers on the axes left out (too little room)");
    }

    // Colours: a tile held by one device has that device's colour; one held by several is grey.
    const nColors = rep === 1 ? 1 : 0;
    const maxId = lay.ids.reduce((m, v) => Math.max(m, v), 0);
    const lut = new Uint32Array(maxId + 1);
    const pack = ([r, g, b]) => ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0;   // little-endian RGBA
    for (const id of lay.ids) lut[id] = pack(PALETTE_RGB[id % PALETTE_RGB.length]);
    const grey = pack(SHARED_RGB);
    // White borders between tiles, left out where they would hide small tiles.
    const lw = Math.min(pw / C, ph / R) < 6 ? 0 : Math.max(R, C) <= 16 ? 1.5 : Math.max(R, C) <= 48 ? 0.8 : 0;

    // Tile labels: one font for all, the largest (up to 11 pt) with which every label fits inside its tile
    // (on a white box where the tile is grey); none when that is below 9 pt.
    const boxed = nColors !== 1;
    const perPanel = R * C * rep;
    let stride = 1;
    while (Math.ceil(R / stride) * Math.ceil(C / stride) * panels > MAX_LABELS) stride++;
    const roomW = pw / C - lw - 2;
    const roomH = ph / R - lw - 2;
    const labels = [];   // [panel, row, col, lines]
    let labelPx = 0;
    if (roomW >= widthOf("0") && roomH >= lineH) {
      let widest = 0;
      let tallest = 1;
      ctx.font = fontOf(TEXT_PX);
      for (let p = 0; p < panels; p++) {
        for (let r = 0; r < R; r += stride) {
          for (let c = 0; c < C; c += stride) {
            const t = p * perPanel + (r * C + c) * rep;
            const lines = holderLabel(Array.from(lay.holders.subarray(t, t + rep)), lay.n).split("\n");
            for (const l of lines) widest = Math.max(widest, ctx.measureText(l).width);
            tallest = Math.max(tallest, lines.length);
            labels.push([p, r, c, lines]);
          }
        }
      }
      // At font size f: the text is widest * f / TEXT_PX wide, the box 0.4 f wider; lines f * LINE apart.
      const fit = Math.min(LABEL_MAX_PX, roomW / (widest / TEXT_PX + 0.4), roomH / (tallest * LINE + 0.3));
      if (fit >= TEXT_PX) labelPx = Math.floor(fit * 4) / 4;
    }
    if (!labelPx) {
      const px = (v) => (v >= 1 ? String(Math.floor(v)) : "less than 1");
      notes.push(`device ids not drawn: at 9 pt they do not fit tiles of ${px(pw / C)} × ${px(ph / R)} px; `
        + "point at a tile to read its devices");
    } else if (stride > 1) {
      notes.push(`device ids on every ${ordinal(stride)} tile in each direction (${R}×${C} tiles per panel); `
        + "point at a tile to read its devices");
    }

    ctx.font = fontOf(TEXT_PX);
    const noteLines = notes.length ? wrapLines(ctx, notes, "  ·  ", textW) : [];
    const height = Math.ceil(top + best.rows * cellH + (noteLines.length ? noteLines.length * lineH + 6 : 0) + 6);

    const dpr = root.devicePixelRatio || 1;
    canvas.width = Math.round(width * dpr);
    canvas.height = Math.round(height * dpr);
    canvas.style.height = `${height}px`;
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    ctx.fillStyle = "#ffffff";
    ctx.fillRect(0, 0, width, height);
    const put = (text, x, y, { px = TEXT_PX, bold = false, colour = "#000000", align = "center", baseline = "top" } = {}) => {
      ctx.font = fontOf(px, bold);
      ctx.fillStyle = colour;
      ctx.textAlign = align;
      ctx.textBaseline = baseline;
      ctx.fillText(text, x, y);
    };

    let y = 6;
    for (const l of titleLines) { put(l, width / 2, y, { px: TITLE_PX, bold: true }); y += TITLE_PX * LINE; }
    for (const l of factLines) { put(l, width / 2, y, { colour: "#333333" }); y += lineH; }
    for (const l of headerLines) { put(l, width / 2, y, { colour: "#000000" }); y += lineH; }

    const pxW = Math.round(pw * dpr);
    const pxH = Math.round(ph * dpr);
    const tileOfX = new Int32Array(pxW);
    const tileOfY = new Int32Array(pxH);
    for (let x = 0; x < pxW; x++) tileOfX[x] = Math.floor((x * C) / pxW);
    for (let yy = 0; yy < pxH; yy++) tileOfY[yy] = Math.floor((yy * R) / pxH);
    const image = ctx.createImageData(pxW, pxH);
    const pixels = new Uint32Array(image.data.buffer);
    const lwd = lw ? Math.max(1, Math.round(lw * dpr)) : 0;   // border width in device pixels
    const placed = [];

    for (let p = 0; p < panels; p++) {
      const col = p % best.cols;
      const row = Math.floor(p / best.cols);
      const x0 = Math.round(col * cellW + padL + Math.max(0, (cellW - padL - padR - pw) / 2));
      const y0 = Math.round(top + row * cellH + titleH);
      placed.push({ p, x0, y0, pw, ph });
      const base = p * perPanel;
      for (let yy = 0; yy < pxH; yy++) {
        const rowBase = base + tileOfY[yy] * C * rep;
        for (let x = 0; x < pxW; x++) {
          const t = rowBase + tileOfX[x] * rep;
          pixels[yy * pxW + x] = nColors === 1 ? lut[lay.holders[t]] : grey;
        }
      }
      const X0 = Math.round(x0 * dpr);
      const Y0 = Math.round(y0 * dpr);
      ctx.putImageData(image, X0, Y0);
      if (lwd) {   // white borders, whole device pixels centred on the image's tile boundaries
        ctx.setTransform(1, 0, 0, 1, 0, 0);
        ctx.fillStyle = "#ffffff";
        for (let c = 1; c < C; c++) ctx.fillRect(X0 + Math.ceil((c * pxW) / C) - (lwd >> 1), Y0, lwd, pxH);
        for (let r = 1; r < R; r++) ctx.fillRect(X0, Y0 + Math.ceil((r * pxH) / R) - (lwd >> 1), pxW, lwd);
        ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
      }

      if (titlesFit) put(panelTitle(p), x0 + pw / 2, y0 - 3, { colour: "#444444", baseline: "bottom" });
      for (const k of colTicks) {
        put(String(Math.round(k * lay.tileShape[ndim - 1])), x0 + (k * pw) / C, y0 + ph + 8, { colour: "#444444" });
      }
      for (const k of rowTicks) {
        put(String(Math.round(k * lay.tileShape[ndim - 2])), x0 - 4, y0 + (k * ph) / R,
          { colour: "#444444", align: "right", baseline: "middle" });
      }
      if (colBeside) {
        const w = widthOf(colText);
        const cx = Math.min(Math.max(x0 + pw / 2, GAP + w / 2), width - GAP - w / 2);
        put(colText, cx, y0 + ph + 8 + lineH + 2);
      }
      if (rowBeside) {
        ctx.save();
        ctx.translate(x0 - 4 - rowTickW - 6 - lineH / 2, y0 + ph / 2);
        ctx.rotate(-Math.PI / 2);
        put(rowText, 0, 0, { baseline: "middle" });
        ctx.restore();
      }
    }

    if (labelPx) {
      const lh = labelPx * LINE;
      ctx.font = fontOf(labelPx);
      ctx.textAlign = "center";
      ctx.textBaseline = "middle";
      for (const [p, r, c, lines] of labels) {
        const { x0, y0 } = placed[p];
        const cx = x0 + ((c + 0.5) * pw) / C;
        const cy = y0 + ((r + 0.5) * ph) / R;
        const y1 = cy - ((lines.length - 1) * lh) / 2;
        if (boxed) {   // a white box sets the label off the grey (draw._LABEL_BOX)
          const w = Math.max(...lines.map((l) => ctx.measureText(l).width)) + labelPx * 0.3;
          const h = lines.length * lh + labelPx * 0.2;
          ctx.fillStyle = "rgba(255, 255, 255, 0.8)";
          ctx.fillRect(cx - w / 2, cy - h / 2, w, h);
          ctx.fillStyle = "#000000";
        } else {
          const t = p * perPanel + (r * C + c) * rep;
          const rgb = PALETTE_RGB[lay.holders[t] % PALETTE_RGB.length];
          ctx.fillStyle = luminance(rgb) > 0.5 ? "#000000" : "#ffffff";
        }
        lines.forEach((l, k) => ctx.fillText(l, cx, y1 + k * lh));
      }
    }
    y = top + best.rows * cellH + 6;
    for (const l of noteLines) { put(l, width / 2, y, { colour: "#555555" }); y += lineH; }

    const geometry = { notes, panels: placed, R, C, labelPx, lay, perPanel };
    canvas.pgGeometry = geometry;
    return geometry;
  }

  /** The tile under CSS pixel (x, y) of a drawn canvas: its slice in words and its holders, or null. */
  function tileAt(geometry, x, y) {
    const { lay, R, C, perPanel } = geometry;
    const panel = geometry.panels.find((g) => x >= g.x0 && x < g.x0 + g.pw && y >= g.y0 && y < g.y0 + g.ph);
    if (!panel) return null;
    const r = Math.min(R - 1, Math.floor(((y - panel.y0) * R) / panel.ph));
    const c = Math.min(C - 1, Math.floor(((x - panel.x0) * C) / panel.pw));
    const ndim = lay.shape.length;
    const lead = lay.pieces.slice(0, Math.max(0, ndim - 2));
    let rest = panel.p;
    const coords = lead.map((_, k) => {
      const m = prod(lead.slice(k + 1));
      const v = Math.floor(rest / m);
      rest %= m;
      return v;
    });
    if (ndim >= 2) coords.push(r);
    if (ndim >= 1) coords.push(c);
    const t = panel.p * perPanel + (r * C + c) * lay.replication;
    const ids = Array.from(lay.holders.subarray(t, t + lay.replication));
    const slice = `[${coords.map((k, d) => sliceText(k, lay.tileShape[d], lay.pieces[d])).join(", ")}]`;
    return { ids, slice, text: `tile ${slice}: ${holdersText(ids, lay.n)}` };
  }

  /**
   * Device ids in mesh order: 0..n-1, or jax.make_mesh's order on a TPU slice (exported at build time, by
   * book/_ext/playground_data.py, for the mesh's axes of size > 1: axes of size 1 change neither the order
   * nor which axis jax.make_mesh refuses, only that axis's position in its message, which the data marks).
   */
  function deviceOrder(mesh, order) {
    const n = prod(mesh.sizes);
    if (order === "list") return [...Array(n).keys()];
    const data = (root.SHARDLAB_TOPOLOGIES || { targets: {} }).targets[order];
    if (!data) throw new InputError("device order", `no TPU slice named ${JSON.stringify(order)} in this build`);
    if (n !== data.devices) {
      throw new InputError("device order", `${order} has ${data.devices} devices; the mesh axes multiply to ${n}`);
    }
    const big = mesh.sizes.map((s, k) => k).filter((k) => mesh.sizes[k] > 1);   // positions of the axes > 1
    const key = big.map((k) => mesh.sizes[k]).join("x");
    if (key in data.refused) {
      const refusal = data.refused[key];
      const full = mesh.sizes.join("x");
      const text = refusal.exact && full in refusal.exact ? refusal.exact[full]
        : refusal.axis === null ? refusal.text : refusal.text.replace("{axis}", String(big[refusal.axis]));
      throw new JaxRefusal("jax.make_mesh", text);
    }
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
    PALETTE, MAX_DEVICES, DTYPES, TEXT_PX, InputError, JaxRefusal, parseMesh, parseShape, parseSpec, specRepr,
    pyRepr, checkSpec, layout, indices, typeofString, reshardPlan, holderLabel, draw, tileAt,
    formatBytes, deviceOrder,
  };
  root.ShardingPlayground = api;

  // ------------------------------------------------------------------------------------------------
  // The page: form -> URL fragment -> pictures and text

  const doc = root.document;
  if (!doc) return;

  function byId(id) { return doc.getElementById(id); }

  const FIELDS = ["shape", "dtype", "spec", "spec2", "order"];
  const FIELD_WORDS = { shape: "array shape", dtype: "dtype", spec: "spec", spec2: "second spec", order: "device order" };
  const HOVER_HINT = "Point at a tile, or tap it, to read which devices hold it.";

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

  const meshRows = (state) => state.mesh.filter((r) => r.name || r.size).map((r) => `${r.name}:${r.size}`);

  const toFragment = (state) => "#" + new URLSearchParams({
    mesh: meshRows(state).join(","),
    ...Object.fromEntries(FIELDS.map((f) => [f, state[f]])),
  }).toString();

  let DEFAULTS = null;   // the form as the page ships it, read before any link is applied

  /** A value of `field` in words, for the note about a link. */
  function shown(field, value) {
    if (field === "order") return byId("pg-order").querySelector(`option[value="${CSS.escape(value)}"]`)?.textContent ?? value;
    return value === "" ? "nothing" : value;
  }

  /**
   * A link's fragment -> {state, notes}: the view it asks for, on the page's defaults where it says nothing,
   * and in words each thing it asks for that the page does not offer (and what is shown instead). null for
   * an empty fragment.
   */
  function fromFragment(hash) {
    const text = hash.replace(/^#/, "");
    if (!text) return null;
    const q = new URLSearchParams(text);
    const state = { ...DEFAULTS, mesh: DEFAULTS.mesh.map((r) => ({ ...r })) };
    const notes = [];
    const known = ["mesh", ...FIELDS];
    for (const key of new Set(q.keys())) {
      if (!known.includes(key)) notes.push(`${key}=${q.get(key)} is not a setting of the playground: left out`);
      else if (q.getAll(key).length > 1) notes.push(`${key} is given ${q.getAll(key).length} times: the first is shown`);
    }
    if (q.has("mesh")) {
      const rows = q.get("mesh").split(",").filter(Boolean).map((pair) => {
        const [name, size = ""] = pair.split(":");
        return { name, size };
      });
      if (rows.length > MAX_AXES) {
        notes.push(`the mesh has ${rows.length} axes and the playground takes at most ${MAX_AXES}: left out `
          + rows.slice(MAX_AXES).map((r) => `${r.name}:${r.size}`).join(", "));
      }
      state.mesh = rows.slice(0, MAX_AXES);
      while (state.mesh.length < MAX_AXES) state.mesh.push({ name: "", size: "" });
    } else {
      notes.push(`no mesh: showing ${meshRows(DEFAULTS).join(",")}`);
    }
    for (const f of FIELDS) {
      if (!q.has(f)) {
        if (f === "spec2") state.spec2 = "";
        else notes.push(`no ${FIELD_WORDS[f]}: showing ${shown(f, DEFAULTS[f])}`);
        continue;
      }
      const value = q.get(f);
      const el = byId(`pg-${f}`);
      if (el.tagName === "SELECT" && ![...el.options].some((o) => o.value === value)) {
        const offered = [...el.options].map((o) => o.value).join(", ");
        notes.push(`${FIELD_WORDS[f]} ${JSON.stringify(value)} is not one the playground offers (${offered}): `
          + `showing ${shown(f, DEFAULTS[f])}`);
        continue;
      }
      state[f] = value;
    }
    return { state, notes };
  }

  /** Shows what a link asked for that the page does not offer (or hides the note). */
  function showLinkNotes(notes) {
    const el = byId("pg-link-note");
    el.hidden = notes.length === 0;
    el.textContent = notes.length ? `This link asks for what the playground does not offer, so the view below `
      + `differs from it: ${notes.join("; ")}.` : "";
  }

  /** The row of the page's XLA table for these moves (kinds sorted, slices left out, as the test keys them). */
  function xlaRow(moves) {
    const key = [...new Set(moves.map((m) => m.kind).filter((k) => k !== "slice"))].sort().join("+");
    return key ? doc.querySelector(`#pg-xla-table tr[data-move="${key}"]`) : null;
  }

  function describeMove(m) {
    const axes = escapeHtml(m.axes.map(pyRepr).join(", "));
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

  function describeMoves(moves, shape) {
    if (prod(shape) === 0) return "<p>The array has no elements: nothing is sent.</p>";
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

  /** Why a tile has several copies, in words. */
  function copiesText(lay) {
    if (lay.replication === 1) return "1";
    const empty = lay.shape.map((s, d) => d).filter((d) => lay.shape[d] === 0 && lay.shards[d] > 1);
    const why = [];
    if (prod(lay.shards) < lay.n) why.push("the tile is replicated over the mesh axes the spec does not use");
    if (empty.length) {
      why.push(`dim${empty.length > 1 ? "s" : ""} ${empty.join(", ")} ${empty.length > 1 ? "have" : "has"} length 0: `
        + "its pieces are all the same empty slice, held by every device along the axes that split it");
    }
    return `${lay.replication} (${why.join("; ")})`;
  }

  /** One spec's block of results: the picture and its text, or JAX's refusal. Returns the layout or null. */
  function showSpec(which, mesh, ids, text, shape, dtype) {
    const out = byId(`pg-out-${which}`);
    const canvas = byId(`pg-canvas-${which}`);
    const hover = byId(`pg-hover-${which}`);
    const field = which === 1 ? "spec" : "second spec";
    let entries;
    try {
      entries = parseSpec(text, field);
      checkSpec(mesh, entries, shape);
    } catch (e) {
      canvas.hidden = true;
      hover.hidden = true;
      if (e instanceof JaxRefusal) {
        out.innerHTML = '<p class="pg-refusal-head">JAX refuses this layout:</p>'
          + `<pre class="pg-refusal">${escapeHtml(`${e.type}: ${e.message}`)}</pre>`;
        return null;
      }
      throw e;
    }
    const lay = layout(mesh, ids, entries, shape);
    canvas.hidden = false;
    hover.hidden = false;
    hover.textContent = HOVER_HINT;
    const title = formatSpec(entries, shape.length);
    const { notes } = draw(canvas, lay, title);
    canvas.setAttribute("aria-label", `${title} on mesh ${formatMesh(mesh)}: array ${formatShape(shape)} cut into `
      + `${lay.numTiles} tiles of ${formatShape(lay.tileShape)}, each held by ${lay.replication} device(s). ${notes.join(". ")}`);
    const shardBytes = prod(lay.tileShape) * DTYPES[dtype];
    out.innerHTML = `<dl class="pg-facts">
      <dt>shard shape</dt><dd><code>${formatShape(lay.tileShape)}</code> (${formatBytes(shardBytes)} per device)</dd>
      <dt>copies per tile</dt><dd>${escapeHtml(copiesText(lay))}</dd>
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
          reshard.innerHTML = "<h3>Resharding from the first spec to the second</h3>" + describeMoves(moves, shape);
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
      for (const k of [1, 2]) {
        byId(`pg-canvas-${k}`).hidden = true;
        byId(`pg-hover-${k}`).hidden = true;
        byId(`pg-out-${k}`).innerHTML = "";
      }
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

  /** Pointing at (or tapping) a tile says which devices hold it, in the line under the picture. */
  function followPointer(which) {
    const canvas = byId(`pg-canvas-${which}`);
    const hover = byId(`pg-hover-${which}`);
    const show = (e) => {
      const info = canvas.pgGeometry ? tileAt(canvas.pgGeometry, e.offsetX, e.offsetY) : null;
      hover.textContent = info ? info.text : HOVER_HINT;
    };
    canvas.addEventListener("pointermove", show);
    canvas.addEventListener("pointerdown", show);
  }

  function start() {
    const form = byId("pg-form");
    if (!form) return;
    fillOrders();
    DEFAULTS = readForm();
    const link = fromFragment(root.location.hash);
    if (link) {
      writeForm(link.state);
      showLinkNotes(link.notes);
    }
    form.addEventListener("input", () => { showLinkNotes([]); update(); });
    form.addEventListener("submit", (e) => { e.preventDefault(); update(); });
    root.addEventListener("hashchange", () => {
      const s = fromFragment(root.location.hash);
      if (s) { writeForm(s.state); showLinkNotes(s.notes); update(); }
    });
    [1, 2].forEach(followPointer);
    // Redraw when the picture's width or the device pixel ratio changes (a rotated phone, a zoom, a window
    // moved to another screen), so that the canvas keeps one backing pixel per device pixel.
    let drawnFor = "";
    const redraw = () => {
      const key = `${byId("pg-canvas-1").clientWidth}@${root.devicePixelRatio || 1}`;
      if (key !== drawnFor) { drawnFor = key; update(); }
    };
    root.addEventListener("resize", redraw);
    const watchRatio = () => {
      if (!root.matchMedia) return;
      root.matchMedia(`(resolution: ${root.devicePixelRatio || 1}dppx)`)
        .addEventListener("change", () => { redraw(); watchRatio(); }, { once: true });
    };
    watchRatio();
    api.update = update;
    api.setState = (s) => { writeForm({ ...readForm(), ...s }); return update(); };
    update();
    drawnFor = `${byId("pg-canvas-1").clientWidth}@${root.devicePixelRatio || 1}`;
  }

  if (doc.readyState === "loading") doc.addEventListener("DOMContentLoaded", start);
  else start();
}(typeof window !== "undefined" ? window : globalThis));
