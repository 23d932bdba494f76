"""Brute-force oracle of the metric joins, written from the definitions only: every pair of records
(left x right, or each unordered pair of a self-join, never a record with itself) whose distance is
at most the threshold, once per window that holds both (an interval join: once, if the times differ
by at most ``within``). Distances by plain Python (a dynamic-programming edit distance, Python sets).

Exact where the distance is exact: an edit distance is an integer, a Jaccard distance a
``fractions.Fraction`` of the set sizes, and the threshold they meet is the number the user wrote
(:func:`meant`: a float stands for the simplest fraction that rounds to it, ``0.3`` is ``3/10``,
``1/3`` is ``1/3``). Float-valued distances (user metrics, vectors) are compared as floats, as
documented."""

from __future__ import annotations

import math
from collections import Counter
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from typing import Any, Callable

import numpy as np

from driftjoin.metric.records import MetricPairs, MetricRecords
from driftjoin.metric.engine import MetricEngine


def levenshtein(a: str, b: str) -> int:
    prev = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        cur = [i]
        for j, cb in enumerate(b, 1):
            cur.append(min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (ca != cb)))
        prev = cur
    return prev[-1]


def jaccard(a, b) -> Fraction:
    """``|A ^ B| / |A | B|``: exactly the Jaccard distance ``1 - |A & B| / |A | B|``."""
    sa, sb = set(a), set(b)
    return Fraction(len(sa ^ sb), len(sa | sb))


#: Denominators searched for the fraction a float threshold stands for: far above the unions of the
#: tests' sets (a few tokens), so a distance of theirs that rounds to the threshold is found.
SEARCH = 1000


@lru_cache(maxsize=None)
def meant(t: Any) -> Any:
    """The number a threshold stands for: for a float, the fraction of smallest denominator that
    rounds to it (``0.3`` is 3/10, ``1/3`` is 1/3), searched up to :data:`SEARCH`; when none rounds
    to it there, none of the tests' distances does either, and the float's own value compares
    alike with all of them. An int, a Fraction, a Decimal is itself."""
    if isinstance(t, float):
        for q in range(1, SEARCH + 1):
            for p in (math.floor(t * q), math.ceil(t * q)):
                if float(Fraction(p, q)) == t:
                    return Fraction(p, q)
        return Fraction(t)
    if isinstance(t, Decimal):
        return Fraction(t)
    return t


def oracle(records: list[tuple], dist: Callable[[Any, Any], Any], t: Any, self_join: bool,
           window: tuple | None = None) -> Counter:
    """``records``: ``(id, side, value, time)``. ``window``: None (one window), ``("tumbling", W, o)``,
    ``("sliding", W, S, o)`` or ``("interval", D)``. Keys: ``(left, right, window start)`` or
    ``(left, right)`` for an interval or unbounded join. An exact distance (int, Fraction) meets the
    threshold the user meant (:func:`meant`), a float distance the float threshold."""
    out: Counter = Counter()
    for x in range(len(records)):
        for y in range(x + 1 if self_join else 0, len(records)):
            (i1, s1, v1, t1), (i2, s2, v2, t2) = records[x], records[y]
            if self_join and i1 == i2:
                continue
            if not self_join and not (s1 == 0 and s2 == 1):
                continue
            d = dist(v1, v2)
            if d > (meant(t) if isinstance(d, (int, Fraction)) else t):
                continue
            left, right = (min(i1, i2), max(i1, i2)) if self_join else (i1, i2)
            for key in _windows(window, t1, t2):
                out[(left, right) + key] += 1
    return out


def _windows(window: tuple | None, t1: int, t2: int) -> list[tuple]:
    if window is None:
        return [()]
    if window[0] == "interval":
        return [()] if abs(t1 - t2) <= window[1] else []
    if window[0] == "tumbling":
        length, slide, offset = window[1], window[1], window[2]
    else:
        length, slide, offset = window[1], window[2], window[3]
    keys = []
    k = (min(t1, t2) - offset) // slide - length // slide - 2
    while offset + k * slide <= max(t1, t2):
        s = offset + k * slide
        if s <= t1 < s + length and s <= t2 < s + length:
            keys.append((s,))
        k += 1
    return keys


def run(strategy, ids, values, times, side, cuts, lateness: int = 10**12) -> tuple[Counter, list]:
    """Feed the records to ``strategy`` in batches cut at ``cuts``; the emitted pairs as oracle keys."""
    eng = MetricEngine(strategy, lateness=lateness)
    ids = np.asarray(ids)
    got: Counter = Counter()
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ids))), len(ids)]
    w = strategy.windows
    for a, b in zip(bounds, bounds[1:]):
        sl = np.arange(a, b)
        batch = MetricRecords.of(ids[sl], strategy_values(values, sl), np.asarray(times)[sl], np.asarray(side)[sl])
        pairs: MetricPairs = eng.process(batch)
        for left, right, win in pairs.tuples():
            key = (left, right) if w.kind in ("interval", "unbounded") else (left, right, int(w.start([win])[0]))
            got[key] += 1
    return got, eng.late


def strategy_values(values, rows):
    from driftjoin.metric.records import take_values

    return take_values(values, rows)


def window_spec(w) -> tuple | None:
    """The oracle's window tuple of a :class:`driftjoin.windows.Windowing`."""
    if w.kind == "unbounded":
        return None
    if w.kind == "interval":
        return ("interval", w.within)
    if w.kind == "tumbling":
        return ("tumbling", w.length, w.offset)
    return ("sliding", w.length, w.slide, w.offset)
