"""Similarity computation (S3J section 7.7), the state of one worker.

A worker holds, per open window, the members of the worksets assigned to it as a few *runs*,
each sorted by workset (outer members last). When new members arrive, each is paired with the
members already there (run by run) and with the other new members of its workset, according
to roles:

- inner x inner: emitted without a similarity comparison (both within ``t/2`` of the
  centroid, hence within ``t`` of each other);
- inner x outlier, inner x outer, outlier x outlier, outlier x outer: compared;
- outer x outer: never paired (that pair, if it joins, is met in another workset).

Only records of different streams pair in a two-stream join. Each window (a record's window
copy, :mod:`driftjoin.windows`) is joined on its own; in an interval join a pair of copies must
also be one the window accepts (never two ghosts, times at most ``within`` apart), tested on
every path a pair can take: the compiled loop, the block kernel's candidates and the inner x
inner bound pairs. The distance of every emitted
pair is computed for the output column; an inner x inner pair is dropped only if rounding puts
its computed distance above the threshold, so the output is exactly ``{dist <= threshold}`` as
the oracle computes it. Comparisons (the paper's count) exclude inner x inner pairs.

Runs: a batch's stored members become a new run; the last two runs merge while the older is
less than twice the newer, so a window of n members has O(log n) runs and each member is
merged O(log n) times. No batch re-sorts the whole window. For a runtime that persists batch
by batch (``keep_added``), every run a batch adds is named by a random 62-bit *part* id and
listed in ``SimilarityWorker.added`` as added, and a merged run carries its runs' parts
(``MemberTable.parts``): the runtime writes each added run once and never what merging does in
memory, so the state written per batch follows the batch, and a copy a few batches old keeps
every run whose parts are all still stored (parts never change) and reads only the newer ones.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

import numpy as np

from driftjoin.blockjoin import BlockJoin
from driftjoin.distance import Metric
from driftjoin.s3j.records import Records, keeps_times
from driftjoin.s3j.workset import INNER, OUTER
from driftjoin.windows import Windowing


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

    ``parts``: the stored parts that together hold exactly this run's members (module
    docstring; empty when the worker does not keep what is added).
    """

    workset: np.ndarray
    role: np.ndarray
    records: Records
    parts: tuple[int, ...] = ()

    def __len__(self) -> int:
        return len(self.workset)

    @staticmethod
    def sorted(workset: np.ndarray, role: np.ndarray, records: Records) -> "MemberTable":
        order = np.argsort(_member_key(workset, role), kind="stable")
        return MemberTable(workset[order], role[order], records.take(order))

    @staticmethod
    def merged(a: "MemberTable", b: "MemberTable") -> "MemberTable":
        run = MemberTable.sorted(np.concatenate([a.workset, b.workset]), np.concatenate([a.role, b.role]),
                                 Records.concat([a.records, b.records]))
        run.parts = a.parts + b.parts
        return run

    def nbytes(self) -> int:
        return int(self.workset.nbytes + self.role.nbytes + self.records.nbytes())


class SimilarityWorker:
    """The state of one worker: member tables of open windows, keyed by window index.

    ``windows``: the join's windowing; an interval join's members keep their times and ghost
    flags and only accepted pairs join. None: each window joins all its pairs (tumbling).
    """

    def __init__(self, metric: Metric, threshold: float, self_join: bool, windows: Windowing | None = None,
                 keep_added: bool = False) -> None:
        self.metric = metric
        self.threshold = threshold
        self.self_join = self_join
        self.windowing = windows
        self.interval = keeps_times(windows)
        self.windows: dict[int, list[MemberTable]] = {}
        #: with ``keep_added``: every run added since the runtime last emptied this list, as
        #: added: (window, run)
        self.keep_added = keep_added
        self.added: list[tuple[int, MemberTable]] = []
        self._kernel: BlockJoin | None = None

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
        if self.interval and not records.timed:
            raise ValueError("an interval join's members need their times and ghost flags")
        if not self.interval and records.timed:
            records = records.without_times()
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
        kernels = _kernels()
        code, two = kernels.METRIC_CODES[self.metric.name], not self.self_join
        within = self.windowing.within if self.interval else 0
        out: list[Pairs] = []
        for table in self.windows.get(window, ()):
            old_lo = np.searchsorted(table.workset, groups, side="left")
            old_cnt = np.searchsorted(table.workset, groups, side="right") - old_lo
            old_inner = np.searchsorted(_member_key(table.workset, table.role), 2 * groups + 1) - old_lo
            old = table.records
            # new non-outer x all old members, then new outer x old non-outer members
            for a_start, a_cnt, b_cnt in ((new_start, new_inner, old_cnt), (new_start + new_inner, new_count - new_inner, old_inner)):
                big = self._blas_groups(groups, a_cnt, b_cnt)
                out += self._blocks(groups[big], rec, role, a_start[big], a_cnt[big], old, table.role, old_lo[big], b_cnt[big], counters)
                found_here = kernels.cross_candidates(rec.vec, role, rec.side, *_times(rec), a_start, np.where(big, 0, a_cnt),
                                                      old.vec, table.role, old.side, *_times(old), old_lo, b_cnt, cross, False,
                                                      store, two, self.interval, within, code, self.threshold, comparisons)
                out.append(self._accept(groups, rec, old, found_here, found))
        big = self._blas_groups(groups, new_inner, new_count)
        out += self._blocks(groups[big], rec, role, new_start[big], new_inner[big], rec, role, new_start[big], new_count[big], counters, store)
        found_here = kernels.cross_candidates(rec.vec, role, rec.side, *_times(rec), new_start, np.where(big, 0, new_inner),
                                              rec.vec, role, rec.side, *_times(rec), new_start, new_count, cross, True, store,
                                              two, self.interval, within, code, self.threshold, comparisons)
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
            run = MemberTable(workset[keep], role[keep], rec.take(keep))
            if self.keep_added:
                run.parts = (secrets.randbits(62),)  # never reused, not even by a replay of the batch
                self.added.append((window, run))
            self.put(window, run)
        return Pairs.concat(out, rec.id.dtype)

    def put(self, window: int, run: MemberTable) -> None:
        """Store a run (a batch's, or one a runtime read back); merge the last two while the
        older is less than twice the newer."""
        runs = self.windows.setdefault(window, [])
        runs.append(run)
        while len(runs) >= 2 and len(runs[-2]) < 2 * len(runs[-1]):
            newer, older = runs.pop(), runs.pop()
            runs.append(MemberTable.merged(older, newer))

    def _blas_groups(self, groups: np.ndarray, a_cnt: np.ndarray, b_cnt: np.ndarray) -> np.ndarray:
        """Worksets whose range pair is large enough for the block kernel (split sites excepted)."""
        return (a_cnt.astype(np.int64) * b_cnt >= BLAS_MIN_PAIRS) & ((groups & CROSS_BIT) == 0)

    def _blocks(self, gids: np.ndarray, a: Records, a_role: np.ndarray, a_start: np.ndarray, a_cnt: np.ndarray,
                b: Records, b_role: np.ndarray, b_start: np.ndarray, b_cnt: np.ndarray,
                counters: WorksetCounters | None, store: np.ndarray | None = None) -> list[Pairs]:
        """Large worksets through :class:`~driftjoin.blockjoin.BlockJoin`; same pairs and counts as
        :meth:`_evaluate` over every pair of the two ranges.

        ``store`` given: the b-range is the a-range's own workset of new members (a = its
        non-outer prefix), pairs ``i < j`` of stored members only.
        """
        if self._kernel is None:
            self._kernel = BlockJoin(self.metric, self.threshold)
        out = []
        for g, s0, na, t0, nb in zip(gids.tolist(), a_start.tolist(), a_cnt.tolist(), b_start.tolist(), b_cnt.tolist()):
            ra = np.arange(s0, s0 + na)
            if store is None:
                res = self._kernel.join(a.vec[ra], b.vec[t0 : t0 + nb])
                ia, ib = ra[res.ia], t0 + res.ib
                if counters is not None:
                    _accumulate_n(counters.comparisons, g, self._compared(a, a_role, ra, b, b_role, np.arange(t0, t0 + nb)))
            else:  # pairs inside the non-outer prefix, then prefix x the outer suffix
                rs = np.arange(s0 + na, t0 + nb)
                inner = self._kernel.join(a.vec[ra])
                cross = self._kernel.join(a.vec[ra], a.vec[rs])
                ia = np.concatenate([ra[inner.ia], ra[cross.ia]])
                ib = np.concatenate([ra[inner.ib], rs[cross.ib]])
                keep = store[ia] & store[ib]
                ia, ib = ia[keep], ib[keep]
                if counters is not None:
                    ra, rs = ra[store[ra]], rs[store[rs]]
                    inside = self._compared(a, a_role, ra, a, a_role, ra, same=True)
                    _accumulate_n(counters.comparisons, g, inside + self._compared(a, a_role, ra, a, a_role, rs))
            out.append(self._evaluate(np.full(len(ia), g, dtype=np.int64), a, a_role, ia, b, b_role, ib, counters, count=False))
        return out

    def _evaluate(
        self,
        gid: np.ndarray,
        a: Records,
        a_role: np.ndarray,
        ia: np.ndarray,
        b: Records,
        b_role: np.ndarray,
        ib: np.ndarray,
        counters: WorksetCounters | None,
        count: bool = True,
    ) -> Pairs:
        """Apply the role, stream and split-site rules to candidates (a[ia], b[ib]); test distances.

        Roles are encoded bytes (see :mod:`driftjoin.s3j.routing`): the low two bits are the role,
        the rest the member's part in a split workset; a cross-part site pairs only members of
        different parts.
        """
        ca, cb = a_role[ia], b_role[ib]
        ra, rb = ca & 3, cb & 3
        ok = ~((ra == OUTER) & (rb == OUTER))
        if not self.self_join:
            ok &= a.side[ia] != b.side[ib]
        cross = (gid & CROSS_BIT) != 0
        if cross.any():
            ok &= ~(cross & ((ca >> 2) == (cb >> 2)))
        if self.interval:
            ok &= self.windowing.accept(a.time[ia], a.ghost[ia], b.time[ib], b.ghost[ib])
        gid, ia, ib, ra, rb = gid[ok], ia[ok], ib[ok], ra[ok], rb[ok]
        if counters is not None and count:
            compared = ~((ra == INNER) & (rb == INNER))
            _accumulate_gids(counters.comparisons, gid[compared])
        if len(ia) == 0:
            return Pairs.concat([], a.id.dtype)
        dist = self.metric.rowwise(a.vec[ia], b.vec[ib])
        hit = dist <= self.threshold
        left, right = a.id[ia], b.id[ib]
        if self.self_join:
            hit &= left != right
        ia, ib, dist, gid, left, right = ia[hit], ib[hit], dist[hit], gid[hit], left[hit], right[hit]
        if counters is not None:
            _accumulate_gids(counters.pairs, gid)
        return self._oriented(a, ia, b, ib, left, right, dist, gid)

    def _compared(self, a: Records, a_role: np.ndarray, ra: np.ndarray, b: Records, b_role: np.ndarray, rb: np.ndarray,
                  same: bool = False) -> int:
        """The comparisons :meth:`_evaluate` counts over all pairs of ``ra x rb`` (``same``: the
        unordered pairs of ``ra`` with itself), without enumerating them."""
        if self.interval:
            return _compared_timed(a, a_role, ra, b, b_role, rb, self.self_join, self.windowing.within, same)
        return _compared(a, a_role, ra, b, b_role, rb, self.self_join, same)

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
        return self._oriented(a, ia, b, ib, left, right, dist, groups[g])

    def _oriented(self, a: Records, ia: np.ndarray, b: Records, ib: np.ndarray, left: np.ndarray, right: np.ndarray,
                  dist: np.ndarray, workset: np.ndarray) -> Pairs:
        """Joined pairs as the output reports them: ``left_id < right_id`` in a self-join, the left
        stream's record first in a two-stream join; the later ingestion time of the two."""
        swap = (right < left) if self.self_join else (a.side[ia] == 1)
        return Pairs(left_id=np.where(swap, right, left), right_id=np.where(swap, left, right), distance=dist,
                     window=a.window[ia], ingest=np.maximum(a.ingest[ia], b.ingest[ib]), workset=workset)


#: Bit 31 of a workset id marks a cross-part site of a split workset (driftjoin.s3j.routing).
CROSS_BIT = 1 << 31

#: Range pairs of a workset with at least this many member pairs are joined by the block kernel
#: (matrix products, :mod:`driftjoin.blockjoin`); smaller ones by the compiled pair loop
#: (:mod:`driftjoin.s3j.kernels`). Measured crossover on the 2-core machine: about 64 x 64
#: members in 2 to 128 dimensions (a block-kernel call costs ~0.3 ms of fixed work).
BLAS_MIN_PAIRS = 4096


def _times(rec: Records) -> tuple[np.ndarray, np.ndarray]:
    """A run's times and ghost flags for the compiled loop (empty, and unread, without times)."""
    if rec.timed:
        return rec.time, rec.ghost
    return _NO_TIMES, _NO_GHOSTS


_NO_TIMES = np.zeros(0, np.int64)
_NO_GHOSTS = np.zeros(0, bool)


def _kernels():
    """The compiled pair loop (:mod:`driftjoin.s3j.kernels`), imported on first use: numba costs
    about half a second to import, which a Python worker that never computes pairs (a router,
    Spark's planning worker) does not pay."""
    from driftjoin.s3j import kernels

    return kernels


def _member_key(workset: np.ndarray, role: np.ndarray) -> np.ndarray:
    """Sort key of a member table: by workset, then non-outer before outer members."""
    return 2 * workset.astype(np.int64) + ((role & 3) == OUTER)


def _accumulate(bucket: dict[int, int], groups: np.ndarray, counts: np.ndarray) -> None:
    """Add per-group counts (non-zero ones) to a per-workset dict."""
    for i in np.nonzero(counts)[0].tolist():
        g = int(groups[i])
        bucket[g] = bucket.get(g, 0) + int(counts[i])


def _categories(rec: Records, role: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """Members of ``rows`` counted by (plain role, side): a 3 x 2 histogram."""
    cat = (role[rows] & 3).astype(np.int64) * 2 + rec.side[rows].astype(np.int64)
    return np.bincount(cat, minlength=6).reshape(3, 2).astype(np.int64)


def _compared(a: Records, a_role: np.ndarray, ra: np.ndarray, b: Records, b_role: np.ndarray, rb: np.ndarray,
              self_join: bool, same: bool = False) -> int:
    """The comparisons :meth:`SimilarityWorker._evaluate` counts over all pairs of ``ra x rb``
    (``same``: the unordered pairs of ``ra`` with itself), from role/side histograms."""
    ha, hb = _categories(a, a_role, ra), _categories(b, b_role, rb)
    w = np.ones((3, 2, 3, 2), dtype=np.int64)
    w[OUTER, :, OUTER, :] = 0  # never paired
    w[INNER, :, INNER, :] = 0  # paired by the t/2 bound, not compared
    if not self_join:
        w[:, 0, :, 0] = 0
        w[:, 1, :, 1] = 0
    total = int(np.einsum("ij,ijkl,kl->", ha, w, hb))
    if same:
        diag = int(np.einsum("ij,ijij->", ha, w))
        total = (total - diag) // 2
    return total


def _compared_timed(a: Records, a_role: np.ndarray, ra: np.ndarray, b: Records, b_role: np.ndarray, rb: np.ndarray,
                    self_join: bool, within: int, same: bool = False) -> int:
    """:func:`_compared` for an interval join: only pairs the window accepts (not two ghosts,
    times at most ``within`` apart) count, found per pair of member classes (role, side, ghost)
    by a binary search of the sorted times of the other class."""
    w = np.ones((3, 2, 3, 2), dtype=np.int64)
    w[OUTER, :, OUTER, :] = 0
    w[INNER, :, INNER, :] = 0
    if not self_join:
        w[:, 0, :, 0] = 0
        w[:, 1, :, 1] = 0

    def classes(rec: Records, role: np.ndarray, rows: np.ndarray) -> dict[tuple[int, int, bool], np.ndarray]:
        key = ((role[rows] & 3).astype(np.int64) * 2 + rec.side[rows]) * 2 + rec.ghost[rows]
        return {(int(k) // 4, int(k) // 2 % 2, bool(k % 2)): np.sort(rec.time[rows[key == k]]) for k in np.unique(key)}

    ca, cb = classes(a, a_role, ra), classes(b, b_role, rb)
    total = 0
    for (r1, s1, g1), ta in ca.items():
        for (r2, s2, g2), tb in cb.items():
            if w[r1, s1, r2, s2] and not (g1 and g2):
                total += int((np.searchsorted(tb, ta + within, "right") - np.searchsorted(tb, ta - within, "left")).sum())
    if same:  # every member meets itself once in the ordered count: take those out, halve
        diag = sum(len(t) for (r, s, g), t in ca.items() if w[r, s, r, s] and not g)
        total = (total - diag) // 2
    return total


def _accumulate_n(bucket: dict[int, int], gid: int, n: int) -> None:
    if n:
        bucket[gid] = bucket.get(gid, 0) + n


def _accumulate_gids(bucket: dict[int, int], gids: np.ndarray) -> None:
    if len(gids) == 0:
        return
    uniq, cnt = np.unique(gids, return_counts=True)
    for g, c in zip(uniq.tolist(), cnt.tolist()):
        bucket[g] = bucket.get(g, 0) + c


def run_arrays(t: MemberTable) -> tuple:
    """A run as plain arrays (what a runtime persists)."""
    return (t.workset, t.role, t.records.arrays())


def run_from_arrays(arrays: tuple, parts: tuple[int, ...] = ()) -> MemberTable:
    """Inverse of :func:`run_arrays` (the arrays of a run are sorted already)."""
    ws, role, rec = arrays
    return MemberTable(ws, role, Records(*rec), parts)


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
