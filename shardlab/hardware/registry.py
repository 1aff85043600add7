"""One lookup for every registry of named hardware: chips, TPU slices, GPU models and clusters.

A helper that takes a chip or a target accepts the object itself or its name; :func:`lookup` turns either
into the object, or raises one clear error naming the argument and every name it could have been.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["lookup"]


def lookup(value, argument: str, kinds: tuple, *registries: tuple[str, Mapping]):
    """``value`` itself if it is an instance of one of ``kinds``; else the entry ``value`` names in the
    first of ``registries`` that holds it.

    ``registries``: ``(label, {name: entry})`` pairs; the label (e.g. ``"TPU"``) only words the error.
    Raises ``ValueError`` naming ``argument``, the kinds and every registered name.
    """
    if kinds and isinstance(value, kinds):
        return value
    if isinstance(value, str):
        for _, registry in registries:
            if value in registry:
                return registry[value]
    kinds_text = ", ".join(f"a {k.__name__}" for k in kinds) + ("," if len(kinds) > 1 else "")
    names = " or ".join(f"{list(registry)}" + (f" ({label})" if label else "") for label, registry in registries)
    raise ValueError(f"{argument} must be {kinds_text} or one of {names}, got {value!r}")
