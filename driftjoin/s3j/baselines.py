"""The baselines of the S3J paper on the same pipeline: ClusterJoin and brute force.

**ClusterJoin adapted to streams** (S3J paper section 9.4): the inner/outer paradigm of
section 2 over ``V`` virtual partitions (default 500) whose centroids are chosen like the space
partition centroids (random over the expected space), assigned round-robin to the workers. A
record is an inner member of its closest virtual partition and an outer member of every other
one that satisfies Criterion 1 and the routing rule. Inner x inner and inner x outer pairs are
compared (no t/2 shortcut); outer x outer never. In the similarity worker's terms an inner
member is an *outlier* (compared with everyone) and an outer member an *outer* record.

**Brute force**: every record is an inner member of one partition on worker 0 and every pair of
the window is compared: the oracle, run through the same pipeline and metrics (small data only).

Both are stateless routings (no workset formulation), so on Spark they need only the
similarity-computation operator.
"""

from __future__ import annotations

import numpy as np

from driftjoin.distance import Metric
from driftjoin.s3j.records import Records
from driftjoin.s3j.space import SpacePartitioner
from driftjoin.s3j.workset import OUTER, OUTLIER, Memberships

ALGORITHMS = ("s3j", "clusterjoin", "bruteforce")


class ClusterJoinRouter:
    """Routes records to ClusterJoin's virtual partitions (global workset id = partition index)."""

    def __init__(self, centroids: np.ndarray, metric: Metric, threshold: float, parallelism: int) -> None:
        self.space = SpacePartitioner(centroids, metric, metric.partition_threshold(threshold))
        self.parallelism = parallelism

    def route(self, batch: Records) -> tuple[Memberships, np.ndarray]:
        """Memberships of a batch and the worker of each membership."""
        r = self.space.route(batch.vec)
        role = np.where(r.outer, OUTER, OUTLIER).astype(np.int8)
        return Memberships(batch, r.row, r.partition, role), r.partition % self.parallelism


class BruteForceRouter:
    """Every record in one partition on worker 0: all pairs compared."""

    def route(self, batch: Records) -> tuple[Memberships, np.ndarray]:
        n = len(batch)
        zeros = np.zeros(n, dtype=np.int64)
        return Memberships(batch, np.arange(n), zeros, np.full(n, OUTLIER, dtype=np.int8)), zeros
