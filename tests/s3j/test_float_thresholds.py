"""Vector distances are float computations whose documented definition is ``Metric.pairwise <=
threshold`` (driftjoin/distance.py): every acceptance test computes that float bit for bit, and every
bound (S3J's Criterion 1, outer sets, the cosine threshold mapped to angular, the grid's screen)
is consistent with it. Thresholds exactly on a pair's distance and one ulp below it, and tiny
thresholds (a cosine distance of 5e-19 at threshold 1e-17, where ``arccos(1 - t)`` is 0), through
the S3J core, the metric core's vector space, the grid and the block kernel."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.blockjoin import BlockJoin
from driftjoin.distance import METRICS, get_metric
from driftjoin.grid.engine import GridEngine
from driftjoin.metric.engine import MetricEngine
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.s3j import S3JStrategy
from driftjoin.metric.spaces import VectorSpace
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.records import Records
from driftjoin.windows import Windowing

FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(metric=st.sampled_from(sorted(METRICS)), dim=st.sampled_from([1, 2, 3, 8, 17, 64, 300]),
       scale=st.sampled_from([1e-6, 1.0, 1e6]), seed=st.integers(0, 10**6))
def test_rowwise_is_pairwise_bit_for_bit(metric, dim, scale, seed):
    m = get_metric(metric)
    rng = np.random.default_rng(seed)
    a, b = m.prepare(rng.normal(size=(12, dim)) * scale), m.prepare(rng.normal(size=(9, dim)) * scale)
    i, j = np.repeat(np.arange(12), 9), np.tile(np.arange(9), 12)
    assert np.array_equal(m.rowwise(a[i], b[j]).reshape(12, 9), m.pairwise(a, b))


def pairs_of(vec_prepared, m, t, self_join, side):
    """The definition: every pair whose ``pairwise`` distance is at most ``t``."""
    d = m.pairwise(vec_prepared, vec_prepared)
    n = len(d)
    return {(i, j) for i in range(n) for j in range(n) if d[i, j] <= t
            and (i < j if self_join else (side[i] == 0 and side[j] == 1))}


def joins(raw, m, t, self_join, side, p, seed):
    """The pairs of the S3J core, the grid, the block kernel and (true metrics) the metric core."""
    n, dim = raw.shape
    vec = m.prepare(raw)
    ids = np.arange(n, dtype=np.int64)
    rng = np.random.default_rng(seed)
    cent = vec[rng.choice(n, size=min(p, n), replace=False)]
    out = {}
    s3j = S3JEngine(cent, m, t, self_join=self_join, dim=dim)
    pairs, _ = s3j.process(Records(ids, side, vec, np.zeros(n), np.zeros(n, np.int64)))
    out["s3j"] = pairs
    grid = GridEngine(m, t, self_join=self_join, parallelism=p)
    out["grid"], _ = grid.process(Records(ids, side, raw, np.zeros(n), np.zeros(n, np.int64)))
    res = {}
    for screen in ("float32", "float64"):
        kernel = BlockJoin(m, t, screen=screen)
        r = kernel.join(vec) if self_join else kernel.join(vec[side == 0], vec[side == 1])
        left = ids if self_join else ids[side == 0]
        right = ids if self_join else ids[side == 1]
        res[screen] = {(int(left[x]), int(right[y])) for x, y in zip(r.ia, r.ib)}
    got = {name: {(min(a, b), max(a, b)) if self_join else (a, b)
                  for a, b in zip(pr.left_id.tolist(), pr.right_id.tolist())} for name, pr in out.items()}
    got.update(res)
    if m.partition_name == m.name:
        space = VectorSpace(m.name)
        strategy = S3JStrategy(space, t, cent, self_join=self_join, windows=Windowing.unbounded())
        mp = MetricEngine(strategy).process(MetricRecords.of(ids, space.prepare(raw), side=side))
        got["metric"] = {(min(a, b), max(a, b)) if self_join else (a, b)
                         for a, b in zip(mp.left_id.tolist(), mp.right_id.tolist())}
    return got


@FAST
@given(metric=st.sampled_from(sorted(METRICS)), dim=st.sampled_from([1, 2, 5]), n=st.integers(3, 40),
       grid_=st.booleans(), self_join=st.booleans(), below=st.booleans(), p=st.integers(1, 4),
       seed=st.integers(0, 10**6))
def test_thresholds_on_a_distance_and_one_ulp_below(metric, dim, n, grid_, self_join, below, p, seed):
    m = get_metric(metric)
    rng = np.random.default_rng(seed)
    raw = rng.integers(-3, 4, size=(n, dim)).astype(float) if grid_ else rng.normal(size=(n, dim))  # ties on grids
    raw[np.all(raw == 0, axis=1)] = 1.0  # angular and cosine need a direction
    side = np.zeros(n, np.int8) if self_join else rng.integers(0, 2, n).astype(np.int8)
    d = m.pairwise(m.prepare(raw), m.prepare(raw))
    positive = d[d > 0]
    if not len(positive):
        return
    t = float(rng.choice(positive))  # some pair sits exactly on it (on a grid, many)
    if below:
        t = math.nextafter(t, 0.0)  # ... and then just outside
    t = min(t, m.max_threshold)
    want = pairs_of(m.prepare(raw), m, t, self_join, side)
    for name, got in joins(raw, m, t, self_join, side, p, seed).items():
        assert got == want, name


def test_tiny_cosine_and_euclidean_thresholds():
    """Nearly parallel vectors: cosine distance 5e-19 joins at threshold 1e-17 (arccos(1 - 1e-17) is
    0 in floats, which lost the pair in the S3J core); points 1e-9 apart among coordinates of 1e6."""
    raw = np.array([[1.0, 0.0], [1.0, 1e-9], [0.0, 1.0], [1.0, 3e-9], [-1.0, 0.5]])
    for metric in ("cosine", "angular"):
        m = get_metric(metric)
        t = 1e-17 if metric == "cosine" else 1e-9
        want = pairs_of(m.prepare(raw), m, t, True, np.zeros(5, np.int8))
        assert (0, 1) in want
        for p in (1, 2):
            for name, got in joins(raw, m, t, True, np.zeros(5, np.int8), p, 0).items():
                assert got == want, (metric, name)
    m = get_metric("euclidean")
    raw = 1e6 + np.array([[0.0, 0.0], [1e-9, 0.0], [0.0, 2e-9], [1.0, 1.0]])
    want = pairs_of(raw, m, 1.5e-9, True, np.zeros(4, np.int8))
    assert (0, 1) in want and (0, 2) not in want
    for name, got in joins(raw, m, 1.5e-9, True, np.zeros(4, np.int8), 2, 1).items():
        assert got == want, name
