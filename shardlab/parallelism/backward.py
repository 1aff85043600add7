"""Where the backward pass communicates: which collective each forward collective becomes, and microbatches.

``transposed_collectives(f, *args)`` compiles two programs, ``f`` itself and its
backward pass alone (``jax.vjp``'s function applied to a cotangent shaped like
``f``'s output), and reads the collectives of each from compiled code: which
collective the forward one becomes when it is transposed. ``transpose_table``
puts several such pairs side by side. ``split_microbatches`` cuts a batch into
microbatches; :mod:`shardlab.programs.loops` counts the collectives of a loop over them per trip.
"""

from __future__ import annotations

import html
from dataclasses import dataclass

from shardlab.arguments import positive_int
from shardlab.programs.collectives import CollectiveReport, collectives_in

__all__ = ["Transpose", "TransposeTable", "transposed_collectives", "transpose_table", "split_microbatches"]


# --------------------------------------------------------------------------
# Forward collective -> backward collective
# --------------------------------------------------------------------------


@dataclass(frozen=True)
class Transpose:
    """The collectives of a function's forward program and of its backward pass alone.

    Both are :class:`~shardlab.CollectiveReport` read from compiled code.
    """

    forward: CollectiveReport
    backward: CollectiveReport

    @staticmethod
    def _kinds(report: CollectiveReport) -> str:
        return ", ".join(f"{k} x{v}" if v > 1 else k for k, v in sorted(report.kinds().items())) or "none"

    @property
    def forward_kinds(self) -> str:
        """The forward program's collectives in words (``"none"`` if it has none)."""
        return self._kinds(self.forward)

    @property
    def backward_kinds(self) -> str:
        """The backward program's collectives in words (``"none"`` if it has none)."""
        return self._kinds(self.backward)


def transposed_collectives(f, *args) -> Transpose:
    """Compile ``f(*args)`` and its backward pass, and read the collectives of each.

    The backward program is ``jax.vjp(f, *args)[1]`` applied to a cotangent with the type of
    ``f``'s output (it is compiled, not run): only what the backward pass needs stays in it, so
    its collectives are the backward pass's own. ``f`` must return one array. Call it under
    ``jax.set_mesh`` where ``f`` needs a mesh.
    """
    import jax

    if not callable(f):
        raise ValueError(f"transposed_collectives: f must be a function, got {type(f).__name__}")
    if not args:
        raise ValueError("transposed_collectives: args must hold at least one example argument")
    out = jax.eval_shape(f, *args)
    if not hasattr(out, "shape"):
        raise ValueError(f"transposed_collectives: f must return one array, got {type(out).__name__}")

    def backward(primals, cotangent):
        return jax.vjp(f, *primals)[1](cotangent)

    sharding = getattr(out, "sharding", None)
    cotangent = jax.ShapeDtypeStruct(out.shape, out.dtype, sharding=sharding)
    return Transpose(collectives_in(f, *args), collectives_in(backward, args, cotangent))


class TransposeTable:
    """Named :class:`Transpose` pairs, shown as a table (HTML in a notebook, text elsewhere)."""

    def __init__(self, rows: dict):
        self.rows = dict(rows)

    def __getitem__(self, name) -> Transpose:
        return self.rows[name]

    def _lines(self):
        return [(name, t.forward_kinds, t.backward_kinds) for name, t in self.rows.items()]

    def __str__(self) -> str:
        head = ("forward", "collectives in the forward program", "collectives in the backward program")
        rows = [head, *self._lines()]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        lines = ["  ".join(v.ljust(w) for v, w in zip(r, widths)).rstrip() for r in rows]
        lines.insert(1, "  ".join("-" * w for w in widths))
        return "\n".join(lines)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        esc = html.escape
        body = "".join("<tr>" + "".join(f"<td>{esc(v)}</td>" for v in r) + "</tr>" for r in self._lines())
        return ("<table><thead><tr><th>forward</th><th>collectives in the forward program</th>"
                "<th>collectives in the backward program</th></tr></thead>"
                f"<tbody>{body}</tbody></table>")


def transpose_table(cases: dict) -> TransposeTable:
    """:func:`transposed_collectives` for each ``{name: (f, args)}``, as one table."""
    if not isinstance(cases, dict) or not cases:
        raise ValueError("transpose_table: cases must be a non-empty dict {name: (f, args)}")
    rows = {}
    for name, case in cases.items():
        if not (isinstance(case, tuple) and len(case) == 2 and isinstance(case[1], tuple)):
            raise ValueError(f"transpose_table: cases[{name!r}] must be a pair (f, args) with args a tuple")
        rows[name] = transposed_collectives(case[0], *case[1])
    return TransposeTable(rows)


# --------------------------------------------------------------------------
# Microbatches
# --------------------------------------------------------------------------


def split_microbatches(batch, n: int):
    """Reshape a batch ``(B, ...)`` into ``n`` microbatches ``(n, B // n, ...)``, for a ``lax.scan``.

    Microbatch ``i`` is rows ``i * B // n`` to ``(i + 1) * B // n`` of the batch. Give it a host
    (NumPy) array and place the result with ``P(None, "batch axis")``: each microbatch is then
    split over the devices as the whole batch was.
    """
    n = positive_int("split_microbatches: n", n)
    shape = getattr(batch, "shape", None)
    if shape is None or len(shape) < 1:
        raise ValueError("split_microbatches: batch must be an array with a leading batch axis")
    if shape[0] % n:
        raise ValueError(f"split_microbatches: n={n} must divide the batch size {shape[0]}")
    return batch.reshape((n, shape[0] // n, *shape[1:]))
