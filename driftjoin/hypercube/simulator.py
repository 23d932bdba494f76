"""A single-process execution of a dispatcher and its tasks, with per-worker metrics.

:class:`Simulator` is the reference for the Spark adapter: for each micro-batch it takes the
dispatcher's :class:`BatchPlan`, applies the reconfiguration to the task states, and feeds every
task its routed copies in batch order. :func:`run_join` runs a whole stream through one of the
three algorithms.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass
from itertools import islice
from typing import Any

from driftjoin.hypercube.baselines import JoinBiclique, ParallelHashJoin
from driftjoin.hypercube.dispatcher import Dispatcher
from driftjoin.hypercube.model import BatchPlan, Pair, Reconfiguration, StreamTuple
from driftjoin.hypercube.shc import StreamingHyperCube
from driftjoin.hypercube.task import Task, apply_moves

ALGORITHMS: dict[str, type[Dispatcher]] = {
    "shc": StreamingHyperCube,
    "phj": ParallelHashJoin,
    "biclique": JoinBiclique,
}


@dataclass(frozen=True)
class JoinMetrics:
    """What a run cost, per worker (tuples) and in total.

    ``received``: routed copies a worker processed; ``installed``: tuples it received by state
    migration; ``produced``: pairs it reported; ``peak_stored``: the most tuples it held at the
    end of a batch. A worker's *load* is ``received + installed`` (the HyperCube load measure),
    its *work* is load plus pairs produced. ``moved`` counts every tuple copy made by migration.
    """

    algorithm: str
    p: int
    tuples: int
    batches: int
    output: int
    received: tuple[int, ...]
    installed: tuple[int, ...]
    produced: tuple[int, ...]
    peak_stored: tuple[int, ...]
    moved: int
    promotions: int
    demotions: int
    doublings: int
    halvings: int
    tasks_created: int
    wall_seconds: float

    @property
    def load(self) -> tuple[int, ...]:
        return tuple(r + i for r, i in zip(self.received, self.installed))

    @property
    def max_load(self) -> int:
        return max(self.load)

    @property
    def mean_load(self) -> float:
        return sum(self.load) / self.p

    @property
    def max_work(self) -> int:
        return max(ld + o for ld, o in zip(self.load, self.produced))

    @property
    def max_stored(self) -> int:
        return max(self.peak_stored)

    @property
    def mean_stored(self) -> float:
        return sum(self.peak_stored) / self.p

    @property
    def output_rate(self) -> float:
        """Pairs per second of simulation wall time."""
        return self.output / self.wall_seconds if self.wall_seconds > 0 else 0.0

    def summary(self) -> dict[str, Any]:
        """The scalar metrics, JSON-ready."""
        out = {k: v for k, v in asdict(self).items() if not isinstance(v, tuple)}
        for name in ("max_load", "mean_load", "max_work", "max_stored", "mean_stored", "output_rate"):
            out[name] = getattr(self, name)
        return out


class Simulator:
    """Tasks in one process driven by a dispatcher, one micro-batch per :meth:`step`."""

    def __init__(self, dispatcher: Dispatcher, *, collect_pairs: bool = True) -> None:
        self.dispatcher = dispatcher
        self.tasks: dict[int, Task] = {}
        self.pairs: list[Pair] | None = [] if collect_pairs else None
        self.output = 0
        self.moved = 0
        self.tuples = 0
        self.batches = 0
        p = dispatcher.p
        self._worker: dict[int, int] = {}
        self._done = {"received": [0] * p, "installed": [0] * p, "produced": [0] * p}
        self._peak_stored = [0] * p
        self._wall = 0.0

    def task(self, task_id: int) -> Task:
        """The state of a task, created empty on first use."""
        task = self.tasks.get(task_id)
        if task is None:
            task = self.tasks[task_id] = Task(task_id, self.dispatcher.window)
            self._worker[task_id] = self.dispatcher.worker_of(task_id)
        return task

    def step(self, batch: Sequence[StreamTuple]) -> int:
        """Plan and execute one micro-batch; returns the number of pairs it reported."""
        start = time.perf_counter()
        plan = self.dispatcher.plan(batch)
        self._wall += time.perf_counter() - start
        return self.execute(plan, len(batch))

    def execute(self, plan: BatchPlan, n_tuples: int) -> int:
        """Apply a plan's reconfiguration, then process its routed copies in order."""
        start = time.perf_counter()
        self._reconfigure(plan.reconfiguration)
        sink, tasks, found = self.pairs, self.tasks, 0
        for task_id, tup, role in plan.routes:
            task = tasks.get(task_id) or self.task(task_id)
            found += task.process(tup, role, sink)
        self.output += found
        self.tuples += n_tuples
        self.batches += 1
        stored = [0] * self.dispatcher.p
        for task_id, task in tasks.items():
            stored[self._worker[task_id]] += task.stored
        self._peak_stored = [max(a, b) for a, b in zip(self._peak_stored, stored)]
        self._wall += time.perf_counter() - start
        return found

    def _reconfigure(self, reconf: Reconfiguration) -> None:
        if reconf.evict_before is not None:
            for task in self.tasks.values():
                task.evict(reconf.evict_before)
        for task_id in reconf.created:
            self.task(task_id)  # binds the task to its worker while the dispatcher knows it
        self.moved += apply_moves(reconf.moves, self.task)
        for task_id in reconf.released:
            task = self.tasks.pop(task_id, None)
            if task is None:
                continue
            if task.stored:
                raise RuntimeError(f"released task {task_id} still holds {task.stored} tuples")
            self._fold(task_id, task)

    def _fold(self, task_id: int, task: Task) -> None:
        w = self._worker.pop(task_id)
        self._done["received"][w] += task.received
        self._done["installed"][w] += task.installed
        self._done["produced"][w] += task.output

    def metrics(self) -> JoinMetrics:
        totals = {k: list(v) for k, v in self._done.items()}
        for task_id, task in self.tasks.items():
            w = self._worker[task_id]
            totals["received"][w] += task.received
            totals["installed"][w] += task.installed
            totals["produced"][w] += task.output
        stats = self.dispatcher.stats
        return JoinMetrics(
            algorithm=self.dispatcher.name,
            p=self.dispatcher.p,
            tuples=self.tuples,
            batches=self.batches,
            output=self.output,
            received=tuple(totals["received"]),
            installed=tuple(totals["installed"]),
            produced=tuple(totals["produced"]),
            peak_stored=tuple(self._peak_stored),
            moved=self.moved,
            promotions=stats.promotions,
            demotions=stats.demotions,
            doublings=stats.doublings,
            halvings=stats.halvings,
            tasks_created=stats.tasks_created,
            wall_seconds=self._wall,
        )


@dataclass(frozen=True)
class JoinResult:
    """The pairs of a run (None when only counted) and its metrics."""

    pairs: list[Pair] | None
    metrics: JoinMetrics


def make_dispatcher(algorithm: str, p: int, **options: Any) -> Dispatcher:
    """``"shc"``, ``"phj"`` or ``"biclique"`` over ``p`` workers; options go to its constructor."""
    try:
        cls = ALGORITHMS[algorithm]
    except KeyError:
        raise ValueError(f"unknown algorithm {algorithm!r}; expected one of {sorted(ALGORITHMS)}") from None
    return cls(p, **options)


def run_join(
    stream: Iterable[StreamTuple],
    algorithm: str = "shc",
    p: int = 8,
    *,
    batch_size: int = 256,
    collect_pairs: bool = True,
    **options: Any,
) -> JoinResult:
    """Join a whole stream in micro-batches of ``batch_size`` tuples (in stream order).

    Full-stream join (``window=None``): every ``(r.tid, s.tid)`` with ``r.key == s.key``. Sliding
    window join (``window=W``): those with ``|r.ts - s.ts| <= W`` as well. In both, a pair is
    reported exactly once, in the batch of the later of its two tuples. Window joins need every
    batch's timestamps to be at least the largest timestamp of the earlier batches minus
    ``lateness`` (else :class:`LateTupleError`).

    ``options``: ``window``, ``lateness`` for every algorithm; ``epsilon``, ``panes``,
    ``min_heavy``, ``cap`` for SHC; ``groups`` for Join-Biclique.
    """
    if batch_size < 1:
        raise ValueError("batch_size must be >= 1")
    sim = Simulator(make_dispatcher(algorithm, p, **options), collect_pairs=collect_pairs)
    it = iter(stream)
    while batch := list(islice(it, batch_size)):
        sim.step(batch)
    return JoinResult(sim.pairs, sim.metrics())
