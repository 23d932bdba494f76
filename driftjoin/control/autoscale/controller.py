"""The autoscaling controller: the thesis's MAPE loop (Figure 4.1) on the Spark driver.

Monitor: a ``StreamingQueryListener`` feeds every progress event to a
:class:`QueryMetricsCollector`. Analyse and plan: every ``monitoring_window`` seconds a thread
of the controller closes the window and asks the :class:`Scaler` (policy, range, cooldown).
Execute: the actuator changes the executors (``mode="live"``) or stops and restarts the query
from its checkpoint (``mode="restart"``). The loop runs beside the query, never inside it: a
failing actuation is logged and the query keeps running with what it has.

Settings are checked before anything starts (:func:`autoscale`): a policy name that does not
exist, ``min_workers`` above ``max_workers``, a target outside (0, 1], a master that cannot give
executors, ``max_workers`` above the state partitions (capped, with a log line) all fail or are
fixed before the query runs.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from driftjoin.control.autoscale.actuator import ON_CONNECT, ClusterUnavailable, ExecutorActuator, RestartActuator
from driftjoin.control.autoscale.collector import QueryMetricsCollector
from driftjoin.control.autoscale.metrics import WindowMetrics
from driftjoin.control.autoscale.policies import Policy, Scaler, make_policy
from driftjoin.spark.runtime.connect import refuse_on_connect

log = logging.getLogger("driftjoin.autoscale")


@dataclass
class WindowRecord:
    """One monitoring window as the controller saw and handled it."""

    metrics: WindowMetrics
    workers: int
    target: int | None
    actuation_seconds: float = math.nan
    error: str = ""
    #: the policy's target that ``before_scale`` vetoed (the joint plane balanced instead)
    vetoed: int | None = None

    def __str__(self) -> str:
        m = self.metrics
        action = (f"-> {self.target} workers" if self.target is not None
                  else f"vetoed {self.vetoed}" if self.vetoed is not None else "no change")
        return (f"window ending {time.strftime('%H:%M:%S', time.localtime(m.time))}: {self.workers} workers, "
                f"{m.input_rate:,.0f} records/s in, {m.processed_rate:,.0f} processed, lag {m.lag:,.0f} records, "
                f"{action}{f' (error: {self.error})' if self.error else ''}")

    def row(self) -> dict:
        m = asdict(self.metrics)
        m.pop("stages")
        m.update(workers=self.workers, target=self.target, actuation_seconds=self.actuation_seconds, error=self.error,
                 vetoed=self.vetoed,
                 stages=[asdict(s) for s in self.metrics.stages])
        return m


class AutoscaleController:
    """Runs one policy against the streaming queries of a session (see :func:`autoscale`)."""

    def __init__(self, spark, scaler: Scaler, *, monitoring_window: float, mode: str, start: Callable[[], object] | None,
                 trigger_interval: float, dry_run: bool, executor_timeout: float) -> None:
        self.spark = spark
        self.scaler = scaler
        self.monitoring_window = monitoring_window
        self.mode = mode
        self.dry_run = dry_run or scaler.policy.external
        self.history: list[WindowRecord] = []
        self.executors = ExecutorActuator(spark, executor_timeout=executor_timeout)
        self.actuator = RestartActuator(self.executors, start) if mode == "restart" else self.executors
        self.collector = QueryMetricsCollector(spark, trigger_interval=trigger_interval)
        self._start = start
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._listener = None
        self._virtual: int | None = None
        #: whether the query has read any records yet (see :meth:`step`)
        self._has_read = False
        #: hooks of the joint control plane (:func:`driftjoin.control.joint.attach_joint`):
        #: ``before_scale(metrics, current, target)`` may veto an action (False); ``after_scale(target)``
        self.before_scale: Callable[[WindowMetrics, int, int], bool] | None = None
        self.after_scale: Callable[[int], None] | None = None

    @property
    def query(self):
        """The running query when the controller started it (``start=``), else ``None``."""
        return self.actuator.query if isinstance(self.actuator, RestartActuator) else self._query

    def start(self) -> "AutoscaleController":
        from pyspark.sql.streaming import StreamingQueryListener

        collector = self.collector

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
                pass

            def onQueryProgress(self, event) -> None:  # noqa: N802
                try:
                    collector.add_progress(event.progress)
                except Exception as e:  # a listener that raises would lose every later event
                    log.warning("autoscale: progress of batch %s not counted: %s", event.progress.batchId, e)

            def onQueryIdle(self, event) -> None:  # noqa: N802
                pass

            def onQueryTerminated(self, event) -> None:  # noqa: N802
                pass

        self._listener = _Listener()
        self.spark.streams.addListener(self._listener)
        self._query = None
        if isinstance(self.actuator, RestartActuator):
            self.actuator.query = self._start()
        elif self._start is not None:
            self._query = self._start()
        self._thread = threading.Thread(target=self._loop, name="driftjoin-autoscale", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self._listener is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None

    def table(self) -> Any:
        """The history as a pandas DataFrame, one row per monitoring window: ``time, workers,
        target, input_rate, processed_rate, lag, lag_seconds, batch_duration, cpu_utilisation,
        latency_p95, actuation_seconds, vetoed, error`` (``target``: the workers the policy
        asked for, missing when it kept them)."""
        import pandas as pd

        columns = ["time", "workers", "target", "input_rate", "processed_rate", "lag", "lag_seconds", "batch_duration",
                   "cpu_utilisation", "latency_p95", "actuation_seconds", "vetoed", "error"]
        measured = ("input_rate", "processed_rate", "lag", "batch_duration", "cpu_utilisation", "latency_p95")
        rows = [{**{c: getattr(r.metrics, c) for c in measured}, "lag_seconds": r.metrics.lag_seconds, "time": r.metrics.time, "workers": r.workers, "target": r.target,
                 "actuation_seconds": r.actuation_seconds, "vetoed": r.vetoed, "error": r.error} for r in self.history]
        return pd.DataFrame(rows, columns=columns)

    def workers(self) -> int:
        if self.dry_run and self._virtual is not None:
            return self._virtual
        return self.collector.workers()

    def step(self) -> WindowRecord:
        """Close the current monitoring window and act on it (the thread calls this)."""
        m = self.collector.window()
        current = self.workers()
        record = WindowRecord(m, current, None)
        # Until the query has read its first records, a window says nothing about its rate: the
        # source's lag is all it offered since it started (measured live: Dhalion and HPA-Varga
        # both scaled up in the first window of every run, on lag growth of a query not yet
        # running its first batch). A query that read before and reads nothing now is stuck in a
        # long batch: that window counts.
        self._has_read = self._has_read or m.processed_rate > 0
        target = self.scaler.decide(m, current) if self._has_read else None
        if target is not None and self.before_scale is not None and not self.before_scale(m, current, target):
            self.scaler.actions.pop()
            self.scaler._last_action = -math.inf
            record.vetoed, target = target, None
        if target is not None:
            record.target = target
            if self.dry_run:
                self._virtual = target
            else:
                try:
                    record.actuation_seconds = self.actuator.scale_to(target)
                    log.info("autoscale %s: %d -> %d workers (%.1f s)", self.scaler.policy.name, current, target,
                             record.actuation_seconds)
                    if self.after_scale is not None:
                        self.after_scale(target)
                except Exception as e:  # the query must outlive its controller's failures
                    record.error = f"{type(e).__name__}: {e}"
                    log.warning("autoscale %s: could not scale %d -> %d, the query keeps running: %s",
                                self.scaler.policy.name, current, target, record.error)
        self.history.append(record)
        return record

    def _loop(self) -> None:
        while not self._stop.wait(self.monitoring_window):
            try:
                self.step()
            except Exception as e:  # e.g. the session is stopping
                log.warning("autoscale: monitoring window failed: %s", e)


MODES = ("live", "restart")


def autoscale(spark, policy: str | Policy = "ds2", *, min_workers: int = 1, max_workers: int | None = None,
              cooldown: float = 300.0, monitoring_window: float = 30.0, mode: str = "live",
              start: Callable[[], object] | None = None, trigger_interval: float = 0.0,
              state_partitions: int | None = None, dry_run: bool = False, executor_timeout: float = 120.0,
              sizing: str = "waves", **policy_options: float) -> AutoscaleController:
    """Attach an autoscaler to the streaming queries of ``spark`` and start it.

    Every ``monitoring_window`` seconds the controller measures the queries (rates, lag, queue
    latency, stages, CPU) and lets the policy decide the number of workers (executors), then
    changes them under the running query, or restarts it from its checkpoint.

    Parameters
    ----------
    spark:
        The session whose streaming queries are scaled.
    policy:
        ``"dhalion"`` (the whole pool per action), ``"dhalion-stage"`` (one stage per action, as the
        thesis's Dhalion), ``"ds2"``, ``"hpa-cpu"``, ``"hpa-varga"``, ``"batch-interval"`` or
        ``"spark-dynamic-allocation"`` (Spark decides; the controller measures), or a
        :class:`~driftjoin.control.autoscale.policies.Policy`.
    min_workers, max_workers:
        The range of executors; ``max_workers`` defaults to, and is capped at, the state
        partitions (``state_partitions`` or the session's ``spark.sql.shuffle.partitions``).
    cooldown:
        Seconds after an action before the next one.
    monitoring_window:
        Seconds between decisions.
    mode:
        ``"live"`` changes the executors under the running query; ``"restart"`` stops and
        restarts it from its checkpoint and needs ``start``.
    start:
        A function that starts the query and returns it (the controller then holds it as
        ``ctl.query``).
    trigger_interval:
        The query's processing-time trigger in seconds (for ``batch-interval``).
    state_partitions:
        The query's state partitions, when not the session's shuffle partitions.
    dry_run:
        Decide and record, change nothing (works in local mode).
    executor_timeout:
        Seconds to wait for executors to come or go.
    sizing:
        ``"waves"`` (default) acts on the fewest executors that give the policy's count's
        throughput over the state partitions (a stage of P tasks on k executors runs
        ``ceil(P / k)`` waves), ``"thesis"`` on the policy's count as the thesis does (see
        :mod:`driftjoin.control.autoscale.policies`).
    **policy_options:
        The policy's settings, e.g. ``target=0.7``, ``overprovisioning=0.2``.

    Returns
    -------
    AutoscaleController
        The running controller: ``ctl.history`` holds one record per monitoring window (each
        prints as one line), ``ctl.table()`` the same as a DataFrame, ``ctl.stop()`` ends it.

    Examples
    --------
    >>> import time
    >>> from driftjoin import local_session
    >>> from driftjoin.control.autoscale import autoscale
    >>> spark = local_session(2)
    >>> rate = spark.readStream.format("rate").option("rowsPerSecond", 200).load()
    >>> ctl = autoscale(spark, "ds2", max_workers=2, monitoring_window=1, dry_run=True,
    ...                 start=lambda: rate.writeStream.format("noop").start())
    >>> time.sleep(4)
    >>> ctl.stop(); ctl.query.stop()
    >>> list(ctl.table().columns[:4]), len(ctl.history) > 0
    (['time', 'workers', 'target', 'input_rate'], True)
    """
    refuse_on_connect(spark, "autoscale (it changes the executors of the session's application)", ON_CONNECT)
    pol = make_policy(policy, **policy_options) if isinstance(policy, str) else policy
    if mode not in MODES:
        raise ValueError(f"mode={mode!r}: use 'live' (change executors under the query) or 'restart' (stop, rescale, restart from the checkpoint)")
    if mode == "restart" and start is None:
        raise ValueError("mode='restart' needs start=: a function that starts the query (from its checkpoint) and returns it")
    if monitoring_window <= 0:
        raise ValueError(f"monitoring_window={monitoring_window!r} must be > 0 seconds")
    if pol.name == "batch-interval" and trigger_interval <= 0:
        raise ValueError("policy 'batch-interval' compares batch durations with the trigger interval: pass trigger_interval= "
                         "(seconds, the query's trigger(processingTime=...))")
    partitions = state_partitions or int(spark.conf.get("spark.sql.shuffle.partitions"))
    if max_workers is None:
        max_workers = partitions
    elif max_workers > partitions:
        log.warning("max_workers=%d is above the %d state partitions fixed by the checkpoint: workers above %d would stay idle; "
                    "capping at %d", max_workers, partitions, partitions, partitions)
        max_workers = partitions
    if min_workers > partitions:
        raise ValueError(f"min_workers={min_workers} is above the {partitions} state partitions (spark.sql.shuffle.partitions of the "
                         "query's first run): lower min_workers, or start a new checkpoint with more partitions")
    scaler = Scaler(pol, min_workers=min_workers, max_workers=max_workers, cooldown=cooldown, sizing=sizing,
                    partitions=partitions)
    ctl = AutoscaleController(spark, scaler, monitoring_window=monitoring_window, mode=mode, start=start,
                              trigger_interval=trigger_interval, dry_run=dry_run, executor_timeout=executor_timeout)
    if pol.external:
        conf = spark.sparkContext.getConf()
        if conf.get("spark.dynamicAllocation.enabled", "false").lower() != "true":
            raise ValueError("policy 'spark-dynamic-allocation' measures Spark's own allocator: create the session with "
                             "driftjoin.control.autoscale.dynamic_allocation_conf(...) (spark.dynamicAllocation.enabled=true)")
    elif not ctl.dry_run:
        try:
            ctl.executors.check()
        except ClusterUnavailable as e:
            raise ValueError(str(e)) from None
        have = ctl.executors.count()
        if have < min_workers or have > max_workers:
            want = scaler.clamp(have)
            try:
                ctl.executors.scale_to(want)
            except ClusterUnavailable as e:
                raise ValueError(f"the cluster cannot give the {want} executors min_workers/max_workers ask for: {e}") from None
    ctl._virtual = ctl.collector.workers() if ctl.dry_run else None
    return ctl.start()


def dynamic_allocation_conf(min_executors: int = 1, max_executors: int = 2, *, idle_timeout: str = "60s",
                            backlog_timeout: str = "1s") -> dict[str, str]:
    """Session settings for Spark's own dynamic allocation (the baseline a Spark user has).

    Without an external shuffle service Spark needs shuffle tracking. Pass them to the session
    builder (``SparkSession.builder.config(map=...)``) or ``spark-submit --conf``.
    """
    if min_executors < 0 or max_executors < max(1, min_executors):
        raise ValueError(f"need 0 <= min_executors <= max_executors and max_executors >= 1, got {min_executors}, {max_executors}")
    return {
        "spark.dynamicAllocation.enabled": "true",
        "spark.dynamicAllocation.shuffleTracking.enabled": "true",
        "spark.dynamicAllocation.minExecutors": str(min_executors),
        "spark.dynamicAllocation.maxExecutors": str(max_executors),
        "spark.dynamicAllocation.initialExecutors": str(max(1, min_executors)),
        "spark.dynamicAllocation.executorIdleTimeout": idle_timeout,
        "spark.dynamicAllocation.schedulerBacklogTimeout": backlog_timeout,
    }
