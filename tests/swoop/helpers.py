"""Brute-force references shared by the SWOOP tests."""

from __future__ import annotations

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
    """The relevant pairs (fewer than k dominators), in stock order: the minimal stock."""
    return sorted(key for key, d in dominators(keys).items() if d < k)


def kth_at(keys: Iterable[PairKey], k: int, t: float) -> float:
    """Similarity of the k-th best pair among those ending at ``t`` or later, 0.0 if none."""
    alive = sorted(key for key in keys if -key[1] >= t)
    return -alive[k - 1][0] if len(alive) >= k else 0.0
