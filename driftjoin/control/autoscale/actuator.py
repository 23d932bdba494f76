"""Carrying out a scaling decision on a real cluster: executors added and removed under a query.

Two paths, both measured in docs/autoscaling.md:

- :class:`ExecutorActuator` (``mode="live"``): the query keeps running while the driver asks
  the cluster manager for another executor count: ``SparkContext.requestTotalExecutors`` to
  grow (and to set the target before shrinking), ``killExecutor`` to shrink, idle executors
  first. Works with every coarse-grained scheduler (standalone, YARN, Kubernetes) when
  dynamic allocation is off; local mode has no executors to add. A stateful task that moves to
  another executor reloads its state partition from the checkpoint (RocksDB snapshot plus
  changelog): the cost the simulator calls state reload.
- :class:`RestartActuator` (``mode="restart"``): the thesis's Flink path (savepoint, stop,
  restart with another parallelism): stop the query at a batch boundary, change the executor
  count, start it again from its checkpoint (``start()`` builds and starts the same query).

Either way the number of state partitions is fixed by the checkpoint (``spark.sql.shuffle.
partitions`` of the query's first run): a stateful stage never runs more tasks than that, so
workers above it stay idle; the controller caps ``max_workers`` there.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from driftjoin.spark.runtime import jvm
from driftjoin.spark.runtime.connect import refuse_on_connect

log = logging.getLogger("driftjoin.autoscale")


#: What to do instead of autoscaling a Spark Connect session's queries.
ON_CONNECT = ("autoscale from a classic session (pyspark or spark-submit on the cluster's driver), or let the Connect "
              "server scale with Spark's dynamic allocation (spark.dynamicAllocation.enabled=true in its conf)")


class ClusterUnavailable(RuntimeError):
    """The cluster manager cannot change the number of executors (local mode, refused)."""


class ExecutorActuator:
    """Sets the number of executors of a running application (one core each)."""

    def __init__(self, spark, *, executor_timeout: float = 120.0) -> None:
        refuse_on_connect(spark, "changing a query's executors (the autoscaler)", ON_CONNECT)
        self._spark = spark
        self._sc = spark.sparkContext
        self.executor_timeout = executor_timeout
        #: the executors the last scale-down removed: id -> tasks they were running then
        self.removed: dict[str, int] = {}

    def check(self) -> None:
        """Fail when this application cannot have its executors changed, saying what to do."""
        master = self._sc.master
        if master.startswith("local"):
            raise ClusterUnavailable(
                f"master {master!r} runs everything in the driver: autoscaling needs a cluster manager that gives executors "
                "(spark://, yarn, k8s://); start one with scripts/cluster.sh start, or pass dry_run=True to only compute decisions")
        conf = self._sc.getConf()
        if conf.get("spark.dynamicAllocation.enabled", "false").lower() == "true":
            raise ClusterUnavailable("spark.dynamicAllocation.enabled=true: Spark's allocator would undo the controller's requests; "
                                     "set it to false, or use policy='spark-dynamic-allocation' to measure Spark's own")

    def executors(self) -> dict[str, int]:
        """Live executors (not the driver): id -> running tasks."""
        out = {}
        for e in jvm.executor_summaries(self._spark):
            if str(e.id()) != "driver":
                out[str(e.id())] = int(e.activeTasks())
        return out

    def count(self) -> int:
        return len(self.executors())

    def _request_total(self, n: int) -> bool:
        return jvm.request_total_executors(self._spark, n)

    def scale_to(self, n: int, *, wait: bool = True) -> float:
        """Ask for ``n`` executors; with ``wait``, until they are there. Returns seconds taken."""
        t0 = time.time()
        current = self.executors()
        if not self._request_total(n):
            raise ClusterUnavailable(f"the cluster manager refused requestTotalExecutors({n})")
        if n < len(current):
            victims = sorted(current, key=lambda e: (current[e], -int(e) if e.isdigit() else 0))[: len(current) - n]
            self.removed = {eid: current[eid] for eid in victims}
            for eid in victims:
                jvm.kill_executor(self._spark, eid)
        if wait:
            self.wait_for(n, t0 + self.executor_timeout)
        return time.time() - t0

    def wait_for(self, n: int, deadline: float) -> None:
        while self.count() != n:
            if time.time() > deadline:
                raise ClusterUnavailable(f"the cluster gave {self.count()} executors, not {n}, within the timeout: does it have "
                                         f"{n} free workers of one core (scripts/cluster.sh start --workers {n})?")
            time.sleep(0.25)


class RestartActuator:
    """Stop the query, set the executors, restart it from its checkpoint (the savepoint path)."""

    def __init__(self, executors: ExecutorActuator, start: Callable[[], object]) -> None:
        self.executors = executors
        self.start = start
        self.query = None

    def scale_to(self, n: int, *, wait: bool = True) -> float:
        t0 = time.time()
        if self.query is not None:
            self.query.stop()
        self.executors.scale_to(n, wait=True)
        self.query = self.start()
        return time.time() - t0

    def count(self) -> int:
        return self.executors.count()
