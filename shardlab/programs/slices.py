"""Collectives inside a slice and collectives across slices, read from a compiled program.

A job over several TPU slices is one SPMD program per slice: XLA:TPU compiles the program for the
chips of one slice, writes the collectives among them as ordinary ``all-reduce``, ``all-gather``, ...
(:func:`shardlab.collectives_in_compiled` reads them; they travel on the slice's ICI), and writes
each collective whose groups span slices as a pair of ``send`` / ``recv`` *host transfers* handed to
the multi-slice runtime over the data-centre network (DCN): instructions with
``is_host_transfer=true`` and the attributes ``_xla_megascale_transfer_type`` (``ALL_REDUCE``, ...),
``_xla_megascale_reduce_operation`` (``SUM``, ...) and ``_xla_megascale_target``.
:func:`dcn_transfers` reads those, with how many times one call runs each (a transfer inside a
``lax.scan``'s body runs once per trip).

Where "slices" are simulated (CPU devices grouped in fours, say), every collective is an ordinary
one; :func:`split_by_slice` sorts them by whether one of their groups has devices of two slices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from shardlab.programs.collectives import CollectiveReport, collectives_in_compiled
from shardlab.programs.hlo import parse_module
from shardlab.programs.loops import _loop_trips

__all__ = ["DcnTransfer", "dcn_transfers", "split_by_slice"]


@dataclass(frozen=True)
class DcnTransfer:
    """One collective across slices, as XLA:TPU writes it for the multi-slice runtime.

    ``kind`` is the transfer type in lower case with hyphens (``"all-reduce"``); ``reduce`` the reduction
    (``"SUM"``) or None; ``dtype`` and ``shape`` what one chip sends (its ``send``'s operand);
    ``nbytes`` those bytes; ``trips`` how many times one call of the program runs it (None where a loop
    around it has no readable trip count); ``target`` the runtime's target text, as written;
    ``name`` the ``send`` instruction's name.
    """

    name: str
    kind: str
    reduce: str | None
    dtype: str
    shape: tuple
    nbytes: int
    trips: int | None
    target: str

    @property
    def bytes_per_step(self) -> int | None:
        """``nbytes`` times ``trips``: what one chip hands to the network in one call (None if unknown)."""
        return None if self.trips is None else self.nbytes * self.trips


def _text_of(program) -> str:
    if isinstance(program, str):
        return program
    text = getattr(program, "text", None)
    if isinstance(text, str):
        return text
    compiled = getattr(program, "compiled", program)
    if hasattr(compiled, "as_text"):
        return compiled.as_text()
    raise ValueError(f"program must be a compiled program, a CompiledProgram or HLO text, got "
                     f"{type(program).__name__}")


_FIELD_RE = re.compile(r'(_xla_megascale_[a-z_]+)="([^"]*)"')


def dcn_transfers(program) -> list[DcnTransfer]:
    """The collectives across slices of a program compiled for several TPU slices (module docstring).

    ``program``: ``jax.jit(f).lower(...).compile()``, a :class:`~shardlab.CompiledProgram` or its HLO
    text. Each ``send`` handed to the multi-slice runtime is one :class:`DcnTransfer`; its ``recv``
    (the result coming back) is not counted again. An empty list for a program of one slice.
    """
    text = _text_of(program)
    module = parse_module(text)
    trips = _loop_trips(text) if "_xla_megascale_transfer_type" in text else {}
    out = []
    for comp in module.computations.values():
        for ins in comp:
            if ins.opcode != "send" or "_xla_megascale_transfer_type" not in ins.attributes:
                continue
            fields = dict(_FIELD_RE.findall(ins.attributes))
            kind = (fields.get("_xla_megascale_transfer_type") or "").lower().replace("_", "-")
            operand = ins.shape[0] if isinstance(ins.shape, tuple) else ins.shape
            out.append(DcnTransfer(ins.name, kind, fields.get("_xla_megascale_reduce_operation"),
                                   operand.dtype, tuple(operand.shape), operand.nbytes,
                                   trips.get(ins.name, 1), fields.get("_xla_megascale_target") or ""))
    return out


def split_by_slice(report, slice_of) -> dict:
    """The collectives of ``report`` sorted by whether they stay inside one slice.

    ``report``: a :class:`~shardlab.CollectiveReport` (or a compiled program, read with
    :func:`shardlab.collectives_in_compiled`); ``slice_of``: ``{device id: slice}`` (for TPU devices
    ``{d.id: d.slice_index ...}``; for simulated slices any grouping, e.g. ``id // 4``). Returns
    ``{"inside": [...], "across": [...]}``: a collective is *across* when one of its groups (or, for a
    collective-permute, one of its pairs) holds devices of two slices.
    """
    if not isinstance(report, CollectiveReport):
        if not hasattr(getattr(report, "compiled", report), "as_text"):
            raise ValueError(f"split_by_slice: report must be a CollectiveReport or a compiled program, got "
                             f"{type(report).__name__}")
        report = getattr(report, "collectives", None) or collectives_in_compiled(getattr(report, "compiled",
                                                                                         report))
    if not isinstance(slice_of, dict) or not slice_of:
        raise ValueError(f"split_by_slice: slice_of must be a non-empty dict {{device id: slice}}, got "
                         f"{slice_of!r}")
    out: dict = {"inside": [], "across": []}
    for c in report:
        groups = report.device_groups(c)
        missing = [i for g in groups for i in g if i not in slice_of]
        if missing:
            raise ValueError(f"split_by_slice: slice_of has no slice for device {missing[0]} of a {c.kind}")
        across = any(len({slice_of[i] for i in g}) > 1 for g in groups)
        out["across" if across else "inside"].append(c)
    return out
