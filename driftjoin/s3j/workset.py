"""Workset formulation (S3J section 7), the state of one space partition.

For every record routed to space partition j (steps 1 to 5 of section 7):

1. inner vs outer partition: records that are outer copies only join outer sets (step 5);
2. an inner record joins the inner set of the workset whose centroid is within ``t/2``
   (Definition 8; centroids are more than ``t`` apart, so there is at most one);
3. otherwise, if it is more than ``t`` from every centroid, it becomes the centroid of a new
   workset (Criterion 2), whose id is the next integer;
4. otherwise it is an outlier (Definition 9) of the workset with the closest centroid;
5. outer sets (Definition 10, ``t/2 < dist <= 2t``): an inner record joins the outer set of
   every workset whose id is *smaller* than its own workset's id (the routing criterion); an
   outer-partition record joins the outer set of every workset within ``2t``. Outer-partition
   records are kept for the rest of their window so that a workset created later still meets
   them (the last paragraph of 7.5).

Records are processed in arrival order; the first four steps are vectorised against the
centroids that existed before the batch and only records that are more than ``t/2`` from all
of them go through the sequential path (they may meet a centroid created earlier in the batch).

Correctness (used by the tests): a pair (x, y) with ``dist <= t`` and own worksets a <= b is
met exactly once, in workset a: if a == b both are inner/outlier members of a; if a < b, y is
within ``dist(y, x) + dist(x, c_a) <= 2t`` of ``c_a`` so y is in a's outer set, and x is never
in b's outer set (a < b). An outer-partition record r and an inner record y of workset b meet
only in b (outer x outer pairs are never compared).

Worksets persist across windows; the outer buffer holds records of open windows only. Records
are window copies (:mod:`driftjoin.windows`): formulation does not look at windows, and keeps a
copy's time and ghost flag only for an interval join, whose pairs are accepted on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from driftjoin.distance import BOUND_SLACK, Metric
from driftjoin.s3j import centroids
from driftjoin.s3j.records import Records, keeps_times
from driftjoin.windows import Windowing

if TYPE_CHECKING:  # scipy is imported when a tree is built (routers never build one)
    from scipy.spatial import cKDTree

INNER = 0
OUTLIER = 1
OUTER = 2
#: Records that go through the sequential part of steps 3-4 together (see ``_assign_inner``).
SEQUENTIAL_BLOCK = 256


@dataclass
class Memberships:
    """Workset memberships produced by one formulation step.

    ``records`` holds every record referenced; membership k says that ``records[row[k]]`` is a
    new member of local workset ``workset[k]`` with role ``role[k]``.
    """

    records: Records
    row: np.ndarray
    workset: np.ndarray
    role: np.ndarray
    #: record-to-centroid distances a linear scan over the centroids computes for this step
    #: (what the paper's comparisons ratio includes; the k-d tree computes far fewer)
    centroid_comparisons: int = 0

    def __len__(self) -> int:
        return len(self.row)


class WorksetFormulation:
    """The state of one space partition: workset centroids and the outer buffer.

    ``windows``: the join's windowing (None: tumbling); records keep their times only for an
    interval join.
    """

    def __init__(self, metric: Metric, threshold: float, dim: int, windows: Windowing | None = None) -> None:
        self.metric = metric.partition_metric
        self.t = metric.partition_threshold(threshold)
        self.dim = dim
        self.keep_times = keeps_times(windows)
        self.centroids = np.zeros((0, dim), dtype=np.float64)
        self.outer_buffer = Records.empty(dim, timed=self.keep_times)
        self._index: tuple[int, cKDTree | None] | None = None

    @property
    def n_worksets(self) -> int:
        return len(self.centroids)

    def expire_before(self, window: int) -> None:
        """Forget outer-buffer records of windows older than ``window``."""
        keep = self.outer_buffer.window >= window
        if not keep.all():
            self.outer_buffer = self.outer_buffer.take(np.nonzero(keep)[0])

    def formulate(self, batch: Records, is_outer: np.ndarray) -> Memberships:
        """Assign a batch of records (in arrival order) to worksets; returns the new memberships."""
        reach = self.metric.key_threshold(2.0 * self.t * (1.0 + BOUND_SLACK))
        if batch.timed and not self.keep_times:
            batch = batch.without_times()
        if len(self.outer_buffer) == 0 and self.outer_buffer.id.dtype != batch.id.dtype:
            self.outer_buffer = Records.empty(self.dim, batch.id.dtype, self.keep_times)
        inner_rows = np.nonzero(~is_outer)[0]
        outer_rows = np.nonzero(is_outer)[0]
        k_before = self.n_worksets
        own, own_role = self._assign_inner(batch.vec[inner_rows])
        k_new = self.n_worksets

        rows: list[np.ndarray] = [inner_rows]
        worksets: list[np.ndarray] = [own]
        roles: list[np.ndarray] = [own_role]

        if self.n_worksets and len(batch):
            r, w = centroids.within(self.metric, batch.vec, self.centroids, reach, self._tree())
            own_of_row = np.full(len(batch), np.iinfo(np.int64).max, dtype=np.int64)
            own_of_row[inner_rows] = own
            keep = w < own_of_row[r]
            rows.append(r[keep])
            worksets.append(w[keep])
            roles.append(np.full(int(keep.sum()), OUTER, dtype=np.int8))

        records = batch
        if k_new > k_before and len(self.outer_buffer):
            fresh = self.centroids[k_before:]
            r, w = centroids.within(self.metric, self.outer_buffer.vec, fresh, reach, centroids.build(self.metric, fresh))
            if len(r):
                rows.append(len(batch) + r)
                worksets.append(k_before + w)
                roles.append(np.full(len(r), OUTER, dtype=np.int8))
                records = Records.concat([batch, self.outer_buffer])

        # what a linear scan computes: each inner record against the centroids existing at its
        # arrival (a new workset's creator is its first member), each outer-partition record
        # against all of them, the outer buffer against the new ones
        values, first = np.unique(own, return_index=True)
        creators = first[values >= k_before]
        scans = k_before * len(inner_rows) + int(np.searchsorted(creators, np.arange(len(inner_rows))).sum())
        scans += len(outer_rows) * k_new + len(self.outer_buffer) * (k_new - k_before)
        if len(outer_rows):
            self.outer_buffer = Records.concat([self.outer_buffer, batch.take(outer_rows)])
        row = np.concatenate(rows).astype(np.int64)
        order = np.argsort(row, kind="stable")
        return Memberships(
            records=records,
            row=row[order],
            workset=np.concatenate(worksets).astype(np.int64)[order],
            role=np.concatenate(roles).astype(np.int8)[order],
            centroid_comparisons=scans,
        )

    def _tree(self) -> cKDTree | None:
        """The k-d tree over the current centroids, built once per set of centroids."""
        if self._index is None or self._index[0] != self.n_worksets:
            self._index = (self.n_worksets, centroids.build(self.metric, self.centroids))
        return self._index[1]

    def _assign_inner(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Steps 2 to 4 for inner-partition records, in arrival order."""
        n = len(vec)
        t, half = self.metric.key_threshold(self.t), self.metric.key_threshold(self.t / 2.0)
        own = np.full(n, -1, dtype=np.int64)
        role = np.full(n, INNER, dtype=np.int8)
        if n == 0:
            return own, role
        k0 = self.n_worksets
        best_d, best = centroids.nearest(self.metric, vec, self.centroids, self._tree())
        settled = best_d <= half
        own[settled] = best[settled]
        # Records farther than t/2 from every existing centroid, in arrival order, in blocks.
        # A block first meets the centroids created by earlier blocks (an index that grows);
        # inside it, decisions between two centroid creations are vectorised and after each
        # creation the block's remaining records are updated against the new centroid, which
        # gives the result of a record-by-record loop.
        pending = np.nonzero(~settled)[0]
        created = centroids.GrowingCentroids(self.metric, self.dim)
        for lo in range(0, len(pending), SEQUENTIAL_BLOCK):
            block = pending[lo : lo + SEQUENTIAL_BLOCK]
            bd, bb = best_d[block].copy(), best[block].copy()
            if len(created):
                d_new, i_new = created.nearest(vec[block])
                closer = d_new < bd
                bd, bb = np.where(closer, d_new, bd), np.where(closer, k0 + i_new, bb)
            fresh: list[int] = []
            pos = 0
            while pos < len(block):
                over = np.nonzero(bd[pos:] > t)[0]
                stop = pos + int(over[0]) if len(over) else len(block)
                own[block[pos:stop]] = bb[pos:stop]
                role[block[pos:stop]] = np.where(bd[pos:stop] <= half, INNER, OUTLIER)
                if stop == len(block):
                    break
                i = int(block[stop])
                gid = k0 + len(created) + len(fresh)
                fresh.append(i)
                own[i] = gid
                if stop + 1 < len(block):
                    d_i = self.metric.rowwise_key(vec[block[stop + 1 :]], vec[i : i + 1])
                    closer = d_i < bd[stop + 1 :]
                    bd[stop + 1 :] = np.where(closer, d_i, bd[stop + 1 :])
                    bb[stop + 1 :] = np.where(closer, gid, bb[stop + 1 :])
                pos = stop + 1
            if fresh:
                created.add(vec[fresh])
        if len(created):
            self.centroids = np.vstack([self.centroids, created.points])
        return own, role


STATE_FORMAT = 2


def formulation_state(f: WorksetFormulation) -> dict:
    """The formulation state as plain arrays (what the Spark operator checkpoints)."""
    return {"format": STATE_FORMAT, "centroids": f.centroids, "buffer": f.outer_buffer.arrays()}


def restore_formulation(f: WorksetFormulation, state: dict) -> WorksetFormulation:
    """Load :func:`formulation_state` output into ``f`` (refusing unknown formats)."""
    check_state_format(state)
    f.centroids = state["centroids"]
    f._index = None
    f.outer_buffer = Records(*state["buffer"])
    return f


def check_state_format(state: dict) -> None:
    fmt = state.get("format")
    if fmt != STATE_FORMAT:
        raise RuntimeError(
            f"this checkpoint holds S3J state format {fmt}, but driftjoin {__import__('driftjoin').__version__} "
            f"reads format {STATE_FORMAT}: restart the query with a new checkpoint location "
            "(or run the driftjoin version that wrote it)"
        )
