"""One worker of the parallel SHC pipeline over columns: :class:`ColumnarWorker`.

The same five steps per executed batch as :class:`~driftjoin.hypercube.migration.WorkerState`
(install the tuples moved to it at the previous batch, drop what it exported then, evict, export
the values that move in this batch, process the batch's copies), with the same exactness
argument (in :mod:`driftjoin.hypercube.migration`: it needs only that each task reports the
pairs :class:`~driftjoin.hypercube.task.Task` would, and stores, drops, exports and installs the
same tuples). The difference is the representation: a worker's stored tuples are pyarrow tables
(:class:`~driftjoin.hypercube.columnar.SideStore`, one per side, all tasks together, carrying the
input row's own columns), a batch is joined at once (:func:`~driftjoin.hypercube.columnar.join_batch`),
state moves travel as Arrow IPC bytes, and the checkpoint's log of a batch is the Arrow IPC of
what it stored, installed and dropped. No step loops over tuples in Python.

A moved tuple keeps its tuple id ``(tb, tl)``; its line in the new grid is chosen by the same
hash of the low 64 bits ``tl`` as the routers use (:func:`~driftjoin.hypercube.hashing.tuple_hash_array`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from driftjoin.hypercube.columnar import KEY, TASK, TL, TS, Joined, SideStore, from_ipc, join_batch, to_ipc
from driftjoin.hypercube.grid import Grid
from driftjoin.hypercube.hashing import tuple_hash_array
from driftjoin.hypercube.migration import BaseWorker, Channel, Moves
from driftjoin.hypercube.model import Key, Side, StreamTuple
from driftjoin.hypercube.table import Binding

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from driftjoin.deferred import pyarrow as pa

#: What a worker sends another through the channel: ``(side, Arrow IPC of the rows)`` per side.
MovedTables = list[tuple[int, bytes]]


@dataclass
class ColumnarWorker(BaseWorker):
    """The stored tuples of one worker's tasks, one :class:`SideStore` per side, and what it
    must do at its next batch (the fields of :class:`~driftjoin.hypercube.migration.BaseWorker`)."""

    sides: tuple[SideStore, SideStore] = field(default_factory=lambda: (SideStore(), SideStore()))

    def stored(self) -> int:
        return len(self.sides[0]) + len(self.sides[1])

    @property
    def nbytes(self) -> int:
        return self.sides[0].nbytes + self.sides[1].nbytes

    def tasks(self) -> set[int]:
        """The tasks holding stored tuples."""
        return self.sides[0].tasks() | self.sides[1].tasks()

    # ---- steps 1-4 -------------------------------------------------------------------------

    def begin(self, batch: int, binding: Binding | None, channel: Channel | None,
              log: dict[str, Any] | None = None) -> Moves:
        """Steps 1-4 of executed batch ``batch`` under ``binding`` (None: fixed routing).
        ``log`` receives the changes for :meth:`redo`."""
        moves = Moves()
        installs: MovedTables = self._read_installs(channel) if self.expect is not None else []
        for side, blob in installs:
            moves.installed += self.sides[side].add(from_ipc(blob))
        drops = list(self.pending)
        moves.dropped = self._drop(drops)
        before = self.evict_before()
        if before is not None:
            # lazily: rows left below the threshold can never join (no on-time row is within the window)
            moves.evicted = self.sides[0].evict(before, lazy=True) + self.sides[1].evict(before, lazy=True)
        if log is not None:
            log.update(installs=installs, drops=drops, evict=before)
        self._rebind(batch, binding, channel, moves)
        return moves

    def _read_installs(self, channel: Channel | None) -> MovedTables:
        if channel is None:
            raise RuntimeError(f"worker {self.worker} expects moved state but has no channel to read it from")
        batch, sources = self.expect
        return [item for src in sources for item in channel.get(batch, src, self.worker)]

    def _drop(self, drops: Iterable[tuple[int, Key]]) -> int:
        return sum(self.sides[s].drop(t, key) for t, key in drops for s in (0, 1))

    def _export_line(self, key: Key, task: int, side: Side, new: Grid, binding: Binding) -> dict[int, Any]:
        rows = self.sides[side].select(task, key)
        before = self.evict_before()
        if rows is not None and before is not None:  # rows left below the threshold (lazy eviction) stay
            rows = rows.filter(pa.array(rows[TS].to_numpy() >= before))
        if rows is None or not rows.num_rows:
            return {}
        h = tuple_hash_array(np.full(rows.num_rows, int(side), dtype=np.int8), rows[TL].to_numpy().view(np.uint64))
        lines = np.asarray(new.rows if side == Side.R else new.columns, dtype=np.int64)
        dest = lines[(h & np.uint64(len(lines) - 1)).astype(np.int64)]  # (rows, line length)
        copies = rows.take(np.repeat(np.arange(rows.num_rows), dest.shape[1]))
        tasks = dest.ravel()
        copies = copies.set_column(copies.schema.get_field_index(TASK), TASK, pa.array(tasks, pa.int64()))
        workers = np.array([binding.cur.worker_of(d) for d in tasks.tolist()], dtype=np.int64)
        return {w: ((int(side), copies.filter(pa.array(workers == w))), int((workers == w).sum()))
                for w in np.unique(workers).tolist()}

    def _pack(self, rows: list[tuple[int, pa.Table]]) -> MovedTables:
        by_side: dict[int, list[pa.Table]] = defaultdict(list)
        for side, table in rows:
            by_side[side].append(table)
        return [(s, to_ipc(pa.concat_tables(tables))) for s, tables in sorted(by_side.items())]

    # ---- step 5 ----------------------------------------------------------------------------

    def process(self, copies: tuple[pa.Table | None, pa.Table | None], log: dict[str, Any] | None = None) -> Joined:
        """Step 5 for the batch's on-time copies (one table per side,
        :func:`~driftjoin.hypercube.columnar.join_batch`); returns its pairs."""
        joined, stored = join_batch(self.sides, copies, self.window)
        if log is not None:
            log["stores"] = [(s, to_ipc(t)) for s, t in enumerate(stored) if t is not None]
        self.totals["received"] += sum(0 if c is None else c.num_rows for c in copies)
        return joined

    # ---- logging (a snapshot plus per-batch changes) ---------------------------------------

    def redo(self, change: dict[str, Any]) -> None:
        """Apply one batch's logged change to a state restored from an earlier snapshot."""
        for side, blob in change["installs"]:
            self.sides[side].add(from_ipc(blob))
        self._drop(change["drops"])
        if change["evict"] is not None:
            for store in self.sides:
                store.evict(change["evict"], lazy=True)
        for side, blob in change["stores"]:
            self.sides[side].add(from_ipc(blob))
        self._set_scalars(change["scalars"])

    def snapshot(self) -> dict[str, Any]:
        tables = [store.table() for store in self.sides]
        return {"sides": [None if t is None else to_ipc(t) for t in tables], "scalars": self.scalars()}

    @staticmethod
    def restore(worker: int, window: float | None, lateness: float, snap: dict[str, Any]) -> ColumnarWorker:
        state = ColumnarWorker(worker, window, lateness)
        for side, blob in enumerate(snap["sides"]):
            if blob is not None:
                state.sides[side].add(from_ipc(blob))
        state._set_scalars(snap["scalars"])
        return state

    # ---- checks ----------------------------------------------------------------------------

    def stored_by_task(self) -> dict[int, list[StreamTuple]]:
        """Every stored tuple per task (tests: placement invariants); the tuple id is ``tl``.
        Rows below the eviction threshold are evicted already, whether or not their segment was
        rewritten yet (lazy eviction), so they are left out."""
        out: dict[int, list[StreamTuple]] = defaultdict(list)
        before = self.evict_before()
        for side, store in enumerate(self.sides):
            table = store.table()
            if table is None:
                continue
            for t, k, i, x in zip(table[TASK].to_pylist(), table[KEY].to_pylist(), table[TL].to_pylist(),
                                  table[TS].to_pylist()):
                if before is None or x >= before:
                    out[t].append(StreamTuple(Side(side), k, i, x))
        return dict(out)


def pair_ids(joined: Joined) -> Iterator[tuple[int, int]]:
    """The pairs of a batch as ``(left tl, right tl)`` (tests and the single-process model)."""
    for left, right in joined.pairs():
        yield from zip(left[TL].to_pylist(), right[TL].to_pylist())
