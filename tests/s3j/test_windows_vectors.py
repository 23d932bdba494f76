"""Sliding windows and interval joins on the vector paths (S3J: compiled pair loop and block kernel;
the grid) against a brute-force oracle of the definitions: times on and one tick beside every
window boundary, micro-batch boundaries, self- and two-stream joins, streams out of order within
the lateness, state restored from its persisted form mid-stream, worksets moved and split
inside open windows, closed windows dropped."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.clock import WindowClock
from driftjoin.distance import get_metric
from driftjoin.grid.engine import GridEngine
from driftjoin.s3j import compute
from driftjoin.s3j.compute import restore_worker, worker_state
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.records import Records, expand
from driftjoin.s3j.routing import site_gid
from driftjoin.s3j.space import random_centroids
from driftjoin.s3j.workset import OUTER, formulation_state, restore_formulation
from driftjoin.windows import Windowing


def oracle(ids, side, vec, times, metric, t, self_join, kind, length, slide, within) -> Counter:
    """Every qualifying pair, by brute force: ``(left, right, window start)`` once per window that
    holds both (windows ``[k slide, k slide + length)`` enumerated), or ``(left, right)`` once
    for an interval join."""
    d = metric.pairwise(vec, vec)
    out: Counter = Counter()
    n = len(ids)
    for i in range(n):
        for j in range(n):
            if d[i, j] > t or (self_join and (i >= j)) or (not self_join and not (side[i] == 0 and side[j] == 1)):
                continue
            pair = (min(ids[i], ids[j]), max(ids[i], ids[j])) if self_join else (ids[i], ids[j])
            if kind == "interval":
                if abs(int(times[i]) - int(times[j])) <= within:
                    out[pair] += 1
                continue
            lo, hi = min(times[i], times[j]), max(times[i], times[j])
            for k in range((lo - length) // slide - 1, lo // slide + 2):
                if k * slide <= lo and hi < k * slide + length:
                    out[(*pair, k * slide)] += 1
    return out


def got_key(windows: Windowing, left, right, window) -> tuple:
    if windows.kind == "interval":
        return (left, right)
    return (left, right, int(windows.start([window])[0]))


@st.composite
def window_settings(draw):
    kind = draw(st.sampled_from(["tumbling", "sliding", "interval"]))
    if kind == "interval":
        within = draw(st.integers(0, 12))
        bucket = max(within, 1) + draw(st.sampled_from([0, 0, 3]))
        return Windowing.interval(within, bucket), kind, bucket, bucket, within
    length = draw(st.integers(1, 24))
    slide = length if kind == "tumbling" else draw(st.integers(1, length))
    return Windowing.sliding(length, slide), kind, length, slide, None


def boundary_times(draw, w: Windowing, n: int) -> np.ndarray:
    """Times on a window (bucket) boundary, one tick beside it, or anywhere in [0, 80)."""
    edges = sorted({int(x) for k in range(0, 80 // w.slide + 2) for x in (w.start([k])[0], w.end([k])[0])}
                   | ({int(b * w.length - w.within) for b in range(1, 80 // w.length + 2)} if w.kind == "interval" else set()))
    near = st.sampled_from(edges).flatmap(lambda e: st.sampled_from([e - 1, e, e + 1]))
    return np.array(draw(st.lists(st.one_of(near, st.integers(0, 79)), min_size=n, max_size=n)), dtype=np.int64)


def run_stream(engine, windows, ids, side, vec, times, arrival, cuts, lateness, restore_at=None, stats=None,
               rebalance_at=None):
    """Feed records in ``arrival`` order, cut into micro-batches, with the window clock: late
    records refused, closed windows expired before each batch. Returns emitted keys and the
    late ids (and appends each batch's comparisons per workset to ``stats``). ``restore_at``:
    the batch before which the state is restored from its persisted form; ``rebalance_at``:
    the batch before which every workset moves to another worker and the first splits in two."""
    clock = WindowClock(windows, lateness)
    got, late_ids = [], []
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(ids))), len(ids)]
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if restore_at == k:
            engine = restored(engine)
        if rebalance_at == k:
            known = [(j << 32) | w for j, f in enumerate(engine.formulation) for w in range(f.n_worksets)]
            moved = {g: (i + 1) % len(engine.workers) for i, g in enumerate(known)}
            if known:
                moved.update({site_gid(known[0], i, j): (i + j) % len(engine.workers) for i in range(2) for j in range(i, 2)})
            engine.set_assignment(moved, {known[0]: 2} if known else {})
        rows = arrival[a:b]
        first = clock.first_open()
        if first is not None:
            engine.expire_before(first)
        late = clock.late(times[rows])
        late_ids += ids[rows[late]].tolist()
        rows = rows[~late]
        batch = Records(ids[rows], side[rows], vec[rows], np.zeros(len(rows)), np.zeros(len(rows), np.int64),
                        times[rows], np.zeros(len(rows), bool))
        pairs, batch_stats = engine.process(expand(batch, windows))
        if stats is not None:
            stats.append((batch_stats.comparisons, dict(sorted(batch_stats.worksets.comparisons.items()))))
        got += [got_key(windows, *x) for x in zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.window.tolist())]
        clock.advance(int(times[arrival[a:b]].max()))
    return got, late_ids, engine


def restored(engine):
    """A new engine holding the old one's state as a runtime persists it (plain arrays)."""
    fresh = pickle.loads(pickle.dumps(engine))
    if isinstance(engine, S3JEngine):
        for old, new in zip(engine.formulation, fresh.formulation):
            restore_formulation(new, pickle.loads(pickle.dumps(formulation_state(old))))
        for old, new in zip(engine.workers, fresh.workers):
            restore_worker(new, pickle.loads(pickle.dumps(worker_state(old))))
    return fresh


def stream_case(draw, n_max=70):
    windows, kind, length, slide, within = draw(window_settings())
    n = draw(st.integers(2, n_max))
    times = boundary_times(draw, windows, n)
    lateness = draw(st.integers(0, 2 * windows.length))
    # arrival order: by time plus a delay of at most the lateness, so no record is late
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    arrival = np.argsort(times + rng.integers(0, lateness + 1, n), kind="stable")
    cuts = draw(st.lists(st.integers(1, n), max_size=5))
    self_join = draw(st.booleans())
    side = np.zeros(n, np.int8) if self_join else rng.integers(0, 2, n).astype(np.int8)
    ids = rng.permutation(4 * n)[:n].astype(np.int64)
    return windows, kind, length, slide, within, times, lateness, arrival, cuts, self_join, side, ids, rng


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), metric=st.sampled_from(["euclidean", "manhattan", "angular"]), dim=st.sampled_from([1, 2, 3]),
       p=st.integers(1, 4), blocks=st.booleans())
def test_s3j_windows_equal_the_oracle(monkeypatch, data, metric, dim, p, blocks):
    windows, kind, length, slide, within, times, lateness, arrival, cuts, self_join, side, ids, rng = stream_case(data.draw)
    m = get_metric(metric)
    # few distinct vectors: many pairs within the threshold, many duplicates, ties on the bounds
    vec = m.prepare(rng.integers(-2, 3, (len(ids), dim)).astype(np.float64) + (1e-3 if metric == "angular" else 0.0))
    t = data.draw(st.sampled_from([0.5, 1.0, 2.0])) if metric != "angular" else 0.25
    restore_at = data.draw(st.one_of(st.none(), st.integers(1, 4)))
    rebalance_at = data.draw(st.one_of(st.none(), st.integers(1, 4)))
    monkeypatch.setattr(compute, "BLAS_MIN_PAIRS", 1 if blocks else 10**18)
    eng = S3JEngine(random_centroids(p, dim, int(rng.integers(1000))), m, t, self_join=self_join, dim=dim, windows=windows)
    got, late, _ = run_stream(eng, windows, ids, side, vec, times, arrival, cuts, lateness, restore_at,
                              rebalance_at=rebalance_at)
    assert late == []
    expected = oracle(ids, side, vec, times, m, t, self_join, kind, length, slide, within)
    assert Counter(got) == expected
    assert max(Counter(got).values(), default=1) == 1


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(data=st.data(), dim=st.sampled_from([1, 2]), p=st.integers(1, 3))
def test_block_kernel_counts_the_comparisons_of_the_pair_loop(monkeypatch, data, dim, p):
    """Inside large worksets the block kernel applies the interval window's accept rule and counts
    exactly the comparisons the pair loop makes."""
    windows, kind, length, slide, within, times, lateness, arrival, cuts, self_join, side, ids, rng = stream_case(data.draw)
    m = get_metric("euclidean")
    vec = rng.integers(-1, 2, (len(ids), dim)).astype(np.float64)
    runs = []
    for big in (10**18, 1):
        monkeypatch.setattr(compute, "BLAS_MIN_PAIRS", big)
        stats: list = []
        eng = S3JEngine(random_centroids(p, dim, 3), m, 1.0, self_join=self_join, dim=dim, windows=windows)
        got, _, _ = run_stream(eng, windows, ids, side, vec, times, arrival, cuts, lateness, stats=stats)
        runs.append((sorted(got), stats))
    assert runs[0] == runs[1]


@settings(max_examples=40, deadline=None)
@given(data=st.data(), metric=st.sampled_from(["euclidean", "cosine"]), dim=st.sampled_from([1, 3, 8]), p=st.integers(1, 4))
def test_grid_windows_equal_the_oracle(data, metric, dim, p):
    windows, kind, length, slide, within, times, lateness, arrival, cuts, self_join, side, ids, rng = stream_case(data.draw)
    m = get_metric(metric)
    raw = rng.integers(-2, 3, (len(ids), dim)).astype(np.float32) + np.float32(0.5)
    eng = GridEngine(m, 0.6, self_join=self_join, parallelism=p, windows=windows)
    got, late, _ = run_stream(eng, windows, ids, side, raw, times, arrival, cuts, lateness)
    assert late == []
    expected = oracle(ids, side, m.prepare(raw.astype(np.float64)), times, m, 0.6, self_join, kind, length, slide, within)
    assert Counter(got) == expected


@pytest.mark.parametrize("engine", ["s3j", "grid"])
def test_interval_join_meets_pairs_across_every_boundary(engine):
    """Identical vectors one tick to ``within`` apart, straddling bucket ends: every pair once;
    ``within + 1`` apart: never."""
    m = get_metric("euclidean")
    windows = Windowing.interval(10)
    times = np.array([9, 10, 19, 29, 30, 40, 41, 59, 60, 70], dtype=np.int64)
    n = len(times)
    ids, side, vec = np.arange(n), np.zeros(n, np.int8), np.zeros((n, 2))
    eng = (S3JEngine(random_centroids(2, 2, 0), m, 0.1, self_join=True, dim=2, windows=windows) if engine == "s3j"
           else GridEngine(m, 0.1, self_join=True, parallelism=3, windows=windows))
    got, _, _ = run_stream(eng, windows, ids, side, vec, times, np.arange(n), [3, 7], 0)
    expected = Counter((i, j) for i in range(n) for j in range(i + 1, n) if abs(times[i] - times[j]) <= 10)
    assert Counter(got) == expected


@settings(max_examples=30, deadline=None)
@given(data=st.data())
def test_late_records_are_refused_whole_and_closed_windows_dropped(data):
    """Records whose earliest window ended at or before the frontier are refused at every copy;
    the others join exactly; windows below the first open one hold no state."""
    windows, kind, length, slide, within = data.draw(window_settings())
    m = get_metric("euclidean")
    n = 40
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    times = np.sort(rng.integers(0, 120, n)).astype(np.int64)
    stragglers = rng.integers(0, 120, 8).astype(np.int64)
    all_times = np.concatenate([times, stragglers])
    ids, side = np.arange(n + 8), np.zeros(n + 8, np.int8)
    vec = np.zeros((n + 8, 1))
    eng = S3JEngine(random_centroids(2, 1, 0), m, 0.1, self_join=True, dim=1, windows=windows)
    got, late, eng = run_stream(eng, windows, ids, side, vec, all_times, np.arange(n + 8), [n // 2, n], 0)
    seen = int(times.max())
    # the earliest window of a time: the first window [k slide, k slide + length) that holds it (an
    # interval join: its bucket [b B, (b + 1) B)); late when its end is at or below the frontier
    earliest_end = [(((int(x) // length) + 1) * length) if kind == "interval"
                    else min(k * slide + length for k in range(-length, x // slide + 1) if k * slide <= x < k * slide + length)
                    for x in stragglers]
    assert sorted(late) == sorted(n + i for i in range(8) if earliest_end[i] <= seen)
    kept = np.array([i for i in range(n + 8) if i not in set(late)])
    expected = oracle(ids[kept], side[kept], vec[kept], all_times[kept], m, 0.1, True, kind, length, slide, within)
    assert Counter(got) == expected
    first = WindowClock(windows, 0, int(all_times.max())).first_open()
    eng.expire_before(first)
    assert all(w >= first for worker in eng.workers for w in worker.windows)
    assert all((f.outer_buffer.window >= first).all() for f in eng.formulation)


def test_sliding_and_interval_state_stays_bounded_over_a_long_stream():
    """State follows the open windows, not the stream: at a steady rate the copies held after each
    batch stay below the copies of the records a window can still need, for every window kind."""
    m = get_metric("euclidean")
    rng = np.random.default_rng(1)
    for windows, copies in ((Windowing.tumbling(60), 1), (Windowing.sliding(60, 20), 3), (Windowing.interval(30), 2)):
        eng = S3JEngine(random_centroids(2, 2, 0), m, 0.05, self_join=True, dim=2, windows=windows)
        clock = WindowClock(windows, 5)
        held = []
        for b in range(150):  # 150 batches of 10 ticks, 20 records each
            times = np.sort(rng.integers(b * 10, b * 10 + 10, 20)).astype(np.int64)
            if clock.first_open() is not None:
                eng.expire_before(clock.first_open())
            batch = Records(np.arange(20) + 20 * b, np.zeros(20, np.int8), rng.uniform(-1, 1, (20, 2)), np.zeros(20),
                            np.zeros(20, np.int64), times, np.zeros(20, bool))
            eng.process(expand(batch, windows))
            clock.advance(int(times.max()))
            held.append(sum(int(((run.role & 3) != OUTER).sum()) for w in eng.workers for runs in w.windows.values()
                            for run in runs))
        # a window is held until the frontier (5 ticks behind, one batch of 10 late) passes its end
        span = windows.length + (windows.within or 0) + 5 + 10 + 10
        assert max(held) <= 2 * span * copies, (windows.kind, max(held))
        assert max(held[75:]) <= max(held[25:75]) + 20 * copies, (windows.kind, held)
