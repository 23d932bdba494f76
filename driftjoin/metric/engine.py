"""An in-process runtime of a metric strategy over micro-batches (tests, benchmarks, the reference a
Spark operator follows): window copies, late records, routing, per-worker joins, the clock.

Example::

    >>> from driftjoin.metric.spaces import LevenshteinSpace
    >>> from driftjoin.metric.s3j import S3JStrategy
    >>> from driftjoin.windows import Windowing
    >>> sp = LevenshteinSpace()
    >>> s3j = S3JStrategy(sp, 1, sp.prepare(["kitten"]), self_join=True, windows=Windowing.interval(10))
    >>> eng = MetricEngine(s3j)
    >>> eng.process(MetricRecords.of([1, 2], sp.prepare(["kitten", "sitten"]), [0, 5])).tuples()
    [(1, 2, 0)]
"""

from __future__ import annotations

import numpy as np

from driftjoin.metric.base import Strategy, WorkerJoin
from driftjoin.metric.records import MetricPairs, MetricRecords, expand


class MetricEngine:
    """Runs ``strategy`` batch by batch with the clock of :mod:`driftjoin.windows`
    (frontier = largest time seen before the batch minus ``lateness`` ticks)."""

    def __init__(self, strategy: Strategy, lateness: int = 0) -> None:
        self.strategy = strategy
        self.windows = strategy.windows
        self.lateness = int(lateness)
        self.workers: dict[int, WorkerJoin] = {}
        self.seen: int | None = None
        #: records refused as late, by id
        self.late: list = []
        #: distance calls the router made (the workers count theirs in their stats)
        self.router_calls = 0

    @property
    def calls(self) -> int:
        """Calls of a user metric the join made so far: the router's and every worker's."""
        return self.router_calls + sum(w.stats.calls for w in self.workers.values())

    def process(self, batch: MetricRecords) -> MetricPairs:
        """Join one micro-batch of records (window 0, no ghosts: they are assigned here)."""
        frontier = None if self.seen is None else self.seen - self.lateness
        late = self.windows.late(batch.time, frontier)
        if late.any():
            self.late += batch.id[late].tolist()
            batch = batch.take(np.nonzero(~late)[0])
        copies = expand(batch, self.windows)
        routing = self.strategy.route(copies)
        if routing.calls is not None:
            self.router_calls += int(routing.calls.sum())
        out = []
        for w in np.unique(routing.worker).tolist():
            sel = np.nonzero(routing.worker == w)[0]
            worker = self.workers.get(w)
            if worker is None:
                worker = self.workers[w] = self.strategy.worker(w)
            payload = None if routing.payload is None else routing.payload[sel]
            out.append(worker.add_routed(copies.take(routing.row[sel]), routing.role[sel], payload))
        if len(batch):
            top = int(batch.time.max())
            self.seen = top if self.seen is None else max(self.seen, top)
            first = self.windows.first_open(self.seen - self.lateness)
            if first is not None:
                for worker in self.workers.values():
                    worker.expire_before(first)
        return MetricPairs.concat(out, batch.id.dtype)
