"""Which published workset assignment a batch adopts (:mod:`driftjoin.spark.similarity.assignment`):
the one the formulation stage's plan key bound during the batch before, so every attempt of a
batch (a formulation task Spark runs again after losing an executor, a replay after a restart)
adopts the same version, whenever the balancer publishes."""

from __future__ import annotations

from driftjoin.spark.runtime.stats import STAMP
from driftjoin.spark.similarity.assignment import read_assignment, write_assignment
from driftjoin.spark.similarity.control import BalanceController
from driftjoin.spark.similarity.s3j import FormulationProcessor


class _Plan:
    def __init__(self, metrics_dir: str | None) -> None:
        self.metrics_dir = metrics_dir


def _binder(metrics_dir: str | None) -> FormulationProcessor:
    proc = FormulationProcessor.__new__(FormulationProcessor)
    proc.plan = _Plan(metrics_dir)  # type: ignore[assignment]
    return proc


def test_a_batch_adopts_the_assignment_bound_to_it(tmp_path) -> None:
    root = str(tmp_path)
    binder = _binder(root)
    write_assignment(root, 1, {1: 0}, {})
    binder.bind_decisions(5)  # the plan key of batch 4
    write_assignment(root, 2, {1: 1}, {})  # published while batch 5 runs
    assert read_assignment(root, batch=4) is None
    assert read_assignment(root, batch=5) == (1, {1: 0}, {})
    binder.bind_decisions(6)
    write_assignment(root, 3, {1: 0, 2: 1}, {})
    assert read_assignment(root, batch=6)[0] == read_assignment(root, batch=7)[0] == 2
    assert read_assignment(root, newer_than=2, batch=6) is None  # version 3 is not bound yet
    assert read_assignment(root)[0] == 3  # outside a streaming query: the newest
    for _attempt in range(3):  # the same answer however often a batch is run
        assert read_assignment(root, newer_than=1, batch=6)[0] == 2
    _binder(None).bind_decisions(8)  # no metrics directory: no balancing, nothing to bind


def test_the_balancer_publishes_and_the_next_bound_batch_adopts(tmp_path, monkeypatch) -> None:
    root = str(tmp_path)
    stats = [{"worker": w, "windows": [0], "time": 10.0 + b, "latency_hist": [0] * 4, STAMP: {"batch": b},
              "worksets": {str(w * 10 + g): [5, 0, 0, 100 * (w + 1) * (g + 1), 1] for g in range(3)}}
             for b in (3, 4) for w in (0, 1)]
    monkeypatch.setattr("driftjoin.spark.similarity.control.read_stats", lambda *_: iter(stats))
    ctl = BalanceController(root, parallelism=2, dim=2, policy="greedy", monitoring_window=0.001, di_threshold=0.01)
    decision = ctl.step(now=100.0)
    assert decision is not None
    assert read_assignment(root, batch=5) is None  # batch 5 runs with the version bound before
    _binder(root).bind_decisions(6)
    assert read_assignment(root, batch=6)[0] == decision.version
