"""The parallel pipeline (stateless routers, workers that move state themselves, a control plane
whose tables lag the data) reports exactly the oracle's pairs, each once: for every algorithm,
any micro-batch cuts, tables 0 to 3 batches behind, publications that miss a batch's binding,
replayed batches, restarts, several routers per batch, and arbitrary tables, with either local
join (the per-tuple tasks or the columnar kernel the Spark operator runs). Invariant (I) for
the previous table holds at every worker after steps 1-4 of every batch."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.hypercube import (
    BatchSummary,
    Grid,
    MisraGries,
    Side,
    StreamTuple,
    ZipfStreamSpec,
    oracle_pairs,
    zipf_stream,
)
from driftjoin.hypercube.distributed import DistributedJoin, stored_placement_violations
from driftjoin.hypercube.hashing import tuple_hash, tuple_hash_array
from driftjoin.hypercube.heavy import reduce_counts
from driftjoin.hypercube.routers import BicliqueRouter, HashRouter
from driftjoin.hypercube.table import BicliqueRouting, Binding, HashRouting, RoutingTable, ShcRouting

from .test_shc_exactly_once import assert_exactly_once, cut, streams

SETTINGS = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def invariant(join: DistributedJoin) -> None:
    """(I) for the previous table: where every stored tuple lies before the batch is routed."""
    assert stored_placement_violations(join.binding.prev, join.tasks()) == []


def run(join: DistributedJoin, batches: list[list[StreamTuple]], rnd: random.Random, *, hidden: float = 0.3,
        replays: float = 0.2, restarts: float = 0.1) -> DistributedJoin:
    for batch in batches:
        join.step(batch, routers=rnd.randint(1, 3), hidden=rnd.random() < hidden, rnd=rnd, replay=rnd.random() < replays)
        if rnd.random() < restarts:
            join.restart()
    return join


@SETTINGS
@given(
    stream=streams(),
    p=st.sampled_from([1, 2, 3, 4, 8]),
    cuts=st.lists(st.integers(0, 300), max_size=25),
    window=st.sampled_from([None, None, 0.0, 3.0, 25.0]),
    lateness=st.sampled_from([0.0, 2.0]),
    behind=st.integers(0, 3),
    delays=st.lists(st.tuples(st.integers(0, 30), st.integers(1, 3)), max_size=4),
    min_heavy=st.sampled_from([1, 3]),
    reduce=st.booleans(),
    shuffle=st.booleans(),
    kernel=st.sampled_from(DistributedJoin.KERNELS),
    rnd=st.randoms(use_true_random=False),
)
def test_shc_parallel_exactly_once_with_stale_tables(stream, p, cuts, window, lateness, behind, delays, min_heavy,
                                                     reduce, shuffle, kernel, rnd) -> None:
    batches = cut(stream, cuts, rnd, shuffle)
    if window is not None:  # some rows arrive batches after their time; those below the watermark are late
        stream = _delay(batches, delays, lateness)
    join = DistributedJoin("shc", p, window=window, lateness=lateness, behind=behind, reduce=reduce,
                           min_heavy=min_heavy, check=invariant, kernel=kernel)
    run(join, batches, rnd)
    assert_exactly_once(join.pairs, oracle_pairs(stream, window))


@SETTINGS
@given(
    stream=streams(),
    p=st.sampled_from([2, 3, 4, 8]),
    cuts=st.lists(st.integers(0, 300), max_size=25),
    seed=st.lists(st.tuples(st.sampled_from(Side), st.integers(0, 30)), max_size=120),
    behind=st.integers(0, 3),
    kernel=st.sampled_from(DistributedJoin.KERNELS),
    rnd=st.randoms(use_true_random=False),
)
def test_a_seeded_control_plane_is_exact_whatever_its_sample(stream, p, cuts, seed, behind, kernel, rnd) -> None:
    """A sample's counts (``sample=`` on Spark) decide only where the first batches go: any
    sample, related to the stream or not, gives the oracle's pairs once each."""
    counts = Counter((side, key, 0) for side, key in seed)
    totals = Counter((side, 0) for side, _ in seed)
    join = DistributedJoin("shc", p, behind=behind, min_heavy=2, check=invariant, kernel=kernel,
                           seed=BatchSummary(dict(counts), None, None, dict(totals)))
    assert join.binding.cur.version == 0
    run(join, cut(stream, cuts, rnd, False), rnd)
    assert_exactly_once(join.pairs, oracle_pairs(stream, None))


def test_a_seeded_control_plane_spreads_a_hot_key_from_the_first_batch() -> None:
    hot = [StreamTuple(Side.R if i % 2 else Side.S, 1, i, float(i)) for i in range(400)]
    light = [StreamTuple(Side.R if i % 2 else Side.S, 100 + i % 50, 1000 + i, float(i)) for i in range(100)]
    batch = hot + light
    sample = BatchSummary(dict(Counter((t.side, t.key, 0) for t in batch)), None, None,
                          dict(Counter((t.side, 0) for t in batch)))
    busiest = {}
    for name, seed in (("plain", None), ("seeded", sample)):
        join = DistributedJoin("shc", 4, seed=seed)
        join.step(batch)
        busiest[name] = max(join.produced) / sum(join.produced)
    assert busiest["plain"] > 0.95 and busiest["seeded"] < 0.5, busiest
    for fixed in ("phj", "biclique"):  # their routing is a fixed rule: a seed would be ignored
        with pytest.raises(ValueError, match="seeds SHC"):
            DistributedJoin(fixed, 4, seed=sample)


@SETTINGS
@given(
    stream=streams(),
    algorithm=st.sampled_from(["phj", "biclique"]),
    p=st.sampled_from([2, 3, 5, 8]),
    groups=st.integers(1, 4),
    cuts=st.lists(st.integers(0, 300), max_size=25),
    window=st.sampled_from([None, 0.0, 3.0, 25.0]),
    shuffle=st.booleans(),
    kernel=st.sampled_from(DistributedJoin.KERNELS),
    rnd=st.randoms(use_true_random=False),
)
def test_baselines_parallel_exactly_once(stream, algorithm, p, groups, cuts, window, shuffle, kernel, rnd) -> None:
    batches = cut(stream, cuts, rnd, shuffle)
    join = DistributedJoin(algorithm, p, window=window, groups=min(groups, p // 2), kernel=kernel)
    run(join, batches, rnd)
    assert_exactly_once(join.pairs, oracle_pairs(stream, window))


def random_tables(p: int, seed: int, keys: list[int]):
    """A new arbitrary table at every batch: random heavy keys, grid shapes, fresh tasks, workers."""
    rnd = random.Random(seed)
    next_task = [p]

    def tables(batch: int, planned: RoutingTable) -> RoutingTable:
        grids, workers = {}, {}
        for key in rnd.sample(keys, rnd.randint(0, 4)):
            p_r, p_s = rnd.choice([1, 2, 4]), rnd.choice([1, 2, 4])
            cells = tuple(range(next_task[0], next_task[0] + p_r * p_s))
            next_task[0] += len(cells)
            grids[key] = Grid(p_r, p_s, cells)
            workers.update({t: rnd.randrange(p) for t in cells})
        return RoutingTable(p, grids, workers, batch + 1)

    return tables


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(stream=streams(), p=st.sampled_from([1, 2, 4]), cuts=st.lists(st.integers(0, 300), max_size=25),
       window=st.sampled_from([None, 5.0]), behind=st.integers(0, 2), seed=st.integers(0, 1000),
       kernel=st.sampled_from(DistributedJoin.KERNELS), rnd=st.randoms(use_true_random=False))
def test_any_sequence_of_tables_is_exact(stream, p, cuts, window, behind, seed, kernel, rnd) -> None:
    """Exactness does not depend on the planner: arbitrary tables, changing at every batch, with
    values moving light -> heavy -> other grids -> light in consecutive batches."""
    batches = cut(stream, cuts, rnd, False)
    join = DistributedJoin("shc", p, window=window, behind=behind, tables=random_tables(p, seed, [0, 1, 2, 100, 101]),
                           check=invariant, kernel=kernel)
    run(join, batches, rnd)
    assert_exactly_once(join.pairs, oracle_pairs(stream, window))


def _delay(batches: list[list[StreamTuple]], delays: list[tuple[int, int]], lateness: float) -> list[StreamTuple]:
    """Move some tuples ``d`` batches later (in place); returns the tuples that are not late (at
    or above the largest time of the earlier batches minus ``lateness``), which the oracle joins."""
    for i, d in delays:
        b = i % len(batches) if batches else 0
        if batches and batches[b] and b + d < len(batches):
            batches[b + d].append(batches[b].pop(i % len(batches[b])))
    seen, kept = None, []
    for batch in batches:
        ok = [t for t in batch if seen is None or t.ts >= seen - lateness]
        kept += ok
        if ok:
            seen = max(t.ts for t in ok) if seen is None else max(seen, *(t.ts for t in ok))
    return kept


@pytest.mark.parametrize("kernel", DistributedJoin.KERNELS)
def test_every_transition_with_a_moving_hot_set_and_lagging_tables(kernel) -> None:
    """The core's moving-hot-set stream on 16 workers, tables one batch behind: promotions,
    demotions, doublings and halvings all happen, state moves, and the output is exact."""
    spec = ZipfStreamSpec(2000, 2000, domain=60, alpha_r=(1.0, 1.0, 2.5), alpha_s=(1.0, 1.0, 2.5), phases=3, seed=0)
    stream = zipf_stream(spec)
    for window in (None, 400.0):
        join = DistributedJoin("shc", 16, window=window, behind=0, min_heavy=4, check=invariant, kernel=kernel)
        for i in range(0, len(stream), 97):
            join.step(stream[i:i + 97], routers=2)
        assert_exactly_once(join.pairs, oracle_pairs(stream, window))
        m = join.metrics()
        assert m.promotions > 0 and m.demotions > 0 and m.halvings > 0 and m.moved > 0
        if window is None:
            assert m.doublings > 0


def test_routes_of_a_batch_equal_the_per_tuple_routes() -> None:
    rnd = random.Random(4)
    prev = RoutingTable(4, {1: Grid(2, 2, (4, 5, 6, 7)), 2: Grid(1, 2, (8, 9))}, {4: 0, 5: 1, 6: 2, 7: 3, 8: 1, 9: 2}, 1)
    cur = RoutingTable(4, {1: Grid(2, 4, tuple(range(10, 18))), 3: Grid(4, 1, (18, 19, 20, 21))},
                       {t: t % 4 for t in range(10, 22)}, 2)
    binding = Binding(cur, prev, 5)
    keys = [rnd.randrange(6) for _ in range(300)]
    side = np.array([rnd.randrange(2) for _ in keys], dtype=np.int8)
    low = np.array([rnd.getrandbits(64) for _ in keys], dtype=np.uint64)
    uniques = sorted(set(keys))
    codes = np.array([uniques.index(k) for k in keys])
    r = ShcRouting(binding).route_batch(side, codes, uniques, low)
    got = Counter(zip(r.row.tolist(), r.task.tolist(), r.role.tolist(), r.primary.tolist()))
    want = Counter((i, t, int(role), prim) for i, k in enumerate(keys)
                   for t, role, prim in binding.routes(Side(int(side[i])), k, int(low[i])))
    assert got == want
    assert all(w == (cur.worker_of(t) if role == 3 else prev.worker_of(t))
               for t, w, role in zip(r.task.tolist(), r.worker.tolist(), r.role.tolist()))
    assert sorted(binding.moving) == [1, 2, 3]
    for fixed, reference in ((HashRouting(4), HashRouter(tuple(range(4)))),
                             (BicliqueRouting(6, 2), BicliqueRouter(((0, 2), (1,)), ((3, 5), (4,))))):
        r = fixed.route_batch(side, codes, uniques, low)
        got = Counter(zip(r.row.tolist(), r.task.tolist(), r.role.tolist()))
        want = Counter((i, t, int(role)) for i, k in enumerate(keys)
                       for t, role in reference.route(StreamTuple(Side(int(side[i])), k, int(low[i]))))
        assert got == want
        assert int(r.primary.sum()) == len(keys)
    assert tuple_hash_array(side, low).tolist() == [tuple_hash(int(s), int(x)) for s, x in zip(side, low)]


@settings(max_examples=150, deadline=None)
@given(parts=st.lists(st.lists(st.one_of(st.integers(0, 3), st.integers(0, 60)), max_size=200), min_size=1, max_size=6),
       k=st.integers(1, 12))
def test_reduced_worker_counts_keep_the_misra_gries_bound(parts: list[list[int]], k: int) -> None:
    """Workers reduce their counts to k counters; merged at the driver, every estimate stays in
    [f - n/(k+1), f], as if the driver had counted every tuple."""
    mg = MisraGries(k)
    truth = Counter()
    for items in parts:
        counts, totals = reduce_counts({(Side.R, x, 0): m for x, m in Counter(items).items()}, k)
        summary = BatchSummary.merge([BatchSummary(counts, None, None, totals)])
        mg.merge({key: m for (_, key, _), m in summary.counts.items()}, summary.totals.get((Side.R, 0), 0))
        truth.update(items)
    assert mg.n == sum(truth.values())
    for x in set(truth) | {-1}:
        assert truth[x] - mg.n / (mg.k + 1) <= mg.estimate(x) <= truth[x]
