"""The indexed centroid search (k-d tree, block-wise sequential creation) decides exactly what
the paper's record-by-record formulation decides, with the dense search as the reference."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.distance import BOUND_SLACK, get_metric
from driftjoin.s3j import centroids
from driftjoin.s3j.records import Records
from driftjoin.s3j.workset import INNER, OUTER, OUTLIER, WorksetFormulation

PARTITION_METRICS = ["euclidean", "manhattan", "chebyshev", "angular"]


@settings(max_examples=40, deadline=None)
@given(metric=st.sampled_from(PARTITION_METRICS), dim=st.sampled_from([1, 2, 3, 5, 16]),
       n=st.integers(0, 300), k=st.integers(0, 300), radius=st.floats(0.01, 1.5), seed=st.integers(0, 10**6))
def test_tree_queries_equal_dense(metric, dim, n, k, radius, seed):
    m = get_metric(metric)
    rng = np.random.default_rng(seed)
    pts, cents = m.prepare(rng.normal(size=(n, dim))), m.prepare(rng.normal(size=(k, dim)))
    tree = centroids.build(m, cents)
    assert (tree is None) == (k == 0)
    d_tree, i_tree = centroids.nearest(m, pts, cents, tree)
    d_dense, _ = centroids.nearest(m, pts, cents, None)
    np.testing.assert_allclose(d_tree, d_dense, rtol=1e-12, atol=1e-12)
    r_tree, c_tree = centroids.within(m, pts, cents, radius, tree)
    r_dense, c_dense = centroids.within(m, pts, cents, radius, None)
    np.testing.assert_array_equal(r_tree, r_dense)
    np.testing.assert_array_equal(c_tree, c_dense)


def reference_formulation(metric, t: float, vec: np.ndarray, is_outer: np.ndarray):
    """Steps 2-5 of section 7, one record at a time, dense search (the paper's order)."""
    m = metric.partition_metric
    tk, half = m.key_threshold(t), m.key_threshold(t / 2)
    reach = m.key_threshold(2 * t * (1 + BOUND_SLACK))
    cents: list[np.ndarray] = []
    own = {}
    scans = 0
    for i in np.nonzero(~is_outer)[0]:
        scans += len(cents)
        d = m.pairwise_key(vec[i : i + 1], np.array(cents))[0] if cents else np.zeros(0)
        j = int(np.argmin(d)) if len(d) else -1
        if j < 0 or d[j] > tk:
            own[i] = (len(cents), INNER)
            cents.append(vec[i])
        else:
            own[i] = (j, INNER if d[j] <= half else OUTLIER)
    C = np.array(cents) if cents else np.zeros((0, vec.shape[1]))
    members = set()
    for i in range(len(vec)):
        d = m.pairwise_key(vec[i : i + 1], C)[0]
        limit = own[i][0] if i in own else len(C)
        members |= {(i, int(w), OUTER) for w in np.nonzero(d <= reach)[0] if w < limit}
        if i in own:
            members.add((i, *own[i]))
    return members, len(C), scans + int(is_outer.sum()) * len(C)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(metric=st.sampled_from(PARTITION_METRICS), dim=st.sampled_from([2, 3, 24]),
       n=st.integers(600, 1400), t=st.sampled_from([0.02, 0.05, 0.2]), seed=st.integers(0, 10**6))
def test_blockwise_formulation_equals_record_by_record(metric, dim, n, t, seed):
    """Enough records and centroids for several sequential blocks and a rebuilt growing index."""
    m = get_metric(metric)
    rng = np.random.default_rng(seed)
    vec = m.prepare(rng.uniform(-1, 1, size=(n, dim)))
    is_outer = rng.random(n) < 0.1
    batch = Records(np.arange(n), np.zeros(n, np.int8), vec, np.zeros(n), np.zeros(n, np.int64))
    f = WorksetFormulation(m, t, dim)
    got = f.formulate(batch, is_outer)
    assert got.records is batch or len(got.records) == n
    want, k, scans = reference_formulation(m, m.partition_threshold(t), vec, is_outer)
    assert f.n_worksets == k
    assert got.centroid_comparisons == scans
    assert set(zip(got.row.tolist(), got.workset.tolist(), got.role.tolist())) == want
