"""``equi_join``'s parallel pipeline in one process: the reference its Spark operators follow.

Per micro-batch B:

1. **routers** (stateless, any number of them) route every tuple by the batch's
   :class:`~driftjoin.hypercube.table.Binding` (SHC) or a fixed router (PHJ, Join-Biclique);
2. **workers** run :class:`~driftjoin.hypercube.migration.WorkerState` steps 1-5 on their
   copies and count the tuples whose primary copy they got;
3. the **binding** of the next batch is chosen while B runs (on Spark, by the plan key): the
   newest table the control plane has published, unless the publication lands too late for it;
4. after B commits, the **control plane** folds the workers' counts into its
   :class:`~driftjoin.hypercube.planner.RoutingPlanner` and publishes a new table when the grids
   change.

``behind`` sets how stale the tables are: the binding of batch B+1 reflects the counts of the
batches up to ``B - behind`` (0: all committed batches; Spark runs with 1 or more, since the
control plane folds B while B+1 is already running). :meth:`DistributedJoin.step` can also hide
the newest publication from the binding (a publication that lands mid-batch), replay a batch
after a failed attempt (state, channel and binding roll back; the attempt may have seen newer
tables) and :meth:`DistributedJoin.restart` round-trips every state through pickle. Tests drive
all of these, and arbitrary tables (``tables=``), against the oracle, with either local join:
``kernel="tuple"`` (:class:`~driftjoin.hypercube.migration.WorkerState`, the paper's per-tuple
tasks) or ``kernel="columnar"`` (:class:`~driftjoin.hypercube.columnar_worker.ColumnarWorker`,
what the Spark operator runs).
"""

from __future__ import annotations

import copy
import pickle
import random
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pyarrow as pa

from driftjoin.hypercube.columnar import KEY, ROLE, TASK, TB, TL, TS
from driftjoin.hypercube.columnar_worker import ColumnarWorker, pair_ids
from driftjoin.hypercube.heavy import reduce_counts
from driftjoin.hypercube.migration import MemoryChannel, WorkerState
from driftjoin.hypercube.model import BatchSummary, Pair, Role, Side, StreamTuple
from driftjoin.hypercube.planner import RoutingPlanner, batch_counts
from driftjoin.hypercube.simulator import JoinMetrics
from driftjoin.hypercube.table import (
    BatchRouting,
    BicliqueRouting,
    Binding,
    HashRouting,
    RoutingTable,
    ShcRouting,
    batch_order,
)
from driftjoin.hypercube.task import Task


class DistributedJoin:
    """The pipeline of the module docstring over ``p`` workers, one :meth:`step` per batch.

    ``reduce``: workers reduce their counts to Misra-Gries counters (as on Spark) instead of
    sending exact counts. ``keep_pairs``: keep every pair in :attr:`pairs` (False: only count them,
    for outputs too large to hold; :meth:`step` then returns no pairs). ``tables``: a function ``(batch, planner table) -> table`` that
    replaces the planner's decisions (tests: arbitrary placements). ``check``: called with the
    join after every worker's steps 1-4 of a batch, before the batch's copies are processed.
    ``kernel``: the workers' local join, ``"tuple"`` or ``"columnar"`` (module docstring).
    ``seed``: counts of a sample the control plane takes in before the first batch (SHC; the
    Spark operator's ``sample=``: :meth:`~driftjoin.hypercube.planner.RoutingPlanner.seed`), so the
    workers start from its table.
    """

    KERNELS = ("tuple", "columnar")

    def __init__(self, algorithm: str, p: int, *, window: float | None = None, lateness: float = 0.0,
                 behind: int = 1, reduce: bool = True, groups: int = 1, keep_pairs: bool = True, kernel: str = "tuple",
                 tables: Callable[[int, RoutingTable], RoutingTable] | None = None,
                 check: Callable[[DistributedJoin], None] | None = None, seed: BatchSummary | None = None,
                 **shc_options: Any) -> None:
        if algorithm not in ("shc", "phj", "biclique"):
            raise ValueError(f"unknown algorithm {algorithm!r}")
        if kernel not in self.KERNELS:
            raise ValueError(f"kernel={kernel!r}: use one of {self.KERNELS}")
        if seed is not None and algorithm != "shc":
            raise ValueError(f"seed= seeds SHC's control plane; {algorithm} routes by a fixed rule: drop seed= or use 'shc'")
        self.algorithm, self.p, self.behind, self.reduce, self.tables, self.check = algorithm, p, behind, reduce, tables, check
        self.kernel = kernel
        worker = WorkerState if kernel == "tuple" else ColumnarWorker
        self.workers = [worker(w, window, lateness) for w in range(p)]
        self.channel = MemoryChannel()
        self.planner = RoutingPlanner(p, window=window, lateness=lateness, **shc_options) if algorithm == "shc" else None
        start = self.planner.seed(seed) if seed is not None and self.planner is not None else RoutingTable(p)
        self.binding = Binding(start, start)
        self.published = self.bound = self.binding.cur
        self.fixed: BatchRouting | None = (HashRouting(p) if algorithm == "phj"
                                           else BicliqueRouting(p, groups) if algorithm == "biclique" else None)
        self.batch = 0
        self.tuples = 0
        self.counts: dict[int, BatchSummary] = {}
        self.keep_pairs = keep_pairs
        self.pairs: list[Pair] = []
        self.output = 0
        self.produced = [0] * p
        self.wall = 0.0

    # ---- one micro-batch -------------------------------------------------------------------

    def step(self, batch: Sequence[StreamTuple], *, routers: int = 1, hidden: bool = False,
             rnd: random.Random | None = None, replay: bool = False) -> list[Pair]:
        """Run one micro-batch; returns its pairs. ``routers``: how many router tasks share the
        batch (their outputs reach each worker in any order); ``hidden``: the newest published
        table is not visible to this batch's binding; ``replay``: run a failed attempt first
        (with newer tables visible), roll everything back and run the batch again."""
        rnd = rnd or random.Random(self.batch)
        if replay:
            saved = copy.deepcopy({k: v for k, v in self.__dict__.items() if k != "pairs"})
            self._run(batch, routers, False, rnd)
            self.__dict__.update(saved)
        start = time.perf_counter()
        out = self._run(batch, routers, hidden, rnd)
        self.wall += time.perf_counter() - start
        if self.keep_pairs:
            self.pairs += out
        return out

    def _run(self, batch: Sequence[StreamTuple], routers: int, hidden: bool, rnd: random.Random) -> list[Pair]:
        b, p = self.batch, self.p
        side = np.array([int(t.side) for t in batch], dtype=np.int8)
        code_of: dict = {}
        codes = np.array([code_of.setdefault(t.key, len(code_of)) for t in batch], dtype=np.int64)
        uniques = list(code_of)
        low = np.array([t.tid & 0xFFFFFFFFFFFFFFFF for t in batch], dtype=np.uint64)
        ts = np.array([t.ts for t in batch], dtype=np.float64)
        routing = self.fixed or ShcRouting(self.binding)
        # routers: each routes a share of the batch; their copies reach the workers interleaved
        cut = sorted(rnd.sample(range(1, len(batch)), min(routers, len(batch)) - 1)) if len(batch) > 1 else []
        per_worker: list[list[tuple[int, int, int, bool]]] = [[] for _ in range(p)]
        for lo, hi in zip([0, *cut], [*cut, len(batch)]):
            r = routing.route_batch(side[lo:hi], codes[lo:hi], uniques, low[lo:hi])
            for row, task, worker, role, prim in zip((r.row + lo).tolist(), r.task.tolist(), r.worker.tolist(),
                                                    r.role.tolist(), r.primary.tolist()):
                per_worker[worker].append((row, task, role, prim))
        order = np.empty(len(batch), dtype=np.int64)
        order[batch_order(side, ts, low)] = np.arange(len(batch))
        batch_max = float(ts.max()) if len(ts) else None
        for state in self.workers:
            state.begin(b, None if self.fixed else self.binding, self.channel)
        if self.check is not None:
            self.check(self)
        pairs: list[Pair] = []
        parts = []
        for w, state in enumerate(self.workers):
            copies = per_worker[w]
            rnd.shuffle(copies)
            copies.sort(key=lambda c: order[c[0]])
            late = state.late(ts[[c[0] for c in copies]]) if copies else np.zeros(0, dtype=bool)
            on_time = [c for c, x in zip(copies, late) if not x]
            n_late = sum(1 for c, x in zip(copies, late) if x and c[3])
            if self.kernel == "tuple":
                found = state.process(((task, batch[row], Role(role)) for row, task, role, _ in on_time),
                                      (lambda task, tup, sink: pairs.extend(sink)) if self.keep_pairs else None)
                state.end(batch_max, n_late)
            else:
                joined = state.process(_copy_tables(batch, on_time))
                found = joined.count()
                if self.keep_pairs:
                    pairs.extend(pair_ids(joined))
                state.end(batch_max, n_late, found)
            self.produced[w] += found
            self.output += found
            primary = [batch[row] for row, _, _, prim in on_time if prim]
            if self.planner is not None:
                parts.append(self._summary(primary))
        if self.planner is not None:
            self.counts[b] = BatchSummary.merge(parts)
            self._bind(b, hidden)
        self.batch += 1
        self.tuples += len(batch)
        return pairs

    def _summary(self, tuples: list[StreamTuple]) -> BatchSummary:
        counts = batch_counts(np.array([int(t.side) for t in tuples], dtype=np.int8), [t.key for t in tuples],
                              np.array([t.ts for t in tuples]), self.planner.pane_width)
        times = [t.ts for t in tuples]
        lo, hi = (min(times), max(times)) if times else (None, None)
        if self.reduce:
            reduced, totals = reduce_counts(counts, self.planner.k)
            return BatchSummary(reduced, lo, hi, totals)
        return BatchSummary(counts, lo, hi)

    def _bind(self, b: int, hidden: bool) -> None:
        """The plan key's binding for batch ``b + 1`` (made while ``b`` runs), then the control
        plane's folds after ``b`` commits (they become visible to later bindings)."""
        if not hidden:
            self.bound = self.published
        self.binding = Binding(self.bound, self.binding.cur, b + 1)
        for c in sorted(k for k in self.counts if k <= b - self.behind):
            self.planner.fold(c, self.counts.pop(c))
        table = self.planner.table
        if self.tables is not None:
            table = self.tables(b, table)
        if table.version > self.published.version:
            self.published = table

    def restart(self) -> None:
        """Every state through pickle, as a restart from a checkpoint restores it."""
        self.workers = [pickle.loads(pickle.dumps(w)) for w in self.workers]
        if self.planner is not None:
            self.planner = pickle.loads(pickle.dumps(self.planner))

    # ---- checks and metrics ----------------------------------------------------------------

    def tasks(self) -> dict[int, Task]:
        """Every task of every worker (task ids are unique across workers), with its stored tuples."""
        if self.kernel == "tuple":
            return {t: task for w in self.workers for t, task in w.tasks.items()}
        out = {}
        for w in self.workers:
            for t, tuples in w.stored_by_task().items():
                out[t] = Task.from_tuples(t, None, tuples)
        return out

    def metrics(self) -> JoinMetrics:
        """Per-worker load and work as :class:`~driftjoin.hypercube.simulator.JoinMetrics`."""
        stats = self.planner.shc.stats if self.planner is not None else None
        totals = [w.totals for w in self.workers]
        return JoinMetrics(
            algorithm=self.algorithm, p=self.p, tuples=self.tuples, batches=self.batch, output=self.output,
            received=tuple(t["received"] for t in totals), installed=tuple(t["installed"] for t in totals),
            produced=tuple(self.produced), peak_stored=tuple(t["peak_stored"] for t in totals),
            moved=sum(t["installed"] for t in totals),
            promotions=stats.promotions if stats else 0, demotions=stats.demotions if stats else 0,
            doublings=stats.doublings if stats else 0, halvings=stats.halvings if stats else 0,
            tasks_created=stats.tasks_created if stats else 0, wall_seconds=self.wall)


def _copy_tables(batch: Sequence[StreamTuple], copies: list[tuple[int, int, int, bool]]) -> tuple[pa.Table | None, ...]:
    """A worker's copies of a batch as the columnar kernel takes them: one table per side, the
    tuple id as ``tl`` (``tb`` 0)."""
    out = []
    for side in (0, 1):
        mine = [(row, task, role) for row, task, role, _ in copies if batch[row].side == side]
        if not mine:
            out.append(None)
            continue
        tuples = [batch[row] for row, _, _ in mine]
        out.append(pa.table({
            TASK: pa.array([t for _, t, _ in mine], pa.int64()), ROLE: pa.array([r for _, _, r in mine], pa.int8()),
            KEY: pa.array([u.key for u in tuples]), TB: pa.array([0] * len(mine), pa.int64()),
            TL: pa.array([u.tid for u in tuples], pa.int64()), TS: pa.array([u.ts for u in tuples], pa.float64()),
        }))
    return tuple(out)


def stored_placement_violations(table: RoutingTable, tasks: dict[int, Task]) -> list[str]:
    """Stored tuples not held exactly by their line of ``table`` (invariant (I) for ``table``)."""
    holders: dict[tuple[int, Any], set[int]] = {}
    keys: dict[tuple[int, Any], Any] = {}
    for t, task in tasks.items():
        for u in task.stored_tuples():
            holders.setdefault((int(u.side), u.tid), set()).add(t)
            keys[(int(u.side), u.tid)] = u.key
    problems = []
    for (side, tid), found in holders.items():
        expected = set(table.placement(keys[(side, tid)]).holders(Side(side), tid))
        if found != expected:
            problems.append(f"{Side(side).name} tuple {tid} of {keys[(side, tid)]!r} is at {sorted(found)}, "
                            f"expected {sorted(expected)}")
    return problems
