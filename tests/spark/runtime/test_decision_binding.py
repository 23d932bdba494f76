"""Binding a decision's version to a batch (:func:`driftjoin.spark.runtime.decisions.bind` and
:func:`~driftjoin.spark.runtime.decisions.bound`): every attempt of a batch reads the same version
whenever the controller publishes, bound versions never go down, and the plan key of a stateful
stage binds the next batch (:class:`~driftjoin.spark.runtime.processor.OperatorProcessor`)."""

from __future__ import annotations

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.spark.runtime import decisions, processor
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.queries import TaskQuery


def _published(root: str, name: str) -> int:
    found = decisions.versions(root, name)
    return found[-1] if found else -1


def test_a_batch_reads_the_version_bound_before_it_started(tmp_path) -> None:
    root = str(tmp_path)
    assert decisions.bind(root, "d", 3) is None and decisions.bound(root, "d", 3) is None  # nothing published
    decisions.publish(root, "d", 1, {"x": 1})
    assert decisions.bind(root, "d", 3) == 1  # by a task of batch 2
    assert decisions.bound(root, "d", 2) is None and decisions.bound(root, "d", 3) == 1
    decisions.publish(root, "d", 2, {"x": 2})
    decisions.publish(root, "d", 3, {"x": 3})
    for _attempt in range(3):  # published while batch 3 runs: its attempts keep version 1
        assert decisions.read_bound(root, "d", 3)["x"] == 1
    assert decisions.bind(root, "d", 4) == 3
    assert [decisions.bound(root, "d", b) for b in (3, 4, 9)] == [1, 3, 3]
    assert decisions.bound(root, "d", None) == 3  # outside a streaming query: the newest
    assert decisions.read_bound(root, "d", 4, newer_than=3) is None
    decisions.publish(root, "d", 4, {"x": 4})
    assert decisions.bind(root, "d", 4) == 4  # batch 3's binding task run again: batch 4 has not started
    assert decisions.bound(root, "d", 4) == 4


def test_bindings_are_written_on_change_and_old_ones_dropped(tmp_path) -> None:
    root = str(tmp_path)
    folder = tmp_path / "control" / "d.bound"
    decisions.publish(root, "d", 1, {})
    for batch in range(1, 6):
        decisions.bind(root, "d", batch)
    assert sorted(p.name for p in folder.iterdir()) == ["000000000001.json"]  # one version, one binding
    decisions.publish(root, "d", 2, {})
    decisions.bind(root, "d", 6)
    decisions.publish(root, "d", 3, {})
    decisions.bind(root, "d", 8)
    # batch 7 may be running (bound to version 2): its binding stays, the one before it goes
    assert sorted(p.name for p in folder.iterdir()) == ["000000000006.json", "000000000008.json"]
    assert [decisions.bound(root, "d", b) for b in (6, 7, 8)] == [2, 2, 3]


def test_a_bound_version_that_is_gone_fails_loudly(tmp_path) -> None:
    root = str(tmp_path)
    decisions.publish(root, "d", 1, {})
    decisions.bind(root, "d", 1)
    decisions.retire(root, "d")
    with pytest.raises(RuntimeError, match="lost files"):
        decisions.read_bound(root, "d", 1)


@settings(max_examples=40, deadline=None)
@given(events=st.lists(st.sampled_from(["publish", "bind", "rerun", "read", "commit"]), max_size=40))
def test_every_attempt_of_a_batch_reads_one_version_whenever_decisions_land(tmp_path_factory, events) -> None:
    """Any interleaving of publications, the binding task (and its re-runs) of the running batch,
    reads by attempts of the running batch and commits: all reads of a batch agree, the version
    read never goes down from batch to batch and is never newer than what was published."""
    root = str(tmp_path_factory.mktemp("control"))
    batch, published, reads = 0, 0, {}
    for event in events:
        if event == "publish":
            published += 1
            decisions.publish(root, "d", published, {})
        elif event in ("bind", "rerun"):  # the plan key of the running batch binds the next one
            decisions.bind(root, "d", batch + 1)
        elif event == "read":
            version = decisions.bound(root, "d", batch)
            kept = decisions.bound(root, "d", batch, query="q")  # what a task's process keeps for the batch
            reads.setdefault(batch, set()).update({-1 if version is None else version, -1 if kept is None else kept})
            assert version is None or version <= _published(root, "d")
        else:
            batch += 1
    assert all(len(seen) == 1 for seen in reads.values())
    order = [next(iter(reads[b])) for b in sorted(reads)]
    assert order == sorted(order)


def test_a_process_reads_the_binding_of_a_batch_once_per_query(tmp_path, monkeypatch) -> None:
    root = str(tmp_path)
    listings, reads = [], []
    list_versions, read_version = decisions._versions, decisions.read_version
    monkeypatch.setattr(decisions, "_versions", lambda fs, folder: listings.append(folder) or list_versions(fs, folder))
    monkeypatch.setattr(decisions, "read_version", lambda *a: reads.append(a) or read_version(*a))
    decisions.publish(root, "d", 1, {"x": 1})
    decisions.bind(root, "d", 2)
    listings.clear()
    for _key in range(5):  # five keys of batch 2 in one process: one listing, one read of the binding and the decision
        assert decisions.read_bound(root, "d", 2, query="q")["x"] == 1
    assert len(listings) == 1 and [r[1:] for r in reads] == [("d.bound", 2), ("d", 1)]
    decisions.publish(root, "d", 2, {"x": 2})
    decisions.bind(root, "d", 3)
    listings.clear()
    assert decisions.read_bound(root, "d", 3, query="q")["x"] == 2  # the next batch reads its own binding
    assert decisions.read_bound(root, "d", 2, query="q")["x"] == 1  # batch 2's stays what batch 2 read
    assert decisions.read_bound(root, "d", 3, query="other")["x"] == 2  # another query (a new checkpoint) reads again
    assert len(listings) == 2
    for _key in range(3):  # without a query id nothing is kept
        decisions.bound(root, "d", 3)
    assert len(listings) == 5


class _Recorder(processor.OperatorProcessor):
    def __init__(self) -> None:
        self.guard, self.bound_batches = None, []

    def bind_decisions(self, batch: int) -> None:
        self.bound_batches.append(batch)


@pytest.mark.parametrize("batch_id", [None, 0, 7])
def test_the_plan_key_binds_the_next_batch(monkeypatch, batch_id) -> None:
    monkeypatch.setattr(processor, "task_query", lambda: TaskQuery("q", None, batch_id, None, None, 0))
    proc = _Recorder()
    assert list(proc.handleInputRows((PLAN_KEY,), iter([pd.DataFrame({"a": [1]})]), None)) == []
    assert list(proc.handleInputRows((PLAN_KEY,), iter([pd.DataFrame({"a": []})]), None)) == []  # no rows: nothing
    assert proc.bound_batches == ([] if batch_id is None else [batch_id + 1])
