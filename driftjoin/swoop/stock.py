"""The minimal stock ``S`` and its end time index ``E`` (SWOOP section 6).

Definitions (with the total pair order of :mod:`driftjoin.swoop.pairs`). A pair ``p'``
*dominates* ``p`` if ``p'`` precedes ``p`` in stock order and ``e_p' >= e_p``: it is better
than ``p`` during all of ``p``'s remaining life. ``p`` is *irrelevant* when at least ``k``
pairs dominate it: it is not in the top-k now and never will be (pairs inserted later cannot
improve its rank). The stock is *minimal* when it holds exactly the relevant valid pairs, which
is the invariant of this class; its expected size is ``O(k log(|W| / k))`` and at most
``O(k |W|)`` (Lemma 2).

``S`` holds the pairs in stock order and ``E`` the same pairs in end time index order
(ascending end time, then ascending similarity, then descending ids; among pairs with the same
end time, pairs that rank lower in ``S`` come first in ``E``). Both are sorted Python lists of
tuple keys instead of the paper's binary trees: a *rank* is a C-level ``bisect``
(``O(log |S|)``) and ``S[i]`` is ``O(1)``, 2 to 10 times faster than
``sortedcontainers.SortedList``'s for 10^2 to 10^5 pairs, and these lookups dominate (``lb``,
cropping, the aligned scans of Algorithms 5 and 6). An insertion or deletion moves ``O(|S|)``
pointers with one ``memmove``: on par with ``SortedList`` up to ~10^4 pairs (a minimal stock
measured ~6.5 * 10^3 pairs at k = 1000) and slower beyond, which only the ``O(k |W|)`` worst
case of Lemma 2 reaches.

Operations:

* :meth:`lb` -- skyband lower bound ``lb(t, k)`` in ``O(log |S|)`` by Lemma 6.1: the k-th pair
  at time ``t`` is ``S[k + v - 1]`` where ``v`` is the rank in ``E`` of the first pair ending at
  ``t`` or later. :meth:`lb_floor` bounds it from below for many times at once from the
  steps of the staircase (:meth:`lb_steps`), recomputed only after several changes.
* :meth:`crop_end` -- the stopping condition ``lb(t, k) > ub`` of Algorithm 4 solved for ``t``
  once per inverted list (``lb`` is non-increasing in ``t``, Lemma 1).
* :meth:`set_index_time` -- removes the pairs ending at or before the new index time by
  scanning the head of ``E`` only (section 6.1).
* :meth:`insert` -- Algorithm 6 (merge insert), interleaved with the optimised cleanup of
  Algorithm 5 (:meth:`_cleanup`).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator, Sequence

import numpy as np

from driftjoin.swoop.pairs import EndKey, PairKey, end_key

_INF = float("inf")
_SCAN_CHUNK = 64  # pairs compared per slice in the cleanup scan


class Stock:
    """Minimal stock ``S`` with end time index ``E`` for a top-``k`` join."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._S: list[PairKey] = []
        self._E: list[EndKey] = []
        self._version = 0  # bumped by every change, invalidates the cached lb steps
        self._steps: tuple[int, np.ndarray, np.ndarray] | None = None

    def __len__(self) -> int:
        return len(self._S)

    def __iter__(self) -> Iterator[PairKey]:
        """The pairs in stock order."""
        return iter(self._S)

    def end_index(self) -> list[EndKey]:
        """A copy of ``E`` (for inspection)."""
        return list(self._E)

    def topk(self) -> list[PairKey]:
        """``topk()``: the first ``k`` pairs of ``S``."""
        return self._S[: self.k]

    def kth(self) -> PairKey | None:
        """The k-th pair of ``S`` (the top-k boundary), ``None`` if ``|S| < k``."""
        return self._S[self.k - 1] if len(self._S) >= self.k else None

    def between(self, lo: PairKey, hi: PairKey | None) -> list[PairKey]:
        """Pairs ``p`` with ``lo < p <= hi`` in stock order (``hi=None``: no upper limit)."""
        S = self._S
        start = bisect_right(S, lo)
        return S[start : bisect_right(S, hi)] if hi is not None else S[start:]

    def first_end(self) -> float | None:
        """End time of ``E[0]``, the next pair to expire (``None`` for an empty stock)."""
        return self._E[0][0] if self._E else None

    def pair_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Similarities and end times of the stock's pairs (a partitioned join shares them)."""
        S = self._S
        return (
            np.fromiter((-key[0] for key in S), np.float64, len(S)),
            np.fromiter((-key[1] for key in S), np.float64, len(S)),
        )

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs in stock order as ``float64[2, n]`` (similarity, end) and ``int64[2, n]``
        (``i``, ``j``), as :meth:`~driftjoin.swoop.fast.FastStock.export`."""
        S = self._S
        sf = np.array([[-key[0] for key in S], [-key[1] for key in S]], np.float64).reshape(2, len(S))
        si = np.array([[key[2] for key in S], [key[3] for key in S]], np.int64).reshape(2, len(S))
        return sf, si

    def load(self, sf: np.ndarray, si: np.ndarray) -> None:
        """Replace the content by :meth:`export`'s arrays (pairs in stock order)."""
        self._S = list(zip((-sf[0]).tolist(), (-sf[1]).tolist(), si[0].tolist(), si[1].tolist()))
        self._E = sorted(map(end_key, self._S))
        self._version += 1
        self._steps = None

    def lb(self, t: float) -> float:
        """Skyband lower bound ``lb(t, k)``: similarity of the k-th pair valid at time ``t``.

        ``0.0`` when fewer than ``k`` stock pairs end at ``t`` or later (Lemma 6.1).
        """
        x = self.k - 1 + bisect_left(self._E, (t,))
        return -self._S[x][0] if x < len(self._S) else 0.0

    def lb_floor(self, t: np.ndarray) -> np.ndarray:
        """A lower bound of :meth:`lb` for every time in ``t``, from cached :meth:`lb_steps`.

        For a fixed future time ``t``, ``lb(t, k)`` never decreases while the index time
        advances: insertions only add pairs, expiries only remove pairs ending before ``t``, and
        cleanup only removes pairs that are never the k-th. So steps computed a few changes ago
        still bound ``lb`` from below, which is all that pruning needs (the exact relevance
        test is :meth:`insert`'s). They are recomputed after ``|S| - k`` changes, so their
        ``O(D log |S|)`` cost is amortised; the result is exact when they are fresh.
        """
        cached = self._steps
        if cached is None or self._version - cached[0] > len(self._S) - self.k:
            ends, sims = self.lb_steps()
            cached = self._steps = (
                self._version,
                np.array(ends, np.float64),
                np.array([*sims, 0.0], np.float64),
            )
        return cached[2][np.searchsorted(cached[1], t, side="left")]

    def lb_steps(self) -> tuple[list[float], list[float]]:
        """Steps of the staircase lb(t, k), Figure 6: ``lb(t) >= sims[m]`` iff ``t <= ends[m]``.

        ``sims`` are the distinct similarities of ``S[k-1:]`` (descending) and ``ends`` is
        ascending; ``lb(t) = sims[m]`` for the first ``m`` with ``t <= ends[m]`` and ``0`` after
        the last step. By Lemma 6.1, ``lb(t) >= v`` iff ``t <= E[x - k].end`` where ``x`` is the
        number of pairs with similarity ``>= v``; walking the distinct values by bisection costs
        ``O(D log |S|)`` for ``D`` distinct values, which is small for set similarities.
        """
        S, E, k = self._S, self._E, self.k
        ends: list[float] = []
        sims: list[float] = []
        x = k - 1
        while x < len(S):
            neg = S[x][0]
            x = bisect_left(S, (neg, _INF), x)  # pairs with similarity >= -neg
            ends.append(E[x - k][0])
            sims.append(-neg)
        return ends, sims

    def crop_end(self, ub: float) -> float:
        """End time ``T`` with ``lb(t, k) <= ub`` exactly for ``t > T`` (``-inf``: for all ``t``).

        A list entry forming a pair with end time ``t <= T`` has ``lb(t, k) > ub``, the stopping
        condition of Algorithm 4, line 7.
        """
        u = bisect_left(self._S, (-ub,)) - self.k + 1  # first u with sim(S[k-1+u]) <= ub
        return self._E[u - 1][0] if u > 0 else -_INF

    def set_index_time(self, t: float) -> list[PairKey]:
        """Remove and return (in ``E`` order) the pairs with end time ``<= t``."""
        E, S = self._E, self._S
        m = bisect_right(E, (t, _INF))
        if not m:
            return []
        removed = [end_key(ek) for ek in E[:m]]
        del E[:m]
        self._version += 1
        for key in removed:
            del S[bisect_left(S, key)]
        return removed

    def insert(self, candidates: Sequence[PairKey]) -> tuple[list[PairKey], list[PairKey]]:
        """Algorithm 6: add the relevant ``candidates`` and drop the pairs they make irrelevant.

        ``candidates`` must be sorted in stock order, all valid at the index time, and new.
        Returns ``(added, removed)``. The stock is minimal before and after.

        The merge walks the skyband boundary: ``E[e]`` is aligned with ``S[s]``, ``s = e+k-1``
        (Lemma 6.1), and ``t_bound`` is the end time of ``E[e-1]``. A candidate that precedes
        ``S[s]`` would take position ``s``; it is relevant iff it ends after ``t_bound``. After
        an insertion, :meth:`_cleanup` (Algorithm 5) continues the aligned scan and removes the
        pairs that became irrelevant (Lemma 3). Departing from the paper, once the scan is past
        every pair that can be irrelevant (``E[e]`` ends after all candidates added since the
        stock was last minimal, Lemma 6.4) the merge re-positions at the next candidate by
        bisection instead of walking ``S`` up to it.
        """
        S, E, k = self._S, self._E, self.k
        added: list[PairKey] = []
        removed: list[PairKey] = []
        n = len(candidates)
        i = 0
        # lines 2-4: while |S| < k every pair is in the top-k, hence relevant
        while i < n and len(S) < k:
            self._add(candidates[i])
            added.append(candidates[i])
            i += 1
        while i < n:
            # lines 5-7 (stock minimal here): align (E[e], S[s]) at the next candidate
            s = bisect_left(S, candidates[i])
            if s >= len(S):
                break
            if s < k:
                s, e, t_bound = k - 1, 0, -_INF
            else:
                e = s - k + 1
                t_bound = E[e - 1][0]
            maxe = -_INF  # latest end time of the candidates added since the stock was minimal
            while True:
                # lines 9-11: insert the relevant candidates that precede S[s]
                sk = S[s]
                while i < n and candidates[i] < sk:
                    c = candidates[i]
                    i += 1
                    if -c[1] > t_bound:
                        self._add(c)
                        added.append(c)
                        if -c[1] > maxe:
                            maxe = -c[1]
                        sk = S[s]
                # lines 12-15: Algorithm 5 until the next candidate's turn or a clean stock
                s, e, t_bound = self._cleanup(
                    s, e, t_bound, maxe, candidates[i] if i < n else None, removed
                )
                if s >= len(S) or E[e][0] > maxe:
                    break
            if s >= len(S):
                break
        # lines 16-19: candidates behind the last pair of S (the stock is minimal again)
        while i < n:
            c = candidates[i]
            i += 1
            if -c[1] > E[len(S) - k][0]:
                self._add(c)
                added.append(c)
        return added, removed

    def _cleanup(
        self,
        s: int,
        e: int,
        t_bound: float,
        maxe: float,
        stop: PairKey | None,
        removed: list[PairKey],
    ) -> tuple[int, int, float]:
        """Algorithm 5 (optimised cleanup) from the aligned position ``(E[e], S[s])``.

        By Lemma 3 the first irrelevant pair ``E[e]`` of ``E`` sorts after ``S[e+k-1]``; it is
        removed, otherwise both positions advance. By Lemma 6.4 only pairs ending by ``maxe``
        can be irrelevant, so the scan stops at the first ``E[e]`` ending later; it also stops
        when the next candidate ``stop`` precedes ``S[s]`` (its turn in Algorithm 6) or at the
        end of ``S``. Returns the new ``(s, e, t_bound)``.
        """
        S, E = self._S, self._E
        e_stop = bisect_right(E, (maxe, _INF), e)  # E[e_stop:] ends after maxe
        s_stop = len(S) if stop is None else bisect_left(S, stop, s)  # stop's turn at S[s_stop]
        while True:
            n = min(e_stop - e, s_stop - s, _SCAN_CHUNK)
            if n <= 0:
                return s, e, t_bound
            step = 0
            for ek, sk in zip(E[e : e + n], S[s : s + n]):
                # does E[e] rank behind S[s] = S[e+k-1] in stock order? (similarities first)
                if ek[1] < -sk[0] or ek[1] == -sk[0] and end_key(ek) > sk:
                    break
                step += 1
            if step:
                s += step
                e += step
                t_bound = E[e - 1][0]
            if step < n:  # E[e] is irrelevant: at least k pairs dominate it
                pk = end_key(E[e])
                del E[e]
                x = bisect_left(S, pk)
                del S[x]
                removed.append(pk)
                self._version += 1
                e_stop -= 1
                if x < s_stop:
                    s_stop -= 1

    def _add(self, key: PairKey) -> None:
        self._version += 1
        S, E = self._S, self._E
        S.insert(bisect_left(S, key), key)
        ek = end_key(key)
        E.insert(bisect_left(E, ek), ek)
