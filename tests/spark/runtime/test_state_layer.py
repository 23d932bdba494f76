"""The chunked state layer with its process cache can never serve stale state.

The S3J processors run here without Spark, on an in-memory state that commits or rolls back
like Spark's state store: batches fail after the processor ran (a failure in another task, or
in the sink) and are replayed, with the cache on. The pairs must equal the oracle's, exactly
once, and equal those of a run without the cache; the cache must actually be used.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.s3j.space import random_centroids
from driftjoin.spark.runtime import state as state_layer
from driftjoin.spark.runtime.queries import TaskQuery
from driftjoin.spark.runtime.state import ChunkedState, StateCache
from driftjoin.spark.similarity.s3j import S3JPlan
from driftjoin.windows import windowing
from driftjoin.spark.similarity.s3j import (
    ComputationProcessor,
    FormulationProcessor,
    FusedProcessor,
    route_batches,
)

INPUT = pa.schema([("side", pa.int8()), ("id", pa.int64()), ("vector", pa.list_(pa.float64())), ("ingest", pa.float64()),
                   ("time", pa.float64()), ("time_reason", pa.string())])
ROUTED = pa.schema([("key", pa.int32()), ("outer", pa.bool_()), ("side", pa.int8()), ("id", pa.int64()),
                    ("vec", pa.binary()), ("ingest", pa.float64()), ("window", pa.int64()), ("time", pa.int64()),
                    ("ghost", pa.bool_())])


class _Value:
    """A ``ValueState`` over one key's current transaction (``handle.db``)."""

    def __init__(self, handle, name: str) -> None:
        self.handle, self.name = handle, name

    def exists(self) -> bool:
        return self.name in self.handle.db

    def get(self):
        return self.handle.db.get(self.name)

    def update(self, value) -> None:
        self.handle.db[self.name] = value


class _Map:
    """A ``MapState`` over one key's current transaction (``handle.db``)."""

    def __init__(self, handle, name: str) -> None:
        self.handle, self.name = handle, name

    def _items(self) -> dict:
        return self.handle.db.setdefault(self.name, {})

    def getValue(self, key):
        return self._items()[key]

    def updateValue(self, key, value) -> None:
        self._items()[key] = value

    def removeKey(self, key) -> None:
        self._items().pop(key)


class TransactionalHandle:
    """One key's state that a batch commits or rolls back, like Spark's state store."""

    def __init__(self) -> None:
        self.committed: dict = {}
        self.db: dict = {}

    def begin(self) -> None:
        self.db = copy.deepcopy(self.committed)

    def commit(self) -> None:
        self.committed = self.db

    def getValueState(self, name, schema):
        return _Value(self, name)

    def getMapState(self, name, key_schema, value_schema):
        return _Map(self, name)


def _input(rows: list[tuple[int, int, list[float], float]]) -> pa.RecordBatch:
    side, ids, vecs, times = zip(*rows)
    return pa.RecordBatch.from_arrays([pa.array(side, pa.int8()), pa.array(ids, pa.int64()), pa.array(vecs, pa.list_(pa.float64())),
                                       pa.array(times), pa.array(times), pa.array([None] * len(rows), pa.string())], schema=INPUT)


def _run(plan: S3JPlan, batches: list, fail: set[int], two_stage: bool, caches: list[StateCache]) -> list[tuple]:
    """Run the batches through the processors; batch i in ``fail`` is rolled back once and replayed.

    Each attempt runs in the "process" of ``caches[attempt number % len(caches)]`` (Spark hands
    a partition to any idle Python worker: a key's previous batch often ran in another process).
    """
    keys = [*plan.keys, -1]
    handles = {k: TransactionalHandle() for k in keys}
    worker_handles = {k: TransactionalHandle() for k in keys}
    out: list[tuple] = []
    attempts = 0
    for i, rows in enumerate(batches):
        for attempt in range(2 if i in fail else 1):
            state_layer.CACHE = caches[attempts % len(caches)]
            attempts += 1
            routed = pa.Table.from_batches(list(route_batches(plan, iter([_input(rows)]), ROUTED))).to_pandas()
            pairs: list[pd.DataFrame] = []
            members: list[pd.DataFrame] = []
            for k in keys:
                handles[k].begin()
                proc = FormulationProcessor(plan) if two_stage else FusedProcessor(plan)
                proc.init(handles[k])
                frames = list(proc.handleInputRows((k,), iter([routed[routed["key"] == k]]), None))
                (members if two_stage else pairs).extend(frames)
            if two_stage:
                m = pd.concat(members, ignore_index=True)
                for k in plan.keys:
                    worker_handles[k].begin()
                    proc = ComputationProcessor(plan)
                    proc.init(worker_handles[k])
                    pairs.extend(proc.handleInputRows((k,), iter([m[m["wkey"] == k]]), None))
            if attempt == 0 and i in fail:
                continue  # the batch failed elsewhere: nothing commits, the next attempt replays it
            for h in (*handles.values(), *worker_handles.values()):
                h.commit()
            out += [pair for f in pairs for pair in _pairs(f)]
    return out


def _pairs(frame: pd.DataFrame) -> list[tuple]:
    """The pairs of an output frame (one row per pair, or per left record with arrays)."""
    if "right_ids" in frame:
        return [(left, int(right)) for left, rights in zip(frame["left_id"], frame["right_ids"]) for right in rights]
    return list(zip(frame["left_id"], frame["right_id"]))


@pytest.fixture
def streaming_cache(monkeypatch):
    """Processors see a running query (so they use the cache), with a fresh cache."""
    cache = StateCache(2**30)
    monkeypatch.setattr(state_layer, "task_query", lambda: TaskQuery("query-1", None, None, None, None))
    monkeypatch.setattr(state_layer, "CACHE", cache)
    return cache


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(20, 200), cuts=st.integers(2, 8), seed=st.integers(0, 10**6), two_stage=st.booleans(),
       processes=st.integers(1, 3), data=st.data())
def test_cache_with_failures_and_replays_equals_oracle_and_no_cache(streaming_cache, n, cuts, seed, two_stage, processes, data):
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1, 1, (n, 2))
    t = np.sort(rng.uniform(0, 90, n))  # windows of 30 s: several close while batches arrive
    side = rng.integers(0, 2, n)
    bounds = np.linspace(0, n, cuts + 1).astype(int)
    batches = [[(int(side[i]), i, X[i].tolist(), float(t[i])) for i in range(a, b)] for a, b in zip(bounds, bounds[1:])]
    fail = data.draw(st.sets(st.integers(0, cuts - 1)))
    m = get_metric("euclidean")
    plan = S3JPlan(metric="euclidean", threshold=0.15, dim=2, parallelism=3, centroids=random_centroids(3, 2, seed % 7),
                   self_join=False, windows=windowing("30 seconds"), metrics_dir=None, partitions=2, time_basis="ingest",
                   lateness=0.0, balanced=two_stage)
    expected = {(a, b) for a, b, _ in oracle_pairs(np.arange(n), side.astype(np.int8), X, np.floor(t / 30).astype(np.int64),
                                                   m, 0.15, False)}
    caches = [StateCache(2**30) for _ in range(processes)]
    with_cache = _run(plan, batches, fail, two_stage, caches)
    assert len(with_cache) == len(set(with_cache)) and set(with_cache) == expected
    # later batches found their state in the cache, as saved or (another process ran the key's
    # previous batch, or it failed) stale and brought up to date from the new chunks
    assert cuts + len(fail) <= processes or sum(c.hits + c.stale for c in caches) > 0
    without = _run(plan, batches, fail, two_stage, [StateCache(0)])  # every batch rebuilds from the chunks
    assert sorted(without) == sorted(with_cache)


def test_a_failed_batch_never_leaves_its_changes_in_the_cache(streaming_cache):
    """The value leaves the cache when a batch starts; a failed batch's changes are not put back."""
    handle = TransactionalHandle()
    state = ChunkedState(handle, "part")
    handle.begin()
    first = state.load(1, rebuild=lambda meta, chunks, stale: ["rebuilt"], empty=lambda: [])
    first.value.append("batch 0")
    first.chunks.add(0, "batch 0")
    state.save(1, first, 10)
    handle.commit()
    handle.begin()
    second = state.load(1, rebuild=lambda meta, chunks, stale: [v for _, v in chunks.read(0)], empty=lambda: [])
    assert second.cached and second.value == ["batch 0"]
    second.value.append("batch 1, failed")  # the batch fails after this: no save, no commit
    handle.begin()
    replay = state.load(1, rebuild=lambda meta, chunks, stale: [v for _, v in chunks.read(0)], empty=lambda: [])
    assert not replay.cached and replay.value == ["batch 0"]
    replay.value.append("batch 1")
    replay.chunks.add(0, "batch 1")
    state.save(1, replay, 10)  # saved in the task, then the batch fails in another task: rolled back
    handle.begin()
    again = state.load(1, rebuild=lambda meta, chunks, stale: [v for _, v in chunks.read(0)], empty=lambda: [])
    assert not again.cached and again.value == ["batch 0"]


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=st.lists(st.tuples(st.integers(1, 50), st.booleans(), st.integers(0, 2)), min_size=1, max_size=40))
def test_logged_state_with_snapshots_failures_and_processes_equals_the_committed_history(monkeypatch, steps):
    """A value changed in place (a list that grows by a batch's items): snapshots, a log, stale
    caches of other processes and rolled-back batches always give the committed history."""
    from driftjoin.spark.runtime.state import LoggedState

    monkeypatch.setattr(state_layer, "task_query", lambda: TaskQuery("query-2", None, None, None, None))
    caches = [StateCache(2**30) for _ in range(3)]
    handle = TransactionalHandle()
    committed: list[int] = []
    snapshots = 0
    for n, fails, process in steps:
        state_layer.CACHE = caches[process]
        state = LoggedState(handle, "log")
        handle.begin()
        loaded = state.load(1, list, list, lambda value, change: value.extend(change))
        assert loaded.value.value == committed
        change = list(range(len(committed), len(committed) + n))
        loaded.value.value.extend(change)
        snapshots += state.save(1, loaded, change, lambda: list(loaded.value.value), len(loaded.value.value))
        if not fails:
            handle.commit()
            committed += change
    handle.begin()
    state_layer.CACHE = StateCache(0)
    assert LoggedState(handle, "log").load(1, list, list, lambda v, c: v.extend(c)).value.value == committed


class _DictStore:
    def __init__(self, chunks: dict) -> None:
        self.chunks, self.reads = chunks, []

    def getValue(self, key):  # noqa: N802 - Spark's name
        self.reads.append(key[1])
        return (state_layer.dumps(self.chunks[key]),)


def test_a_stale_copy_keeps_the_items_whose_parts_are_all_listed_and_reads_the_rest():
    from driftjoin.spark.runtime.state import Chunks, Meta

    meta = Meta(chunks={5: [11, 12, 13, 14]})
    store = _DictStore({(5, c): f"chunk {c}" for c in (11, 12, 13, 14)})
    stale = [("merged", (11, 12)), ("gone", (13, 99)), ("unstored", ()), ("alone", (14,))]
    kept, new = Chunks(store, meta).keep_stale(5, stale, lambda item: item[1])
    assert kept == [("merged", (11, 12)), ("alone", (14,))]  # 99 is no longer listed: that item is not the chunks
    assert new == [(13, "chunk 13")] and store.reads == [13]
    kept, new = Chunks(store, meta).keep_stale(5, [], lambda item: item[1])
    assert kept == [] and [c for c, _ in new] == [11, 12, 13, 14]


class _Run:
    def __init__(self, parts: tuple[int, ...], values: list[int]) -> None:
        self.parts, self.values = parts, values

    def arrays(self) -> tuple:
        return (np.array(self.values),)


class _WriteStore:
    def __init__(self) -> None:
        self.written: dict = {}

    def updateValue(self, key, value):  # noqa: N802 - Spark's name
        self.written[key] = state_layer.loads(value[0])

    def removeKey(self, key):  # noqa: N802 - Spark's name
        del self.written[key]


def test_a_batch_writes_each_added_run_of_an_open_window_once_under_its_first_part():
    from types import SimpleNamespace

    from driftjoin.spark.runtime.state import Chunks, Meta

    store = _WriteStore()
    chunks = Chunks(store, Meta(chunks={3: [7]}))
    runs = SimpleNamespace(windows={3: [], 4: []},
                           added=[(3, _Run((21, 22), [1, 2])), (5, _Run((23,), [3])), (4, _Run((24,), [4, 5, 6]))])
    sizes = chunks.add_runs(runs, lambda run: ("lane 1", run.arrays()))
    assert runs.added == []  # the closed window 5's run is not written
    assert sorted(store.written) == [(3, 21), (4, 24)]
    lane, (values,) = store.written[(4, 24)]
    assert lane == "lane 1" and values.tolist() == [4, 5, 6]
    assert set(sizes) == {21, 24} and sizes[24] == len(state_layer.dumps(("lane 1", (np.array([4, 5, 6]),))))
    assert chunks.ids(3) == [7, 21] and chunks.ids(4) == [24]
    chunks.remove(3, 21)
    assert chunks.listed({7: 1, 21: 2, 24: 3, 99: 4}) == {7: 1, 24: 3}
