"""Partitioned SWOOP (driftjoin.swoop.partitioned) against Base (the oracle): after every insert
and every advance the merged change events and the top-k are those of Base, for both designs,
both engines, p = 1, 2, 4, 8, all similarity functions, self-joins and two-stream joins, k from
1 to 1000, with and without the shared bound, with micro-batches; every pair belongs to exactly
one worker, whose stock is the minimal stock of its own pairs; the merged change stream replays
into Base's top-k; routing hashes are stable."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop import BaseTopK, InvalidSetError, Swoop
from driftjoin.swoop import _kernels as K
from driftjoin.swoop.bound import Staircase
from driftjoin.swoop.generator import set_stream
from driftjoin.swoop.partitioned import (
    OwnerWorker,
    PartitionedTopK,
    owner_of,
    owners_of_ints,
    stable_hash,
    token_part,
)
from driftjoin.swoop.similarity import SIMILARITIES

from .helpers import kth_at, skyband

ENGINES = ["compiled", "python"]
DESIGNS = ["owner", "probe", "token"]


@st.composite
def scenarios(draw, ks=(1, 2, 3, 5, 8)):
    k = draw(st.sampled_from(ks))
    similarity = draw(st.sampled_from(sorted(SIMILARITIES)))
    window = draw(st.sampled_from([1, 2, 3, 5, 8]))
    two_stream = draw(st.booleans())
    p = draw(st.sampled_from([1, 2, 4, 8]))
    share_bound = draw(st.booleans())
    bulk_min = draw(st.sampled_from([0, 4, 10**9]))  # Python engine: vectorised / mixed / scalar
    string_tokens = draw(st.booleans())
    vocab = draw(st.integers(3, 14))
    ops = []
    for n in range(draw(st.integers(1, 45))):
        dt = draw(st.sampled_from([0, 0, 0, 1, 1, 2, 4]))
        if draw(st.integers(0, 9)) == 0:
            ops.append(("advance", dt, None, None, False))
            continue
        tokens = draw(st.lists(st.integers(0, vocab - 1), min_size=1, max_size=7))
        if string_tokens:
            tokens = [f"w{tok}" for tok in tokens]
        side = draw(st.sampled_from(["R", "S"])) if two_stream else None
        ops.append(("insert", dt, tokens, side, draw(st.integers(0, 3)) == 0))  # publish after?
    return k, similarity, window, two_stream, p, share_bound, bulk_min, ops


def run(scenario, design, engine):
    k, similarity, window, two_stream, p, share_bound, bulk_min, ops = scenario
    part = PartitionedTopK(
        k, similarity, window, parallelism=p, design=design, two_stream=two_stream,
        share_bound=share_bound, engine=engine,
    )  # fmt: skip
    for worker in part.workers:
        assert worker.engine == engine
        worker.generator.bulk_min = bulk_min
    base = BaseTopK(k, similarity, window, two_stream=two_stream)
    t = 0
    for n, (op, dt, tokens, side, publish) in enumerate(ops):
        t += dt
        if op == "advance":
            assert part.advance(t) == base.advance(t)
        else:
            assert part.insert(n, tokens, t, side) == base.insert(n, tokens, t, side)
            if publish and share_bound:
                part.publish_bound()
        assert part.topk() == base.topk()
        assert part.index_time == base.index_time == t
        assert part.window_size == base.window_size
    return part, base


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("design", DESIGNS)
@settings(max_examples=60, deadline=None)
@given(scenario=scenarios())
def test_partitioned_equals_base(design, engine, scenario):
    run(scenario, design, engine)


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("design", DESIGNS)
@settings(max_examples=15, deadline=None)
@given(scenario=scenarios(ks=(50, 200, 1000)))
def test_partitioned_equals_base_large_k(design, engine, scenario):
    run(scenario, design, engine)


def _pair_owner(design, p, tokens_of, sides, i, j):
    """The worker a Base pair (arrival numbers i > j) belongs to, from the definitions."""
    if design == "owner":  # the earlier set's owner indexes it
        return owner_of(j, sides[j], p)
    if design == "probe":  # the later set's owner probes it
        return owner_of(i, sides[i], p)
    shared = set(tokens_of[i]) & set(tokens_of[j])
    return min(token_part(tok, p) for tok in shared)


def _global_stock(worker):
    """A worker's stock with its window numbers translated to arrival numbers."""
    return [(s, e, i, worker._W.get(j).seq) for s, e, i, j in worker.stock]


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("design", DESIGNS)
@settings(max_examples=40, deadline=None)
@given(scenario=scenarios())
def test_each_pair_is_one_workers_and_its_stock_is_minimal(design, engine, scenario):
    """Without the shared bound each worker's stock is the minimal stock of its own pairs, and
    the workers' pairs partition Base's (set ids are the arrival numbers here: no rejects)."""
    k, similarity, window, two_stream, p, _, bulk_min, ops = scenario
    part = PartitionedTopK(
        k, similarity, window, parallelism=p, design=design, two_stream=two_stream, engine=engine
    )
    for worker in part.workers:
        worker.generator.bulk_min = bulk_min
    base = BaseTopK(k, similarity, window, two_stream=two_stream)
    tokens_of, sides = {}, {}
    t = 0
    for op, dt, tokens, side, _ in ops:
        t += dt
        if op == "advance":
            part.advance(t)
            base.advance(t)
            continue
        n = len(tokens_of)
        tokens_of[n], sides[n] = tokens, side
        part.insert(n, tokens, t, side)
        base.insert(n, tokens, t, side)
        mine: dict[int, list] = {w: [] for w in range(p)}
        for key in base.stock:
            mine[_pair_owner(design, p, tokens_of, sides, key[2], key[3])].append(key)
        for w, worker in enumerate(part.workers):
            assert _global_stock(worker) == skyband(mine[w], k)


def replay(changes):
    """driftjoin.spark.topk.api.current_topk's logic: per pair its last change, kept if 'enter'."""
    last = {}
    for seq, change in enumerate(changes):
        last[(change.pair.first, change.pair.second)] = (seq, change)
    return {pair: change.pair.sim for pair, (_, change) in last.items() if change.kind == "enter"}


@pytest.mark.parametrize("design", DESIGNS)
@pytest.mark.parametrize(("p", "k", "two_stream"), [(2, 1, False), (4, 10, True), (8, 100, False)])
def test_merged_stream_replays_into_base_topk(design, p, k, two_stream):
    """Longer Zipf streams with near-duplicates and drift, micro-batches of varying size, the
    bound shared after every batch; the replayed stream is Base's top-k after every batch."""
    part = PartitionedTopK(
        k, "jaccard", 0.05, parallelism=p, design=design, two_stream=two_stream, share_bound=True
    )
    base = BaseTopK(k, "jaccard", 0.05, two_stream=two_stream)
    stream = list(set_stream(
        1500, vocabulary=80, size=(1, 8), rate=1000.0, drift=100.0, near_duplicates=0.3, seed=p,
    ))  # fmt: skip
    rows = [(sid, tokens, ts, ("R", "S")[sid % 2] if two_stream else None) for sid, tokens, ts in stream]
    rows.insert(700, (10**6, ["late"], 0.0, "R" if two_stream else None))  # a late set
    rows.insert(800, (rows[790][0], ["dup"], rows[799][2], rows[790][3]))  # a duplicate id
    changes, expected = [], []
    rng = np.random.default_rng(p)
    start = 0
    while start < len(rows):
        batch = rows[start : start + int(rng.integers(1, 120))]
        start += len(batch)
        events, rejected = part.insert_batch(batch)
        changes += events
        for n, (set_id, tokens, ts, side) in enumerate(batch):
            try:
                expected += base.insert(set_id, tokens, ts, side)
            except InvalidSetError:
                assert n in [position for position, _ in rejected]
        assert len(rejected) == sum(1 for row in batch if row[0] in (10**6,) or row[1] == ["dup"])
        assert replay(changes) == {(q.first, q.second): q.sim for q in base.topk()}
    assert changes == expected
    assert part.topk() == base.topk()


def test_shared_bound_prunes_pre_candidates():
    """The shared bound crops the inverted lists harder (same result): fewer list entries read,
    a deterministic count (pre-candidates are no measure of the crop since the filtered scan
    drops most cropped-in entries before reading their sets)."""

    def run(share_bound):
        part = PartitionedTopK(10, "jaccard", 2.0, parallelism=4, share_bound=share_bound)
        stream = list(set_stream(4000, vocabulary=2000, size=(5, 15), seed=3))
        for start in range(0, len(stream), 200):
            part.insert_batch([(sid, tokens, ts, None) for sid, tokens, ts in stream[start : start + 200]])
        return sum(worker.generator.scanned for worker in part.workers), part.topk()

    (shared, top_shared), (alone, top_alone) = run(True), run(False)
    assert top_shared == top_alone
    assert shared < 0.9 * alone


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 6), st.integers(0, 8)), max_size=40),
    st.integers(1, 6),
    st.floats(0.0, 7.0),
)
def test_staircase_of_pairs_is_the_kth_best_by_end_time(pairs, k, ub):
    keys = [(-s / 2, -float(e), n, 0) for n, (s, e) in enumerate(pairs)]
    stairs = Staircase.of_pairs(
        np.array([s / 2 for s, _ in pairs]), np.array([float(e) for _, e in pairs]), k
    )
    for t in np.arange(-1.0, 10.0, 0.5):
        assert stairs.lb(t) == kth_at(keys, k, t) == stairs.lb_array(np.array([t]))[0]
        # crop_end: lb(t) > ub exactly for t <= crop_end(ub)
        assert (stairs.lb(t) > ub) == (t <= stairs.crop_end(ub))


def test_routing_hashes_are_stable_and_vectorised():
    """Spark routes with these hashes in its Python workers and keeps their state across
    restarts: the values must not depend on the process (pinned here) or on the path."""
    assert stable_hash(12345) == stable_hash(np.int64(12345))
    assert stable_hash(12345) == 2454886589211414944
    assert [owner_of(i, None, 7) for i in range(8)] == [2, 0, 4, 6, 0, 0, 5, 0]
    assert owner_of("tweet-1", "S", 5) == 4 and token_part("word", 4) == 2
    ids = np.array([0, 1, -5, 2**62, 17, 99], np.int64)
    sides = np.array([0, 1, 1, 0, 0, 1])
    assert owners_of_ints(ids, sides, 3).tolist() == [
        owner_of(int(i), "S" if s else None, 3) for i, s in zip(ids, sides)
    ]


@pytest.mark.parametrize("engine", ENGINES)
def test_pickled_worker_continues_identically(engine):
    stream = list(set_stream(1200, vocabulary=300, size=(2, 9), rate=1000.0, near_duplicates=0.2, seed=4))
    worker = OwnerWorker(20, "cosine", 0.3, 1, 3, engine=engine)
    for sid, tokens, ts in stream[:700]:
        worker.insert_routed(sid, tokens, ts, None, owner_of(sid, None, 3))
    copy = pickle.loads(pickle.dumps(worker))
    for sid, tokens, ts in stream[700:]:
        owner = owner_of(sid, None, 3)
        assert copy.insert_routed(sid, tokens, ts, None, owner) == worker.insert_routed(sid, tokens, ts, None, owner)
    assert copy.topk() == worker.topk()


def test_join_pickled_with_the_old_meta_layout_continues():
    """A compiled join saved before the partitioned joins' meta slots (16) unpickles."""
    stream = list(set_stream(600, vocabulary=100, size=(2, 6), rate=1000.0, seed=5))
    swoop, reference = Swoop(5, "jaccard", 0.1), Swoop(5, "jaccard", 0.1)
    for sid, tokens, ts in stream[:300]:
        swoop.insert(sid, tokens, ts)
        reference.insert(sid, tokens, ts)
    core = swoop._core
    old = core.meta[:16].copy()
    core.meta = core.stock.meta = core.generator._meta = old
    del core.bound
    state = pickle.dumps(swoop)
    restored = pickle.loads(state)
    assert len(restored._core.meta) == K.META_SIZE
    assert restored._core.stock.meta is restored._core.meta
    for sid, tokens, ts in stream[300:]:
        assert restored.insert(sid, tokens, ts) == reference.insert(sid, tokens, ts)


def test_bad_settings():
    with pytest.raises(ValueError, match="parallelism"):
        PartitionedTopK(3, "jaccard", 1.0, parallelism=0)
    with pytest.raises(ValueError, match="design"):
        PartitionedTopK(3, "jaccard", 1.0, parallelism=2, design="range")
    part = PartitionedTopK(3, "jaccard", 1.0, parallelism=2, design="token")
    with pytest.raises(InvalidSetError, match="empty set"):
        part.insert(1, [], 0.0)
    part.insert(1, ["a"], 1.0)
    with pytest.raises(InvalidSetError, match="out-of-order"):
        part.insert(2, ["a"], 0.5)
    with pytest.raises(InvalidSetError, match="duplicate"):
        part.insert(1, ["b"], 1.5)
