"""A brute-force oracle of ``link``, written apart from the operator: every rule on every pair.

It shares no code with ``driftjoin.linkage``: edit distances from rapidfuzz, Jaccard and absolute
differences with ``fractions.Fraction`` (exact; a float Jaccard threshold stands for the simplest
fraction that rounds to it, ``0.3`` is 3/10, found by search: :func:`meant`), tokens with its own
loops, windows from their definitions. A record is a dict with ``id``, ``side`` (0 or 1), ``t`` (ticks) and its columns
(None for null). A condition is ``(column, kind, metric, threshold, tokens)`` with thresholds in
the column's unit (dates: days, timestamps: microseconds); ``metric`` is a name or a user metric
(a callable, evaluated on the pair). Vector distances are float computations by definition: the
oracle evaluates :meth:`driftjoin.distance.Metric.pairwise` (the definition, not link's code) and
compares the float with the threshold.
"""

from __future__ import annotations

import math
from fractions import Fraction
from itertools import combinations

import numpy as np
from rapidfuzz.distance import Levenshtein

from driftjoin.distance import METRICS, get_metric


def oracle_words(text: str) -> list[str]:
    out, cur = [], []
    for ch in text.casefold():
        if ch.isalnum():
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def oracle_qgrams(text: str, q: int) -> list[str]:
    t = text.casefold()
    if not t:
        return []
    if len(t) <= q:
        return [t]
    return [t[i : i + q] for i in range(len(t) - q + 1)]


def _null(kind: str, v) -> bool:
    if v is None:
        return True
    if kind == "number":
        return not math.isfinite(v)
    return False


def _tokens(v, tokens):
    if tokens is None:
        return set(v)
    if tokens == "words":
        return set(oracle_words(v))
    return set(oracle_qgrams(v, int(tokens.split(":")[1])))


def distance(cond, a, b):
    """The exact distance (a Fraction or int), or None if the condition cannot hold (nulls)."""
    column, kind, metric, threshold, tokens = cond
    x, y = a.get(column), b.get(column)
    if _null(kind, x) or _null(kind, y):
        return None
    if callable(metric):
        return float(metric(x, y))
    if metric == "equal":
        return 0 if x == y else 1
    if metric in METRICS:
        return float(get_metric(metric).pairwise(np.array([x], float), np.array([y], float))[0, 0])
    if metric == "levenshtein":
        return Levenshtein.distance(x, y)
    if metric == "jaccard":
        sa, sb = _tokens(x, tokens), _tokens(y, tokens)
        if not sa or not sb:
            return None
        return 1 - Fraction(len(sa & sb), len(sa | sb))
    if metric == "within":
        return abs(Fraction(x) - Fraction(y))
    raise ValueError(metric)


def meant(t) -> Fraction:
    """The number a float Jaccard threshold stands for: the fraction of smallest denominator
    (searched up to 1000, far above the tests' unions) that rounds to it; else the float itself."""
    if isinstance(t, float):
        for q in range(1, 1001):
            for p in (math.floor(t * q), math.ceil(t * q)):
                if float(Fraction(p, q)) == t:
                    return Fraction(p, q)
    return Fraction(t)


def holds(cond, d) -> bool:
    if d is None:
        return False
    _, _, metric, threshold, _ = cond
    if metric == "equal":
        return d == 0
    if isinstance(d, float):
        return d <= threshold  # a float distance: its definition is the float comparison
    return d <= (meant(threshold) if metric == "jaccard" else Fraction(threshold))


def windows_of(kind: str, t: int, length: int = 0, slide: int = 0):
    if kind == "unbounded":
        return [0]
    if kind == "tumbling":
        return [t // length]
    first = (t - length) // slide + 1
    return list(range(first, t // slide + 1))


def oracle_link(records: list[dict], rules: list[list[tuple]], *, self_join: bool, window: tuple):
    """``{(left_id, right_id, window): (rule, rules, {measure: distance})}`` of every matching pair.

    ``window``: ``("unbounded",)``, ``("tumbling", W)``, ``("sliding", W, S)`` or ``("interval", D)``
    (window key None for an interval join: buckets are an implementation detail).
    """
    measures = []
    for rule in rules:
        for c in rule:
            key = (c[0], c[2], c[4])
            if key not in measures:
                measures.append(key)
    out = {}
    if self_join:
        pairs = [(a, b) for a, b in combinations(records, 2) if a["id"] != b["id"]]
    else:
        pairs = [(a, b) for a in records for b in records if a["side"] == 0 and b["side"] == 1]
    for a, b in pairs:
        sat = [r for r, rule in enumerate(rules) if all(holds(c, distance(c, a, b)) for c in rule)]
        if not sat:
            continue
        if window[0] == "interval":
            shared = [None] if abs(a["t"] - b["t"]) <= window[1] else []
        else:
            kind = window[0]
            wa = set(windows_of(kind, a["t"], *window[1:]))
            shared = sorted(wa & set(windows_of(kind, b["t"], *window[1:])))
        left, right = (a["id"], b["id"]) if (self_join and a["id"] < b["id"]) or (not self_join) else (b["id"], a["id"])
        dist = {}
        for m in measures:
            cond = next(c for rule in rules for c in rule if (c[0], c[2], c[4]) == m)
            d = distance(cond, a, b)
            dist[m] = None if d is None else d
        for w in shared:
            key = (left, right, w)
            assert key not in out, f"duplicate test records: {key}"
            out[key] = (sat[0], sat, dist)
    return out
