"""Space partitioning (S3J section 6): one centroid per worker, inner and outer partitions.

A record belongs to the inner partition of its closest centroid (Definition 1) and to the
outer partition of every other centroid ``c_j`` with ``dist(r, c_j) <= dist(r, c_i) + 2t``
(Criterion 1). To evaluate each cross-partition pair once, S3J adopts the ClusterJoin /
MR-MAPSS routing criterion: for two partitions i and j only one direction of replication is
kept. We use the parity rule of MR-MAPSS, which spreads the directions evenly: records of
I_i are copied to O_j iff ``(i < j) == ((i + j) % 2 == 0)``.

Correctness: if ``dist(r, s) <= t`` with r in I_i and s in I_j, then by the triangle inequality
``dist(r, c_j) <= t + dist(s, c_j) <= t + dist(s, c_i) <= 2t + dist(r, c_i)``, so r satisfies
Criterion 1 for c_j and symmetrically s for c_i; the routing rule keeps exactly one of the two
copies, so the pair is met in exactly one space partition.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from driftjoin.distance import BOUND_SLACK, Metric


def outer_allowed(i: np.ndarray | int, j: np.ndarray | int) -> np.ndarray | bool:
    """MR-MAPSS routing: may a record of inner partition ``i`` be copied to outer partition ``j``?"""
    i = np.asarray(i)
    j = np.asarray(j)
    return (i < j) == ((i + j) % 2 == 0)


def random_centroids(n: int, dim: int, seed: int, low: float = -1.0, high: float = 1.0) -> np.ndarray:
    """Space-partition centroids drawn at random over the expected space (section 6.2)."""
    rng = np.random.default_rng(seed)
    return rng.uniform(low, high, size=(n, dim))


@dataclass(frozen=True)
class SpaceRouting:
    """Where each record of a batch goes: row index, partition, and whether it is an outer copy."""

    row: np.ndarray
    partition: np.ndarray
    outer: np.ndarray

    @property
    def copies(self) -> int:
        return len(self.row)


class SpacePartitioner:
    """Routes records to space partitions. Stateless given its centroids (prepared vectors)."""

    def __init__(self, centroids: np.ndarray, metric: Metric, threshold: float) -> None:
        self.metric = metric.partition_metric
        self.threshold = threshold
        self.centroids = metric.prepare(np.asarray(centroids, dtype=np.float64))

    @property
    def n_partitions(self) -> int:
        return len(self.centroids)

    def route(self, vectors: np.ndarray) -> SpaceRouting:
        """Inner partition of each row plus its outer copies (Criterion 1 + routing rule)."""
        n = len(vectors)
        if n == 0:
            empty = np.zeros(0, dtype=np.int64)
            return SpaceRouting(empty, empty, np.zeros(0, dtype=bool))
        dist = self.metric.pairwise(vectors, self.centroids)
        inner = np.argmin(dist, axis=1)
        d_min = dist[np.arange(n), inner]
        bound = (d_min + 2.0 * self.threshold) * (1.0 + BOUND_SLACK)
        parts = np.arange(self.n_partitions)
        member = dist <= bound[:, None]
        member &= parts[None, :] != inner[:, None]
        member &= outer_allowed(inner[:, None], parts[None, :])
        out_rows, out_parts = np.nonzero(member)
        rows = np.concatenate([np.arange(n), out_rows])
        partition = np.concatenate([inner, out_parts])
        outer = np.concatenate([np.zeros(n, dtype=bool), np.ones(len(out_rows), dtype=bool)])
        order = np.argsort(rows, kind="stable")
        return SpaceRouting(rows[order], partition[order].astype(np.int64), outer[order])
