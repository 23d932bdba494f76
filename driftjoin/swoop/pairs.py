"""Pairs, their total order (the tie-break) and the top-k change stream.

A pair ``p = (r_i, r_j)`` joins a later set ``r_i`` with an earlier set ``r_j`` (``i > j``;
``i``, ``j`` are arrival sequence numbers, see below). It is valid during ``[t_i, e_p)`` with
the end time ``e_p = t_j + w`` (section 2).

Tie-break. Stock order (section 6: "decreasing similarity, and lexicographically by descending
end time, ascending i and j") is a *total* order on pairs, used identically by SWOOP and Base:

1. similarity, descending;
2. end time ``e_p``, descending (the pair that stays valid longer ranks first);
3. ``i``, ascending, then 4. ``j``, ascending,

where ``i``/``j`` are the 0-based arrival numbers of the accepted sets (rejected inserts consume
no number), so the order never compares user set ids (which may be of mixed types). The top-k
at index time ``t_J`` is the first ``k`` valid pairs of positive similarity in this order.

Internally a pair is the tuple ``PairKey = (-sim, -e_p, i, j)`` whose ascending tuple order is
the stock order; the end time index (section 6.1: ascending end time, ascending similarity,
descending ``i``, ``j``) uses ``EndKey = (e_p, sim, -i, -j)``. :func:`end_key` converts either
way (it is its own inverse).

Change stream. Every operation reports how the top-k changed as :class:`TopKChange` events,
grouped into steps: one step per distinct expiry time ``g`` passed by the index time (the pairs
ending at ``g`` leave at time ``g``; replacements enter at time ``g``), then one step at the
insert time for the new pairs. Within a step, all ``"leave"`` events come first, then all
``"enter"`` events, each in stock order. A step reports the net difference of the top-k before
and after it, so replaying the events on a set reproduces ``topk()`` after every operation.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Literal, NamedTuple

PairKey = tuple[float, float, int, int]
"""``(-sim, -e_p, i, j)``: ascending order is the stock order (best pair first)."""

EndKey = tuple[float, float, int, int]
"""``(e_p, sim, -i, -j)``: ascending order is the end time index order."""


def end_key(key: PairKey) -> EndKey:
    """Convert a stock key to an end time index key, or back (the map is an involution)."""
    return (-key[1], -key[0], -key[2], -key[3])


def topk_delta(
    before: PairKey | None,
    after: PairKey | None,
    added: Iterable[PairKey],
    removed: Iterable[PairKey],
    between: Callable[[PairKey, PairKey | None], Iterable[PairKey]],
) -> tuple[list[PairKey], list[PairKey]]:
    """The pairs that left and entered the top-k in one step, each sorted in stock order.

    ``before`` / ``after`` are the k-th pair of the ranked collection before and after the
    step (``None``: fewer than ``k`` pairs), ``added`` / ``removed`` the pairs the step put in
    and took out, and ``between(lo, hi)`` lists the collection's pairs ``lo < p <= hi`` after
    the step (``hi=None``: no upper limit). Besides the removed pairs that were in the top-k and
    the added pairs that are, the boundary's move promotes or demotes the pairs it passes.
    """
    left = [p for p in removed if before is None or p <= before]
    entered = [p for p in added if after is None or p <= after]
    if before != after:
        fresh = set(added)
        if before is not None and (after is None or before < after):  # promotions
            entered += [p for p in between(before, after) if p not in fresh]
        elif after is not None:  # demotions
            left += [p for p in between(after, before) if p not in fresh]
    left.sort()
    entered.sort()
    return left, entered


class SimilarPair(NamedTuple):
    """A pair of the join result.

    ``first``/``second`` are the user set ids: the later and the earlier set of a self-join
    (the paper's ``(r_i, r_j)``, ``i > j``), or the ``"R"`` set and the ``"S"`` set of a
    two-stream join. ``end`` is ``e_p``, the time at which the pair leaves the window.
    """

    sim: float
    first: Hashable
    second: Hashable
    end: float


class TopKChange(NamedTuple):
    """One event of the change stream: ``pair`` entered or left the top-k at ``time``."""

    time: float
    kind: Literal["enter", "leave"]
    pair: SimilarPair
