"""The stateful join of one link worker: each matching pair exactly once, explained.

The worker keeps one :class:`~driftjoin.metric.store.RunStore` per lane (:mod:`driftjoin.linkage.plan`),
whose runs hold, per window, its entries sorted by group. A batch's copies become one run per
lane and window; the store yields every allowed pair of a new entry with a stored entry of the
same group, and of two new entries, once each (:mod:`driftjoin.metric.store`). A candidate
``(x, y)`` found in lane ``l`` at group ``g`` of rule ``r`` is a pair of the output iff

1. the window accepts it (interval joins: ``|t_x - t_y| <= within``, never ghost x ghost), and
   it is a pair of the join (two-sided: different sides; self-link: different ids);
2. every condition of rule ``r`` holds, exactly (:mod:`driftjoin.linkage.rules`), the block's
   equalities included (a hash collision adds candidates, never pairs); edit and token-set
   conditions first pass the count bounds of :mod:`driftjoin.metric.bounds` on numbers kept per
   stored run, which reject most candidates of a common driving key without computing a
   distance;
3. no rule before ``r`` holds (*first-rule ownership*);
4. ``(l, g)`` is the smallest ``(lane, group)`` of rule ``r`` under which the two records' entries
   may pair (*canonical meeting*; recomputed from the two records: entries are a function of the
   record copy and the plan).

**Exactly once.** Take a pair of one window that matches, and ``r`` the first rule it satisfies.
Completeness: the driver of ``r`` gives the two records a shared group under allowed classes
(:mod:`driftjoin.linkage.drivers`, and :mod:`driftjoin.linkage.split` for the cells of heavy groups,
all under the window's one decision), each group lives on one worker, so the store of that
worker meets the pair at every such group, in the batch of the later record; at the smallest
one, tests 1-4 pass. Uniqueness: tests 3 and 4 fail for every other rule, lane and group, and
at the canonical group one worker meets the pair; where it meets it twice there (two entries of
one record sharing a group: a diagonal split cell, SEG and SUB keys of equal-length strings, a
hash collision) both candidates come from the same two runs in the same batch, and are made one
by the two records' positions. Rules are found without any state across rules, and a pair is
reported once per window that holds both records (one window for tumbling, interval and
unbounded windows).

**Explained.** Every output pair carries every rule it satisfies (a bit mask) and the distance of
every measure of the rule set, computed on the two records' values.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from driftjoin.linkage.plan import LaneEntries, LinkCore
from driftjoin.linkage.records import LinkPairs
from driftjoin.linkage.rules import JACCARD, LEVENSHTEIN, Condition
from driftjoin.metric.base import candidate_filter
from driftjoin.metric.bounds import EditSignature, SetSignature, within_edits, within_jaccard
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.store import Run, RunStore, unordered

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd

#: Version of the state dicts of link workers.
STATE_FORMAT = 1


@dataclass
class LinkStats:
    """What a worker did in a batch: candidate pairs its stores yielded, pairs tested on the
    values (after the count bounds and the window test), pairs emitted, entries stored; per lane
    the entry counts of its largest ordinary groups (hot-key detection) and the sum of the squares
    of all."""

    candidates: int = 0
    comparisons: int = 0
    pairs: int = 0
    entries: int = 0
    groups: dict[tuple[int, int], int] = field(default_factory=dict)
    square_sum: float = 0.0


#: Groups per rule a worker reports in its statistics (the largest of its batch).
REPORTED_GROUPS = 16


def _compat_table(allowed: list[tuple[int, int]]) -> np.ndarray:
    """``T[mx, my]``: some class in mask ``mx`` may pair with some class in mask ``my``."""
    pairs = unordered(allowed)
    t = np.zeros((16, 16), bool)
    for mx in range(16):
        for my in range(16):
            t[mx, my] = any((min(a, b), max(a, b)) in pairs for a in range(4) if mx >> a & 1
                            for b in range(4) if my >> b & 1)
    return t


def _signature(run: Run, c: Condition) -> EditSignature | SetSignature:
    """The bound signatures (:mod:`driftjoin.metric.bounds`) of a run's records under an edit or
    token-set condition, made once per run."""
    m = c.measure
    key = f"bounds:{m.label}"
    sig = run.memo.get(key)
    if sig is None:
        v = run.records.value.cols[m.column]
        if c.metric == LEVENSHTEIN:
            sig = EditSignature.of(v)
        else:  # each value tokenised once: an empty set is unusable in the signature as in the measure
            present = ~pd.isnull(v) if len(v) else np.zeros(0, bool)
            sig = SetSignature.of([m.token_set(x) if p else None for x, p in zip(v.tolist(), present.tolist())])
        run.memo[key] = sig
    return sig


class LinkWorker:
    """The join of worker ``index`` of ``core`` (module docstring).

    Example::

        >>> from driftjoin.linkage.rules import check_rules
        >>> from driftjoin.linkage.drivers import PassJoinDriver
        >>> from driftjoin.linkage.records import Fields, link_records
        >>> from driftjoin.windows import Windowing
        >>> rs = check_rules([{"name": ("levenshtein", 1)}], {"name": "string"})
        >>> core = LinkCore(rs, (PassJoinDriver(rs.rules[0].conditions[0]),), 1, True, Windowing.unbounded())
        >>> pairs = LinkWorker(core, 0).add(link_records([1, 2, 3], Fields.build(rs, {"name": ["ann", "anne", "bob"]})))
        >>> pairs.tuples(), pairs.distances.tolist()
        ([(1, 2, 0, 0)], [[1.0]])
    """

    def __init__(self, core: LinkCore, index: int, bounds: bool = True) -> None:
        self.core, self.index = core, index
        #: test the count bounds before the exact conditions (off: every candidate is tested
        #: exactly; the same pairs, for measuring what the bounds save)
        self.bounds = bounds
        self.self_join = core.self_join
        self.windows = core.windows
        self.stores = [RunStore(core.allowed(lane)) for lane in range(core.n_lanes)]
        self.tables = [_compat_table(core.allowed(lane)) for lane in range(core.n_lanes)]
        self.stats = LinkStats()

    # -- a batch ----------------------------------------------------------------------------

    def add(self, batch: MetricRecords) -> LinkPairs:
        """Join a batch of copies routed here (window copies); returns the pairs they complete."""
        core, out = self.core, []
        n_m = len(core.ruleset.measures)
        for r in range(len(core.ruleset.rules)):
            for split, e in enumerate(core.entries(batch, r)):
                e = e.take(e.worker == self.index)
                self.stats.entries += len(e.rec)
                if not split and len(e.rec):
                    self._count_groups(r, e)
                lane = 2 * r + split
                window = batch.window[e.rec]
                for w in np.unique(window).tolist():
                    sel = window == w
                    run = Run.build(batch, e.group[sel], e.cls[sel], e.rec[sel])
                    found = [self._verify(r, lane, run, ia, other, ib) for other, ia, ib in self.stores[lane].candidates(w, run)]
                    self.stores[lane].add(w, run)
                    out.append(self._emit(found, n_m, batch.id.dtype))
        pairs = LinkPairs.concat(out, n_m, batch.id.dtype)
        self.stats.pairs += len(pairs)
        return pairs

    def _count_groups(self, r: int, e: LaneEntries) -> None:
        g, c = np.unique(e.pre, return_counts=True)
        self.stats.square_sum += float((c.astype(np.float64) ** 2).sum())
        top = np.argsort(-c, kind="stable")[:REPORTED_GROUPS]
        for k in top.tolist():
            key = (r, int(g[k]))
            self.stats.groups[key] = self.stats.groups.get(key, 0) + int(c[k])

    def _verify(self, r: int, lane: int, a: Run, ia: np.ndarray, b: Run, ib: np.ndarray) -> tuple:
        """Tests 1-4 of the module docstring on candidates ``a[ia]`` x ``b[ib]``."""
        X, Y = a.records, b.records
        ra, rb = a.rec[ia], b.rec[ib]
        group = a.group[ia]
        self.stats.candidates += len(ia)
        rules = self.core.ruleset.rules
        ok = np.ones(len(ia), bool)
        for c in rules[r].fuzzy if self.bounds else ():
            if c.metric == LEVENSHTEIN:
                ok &= within_edits(_signature(a, c), ra, _signature(b, c), rb, int(c.threshold))
            elif c.metric == JACCARD:
                ok &= within_jaccard(_signature(a, c), ra, _signature(b, c), rb, c.threshold)
        k = np.nonzero(ok)[0]
        k = k[candidate_filter(self, X, ra[k], Y, rb[k])]
        self.stats.comparisons += len(k)
        fx, fy = X.value.cols, Y.value.cols
        for c in rules[r].by_cost:
            if not len(k):
                break
            k = k[c.holds(fx[c.column][ra[k]], fy[c.column][rb[k]])]
        for earlier in rules[:r]:
            if not len(k):
                break
            sat = np.ones(len(k), bool)
            for c in earlier.by_cost:
                idx = np.nonzero(sat)[0]
                if not len(idx):
                    break
                sat[idx] = c.holds(fx[c.column][ra[k[idx]]], fy[c.column][rb[k[idx]]])
            k = k[~sat]
        if len(k):
            k = k[self._canonical(r, lane, X, ra[k], Y, rb[k], group[k])]
        return a, ra[k], b, rb[k]

    def _canonical(self, r: int, lane: int, X: MetricRecords, ra: np.ndarray, Y: MetricRecords, rb: np.ndarray,
                   group: np.ndarray) -> np.ndarray:
        """Whether ``(lane, group)`` is the smallest (lane, group) of rule ``r`` where ``X[ra[k]]``
        and ``Y[rb[k]]`` have entries under classes the lane pairs."""
        n = len(ra)
        pair, lanes, groups, tag, cls = [], [], [], [], []
        for t, (R, rows) in enumerate(((X, ra), (Y, rb))):
            for split, e in enumerate(self.core.entries(R.take(rows), r)):
                pair.append(e.rec)
                lanes.append(np.full(len(e.rec), 2 * r + split, np.int64))
                groups.append(e.group)
                tag.append(np.full(len(e.rec), t, np.int64))
                cls.append(e.cls)
        pair, lanes, groups, tag, cls = (np.concatenate(x) for x in (pair, lanes, groups, tag, cls))
        order = np.lexsort((groups, lanes, pair))
        pair, lanes, groups, tag, cls = pair[order], lanes[order], groups[order], tag[order], cls[order]
        start = np.ones(len(pair), bool)
        start[1:] = (pair[1:] != pair[:-1]) | (lanes[1:] != lanes[:-1]) | (groups[1:] != groups[:-1])
        idx = np.nonzero(start)[0]
        bits = (1 << cls).astype(np.int64)
        mx = np.bitwise_or.reduceat(np.where(tag == 0, bits, 0), idx)
        my = np.bitwise_or.reduceat(np.where(tag == 1, bits, 0), idx)
        runs_lane = lanes[idx]
        ok = np.zeros(len(idx), bool)
        for l in np.unique(runs_lane).tolist():
            at = runs_lane == l
            ok[at] = self.tables[l][mx[at], my[at]]
        first = np.full(n, -1, np.int64)
        cand = idx[ok]
        p_of = pair[cand]
        keep = np.ones(len(cand), bool)
        keep[1:] = p_of[1:] != p_of[:-1]  # sorted by (pair, lane, group): the first compatible run per pair
        first[p_of[keep]] = cand[keep]
        has = first >= 0
        out = np.zeros(n, bool)
        out[has] = (lanes[first[has]] == lane) & (groups[first[has]] == group[has])
        return out

    def _emit(self, found: list[tuple], n_m: int, id_dtype) -> LinkPairs:
        """The output of the candidates that passed (duplicates from one pair of runs made one)."""
        found = [f for f in found if len(f[1])]
        if not found:
            return LinkPairs.empty(n_m, id_dtype)
        runs: dict[int, int] = {}
        ka, kb, parts = [], [], []
        for a, ra, b, rb in found:
            ia, ib = runs.setdefault(id(a), len(runs)), runs.setdefault(id(b), len(runs))
            x = ia * (1 << 40) + ra
            y = ib * (1 << 40) + rb
            ka.append(np.minimum(x, y))
            kb.append(np.maximum(x, y))
            parts.append((a, ra, b, rb))
        ka, kb = np.concatenate(ka), np.concatenate(kb)
        _, first = np.unique(np.stack([ka, kb], axis=1), axis=0, return_index=True)
        X = MetricRecords.concat([a.records.take(ra) for a, ra, _, _ in parts])
        Y = MetricRecords.concat([b.records.take(rb) for _, _, b, rb in parts])
        first = np.sort(first)
        return self.explain(X.take(first), Y.take(first))

    def explain(self, X: MetricRecords, Y: MetricRecords) -> LinkPairs:
        """Pairs ``X[k], Y[k]`` (of one window each) with their rules, distances and orientation."""
        rs = self.core.ruleset
        fx, fy = X.value.cols, Y.value.cols
        mask = np.zeros(len(X), np.int64)
        for rule in rs.rules:
            sat = np.ones(len(X), bool)
            for c in rule.conditions:
                sat &= c.holds(fx[c.column], fy[c.column])
            mask |= sat.astype(np.int64) << rule.index
        first = _lowest_bit(mask)
        dist = np.column_stack([m.distances(fx[m.column], fy[m.column]) for m in rs.measures]) if rs.measures \
            else np.zeros((len(X), 0))
        swap = (Y.id < X.id) if self.self_join else (X.side == 1)
        left = np.where(swap, Y.id, X.id)
        right = np.where(swap, X.id, Y.id)
        ingest = np.fmax(X.value.ingest, Y.value.ingest)
        return LinkPairs(left, right, first.astype(np.int32), mask, dist, X.window.copy(), ingest)

    # -- state ------------------------------------------------------------------------------

    def expire_before(self, window: int) -> None:
        for s in self.stores:
            s.expire_before(window)

    def runs(self) -> Iterator[tuple[int, int, Run]]:
        """``(lane, window, run)`` of every stored run."""
        for lane, s in enumerate(self.stores):
            for w, run in s.runs():
                yield lane, w, run

    def state(self) -> dict:
        return {"format": STATE_FORMAT, "lanes": [s.state() for s in self.stores]}

    def restore(self, state: dict) -> None:
        if state.get("format") != STATE_FORMAT:
            raise RuntimeError(f"this state has link worker format {state.get('format')}, this driftjoin reads format "
                               f"{STATE_FORMAT}: restart the query with a new checkpoint location")
        for s, lane in zip(self.stores, state["lanes"]):
            s.restore(lane)


def _lowest_bit(mask: np.ndarray) -> np.ndarray:
    """Index of the lowest set bit of each (non-zero) mask."""
    low = mask & -mask
    return np.log2(low.astype(np.float64)).astype(np.int64)

