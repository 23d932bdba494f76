"""S3J over any metric space: space partitioning, workset formulation, similarity computation.

The paper's algorithm (sections 6 and 7) needs only distances and the triangle inequality, so it
runs here on any :class:`~driftjoin.metric.spaces.Space` (strings, token sets, user metrics; the
vector path with its k-d trees and compiled kernels stays in :mod:`driftjoin.s3j`). Centroids are
records: the space-partition centroids are sampled records (:func:`choose_centroids`), workset
centroids are the records that create worksets. Role names and the routing rule are the vector
core's (:mod:`driftjoin.s3j.workset`, :func:`driftjoin.s3j.space.outer_allowed`).

**Router** (:meth:`S3JStrategy.route`, section 6): a copy goes to the inner partition of its closest
centroid ``c_i`` (role INNER) and, as an OUTER copy, to every other ``c_j`` with
``dist(r, c_j) <= dist(r, c_i) + 2t`` (Criterion 1) that the MR-MAPSS parity rule allows.

**Worker** (:class:`S3JWorker`, one per space partition; formulation and computation fused):

1. an outer copy goes straight to step 5;
2. an inner copy within ``t/2`` of a workset centroid joins its inner set (at most one: centroids
   are more than ``t`` apart);
3. otherwise, more than ``t`` from every centroid, it becomes the centroid of a new workset with
   the next id;
4. otherwise it is an outlier of the workset with the closest centroid (ties: the older one);
5. an inner copy joins the outer set of every workset with a *smaller* id within ``2t``; an outer
   copy joins the outer set of every workset within ``2t``, now and (kept in a buffer until its
   window closes) of every workset created later.

Copies are processed in arrival order: those within ``t/2`` of an existing centroid at once, the
others in blocks against the centroids created before them (:func:`_assign_inner`).

Memberships are stored per window under their workset (:mod:`driftjoin.metric.store`); a new
member pairs with the workset's members except outer x outer, and a pair is accepted when
``distance <= t`` (inner x inner pairs are within ``t`` by the triangle inequality but are
computed for the output distance and counted apart from the comparisons).

**Exactly once.** Let ``dist(x, y) <= t``. Space partitions: with ``x`` in ``I_i`` and ``y`` in
``I_j``, ``i != j``, the triangle inequality puts ``x`` in ``O_j``'s criterion and ``y`` in
``O_i``'s, and the parity rule keeps exactly one of the two copies, so the pair meets in exactly
one partition, as inner x inner (``i = j``) or inner x outer. Worksets, in that partition: let
``a <= b`` be the worksets of the inner copies (an outer copy has none). If ``a = b`` both are
non-outer members of ``a``. If ``a < b``, ``y`` is within ``dist(y, x) + dist(x, c_a) <= 2t``
of ``c_a`` and ``a`` existed when ``y`` arrived (ids grow with creation), so ``y`` is an outer
member of ``a``; ``x`` is never an outer member of ``b > a``; the pair meets in ``a`` only.
An outer copy ``r`` and an inner copy ``y`` of workset ``b``: ``r`` is within ``2t`` of ``c_b``
and joins ``b``'s outer set when it arrives or, buffered, when ``b`` is created; outer x outer is
never paired, so ``b`` is the only meeting place. Windows: copies pair within their window only.

**Bounds and rounding.** In an exact space (edit distance, Jaccard: :attr:`Space.exact`) every
bound is decided exactly with the threshold the user wrote (``t/2``, ``2t`` and Criterion 1 through
:meth:`Space.le` and :meth:`Space.reaches`), so the argument above holds as written. In a float
space the acceptance test is the documented float ``distance <= t`` and the inclusion bounds
(Criterion 1, the ``2t`` of outer sets) carry a relative slack (:meth:`Space.inclusion`): a member
is at most ``t`` from its centroid as computed, a partner at most ``t`` as computed, and the
triangle sum, computed with relative errors far below the slack, stays inside the widened reach.

**State** stays bounded by the watermark: closed windows are dropped with their buffer, and a
workset centroid is forgotten once no open window holds a non-outer member of it (a later record
then creates a new workset with a larger id, and the argument above holds with the centroids
that exist at each arrival).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from driftjoin.metric.base import STATE_FORMAT, Routing, RunJoin, Strategy, candidate_filter, check_format
from driftjoin.metric.records import MetricPairs, MetricRecords, Values, concat_values, take_values
from driftjoin.metric.spaces import Space
from driftjoin.metric.store import Run
from driftjoin.s3j.space import outer_allowed
from driftjoin.s3j.workset import INNER, OUTER, OUTLIER
from driftjoin.windows import Windowing

#: Copies of one batch that go through the sequential part of steps 3-4 together.
SEQUENTIAL_BLOCK = 256


def choose_centroids(space: Space, values: Values, n: int, seed: int) -> Values:
    """``n`` distinct records of a sample as space-partition centroids (random, seeded)."""
    total = len(values)
    if total == 0:
        raise ValueError("no records to choose S3J centroids from: give a non-empty sample")
    order = np.random.default_rng(seed).permutation(total)[: max(8 * n, n)]
    cand = take_values(values, order)
    d = space.pairwise(cand, cand)
    chosen: list[int] = []
    for k in range(len(order)):
        if all(d[k, c] > 0 for c in chosen):
            chosen.append(k)
            if len(chosen) == n:
                break
    return take_values(cand, np.array(chosen, dtype=np.int64))


class S3JStrategy(Strategy):
    """S3J's router over space-partition ``centroids`` (prepared values); one worker per centroid.

    Example::

        >>> from driftjoin.metric.spaces import LevenshteinSpace
        >>> from driftjoin.metric.records import MetricRecords
        >>> from driftjoin.windows import Windowing
        >>> sp = LevenshteinSpace()
        >>> s = S3JStrategy(sp, 1, sp.prepare(["apple", "zebra"]), self_join=True, windows=Windowing.unbounded())
        >>> batch = MetricRecords.of([1, 2, 3], sp.prepare(["apple", "appel", "apply"]))
        >>> pairs = s.worker(0).add(batch, s.route(batch).role)  # all three are inner of "apple"
        >>> sorted(zip(pairs.left_id.tolist(), pairs.right_id.tolist()))
        [(1, 3)]
    """

    name = "s3j"

    def __init__(self, space: Space, threshold: Any, centroids: Values, *, self_join: bool, windows: Windowing) -> None:
        self.space = space
        self.threshold = threshold
        self.centroids = centroids
        self.self_join = self_join
        self.windows = windows
        self.n_workers = len(centroids)

    def route(self, batch: MetricRecords) -> Routing:
        n, p = len(batch), self.n_workers
        if n == 0:
            z = np.zeros(0, np.int64)
            return Routing(z, z, np.zeros(0, np.int8))
        dist = self.space.pairwise(batch.value, self.centroids)
        inner = np.argmin(dist, axis=1)
        parts = np.arange(p)
        criterion = self.space.reaches(dist, dist[np.arange(n), inner][:, None], 2 * self.space.radius(self.threshold))
        member = criterion & (parts[None, :] != inner[:, None]) & outer_allowed(inner[:, None], parts[None, :])
        out_rows, out_parts = np.nonzero(member)
        row = np.concatenate([np.arange(n), out_rows])
        worker = np.concatenate([inner, out_parts])
        role = np.concatenate([np.full(n, INNER, np.int8), np.full(len(out_rows), OUTER, np.int8)])
        order = np.argsort(row, kind="stable")
        return Routing(row[order], worker[order].astype(np.int64), role[order])

    def worker(self, index: int) -> "S3JWorker":
        return S3JWorker(self.space, self.threshold, self.self_join, self.windows)


class S3JWorker(RunJoin):
    """Workset formulation and similarity computation of one space partition (module docstring)."""

    def __init__(self, space: Space, threshold: Any, self_join: bool, windows: Windowing) -> None:
        super().__init__(self_join, windows, [(0, 0), (0, 1)])
        self.space = space
        self.t = space.radius(threshold)
        self.half = self.t / 2
        self.reach = space.inclusion(2 * self.t)
        self.centroids: Values | None = None
        self.ids = np.zeros(0, np.int64)
        self.next_id = 0
        self.buffer: MetricRecords | None = None
        #: record-to-centroid distances computed by formulation (a linear scan would compute more)
        self.centroid_comparisons = 0

    @property
    def n_worksets(self) -> int:
        return len(self.ids)

    def add(self, batch: MetricRecords, role: np.ndarray) -> MetricPairs:
        records, row, workset, mrole = self.formulate(batch, np.asarray(role) == OUTER)
        return self.join_runs(batch, records.window[row], lambda sel: Run.build(
            records, workset[sel], (mrole[sel] == OUTER).astype(np.int64) | (records.side[row[sel]].astype(np.int64) << 1),
            row[sel], {"role": mrole[sel]}))

    def verify(self, a: Run, ia: np.ndarray, b: Run, ib: np.ndarray) -> MetricPairs:
        A, B = a.records, b.records
        ra, rb = a.rec[ia], b.rec[ib]
        ok = candidate_filter(self, A, ra, B, rb)
        self.stats.candidates += len(ia)
        ra, rb = ra[ok], rb[ok]
        both_inner = (a.cols["role"][ia[ok]] == INNER) & (b.cols["role"][ib[ok]] == INNER)
        self.stats.comparisons += int((~both_inner).sum())
        d = self.space.distances(A.value, ra, B.value, rb, cutoff=self.t)
        hit = self.space.le(d, self.t)
        return MetricPairs.oriented(A, ra[hit], B, rb[hit], d[hit], self.self_join)

    # -- workset formulation ------------------------------------------------------------------

    def formulate(self, batch: MetricRecords, is_outer: np.ndarray) -> tuple[MetricRecords, np.ndarray, np.ndarray, np.ndarray]:
        """Steps 1-5 for a batch in arrival order: ``(records, row, workset, role)`` memberships."""
        reach = self.reach
        inner_rows = np.nonzero(~is_outer)[0]
        outer_rows = np.nonzero(is_outer)[0]
        k_before = self.n_worksets
        own, own_role = self._assign_inner(take_values(batch.value, inner_rows))
        rows, worksets, roles = [inner_rows], [own], [own_role]
        if self.n_worksets and len(batch):
            r, c, _ = self.space.within(batch.value, self.centroids, reach)
            self.centroid_comparisons += len(batch) * self.n_worksets
            w = self.ids[c]
            own_of_row = np.full(len(batch), np.iinfo(np.int64).max, dtype=np.int64)
            own_of_row[inner_rows] = own
            keep = w < own_of_row[r]
            rows.append(r[keep])
            worksets.append(w[keep])
            roles.append(np.full(int(keep.sum()), OUTER, np.int8))
        records = batch
        if self.n_worksets > k_before and self.buffer is not None and len(self.buffer):
            fresh = np.arange(k_before, self.n_worksets)
            r, c, _ = self.space.within(self.buffer.value, take_values(self.centroids, fresh), reach)
            self.centroid_comparisons += len(self.buffer) * len(fresh)
            if len(r):
                rows.append(len(batch) + r)
                worksets.append(self.ids[fresh[c]])
                roles.append(np.full(len(r), OUTER, np.int8))
                records = MetricRecords.concat([batch, self.buffer])
        if len(outer_rows):
            kept = batch.take(outer_rows)
            self.buffer = kept if self.buffer is None else MetricRecords.concat([self.buffer, kept])
        row = np.concatenate(rows).astype(np.int64)
        order = np.argsort(row, kind="stable")
        return (records, row[order], np.concatenate(worksets).astype(np.int64)[order],
                np.concatenate(roles).astype(np.int8)[order])

    def _assign_inner(self, values: Values) -> tuple[np.ndarray, np.ndarray]:
        """Steps 2-4 for inner copies in arrival order: their workset ids and roles."""
        n = len(values)
        t, half, le = self.t, self.half, self.space.le
        own = np.full(n, -1, np.int64)
        role = np.full(n, INNER, np.int8)
        if n == 0:
            return own, role
        best_d, best = np.full(n, np.inf), np.full(n, -1, np.int64)
        if self.n_worksets:
            i, c, d = _nearest(*self.space.within(values, self.centroids, t))
            self.centroid_comparisons += n * self.n_worksets
            best_d[i], best[i] = d, self.ids[c]
        settled = le(best_d, half)
        own[settled] = best[settled]
        pending = np.nonzero(~settled)[0]
        created: list[int] = []
        created_ids: list[int] = []
        for lo in range(0, len(pending), SEQUENTIAL_BLOCK):
            block = pending[lo : lo + SEQUENTIAL_BLOCK]
            m = len(block)
            bd, bb = best_d[block].copy(), best[block].copy()
            block_values = take_values(values, block)
            if created:
                i, c, d = _nearest(*self.space.within(block_values, take_values(values, np.array(created)), t))
                self.centroid_comparisons += m * len(created)
                closer = d < bd[i]
                bd[i[closer]], bb[i[closer]] = d[closer], np.asarray(created_ids)[c[closer]]
            i, j, d = self.space.within(block_values, block_values, t)
            near = np.full((m, m), np.inf)
            near[i, j] = d
            pos = 0
            while pos < m:  # bd is finite exactly for the copies within t of a centroid (within(..., t))
                over = np.nonzero(np.isinf(bd[pos:]))[0]
                stop = pos + int(over[0]) if len(over) else m
                own[block[pos:stop]] = bb[pos:stop]
                role[block[pos:stop]] = np.where(le(bd[pos:stop], half), INNER, OUTLIER)
                if stop == m:
                    break
                gid = self.next_id
                self.next_id += 1
                created.append(int(block[stop]))
                created_ids.append(gid)
                own[block[stop]] = gid
                later = near[stop, stop + 1 :]
                closer = later < bd[stop + 1 :]
                bd[stop + 1 :] = np.where(closer, later, bd[stop + 1 :])
                bb[stop + 1 :] = np.where(closer, gid, bb[stop + 1 :])
                pos = stop + 1
        if created:
            fresh = take_values(values, np.array(created, dtype=np.int64))
            self.centroids = fresh if self.centroids is None else concat_values([self.centroids, fresh])
            self.ids = np.concatenate([self.ids, np.array(created_ids, dtype=np.int64)])
        return own, role

    # -- state ----------------------------------------------------------------------------------

    def expire_before(self, window: int) -> None:
        self.store.expire_before(window)
        if self.buffer is not None:
            self.buffer = self.buffer.take(np.nonzero(self.buffer.window >= window)[0])
        if self.n_worksets:
            live = [r.group[(r.cls & 1) == 0] for _, r in self.store.runs()]
            keep = np.isin(self.ids, np.concatenate(live) if live else np.zeros(0, np.int64))
            if not keep.all():
                self.ids = self.ids[keep]
                self.centroids = take_values(self.centroids, np.nonzero(keep)[0])

    def state(self) -> dict:
        return {"format": STATE_FORMAT, "centroids": self.centroids, "ids": self.ids, "next_id": self.next_id,
                "buffer": None if self.buffer is None else self.buffer.arrays(), "windows": self.store.state()}

    def restore(self, state: dict) -> None:
        check_format(state)
        self.centroids, self.ids, self.next_id = state["centroids"], state["ids"], state["next_id"]
        self.buffer = None if state["buffer"] is None else MetricRecords(*state["buffer"])
        self.store.restore(state["windows"])


def _nearest(i: np.ndarray, c: np.ndarray, d: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per row ``i``, its closest column (ties: the smallest, i.e. the oldest centroid)."""
    if len(i) == 0:
        return i, c, d
    order = np.lexsort((c, d, i))
    i, c, d = i[order], c[order], d[order]
    first = np.ones(len(i), bool)
    first[1:] = i[1:] != i[:-1]
    return i[first], c[first], d[first]
