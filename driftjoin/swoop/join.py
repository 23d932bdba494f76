"""SWOOP: the continuous top-k set similarity join with inverted index and minimal stock.

Per insert (Figure 3): expire sets and pairs up to the new index time (the window, the heads of
the inverted lists and the head of the end time index ``E``), generate the candidates of the new
set from the inverted index with the positional upper bound and the skyband lower bound
(Algorithm 4), merge them into the minimal stock (Algorithm 6 with Algorithm 5), and append the
set to the tails of its tokens' lists.

Two engines run this algorithm. ``"compiled"`` (:mod:`~driftjoin.swoop.fast`, numba kernels on
numpy arrays) is the default for the built-in similarity functions; ``"python"``
(:mod:`~driftjoin.swoop.candidates`, :mod:`~driftjoin.swoop.stock`,
:mod:`~driftjoin.swoop.index`) runs any :class:`WellBehavedSimilarity` and is the reference
the compiled engine is tested against. Both produce identical outputs.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from driftjoin.swoop import delta
from driftjoin.swoop.candidates import CandidateGenerator
from driftjoin.swoop.framework import TopKJoin
from driftjoin.swoop.index import InvertedIndex
from driftjoin.swoop.pairs import PairKey
from driftjoin.swoop.records import SetRecord
from driftjoin.swoop.similarity import WellBehavedSimilarity
from driftjoin.swoop.stock import Stock
from driftjoin.swoop.window import Window

ENGINES = ("auto", "compiled", "python")


class Swoop(TopKJoin):
    """SWOOP top-k join: ``Swoop(k, similarity, window, two_stream=False)``.

    ``similarity`` is a name (``"jaccard"``, ``"cosine"``, ``"dice"``, ``"overlap"``,
    ``"hamming"``) or a :class:`~driftjoin.swoop.similarity.WellBehavedSimilarity`;
    ``window`` is the duration ``w``. ``shortest_list_first=False`` switches the lookup order
    to the plain token order (the paper's SWOOP-noopt, section 7.2). ``engine``: ``"auto"``
    (compiled for the built-in similarity functions, else Python), ``"compiled"`` or
    ``"python"`` (module docstring).
    """

    def __init__(
        self,
        k: int,
        similarity: str | WellBehavedSimilarity,
        window: float,
        *,
        two_stream: bool = False,
        shortest_list_first: bool = True,
        engine: str = "auto",
    ) -> None:
        super().__init__(k, similarity, window, two_stream=two_stream)
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if engine != "python":
            from driftjoin.swoop import fast

            if not fast.supports(self.similarity):
                if engine == "compiled":
                    raise ValueError(
                        f"the compiled engine supports the built-in similarity functions only, "
                        f"not {self.similarity!r}"
                    )
                engine = "python"
        self.engine = "python" if engine == "python" else "compiled"
        if self.engine == "compiled":
            self._core = fast.FastCore(
                k, self.similarity, two_stream=two_stream, shortest_list_first=shortest_list_first
            )
            self.stock = self._core.stock
            self.generator = self._core.generator
            return
        self._core = None
        self._W = Window(columns=True)  # the Python engine's bulk verification reads them
        self.stock = Stock(k)
        self.generator = CandidateGenerator(
            self.similarity, self._W, self.stock, shortest_list_first=shortest_list_first
        )
        # one inverted index per side (a self-join has the single side None)
        self._indexes: dict[str | None, InvertedIndex] = (
            {"R": InvertedIndex(), "S": InvertedIndex()} if two_stream else {None: InvertedIndex()}
        )

    def __setstate__(self, state: dict) -> None:
        # a join pickled before the compiled engine existed keeps running on the Python engine
        state.setdefault("engine", "python")
        state.setdefault("_core", None)
        self.__dict__.update(state)

    # -- logged changes (driftjoin.swoop.delta) ------------------------------------------------

    def start_delta(self) -> None:
        """Record what the following operations change (:mod:`~driftjoin.swoop.delta`)."""
        delta.start(self)

    def take_delta(self) -> delta.JoinDelta:
        """What the operations since :meth:`start_delta` changed; the recording ends."""
        return delta.take(self)

    def apply_delta(self, change: delta.JoinDelta) -> None:
        """Apply a :meth:`take_delta` of the join this one equals: without probing, this join
        becomes equal to the one that ran the operations."""
        delta.apply(self, change)

    def _unindex(self, expired: list[SetRecord]) -> None:
        """Expired sets leave the inverted lists (Python engine; the stock is left as it is)."""
        for record in expired:
            self._indexes[record.side].remove(record.tokens)

    def _index_only(self, record: SetRecord) -> None:
        """Append a new set to the inverted lists (Python engine; not yet to the window), without
        probing. (The compiled engine does both in one call per delta, ``FastCore.apply_sets``.)"""
        self._indexes[record.side].add(record.tokens, self._W.next_number())

    def _load_stock(self, sf: np.ndarray, si: np.ndarray) -> None:
        if self._core is not None:
            self._core.load_stock(sf, si)
        else:
            self.stock.load(sf, si)

    def _counters(self) -> tuple[int, ...]:
        """Pre-candidates and candidates so far (and the compiled engine's stamp)."""
        if self._core is not None:
            return self._core.counters()
        return self.generator.pre_candidates, self.generator.candidates

    def _set_counters(self, counters: tuple[int, ...]) -> None:
        if self._core is not None:
            self._core.set_counters(counters)
        else:
            self.generator.pre_candidates, self.generator.candidates = counters

    def _stock_topk(self) -> list[PairKey]:
        return self.stock.topk()

    def _stock_kth(self) -> PairKey | None:
        return self.stock.kth()

    def _stock_between(self, lo: PairKey, hi: PairKey | None) -> Iterable[PairKey]:
        return self.stock.between(lo, hi)

    def _next_change_end(self) -> float | None:
        return self.stock.first_end()

    def _number_batch(self, token_lists: list) -> list:
        if self._core is not None:
            return self.tokens.number_known(token_lists)
        return super()._number_batch(token_lists)

    def _number(self, distinct: list[str | int]) -> frozenset[int] | np.ndarray:
        if self._core is not None:
            return self.tokens.number_array(distinct)
        return self.tokens.number(distinct)

    def _expire(self, t: float, expired: list[SetRecord]) -> list[PairKey]:
        if self._core is not None:
            return self._core.expire(len(expired), t)
        for record in expired:
            self._indexes[record.side].remove(record.tokens)
        return self.stock.set_index_time(t)

    def _join_step(
        self, record: SetRecord, indexed: bool
    ) -> tuple[PairKey | None, list[PairKey], list[PairKey]]:
        if self._core is not None:  # the kernel reports the k-th pair before the join
            return self._core.join(
                record.tokens, record.seq, float(record.end), 1 if record.side == "S" else 0,
                indexed,
            )
        return super()._join_step(record, indexed)

    def _index_new(self, record: SetRecord) -> None:
        if self._core is not None:
            self._core.index(record.tokens, record.seq, float(record.end), 1 if record.side == "S" else 0)
        else:
            self._index_only(record)

    def _join(self, record: SetRecord, indexed: bool) -> tuple[list[PairKey], list[PairKey]]:
        side = record.side
        probe = self._indexes[("S" if side == "R" else "R") if self.two_stream else None]
        candidates = self.generator.get_candidates(record, probe)
        if indexed:
            self._indexes[side].add(record.tokens, self._W.next_number())
        return self.stock.insert(candidates) if candidates else ([], [])
