"""Brute-force references shared by the SWOOP tests."""

from __future__ import annotations

import heapq
from bisect import bisect_left, insort
from collections.abc import Iterable

from driftjoin.swoop.pairs import PairKey


def dominators(keys: Iterable[PairKey]) -> dict[PairKey, int]:
    """For each pair, how many pairs dominate it (precede it in stock order, end no earlier)."""
    out: dict[PairKey, int] = {}
    ends: list[float] = []
    for key in sorted(keys):
        end = -key[1]
        out[key] = len(ends) - bisect_left(ends, end)
        insort(ends, end)
    return out


def skyband(keys: Iterable[PairKey], k: int) -> list[PairKey]:
    """The relevant pairs (fewer than k dominators), in stock order: the minimal stock.

    A pair has k dominators or more exactly when k pairs before it end no earlier, i.e. when the
    k-th latest end before it is not earlier than its own: walking the pairs in stock order,
    the k latest ends seen so far (a min-heap) decide, without counting every dominator as
    :func:`dominators` does (the stocks of long streams hold tens of thousands of pairs)."""
    out: list[PairKey] = []
    latest: list[float] = []  # the k latest ends of the pairs before, earliest first
    for key in sorted(keys):
        end = -key[1]
        if len(latest) < k or latest[0] < end:
            out.append(key)
        if len(latest) < k:
            heapq.heappush(latest, end)
        elif latest[0] < end:
            heapq.heapreplace(latest, end)
    return out


def kth_at(keys: Iterable[PairKey], k: int, t: float) -> float:
    """Similarity of the k-th best pair among those ending at ``t`` or later, 0.0 if none."""
    alive = sorted(key for key in keys if -key[1] >= t)
    return -alive[k - 1][0] if len(alive) >= k else 0.0
