"""Assignments changed at random micro-batches (at window boundaries and inside windows) and
splits of worksets keep the join equal to the oracle, pair for pair."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.distance import get_metric
from driftjoin.generators.vectors import generate_vectors
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.s3j.records import Records
from driftjoin.s3j.routing import base_gid, decode_role, encode_role, part_of, site_gid
from driftjoin.s3j.space import random_centroids


def _known_worksets(eng: S3JEngine) -> list[int]:
    return [(j << 32) | k for j, f in enumerate(eng.formulation) for k in range(f.n_worksets)]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    metric=st.sampled_from(["euclidean", "angular", "chebyshev"]),
    dist=st.sampled_from(["uniform", "gaussian", "skewed", "drift"]),
    n=st.integers(20, 300),
    quantile=st.sampled_from([0.01, 0.05, 0.3]),
    self_join=st.booleans(),
    p=st.integers(2, 5),
    n_windows=st.integers(1, 3),
    n_batches=st.integers(2, 8),
    data=st.data(),
    seed=st.integers(0, 2**16),
)
def test_moves_and_splits_at_random_batches_equal_oracle(metric, dist, n, quantile, self_join, p, n_windows, n_batches, data, seed):
    m = get_metric(metric)
    vec = m.prepare(generate_vectors(dist, seed=seed, stream=0, start=0, count=n, dim=2, times=np.linspace(0, 200, n)))
    sample = m.pairwise(vec[:60], vec[:60])
    t = min(max(float(np.quantile(sample[np.triu_indices(len(sample), 1)], quantile)), 1e-6), m.max_threshold)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(10 * n)[:n].astype(np.int64)
    side = np.zeros(n, np.int8) if self_join else rng.integers(0, 2, n).astype(np.int8)
    window = np.sort(rng.integers(0, n_windows, n)).astype(np.int64)
    eng = S3JEngine(random_centroids(p, 2, seed), m, t, self_join=self_join, dim=2)
    cuts = sorted(set(rng.integers(1, n, n_batches - 1).tolist()))
    bounds = [0, *cuts, n]
    got: list[tuple] = []
    assignment: dict[int, int] = {}
    splits: dict[int, int] = {}
    for a, b in zip(bounds, bounds[1:]):
        if a > 0 and data.draw(st.booleans(), label="rebalance before this batch"):
            known = _known_worksets(eng)
            for g in known:
                if data.draw(st.integers(0, 3), label="move?") == 0:
                    assignment[g] = data.draw(st.integers(0, p - 1), label="to")
            if known and data.draw(st.booleans(), label="split one?"):
                g = known[data.draw(st.integers(0, len(known) - 1), label="which")]
                k = splits.setdefault(g, data.draw(st.integers(2, 4), label="parts"))
                for i in range(k):
                    for j in range(i, k):
                        if data.draw(st.booleans(), label="move site?"):
                            assignment[site_gid(g, i, j)] = data.draw(st.integers(0, p - 1), label="site to")
            eng.set_assignment(dict(assignment), dict(splits))
        sl = slice(a, b)
        eng.expire_before(int(window[sl].min()))
        pairs, _ = eng.process(Records(ids[sl], side[sl], vec[sl], np.zeros(b - a), window[sl]))
        got += list(zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.window.tolist()))
    assert len(got) == len(set(got)), "a pair was reported twice"
    assert set(got) == oracle_pairs(ids, side, vec, window, m, t, self_join)


def test_move_inside_a_window_probes_the_old_worker():
    m = get_metric("euclidean")
    eng = S3JEngine(np.array([[0.0, 0.0], [10.0, 10.0]]), m, 1.0, self_join=True, dim=2)
    first = Records(np.array([1, 2]), np.zeros(2, np.int8), np.array([[0.0, 0.0], [0.1, 0.0]]), np.zeros(2), np.zeros(2, np.int64))
    p1, _ = eng.process(first)
    assert sorted(zip(p1.left_id, p1.right_id)) == [(1, 2)]
    eng.set_assignment({0: 1})  # workset 0 of partition 0 moves to worker 1 inside window 0
    second = Records(np.array([3]), np.zeros(1, np.int8), np.array([[0.05, 0.0]]), np.zeros(1), np.zeros(1, np.int64))
    p2, stats = eng.process(second)
    assert sorted(zip(p2.left_id, p2.right_id)) == [(1, 3), (2, 3)]
    assert set(stats.worker_pairs) == {0, 1}  # probe at the old worker 0, store at the new worker 1
    assert stats.worker_pairs[0] == 2
    third = Records(np.array([4]), np.zeros(1, np.int8), np.array([[0.06, 0.0]]), np.zeros(1), np.zeros(1, np.int64))
    p3, stats3 = eng.process(third)
    assert sorted(zip(p3.left_id, p3.right_id)) == [(1, 4), (2, 4), (3, 4)]
    assert stats3.worker_pairs == {0: 2, 1: 1}
    eng.expire_before(1)  # next window: only the new owner
    fourth = Records(np.array([5, 6]), np.zeros(2, np.int8), np.array([[0.0, 0.0], [0.2, 0.0]]), np.ones(2), np.ones(2, np.int64))
    p4, stats4 = eng.process(fourth)
    assert sorted(zip(p4.left_id, p4.right_id)) == [(5, 6)] and set(stats4.worker_pairs) == {1}


def test_role_encoding_and_parts_are_stable():
    roles = np.array([0, 1, 2, 0], np.int8)
    parts = np.array([-1, 0, 3, 14])
    r, q = decode_role(encode_role(roles, parts))
    assert r.tolist() == roles.tolist() and q.tolist() == parts.tolist()
    assert part_of(np.arange(1000), 3).tolist() == part_of(np.arange(1000), 3).tolist()
    assert set(part_of(np.arange(1000), 3).tolist()) == {0, 1, 2}
    assert set(part_of(np.array(["a", "b", "c", "d"], dtype=object), 2).tolist()) <= {0, 1}
    g = (3 << 32) | 17
    assert base_gid(site_gid(g, 1, 2)) == g and base_gid(site_gid(g, 0, 0)) == g
