"""Similarity computation (S3J section 7.7), the state of one worker.

A worker holds, per open window, the members of the worksets assigned to it as a few *runs*,
each sorted by workset (outer members last). When new members arrive, each is paired with the
members already there (run by run) and with the other new members of its workset, according
to roles:

- inner x inner: emitted without a similarity comparison (both within ``t/2`` of the
  centroid, hence within ``t`` of each other);
- inner x outlier, inner x outer, outlier x outlier, outlier x outer: compared;
- outer x outer: never paired (that pair, if it joins, is met in another workset).

Only records of different streams pair in a two-stream join. The distance of every emitted
pair is computed for the output column; an inner x inner pair is dropped only if rounding puts
its computed distance above the threshold, so the output is exactly ``{dist <= threshold}`` as
the oracle computes it. Comparisons (the paper's count) exclude inner x inner pairs.

Runs: a batch's stored members become a new run; the last two runs merge while the older is
less than twice the newer, so a window of n members has O(log n) runs and each member is
merged O(log n) times. No batch re-sorts the whole window, and a runtime that persists runs
(``MemberTable.label``) rewrites only the runs a batch created (``SimilarityWorker.retired``
lists the ones merged away), so the state written per batch follows the batch, not the window.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from driftjoin.distance import Metric
from driftjoin.s3j import kernels
from driftjoin.s3j.records import Records
from driftjoin.s3j.workset import OUTER


@dataclass
class Pairs:
    """Joined pairs as parallel arrays; ``left``/``right`` index into ``records``."""

    left_id: np.ndarray
    right_id: np.ndarray
    distance: np.ndarray
    window: np.ndarray
    ingest: np.ndarray
    workset: np.ndarray

    def __len__(self) -> int:
        return len(self.left_id)

    @staticmethod
    def concat(parts: list["Pairs"], id_dtype: np.dtype | type = np.int64) -> "Pairs":
        if not parts:
            z = np.zeros(0)
            return Pairs(np.zeros(0, dtype=id_dtype), np.zeros(0, dtype=id_dtype), z, np.zeros(0, np.int64), z, np.zeros(0, np.int64))
        return Pairs(*(np.concatenate([getattr(p, n) for p in parts]) for n in ("left_id", "right_id", "distance", "window", "ingest", "workset")))


@dataclass
class WorksetCounters:
    """Per-workset statistics of one step: members by role, comparisons, pairs."""

    inner: dict[int, int] = field(default_factory=dict)
    outlier: dict[int, int] = field(default_factory=dict)
    outer: dict[int, int] = field(default_factory=dict)
    comparisons: dict[int, int] = field(default_factory=dict)
    pairs: dict[int, int] = field(default_factory=dict)


@dataclass
class MemberTable:
    """A run of members of one window, sorted by workset id (global id), outer members last.

    ``label`` is free for the runtime (the Spark operator stores the run's chunk id there).
    """

    workset: np.ndarray
    role: np.ndarray
    records: Records
    label: int | None = None

    def __len__(self) -> int:
        return len(self.workset)

    @staticmethod
    def sorted(workset: np.ndarray, role: np.ndarray, records: Records) -> "MemberTable":
        order = np.argsort(_member_key(workset, role), kind="stable")
        return MemberTable(workset[order], role[order], records.take(order))

    @staticmethod
    def merged(a: "MemberTable", b: "MemberTable") -> "MemberTable":
        return MemberTable.sorted(np.concatenate([a.workset, b.workset]), np.concatenate([a.role, b.role]),
                                  Records.concat([a.records, b.records]))

    def nbytes(self) -> int:
        return int(self.workset.nbytes + self.role.nbytes + self.records.nbytes())


class SimilarityWorker:
    """The state of one worker: member tables of open windows, keyed by window index."""

    def __init__(self, metric: Metric, threshold: float, self_join: bool) -> None:
        self.metric = metric
        self.threshold = threshold
        self.self_join = self_join
        self.windows: dict[int, list[MemberTable]] = {}
        #: runs merged away since the runtime last emptied this list: (window, run)
        self.retired: list[tuple[int, MemberTable]] = []

    def expire_before(self, window: int) -> None:
        for w in [w for w in self.windows if w < window]:
            del self.windows[w]

    def state_bytes(self) -> int:
        return sum(t.nbytes() for runs in self.windows.values() for t in runs)

    def members(self, window: int) -> int:
        return sum(len(t) for t in self.windows.get(window, ()))

    def add(
        self,
        records: Records,
        workset: np.ndarray,
        role: np.ndarray,
        counters: WorksetCounters | None = None,
        *,
        store: np.ndarray | None = None,
    ) -> Pairs:
        """Pair new members with the stored ones and with each other, then store them.

        ``store`` (default all True) marks members that are kept after pairing; a member with
        ``store=False`` probes the stored members only and is neither paired with the other
        new members nor kept (used when a workset moves between workers inside a window).
        """
        if store is None:
            store = np.ones(len(workset), dtype=bool)
        out: list[Pairs] = []
        for w in np.unique(records.window):
            sel = np.nonzero(records.window == w)[0]
            out.append(self._add_window(int(w), records.take(sel), workset[sel], role[sel], store[sel], counters))
        return Pairs.concat(out, records.id.dtype)

    def _add_window(
        self, window: int, rec: Records, workset: np.ndarray, role: np.ndarray, store: np.ndarray, counters: WorksetCounters | None
    ) -> Pairs:
        # members sorted by workset, outer members last in each workset: outer x outer pairs
        # are never candidates, so only ranges with a non-outer side are enumerated
        key = _member_key(workset, role)
        order = np.argsort(key, kind="stable")
        rec, workset, role, store, key = rec.take(order), workset[order], role[order], store[order], key[order]
        groups, new_start, new_count = np.unique(workset, return_index=True, return_counts=True)
        new_inner = np.searchsorted(key, 2 * groups + 1) - new_start
        cross = (groups & CROSS_BIT) != 0
        comparisons = np.zeros(len(groups), np.int64)
        found = np.zeros(len(groups), np.int64)
        code, two = kernels.METRIC_CODES[self.metric.name], not self.self_join
        out: list[Pairs] = []
        for table in self.windows.get(window, ()):
            old_lo = np.searchsorted(table.workset, groups, side="left")
            old_cnt = np.searchsorted(table.workset, groups, side="right") - old_lo
            old_inner = np.searchsorted(_member_key(table.workset, table.role), 2 * groups + 1) - old_lo
            old = table.records
            # new non-outer x all old members, then new outer x old non-outer members
            for a_start, a_cnt, b_cnt in ((new_start, new_inner, old_cnt), (new_start + new_inner, new_count - new_inner, old_inner)):
                found_here = kernels.cross_candidates(rec.vec, role, rec.side, a_start, a_cnt, old.vec, table.role, old.side,
                                                      old_lo, b_cnt, cross, False, store, two, code, self.threshold, comparisons)
                out.append(self._accept(groups, rec, old, found_here, found))
        found_here = kernels.cross_candidates(rec.vec, role, rec.side, new_start, new_inner, rec.vec, role, rec.side,
                                              new_start, new_count, cross, True, store, two, code, self.threshold, comparisons)
        out.append(self._accept(groups, rec, rec, found_here, found))
        if counters is not None:
            _accumulate(counters.comparisons, groups, comparisons)
            _accumulate(counters.pairs, groups, found)
            plain = role & 3
            member_group = np.searchsorted(groups, workset)
            for r, bucket in ((0, counters.inner), (1, counters.outlier), (2, counters.outer)):
                _accumulate(bucket, groups, np.bincount(member_group[store & (plain == r)], minlength=len(groups)))
        keep = np.nonzero(store)[0]
        if len(keep):  # already sorted by member key: a run
            self._store(window, MemberTable(workset[keep], role[keep], rec.take(keep)))
        return Pairs.concat(out, rec.id.dtype)

    def _store(self, window: int, run: MemberTable) -> None:
        """Add a run; merge the last two while the older is less than twice the newer."""
        runs = self.windows.setdefault(window, [])
        runs.append(run)
        while len(runs) >= 2 and len(runs[-2]) < 2 * len(runs[-1]):
            newer, older = runs.pop(), runs.pop()
            self.retired += [(window, t) for t in (older, newer) if t.label is not None]
            runs.append(MemberTable.merged(older, newer))

    def _accept(self, groups: np.ndarray, a: Records, b: Records, candidates: tuple, found: np.ndarray) -> Pairs:
        """The pairs of the kernel's candidates: the sure ones as they are, the unsure ones (a
        distance within a billionth of the threshold) decided by the oracle's own function
        ``distance <= threshold``; never a record with itself in a self-join."""
        ia, ib, g, dist, unsure = candidates
        if len(ia) == 0:
            return Pairs.concat([], a.id.dtype)
        if unsure.any():
            at = np.nonzero(unsure)[0]
            exact = self.metric.rowwise(a.vec[ia[at]], b.vec[ib[at]])
            dist = dist.copy()
            dist[at] = exact
            keep = np.ones(len(ia), bool)
            keep[at] = exact <= self.threshold
            ia, ib, g, dist = ia[keep], ib[keep], g[keep], dist[keep]
        left, right = a.id[ia], b.id[ib]
        if self.self_join:
            differ = left != right
            if not differ.all():
                ia, ib, g, dist, left, right = ia[differ], ib[differ], g[differ], dist[differ], left[differ], right[differ]
        found += np.bincount(g, minlength=len(found))
        swap = (right < left) if self.self_join else (a.side[ia] == 1)
        return Pairs(
            left_id=np.where(swap, right, left),
            right_id=np.where(swap, left, right),
            distance=dist,
            window=a.window[ia],
            ingest=np.maximum(a.ingest[ia], b.ingest[ib]),
            workset=groups[g],
        )


#: Bit 31 of a workset id marks a cross-part site of a split workset (driftjoin.s3j.routing).
CROSS_BIT = 1 << 31

def _member_key(workset: np.ndarray, role: np.ndarray) -> np.ndarray:
    """Sort key of a member table: by workset, then non-outer before outer members."""
    return 2 * workset.astype(np.int64) + ((role & 3) == OUTER)


def _accumulate(bucket: dict[int, int], groups: np.ndarray, counts: np.ndarray) -> None:
    """Add per-group counts (non-zero ones) to a per-workset dict."""
    for i in np.nonzero(counts)[0].tolist():
        g = int(groups[i])
        bucket[g] = bucket.get(g, 0) + int(counts[i])


def run_arrays(t: MemberTable) -> tuple:
    """A run as plain arrays (what a runtime persists)."""
    return (t.workset, t.role, (t.records.id, t.records.side, t.records.vec, t.records.ingest, t.records.window))


def run_from_arrays(arrays: tuple, label: int | None = None) -> MemberTable:
    """Inverse of :func:`run_arrays` (the arrays of a run are sorted already)."""
    ws, role, rec = arrays
    return MemberTable(ws, role, Records(*rec), label)


def worker_state(w: SimilarityWorker) -> dict:
    """The worker's runs as plain arrays (a whole-state snapshot: tests and static runs)."""
    from driftjoin.s3j.workset import STATE_FORMAT

    return {"format": STATE_FORMAT, "windows": {k: [run_arrays(t) for t in runs] for k, runs in w.windows.items()}}


def restore_worker(w: SimilarityWorker, state: dict) -> SimilarityWorker:
    """Load :func:`worker_state` output into ``w`` (refusing unknown formats)."""
    from driftjoin.s3j.workset import check_state_format

    check_state_format(state)
    w.windows = {k: [run_from_arrays(r) for r in runs] for k, runs in state["windows"].items()}
    return w
