"""The similarity join on the standalone cluster while the autoscaler adds and removes executors.

Used by tests/spark/runtime/test_autoscale_cluster.py; prints 'OK <pairs> ...' on success.

    python tests/autoscale_cluster_job.py spark://127.0.0.1:7077 WORKDIR

Two phases over one checkpoint, one input file per side and micro-batch:

1. ``mode="live"``: while the query runs, the controller removes an executor that is running
   tasks (2 -> 1: its tasks, state partitions and shuffle blocks are lost and recomputed on the
   other) and adds one back (1 -> 2);
2. ``mode="restart"``: the controller stops the query, removes an executor and restarts the
   query from its checkpoint, which then reads the rest of the input.

The output must equal the oracle's pairs: none lost, none extra, none twice.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from cluster_job import Inputs

from driftjoin.control.autoscale import Policy, autoscale
from driftjoin.control.autoscale.actuator import ExecutorActuator
from driftjoin.control.autoscale.metrics import WindowMetrics
from driftjoin.spark.runtime.session import cluster_session

N, BATCHES = 1000, 10


@dataclass
class Scripted(Policy):
    """A stand-in policy: ``steps`` of (micro-batches seen, workers wanted), in order; a step
    is taken only while ``ready()`` (e.g. while every executor runs a task)."""

    steps: list[tuple[int, int]]
    ready: Callable[[], bool] = lambda: True
    seen: int = 0
    name: ClassVar[str] = "scripted"

    def recommend(self, m: WindowMetrics, current: int) -> int | None:
        self.seen += m.batches
        due = [w for b, w in self.steps if self.seen >= b]
        if not due or (due[-1] != current and not self.ready()):
            return None
        return due[-1]


def wait(what: str, done, timeout: float = 400.0) -> None:
    deadline = time.time() + timeout
    while not done():
        if time.time() > deadline:
            raise TimeoutError(f"waited {timeout:.0f} s for {what}")
        time.sleep(0.5)


def acted(ctl, n: int) -> bool:
    done = [r for r in ctl.history if r.target is not None]
    for r in done:
        assert not r.error, f"scaling failed: {r.error}"
    return len(done) >= n


def main(master: str, work: Path) -> None:
    inputs = Inputs(work, N, BATCHES)
    spark = cluster_session(master, 2, "driftjoin-autoscale-test", max_executors=2)
    pairs = inputs.pairs(spark)

    def start(trigger: dict | None = None):
        return (pairs.writeStream.format("parquet").option("path", str(work / "out"))
                .option("checkpointLocation", str(work / "ck")).trigger(**(trigger or {"processingTime": "1 second"})).start())

    def batches_done(q) -> int:
        return sum(1 for p in q.recentProgress if p["numInputRows"] > 0)

    log = []
    executors = ExecutorActuator(spark)
    # 1. live: 2 -> 1 after the first batch while both executors run tasks, 1 -> 2 after the second
    live = autoscale(spark, Scripted([(1, 1), (2, 2)], lambda: min(executors.executors().values(), default=0) > 0),
                     min_workers=1, max_workers=2, cooldown=0, monitoring_window=0.5, mode="live", start=start)
    try:
        wait("the live actions", lambda: acted(live, 2))
        q = live.query
        after = batches_done(q)
        wait("a batch after the executor came back", lambda: batches_done(q) > after)
    finally:
        live.stop()
    for r in live.history:
        if r.target is not None:
            log.append(f"live {r.workers}->{r.target} in {r.actuation_seconds:.1f} s")
    removed = live.executors.removed
    # which executor goes and whether it is running a task then is up to the timing of the live
    # run (one CI run removed it between two tasks): exactness below must hold either way
    assert removed, "the live actions removed no executor"
    log.append(f"removed executor {', '.join(removed)} while it ran {sum(removed.values())} task(s)")
    q.stop()
    live_batches = batches_done(q)
    assert live_batches < BATCHES - 1, f"the live phase used up the input ({live_batches} batches)"
    # 2. restart: the query starts again from the checkpoint; after a batch: stop, 2 -> 1, start, read the rest
    restart = autoscale(spark, Scripted([(1, 1)]), min_workers=1, max_workers=2, cooldown=0, monitoring_window=1.0,
                        mode="restart", start=start)
    try:
        wait("the restart action", lambda: acted(restart, 1))
        wait("the rest of the input", lambda: (work / "ck" / "commits" / str(BATCHES - 1)).exists())
    finally:
        restart.stop()
    r = next(r for r in restart.history if r.target is not None)
    log.append(f"restart {r.workers}->{r.target} in {r.actuation_seconds:.1f} s")
    restart.query.stop()
    got = inputs.check(spark)
    print(f"OK {got} pairs; " + "; ".join(log))
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
