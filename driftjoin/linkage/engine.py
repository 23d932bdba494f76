"""An in-process runtime of a link over micro-batches (tests, benchmarks, the reference the Spark
operator follows): window copies, late records, routing, per-worker joins, the window clock.

Example::

    >>> from driftjoin.linkage.rules import check_rules
    >>> from driftjoin.linkage.choose import build_core
    >>> from driftjoin.linkage.records import Fields, link_records
    >>> rs = check_rules([{"name": ("levenshtein", 1)}], {"name": "string"})
    >>> core, _ = build_core(rs, n_workers=2, self_join=True, windows=Windowing.unbounded())
    >>> LinkEngine(core).process(link_records([1, 2], Fields.build(rs, {"name": ["kitten", "sitten"]}))).tuples()
    [(1, 2, 0, 0)]
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from driftjoin.linkage.plan import LinkCore
from driftjoin.linkage.records import LinkPairs
from driftjoin.linkage.worker import LinkWorker
from driftjoin.metric.records import MetricRecords, expand
from driftjoin.windows import Windowing


class LinkEngine:
    """Runs a :class:`LinkCore` batch by batch with the clock of :mod:`driftjoin.windows`
    (frontier = largest time seen before the batch minus ``lateness`` ticks)."""

    def __init__(self, core: LinkCore, lateness: int = 0,
                 version_of: Callable[[np.ndarray], np.ndarray] | None = None, bounds: bool = True) -> None:
        self.core = core
        #: the workers test the count bounds first (:class:`~driftjoin.linkage.worker.LinkWorker`)
        self.bounds = bounds
        #: the hot-key decision version of each window (default: version 0 everywhere)
        self.version_of = version_of
        self.windows: Windowing = core.windows
        self.lateness = int(lateness)
        self.workers: dict[int, LinkWorker] = {}
        self.seen: int | None = None
        #: records refused as late, by id
        self.late: list = []

    def process(self, batch: MetricRecords) -> LinkPairs:
        """Join one micro-batch of records (window 0, no ghosts: they are assigned here)."""
        frontier = None if self.seen is None else self.seen - self.lateness
        late = self.windows.late(batch.time, frontier)
        if late.any():
            self.late += batch.id[late].tolist()
            batch = batch.take(np.nonzero(~late)[0])
        copies = expand(batch, self.windows)
        if self.version_of is not None:
            copies.value.version = np.asarray(self.version_of(copies.window), np.int64)
        row, worker, _ = self.core.route(copies)
        out = []
        for w in np.unique(worker).tolist():
            sel = np.nonzero(worker == w)[0]
            if w not in self.workers:
                self.workers[w] = LinkWorker(self.core, w, self.bounds)
            out.append(self.workers[w].add(copies.take(row[sel])))
        if len(batch):
            top = int(batch.time.max())
            self.seen = top if self.seen is None else max(self.seen, top)
            first = self.windows.first_open(self.seen - self.lateness)
            if first is not None:
                for worker in self.workers.values():
                    worker.expire_before(first)
        return LinkPairs.concat(out, len(self.core.ruleset.measures), batch.id.dtype)
