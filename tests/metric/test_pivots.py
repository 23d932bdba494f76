"""Pivot filtering (driftjoin.metric.pivots) against the brute-force oracle: edit distance on unicode
strings and small integer metrics, thresholds exactly at a distance of the data, every window kind,
self- and two-stream joins, micro-batch cuts, plans as chosen and plans with arbitrary pivots and
cells; the count of metric calls against the brute force's pairs; state round trips."""

from __future__ import annotations

import pickle
from collections import Counter
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.metric.engine import MetricEngine
from driftjoin.metric.pivots import PivotStrategy, plan_pivots
from driftjoin.metric.records import MetricRecords, take_values
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import SYMMETRY_PROBE, CallableSpace, JaccardSpace, user_metric
from driftjoin.metric.validate import check_user_metric
from driftjoin.windows import Windowing
from tests.metric import data
from tests.metric.oracle import jaccard, levenshtein, oracle, run, window_spec

FAST = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def absolute(a, b):
    return abs(a - b)


def clipped(a, b):
    """A truncated metric (min(|a - b|, 3)): many pairs at the same distance."""
    return min(abs(a - b), 3)


def discrete(a, b):
    return 0 if a == b else 1


def shaken(plan, rng: np.random.Generator):
    """The plan with arbitrary pivots (any sample values, none at all) and arbitrary cells (boundaries
    at sample coordinates, beside them or anywhere): exactness may not depend on the choice."""
    m = len(plan.matrix)
    k = int(rng.integers(0, min(m, 4) + 1))
    pivots = rng.choice(m, size=k, replace=False).astype(np.int64) if k else np.zeros(0, np.int64)
    plan = replace(plan, pivots=pivots, bounds=())
    coords = plan.sample_vectors(np.arange(m))
    bounds = []
    for j in range(int(rng.integers(0, min(k, 2) + 1))):
        picks = rng.choice(coords[:, j], size=int(rng.integers(1, 4))) + rng.choice([0.0, 0.0, 0.5, -1e-12], size=1)
        bounds.append(np.unique(picks))
    return replace(plan, bounds=tuple(bounds), quantum=float(rng.choice([0.25, 1.0, 7.0])))


def pivot_strategy(space, t, values, sample_rows, self_join, w, p, expected, seed, shake, measure=False):
    """``measure``: the plan reuses the distances of the user metric's triangle check on the sample."""
    sample = take_values(values, np.asarray(sample_rows))
    measured = check_user_metric(space, list(sample)) if measure else None
    plan = plan_pivots(space, t, sample, n_workers=p, expected=expected, self_join=self_join, seed=seed, measured=measured)
    if shake:
        plan = shaken(plan, np.random.default_rng(seed))
    return PivotStrategy(space, t, plan, self_join=self_join, windows=w)


def check(space, dist, t, recs, p, expected, seed, shake, foreign=(), measure=False):
    """The join's pairs equal the oracle's (``foreign``: sample values that are not in the input)."""
    ids, sides, vals, times, self_join, w, cuts = recs
    values = space.prepare(list(vals) + list(foreign))
    rows = np.random.default_rng(seed).permutation(len(values))[: max(1, len(values) // 2)]
    strategy = pivot_strategy(space, t, values, rows, self_join, w, p, expected, seed, shake, measure)
    got, late = run(strategy, ids, take_values(values, np.arange(len(vals))), times, sides, cuts)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), dist, t, self_join, window_spec(w))


def at_a_distance(dist, vals, pick):
    ds = sorted({dist(a, b) for a in vals[:8] for b in vals[:8]})
    return ds[pick % len(ds)]


@FAST
@given(recs=data.records(data.strings), pick=st.integers(0, 10**6), p=st.integers(1, 4),
       expected=st.sampled_from([None, 10**4, 10**7]), seed=st.integers(0, 99), shake=st.booleans(),
       foreign=st.lists(data.strings, max_size=3), measure=st.booleans())
def test_levenshtein_equals_oracle_with_thresholds_at_a_distance(recs, pick, p, expected, seed, shake, foreign, measure):
    t = min(at_a_distance(levenshtein, recs[2], pick), 3)
    check(CallableSpace(levenshtein), levenshtein, t, recs, p, expected, seed, shake, foreign, measure)


@FAST
@given(recs=data.records(st.integers(-20, 20)), metric=st.sampled_from([absolute, clipped, discrete]),
       pick=st.integers(0, 10**6), p=st.integers(1, 4), expected=st.sampled_from([None, 10**5, 10**8]),
       seed=st.integers(0, 99), shake=st.booleans())
def test_small_integer_metrics_equal_oracle(recs, metric, pick, p, expected, seed, shake):
    check(CallableSpace(metric), metric, at_a_distance(metric, recs[2], pick), recs, p, expected, seed, shake)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recs=data.records(data.token_sets), pick=st.integers(0, 10**6), p=st.integers(1, 3), seed=st.integers(0, 99),
       shake=st.booleans())
def test_built_in_jaccard_by_name_equals_oracle(recs, pick, p, seed, shake):
    """``algorithm="pivots"`` on a built-in space: token sets (keys are the sets), ratios exactly
    at a distance of the data."""
    t = min(at_a_distance(jaccard, recs[2], pick), 0.9)
    check(JaccardSpace(), jaccard, t, recs, p, 10**6, seed, shake)


@FAST
@given(recs=data.records(st.integers(-20, 20).map(float), windowing=st.just(Windowing.unbounded())),
       t=st.sampled_from([0.0, 1.0, 2.5]), p=st.integers(1, 3), seed=st.integers(0, 99))
def test_vectorised_user_metric_equals_oracle(recs, t, p, seed):
    space = user_metric(lambda A, B: np.abs(A[:, None] - B[None, :]))
    check(space, absolute, t, recs, p, 10**6, seed, False)


@FAST
@given(vals=st.lists(data.strings, min_size=1, max_size=40), pick=st.integers(0, 10**6), p=st.integers(1, 4),
       expected=st.sampled_from([None, 10**3, 10**6]), seed=st.integers(0, 99), shake=st.booleans(),
       share=st.floats(0.05, 1.0), cuts=st.lists(st.integers(0, 40), max_size=4), measure=st.booleans())
def test_a_static_self_join_never_calls_the_metric_more_often_than_the_brute_force(vals, pick, p, expected, seed, shake,
                                                                                  share, cuts, measure):
    """Planning and join together, with the sample drawn from the input's records (duplicate values,
    empty strings, any cuts into batches): at most n(n-1)/2 calls, and the engine counts every one
    of them. With the triangle check before (``measure``), whose distances the plan reuses, check
    and join together: at most n(n-1)/2 and the check's symmetry probe."""
    space = CallableSpace(levenshtein)
    values = space.prepare(vals)
    n = len(vals)
    t = min(at_a_distance(levenshtein, vals, pick), 3)
    rows = np.random.default_rng(seed).choice(n, size=max(1, int(share * n)), replace=False)
    strategy = pivot_strategy(space, t, values, rows, True, Windowing.unbounded(), p, expected, seed, shake, measure)
    r, s = len(rows), min(len(rows), SYMMETRY_PROBE)
    checked = r * (r - 1) // 2 + s * (s + 1) // 2 if measure else 0
    planning = space.calls - checked
    assert planning == strategy.plan.summary["planning_calls"] and (planning == 0 or not measure)
    eng = MetricEngine(strategy)
    got: Counter = Counter()
    bounds = [0, *sorted({c for c in cuts if 0 < c < n}), n]
    for a, b in zip(bounds, bounds[1:]):
        got.update((x, y) for x, y, _ in eng.process(MetricRecords.of(np.arange(a, b), values[a:b])).tuples())
    assert got == oracle([(i, 0, v, 0) for i, v in enumerate(vals)], levenshtein, t, True)
    assert eng.calls == space.calls - planning - checked
    assert space.calls - checked <= n * (n - 1) // 2
    assert space.calls <= n * (n - 1) // 2 + (s * (s + 1) // 2 if measure else 0)


def test_plan_uses_pivots_and_cells_when_they_pay_and_the_brute_force_when_not():
    rng = np.random.default_rng(0)
    words = ["".join(rng.choice(list("abcdefghij"), size=rng.integers(3, 12))) for _ in range(400)]
    space = CallableSpace(levenshtein)
    big = plan_pivots(space, 1, space.prepare(words), n_workers=4, expected=10**6)
    assert 0 < big.k and big.cells > 1 and big.summary["expected_calls"] < big.summary["pairs"] / 20
    small = plan_pivots(space, 1, space.prepare(words[:6]), n_workers=4)
    assert small.k == 0 and small.cells == 1  # 15 pairs: pivots cannot pay
    same = plan_pivots(space, 5, space.prepare(["aaaa"] * 3 + ["aaab", "aabb"] * 20), n_workers=4, expected=10**6)
    assert same.k == 0 and same.cells == 1  # every pair within the threshold: nothing to exclude


def test_a_reproducible_plan_does_not_follow_the_clock():
    """A stream's plan (``reproducible``) is the same for the same sample however fast the metric
    ran; a static join's may split into fewer cells when the metric is fast."""
    rng = np.random.default_rng(1)
    words = ["".join(rng.choice(list("abcdefghij"), size=rng.integers(3, 12))) for _ in range(120)]
    space = CallableSpace(levenshtein)
    checked = check_user_metric(space, words)
    plans = [plan_pivots(space, 1, space.prepare(words), n_workers=3, expected=5000, measured=replace(checked, seconds=s),
                         reproducible=r) for s in (1e-6, 1e3) for r in (True, False)]
    assert plans[0].signature() == plans[2].signature() and plans[0].cells == 3
    assert plans[1].cells == 1 and plans[3].cells == 3  # 1 us per call: not worth splitting


def test_infinite_distances_are_never_excluded_wrongly():
    """An extended metric (``inf`` between the two halves): infinite coordinates route everywhere
    and never prune; pairs of the same half still join."""
    def halves(a, b):
        return abs(a - b) if (a < 100) == (b < 100) else float("inf")

    space = CallableSpace(halves)
    vals = [float(v) for v in [1, 2, 3, 101, 102, 50, 150, 151, 4]]
    values = space.prepare(vals)
    for seed in range(5):
        strategy = pivot_strategy(space, 1.0, values, np.arange(len(vals)), True, Windowing.unbounded(), 3, 10**8, seed,
                                  seed > 0)
        got, _ = run(strategy, list(range(len(vals))), values, [0] * len(vals), [0] * len(vals), [3, 6])
        assert got == oracle([(i, 0, v, 0) for i, v in enumerate(vals)], halves, 1.0, True)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recs=data.records(data.strings), t=st.integers(0, 2), p=st.integers(1, 3), seed=st.integers(0, 99))
def test_workers_restored_from_pickled_state_after_every_batch_equal_the_oracle(recs, t, p, seed):
    """A restart between any two micro-batches (every worker rebuilt from its pickled state)."""
    ids, sides, vals, times, self_join, w, cuts = recs
    space = CallableSpace(levenshtein)
    values = space.prepare(vals)
    strategy = pivot_strategy(space, t, values, np.arange(len(vals)), self_join, w, p, 10**6, seed, False)
    eng = MetricEngine(strategy, lateness=10**12)
    got: Counter = Counter()
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(vals)}), len(vals)]
    for a, b in zip(bounds, bounds[1:]):
        for i, wk in list(eng.workers.items()):
            eng.workers[i] = strategy.worker(i)
            eng.workers[i].restore(pickle.loads(pickle.dumps(wk.state())))
        batch = MetricRecords.of(np.asarray(ids[a:b]), values[a:b], np.asarray(times[a:b]), np.asarray(sides[a:b]))
        for left, right, win in eng.process(batch).tuples():
            got[(left, right) if w.kind in ("interval", "unbounded") else (left, right, int(w.start([win])[0]))] += 1
    assert got == oracle(list(zip(ids, sides, vals, times)), levenshtein, t, self_join, window_spec(w))


def test_a_pivot_worker_needs_its_payload():
    space = CallableSpace(absolute)
    values = space.prepare([1.0, 2.0])
    strategy = PivotStrategy(space, 1.0, plan_pivots(space, 1.0, values, n_workers=1), self_join=True,
                             windows=Windowing.unbounded())
    with pytest.raises(ValueError, match="add_routed"):
        strategy.worker(0).add(MetricRecords.of([1, 2], values), np.zeros(2, np.int8))


def test_s3j_counts_its_calls_too():
    """The paper's S3J over a user metric: the engine's count is every call the router and the
    workers made (centroid distances and formulation included)."""
    space = CallableSpace(levenshtein)
    words = ["apple", "appel", "apply", "maple", "ample", "zebra", "zebras", "cobra"] * 4
    values = space.prepare(words)
    strategy = S3JStrategy(space, 1, choose_centroids(space, values, 2, 0), self_join=True, windows=Windowing.unbounded())
    before = space.calls
    eng = MetricEngine(strategy)
    eng.process(MetricRecords.of(np.arange(len(words)), values))
    assert eng.calls == space.calls - before > 0
