"""An in-process grid join over micro-batches: the reference the Spark operators follow.

``GridEngine.process(batch)`` routes a batch with the layout (stateless, like the Spark
router) and runs each worker's :class:`~driftjoin.grid.worker.GridWorker` on its copies.
Records carry their vectors *raw* (as the user gave them, float32 or float64): workers
prepare them for the metric in float64. Batches are window copies
(:func:`driftjoin.s3j.records.expand`); ``windows`` says how a window accepts a pair.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from driftjoin.distance import Metric
from driftjoin.grid.layout import GridLayout, choose_layout
from driftjoin.grid.worker import CellCounters, GridWorker
from driftjoin.s3j.compute import Pairs
from driftjoin.s3j.records import Records
from driftjoin.windows import Windowing


@dataclass
class GridBatchStats:
    """What one micro-batch did: records, copies, products screened, candidates, pairs."""

    records: int = 0
    copies: int = 0
    comparisons: int = 0
    candidates: int = 0
    pairs: int = 0
    worker_seconds: dict[int, float] = field(default_factory=dict)
    worker_comparisons: dict[int, int] = field(default_factory=dict)


class GridEngine:
    """Grid routing + per-worker block joins, in one process."""

    def __init__(self, metric: Metric, threshold: float, *, self_join: bool, parallelism: int,
                 layout: GridLayout | None = None, block_bytes: int | None = None,
                 windows: Windowing | None = None) -> None:
        self.layout = layout or choose_layout(parallelism, self_join)
        self.workers = [GridWorker(self.layout, w, metric, threshold, block_bytes=block_bytes, windows=windows)
                        for w in range(self.layout.parallelism)]

    def expire_before(self, window: int) -> None:
        for w in self.workers:
            w.expire_before(window)

    def process(self, batch: Records) -> tuple[Pairs, GridBatchStats]:
        stats = GridBatchStats(records=len(batch))
        row, worker, bucket = self.layout.route(batch.id, batch.side)
        stats.copies = len(row)
        out = []
        for w in np.unique(worker):
            k = np.nonzero(worker == w)[0]
            counters = CellCounters()
            started = time.perf_counter()
            out.append(self.workers[int(w)].add(batch.take(row[k]), bucket[k], counters))
            stats.worker_seconds[int(w)] = time.perf_counter() - started
            stats.worker_comparisons[int(w)] = sum(counters.comparisons.values())
            stats.candidates += sum(counters.candidates.values())
        pairs = Pairs.concat(out, batch.id.dtype)
        stats.comparisons = sum(stats.worker_comparisons.values())
        stats.pairs = len(pairs)
        return pairs, stats
