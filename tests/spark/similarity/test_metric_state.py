"""The metric operator's chunked state and process cache never serve stale state.

Router and worker processors of :mod:`driftjoin.spark.similarity.spaces` run here without Spark, on
an in-memory state that commits or rolls back like Spark's state store (batches fail after the
processors ran and are replayed), each attempt in one of a few "processes" (caches). In-order
streams with no lateness, so windows close while batches arrive and their chunks go. The pairs
must equal the brute-force oracle's, exactly once, and those of a run that rebuilds every batch
from the chunks.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.metric.passjoin import PassJoinStrategy
from driftjoin.metric.prefix import PrefixStrategy
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import JaccardSpace, LevenshteinSpace
from driftjoin.metric.tokens import TokenOrder
from driftjoin.spark.runtime import state as state_layer
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.queries import TaskQuery
from driftjoin.spark.runtime.state import StateCache
from driftjoin.spark.similarity.spaces import SpacePlan, SpaceProcessor, route_values
from driftjoin.windows import TICKS_PER_SECOND, Windowing

from tests.metric.data import records, strings
from tests.metric.oracle import jaccard, levenshtein, oracle, window_spec
from ..runtime.test_state_layer import TransactionalHandle

int_sets = st.lists(st.integers(0, 7), min_size=1, max_size=6)
str_sets = st.lists(st.sampled_from(["x", "y", "z", "\u00e9t\u00e9", "w", "v", "u"]), min_size=1, max_size=6)


def _schemas(value: pa.DataType) -> tuple[pa.Schema, pa.Schema]:
    source = pa.schema([("side", pa.int8()), ("id", pa.int64()), ("value", value), ("ingest", pa.float64()),
                        ("time", pa.float64()), ("time_reason", pa.string())])
    routed = pa.schema([("key", pa.int32()), ("role", pa.int8()), ("side", pa.int8()), ("id", pa.int64()), ("value", value),
                        ("ingest", pa.float64()), ("time", pa.int64()), ("window", pa.int64()), ("ghost", pa.bool_()),
                        ("home", pa.bool_())])
    return source, routed


def _run(plan: SpacePlan, batches: list, value_type: pa.DataType, fail: set[int], caches: list[StateCache]) -> list:
    source, routed_schema = _schemas(value_type)
    keys = [*plan.keys, PLAN_KEY]
    handles = {k: TransactionalHandle() for k in keys}
    out, attempts = [], 0
    for i, rows in enumerate(batches):
        side, ids, values, seconds = zip(*rows) if rows else ((), (), (), ())
        batch = pa.RecordBatch.from_arrays([pa.array(side, pa.int8()), pa.array(ids, pa.int64()), pa.array(values, value_type),
                                            pa.array(seconds, pa.float64()), pa.array(seconds, pa.float64()),
                                            pa.array([None] * len(rows), pa.string())], schema=source)
        routed = pa.Table.from_batches(list(route_values(plan, iter([batch]), routed_schema))).to_pandas()
        for attempt in range(2 if i in fail else 1):
            state_layer.CACHE = caches[attempts % len(caches)]
            attempts += 1
            frames = []
            for k in keys:
                handles[k].begin()
                proc = SpaceProcessor(plan)
                proc.init(handles[k])
                frames += list(proc.handleInputRows((k,), iter([routed[routed["key"] == k]]), None))
            if attempt == 0 and i in fail:
                continue
            for h in handles.values():
                h.commit()
            out += [p for f in frames for p in zip(f["left_id"], f["right_id"], f["window"])]
    return out


@pytest.fixture
def streaming_cache(monkeypatch):
    monkeypatch.setattr(state_layer, "task_query", lambda: TaskQuery("query-m", None, None, None, None))
    monkeypatch.setattr(state_layer, "CACHE", StateCache(2**30))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(kind=st.sampled_from(["passjoin", "s3j-strings", "prefix", "s3j-sets"]), data=st.data(),
       processes=st.integers(1, 3), workers=st.integers(1, 3))
def test_failures_replays_and_processes_equal_the_oracle(streaming_cache, kind, data, processes, workers):
    sets = kind in ("prefix", "s3j-sets")
    values = data.draw(st.sampled_from([int_sets, str_sets])) if sets else strings
    ids, sides, vals, times, self_join, w, cuts = data.draw(records(values, max_size=30))
    order = np.argsort(times, kind="stable")  # in order, no lateness: windows close as batches arrive
    ids, sides, vals, times = ([x[k] for k in order] for x in (ids, sides, vals, times))
    if sets:
        t = data.draw(st.sampled_from([0.0, 1 / 3, 0.5, 0.75]))
        space = JaccardSpace(TokenOrder.from_sample(vals[: len(vals) // 2]))
        value_type = pa.list_(pa.int64() if isinstance(vals[0][0], int) else pa.string())
        dist = jaccard
    else:
        t = data.draw(st.integers(0, 2))
        space, value_type, dist = LevenshteinSpace(), pa.string(), levenshtein
    if kind == "passjoin":
        strategy = PassJoinStrategy(t, workers, self_join=self_join, windows=w)
    elif kind == "prefix":
        strategy = PrefixStrategy(t, workers, self_join=self_join, windows=w)
    else:
        strategy = S3JStrategy(space, t, choose_centroids(space, space.prepare(vals), workers, 0), self_join=self_join, windows=w)
    plan = SpacePlan(strategy=strategy, space=space, threshold=t, parallelism=strategy.n_workers, self_join=self_join,
                     windows=w, value_kind="set" if sets else "string", metrics_dir=None, time_basis="event",
                     lateness=0.0, partitions=min(2, strategy.n_workers))
    seconds = [x / TICKS_PER_SECOND for x in times]
    rows = list(zip(sides, ids, vals, seconds))
    bounds = [0, *sorted(set(c for c in cuts if 0 < c < len(rows))), len(rows)]
    batches = [rows[a:b] for a, b in zip(bounds, bounds[1:])]
    fail = data.draw(st.sets(st.integers(0, len(batches) - 1)))
    expected = oracle([(i, s, v, x) for i, s, v, x in zip(ids, sides, vals, times)], dist, t, self_join, window_spec(w))

    def keys(pairs):
        if w.kind in ("interval", "unbounded"):
            return sorted((int(a), int(b)) for a, b, _ in pairs)
        return sorted((int(a), int(b), int(w.start([g])[0])) for a, b, g in pairs)

    cached = _run(plan, batches, value_type, fail, [StateCache(2**30) for _ in range(processes)])
    assert keys(cached) == sorted(expected.elements())
    rebuilt = _run(plan, batches, value_type, fail, [StateCache(0)])  # every batch from the chunks
    assert keys(rebuilt) == keys(cached)


def test_closed_windows_leave_no_chunks(streaming_cache):
    """A long in-order stream over short windows: the state holds the open windows only."""
    space = LevenshteinSpace()
    words = ["ab", "abc", "b", "ba", "abd", "cab"] * 20
    w = Windowing.interval(2 * TICKS_PER_SECOND)
    strategy = S3JStrategy(space, 1, choose_centroids(space, space.prepare(words), 2, 0), self_join=True, windows=w)
    plan = SpacePlan(strategy=strategy, space=space, threshold=1, parallelism=2, self_join=True, windows=w,
                     value_kind="string", metrics_dir=None, time_basis="event", partitions=2)
    rows = [(0, i, words[i], float(i)) for i in range(len(words))]
    source, routed_schema = _schemas(pa.string())
    handles = {k: TransactionalHandle() for k in (*plan.keys, PLAN_KEY)}
    for lo in range(0, len(rows), 10):
        part = rows[lo : lo + 10]
        side, ids, values, seconds = zip(*part)
        batch = pa.RecordBatch.from_arrays([pa.array(side, pa.int8()), pa.array(ids, pa.int64()), pa.array(values),
                                            pa.array(seconds), pa.array(seconds), pa.array([None] * len(part), pa.string())],
                                           schema=source)
        routed = pa.Table.from_batches(list(route_values(plan, iter([batch]), routed_schema))).to_pandas()
        for k, h in handles.items():
            h.begin()
            proc = SpaceProcessor(plan)
            proc.init(h)
            list(proc.handleInputRows((k,), iter([routed[routed["key"] == k]]), None))
            h.commit()
    for k in plan.keys:
        chunks = handles[k].committed["metric_worker_chunks"]
        windows = {g for g, _ in chunks if g > -(2**62)}
        assert windows and min(windows) >= 59  # the frontier is at 119 s: buckets of 2 s from 118 s on
        assert len(chunks) < 12
