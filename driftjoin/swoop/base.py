"""Base: the baseline algorithm of section 3, used as the oracle and as a baseline.

The stock is a balanced tree of *all* valid pairs with positive similarity, ordered by the
same total order as SWOOP's (``sortedcontainers.SortedList`` stands in for the binary tree);
``get_candidates`` pairs the new set with every set of the window (Algorithm 3), and
``set_index_time`` deletes the pairs of the expiring sets (Algorithm 1). The stock is
``O(|W|^2)``, so Base is only practical for small windows; its simplicity is what makes it the
reference for SWOOP's tests.
"""

from __future__ import annotations

from collections.abc import Iterable

from sortedcontainers import SortedList

from driftjoin.swoop.framework import TopKJoin
from driftjoin.swoop.pairs import PairKey
from driftjoin.swoop.records import SetRecord
from driftjoin.swoop.similarity import WellBehavedSimilarity


class BaseTopK(TopKJoin):
    """Baseline top-k join with the same API and outputs as :class:`~driftjoin.swoop.Swoop`."""

    def __init__(
        self,
        k: int,
        similarity: str | WellBehavedSimilarity,
        window: float,
        *,
        two_stream: bool = False,
    ) -> None:
        super().__init__(k, similarity, window, two_stream=two_stream)
        self.stock: SortedList = SortedList()
        self._pairs_of: dict[int, list[PairKey]] = {}  # earlier set -> its pairs (same end)

    def _stock_topk(self) -> list[PairKey]:
        return list(self.stock.islice(0, self.k))

    def _stock_kth(self) -> PairKey | None:
        return self.stock[self.k - 1] if len(self.stock) >= self.k else None

    def _stock_between(self, lo: PairKey, hi: PairKey | None) -> Iterable[PairKey]:
        return self.stock.irange(lo, hi, inclusive=(False, True))

    def _next_change_end(self) -> float | None:
        return self._W.oldest_end()  # Base takes one step per expiring set end (conservative)

    def _expire(self, t: float, expired: list[SetRecord]) -> list[PairKey]:
        removed: list[PairKey] = []
        for record in expired:
            removed += self._pairs_of.pop(record.seq, [])
        for key in removed:
            self.stock.remove(key)
        return removed

    def _join(self, record: SetRecord, indexed: bool) -> tuple[list[PairKey], list[PairKey]]:
        # no index: every set of the window is a candidate, whether the new set joins it or not
        sim = self.similarity.sim
        tokens, l_r, i = record.tokens, record.size, record.seq
        added: list[PairKey] = []
        for other in self._W:
            if self.two_stream and other.side == record.side:
                continue
            o = len(tokens & other.tokens)
            if o:
                key = (-sim(l_r, other.size, o), -other.end, i, other.seq)
                added.append(key)
                self._pairs_of.setdefault(other.seq, []).append(key)
        self.stock.update(added)
        return added, []
