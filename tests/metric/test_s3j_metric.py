"""S3J in a general metric space (driftjoin.metric.s3j) against the brute-force oracle: edit distance
on unicode strings, Jaccard on token sets, user metrics; every window kind, self- and two-stream
joins, arbitrary micro-batch cuts; the vector core's pairs on Euclidean vectors; state round trips."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.metric.engine import MetricEngine
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import CallableSpace, JaccardSpace, LevenshteinSpace, VectorSpace, check_triangle, user_metric
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.records import Records
from driftjoin.windows import Windowing
from tests.metric import data
from tests.metric.oracle import jaccard, levenshtein, oracle, run, window_spec

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def check(space, dist, t, recs, p, seed):
    ids, sides, vals, times, self_join, w, cuts = recs
    values = space.prepare(vals)
    strategy = S3JStrategy(space, t, choose_centroids(space, values, p, seed), self_join=self_join, windows=w)
    got, late = run(strategy, ids, values, times, sides, cuts)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), dist, t, self_join, window_spec(w))


@FAST
@given(recs=data.records(data.strings), t=st.integers(0, 3), p=st.integers(1, 4), seed=st.integers(0, 99))
def test_levenshtein_equals_oracle(recs, t, p, seed):
    check(LevenshteinSpace(), levenshtein, t, recs, p, seed)


@FAST
@given(recs=data.records(data.token_sets), p=st.integers(1, 4), seed=st.integers(0, 99), pick=st.integers(0, 10**6),
       fallback=st.sampled_from([0.0, 0.2, 0.5, 0.75, 0.9]))
def test_jaccard_equals_oracle_with_thresholds_at_a_distance(recs, p, seed, pick, fallback):
    vals = recs[2]
    # a threshold exactly at a distance of the data (when there is one below 1)
    ds = sorted({jaccard(a, b) for a in vals[:8] for b in vals[:8]} - {1.0})
    t = ds[pick % len(ds)] if ds else fallback
    check(JaccardSpace(), jaccard, t, recs, p, seed)


def absolute(a, b):
    return abs(a - b)


@FAST
@given(recs=data.records(st.integers(-20, 20).map(float)), t=st.sampled_from([0.0, 1.0, 2.5, 4.0]),
       p=st.integers(1, 3), seed=st.integers(0, 99), vectorised=st.booleans())
def test_user_metrics_equal_oracle(recs, t, p, seed, vectorised):
    space = user_metric(lambda A, B: np.abs(A[:, None] - B[None, :])) if vectorised else CallableSpace(absolute)
    check(space, absolute, t, recs, p, seed)


@settings(max_examples=30, deadline=None)
@given(n=st.integers(2, 150), dim=st.sampled_from([1, 2, 5]), seed=st.integers(0, 10**4),
       q=st.sampled_from([0.01, 0.05, 0.3]), p=st.integers(1, 4), self_join=st.booleans(),
       cuts=st.lists(st.integers(0, 150), max_size=4))
def test_euclidean_pairs_equal_the_vector_core(n, dim, seed, q, p, self_join, cuts):
    rng = np.random.default_rng(seed)
    vec = np.round(rng.normal(size=(n, dim)), 1)
    d = np.sqrt(((vec[:, None] - vec[None]) ** 2).sum(-1))
    t = max(float(np.quantile(d[np.triu_indices(n, 1)], q)), 1e-3)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)
    side = np.zeros(n, np.int8) if self_join else rng.integers(0, 2, n).astype(np.int8)
    cent = vec[rng.choice(n, size=min(p, n), replace=False)]
    eng = S3JEngine(cent, VectorSpace("euclidean").metric, t, self_join=self_join, dim=dim)
    strategy = S3JStrategy(VectorSpace("euclidean"), t, cent, self_join=self_join, windows=Windowing.unbounded())
    generic = MetricEngine(strategy)
    want, got = set(), Counter()
    bounds = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    for a, b in zip(bounds, bounds[1:]):
        pairs, _ = eng.process(Records(ids[a:b], side[a:b], vec[a:b], np.zeros(b - a), np.zeros(b - a, np.int64)))
        want |= set(zip(pairs.left_id.tolist(), pairs.right_id.tolist()))
        mine = generic.process(MetricRecords.of(ids[a:b], vec[a:b], side=side[a:b]))
        got.update(zip(mine.left_id.tolist(), mine.right_id.tolist()))
    assert set(got) == want and max(got.values(), default=1) == 1


@settings(max_examples=25, deadline=None)
@given(recs=data.records(data.strings, windowing=st.sampled_from([Windowing.tumbling(10), Windowing.interval(4)])),
       t=st.integers(1, 2), p=st.integers(1, 3))
def test_in_order_stream_drops_state_and_keeps_pairs(recs, t, p):
    """Times in order, no lateness: windows close after every batch; state holds open windows only."""
    ids, sides, vals, times, self_join, w, cuts = recs
    times = sorted(times)
    space = LevenshteinSpace()
    values = space.prepare(vals)
    strategy = S3JStrategy(space, t, choose_centroids(space, values, p, 0), self_join=self_join, windows=w)
    got, late = run(strategy, ids, values, times, sides, cuts, lateness=0)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), levenshtein, t, self_join, window_spec(w))


def test_closed_windows_and_unused_centroids_are_forgotten_and_late_records_refused():
    space = LevenshteinSpace()
    w = Windowing.tumbling(10)
    strategy = S3JStrategy(space, 1, space.prepare(["aaaa"]), self_join=True, windows=w)
    eng = MetricEngine(strategy)
    eng.process(MetricRecords.of([1, 2], space.prepare(["abcd", "zzzz"]), [0, 1]))
    worker = eng.workers[0]
    assert worker.n_worksets == 2 and len(worker.store) == 2
    eng.process(MetricRecords.of([3, 4], space.prepare(["abce", "qqqq"]), [25, 26]))  # closes window 0
    assert sorted(worker.store.windows) == [2]
    # "zzzz" (workset 1) left with window 0; "abcd" (0) keeps its outlier "abce"; "qqqq" is new (2)
    assert worker.ids.tolist() == [0, 2]
    pairs = eng.process(MetricRecords.of([5, 6], space.prepare(["abcd", "abcf"]), [3, 27]))
    assert eng.late == [5] and pairs.tuples() == [(3, 6, 2)]


def test_state_round_trip_by_pickle_gives_the_same_pairs():
    rng = np.random.default_rng(3)
    words = ["".join(rng.choice(list("abc"), size=rng.integers(0, 6))) for _ in range(120)]
    space = LevenshteinSpace()
    values = space.prepare(words)
    strategy = S3JStrategy(space, 1, choose_centroids(space, values, 3, 1), self_join=True, windows=Windowing.interval(5))
    times = np.sort(rng.integers(0, 40, 120))
    one, two = MetricEngine(strategy), MetricEngine(strategy)
    out_one, out_two = Counter(), Counter()
    for k, lo in enumerate(range(0, 120, 30)):
        batch = MetricRecords.of(np.arange(lo, lo + 30), values[lo : lo + 30], times[lo : lo + 30])
        if k == 2:  # restore every worker of the second engine from a pickled state
            for i, wk in list(two.workers.items()):
                fresh = strategy.worker(i)
                fresh.restore(pickle.loads(pickle.dumps(wk.state())))
                two.workers[i] = fresh
        out_one.update(one.process(batch).tuples())
        out_two.update(two.process(batch).tuples())
    assert out_one == out_two and sum(out_one.values()) > 0


def test_triangle_check_names_the_violating_triple():
    squared = CallableSpace(lambda a, b: (a - b) ** 2, name="squared")
    with pytest.raises(ValueError, match=r"squared.*triangle.*d\(a, c\) = 4.0 > d\(a, b\) \+ d\(b, c\) = 1.0 \+ 1.0.*a=0.0, b=1.0, c=2.0"):
        check_triangle(squared, squared.prepare([0.0, 1.0, 2.0]))
    skew = user_metric(lambda A, B: np.maximum(A[:, None] - B[None, :], 0.0), name="skew")
    with pytest.raises(ValueError, match="skew.*d\\(a, b\\) = 0.0 but d\\(b, a\\) = 1.0 for a=0.0, b=1.0"):
        check_triangle(skew, skew.prepare([0.0, 1.0]))
    # rounding within the slack passes; true metrics pass
    check_triangle(CallableSpace(lambda a, b: abs(a - b) * (1 + 1e-12 * (a > b))), CallableSpace(abs).prepare([0.1, 0.2, 0.3]))
    lev = LevenshteinSpace()
    check_triangle(lev, lev.prepare(["", "a", "ab", "ba", "\u00e9\u00e9", "abc"]))
    jac = JaccardSpace()
    check_triangle(jac, jac.prepare([[1], [1, 2], [2, 3], ["a", "b"], [1, 2, 3, 4]]))


def test_vectorised_user_metric_with_a_wrong_shape_is_refused():
    bad = user_metric(lambda A, B: np.zeros(len(A)), name="flat")
    with pytest.raises(ValueError, match="flat.*must return the \\(2, 3\\) distance matrix"):
        bad.pairwise(bad.prepare([[0.0], [1.0]]), bad.prepare([[0.0], [1.0], [2.0]]))
