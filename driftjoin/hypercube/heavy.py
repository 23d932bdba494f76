"""Heavy-hitter tracking for the SHC dispatcher (section 3.2): Misra-Gries summaries.

Why Misra-Gries rather than SpaceSaving. Both keep ``k`` counters and estimate every frequency
within ``n / (k + 1)``; they are equivalent up to a shift of the counters. Misra-Gries is the one
with a simple, deterministic *merge* (Agarwal et al., "Mergeable summaries", 2012): add the
counters, subtract the (k+1)-th largest, keep the positive ones; the error stays within
``(n1 + n2) / (k + 1)``. That merge is what this project needs: a micro-batch arrives as exact
per-key counts (a Spark ``groupBy().count()`` on executors), it is merged into the driver's
summary in one step, and the result does not depend on the order of tuples inside a batch.
Its estimates never exceed the truth, which the classification rule below uses.

Sliding windows. Summaries cannot forget single tuples, so a window of length W keeps one pair of
summaries per pane of width ``W / panes`` and drops a pane once it lies entirely before the
eviction threshold. All counts, including N, are then over the panes still alive (the window
rounded out to pane boundaries), and the guarantees below hold for that stream.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from driftjoin.hypercube.model import Key, Side


class MisraGries:
    """A Misra-Gries summary with ``k`` counters: ``f - n/(k+1) <= estimate(x) <= f`` for every x."""

    def __init__(self, k: int) -> None:
        if k < 1:
            raise ValueError("a Misra-Gries summary needs k >= 1 counters")
        self.k = k
        self.n = 0
        self.counters: dict[Key, int] = {}

    def merge(self, counts: Mapping[Key, int], n: int | None = None) -> None:
        """Add counts (one tuple, a whole batch, or another summary) and shrink back to ``k`` counters.

        ``counts`` are exact counts, or the counters of another Misra-Gries summary with ``k``
        counters of a stream of ``n`` items (``n`` >= the sum of its counters: what that summary
        already subtracted). Each shrink subtracts ``c`` from at least ``k + 1`` counters (``c`` =
        the (k+1)-th largest), so the total error ``E`` of any item satisfies ``(k + 1) * E <= n``
        summed over every stream merged (mergeable summaries: Agarwal et al. 2012, section 3).
        """
        c = self.counters
        total = 0
        for item, m in counts.items():
            if m <= 0:
                raise ValueError("counts must be positive")
            c[item] = c.get(item, 0) + m
            total += m
        if n is not None and n < total:
            raise ValueError(f"a summary of {n} items cannot hold counters summing to {total}")
        self.n += total if n is None else n
        if len(c) > self.k:
            cut = sorted(c.values(), reverse=True)[self.k]
            self.counters = {item: m - cut for item, m in c.items() if m > cut}

    def estimate(self, item: Key) -> int:
        return self.counters.get(item, 0)


def promotion_threshold(n: float, p: int, epsilon: float) -> float:
    """The count above which a value of ``n`` tuples is promoted to heavy at ``p`` workers:
    ``(1/p - epsilon/2) N`` (section 3.2; :class:`HeavyHitterTracker`)."""
    return (1.0 / p - epsilon / 2) * n


class HeavyHitterTracker:
    """Approximate |R(b)|, |S(b)| and the heavy/light classification of section 3.2.

    With ``epsilon <= 1/(2p)`` (default ``1/(2p)``) and N the stream length (or window length):

    * every b with ``N(b) = |R(b)| + |S(b)| > N/p`` is classified heavy,
    * every b with ``N(b) < (1/p - epsilon) N`` is classified light,
    * hence at most 2p values are heavy, each ``|R(b)|``, ``|S(b)|`` within ``epsilon N``.

    The summaries run with error ``epsilon/2`` (``k = ceil(2/epsilon) - 1`` counters per side), so
    the estimate ``N^(b)`` lies in ``[N(b) - epsilon N / 2, N(b)]``. A light value is promoted when
    ``N^(b) > (1/p - epsilon/2) N``, a heavy one demoted when ``N^(b) < (1/p - epsilon) N``: both
    are the paper's rule, and the band between them (which the paper leaves free) is hysteresis
    that stops a value near the threshold from migrating back and forth. ``min_heavy`` keeps
    values with fewer tuples than that light (at start-up every value exceeds N/p).
    """

    def __init__(
        self,
        p: int,
        *,
        epsilon: float | None = None,
        window: float | None = None,
        panes: int = 4,
        min_heavy: int = 1,
    ) -> None:
        if p < 1:
            raise ValueError("p must be >= 1")
        eps = 1.0 / (2 * p) if epsilon is None else epsilon
        if not 0.0 < eps <= 1.0 / (2 * p):
            raise ValueError(f"epsilon must be in (0, 1/(2p)] = (0, {1.0 / (2 * p)}], got {eps}")
        if window is not None and (window < 0 or panes < 1):
            raise ValueError("a window needs a length >= 0 and panes >= 1")
        self.p = p
        self.epsilon = eps
        self.k = math.ceil(2.0 / eps) - 1
        self.min_heavy = min_heavy
        # A zero-length window (pairs with equal timestamps) counts by panes of one time unit.
        self.pane_width = None if window is None else (window / panes if window > 0 else 1.0)
        self._panes: dict[int, tuple[MisraGries, MisraGries]] = {}

    @property
    def n(self) -> int:
        """N: tuples in the stream (full-stream) or in the live panes (window)."""
        return sum(r.n + s.n for r, s in self._panes.values())

    def add(self, counts: Mapping[tuple[Side, Key, int], int],
            totals: Mapping[tuple[Side, int], int] | None = None) -> None:
        """Merge a batch summary ``(side, key, pane) -> count`` (see :class:`BatchSummary`).

        ``totals``: ``(side, pane) -> n`` when ``counts`` are reduced (the counters of
        :func:`reduce_counts` on each worker, merged), else the counts are exact.
        """
        grouped: dict[tuple[int, Side], dict[Key, int]] = {}
        for (side, key, pane), m in counts.items():
            grouped.setdefault((pane, side), {})[key] = m
        if totals is not None:
            for side, pane in totals:
                grouped.setdefault((pane, side), {})
        for (pane, side), per_key in grouped.items():
            sketches = self._panes.get(pane)
            if sketches is None:
                sketches = self._panes[pane] = (MisraGries(self.k), MisraGries(self.k))
            sketches[side].merge(per_key, None if totals is None else totals.get((side, pane), 0))

    def expire(self, before: float | None) -> None:
        """Forget panes that end at or before ``before`` (the eviction threshold of the tasks)."""
        if before is None or self.pane_width is None:
            return
        for pane in [q for q in self._panes if (q + 1) * self.pane_width <= before]:
            del self._panes[pane]

    def estimate(self, key: Key) -> tuple[int, int]:
        """``(|R(b)|^, |S(b)|^)``: each an underestimate by at most ``epsilon N / 2``."""
        r = s = 0
        for sr, ss in self._panes.values():
            r += sr.estimate(key)
            s += ss.estimate(key)
        return r, s

    def is_heavy(self, key: Key, currently_heavy: bool) -> bool:
        """The classification of ``key`` now, given whether it is heavy so far."""
        r, s = self.estimate(key)
        n = self.n
        if currently_heavy:
            return r + s >= (1.0 / self.p - self.epsilon) * n
        return r + s > promotion_threshold(n, self.p, self.epsilon) and r + s >= self.min_heavy


def reduce_counts(counts: Mapping[tuple[Side, Key, int], int], k: int) -> tuple[dict[tuple[Side, Key, int], int], dict[tuple[Side, int], int]]:
    """A worker's exact batch counts as Misra-Gries summaries with ``k`` counters per (side, pane).

    Returns the counters and the true totals ``(side, pane) -> n``; the driver merges every
    worker's pair into its tracker (:meth:`HeavyHitterTracker.add`). With the tracker's ``k``
    the merged estimate keeps the tracker's guarantee (error at most ``N / (k + 1)``), and a
    batch's statistics stay at ``k`` counters per side and pane whatever its number of keys.
    """
    grouped: dict[tuple[Side, int], dict[Key, int]] = {}
    for (side, key, pane), m in counts.items():
        grouped.setdefault((side, pane), {})[key] = m
    out: dict[tuple[Side, Key, int], int] = {}
    totals: dict[tuple[Side, int], int] = {}
    for (side, pane), per_key in grouped.items():
        mg = MisraGries(k)
        mg.merge(per_key)
        totals[(side, pane)] = mg.n
        out.update({(side, key, pane): m for key, m in mg.counters.items()})
    return out, totals
