"""The skyband lower bound as a step function, for sharing it between the workers of a
partitioned join (:mod:`~driftjoin.swoop.partitioned`).

SWOOP prunes a candidate pair ``p`` (similarity ``s``, end time ``e``) when ``s < lb(e, k)``,
the similarity of the k-th best valid pair that ends at ``e`` or later (section 5.3): then k
pairs beat ``p`` for all of its remaining life, so it can never enter the top-k. As a function
of ``t``, ``lb(t, k)`` is a non-increasing staircase (Lemma 1, Figure 6), which this class
stores by its steps: ``lb(t) = sims[d]`` for the first ``d`` with ``t <= ends[d]``, and ``0``
after the last step (``ends`` ascending, ``sims`` descending, as
:meth:`~driftjoin.swoop.stock.Stock.lb_steps`).

Sharing it is safe. A worker of a partitioned join sees only its own pairs, so its own ``lb``
is that of a subset of the valid pairs, lower than the global one. :meth:`Staircase.of_pairs`
computes the staircase of any collection of valid pairs (the union of the workers' stocks), a
lower bound of the global ``lb(t, k)``; pairs never leave before their end, so for every
``t`` after the index time the bound stays a lower bound as the index time advances. Pruning
with ``max(own lb, shared lb)`` therefore drops only pairs that k valid pairs beat for their
whole life: pairs that can never enter the global top-k, which is what the merged result
needs. A flat threshold (the current k-th similarity) would not be: a pair below it can still
enter the top-k when better pairs that end sooner expire, which is why SWOOP's stock keeps
such pairs and why the bound is shared by end time.
"""

from __future__ import annotations

import heapq
from bisect import bisect_left

import numpy as np

_NEG_INF = float("-inf")


class Staircase:
    """A non-increasing step function ``lb(t)`` given by its steps (module docstring)."""

    __slots__ = ("ends", "sims", "_ends", "_neg_sims")

    def __init__(self, ends: np.ndarray, sims: np.ndarray) -> None:
        self.ends = np.asarray(ends, np.float64)
        self.sims = np.asarray(sims, np.float64)
        self._ends = self.ends.tolist()
        self._neg_sims = (-self.sims).tolist()  # ascending, for bisection

    @classmethod
    def of_pairs(cls, sims: np.ndarray, ends: np.ndarray, k: int) -> Staircase:
        """``lb(t, k)`` of a collection of valid pairs given by similarities and end times.

        ``lb(t) >= v`` iff at least ``k`` pairs of similarity ``>= v`` end at ``t`` or later,
        i.e. iff ``t`` is at most the k-th latest end among them: one sweep over the pairs in
        descending similarity with a heap of the k latest ends, ``O(n log k)``.
        """
        sims = np.asarray(sims, np.float64)
        ends = np.asarray(ends, np.float64)
        order = np.lexsort((ends, -sims))
        sims_sorted, ends_sorted = sims[order].tolist(), ends[order].tolist()
        heap: list[float] = []
        step_ends: list[float] = []
        step_sims: list[float] = []
        n = len(sims_sorted)
        x = 0
        while x < n:
            v = sims_sorted[x]
            while x < n and sims_sorted[x] == v:  # all pairs of similarity v
                if len(heap) < k:
                    heapq.heappush(heap, ends_sorted[x])
                elif ends_sorted[x] > heap[0]:
                    heapq.heapreplace(heap, ends_sorted[x])
                x += 1
            if len(heap) == k and (not step_ends or heap[0] > step_ends[-1]):
                step_ends.append(heap[0])
                step_sims.append(v)
        return cls(np.array(step_ends, np.float64), np.array(step_sims, np.float64))

    def __len__(self) -> int:
        return len(self._ends)

    def lb(self, t: float) -> float:
        """``lb(t)``."""
        d = bisect_left(self._ends, t)
        return -self._neg_sims[d] if d < len(self._ends) else 0.0

    def lb_array(self, t: np.ndarray) -> np.ndarray:
        """``lb`` at every time of ``t``."""
        return np.append(self.sims, 0.0)[np.searchsorted(self.ends, t, side="left")]

    def crop_end(self, ub: float) -> float:
        """End time ``T`` with ``lb(t) > ub`` exactly for ``t <= T`` (``-inf``: for no ``t``),
        as :meth:`~driftjoin.swoop.stock.Stock.crop_end`."""
        d = bisect_left(self._neg_sims, -ub)  # steps with similarity > ub come first
        return self._ends[d - 1] if d else _NEG_INF
