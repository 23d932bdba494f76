"""One worker of the parallel SHC pipeline: its tasks, its clock, and the state moves it makes.

Without a central dispatcher no process holds a copy of the stream, so state moves are made by
the workers that hold the tuples. Routers are stateless and route a batch by its
:class:`~driftjoin.hypercube.table.Binding` (``prev``: the table of the previous executed batch,
``cur``: the table of this one); a worker cannot reach another worker's state within a batch,
so a move takes two batches. Per executed batch B, each worker does, in this order:

1. **install** the tuples exported to it at the previous executed batch (read from a
   :class:`Channel`; installed tuples are stored, never probed: their pairs were reported);
2. **drop**, at its tasks of the old placements, the values it exported at that batch;
3. **evict** (window joins) the tuples no later tuple can join: time below
   ``seen - lateness - window``, ``seen`` being the largest time of the earlier batches;
4. **export**, if B's binding moves values: for every value b whose placement changes from P
   (``prev``) to Q (``cur``), the first task of each line of P on this worker (column 0 for R
   tuples, row 0 for S tuples; a light value's one task for both) sends its stored tuples of b
   to every task of their line in Q, through the channel; the worker keeps them for this batch
   and drops them at step 2 of the next;
5. **process** the batch's routed copies in the batch order
   (:func:`~driftjoin.hypercube.table.batch_order`); a copy whose time is below
   ``seen - lateness`` is late and dropped at every worker alike.

Why each pair is reported exactly once, for any sequence of tables, however stale. Invariant
(I) of :mod:`driftjoin.hypercube.shc`: every stored tuple of b is held exactly by the tasks of
its line in b's placement. Claim: after steps 1-2 of an executed batch, (I) holds for the
placement of ``prev`` (= ``cur`` of the previous executed batch). Take a value b and the
previous executed batch B'. If b did not move at B', its stored tuples were where ``cur`` of B'
puts them and the tuples of B' were stored there too. If it moved from P to Q at B', the tuples
of B' were stored in Q (their lines), and every older tuple, held by P under (I), was exported
by exactly one task of its line in P to its whole line in Q and is installed at step 1 now;
step 2 then empties P. P and Q share no task (fresh grids; light tasks are never grid tasks), so
nothing of Q is dropped and nothing is installed twice. Now in batch B a new tuple t of b:

* probes its line of ``cur``'s placement Q', storing itself there. If b does not move at B,
  Q' holds every earlier tuple of b as (I) says, and t's line meets each stored partner's line
  in one task: each pair with an earlier batch's tuple is found once. If b moves at B, Q' is
  new and holds no earlier tuple;
* if b moves at B (from P' = ``prev``'s placement), also probes (probe only) its line of P',
  which holds every earlier tuple under (I): each pair with an earlier batch's tuple is found
  there once, and only there (Q' holds none of them);
* pairs of two tuples of B meet in Q' only (probe copies store nothing), in one task, and the
  later of the two in the batch order reports it.

So each pair is reported once, in the batch of its later tuple. Window joins evict only tuples
that no tuple of this or a later batch can join (those are never late), before exporting, and
every worker computes the same ``seen``, so all copies of a tuple are late or none. A replayed
batch starts from the rolled-back state with the same binding, so it exports the same tuples
(the channel is keyed by batch and worker, and rewritten whole). The placements and the tables'
contents only decide where work lands, never which pairs are found.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from driftjoin.hypercube.grid import Grid
from driftjoin.hypercube.hashing import tuple_hash
from driftjoin.hypercube.model import Drop, Key, Pair, Role, Side, StreamTuple, Transfer
from driftjoin.hypercube.table import Binding
from driftjoin.hypercube.task import Task

#: One exported tuple: ``(task, side, key, tid, ts, payload)``.
Moved = tuple[int, int, Key, int, float, Any]


class Channel(Protocol):
    """Where a worker's exports of batch B wait for the next executed batch."""

    def put(self, batch: int, src: int, dst: int, rows: list[Moved]) -> None: ...

    def get(self, batch: int, src: int, dst: int) -> list[Moved]: ...


class MemoryChannel:
    """A :class:`Channel` in a dict (tests and the single-process model)."""

    def __init__(self) -> None:
        self.items: dict[tuple[int, int, int], list[Moved]] = {}

    def put(self, batch: int, src: int, dst: int, rows: list[Moved]) -> None:
        self.items[(batch, src, dst)] = list(rows)

    def get(self, batch: int, src: int, dst: int) -> list[Moved]:
        try:
            return list(self.items[(batch, src, dst)])
        except KeyError:
            raise RuntimeError(f"the state moved from worker {src} to worker {dst} at batch {batch} is missing") from None


class BindingMismatchError(RuntimeError):
    """A batch's binding does not continue the tables the worker used (lost or edited control files)."""


@dataclass
class Moves:
    """What steps 1-4 did at one worker in one batch (statistics, and the log of the change)."""

    installed: int = 0
    dropped: int = 0
    evicted: int = 0
    exported: int = 0
    files: int = 0


def exporters(grid: Grid) -> list[tuple[int, Side]]:
    """The task that exports each line of a placement: column 0 of each row (R), row 0 of each column (S)."""
    return [(row[0], Side.R) for row in grid.rows] + [(col[0], Side.S) for col in grid.columns]


@dataclass
class BaseWorker:
    """What every worker keeps besides its stored tuples, and the steps that do not touch them.

    ``seen``: the largest time of all earlier batches (None before the first); ``version``: the
    ``cur`` table version of the last executed batch; ``pending``: ``(task, key)`` exported at
    the last executed batch, dropped at the next; ``expect``: the batch and source workers whose
    exports this worker installs at its next batch. Subclasses hold the tuples and implement
    :meth:`stored` and ``_export`` (step 4): :class:`WorkerState` (the paper's per-tuple tasks)
    and :class:`~driftjoin.hypercube.columnar_worker.ColumnarWorker` (Arrow tables).
    """

    worker: int
    window: float | None = None
    lateness: float = 0.0
    seen: float | None = None
    version: int = 0
    pending: list[tuple[int, Key]] = field(default_factory=list)
    expect: tuple[int, tuple[int, ...]] | None = None
    totals: dict[str, int] = field(default_factory=lambda: dict.fromkeys(
        ("received", "installed", "exported", "produced", "late", "peak_stored"), 0))

    def stored(self) -> int:
        raise NotImplementedError

    def _export_line(self, key: Key, task: int, side: Side, new: Grid, binding: Binding) -> dict[int, Any]:
        """Step 4 for one exporting task: its stored ``side`` tuples of ``key``, sent to their
        line of ``new``, as ``{destination worker: rows}`` (the rows in the subclass's form)."""
        raise NotImplementedError

    def _pack(self, rows: list[Any]) -> Any:
        """What the channel carries from this worker to another (the rows of :meth:`_export_line`)."""
        raise NotImplementedError

    def _export(self, batch: int, binding: Binding, channel: Channel | None, moves: Moves) -> None:
        """Step 4: the first task of each line of a moving value's old placement on this worker
        exports its tuples of the value; every worker of the new placement learns from which
        workers to install at its next batch, every source sends each of them a file (maybe empty)."""
        me, cur, prev = self.worker, binding.cur, binding.prev
        out: dict[int, list[Any]] = defaultdict(list)
        targets: set[int] = set()
        sources: set[int] = set()
        for key, (old, new) in binding.moving.items():
            new_workers = {cur.worker_of(t) for t in new.cells}
            senders = exporters(old)
            if me in new_workers:
                sources |= {prev.worker_of(t) for t, _ in senders}
            for t, side in senders:
                if prev.worker_of(t) != me:
                    continue
                targets |= new_workers
                for dst, (rows, n) in self._export_line(key, t, side, new, binding).items():
                    out[dst].append(rows)
                    moves.exported += n
            self.pending += [(t, key) for t in old.cells if prev.worker_of(t) == me]
        if targets:
            if channel is None:
                raise RuntimeError(f"worker {me} must move state but has no channel to write it to")
            for d in sorted(targets):
                channel.put(batch, me, d, self._pack(out.get(d, [])))
                moves.files += 1
        if sources:
            self.expect = (batch, tuple(sorted(sources)))

    def _rebind(self, batch: int, binding: Binding | None, channel: Channel | None, moves: Moves) -> None:
        """The end of steps 1-4: check that ``binding`` continues this worker's tables, export
        what it moves (step 4), count the moves."""
        self.pending, self.expect = [], None
        if binding is not None:
            if binding.prev.version != self.version:
                raise BindingMismatchError(
                    f"worker {self.worker}: batch {batch} routes from table version {binding.prev.version}, but this "
                    f"worker's last batch used version {self.version}: the control directory lost or changed files")
            if binding.moving:
                self._export(batch, binding, channel, moves)
            self.version = binding.cur.version
        self.totals["installed"] += moves.installed
        self.totals["exported"] += moves.exported

    def evict_before(self) -> float | None:
        """The eviction threshold of the coming batch (the core's :class:`WatermarkClock`)."""
        if self.window is None or self.seen is None:
            return None
        return self.seen - self.lateness - self.window

    def late(self, ts: np.ndarray) -> np.ndarray:
        """Which of a batch's times are late (below ``seen - lateness``; window joins only)."""
        ts = np.asarray(ts, dtype=np.float64)
        if self.window is None or self.seen is None:
            return np.zeros(len(ts), dtype=bool)
        return ts < self.seen - self.lateness

    def end(self, batch_max: float | None, late: int = 0, produced: int = 0) -> None:
        """After the batch: advance ``seen`` to the batch's largest time, update the totals
        (``produced``: pairs not counted by the worker's own step 5)."""
        if batch_max is not None and np.isfinite(batch_max) and (self.seen is None or batch_max > self.seen):
            self.seen = float(batch_max)
        self.totals["late"] += late
        self.totals["produced"] += produced
        self.totals["peak_stored"] = max(self.totals["peak_stored"], self.stored())

    def scalars(self) -> dict[str, Any]:
        return {"seen": self.seen, "version": self.version, "pending": list(self.pending), "expect": self.expect,
                "totals": dict(self.totals)}

    def _set_scalars(self, s: dict[str, Any]) -> None:
        self.seen, self.version, self.pending = s["seen"], s["version"], list(s["pending"])
        self.expect = None if s["expect"] is None else (s["expect"][0], tuple(s["expect"][1]))
        self.totals = dict(s["totals"])


@dataclass
class WorkerState(BaseWorker):
    """The tasks of one worker and what it must do at its next batch (module docstring).

    ``p``: the number of light tasks (task ids below ``p`` are light tasks, never removed from
    tables); ``seen``: the largest time of all earlier batches (None before the first);
    ``version``: the ``cur`` table version of the last executed batch; ``pending``:
    ``(task, key)`` exported at the last executed batch, dropped at the next; ``expect``: the
    batch and source workers whose exports this worker installs at its next batch.
    """

    tasks: dict[int, Task] = field(default_factory=dict)

    def task_of(self, task_id: int) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            task = self.tasks[task_id] = Task(task_id, self.window)
        return task

    def stored(self) -> int:
        return sum(t.stored for t in self.tasks.values())

    # ---- steps 1-4 -------------------------------------------------------------------------

    def begin(self, batch: int, binding: Binding | None, channel: Channel | None,
              log: dict[str, Any] | None = None) -> Moves:
        """Steps 1-4 for executed batch ``batch`` under ``binding`` (None: fixed routing, no
        moves). ``log`` receives the state changes for :meth:`redo`."""
        moves = Moves()
        installs = self._install(channel) if self.expect is not None else {}
        for t, rows in installs.items():
            self.task_of(t).install(StreamTuple(Side(s), k, i, x, p) for _, s, k, i, x, p in rows)
            moves.installed += len(rows)
        drops = list(self.pending)
        moves.dropped = self._drop(drops)
        before = self.evict_before()
        if before is not None:
            moves.evicted = sum(task.evict(before) for task in self.tasks.values())
        if log is not None:
            log.update(installs=[(t, rows) for t, rows in installs.items()], drops=drops, evict=before)
        self._rebind(batch, binding, channel, moves)
        return moves

    def _install(self, channel: Channel | None) -> dict[int, list[Moved]]:
        if channel is None:
            raise RuntimeError(f"worker {self.worker} expects moved state but has no channel to read it from")
        batch, sources = self.expect
        out: dict[int, list[Moved]] = defaultdict(list)
        for src in sources:
            for row in channel.get(batch, src, self.worker):
                out[row[0]].append(row)
        return dict(out)

    def _drop(self, drops: Iterable[tuple[int, Key]]) -> int:
        n = 0
        for t, key in drops:
            task = self.tasks.get(t)
            if task is None:
                continue
            before = task.stored
            for side in (Side.R, Side.S):
                task.drop(Drop(t, key, side, None))
            n += before - task.stored
        for t in [t for t, task in self.tasks.items() if task.stored == 0]:
            del self.tasks[t]  # empty tasks are made again when something is stored there
        return n

    def _export_line(self, key: Key, task: int, side: Side, new: Grid, binding: Binding) -> dict[int, Any]:
        lines: dict[int, list[Moved]] = defaultdict(list)
        stored = self.tasks.get(task)
        for tup in stored.export(Transfer(task, -1, key, side, None)) if stored is not None else ():
            h = tuple_hash(side, tup.tid)
            for d in new.rows[h & (new.p_r - 1)] if side == Side.R else new.columns[h & (new.p_s - 1)]:
                lines[binding.cur.worker_of(d)].append((d, int(side), key, tup.tid, tup.ts, tup.payload))
        return {w: (rows, len(rows)) for w, rows in lines.items()}

    def _pack(self, rows: list[list[Moved]]) -> list[Moved]:
        return [row for part in rows for row in part]

    # ---- step 5 ----------------------------------------------------------------------------

    def process(self, copies: Iterable[tuple[int, StreamTuple, Role]],
                on_pairs: Callable[[Task, StreamTuple, list[Pair]], None] | None = None,
                log: dict[str, Any] | None = None) -> int:
        """Step 5 for on-time copies in batch order; ``on_pairs(task, tuple, pairs)`` receives
        the pairs of each probe (None: count only). Returns the pairs found."""
        found = 0
        received = 0
        stores = [] if log is not None else None
        for t, tup, role in copies:
            task = self.task_of(t)
            received += 1
            if on_pairs is None:
                found += task.process(tup, role, None)
            else:
                sink: list[Pair] = []
                n = task.process(tup, role, sink)
                found += n
                if n:
                    on_pairs(task, tup, sink)
            if stores is not None and role != Role.PROBE:
                stores.append((t, (int(tup.side), tup.key, tup.tid, tup.ts, tup.payload)))
        if log is not None:
            log["stores"] = stores
        self.totals["received"] += received
        self.totals["produced"] += found
        return found

    # ---- logging (a snapshot plus per-batch changes) ---------------------------------------

    def redo(self, change: dict[str, Any]) -> None:
        """Apply one batch's logged change (:meth:`begin` and :meth:`process` logs, then
        :meth:`scalars`) to a state restored from an earlier snapshot; probing is not redone."""
        for t, rows in change["installs"]:
            self.task_of(t).install(StreamTuple(Side(s), k, i, x, p) for _, s, k, i, x, p in rows)
        self._drop(change["drops"])
        if change["evict"] is not None:
            for task in self.tasks.values():
                task.evict(change["evict"])
        for t, (s, k, i, x, p) in change["stores"]:
            self.task_of(t).process(StreamTuple(Side(s), k, i, x, p), Role.STORE, None)
        self._set_scalars(change["scalars"])

    def snapshot(self) -> dict[str, Any]:
        return {"tasks": {t: [(int(u.side), u.key, u.tid, u.ts, u.payload) for u in task.stored_tuples()]
                          for t, task in self.tasks.items()}, "scalars": self.scalars()}

    @staticmethod
    def restore(worker: int, window: float | None, lateness: float, snap: dict[str, Any]) -> WorkerState:
        state = WorkerState(worker, window, lateness)
        state.tasks = {t: Task.from_tuples(t, window, (StreamTuple(Side(s), k, i, x, p) for s, k, i, x, p in rows))
                       for t, rows in snap["tasks"].items()}
        state._set_scalars(snap["scalars"])
        return state
