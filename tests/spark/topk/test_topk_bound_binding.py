"""The shared bound of a partitioned topk_set_join, as the workers adopt it
(:func:`driftjoin.spark.topk.operators.adopted_bound`): worker 0 binds the newest version to the
next batch, and every worker of a batch adopts the version bound to it, never one the controller
published while the batch ran (it may hold pairs born after the batch's earlier sets)."""

from __future__ import annotations

import pytest

from driftjoin.spark.runtime.decisions import publish
from driftjoin.spark.runtime.queries import TaskQuery
from driftjoin.spark.topk import operators
from driftjoin.spark.topk.operators import SHARED_BOUND, adopted_bound


@pytest.fixture
def in_batch(monkeypatch):
    """Run the next calls as a task of batch ``b`` of query ``q``."""
    def enter(batch: int | None) -> None:
        monkeypatch.setattr(operators, "task_query", lambda: TaskQuery("q", None, batch, None, None, 0))
    return enter


def _version(doc) -> int | None:
    return None if doc is None else int(doc["version"])


def test_workers_adopt_the_version_bound_to_their_batch(tmp_path, in_batch) -> None:
    root = str(tmp_path)
    in_batch(0)
    assert adopted_bound(root, 0, 0) is None and adopted_bound(root, 1, 0) is None  # nothing published
    publish(root, SHARED_BOUND, 1, {"ends": [5.0], "sims": [0.5]})  # after batch 0
    in_batch(1)
    assert _version(adopted_bound(root, 1, 0)) is None  # batch 1 was bound (to nothing) during batch 0
    assert _version(adopted_bound(root, 0, 0)) is None  # worker 0 binds version 1 to batch 2
    in_batch(2)
    assert _version(adopted_bound(root, 0, 0)) == 1  # and binds it to batch 3
    publish(root, SHARED_BOUND, 2, {"ends": [6.0], "sims": [0.7]})  # while batch 2 runs: from its own pairs
    for worker in (1, 2, 3):
        assert _version(adopted_bound(root, worker, 0)) == 1  # not version 2
    assert adopted_bound(root, 1, 1) is None  # a worker already at version 1 keeps it
    in_batch(3)
    assert adopted_bound(root, 2, 1) is None  # batch 3 is bound to version 1: nothing newer
    assert _version(adopted_bound(root, 0, 1)) is None  # worker 0 binds version 2 to batch 4
    in_batch(4)
    assert [_version(adopted_bound(root, w, 1)) for w in (1, 2, 3)] == [2, 2, 2]


def test_a_rerun_task_adopts_what_its_first_attempt_did(tmp_path, in_batch) -> None:
    root = str(tmp_path)
    publish(root, SHARED_BOUND, 1, {"ends": [5.0], "sims": [0.5]})
    in_batch(4)
    adopted_bound(root, 0, 0)  # worker 0 binds version 1 to batch 5
    in_batch(5)
    first = _version(adopted_bound(root, 3, 0))
    publish(root, SHARED_BOUND, 2, {"ends": [6.0], "sims": [0.9]})  # the controller, before worker 3 runs again
    assert first == 1 and _version(adopted_bound(root, 3, 0)) == 1
