"""The stream join framework of section 3: index time, window, stock and three operations.

``insert(set_id, tokens, ts, side)`` sets the index time to ``ts`` and joins the new set;
``advance(ts)`` is the paper's ``set_index_time(t)``; ``topk()`` returns the join result.
:class:`~driftjoin.swoop.join.Swoop` and :class:`~driftjoin.swoop.base.BaseTopK` differ only
in how they maintain the stock, so the framework (validation, window, token order, expiry
steps and the change stream) lives here and both produce identical outputs for identical input.

Two-stream joins (``two_stream=True``; the paper's Appendix A is not part of the text we
follow, so this is our definition). Every set carries a side, ``"R"`` or ``"S"``; both sides
share one index time, one window duration ``w`` and one arrival numbering (the merged stream is
in timestamp order). Only pairs from ``R x S`` are formed: a set of ``R`` is joined with the
valid ``S`` sets and vice versa, never with a set of its own side. A pair is valid from the
later set's arrival to ``min(t_r, t_s) + w``, the end time of the earlier set, exactly as in a
self-join, and it is reported as ``(R set, S set)``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Hashable, Iterable, Sequence

import numpy as np

from driftjoin.swoop.pairs import PairKey, SimilarPair, TopKChange, topk_delta
from driftjoin.swoop.records import (
    DuplicateSetError,
    InvalidSetError,
    SetRecord,
    TokenOrder,
    validate_set_id,
    validate_side,
    validate_time,
    validate_tokens,
)
from driftjoin.swoop.similarity import WellBehavedSimilarity, get_similarity
from driftjoin.swoop.window import Window

_INF = float("inf")

# What an insert does with the new set (partitioned joins, driftjoin.swoop.partitioned; a
# single join always uses OWN): OWN joins it with the indexed sets and indexes it, PROBE only
# joins it (another worker indexes it), TICK only moves the index time and numbers it, INDEX
# only indexes it (another worker joins it; logged as OWN, which a delta applies alike).
OWN, PROBE, TICK = 0, 1, 2
ADVANCE = 3  # a logged advance() (driftjoin.swoop.delta), not a role
INDEX = 4


class TopKJoin(ABC):
    """Continuous top-k set similarity join over a sliding window (Definition 1)."""

    #: The operations since :meth:`Swoop.start_delta` (None: not recording), for
    #: :mod:`~driftjoin.swoop.delta`: ``(set_id, side, ts, role, token numbers or size)``.
    _log: list | None = None

    def __init__(
        self,
        k: int,
        similarity: str | WellBehavedSimilarity,
        window: float,
        *,
        two_stream: bool = False,
    ) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        if (
            isinstance(window, bool)
            or not isinstance(window, (int, float))
            or not 0 < window < float("inf")
        ):
            raise ValueError(f"window must be a positive finite duration, got {window!r}")
        self.k = k
        self.similarity = get_similarity(similarity)
        self.window = window
        self.two_stream = two_stream
        self.tokens = TokenOrder()
        self._W = Window(columns=False)
        self._records: dict[int, SetRecord] = {}  # valid sets by arrival number
        self._live_ids: dict[tuple[str | None, Hashable], int] = {}  # (side, set_id) -> seq
        self._visitors: deque[SetRecord] = deque()  # valid sets not in the window (PROBE, TICK)
        self._t_J: float | None = None
        self._next_seq = 0

    # -- the stock, provided by the algorithm -------------------------------------------------

    @abstractmethod
    def _stock_topk(self) -> list[PairKey]:
        """The first ``k`` stock pairs."""

    @abstractmethod
    def _stock_kth(self) -> PairKey | None:
        """The k-th stock pair, ``None`` if the stock holds fewer than ``k`` pairs."""

    @abstractmethod
    def _stock_between(self, lo: PairKey, hi: PairKey | None) -> Iterable[PairKey]:
        """Stock pairs ``p`` with ``lo < p <= hi`` (``hi=None``: unbounded)."""

    @abstractmethod
    def _next_change_end(self) -> float | None:
        """A time no later than the earliest end of a stock pair (``None``: empty stock)."""

    @abstractmethod
    def _expire(self, t: float, expired: list[SetRecord]) -> list[PairKey]:
        """Index time moves to ``t``; ``expired`` sets leave. Returns the removed pairs."""

    @abstractmethod
    def _join(self, record: SetRecord, indexed: bool) -> tuple[list[PairKey], list[PairKey]]:
        """Join a new set (not yet in the window) with the indexed sets; index it too if
        ``indexed`` (it then joins the window). Returns ``(added, removed)`` pairs."""

    # -- public API ----------------------------------------------------------------------------

    @property
    def index_time(self) -> float | None:
        """``t_J``, ``None`` before the first operation."""
        return self._t_J

    @property
    def window_size(self) -> int:
        """``|W|``: number of valid sets."""
        return len(self._W)

    def insert(
        self, set_id: Hashable, tokens: Iterable[str | int], ts: float, side: str | None = None
    ) -> list[TopKChange]:
        """``insert(r_i, t_i)``: set the index time to ``ts``, then join the new set.

        Returns the top-k changes (see :mod:`driftjoin.swoop.pairs`). Raises
        :class:`~driftjoin.swoop.records.InvalidSetError` (a ``ValueError``) for bad input,
        leaving the join unchanged (policy in :mod:`driftjoin.swoop.records`).
        """
        return self._insert(set_id, tokens, ts, side, OWN)[0]

    def insert_many(
        self, sets: Sequence[tuple[Hashable, Iterable[str | int], float, str | None]]
    ) -> list[list[TopKChange] | InvalidSetError]:
        """:meth:`insert` of ``(set_id, tokens, ts, side)`` in order: per set its changes, or the
        error that refused it (the join goes on with the next set). The same results as one
        :meth:`insert` per set; the tokens of the whole batch are validated and numbered at
        once (:meth:`~driftjoin.swoop.records.TokenOrder.number_known`)."""
        results = self._insert_many(sets, [OWN] * len(sets))
        return [result if isinstance(result, InvalidSetError) else result[0] for result in results]

    def _insert_many(
        self, sets: Sequence[tuple[Hashable, Iterable[str | int] | None, float, str | None]],
        roles: Sequence[int],
    ) -> list[tuple[list, int] | InvalidSetError]:
        """:meth:`_insert` of each set in its role, in order; an error stands for a refused set."""
        numbered = self._number_batch([tokens for _, tokens, _, _ in sets])
        insert = self._insert
        results: list[tuple[list, int] | InvalidSetError] = []
        for (set_id, tokens, ts, side), role, numbers in zip(sets, roles, numbered):
            try:
                results.append(insert(set_id, tokens, ts, side, role, numbers))
            except InvalidSetError as exc:
                results.append(exc)
        return results

    def _number_batch(self, token_lists: list) -> list:
        """Per set its distinct token numbers in the form :meth:`_join` takes, or ``None``: the
        set's tokens are validated and numbered when it is inserted (``TokenOrder.number_known``)."""
        return [None if numbers is None else frozenset(numbers.tolist())
                for numbers in self.tokens.number_known(token_lists, self.similarity.max_size)]

    def _insert(
        self, set_id: Hashable, tokens: Iterable[str | int] | None, ts: float, side: str | None,
        role: int, numbers: frozenset[int] | np.ndarray | None = None,
    ) -> tuple[list, int]:
        """:meth:`insert` in a ``role`` (module constants); ``tokens`` is not read for TICK, nor
        when the caller has validated and numbered them (``numbers``, :meth:`_number_batch`).

        Returns the changes and how many of them the expiries before the join made (the
        join's own step comes last).
        """
        set_id = validate_set_id(set_id)
        if numbers is None:
            distinct = validate_tokens(set_id, tokens, self.similarity.max_size) if role != TICK else []
        t_J = self._t_J
        if not ((type(ts) is float or type(ts) is int) and t_J is not None and t_J <= ts < _INF):
            ts = validate_time(ts, t_J, f"set {set_id!r}")  # else: finite and in order
        if side is not None or self.two_stream:
            side = validate_side(set_id, side, self.two_stream)
        live = self._live_ids.get((side, set_id))
        if live is not None and self._records[live].end > ts:
            raise DuplicateSetError(f"set {set_id!r}: duplicate id of a set still in the window")
        oldest = self._W.oldest_end()
        if oldest is None or oldest > ts:  # nothing expires (as _set_index_time, shortcut)
            self._t_J = ts
            events: list = []
            if self._visitors and self._visitors[0].end <= ts:
                self._drop_visitors(ts)
        else:
            events = self._set_index_time(ts)
        mark = len(events)
        seq = self._next_seq
        self._next_seq += 1
        if role == TICK:
            record = SetRecord(seq, set_id, side, ts, ts + self.window, (), 0)
            self._visitors.append(record)
            before = None
            added = removed = ()
        else:
            if numbers is None:
                numbers = self._number(distinct)
            record = SetRecord(seq, set_id, side, ts, ts + self.window, numbers, len(numbers))
            if role == INDEX:
                self._index_new(record)
                before, added, removed = None, (), ()
            else:
                before, added, removed = self._join_step(record, role == OWN)
            if role != PROBE:
                self._W.append(record)
            else:  # a visitor keeps its id and end only (its tokens served the join)
                record = SetRecord(seq, set_id, side, ts, record.end, (), record.size)
                self._visitors.append(record)
        self._records[seq] = record
        self._live_ids[(side, set_id)] = seq
        if self._log is not None:
            if role == INDEX:
                role = OWN
            self._log.append((set_id, side, ts, role, record.tokens if role == OWN else record.size))
        if added or removed:
            self._changes(ts, before, added, removed, events)
        return events, mark

    def advance(self, ts: float) -> list[TopKChange]:
        """``set_index_time(t)``: move the index time to ``ts``, expiring sets and pairs."""
        ts = validate_time(ts, self._t_J, "advance")
        if self._log is not None:
            self._log.append((None, None, ts, ADVANCE, 0))
        return self._set_index_time(ts)

    def topk(self) -> list[SimilarPair]:
        """``topk()``: the join result at the index time, in stock order."""
        return [self._pair(key) for key in self._stock_topk()]

    # -- internals -----------------------------------------------------------------------------

    def _join_step(
        self, record: SetRecord, indexed: bool
    ) -> tuple[PairKey | None, list[PairKey], list[PairKey]]:
        """The k-th pair before the join (needed only if a list is not empty), and ``_join``."""
        before = self._stock_kth()
        return (before, *self._join(record, indexed))

    def _index_new(self, record: SetRecord) -> None:
        """Append a new set to the index without joining it (role ``INDEX``; before it joins
        the window). Only the partitioned SWOOP workers of the ``"probe"`` design use it."""
        raise NotImplementedError(f"{type(self).__name__} does not index without joining")

    def _number(self, distinct: list[str | int]) -> frozenset[int]:
        """The token numbers of a new set, in the form the algorithm's ``_join`` uses."""
        return self.tokens.number(distinct)

    def _set_index_time(self, t: float) -> list[TopKChange]:
        """Expire up to ``t``: one step per distinct end time of stock pairs, in time order.

        Sets that end before the next stock pair ends leave in one batch without a step (they
        cannot change the top-k).
        """
        events: list[TopKChange] = []
        W = self._W
        while (g := W.oldest_end()) is not None and g <= t:
            bound = self._next_change_end()  # >= g: every pair ends with its earlier set
            if bound == g:
                before = self._stock_kth()
                expired = W.expire(g)
                self._changes(g, before, [], self._expire(g, expired), events)
            else:
                if bound is None or bound > t:
                    expired = W.expire(t)
                else:
                    expired = W.expire(bound, inclusive=False)
                self._expire(expired[-1].end, expired)
            for record in expired:
                del self._records[record.seq]
                del self._live_ids[(record.side, record.set_id)]
        self._t_J = t
        if self._visitors and self._visitors[0].end <= t:
            self._drop_visitors(t)
        return events

    def _drop_visitors(self, t: float) -> None:
        """Forget the PROBE and TICK sets that end by ``t`` (their pairs have ended too)."""
        visitors = self._visitors
        while visitors and visitors[0].end <= t:
            record = visitors.popleft()
            del self._records[record.seq]
            del self._live_ids[(record.side, record.set_id)]

    def _changes(
        self,
        time: float,
        before: PairKey | None,
        added: list[PairKey],
        removed: list[PairKey],
        events: list,
    ) -> None:
        """Append the net top-k difference of one step (boundary ``before`` -> now)."""
        if not added and not removed:
            return
        left, entered = topk_delta(
            before, self._stock_kth(), added, removed, self._stock_between
        )
        self._report(time, left, entered, events)

    def _report(
        self, time: float, left: list[PairKey], entered: list[PairKey], events: list
    ) -> None:
        """Append one step's changes: leaves, then enters."""
        pair = self._pair
        events += [TopKChange(time, "leave", pair(p)) for p in left]
        events += [TopKChange(time, "enter", pair(p)) for p in entered]

    def _pair(self, key: PairKey) -> SimilarPair:
        later, earlier = self._records[key[2]], self._records[key[3]]
        if later.side == "S":
            later, earlier = earlier, later
        return SimilarPair(-key[0], later.set_id, earlier.set_id, -key[1])
