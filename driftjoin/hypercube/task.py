"""The local join state of one task, and the application of state moves to tasks.

A task holds, per side and join value, the tuples routed to it for storage, and is a symmetric
hash join over them: a routed copy first probes the other side's tuples of its join value, then
is stored. A pair is thus reported by the later of its two tuples, at the one task holding both.

Window joins (``window = W``) report ``(r, s)`` iff ``r.key == s.key`` and ``|r.ts - s.ts| <= W``;
the probe filters on that, and :meth:`Task.evict` frees tuples no future arrival can match.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator

from driftjoin.hypercube.model import Drop, Key, Pair, Role, Side, StateMoves, StreamTuple, Transfer

# Roles compared with ``!=`` (int equality): ``IntFlag.__and__`` costs a microsecond per call.
_PROBE_ONLY = Role.PROBE
_STORE_ONLY = Role.STORE


class Task:
    """Stored tuples ``side -> key -> tid -> tuple`` plus counters of the work done.

    ``received``: routed copies processed; ``installed``: tuples received by state migration;
    ``output``: pairs reported; ``stored``: tuples held now.
    """

    __slots__ = ("task_id", "window", "received", "installed", "output", "stored", "_store", "_expiry", "_seq")

    def __init__(self, task_id: int, window: float | None = None) -> None:
        self.task_id = task_id
        self.window = window
        self.received = 0
        self.installed = 0
        self.output = 0
        self.stored = 0
        self._store: tuple[dict[Key, dict[int, StreamTuple]], dict[Key, dict[int, StreamTuple]]] = ({}, {})
        self._expiry: list[tuple[float, int, Side, Key, int]] = []
        self._seq = 0

    def process(self, tup: StreamTuple, role: Role, sink: list[Pair] | None) -> int:
        """Probe with and/or store one routed copy; append pairs to ``sink`` (None: count only)."""
        self.received += 1
        found = 0
        if role != _STORE_ONLY:
            partners = self._store[1 - tup.side].get(tup.key)
            if partners:
                found = self._probe(tup, partners, sink)
                self.output += found
        if role != _PROBE_ONLY:
            self._put(tup)
        return found

    def _probe(self, tup: StreamTuple, partners: dict[int, StreamTuple], sink: list[Pair] | None) -> int:
        w = self.window
        r_side = tup.side == Side.R
        if w is None:
            if sink is None:
                return len(partners)
            if r_side:
                sink.extend((tup.tid, tid) for tid in partners)
            else:
                sink.extend((tid, tup.tid) for tid in partners)
            return len(partners)
        ts = tup.ts
        hits = [o.tid for o in partners.values() if abs(o.ts - ts) <= w]
        if sink is not None:
            if r_side:
                sink.extend((tup.tid, tid) for tid in hits)
            else:
                sink.extend((tid, tup.tid) for tid in hits)
        return len(hits)

    def _put(self, tup: StreamTuple) -> None:
        bucket = self._store[tup.side].setdefault(tup.key, {})
        if tup.tid in bucket:
            raise ValueError(f"task {self.task_id} already stores {tup.side.name} tuple {tup.tid}")
        bucket[tup.tid] = tup
        self.stored += 1
        if self.window is not None:
            self._seq += 1
            heapq.heappush(self._expiry, (tup.ts, self._seq, tup.side, tup.key, tup.tid))

    def evict(self, before: float) -> int:
        """Drop stored tuples with ``ts < before``; returns how many."""
        heap, dropped = self._expiry, 0
        while heap and heap[0][0] < before:
            _, _, side, key, tid = heapq.heappop(heap)
            bucket = self._store[side].get(key)
            if bucket is not None and bucket.pop(tid, None) is not None:
                dropped += 1
                if not bucket:
                    del self._store[side][key]
        self.stored -= dropped
        return dropped

    def export(self, transfer: Transfer) -> list[StreamTuple]:
        """The tuples a transfer copies out of this task (the task keeps them)."""
        bucket = self._store[transfer.side].get(transfer.key)
        if not bucket:
            return []
        sel = transfer.select
        if sel is None:
            return list(bucket.values())
        return [t for t in bucket.values() if sel.contains(t.side, t.tid)]

    def install(self, tuples: Iterable[StreamTuple]) -> None:
        """Store tuples received by state migration (no probing: their pairs were reported)."""
        for t in tuples:
            self._put(t)
            self.installed += 1

    def drop(self, drop: Drop) -> None:
        side_store = self._store[drop.side]
        bucket = side_store.get(drop.key)
        if not bucket:
            return
        keep = drop.keep
        if keep is None:
            del side_store[drop.key]
            self.stored -= len(bucket)
            return
        gone = [tid for tid in bucket if not keep.contains(drop.side, tid)]
        for tid in gone:
            del bucket[tid]
        self.stored -= len(gone)
        if not bucket:
            del side_store[drop.key]

    def lookup(self, side: Side, key: Key, tid: int) -> StreamTuple:
        """The stored tuple ``tid`` of ``side`` with ``key`` (a partner reported by :meth:`process`)."""
        return self._store[side][key][tid]

    def stored_tuples(self) -> Iterator[StreamTuple]:
        """Every stored tuple (to checkpoint the task, or to check placement invariants)."""
        for side_store in self._store:
            for bucket in side_store.values():
                yield from bucket.values()

    @classmethod
    def from_tuples(cls, task_id: int, window: float | None, tuples: Iterable[StreamTuple]) -> Task:
        """Rebuild a task's state from :meth:`stored_tuples` (counters start at zero)."""
        task = cls(task_id, window)
        for t in tuples:
            task._put(t)
        return task


def apply_moves(moves: StateMoves, task_of: Callable[[int], Task]) -> int:
    """Apply state moves with their snapshot semantics; returns the number of tuples moved."""
    exported = [(tr.dst, task_of(tr.src).export(tr)) for tr in moves.transfers]
    moved = 0
    for dst, tuples in exported:
        task_of(dst).install(tuples)
        moved += len(tuples)
    for d in moves.drops:
        task_of(d.task).drop(d)
    return moved
