"""Grid join and block kernels against the brute-force oracle: every metric, dimensions 1 to
768, self- and two-stream joins, windows, micro-batch boundaries, float32 inputs, thresholds that
fall exactly on a distance or between two distances a few ulps apart."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.blockjoin import BlockJoin
from driftjoin.distance import METRICS, get_metric
from driftjoin.generators.vectors import DISTRIBUTIONS, generate_vectors
from driftjoin.grid.engine import GridEngine
from driftjoin.grid.layout import choose_layout
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.s3j.records import Records

DIMS = [1, 2, 3, 7, 32, 128, 384, 768]


def run_grid(ids, side, raw, window, metric, t, self_join, cuts, p, block_bytes=None):
    eng = GridEngine(metric, t, self_join=self_join, parallelism=p, block_bytes=block_bytes)
    got: list[tuple] = []
    bounds = [0, *sorted(set(cuts)), len(ids)]
    for a, b in zip(bounds, bounds[1:]):
        if a == b:
            continue
        sl = slice(a, b)
        eng.expire_before(int(window[sl].min()))
        pairs, stats = eng.process(Records(ids[sl], side[sl], raw[sl], np.zeros(b - a), window[sl]))
        assert np.all(pairs.distance <= t)
        got += list(zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.window.tolist()))
    return got


def oracle(ids, side, raw, window, metric, t, self_join):
    return oracle_pairs(ids, side, metric.prepare(raw.astype(np.float64)), window, metric, t, self_join)


def threshold_between(d: np.ndarray, q: float, mode: str) -> float:
    """A threshold at quantile ``q`` of the distances: on a distance, or just above/below it."""
    d = np.unique(d[d > 0])
    if len(d) == 0:
        return 1e-6
    v = float(d[min(len(d) - 1, int(q * len(d)))])
    return {"on": v, "above": float(np.nextafter(v, np.inf)), "below": float(np.nextafter(v, 0.0))}[mode]


@settings(max_examples=70, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    metric=st.sampled_from(sorted(METRICS)),
    dim=st.sampled_from(DIMS),
    dist=st.sampled_from(DISTRIBUTIONS),
    n=st.integers(2, 160),
    quantile=st.sampled_from([0.0, 0.01, 0.05, 0.3]),
    mode=st.sampled_from(["on", "above", "below"]),
    self_join=st.booleans(),
    p=st.integers(1, 7),
    n_windows=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 160), max_size=5),
    float32=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_grid_equals_oracle(metric, dim, dist, n, quantile, mode, self_join, p, n_windows, cuts, float32, seed):
    m = get_metric(metric)
    raw = generate_vectors(dist, seed=seed, stream=0, start=0, count=n, dim=dim, times=np.linspace(0, 300, n))
    if float32:
        raw = raw.astype(np.float32)
    prepared = m.prepare(raw.astype(np.float64))
    t = min(threshold_between(m.pairwise(prepared[:60], prepared[:60]), quantile, mode), m.max_threshold)
    rng = np.random.default_rng(seed)
    ids = rng.permutation(n * 3)[:n].astype(np.int64)
    side = np.zeros(n, np.int8) if self_join else rng.integers(0, 2, n).astype(np.int8)
    window = np.sort(rng.integers(0, n_windows, n)).astype(np.int64)
    got = run_grid(ids, side, raw, window, m, t, self_join, [c for c in cuts if c < n], p, block_bytes=1 << 16)
    assert len(got) == len(set(got)), "duplicate pairs"
    assert set(got) == oracle(ids, side, raw, window, m, t, self_join)
    if self_join:
        assert all(a < b for a, b, _ in got)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    metric=st.sampled_from(sorted(METRICS)),
    dim=st.sampled_from(DIMS),
    n=st.integers(2, 90),
    scale=st.sampled_from([1e-3, 1.0, 1e3, 1e145]),
    offset=st.sampled_from([0.0, 10.0, 1e4]),
    mode=st.sampled_from(["on", "above", "below"]),
    screen=st.sampled_from(["auto", "float32", "float64"]),
    seed=st.integers(0, 2**16),
)
def test_block_kernel_near_ties(metric, dim, n, scale, offset, mode, screen, seed):
    """Pairs built a few ulps apart (a record and its perturbed copies), the threshold on or
    beside one of their distances: the kernel must return exactly what the oracle returns."""
    m = get_metric(metric)
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(max(1, n // 3), dim)) * scale + offset
    eps = np.finfo(np.float64).eps
    copies = base[rng.integers(0, len(base), n)] * (1 + rng.integers(-4, 5, (n, dim)) * eps) + rng.normal(size=(n, dim)) * scale * 1e-3
    vec = m.prepare(np.vstack([base, copies]))
    d = m.pairwise(vec, vec)
    t = min(threshold_between(d[np.triu_indices(len(vec), 1)], rng.uniform(0, 0.3), mode), m.max_threshold)
    kernel = BlockJoin(m, t, block_bytes=1 << 16, screen=screen)
    res = kernel.join(vec)
    ii, jj = np.nonzero(np.triu(d <= t, 1))
    assert sorted(zip(res.ia.tolist(), res.ib.tolist())) == sorted(zip(ii.tolist(), jj.tolist()))
    assert np.array_equal(res.dist, d[res.ia, res.ib])
    half = len(vec) // 2
    res = kernel.join(vec[:half], vec[half:])
    ii, jj = np.nonzero(d[:half, half:] <= t)
    assert sorted(zip(res.ia.tolist(), res.ib.tolist())) == sorted(zip(ii.tolist(), jj.tolist()))


@settings(max_examples=40, deadline=None)
@given(dim=st.sampled_from(DIMS), n=st.integers(1, 40), seed=st.integers(0, 2**16))
def test_rowwise_is_the_oracles_distance_and_prepare_is_per_row(dim, n, seed):
    """What "the same function the oracle uses" rests on: ``rowwise`` equals ``pairwise`` bit for
    bit, and preparing rows one by one equals preparing them together."""
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(n, dim)) * 10, rng.normal(size=(n, dim))
    for m in METRICS.values():
        a, b = m.prepare(x), m.prepare(y)
        assert np.array_equal(np.vstack([m.prepare(x[i : i + 1]) for i in range(n)]), a)
        ia, ib = np.divmod(np.arange(n * n), n)
        assert np.array_equal(m.rowwise(a[ia], b[ib]).reshape(n, n), m.pairwise(a, b))


def test_integer_grid_ties_every_metric():
    rng = np.random.default_rng(3)
    raw = rng.integers(-3, 4, size=(150, 3)).astype(np.float64)
    ids = np.arange(150)
    for metric in ("euclidean", "manhattan", "chebyshev"):
        m = get_metric(metric)
        for t in (1.0, 2.0, 3.0):
            z = np.zeros(150, np.int8)
            got = run_grid(ids, z, raw, np.zeros(150, np.int64), m, t, True, [50, 100], 3)
            assert sorted(got) == sorted(oracle(ids, z, raw, np.zeros(150, np.int64), m, t, True))


def test_string_and_duplicate_ids_self_join():
    m = get_metric("euclidean")
    raw = np.array([[0.0], [0.1], [0.2], [5.0]])
    ids = np.array(["b", "a", "a", "c"], dtype=object)
    z = np.zeros(4, np.int8)
    got = run_grid(ids, z, raw, np.zeros(4, np.int64), m, 0.5, True, [2], 3)
    assert sorted(got) == [("a", "b", 0), ("a", "b", 0)]


@pytest.mark.parametrize("p", [1, 2, 3, 4, 5, 8, 13, 16, 30])
@pytest.mark.parametrize("self_join", [True, False])
def test_layout_meets_every_pair_exactly_once(p, self_join):
    layout = choose_layout(p, self_join)
    n = 400
    ids = np.arange(n)
    side = np.zeros(n, np.int8) if self_join else (ids % 2).astype(np.int8)
    row, worker, bucket = layout.route(ids, side)
    b = layout.bucket(ids, side)
    assert np.array_equal(bucket, b[row])
    at = {}
    for r, w in zip(row.tolist(), worker.tolist()):
        at.setdefault(r, set()).add(w)
    assert len(row) == sum(len(v) for v in at.values()), "a record reaches a worker at most once"
    cells = layout.cells
    for x in range(0, n, 7):
        for y in range(x + 1, n, 5):
            if not self_join and side[x] == side[y]:
                continue
            lx, ry = (x, y) if self_join or side[x] == 0 else (y, x)
            key = (min(b[lx], b[ry]), max(b[lx], b[ry])) if self_join else (b[lx], b[ry])
            assert key in cells
            assert cells[key] in at[lx] and cells[key] in at[ry]
    assert layout.copies_per_record() <= max(2.0, 2 * np.sqrt(2 * p))
    assert len(set(cells.values())) >= min(p, 1 + p // 2)


def test_layout_is_deterministic_across_processes():
    import subprocess
    import sys

    code = "from driftjoin.grid.layout import id_hash; import numpy as np; print(id_hash(np.array(['x','yy']),0).tolist(), id_hash(np.arange(3),1).tolist())"
    runs = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONHASHSEED": s}).stdout for s in ("1", "2")}
    assert len(runs) == 1 and runs.pop().strip()


def test_state_round_trip_and_refusals():
    import pickle

    from driftjoin.grid.worker import GridWorker, grid_state, restore_grid

    m = get_metric("euclidean")
    layout = choose_layout(2, True)
    w = GridWorker(layout, 0, m, 0.5)
    raw = np.random.default_rng(0).normal(size=(50, 4)).astype(np.float32)
    row, worker, bucket = layout.route(np.arange(50), np.zeros(50, np.int8))
    k = worker == 0
    w.add(Records(np.arange(50)[row[k]], np.zeros(k.sum(), np.int8), raw[row[k]], np.zeros(k.sum()), np.zeros(k.sum(), np.int64)), bucket[k])
    state = pickle.loads(pickle.dumps(grid_state(w)))
    again = restore_grid(GridWorker(layout, 0, m, 0.5), state)
    assert again.windows[0].records.vec.dtype == np.float32 and len(again.windows[0].records) == k.sum()
    with pytest.raises(ValueError, match="another grid"):
        restore_grid(GridWorker(choose_layout(3, True), 0, m, 0.5), state)
    with pytest.raises(ValueError, match="new checkpoint location"):
        restore_grid(GridWorker(layout, 0, m, 0.5), {**state, "format": 99})


@pytest.mark.parametrize("dist", ["uniform", "gaussian", "skewed"])
def test_auto_picks_s3j_in_two_dimensions(dist):
    from driftjoin.grid.choice import estimate
    from driftjoin.s3j.space import random_centroids
    from driftjoin.spark.similarity.threshold import choose_threshold

    x = generate_vectors(dist, seed=1, stream=0, start=0, count=1500, dim=2)
    for metric in ("angular", "euclidean"):
        for sel in (0.001, 0.1):
            t = choose_threshold(x, selectivity=sel, metric=metric)
            for p in (2, 4):
                c = estimate(x, get_metric(metric), t, parallelism=p, self_join=True, centroids=random_centroids(p, 2, 0))
                assert c.algorithm == "s3j", c


def test_auto_picks_grid_for_clustered_embeddings_and_is_deterministic():
    from driftjoin.grid.choice import estimate
    from driftjoin.s3j.space import random_centroids
    from driftjoin.spark.similarity.threshold import choose_threshold

    x = generate_vectors("gaussian", seed=1, stream=0, start=0, count=3000, dim=64, clusters=16, spread=0.1)
    t = choose_threshold(x, selectivity=5 / 20000, metric="euclidean")
    runs = [estimate(x, get_metric("euclidean"), t, parallelism=2, self_join=True, centroids=random_centroids(2, 64, 0))
            for _ in range(2)]
    assert runs[0] == runs[1] and runs[0].algorithm == "grid"
    assert runs[0].s3j_duplication > 4 * runs[0].grid_copies
