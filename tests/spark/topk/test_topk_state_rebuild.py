"""topk_set_join's processors rebuild a stale or missing join from its logged changes exactly.

The SWOOP processors (single join, owner workers and merger) run here without Spark on the
in-memory state of test_state_layer that commits or rolls back like Spark's state store. Each
attempt of a batch runs in one of several "processes" (caches), batches fail after the
processors ran and are replayed, and snapshots alternate with log entries, so the joins are
served from the cache as saved, brought up to date from a stale cached copy by applying the
log entries written since, or rebuilt from the snapshot and the log. The change stream must
equal BaseTopK's (the oracle), change by change and numbered without gaps, in every case.
"""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.spark.runtime import state as state_layer
from driftjoin.spark.runtime.keys import slot_keys
from driftjoin.spark.runtime.plan_guard import PlanChangedError
from driftjoin.spark.runtime.queries import TaskQuery
from driftjoin.spark.runtime.state import StateCache
from driftjoin.spark.topk.operators import (
    MERGE_KEY,
    MergeProcessor,
    SwoopProcessor,
    TopKPlan,
    WorkerProcessor,
    insert_order,
)
from driftjoin.swoop import BaseTopK, DuplicateSetError, InvalidSetError, LateSetError
from driftjoin.swoop.partitioned import owner_of

from ..runtime.test_state_layer import TransactionalHandle


def _oracle(batches: list[pd.DataFrame], k: int, window: float) -> list[tuple]:
    base = BaseTopK(k, "jaccard", window)
    out = []
    for pdf in batches:
        for sid, tokens, ts in zip(*(insert_order(pdf)[c] for c in ("id", "tokens", "ts"))):
            try:
                changes = base.insert(sid, list(tokens), ts)
            except InvalidSetError as e:
                kind = "late" if isinstance(e, LateSetError) else "duplicate" if isinstance(e, DuplicateSetError) else "?"
                out.append((kind, sid, None, None, round(ts * 1e6)))
                continue
            out += [(c.kind, c.pair.first, c.pair.second, round(c.pair.sim, 12), round(c.time * 1e6)) for c in changes]
    return out


def _changes(frames: list[pd.DataFrame]) -> list[tuple]:
    frames = [f for f in frames if len(f)]
    if not frames:
        return []
    rows = pd.concat(frames, ignore_index=True).sort_values("seq")
    assert rows["seq"].tolist() == list(range(len(rows)))
    return [(kind, left, None if kind not in ("enter", "leave") else right,
             None if kind not in ("enter", "leave") else round(sim, 12), int(t))
            for kind, left, right, sim, t in zip(rows["kind"], rows["left_id"], rows["right_id"], rows["similarity"],
                                                 rows["change_time"])]


def _run(plan: TopKPlan, batches: list[pd.DataFrame], fail: set[int], caches: list[StateCache]) -> list[tuple]:
    """The processors over the batches; batch i in ``fail`` is rolled back once and replayed; each
    attempt runs in the process of ``caches[attempt % len(caches)]``."""
    p = plan.parallelism
    keys = slot_keys(p) if p > 1 else [0]
    handles = {k: TransactionalHandle() for k in keys}
    merge = TransactionalHandle()
    out: list[pd.DataFrame] = []
    attempts = 0
    for i, pdf in enumerate(batches):
        for attempt in range(2 if i in fail else 1):
            state_layer.CACHE = caches[attempts % len(caches)]
            attempts += 1
            frames: list[pd.DataFrame] = []
            for k in keys:
                handles[k].begin()
                proc = SwoopProcessor(plan) if p == 1 else WorkerProcessor(plan)
                proc.init(handles[k])
                rows = pdf.assign(key=k, owner=[owner_of(sid, None, p) for sid in pdf["id"]]) if p > 1 else pdf
                frames += list(proc.handleInputRows((k,), iter([rows]), None))
            frames = [f for f in frames if len(f)]
            if p > 1 and frames:
                merge.begin()
                proc = MergeProcessor(plan)
                proc.init(merge)
                frames = list(proc.handleInputRows((MERGE_KEY,), iter([pd.concat(frames, ignore_index=True)]), None))
            if attempt == 0 and i in fail:
                continue  # the batch failed elsewhere: nothing commits, the next attempt replays it
            for h in (*handles.values(), merge):
                h.commit()
            out += frames
    return _changes(out)


@pytest.mark.filterwarnings("ignore:The behavior of DataFrame concatenation:FutureWarning")
@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(n=st.integers(10, 160), cuts=st.integers(1, 8), k=st.integers(1, 6), window=st.sampled_from([3.0, 8.0, 30.0]),
       p=st.sampled_from([1, 2, 3]), processes=st.integers(1, 3), seed=st.integers(0, 10**6), data=st.data())
def test_rebuilt_joins_give_the_oracle_change_stream(monkeypatch, n, cuts, k, window, p, processes, seed, data):
    import random

    monkeypatch.setattr(state_layer, "task_query", lambda: TaskQuery("query-topk", None, None, None, None))
    rnd = random.Random(seed)
    vocab = [f"t{i}" for i in range(25)]
    rows = [{"id": rnd.randrange(n), "side": 0, "tokens": rnd.sample(vocab[: 6 + i % 19], rnd.randint(1, 5)),
             "ts": i * 0.4 - (3.0 if rnd.random() < 0.05 else 0.0)} for i in range(n)]  # duplicate ids, late sets
    bounds = sorted({0, n, *data.draw(st.lists(st.integers(1, n - 1), max_size=cuts))})
    batches = [pd.DataFrame(rows[a:b]) for a, b in zip(bounds, bounds[1:])]
    fail = data.draw(st.sets(st.integers(0, len(batches) - 1)))
    plan = TopKPlan(k, "jaccard", window, False, None, parallelism=p)
    caches = [StateCache(2**30) for _ in range(processes)]
    expected = _oracle(batches, k, window)
    assert _run(plan, batches, fail, caches) == expected
    assert _run(plan, batches, fail, [StateCache(0)]) == expected  # every batch rebuilds from snapshot and log


def test_a_checkpoint_of_the_input_log_format_is_refused_on_restart():
    """State format 3 logged each batch's input; its checkpoints are refused with a clear message."""
    plan = TopKPlan(5, "jaccard", 20.0, False, None)
    handle = TransactionalHandle()
    handle.begin()
    proc = SwoopProcessor(TopKPlan(5, "jaccard", 20.0, False, None))
    proc.init(handle)
    proc.guard.settings = {**plan.settings(), "state_format": 3}  # as written by the previous version
    proc.guard.check()
    handle.commit()
    handle.begin()
    proc = SwoopProcessor(plan)
    proc.init(handle)
    rows = pd.DataFrame([{"id": 1, "side": 0, "tokens": ["a", "b"], "ts": 1.0}])
    with pytest.raises(PlanChangedError, match="state_format: checkpoint has 3, this query has 4.*new checkpoint location"):
        list(proc.handleInputRows((0,), iter([rows]), None))
