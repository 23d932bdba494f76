"""PassJoin for edit distance, distributed and streaming (Li, Deng, Wang, Feng, "Pass-Join: A
Partition-based Method for Similarity Joins", VLDB 2011).

**Segments.** For a threshold of ``tau`` edits, a string of length ``l`` is cut into ``tau + 1``
even segments: the first ``tau + 1 - k`` of length ``floor(l / (tau + 1))``, the last ``k`` one
longer (``k = l mod (tau + 1)``); segment ``i`` (0-based) starts at ``p_i``. Pigeonhole: ``tau``
edits touch at most ``tau`` segments, so if ``ed(s, r) <= tau`` some segment of ``s`` occurs in
``r`` unchanged.

**Multi-match-aware substring selection** (section 4.3): for ``|r| = |s| + Delta`` with
``0 <= Delta <= tau`` it suffices to look for segment ``i`` of ``s`` at the positions ``q`` of
``r`` with ``max(p_i - i, p_i + Delta - (tau - i)) <= q <= min(p_i + i, p_i + Delta + (tau - i))``
(inside ``r``): the edits left of the segment shift it by at most their number, those right of it
too, and some matching segment has at most ``i`` edits on its left and ``tau - i`` on its right.
Length filter: only lengths ``|r| - tau <= |s| <= |r|`` are probed.

**Keys.** A string ``s`` *indexes* its segments: entries ``(l = |s|, i, segment)``, class SEG; a
string ``r`` *probes* its selected substrings for every ``l`` in ``[|r| - tau, |r|]``: entries
``(l, i, substring)``, class SUB (one per distinct substring of each ``(l, i)``). Key ``(l, i,
text)`` is hashed to a 61-bit group (a polynomial hash of the code points, mixed with ``l``, ``i``
and the length) and the group to a worker. In a stream either side may come first, so a worker
stores SEG and SUB entries alike and every new entry probes the stored ones of the other class
(:mod:`driftjoin.metric.store`).

**Exactly once.** A candidate ``(s, r)`` met under a SEG entry of ``s`` and a SUB entry of ``r``
is emitted iff: ``l``, ``i`` and the text agree exactly (a hash collision adds candidates, never
pairs); ``|s| < |r|``, or ``|s| = |r|`` and ``s`` is the smaller by ``(value, side, id)`` (both
orientations exist then); ``ed(s, r) <= tau`` (rapidfuzz); and no segment ``j < i`` of ``s``
occurs in ``r`` at a selected position (the pair is emitted where its smallest matching segment
index lives). Each key lives on one worker, SUB entries are distinct per ``(r, l, i, text)``, and
pigeonhole with the selection guarantees a smallest matching ``i``: every pair with
``ed <= tau`` is emitted once, in each window that holds both strings.

Strings are unicode (Python code points, as rapidfuzz counts them); the empty string has ``tau + 1``
empty segments, which every string of length at most ``tau`` matches.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from driftjoin.metric.base import Routing, RunJoin, Strategy, candidate_filter
from driftjoin.metric.records import MetricPairs, MetricRecords
from driftjoin.metric.store import Run
from driftjoin.runs import code_points, run_positions
from driftjoin.windows import Windowing

SEG = 0
SUB = 1
_BASE = np.uint64(0x9E3779B97F4A7C15 | 1)
_BASE_INV = np.uint64(pow(int(_BASE), -1, 1 << 64))
_MASK61 = np.uint64((1 << 61) - 1)


def segment_layout(length: np.ndarray, index: np.ndarray, tau: int) -> tuple[np.ndarray, np.ndarray]:
    """Start and length of segment ``index`` of a string of ``length`` (even partition into tau + 1)."""
    m = tau + 1
    a = length // m
    short = m - (length - a * m)
    start = index * a + np.maximum(0, index - short)
    return start, a + (index >= short)


def selected_range(n: np.ndarray, l: np.ndarray, index: np.ndarray, tau: int) -> tuple[np.ndarray, np.ndarray]:
    """Multi-match-aware positions ``[lo, hi]`` in a string of length ``n`` for segment ``index`` of
    strings of length ``l`` (``0 <= n - l <= tau``); empty when ``lo > hi``."""
    start, seg = segment_layout(l, index, tau)
    delta = n - l
    lo = np.maximum(np.maximum(0, start - index), start + delta - (tau - index))
    hi = np.minimum(np.minimum(n - seg, start + index), start + delta + (tau - index))
    return lo, hi


@dataclass
class Entries:
    """SEG and SUB entries of a batch of strings (module docstring)."""

    rec: np.ndarray
    cls: np.ndarray
    l: np.ndarray
    i: np.ndarray
    pos: np.ndarray
    size: np.ndarray
    group: np.ndarray

    def take(self, keep: np.ndarray) -> "Entries":
        return Entries(*(getattr(self, f)[keep] for f in ("rec", "cls", "l", "i", "pos", "size", "group")))


def entries(strings: np.ndarray, tau: int) -> Entries:
    """Every entry of ``strings`` (an object array of ``str``), vectorised."""
    n = np.fromiter(map(len, strings), np.int64, len(strings))
    offsets = np.concatenate([[0], np.cumsum(n)]).astype(np.int64)
    cp = code_points(strings.tolist())
    prefix, power = _prefix_hashes(cp)
    rec_ids = np.arange(len(strings), dtype=np.int64)
    m = tau + 1
    # SEG: (record, i)
    s_rec = np.repeat(rec_ids, m)
    s_i = np.tile(np.arange(m, dtype=np.int64), len(strings))
    s_l = n[s_rec]
    s_pos, s_size = segment_layout(s_l, s_i, tau)
    # SUB: (record, l, i, position)
    c_rec = np.repeat(rec_ids, m * m)
    c_l = n[c_rec] - np.tile(np.repeat(np.arange(m, dtype=np.int64), m), len(strings))
    c_i = np.tile(np.arange(m, dtype=np.int64), m * len(strings))
    ok = c_l >= 0
    c_rec, c_l, c_i = c_rec[ok], c_l[ok], c_i[ok]
    lo, hi = selected_range(n[c_rec], c_l, c_i, tau)
    count = np.maximum(hi - lo + 1, 0)
    b_rec, b_l, b_i = np.repeat(c_rec, count), np.repeat(c_l, count), np.repeat(c_i, count)
    b_pos = np.repeat(lo, count) + run_positions(count)
    _, b_size = segment_layout(b_l, b_i, tau)
    out = Entries(
        rec=np.concatenate([s_rec, b_rec]), cls=np.concatenate([np.full(len(s_rec), SEG), np.full(len(b_rec), SUB)]),
        l=np.concatenate([s_l, b_l]), i=np.concatenate([s_i, b_i]), pos=np.concatenate([s_pos, b_pos]),
        size=np.concatenate([s_size, b_size]), group=np.zeros(0, np.int64))
    text = _substring_hash(prefix, power, offsets[out.rec] + out.pos, out.size)
    out.group = _mix(text, out.l, out.i, out.size)
    return _distinct_substrings(out, cp, offsets, strings)


def _prefix_hashes(codepoints: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``S[k] = sum_{j<k} (c_j + 1) B^-j`` and ``B^k`` (mod 2^64) over the ``codepoints`` of the
    joined text."""
    cp = codepoints.astype(np.uint64) + np.uint64(1)
    inv = np.cumprod(np.concatenate([[np.uint64(1)], np.full(len(cp), _BASE_INV, np.uint64)]))
    power = np.cumprod(np.concatenate([[np.uint64(1)], np.full(len(cp), _BASE, np.uint64)]))
    prefix = np.concatenate([[np.uint64(0)], np.cumsum(cp * inv[:-1], dtype=np.uint64)])
    return prefix, power


def _substring_hash(prefix: np.ndarray, power: np.ndarray, start: np.ndarray, size: np.ndarray) -> np.ndarray:
    """Position-independent hash of the code points ``[start, start + size)`` of the joined text."""
    return (prefix[start + size] - prefix[start]) * power[start]


def _mix(text: np.ndarray, l: np.ndarray, i: np.ndarray, size: np.ndarray) -> np.ndarray:
    """A 61-bit group of the key ``(l, i, text)`` (splitmix64 finaliser)."""
    z = text ^ (l.astype(np.uint64) * np.uint64(0xBF58476D1CE4E5B9)) ^ (i.astype(np.uint64) * np.uint64(0x94D049BB133111EB)) \
        ^ (size.astype(np.uint64) << np.uint64(40))
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return (z & _MASK61).astype(np.int64)


def _distinct_substrings(e: Entries, cp: np.ndarray, offsets: np.ndarray, strings: np.ndarray) -> Entries:
    """Keep one SUB entry per distinct ``(record, l, i, substring)``, the one at the smallest
    position. SUB entries are sorted (stably) by a hash of their record and group; the entries of
    a run of equal hashes are compared with the run's first, vectorised (record, ``l``, ``i``
    and the text over the code points ``cp`` of the joined text, string ``r`` starting at
    ``offsets[r]``); a run whose entries are not all equal to its first (a hash collision) is
    settled entry by entry."""
    sub = np.nonzero(e.cls == SUB)[0]
    key = (e.group[sub].astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)) ^ e.rec[sub].astype(np.uint64)
    by_key = np.argsort(key, kind="stable")  # entries come by position within (record, l, i)
    order, key = sub[by_key], key[by_key]
    same = np.zeros(len(order), bool)
    same[1:] = key[1:] == key[:-1]
    if not same.any():
        return e
    run_start = np.nonzero(~same)[0]
    run_of = np.cumsum(~same) - 1  # run of each sorted position
    dup = np.nonzero(same)[0]
    x, f = order[dup], order[run_start[run_of[dup]]]
    size = e.size[x]
    at = np.repeat(np.arange(len(x)), size)
    step = run_positions(size)
    last = max(len(cp) - 1, 0)  # a colliding first entry may be shorter: its reads stay inside cp
    differs = cp[np.minimum(np.repeat(offsets[e.rec[x]] + e.pos[x], size) + step, last)] \
        != cp[np.minimum(np.repeat(offsets[e.rec[f]] + e.pos[f], size) + step, last)]
    equal = (np.bincount(at, weights=differs, minlength=len(x)) == 0)
    for c in (e.rec, e.l, e.i, e.size):
        equal &= c[x] == c[f]
    drop = np.zeros(len(e.rec), bool)
    drop[x[equal]] = True
    for run in np.unique(run_of[dup[~equal]]).tolist():  # hash collisions, exactly
        s, t = int(run_start[run]), int(run_start[run + 1]) if run + 1 < len(run_start) else len(order)
        seen: set[tuple[int, int, int, str]] = set()
        for y in order[s:t].tolist():
            r, p, z = int(e.rec[y]), int(e.pos[y]), int(e.size[y])
            piece = (r, int(e.l[y]), int(e.i[y]), strings[r][p : p + z])
            drop[y] = piece in seen
            seen.add(piece)
    return e.take(~drop)


def worker_of(group: np.ndarray, n_workers: int) -> np.ndarray:
    """The worker of a key group."""
    return group % n_workers


class PassJoinStrategy(Strategy):
    """PassJoin over ``n_workers`` workers for pairs within ``tau`` edits (module docstring).

    Example::

        >>> from driftjoin.metric.spaces import LevenshteinSpace
        >>> from driftjoin.metric.engine import MetricEngine
        >>> from driftjoin.windows import Windowing
        >>> s = PassJoinStrategy(1, 3, self_join=True, windows=Windowing.unbounded())
        >>> batch = MetricRecords.of([1, 2, 3], LevenshteinSpace().prepare(["kitten", "sitten", "sitting"]))
        >>> MetricEngine(s).process(batch).tuples()
        [(1, 2, 0)]
    """

    name = "passjoin"

    def __init__(self, tau: int, n_workers: int, *, self_join: bool, windows: Windowing) -> None:
        if isinstance(tau, bool) or int(tau) != tau or tau < 0:
            raise ValueError(f"PassJoin needs a whole number of edits >= 0, got {tau!r}")
        self.tau = int(tau)
        self.n_workers = int(n_workers)
        self.self_join = self_join
        self.windows = windows

    def route(self, batch: MetricRecords) -> Routing:
        e = entries(batch.value, self.tau)
        key = np.unique(e.rec * self.n_workers + worker_of(e.group, self.n_workers))
        row, worker = key // self.n_workers, key % self.n_workers
        return Routing(row, worker, np.zeros(len(row), np.int8))

    def worker(self, index: int) -> "PassJoinWorker":
        return PassJoinWorker(self.tau, index, self.n_workers, self.self_join, self.windows)


class PassJoinWorker(RunJoin):
    """The entries of the keys of one worker, per window; pairs each SEG with each SUB of a key."""

    def __init__(self, tau: int, index: int, n_workers: int, self_join: bool, windows: Windowing) -> None:
        super().__init__(self_join, windows, [(SEG, SUB)])
        self.tau, self.index, self.n_workers = tau, index, n_workers

    def add(self, batch: MetricRecords, role: np.ndarray) -> MetricPairs:
        e = entries(batch.value, self.tau)
        e = e.take(worker_of(e.group, self.n_workers) == self.index)
        return self.join_runs(batch, batch.window[e.rec], lambda sel: Run.build(
            batch, e.group[sel], e.cls[sel] | (batch.side[e.rec[sel]].astype(np.int64) << 1), e.rec[sel],
            {"l": e.l[sel], "i": e.i[sel], "pos": e.pos[sel], "size": e.size[sel]}))

    def verify(self, a: Run, ia: np.ndarray, b: Run, ib: np.ndarray) -> MetricPairs:
        """Candidates pair one SEG and one SUB entry (the allowed classes): check each as (s, r)."""
        s_in_a = (a.cls[ia] & 1) == SEG
        return MetricPairs.concat([self._check(a, ia[s_in_a], b, ib[s_in_a]), self._check(b, ib[~s_in_a], a, ia[~s_in_a])],
                                  a.records.id.dtype)

    def _check(self, sr: Run, es: np.ndarray, rr: Run, er: np.ndarray) -> MetricPairs:
        S, R = sr.records, rr.records
        rs, rrec = sr.rec[es], rr.rec[er]
        ok = (sr.cols["l"][es] == rr.cols["l"][er]) & (sr.cols["i"][es] == rr.cols["i"][er]) \
            & (sr.cols["size"][es] == rr.cols["size"][er]) & candidate_filter(self, S, rs, R, rrec)
        vs, vr = S.value[rs], R.value[rrec]
        ls = sr.cols["l"][es]
        lr = np.fromiter(map(len, vr), np.int64, len(vr))
        equal_length = ls == lr
        if equal_length.any():
            first = np.less(vs, vr) | ((vs == vr) & ((S.side[rs] < R.side[rrec])
                                                     | ((S.side[rs] == R.side[rrec]) & np.less(S.id[rs], R.id[rrec]))))
            ok &= ~equal_length | first
        keep = np.nonzero(ok)[0]
        self.stats.candidates += len(es)
        if len(keep) == 0:
            return MetricPairs.empty(S.id.dtype)
        d = _edit_distances(vs[keep], vr[keep], self.tau)
        self.stats.comparisons += len(keep)
        hit = keep[d <= self.tau]
        d = d[d <= self.tau]
        final = self._smallest_match(vs[hit], vr[hit], sr.cols["i"][es[hit]], sr.cols["pos"][es[hit]], rr.cols["pos"][er[hit]],
                                     sr.cols["size"][es[hit]])
        hit, d = hit[final], d[final]
        return MetricPairs.oriented(S, rs[hit], R, rrec[hit], d, self.self_join)

    def _smallest_match(self, s: np.ndarray, r: np.ndarray, index: np.ndarray, pos_s: np.ndarray, pos_r: np.ndarray,
                        size: np.ndarray) -> np.ndarray:
        """Per pair within ``tau``: whether segment ``index`` of ``s`` is the text at ``pos_r`` in ``r``
        (not a hash collision) and no segment ``j < index`` of ``s`` occurs in ``r`` at a selected position."""
        k, m = len(s), self.tau + 1
        ls = np.repeat(np.fromiter(map(len, s), np.int64, k), m)
        lr = np.repeat(np.fromiter(map(len, r), np.int64, k), m)
        js = np.tile(np.arange(m, dtype=np.int64), k)
        start, seg = segment_layout(ls, js, self.tau)
        lo, hi = selected_range(lr, ls, js, self.tau)
        start, seg, lo, hi = (x.reshape(k, m).tolist() for x in (start, seg, lo, hi))
        out = np.zeros(k, bool)
        for q, (a, b, i, ps, pr, z) in enumerate(zip(s.tolist(), r.tolist(), index.tolist(), pos_s.tolist(), pos_r.tolist(),
                                                     size.tolist())):
            if a[ps : ps + z] != b[pr : pr + z]:
                continue
            st, sz, lq, hq = start[q], seg[q], lo[q], hi[q]
            out[q] = not any(b[p : p + sz[j]] == a[st[j] : st[j] + sz[j]] for j in range(i) for p in range(lq[j], hq[j] + 1))
        return out



def _edit_distances(a: np.ndarray, b: np.ndarray, tau: int) -> np.ndarray:
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    return process.cpdist(a.tolist(), b.tolist(), scorer=Levenshtein.distance, score_cutoff=tau, dtype=np.int32,
                          workers=1).astype(np.float64)
