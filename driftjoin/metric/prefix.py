"""Prefix filtering for Jaccard distance, distributed and streaming (AllPairs: Bayardo, Ma, Srikant,
WWW 2007; PPJoin's position filter: Xiao, Wang, Lin, Yu, WWW 2008).

The join predicate is ``(u - o) / u <= t`` for sets of sizes ``n``, ``m`` with overlap ``o`` and
union ``u = n + m - o`` (the distance of :class:`~driftjoin.metric.spaces.JaccardSpace`, ``t`` in
[0, 1) the exact number the user wrote: ``0.3`` is ``3/10``). :class:`JaccardBounds` turns it into
integer overlap bounds (:mod:`driftjoin.metric.exact`), so every filter is the exact predicate's:

- ``alpha(n + m)``: the least overlap that joins sets of sizes ``n``, ``m`` (it depends on the sum),
  and the predicate itself is ``o >= alpha(n + m)``;
- ``o_min(n)``: the least overlap any partner needs with a set of size ``n`` (partner ``m = o``:
  ``(n - o) / n <= t``; a larger partner needs more).

**Prefix filter.** With every set's codes sorted by the global token order
(:mod:`driftjoin.metric.tokens`: rare first), a set of size ``n`` has the *prefix* of its first
``n - o_min(n) + 1`` codes. If two sets share ``o >= o_min`` codes, the smallest shared code is
in both prefixes (each set has at most ``n - o_min`` unshared codes, so the smallest shared one
is among its first ``n - o_min + 1``).

**Distribution.** A set is routed to the worker of each distinct code of its prefix (a 61-bit
mix of the code, modulo the workers) with the code's position; a worker stores these entries per
window and pairs entries of the same code (:mod:`driftjoin.metric.store`). A candidate met at
code ``w`` (positions ``i`` in x, ``j`` in y) is emitted iff: the two codes are ``w`` (a group
collision adds candidates, never pairs); x's codes before ``i`` and y's before ``j`` share none,
i.e. ``w`` is the *smallest* common prefix code, so each pair meets at exactly one code, one
worker; the size and position filter ``min(n - i, m - j) >= alpha(n + m)`` (nothing before the
meeting code is shared, so at most that many codes are); the overlap of the code lists reaches
``alpha(n + m)``; and the overlap of the exact token sets reaches it too (the predicate, in
integers; the reported distance is the float nearest to the exact one). Overlaps of codes are
never below overlaps of tokens (:mod:`driftjoin.metric.tokens`), so no filter loses a pair.
Each set meets every other set of its window that shares a prefix code, whichever arrives first.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from driftjoin.metric.base import Routing, RunJoin, Strategy, candidate_filter
from driftjoin.metric.exact import exact_value, jaccard_distance, least_overlap, least_partner_overlap
from driftjoin.metric.records import MetricPairs, MetricRecords
from driftjoin.metric.store import Run
from driftjoin.metric.tokens import TokenSets
from driftjoin.runs import run_positions
from driftjoin.windows import Windowing

_MASK61 = np.uint64((1 << 61) - 1)


class JaccardBounds:
    """Exact overlap bounds of the Jaccard-distance predicate for threshold ``t`` (module docstring),
    as tables over sizes (grown on demand).

    Example::

        >>> b = JaccardBounds(0.5)
        >>> b.alpha(np.array([4, 6])).tolist(), b.prefix_length(np.array([1, 4])).tolist()
        ([2, 2], [1, 3])
        >>> b = JaccardBounds(0.3)  # 3/10: 7 shared of a union of 10 joins, at distance exactly 0.3
        >>> bool(b.accepts(np.array([7]), np.array([10]), np.array([7]))[0])
        True
    """

    def __init__(self, t: Any) -> None:
        self.t = exact_value(t)
        self._alpha = np.zeros(0, np.int64)
        self._prefix = np.zeros(0, np.int64)

    def accepts(self, n: np.ndarray, m: np.ndarray, o: np.ndarray) -> np.ndarray:
        """The predicate ``(u - o) / u <= t`` of sets of sizes ``n``, ``m`` with overlap ``o``."""
        return np.asarray(o) >= self.alpha(np.asarray(n) + np.asarray(m))

    def alpha(self, total: np.ndarray) -> np.ndarray:
        """Least overlap that joins two sets whose sizes add up to ``total``."""
        total = np.asarray(total, np.int64)
        if len(total) and total.max() >= len(self._alpha):
            # no two non-empty sets add up to less than 2; 1 keeps the size filter meaningful there
            self._alpha = np.maximum(1, least_overlap(self.t, np.arange(2 * int(total.max()) + 2)))
        return self._alpha[total]

    def prefix_length(self, size: np.ndarray) -> np.ndarray:
        """``n - o_min(n) + 1``: the prefix of a set of ``n`` codes."""
        size = np.asarray(size, np.int64)
        if len(size) and size.max() >= len(self._prefix):
            n = np.arange(2 * int(size.max()) + 2)
            self._prefix = np.where(n > 0, n - least_partner_overlap(self.t, n) + 1, 0)
        return self._prefix[size]


def prefix_entries(sets: TokenSets, bounds: JaccardBounds) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(record, position, code)`` of the distinct codes in every set's prefix."""
    plen = np.minimum(bounds.prefix_length(sets.sizes), sets.sizes)
    rec = np.repeat(np.arange(len(sets), dtype=np.int64), plen)
    pos = run_positions(plen)
    flat = sets.indptr[rec] + pos
    code = sets.codes[flat]
    first = (pos == 0) | (code != sets.codes[np.maximum(flat - 1, 0)])
    return rec[first], pos[first], code[first]


def code_group(code: np.ndarray) -> np.ndarray:
    """A 61-bit mix of a code (splitmix64 finaliser): the store group and, modulo p, the worker."""
    z = code.astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z & _MASK61).astype(np.int64)


class PrefixStrategy(Strategy):
    """Prefix filtering over ``n_workers`` workers for Jaccard distance ``<= threshold``.

    Values are :class:`~driftjoin.metric.tokens.TokenSets` prepared by a
    :class:`~driftjoin.metric.spaces.JaccardSpace` (whose token order every worker shares).

    Example::

        >>> from driftjoin.metric.spaces import JaccardSpace
        >>> from driftjoin.metric.engine import MetricEngine
        >>> sets = JaccardSpace().prepare([["a", "b", "c"], ["a", "b", "d"], ["a", "b", "c", "d"]])
        >>> s = PrefixStrategy(0.3, 2, self_join=True, windows=Windowing.unbounded())
        >>> sorted(MetricEngine(s).process(MetricRecords.of([1, 2, 3], sets)).tuples())
        [(1, 3, 0), (2, 3, 0)]
    """

    name = "prefix"

    def __init__(self, threshold: Any, n_workers: int, *, self_join: bool, windows: Windowing) -> None:
        self.threshold = threshold
        self.n_workers = int(n_workers)
        self.self_join = self_join
        self.windows = windows
        self.bounds = JaccardBounds(self.threshold)

    def route(self, batch: MetricRecords) -> Routing:
        rec, _, code = prefix_entries(batch.value, self.bounds)
        key = np.unique(rec * self.n_workers + code_group(code) % self.n_workers)
        row = key // self.n_workers
        return Routing(row, key % self.n_workers, np.zeros(len(row), np.int8))

    def worker(self, index: int) -> "PrefixWorker":
        return PrefixWorker(self.threshold, index, self.n_workers, self.self_join, self.windows)


class PrefixWorker(RunJoin):
    """The prefix entries of the codes of one worker, per window (module docstring)."""

    def __init__(self, threshold: Any, index: int, n_workers: int, self_join: bool, windows: Windowing) -> None:
        super().__init__(self_join, windows, [(0, 0)])
        self.index, self.n_workers = index, n_workers
        self.bounds = JaccardBounds(threshold)

    def add(self, batch: MetricRecords, role: np.ndarray) -> MetricPairs:
        rec, pos, code = prefix_entries(batch.value, self.bounds)
        group = code_group(code)
        mine = group % self.n_workers == self.index
        rec, pos, group = rec[mine], pos[mine], group[mine]
        return self.join_runs(batch, batch.window[rec], lambda sel: Run.build(
            batch, group[sel], batch.side[rec[sel]].astype(np.int64) << 1, rec[sel], {"pos": pos[sel]}))

    def verify(self, a: Run, ia: np.ndarray, b: Run, ib: np.ndarray) -> MetricPairs:
        from driftjoin.metric import kernels

        A, B = a.records, b.records
        x, y = A.value, B.value
        ra, rb = a.rec[ia], b.rec[ib]
        table = self.bounds.alpha(np.arange(int(x.sizes.max(initial=0)) + int(y.sizes.max(initial=0)) + 1))
        k = np.nonzero(kernels.prefix_candidates(x.indptr, x.codes, y.indptr, y.codes, ra, rb, a.cols["pos"][ia],
                                                 b.cols["pos"][ib], table))[0]
        k = k[candidate_filter(self, A, ra[k], B, rb[k])]
        self.stats.candidates += len(ia)
        self.stats.comparisons += len(k)
        ra, rb = ra[k], rb[k]
        n, m = x.sizes[ra], y.sizes[rb]
        o = np.fromiter((len(p & q) for p, q in zip(x.tokens[ra], y.tokens[rb])), np.int64, len(k))
        hit = self.bounds.accepts(n, m, o)
        return MetricPairs.oriented(A, ra[hit], B, rb[hit], jaccard_distance(n[hit], m[hit], o[hit]), self.self_join)
