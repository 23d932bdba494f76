"""S3J similarity computation with the block kernel inside large worksets: the same pairs and the
same statistics as pair-by-pair evaluation, and the oracle's pairs."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.distance import METRICS, get_metric
from driftjoin.generators.vectors import generate_vectors
from driftjoin.s3j import compute
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.s3j.records import Records
from driftjoin.s3j.space import random_centroids


def _run(vec, ids, side, window, m, t, self_join, cuts, p, seed, balance_at=None):
    eng = S3JEngine(random_centroids(p, vec.shape[1], seed), m, t, self_join=self_join, dim=vec.shape[1])
    got, stats = [], []
    bounds = [0, *sorted(set(cuts)), len(ids)]
    for k, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if a == b:
            continue
        if balance_at == k:  # move every workset to worker 0: new members probe the old holders
            eng.set_assignment({g: 0 for w in eng.workers for runs in w.windows.values() for t_ in runs
                                for g in np.unique(t_.workset).tolist()})
        eng.expire_before(int(window[a:b].min()))
        pairs, st_ = eng.process(Records(ids[a:b], side[a:b], vec[a:b], np.zeros(b - a), window[a:b]))
        got += list(zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.window.tolist()))
        stats.append((st_.comparisons, st_.pairs, {k: v for k, v in sorted(st_.worksets.comparisons.items())}))
    return got, stats


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    metric=st.sampled_from(sorted(METRICS)),
    dim=st.sampled_from([1, 2, 16, 64]),
    n=st.integers(2, 250),
    quantile=st.sampled_from([0.05, 0.3, 0.7]),
    self_join=st.booleans(),
    p=st.integers(1, 4),
    cuts=st.lists(st.integers(0, 250), max_size=4),
    balance_at=st.one_of(st.none(), st.integers(1, 3)),
    seed=st.integers(0, 2**16),
)
def test_blocks_equal_pairwise_path_and_oracle(monkeypatch, metric, dim, n, quantile, self_join, p, cuts, balance_at, seed):
    m = get_metric(metric)
    vec = m.prepare(generate_vectors("gaussian", seed=seed, stream=0, start=0, count=n, dim=dim, clusters=3))
    sample = m.pairwise(vec[:60], vec[:60])
    t = float(np.quantile(sample[np.triu_indices(len(sample), 1)], quantile)) if len(sample) > 1 else 0.1
    t = min(max(t, 1e-6), m.max_threshold)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(3 * n)[:n].astype(np.int64)
    side = np.zeros(n, np.int8) if self_join else rng.integers(0, 2, n).astype(np.int8)
    window = np.sort(rng.integers(0, 2, n)).astype(np.int64)
    cuts = [c for c in cuts if c < n]
    monkeypatch.setattr(compute, "BLAS_MIN_PAIRS", 10**18)
    plain, plain_stats = _run(vec, ids, side, window, m, t, self_join, cuts, p, seed, balance_at)
    monkeypatch.setattr(compute, "BLAS_MIN_PAIRS", 1)
    blocks, block_stats = _run(vec, ids, side, window, m, t, self_join, cuts, p, seed, balance_at)
    assert len(blocks) == len(set(blocks))
    assert sorted(blocks) == sorted(plain)
    assert set(blocks) == oracle_pairs(ids, side, vec, window, m, t, self_join)
    assert block_stats == plain_stats
