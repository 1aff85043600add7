"""Logical axis names mapped to mesh axes by one table of rules, as MaxText's ``logical_axis_rules`` do.

One difference in semantics: Flax's ``logical_to_mesh_axes`` (which MaxText uses) goes through the
rules in order, so an earlier *rule* wins a contested mesh axis, and it replicates a name no rule
mentions; :func:`logical_spec` goes through the array's dimensions in order, so an earlier *dimension*
wins, and an unknown name is an error. ``logical_spec(("embed", "batch"))`` is ``P("fsdp", None)`` here,
``P(None, ("data", "fsdp"))`` under Flax's rules.

A model names the dimensions of its arrays by what they are (``batch``, ``embed``, ``heads``, ``mlp``,
``vocab``, ``seq``); a table of rules says which mesh axes each name is split over. The layout then
lives in one place: change the table (or the mesh's sizes) and every array follows, with no change to
the model. :func:`logical_spec` turns a tuple of names into a ``PartitionSpec``.
"""

from __future__ import annotations

#: The book's rules: each logical name and the mesh axes it is split over, tried in order.
RULES = (
    ("batch", ("data", "fsdp")),   # examples: data parallelism and FSDP both split the batch
    ("embed", "fsdp"),             # the model's width: FSDP's split of the weights
    ("heads", "model"),            # attention heads: tensor parallelism (Megatron)
    ("mlp", "model"),              # the MLP's hidden units: tensor parallelism
    ("vocab", "model"),            # the output projection's vocabulary
    ("seq", "model"),              # the residual stream's sequence (the residual hook)
)


def _axes(value):
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _check_rules(rules):
    if isinstance(rules, (str, bytes)) or not hasattr(rules, "__iter__"):
        raise ValueError(f"rules must be a sequence of (logical name, mesh axes) pairs, got {rules!r}")
    checked = []
    for rule in rules:
        if not (isinstance(rule, tuple) and len(rule) == 2 and isinstance(rule[0], str)):
            raise ValueError(f"rules: each rule must be a pair (logical name, mesh axes), got {rule!r}")
        axes = _axes(rule[1])
        if not all(isinstance(a, str) for a in axes):
            raise ValueError(f"rules: the mesh axes of {rule[0]!r} must be a name, a tuple of names or None, "
                             f"got {rule[1]!r}")
        checked.append((rule[0], axes))
    return checked


def logical_spec(names, rules=RULES):
    """The ``PartitionSpec`` of an array whose dimensions are named ``names`` (``None``: never split).

    For each name, the first rule naming it whose mesh axes are all still unused in this spec gives its
    axes (one mesh axis can split only one dimension of an array); a name whose rules are all used up
    stays whole. A name no rule mentions is an error (a typo would otherwise replicate silently).
    ``logical_spec(("batch", "seq", "embed"))`` is ``P(("data", "fsdp"), "model", None)``: ``embed``
    would take ``fsdp``, which the batch already uses.
    """
    from jax.sharding import PartitionSpec as P

    checked = _check_rules(rules)
    if isinstance(names, (str, bytes)) or not hasattr(names, "__iter__"):
        raise ValueError(f"names must be a tuple of logical axis names (or None), got {names!r}")
    known = {name for name, _ in checked}
    used, entries = set(), []
    for name in names:
        if name is None:
            entries.append(None)
            continue
        if name not in known:
            raise ValueError(f"logical axis {name!r} has no rule; the rules name {sorted(known)}")
        axes = next((a for n, a in checked if n == name and not used & set(a)), ())
        used |= set(axes)
        entries.append(None if not axes else axes[0] if len(axes) == 1 else axes)
    return P(*entries)
