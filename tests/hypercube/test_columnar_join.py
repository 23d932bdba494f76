"""The columnar local join (:mod:`driftjoin.hypercube.columnar`) against a brute-force oracle.

The oracle is written apart from the kernel: per task, a list of stored rows, and a batch's
copies handled one by one in their order with nested loops (a probing copy meets every stored
row of the other side with its key and, for window joins, a time at most W away; a storing copy
is then appended). Batches are drawn with strictly increasing times, so their order is their
time order for both. Drawn: tasks, keys (integers or strings), roles (store and probe, store
only, probe only), times, windows, batch cuts, evictions and drops between batches, snapshots
and logs replayed, and a hash that collides on purpose (so the pair-by-pair check of impure
segments runs). A second property compares the kernel with the per-tuple
:class:`~driftjoin.hypercube.task.Task` on copies with equal times, in the batch order.
"""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.hypercube import columnar
from driftjoin.hypercube.columnar import KEY, ROLE, TASK, TB, TL, TS, SideStore, from_ipc, join_batch, to_ipc
from driftjoin.hypercube.columnar_worker import ColumnarWorker
from driftjoin.hypercube.model import Role, Side, StreamTuple
from driftjoin.hypercube.table import batch_order
from driftjoin.hypercube.task import Task

SP, STORE, PROBE = int(Role.STORE_PROBE), int(Role.STORE), int(Role.PROBE)


@st.composite
def batches(draw, as_text: bool):
    """Batches of copies ``(side, task, key, role, tid, ts, payload)``: times strictly increasing."""
    out, ts, tids = [], 0.0, [0, 0]
    for _ in range(draw(st.integers(1, 6))):
        batch = []
        for _ in range(draw(st.integers(0, 40))):
            side = draw(st.integers(0, 1))
            key = draw(st.one_of(st.integers(0, 2), st.integers(0, 12)))
            ts += draw(st.integers(1, 4))
            batch.append((side, draw(st.integers(0, 3)), f"k{key}" if as_text else key,
                          draw(st.sampled_from([SP, SP, STORE, PROBE])), tids[side], ts, draw(st.integers(-5, 5))))
            tids[side] += 1
        out.append(batch)
    return out


def _tables(batch: list[tuple], text: bool) -> tuple[pa.Table | None, pa.Table | None]:
    out = []
    for side in (0, 1):
        rows = [c for c in batch if c[0] == side]
        if not rows:
            out.append(None)
            continue
        out.append(pa.table({
            TASK: pa.array([c[1] for c in rows], pa.int64()), ROLE: pa.array([c[3] for c in rows], pa.int8()),
            KEY: pa.array([c[2] for c in rows], pa.string() if text else pa.int64()),
            TB: pa.array([7] * len(rows), pa.int64()), TL: pa.array([c[4] for c in rows], pa.int64()),
            TS: pa.array([c[5] for c in rows], pa.float64()), "payload": pa.array([c[6] for c in rows], pa.int64()),
        }))
    return out[0], out[1]


class Oracle:
    """Per task, the stored rows; a batch's copies one at a time (module docstring)."""

    def __init__(self, window):
        self.window = window
        self.stored: list[tuple] = []  # (side, task, key, tid, ts, payload)

    def batch(self, copies: list[tuple]) -> Counter:
        pairs = Counter()
        for side, task, key, role, tid, ts, payload in copies:  # already in time order
            if role != STORE:
                for s2, t2, k2, i2, x2, p2 in self.stored:
                    if s2 != side and t2 == task and k2 == key and (self.window is None or abs(x2 - ts) <= self.window):
                        left, right = ((tid, payload), (i2, p2)) if side == 0 else ((i2, p2), (tid, payload))
                        pairs[(task, left, right)] += 1
            if role != PROBE:
                self.stored.append((side, task, key, tid, ts, payload))
        return pairs

    def evict(self, before: float) -> None:
        self.stored = [r for r in self.stored if r[4] >= before]

    def drop(self, task: int, key) -> None:
        self.stored = [r for r in self.stored if not (r[1] == task and r[2] == key)]


def _kernel_pairs(joined) -> Counter:
    out = Counter()
    for left, right in joined.pairs(chunk=7):  # small chunks: the chunking is exercised too
        assert left[TASK].to_pylist() == right[TASK].to_pylist()
        out.update(zip(left[TASK].to_pylist(), zip(left[TL].to_pylist(), left["payload"].to_pylist()),
                       zip(right[TL].to_pylist(), right["payload"].to_pylist())))
    return out


def _stored_rows(stores, since: float | None = None) -> Counter:
    """The stored rows (those at or above ``since`` only: a worker evicts lazily)."""
    return Counter((s, *row) for s, store in enumerate(stores) if (t := store.table()) is not None
                   for row in zip(t[TASK].to_pylist(), t[KEY].to_pylist(), t[TL].to_pylist(), t[TS].to_pylist())
                   if since is None or row[3] >= since)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), as_text=st.booleans(), window=st.sampled_from([None, None, 0.0, 3.0, 10.0]),
       collide=st.booleans())
def test_columnar_join_equals_the_nested_loop_oracle(data, as_text, window, collide) -> None:
    with pytest.MonkeyPatch.context() as patch:
        if collide:  # every join value hashes to one of two values: segments are impure, checks go pair by pair
            real = columnar.key_hashes
            patch.setattr(columnar, "key_hashes", lambda keys: real(keys) & np.uint64(1))
        _join_and_check(data, as_text, window)


def _join_and_check(data, as_text: bool, window) -> None:
    stores = (SideStore(), SideStore())
    oracle = Oracle(window)
    for batch in data.draw(batches(as_text)):
        joined, stored = join_batch(stores, _tables(batch, as_text), window)
        got = _kernel_pairs(joined)
        want = oracle.batch(batch)
        assert got == want
        assert joined.count() == sum(want.values())
        if data.draw(st.booleans()) and batch:  # evict between batches
            before = batch[len(batch) // 2][5]
            for s in stores:
                s.evict(before)
            oracle.evict(before)
        if data.draw(st.booleans()) and batch:  # drop one (task, key)
            task, key = batch[0][1], batch[0][2]
            for s in stores:
                s.drop(task, key)
            oracle.drop(task, key)
        if data.draw(st.booleans()):  # through pickle, as the state cache and the checkpoint hold it
            stores = pickle.loads(pickle.dumps(stores))
        assert _stored_rows(stores) == Counter((s, t, k, i, x) for s, t, k, i, x, _ in oracle.stored)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(copies=st.lists(st.tuples(st.integers(0, 1), st.integers(0, 2), st.integers(0, 3),
                                 st.sampled_from([SP, STORE, PROBE]), st.integers(0, 3)), max_size=60),
       cut=st.integers(0, 60), window=st.sampled_from([None, 0.0, 1.0]))
def test_columnar_join_equals_the_per_tuple_task_in_batch_order(copies, cut, window) -> None:
    """Equal times (the batch order breaks ties by a hash of the tuple): the same pairs as
    :class:`Task` given the copies in :func:`batch_order`, batch after batch."""
    tids = [0, 0]
    rows = []
    for side, task, key, role, t in copies:
        rows.append((side, task, key, role, tids[side], float(t), 0))
        tids[side] += 1
    stores = (SideStore(), SideStore())
    tasks: dict[int, Task] = {}
    for batch in (rows[:cut], rows[cut:]):
        joined, _ = join_batch(stores, _tables(batch, False), window)
        got = Counter((t, l[0], r[0]) for t, l, r in _kernel_pairs(joined))
        want = Counter()
        if batch:
            order = batch_order(np.array([c[0] for c in batch], dtype=np.int8), np.array([c[5] for c in batch]),
                                np.array([c[4] for c in batch], dtype=np.uint64))
            for i in order.tolist():
                side, task, key, role, tid, ts, _ = batch[i]
                sink: list = []
                tasks.setdefault(task, Task(task, window)).process(StreamTuple(Side(side), key, tid, ts), Role(role), sink)
                want.update((task, r, s) for r, s in sink)
        assert got == want


def test_a_worker_snapshot_and_log_rebuild_the_same_rows() -> None:
    """What the checkpoint holds (a snapshot, then each batch's logged change) rebuilds the rows
    a worker stores, installs, drops and evicts (rows below the eviction threshold, which can
    no longer join, may stay in one and not in the other: eviction is lazy)."""
    worker = ColumnarWorker(0, window=5.0)
    snap = worker.snapshot()
    logs = []
    ts = 0.0
    for b in range(4):
        batch = []
        for i in range(30):
            ts += 1
            batch.append((i % 2, i % 3, i % 5, SP, b * 100 + i, ts, i))
        log: dict = {}
        worker.begin(b, None, None, log)
        joined = worker.process(_tables(batch, False), log)
        worker.end(ts, 0, joined.count())
        log["scalars"] = worker.scalars()
        logs.append(pickle.loads(pickle.dumps(log)))
    rebuilt = ColumnarWorker.restore(0, 5.0, 0.0, snap)
    for change in logs:
        rebuilt.redo(change)
    live = worker.evict_before()
    assert _stored_rows(rebuilt.sides, live) == _stored_rows(worker.sides, live)
    assert rebuilt.scalars() == worker.scalars()
    again = ColumnarWorker.restore(0, 5.0, 0.0, pickle.loads(pickle.dumps(worker.snapshot())))
    assert _stored_rows(again.sides) == _stored_rows(worker.sides)


def test_tables_round_trip_through_ipc_with_every_value() -> None:
    table = pa.table({"a": pa.array([1, None, 2**62], pa.int64()), "b": pa.array([float("nan"), -0.0, None]),
                      "c": pa.array([{"x": 1}, None, {"x": None}], pa.struct([("x", pa.int32())]))})
    back = from_ipc(to_ipc(table))
    assert back.schema.equals(table.schema)
    assert repr(back.to_pylist()) == repr(table.to_pylist())  # NaN, -0.0 and nulls as they were


@pytest.mark.parametrize("keys", [pa.array([1, 2, 1, 3], pa.int64()), pa.array(["a", "b", "a", "c"]),
                                  pa.array([b"a", b"b", b"a", b"c"], pa.binary())])
def test_group_ids_depend_on_task_and_key(keys) -> None:
    gid = columnar.group_ids(np.array([0, 0, 0, 1]), keys)
    assert gid[0] == gid[2] and len({int(gid[0]), int(gid[1]), int(gid[3])}) == 3
    assert columnar.group_ids(np.array([1]), keys.slice(0, 1))[0] != gid[0]
