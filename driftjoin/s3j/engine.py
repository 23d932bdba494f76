"""An in-process S3J pipeline over micro-batches: the reference the Spark operators follow.

``S3JEngine.process(batch)`` runs one micro-batch through space partitioning, workset
formulation (one :class:`WorksetFormulation` per space partition) and similarity computation
(one :class:`SimilarityWorker` per worker, worksets routed by an explicit assignment
``(space partition, local workset) -> worker``; new worksets go to the worker of the space
partition that created them, section 7.5). The Spark adapter runs the same objects inside
``transformWithStateInPandas``; this class runs them in one process for tests and benchmarks.
Batches are window copies (:func:`driftjoin.s3j.records.expand`); ``windows`` says how a
window accepts a pair (an interval join's copies carry their times and ghost flags).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from driftjoin.distance import Metric
from driftjoin.s3j.baselines import ALGORITHMS, BruteForceRouter, ClusterJoinRouter
from driftjoin.s3j.compute import Pairs, SimilarityWorker, WorksetCounters
from driftjoin.s3j.ids import global_workset
from driftjoin.s3j.records import Records
from driftjoin.s3j.routing import WorksetRouter
from driftjoin.s3j.space import SpacePartitioner
from driftjoin.s3j.workset import WorksetFormulation
from driftjoin.windows import Windowing

@dataclass
class BatchStats:
    """What one micro-batch did: inputs, copies, comparisons and pairs, per worker and workset."""

    records: int = 0
    space_copies: int = 0
    memberships: int = 0
    comparisons: int = 0
    #: record-to-centroid distances (space/virtual partitions and, by a linear scan, worksets):
    #: the part of the paper's comparisons count that is not record-to-record
    centroid_comparisons: int = 0
    pairs: int = 0
    worker_comparisons: dict[int, int] = field(default_factory=dict)
    worker_pairs: dict[int, int] = field(default_factory=dict)
    worker_seconds: dict[int, float] = field(default_factory=dict)
    worksets: WorksetCounters = field(default_factory=WorksetCounters)


class S3JEngine:
    """Space partitioning + workset formulation + similarity computation, in one process."""

    def __init__(
        self,
        centroids: np.ndarray,
        metric: Metric,
        threshold: float,
        *,
        self_join: bool,
        dim: int,
        algorithm: str = "s3j",
        parallelism: int | None = None,
        windows: Windowing | None = None,
    ) -> None:
        """``centroids``: one per worker for S3J; the virtual partition centroids for ClusterJoin;
        ``windows``: the join's windowing (None: tumbling windows given by the records)."""
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {', '.join(ALGORITHMS)}, got {algorithm!r}")
        self.metric = metric
        self.threshold = threshold
        self.algorithm = algorithm
        self.space = SpacePartitioner(centroids, metric, metric.partition_threshold(threshold))
        self.p = parallelism or self.space.n_partitions
        self.router = (ClusterJoinRouter(centroids, metric, threshold, self.p) if algorithm == "clusterjoin"
                       else BruteForceRouter() if algorithm == "bruteforce" else None)
        self.formulation = ([WorksetFormulation(metric, threshold, dim, windows) for _ in range(self.space.n_partitions)]
                            if self.router is None else [])
        self.workers = [SimilarityWorker(metric, threshold, self_join, windows) for _ in range(self.p)]
        self.routers = [WorksetRouter(j) for j in range(len(self.formulation))]
        self._version = 0

    def set_assignment(self, assignment: dict[int, int], splits: dict[int, int] | None = None) -> None:
        """Apply a new workset -> worker assignment (and splits) from the next batch on."""
        self._version += 1
        for r in self.routers:
            r.update(self._version, assignment, splits or {})

    def expire_before(self, window: int) -> None:
        for f in self.formulation:
            f.expire_before(window)
        for r in self.routers:
            r.expire_before(window)
        for w in self.workers:
            w.expire_before(window)

    def process(self, batch: Records) -> tuple[Pairs, BatchStats]:
        """Run one micro-batch; returns its pairs and statistics."""
        stats = BatchStats(records=len(batch))
        per_worker: dict[int, list[tuple[Records, np.ndarray, np.ndarray, np.ndarray]]] = {}
        if self.router is not None:
            m, owner = self.router.route(batch)
            stats.space_copies = stats.memberships = len(m)
            if self.algorithm == "clusterjoin":
                stats.centroid_comparisons = len(batch) * self.router.space.n_partitions
            for w in np.unique(owner):
                k = np.nonzero(owner == w)[0]
                per_worker.setdefault(int(w), []).append((m.records.take(m.row[k]), m.workset[k], m.role[k], np.ones(len(k), bool)))
            return self._compute(per_worker, stats, batch)
        routing = self.space.route(batch.vec)
        stats.space_copies = routing.copies
        stats.centroid_comparisons = len(batch) * self.space.n_partitions
        for j in range(self.space.n_partitions):
            sel = np.nonzero(routing.partition == j)[0]
            if len(sel) == 0:
                continue
            part = batch.take(routing.row[sel])
            m = self.formulation[j].formulate(part, routing.outer[sel])
            stats.memberships += len(m)
            stats.centroid_comparisons += m.centroid_comparisons
            rec = m.records.take(m.row)
            routed = self.routers[j].route(global_workset(j, m.workset), m.role, rec.window, rec.id)
            for w in np.unique(routed.worker):
                k = np.nonzero(routed.worker == w)[0]
                per_worker.setdefault(int(w), []).append(
                    (rec.take(routed.row[k]), routed.gid[k], routed.role[k], routed.store[k]))
        return self._compute(per_worker, stats, batch)

    def _compute(self, per_worker: dict[int, list], stats: BatchStats, batch: Records) -> tuple[Pairs, BatchStats]:
        out: list[Pairs] = []
        for w, parts in sorted(per_worker.items()):
            rec = Records.concat([p[0] for p in parts])
            gids = np.concatenate([p[1] for p in parts])
            roles = np.concatenate([p[2] for p in parts])
            store = np.concatenate([p[3] for p in parts])
            before = sum(stats.worksets.comparisons.values())
            started = time.perf_counter()
            pairs = self.workers[w].add(rec, gids, roles, stats.worksets, store=store)
            stats.worker_seconds[w] = time.perf_counter() - started
            stats.worker_comparisons[w] = sum(stats.worksets.comparisons.values()) - before
            stats.worker_pairs[w] = len(pairs)
            out.append(pairs)
        result = Pairs.concat(out, batch.id.dtype)
        stats.comparisons = sum(stats.worksets.comparisons.values())
        stats.pairs = len(result)
        return result, stats
