"""S3J core against the brute-force oracle: metrics, dimensions, thresholds, distributions,
self- and two-stream joins, arbitrary micro-batch boundaries and windows."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.distance import METRICS, get_metric
from driftjoin.generators.vectors import DISTRIBUTIONS, generate_vectors
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.s3j.records import Records
from driftjoin.s3j.space import random_centroids


def run_engine(ids, side, vec, window, metric, t, self_join, cuts, p, seed):
    eng = S3JEngine(random_centroids(p, vec.shape[1], seed), metric, t, self_join=self_join, dim=vec.shape[1])
    got: list[tuple] = []
    bounds = [0, *sorted(set(cuts)), len(ids)]
    for a, b in zip(bounds, bounds[1:]):
        if a == b:
            continue
        sl = slice(a, b)
        eng.expire_before(int(window[sl].min()))
        pairs, _ = eng.process(Records(ids[sl], side[sl], vec[sl], np.zeros(b - a), window[sl]))
        got += list(zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.window.tolist()))
    return got


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    metric=st.sampled_from(sorted(METRICS)),
    dim=st.sampled_from([1, 2, 3, 8, 64]),
    dist=st.sampled_from(DISTRIBUTIONS),
    n=st.integers(2, 220),
    quantile=st.sampled_from([0.001, 0.01, 0.05, 0.2, 0.6]),
    self_join=st.booleans(),
    p=st.integers(1, 6),
    n_windows=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 220), max_size=6),
    seed=st.integers(0, 2**16),
)
def test_engine_equals_oracle(metric, dim, dist, n, quantile, self_join, p, n_windows, cuts, seed):
    m = get_metric(metric)
    raw = generate_vectors(dist, seed=seed, stream=0, start=0, count=n, dim=dim, times=np.linspace(0, 300, n))
    vec = m.prepare(raw)
    # threshold at a quantile of the pairwise distances: covers selectivities from tiny to large
    sample = m.pairwise(vec[:60], vec[:60])
    t = float(np.quantile(sample[np.triu_indices(len(sample), 1)], quantile)) if len(sample) > 1 else 0.1
    t = min(max(t, 1e-6), m.max_threshold)
    ids = np.random.default_rng(seed).permutation(n * 3)[:n].astype(np.int64)
    side = np.zeros(n, np.int8) if self_join else np.random.default_rng(seed + 1).integers(0, 2, n).astype(np.int8)
    window = np.sort(np.random.default_rng(seed + 2).integers(0, n_windows, n)).astype(np.int64)
    got = run_engine(ids, side, vec, window, m, t, self_join, [c for c in cuts if c < n], p, seed)
    assert len(got) == len(set(got)), "duplicate pairs"
    assert set(got) == oracle_pairs(ids, side, vec, window, m, t, self_join)
    if self_join:
        assert all(a < b for a, b, _ in got)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 120))
def test_integer_grid_ties_are_exact(seed, n):
    """Points on an integer grid put many distances exactly on the bounds t/2, t, 2t."""
    rng = np.random.default_rng(seed)
    vec = rng.integers(-4, 5, size=(n, 2)).astype(np.float64)
    ids = np.arange(n)
    for metric in ("euclidean", "manhattan", "chebyshev"):
        m = get_metric(metric)
        for t in (1.0, 2.0, 3.0):
            side = np.zeros(n, np.int8)
            got = run_engine(ids, side, vec, np.zeros(n, np.int64), m, t, True, [n // 3], 4, seed)
            assert sorted(got) == sorted(oracle_pairs(ids, side, vec, np.zeros(n, np.int64), m, t, True))


def test_string_ids_and_duplicate_ids_self_join():
    m = get_metric("euclidean")
    vec = np.array([[0.0], [0.1], [0.2], [5.0]])
    ids = np.array(["b", "a", "a", "c"], dtype=object)
    side = np.zeros(4, np.int8)
    win = np.zeros(4, np.int64)
    got = run_engine(ids, side, vec, win, m, 0.5, True, [2], 2, 1)
    # two distinct records share id "a": each pairs with "b" once; a record never pairs with its own id
    assert sorted(got) == [("a", "b", 0), ("a", "b", 0)]
    assert ("a", "a", 0) not in got


def test_comparisons_ratio_reasonable_uniform_angular():
    """At 0.1% selectivity on 2-D uniform angular data the comparisons ratio stays small."""
    m = get_metric("angular")
    n = 6000
    vec = m.prepare(generate_vectors("uniform", seed=3, stream=0, start=0, count=n, dim=2))
    side = (np.arange(n) % 2).astype(np.int8)
    eng = S3JEngine(random_centroids(5, 2, 3), m, 0.001, self_join=False, dim=2)
    pairs_total = cmp_total = 0
    for a in range(0, n, 500):
        sl = slice(a, a + 500)
        pairs, stats = eng.process(Records(np.arange(n)[sl], side[sl], vec[sl], np.zeros(500), np.zeros(500, np.int64)))
        pairs_total += len(pairs)
        cmp_total += stats.comparisons
    assert pairs_total > 0
    assert cmp_total / pairs_total < 10


@pytest.mark.parametrize("bad", ["sqeuclidean", "dot", "foo"])
def test_bad_metric_fails_fast(bad):
    with pytest.raises(ValueError, match="metric"):
        get_metric(bad)


@settings(max_examples=30, deadline=None)
@given(
    algorithm=st.sampled_from(["clusterjoin", "bruteforce"]),
    metric=st.sampled_from(sorted(METRICS)),
    dim=st.sampled_from([1, 2, 5]),
    n=st.integers(2, 150),
    quantile=st.sampled_from([0.01, 0.1, 0.5]),
    self_join=st.booleans(),
    v=st.integers(1, 40),
    cuts=st.lists(st.integers(0, 150), max_size=4),
    seed=st.integers(0, 2**16),
)
def test_baselines_equal_oracle(algorithm, metric, dim, n, quantile, self_join, v, cuts, seed):
    m = get_metric(metric)
    vec = m.prepare(generate_vectors("gaussian", seed=seed, stream=0, start=0, count=n, dim=dim))
    sample = m.pairwise(vec[:50], vec[:50])
    t = float(np.quantile(sample[np.triu_indices(len(sample), 1)], quantile)) if len(sample) > 1 else 0.1
    t = min(max(t, 1e-6), m.max_threshold)
    ids = np.arange(n)
    side = np.zeros(n, np.int8) if self_join else (np.arange(n) % 2).astype(np.int8)
    window = np.zeros(n, np.int64)
    eng = S3JEngine(random_centroids(v, dim, seed), m, t, self_join=self_join, dim=dim, algorithm=algorithm, parallelism=3)
    got = []
    bounds = [0, *sorted({c for c in cuts if c < n}), n]
    for a, b in zip(bounds, bounds[1:]):
        if a < b:
            p, _ = eng.process(Records(ids[a:b], side[a:b], vec[a:b], np.zeros(b - a), window[a:b]))
            got += list(zip(p.left_id.tolist(), p.right_id.tolist(), p.window.tolist()))
    assert len(got) == len(set(got))
    assert set(got) == oracle_pairs(ids, side, vec, window, m, t, self_join)


@pytest.mark.parametrize("metric", ["euclidean", "angular", "cosine"])
def test_dimension_300(metric):
    m = get_metric(metric)
    rng = np.random.default_rng(0)
    base = rng.normal(size=(20, 300))
    vec = m.prepare(np.repeat(base, 10, axis=0) + rng.normal(scale=0.05, size=(200, 300)))  # 20 tight clusters
    sample = m.pairwise(vec, vec)
    t = float(np.quantile(sample[np.triu_indices(200, 1)], 0.04))
    ids = np.arange(200)
    got = run_engine(ids, np.zeros(200, np.int8), vec, np.zeros(200, np.int64), m, t, True, [70, 140], 4, 1)
    expected = oracle_pairs(ids, np.zeros(200, np.int8), vec, np.zeros(200, np.int64), m, t, True)
    assert len(expected) > 100 and sorted(got) == sorted(expected)
