"""The reference result of an equi-join of two streams: a plain hash join over all tuples."""

from __future__ import annotations

from collections.abc import Iterable

from driftjoin.hypercube.model import Key, Pair, StreamTuple


def oracle_pairs(stream: Iterable[StreamTuple], window: float | None = None) -> set[Pair]:
    """Every ``(r.tid, s.tid)`` with ``r.key == s.key`` (and ``|r.ts - s.ts| <= window`` if given)."""
    by_key: dict[Key, tuple[list[StreamTuple], list[StreamTuple]]] = {}
    for t in stream:
        by_key.setdefault(t.key, ([], []))[t.side].append(t)
    out: set[Pair] = set()
    for rs, ss in by_key.values():
        for r in rs:
            for s in ss:
                if window is None or abs(r.ts - s.ts) <= window:
                    out.add((r.tid, s.tid))
    return out
