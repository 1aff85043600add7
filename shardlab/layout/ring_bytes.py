"""The ring model: how many bytes one device sends in each kind of collective.

What a collective moves is *modelled*, not measured: each function gives the
bytes one device sends under the bandwidth-optimal algorithm for its kind, for
a group of ``n`` devices. :mod:`shardlab.programs.collectives` applies them to the shapes it
reads from compiled code; a chapter can apply them to shapes of its own.

Per kind: all-gather sends ``(n-1)/n`` of the result, reduce-scatter ``(n-1)/n``
of the operand, all-reduce ``2(n-1)/n`` of the operand (a reduce-scatter, then
an all-gather), collective-permute the whole operand. All-to-all is the
exception: ``bytes_all_to_all`` counts a *direct exchange* (every device linked
to every other), ``(n-1)/n`` of the operand, what leaves the device. On a ring,
pieces are forwarded through the devices between sender and receiver, and
``bytes_all_to_all_ring`` counts that: about ``n/4`` times the operand on a
bidirectional ring (a quarter to a third of an all-gather of the same operand)
and ``(n-1)/2`` times it on a one-way ring (half of that all-gather).

Bytes are not time: :mod:`shardlab.models.time_model` turns them into modelled time.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

__all__ = ["bytes_all_gather", "bytes_reduce_scatter", "bytes_all_reduce", "bytes_all_to_all", "bytes_all_to_all_ring",
           "bytes_permute", "as_number"]


def _check_formula_args(name: str, nbytes, n) -> None:
    if isinstance(nbytes, bool) or not isinstance(nbytes, (int, float, np.integer, np.floating, Fraction)) \
            or not nbytes >= 0:
        raise ValueError(f"{name}: nbytes must be a non-negative number of bytes, got {nbytes!r}")
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 1:
        raise ValueError(f"{name}: n must be a positive integer number of devices in the group, got {n!r}")


def as_number(x: Fraction | float):
    """A count of bytes as an int when it is whole (the usual case), else as a float."""
    if isinstance(x, Fraction):
        return int(x) if x.denominator == 1 else float(x)
    return int(x) if float(x).is_integer() else float(x)


def _fraction(nbytes) -> Fraction:
    return Fraction(nbytes) if not isinstance(nbytes, float) else Fraction(nbytes).limit_denominator(1 << 20)


def bytes_all_gather(result_nbytes, n: int):
    """Bytes one device sends in a ring all-gather over ``n`` devices: ``(n-1)/n * result_nbytes``.

    ``result_nbytes`` is the size of the gathered (whole) result on one device.
    In each of the ring's ``n - 1`` steps a device passes one ``1/n`` piece to
    its neighbour: first its own, then each piece it has just received.
    """
    _check_formula_args("bytes_all_gather", result_nbytes, n)
    return as_number(_fraction(result_nbytes) * (n - 1) / n)


def bytes_reduce_scatter(operand_nbytes, n: int):
    """Bytes one device sends in a ring reduce-scatter over ``n`` devices: ``(n-1)/n * operand_nbytes``.

    ``operand_nbytes`` is the size of the full buffer each device contributes;
    each of the ``n - 1`` steps passes one ``1/n`` piece of partial sums on.
    """
    _check_formula_args("bytes_reduce_scatter", operand_nbytes, n)
    return as_number(_fraction(operand_nbytes) * (n - 1) / n)


def bytes_all_reduce(nbytes, n: int):
    """Bytes one device sends in a ring all-reduce over ``n`` devices: ``2(n-1)/n * nbytes``.

    A ring all-reduce is a reduce-scatter followed by an all-gather of the
    reduced pieces, so it sends twice ``(n-1)/n`` of the buffer.
    """
    _check_formula_args("bytes_all_reduce", nbytes, n)
    return as_number(_fraction(nbytes) * 2 * (n - 1) / n)


def bytes_all_to_all(nbytes, n: int):
    """Bytes one device sends in an all-to-all over ``n`` devices, direct exchange: ``(n-1)/n * nbytes``.

    The buffer is cut into ``n`` pieces; one stays, the other ``n - 1`` go to
    one peer each. This counts what leaves the device when every device has a
    link to every other (a fully connected exchange), not a ring: on a ring the
    pieces are forwarded, see :func:`bytes_all_to_all_ring`.
    """
    _check_formula_args("bytes_all_to_all", nbytes, n)
    return as_number(_fraction(nbytes) * (n - 1) / n)


def bytes_all_to_all_ring(nbytes, n: int, *, bidirectional: bool = True):
    """Bytes one device sends in an all-to-all over a ring of ``n`` devices, forwarding included.

    The piece for the device ``k`` places away travels ``k`` hops on a one-way
    ring, ``min(k, n - k)`` on a bidirectional one, and every hop is a send. Summed
    over the ``n - 1`` pieces of size ``nbytes / n`` (every device does the same,
    so the forwarding one device does for others equals its own pieces' extra hops)::

        one-way:        nbytes/n * sum(k for k in 1..n-1)           = (n-1)/2 * nbytes
        bidirectional:  nbytes/n * sum(min(k, n-k) for k in 1..n-1)  = n/4 * nbytes (n even),
                                                                      (n*n-1)/(4n) * nbytes (n odd)

    An all-gather of the same ``nbytes`` per device sends ``(n-1) * nbytes``, so
    the ring all-to-all costs half of it one-way and ``n/(4(n-1))`` of it
    bidirectionally (a quarter to a third for ``n >= 3``).
    """
    _check_formula_args("bytes_all_to_all_ring", nbytes, n)
    if not isinstance(bidirectional, (bool, np.bool_)):
        raise ValueError(f"bytes_all_to_all_ring: bidirectional must be True or False, got {bidirectional!r}")
    hops = sum(min(k, n - k) if bidirectional else k for k in range(1, n))
    return as_number(_fraction(nbytes) * hops / n)


def bytes_permute(nbytes, sends: bool = True):
    """Bytes one device sends in a collective-permute: the whole buffer if it sends, else 0.

    ``sends`` says whether the device sends to a *different* device (a pair
    ``{i,i}`` keeps the buffer where it is and moves nothing).
    """
    _check_formula_args("bytes_permute", nbytes, 1)
    if not isinstance(sends, (bool, np.bool_)):
        raise ValueError(f"bytes_permute: sends must be True or False, got {sends!r}")
    return as_number(_fraction(nbytes)) if sends else 0
