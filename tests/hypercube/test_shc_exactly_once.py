"""Every algorithm reports exactly the oracle's pairs, each once: full-stream and window joins,
arbitrary micro-batch boundaries and orders inside a batch, heavy/light transitions, grid
doubling and halving. For SHC, invariant (I) of ``driftjoin.hypercube.shc`` is checked after
every batch."""

from __future__ import annotations

import pickle
import random
from collections import defaultdict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.hypercube import (
    LateTupleError,
    Side,
    Simulator,
    StreamingHyperCube,
    StreamTuple,
    Task,
    ZipfStreamSpec,
    apply_moves,
    make_dispatcher,
    oracle_pairs,
    run_join,
    zipf_stream,
)
from driftjoin.hypercube.invariants import placement_violations


@st.composite
def streams(draw) -> list[StreamTuple]:
    """Small streams whose hot keys move at a random point (so values turn heavy, then light)."""
    n = draw(st.integers(0, 260))
    shift_at = draw(st.integers(0, max(n, 1)))
    hot = st.integers(0, 2)
    items = draw(st.lists(
        st.tuples(st.sampled_from(Side), st.one_of(hot, hot, st.integers(0, 40)), st.integers(0, 3)),
        min_size=n, max_size=n,
    ))
    out, ts, tids = [], 0, [0, 0]
    for i, (side, key, gap) in enumerate(items):
        ts += gap
        if i >= shift_at and key < 3:
            key += 100
        out.append(StreamTuple(side, key, tids[side], float(ts)))
        tids[side] += 1
    return out


def cut(stream: list[StreamTuple], cuts: list[int], rnd: random.Random, shuffle: bool) -> list[list[StreamTuple]]:
    bounds = [0, *sorted({c % (len(stream) + 1) for c in cuts}), len(stream)]
    batches = [stream[a:b] for a, b in zip(bounds, bounds[1:]) if a < b]
    if shuffle:
        for b in batches:
            rnd.shuffle(b)
    return batches


def run_batches(algorithm: str, p: int, batches: list[list[StreamTuple]], **options) -> Simulator:
    sim = Simulator(make_dispatcher(algorithm, p, **options))
    for batch in batches:
        sim.step(batch)
        if algorithm == "shc":
            assert placement_violations(sim.dispatcher, sim.tasks) == []
    return sim


def assert_exactly_once(pairs: list, expected: set) -> None:
    assert len(pairs) == len(set(pairs)), "duplicates"
    assert set(pairs) == expected


SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(
    stream=streams(),
    p=st.sampled_from([1, 2, 3, 4, 8]),
    cuts=st.lists(st.integers(0, 300), max_size=25),
    window=st.sampled_from([None, None, 0.0, 3.0, 25.0]),
    min_heavy=st.sampled_from([1, 3, 8]),
    eps_frac=st.sampled_from([1.0, 0.5]),
    panes=st.sampled_from([1, 3]),
    shuffle=st.booleans(),
    rnd=st.randoms(use_true_random=False),
)
def test_shc_exactly_once(stream, p, cuts, window, min_heavy, eps_frac, panes, shuffle, rnd) -> None:
    batches = cut(stream, cuts, rnd, shuffle)
    sim = run_batches("shc", p, batches, window=window, min_heavy=min_heavy, epsilon=eps_frac / (2 * p), panes=panes)
    assert_exactly_once(sim.pairs, oracle_pairs(stream, window))


@SETTINGS
@given(
    stream=streams(),
    algorithm=st.sampled_from(["phj", "biclique"]),
    p=st.sampled_from([2, 3, 5, 8]),
    groups=st.integers(1, 4),
    cuts=st.lists(st.integers(0, 300), max_size=25),
    window=st.sampled_from([None, 0.0, 3.0, 25.0]),
    shuffle=st.booleans(),
    rnd=st.randoms(use_true_random=False),
)
def test_baselines_exactly_once(stream, algorithm, p, groups, cuts, window, shuffle, rnd) -> None:
    options = {"window": window}
    if algorithm == "biclique":
        options["groups"] = min(groups, p // 2)
    sim = run_batches(algorithm, p, cut(stream, cuts, rnd, shuffle), **options)
    assert_exactly_once(sim.pairs, oracle_pairs(stream, window))


@pytest.mark.parametrize("window", [None, 400.0])
def test_moving_hot_set_exercises_every_transition(window) -> None:
    """A Zipf stream whose skew and hot set move: values are promoted, demoted, their grids double
    and halve, and the output stays exact, with invariant (I) after every batch."""
    spec = ZipfStreamSpec(2000, 2000, domain=60, alpha_r=(1.0, 1.0, 2.5), alpha_s=(1.0, 1.0, 2.5), phases=3, seed=0)
    stream = zipf_stream(spec)
    sizes = [1, 37, 200, 13, 90]
    batches, i = [], 0
    while i < len(stream):
        batches.append(stream[i:i + sizes[len(batches) % len(sizes)]])
        i += len(batches[-1])
    sim = run_batches("shc", 16, batches, window=window, min_heavy=4)
    assert_exactly_once(sim.pairs, oracle_pairs(stream, window))
    stats = sim.dispatcher.stats
    assert stats.promotions > 0 and stats.demotions > 0 and stats.doublings > 0 and stats.halvings > 0
    assert sim.moved > 0


@pytest.mark.parametrize("algorithm", ["shc", "phj"])
def test_engine_style_execution_of_plans(algorithm: str) -> None:
    """A Spark-like executor that only uses the plan contract: evict, moves, releases, then each
    task's routed copies, with tasks rebuilt from their stored tuples between batches (a
    checkpoint/restore of every task) and the router shipped pickled. SHC and PHJ copies of a
    tuple are all store-and-probe, so a task may process its copies in any order: they are
    shuffled here."""
    stream = zipf_stream(ZipfStreamSpec(1500, 1500, domain=40, alpha_r=1.5, alpha_s=(1.0, 1.8), phases=2, seed=3))
    options = {"min_heavy": 2} if algorithm == "shc" else {}
    dispatcher = make_dispatcher(algorithm, 4, window=300.0, **options)
    rnd = random.Random(0)
    tasks: dict[int, Task] = {}

    def task_of(task_id: int) -> Task:
        return tasks.setdefault(task_id, Task(task_id, dispatcher.window))

    pairs = []
    for start in range(0, len(stream), 111):
        batch = stream[start:start + 111]
        plan = dispatcher.plan(batch)
        reconf = plan.reconfiguration
        router = pickle.loads(pickle.dumps(dispatcher.router))
        assert [(r.task, r.role) for r in plan.routes] == [x for t in batch for x in router.route(t)]
        for task in tasks.values():
            if reconf.evict_before is not None:
                task.evict(reconf.evict_before)
        apply_moves(reconf.moves, task_of)
        for task_id in reconf.released:
            assert tasks.pop(task_id).stored == 0
        per_task = defaultdict(list)
        for routed in plan.routes:
            per_task[routed.task].append(routed)
        for task_id, routed in per_task.items():
            task = task_of(task_id)
            rnd.shuffle(routed)
            for r in routed:
                task.process(r.tup, r.role, pairs)
        tasks = {i: Task.from_tuples(i, t.window, list(t.stored_tuples())) for i, t in tasks.items()}
    assert dispatcher.stats.promotions > 0 or algorithm == "phj"
    assert_exactly_once(pairs, oracle_pairs(stream, 300.0))


def test_lateness_allows_bounded_disorder_and_rejects_late_tuples() -> None:
    rnd = random.Random(5)
    ts = sorted(rnd.uniform(0, 1000) for _ in range(1200))
    stream = [StreamTuple(Side(i % 2), rnd.randrange(6), i // 2, t) for i, t in enumerate(ts)]
    disordered = sorted(stream, key=lambda t: t.ts + rnd.uniform(0, 20))  # up to 20 late
    for algorithm in ("shc", "phj", "biclique"):
        result = run_join(disordered, algorithm, p=4, batch_size=50, window=15.0, lateness=20.0)
        assert_exactly_once(result.pairs, oracle_pairs(stream, 15.0))
    late = Simulator(StreamingHyperCube(4, window=10.0))
    late.step([StreamTuple(Side.R, 1, 0, 100.0)])
    late.step([StreamTuple(Side.S, 1, 0, 100.0)])
    with pytest.raises(LateTupleError):
        late.step([StreamTuple(Side.S, 1, 1, 99.0)])


def test_string_and_bytes_keys() -> None:
    stream = [StreamTuple(Side(i % 2), ("k%d" % (i % 3)) if i % 5 else b"raw", i // 2, float(i)) for i in range(400)]
    result = run_join(stream, "shc", p=4, batch_size=17, min_heavy=1)
    assert_exactly_once(result.pairs, oracle_pairs(stream))
    assert result.metrics.promotions > 0
