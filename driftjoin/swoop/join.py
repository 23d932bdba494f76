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
from itertools import islice

import numpy as np

from driftjoin.swoop.candidates import CandidateGenerator
from driftjoin.swoop.delta import JoinDelta
from driftjoin.swoop.framework import ADVANCE, OWN, TopKJoin
from driftjoin.swoop.index import InvertedIndex
from driftjoin.swoop.pairs import PairKey
from driftjoin.swoop.records import SetRecord
from driftjoin.swoop.similarity import WellBehavedSimilarity
from driftjoin.swoop.stock import Stock
from driftjoin.swoop.window import Window

ENGINES = ("auto", "compiled", "python")
SCANS = ("filtered", "paper")  # the compiled engine's scans of the inverted lists


class Swoop(TopKJoin):
    """SWOOP top-k join: ``Swoop(k, similarity, window, two_stream=False)``.

    ``similarity`` is a name (``"jaccard"``, ``"cosine"``, ``"dice"``, ``"overlap"``,
    ``"hamming"``) or a :class:`~driftjoin.swoop.similarity.WellBehavedSimilarity`;
    ``window`` is the duration ``w``. ``shortest_list_first=False`` switches the lookup order
    to the plain token order (the paper's SWOOP-noopt, section 7.2). ``engine``: ``"auto"``
    (compiled for the built-in similarity functions, else Python), ``"compiled"`` or
    ``"python"`` (module docstring). ``scan``: how the compiled engine scans a cropped
    inverted list, ``"filtered"`` (the default: each list entry carries its set's end time,
    size and token rank, and a positional bound drops most entries before their set is read)
    or ``"paper"`` (Algorithm 4 as written: every entry's set is read); both give the same
    results (:func:`driftjoin.swoop._kernels.get_candidates`). The Python engine scans as the
    paper does.
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
        scan: str = "filtered",
    ) -> None:
        super().__init__(k, similarity, window, two_stream=two_stream)
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
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
                k, self.similarity, two_stream=two_stream, shortest_list_first=shortest_list_first,
                scan=scan,
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
        """Record the operations from now on (:meth:`take_delta` ends the recording; :mod:`~driftjoin.swoop.delta`)."""
        self._log = []
        self._logged_tokens = len(self.tokens)

    def take_delta(self) -> JoinDelta:
        """The changes since :meth:`start_delta`, and stop recording."""
        log = self._log
        if log is None:
            raise RuntimeError("no delta is being recorded: call start_delta() first")
        ids = self.tokens._ids
        fresh = len(ids) - self._logged_tokens
        tokens = list(islice(reversed(ids), fresh))[::-1] if fresh else []
        own = [np.fromiter(numbers, np.int64) if isinstance(numbers, frozenset) else numbers
               for _, _, _, role, numbers in log if role == OWN]
        sizes = [len(numbers) if role == OWN else numbers for _, _, _, role, numbers in log]
        stock_f, stock_i = self.stock.export()
        columns = [list(c) for c in zip(*log)] if log else [[]] * 4
        numbers = np.concatenate(own) if own else np.zeros(0, np.int64)
        if len(numbers) and numbers.max() < 2**31:  # always in the compiled engine: half the bytes
            numbers = numbers.astype(np.int32)
        delta = JoinDelta(tokens, *columns[:4], sizes, numbers, stock_f, stock_i, self._counters())
        self._log = None
        del self._logged_tokens
        return delta

    def apply_delta(self, delta: JoinDelta) -> None:
        """Apply a :meth:`take_delta` of the join this one equals (in the state the delta was
        recorded from): without probing, this join becomes equal to the one that ran the operations."""
        if self._log is not None:
            raise RuntimeError("cannot apply a delta while one is being recorded")
        ids = self.tokens._ids
        for token in delta.tokens:
            ids[token] = len(ids)
        W, records, live, visitors = self._W, self._records, self._live_ids, self._visitors
        window = self.window
        compiled = self._core is not None
        numbers, at = delta.numbers, 0
        # the compiled engine's index and window work, done in one call at the end: per indexed set,
        # the sets that expire before it, its end time and side (and the expiries after the last one)
        expire: list[int] = []
        ends: list[float] = []
        sides: list[int] = []
        pending = 0
        for set_id, side, ts, role, size in zip(delta.ids, delta.sides, delta.times, delta.roles, delta.sizes):
            oldest = W.oldest_end()
            if oldest is not None and oldest <= ts:
                expired = W.expire(ts)
                if compiled:
                    pending += len(expired)
                else:
                    self._unindex(expired)
                for record in expired:
                    del records[record.seq]
                    del live[(record.side, record.set_id)]
            self._t_J = ts
            if visitors and visitors[0].end <= ts:
                self._drop_visitors(ts)
            if role == ADVANCE:
                continue
            seq = self._next_seq
            self._next_seq += 1
            if role == OWN:
                own = numbers[at:at + size] if compiled else frozenset(numbers[at:at + size].tolist())
                at += size
                record = SetRecord(seq, set_id, side, ts, ts + window, own, size)
                if compiled:
                    expire.append(pending)
                    ends.append(record.end)
                    sides.append(1 if side == "S" else 0)
                    pending = 0
                else:
                    self._index_only(record)
                W.append(record)
            else:  # a visitor (PROBE, TICK): its id and end only
                record = SetRecord(seq, set_id, side, ts, ts + window, (), size)
                visitors.append(record)
            records[seq] = record
            live[(side, set_id)] = seq
        if compiled and (expire or pending):
            offsets = np.zeros(len(expire) + 2, np.int64)
            np.cumsum([size for size, role in zip(delta.sizes, delta.roles) if role == OWN], out=offsets[1:len(expire) + 1])
            offsets[-1] = offsets[-2]  # a last step of expiries only
            self._core.apply_sets(np.array([*expire, pending], np.int64), numbers, offsets,
                                  np.array([*ends, 0.0], np.float64), np.array([*sides, 0], np.int64))
        self._load_stock(delta.stock_f, delta.stock_i)
        self._set_counters(delta.counters)

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
            return self.tokens.number_known(token_lists, self.similarity.max_size)
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
