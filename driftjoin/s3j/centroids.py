"""Nearest-centroid and radius queries over workset centroids (S3J section 7, steps 2 to 5).

Workset formulation asks, for every record, which workset centroid is closest (steps 2 to 4)
and which centroids lie within ``2t`` (step 5). Asked densely, that is O(records x worksets)
per batch: quadratic when a static DataFrame arrives as one batch (10^5 2-D records took 475 s
of formulation). A k-d tree (``scipy.spatial.cKDTree``) over the centroids, in the metric's key
space (:meth:`driftjoin.distance.Metric.pairwise_key`: Minkowski p = 2 for Euclidean and for the
angular chord, 1 for Manhattan, infinity for Chebyshev) answers both in about O(log k) per record.

The tree only proposes candidates; every decision is taken on the distance numpy computes
(:meth:`~driftjoin.distance.Metric.rowwise_key`), so the memberships are those of the dense
computation: radius queries ask the tree with a relative margin and then filter exactly, and a
nearest query recomputes the distance of the centroid the tree returns. Above ``TREE_MAX_DIM``
dimensions a k-d tree prunes little and the dense path (in row blocks, bounded memory) is used.
The algorithm is the paper's; only the search for centroids is indexed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from driftjoin.distance import Metric

if TYPE_CHECKING:
    from scipy.spatial import cKDTree

#: Above this dimension the dense search is used (a k-d tree prunes little there).
TREE_MAX_DIM = 16
#: Relative margin of the tree's radius query over the exact radius (its rounding differs).
TREE_MARGIN = 1e-7
#: Elements of one dense distance block (rows x centroids), bounding memory.
DENSE_BLOCK = 4_000_000


def use_tree(dim: int) -> bool:
    return dim <= TREE_MAX_DIM


def build(metric: Metric, centroids: np.ndarray) -> cKDTree | None:
    """A k-d tree over ``centroids`` (None when empty or when the dense path is better)."""
    if len(centroids) == 0 or not use_tree(centroids.shape[1]):
        return None
    from scipy.spatial import cKDTree  # imported on first use: a Python worker that never builds a tree skips it

    return cKDTree(centroids, balanced_tree=False, compact_nodes=False)


def nearest(metric: Metric, points: np.ndarray, centroids: np.ndarray,
            tree: cKDTree | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per point, the index of the closest centroid and its key distance (inf if none)."""
    n = len(points)
    if len(centroids) == 0 or n == 0:
        return np.full(n, np.inf), np.full(n, -1, dtype=np.int64)
    if tree is not None:
        _, idx = tree.query(points, k=1, p=metric.minkowski_p)
        idx = idx.astype(np.int64)
        return metric.rowwise_key(points, centroids[idx]), idx
    best = np.empty(n, dtype=np.int64)
    best_d = np.empty(n)
    for lo, hi in _row_blocks(n, len(centroids)):
        d = metric.pairwise_key(points[lo:hi], centroids)
        best[lo:hi] = np.argmin(d, axis=1)
        best_d[lo:hi] = d[np.arange(hi - lo), best[lo:hi]]
    return best_d, best


def within(metric: Metric, points: np.ndarray, centroids: np.ndarray, radius: float,
           tree: cKDTree | None = None) -> tuple[np.ndarray, np.ndarray]:
    """All (point row, centroid) with key distance ``<= radius``, ordered by row then centroid."""
    if len(centroids) == 0 or len(points) == 0:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    if tree is not None:
        found = tree.query_ball_point(points, radius * (1.0 + TREE_MARGIN), p=metric.minkowski_p)
        counts = np.fromiter((len(f) for f in found), dtype=np.int64, count=len(found))
        row = np.repeat(np.arange(len(points), dtype=np.int64), counts)
        col = np.concatenate([np.asarray(f, dtype=np.int64) for f in found]) if counts.sum() else np.zeros(0, np.int64)
        keep = metric.rowwise_key(points[row], centroids[col]) <= radius
        row, col = row[keep], col[keep]
        order = np.lexsort((col, row))
        return row[order], col[order]
    rows, cols = [], []
    for lo, hi in _row_blocks(len(points), len(centroids)):
        r, c = np.nonzero(metric.pairwise_key(points[lo:hi], centroids) <= radius)
        rows.append(r + lo)
        cols.append(c)
    return np.concatenate(rows).astype(np.int64), np.concatenate(cols).astype(np.int64)


class GrowingCentroids:
    """Centroids created during one batch, searchable while they are being created.

    A k-d tree over the older ones plus a short unindexed tail (searched densely); the tree is
    rebuilt over all of them when the tail reaches ``TAIL`` centroids.
    """

    TAIL = 512

    def __init__(self, metric: Metric, dim: int) -> None:
        self.metric = metric
        self.points = np.zeros((0, dim))
        self._tree: cKDTree | None = None
        self._indexed = 0

    def __len__(self) -> int:
        return len(self.points)

    def add(self, vectors: np.ndarray) -> None:
        self.points = np.vstack([self.points, vectors])
        tail = len(self.points) - self._indexed
        if use_tree(self.points.shape[1]) and tail >= self.TAIL:
            self._tree, self._indexed = build(self.metric, self.points), len(self.points)

    def nearest(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Closest of the centroids added so far (key distance, index), inf/-1 if none."""
        d, idx = nearest(self.metric, points, self.points[: self._indexed], self._tree)
        if len(self.points) > self._indexed:
            d_t, idx_t = nearest(self.metric, points, self.points[self._indexed :])
            closer = d_t < d
            d, idx = np.where(closer, d_t, d), np.where(closer, idx_t + self._indexed, idx)
        return d, idx


def _row_blocks(n_rows: int, n_cols: int):
    step = max(1, DENSE_BLOCK // max(1, n_cols))
    for lo in range(0, n_rows, step):
        yield lo, min(n_rows, lo + step)
