"""Which published workset assignment a batch adopts (:mod:`driftjoin.spark.similarity.assignment`):
the newest whose ``from_batch`` is not above the batch's id, so every attempt of a batch (a task
Spark runs again after losing an executor, a replay after a restart) adopts the same version, and
the balancer names a batch after every batch that may be running when it publishes."""

from __future__ import annotations

from driftjoin.spark.runtime.stats import STAMP
from driftjoin.spark.similarity.assignment import read_assignment, write_assignment
from driftjoin.spark.similarity.control import BalanceController


def test_a_batch_adopts_the_newest_version_named_for_it(tmp_path) -> None:
    root = str(tmp_path)
    write_assignment(root, 1, {1: 0}, {})
    write_assignment(root, 2, {1: 1}, {}, from_batch=5)
    write_assignment(root, 3, {1: 0, 2: 1}, {}, from_batch=7)
    assert read_assignment(root, batch=4)[0] == 1
    assert read_assignment(root, batch=5)[0] == read_assignment(root, batch=6)[0] == 2
    assert read_assignment(root, batch=7) == (3, {1: 0, 2: 1}, {})
    assert read_assignment(root, newer_than=2, batch=6) is None  # version 3 is not for batch 6 yet
    assert read_assignment(root)[0] == 3  # outside a streaming query: the newest
    for attempt in range(3):  # the same answer however often a batch is run
        assert read_assignment(root, newer_than=1, batch=6)[0] == 2


def test_the_balancer_names_a_batch_after_every_batch_that_may_be_running(tmp_path, monkeypatch) -> None:
    root = str(tmp_path)
    stats = [{"worker": w, "windows": [0], "time": 10.0 + b, "latency_hist": [0] * 4, STAMP: {"batch": b},
              "worksets": {str(w * 10 + g): [5, 0, 0, 100 * (w + 1) * (g + 1), 1] for g in range(3)}}
             for b in (3, 4) for w in (0, 1)]
    monkeypatch.setattr("driftjoin.spark.similarity.control.read_stats", lambda *_: iter(stats))
    ctl = BalanceController(root, parallelism=2, dim=2, policy="greedy", monitoring_window=0.001, di_threshold=0.01)
    decision = ctl.step(now=100.0)
    assert decision is not None and ctl.seen_batch == 4
    assert read_assignment(root, batch=5) is None  # batch 5 may be running: it keeps its version
    assert read_assignment(root, batch=6)[0] == decision.version
