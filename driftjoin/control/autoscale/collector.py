"""Metrics of any Structured Streaming query, gathered on the driver per monitoring window.

Sources of truth, all reachable with the UI disabled (``local_session`` turns it off):

- the query progress (a ``StreamingQueryListener``): batch start and duration, records
  processed, the sources' start/end offsets and, where the source reports it, the *latest*
  offset (what it offers now: Kafka, and driftjoin's generators through ``reportLatestOffset``
  with their rate schedule); a file source reports none, so its backlog comes from its
  directory and its log in the checkpoint (:mod:`.files`);
- Spark's status store (``SparkContext.statusStore``, the data behind the UI's REST API):
  per stage of each micro-batch (stages carry the batch's description ``runId = ..., batch =
  N``) the task run time, shuffle wait, deserialisation time and records in and out, and per
  executor its cores and cumulative task time;
- the executors' process trees (JVM plus Python workers) in ``/proc`` when they run on this
  host (local mode, a one-machine standalone cluster): their CPU time. Elsewhere CPU falls
  back to task busy time (what Kubernetes' metrics server would give instead is documented in
  docs/autoscaling.md).

Definitions (thesis 4.5.1 and DS2): lag = offered minus processed offsets, over the session's
active queries (a stopped one offers nothing more to process); the queue latency
of a record = the start of the micro-batch that takes it minus the time its source offered it
(exact for the generators, whose schedule says when record ``k`` was offered); a window's
queue latency counts the records its batches took and those still waiting when it closes (at
their wait so far: :mod:`.latency`); useful time of a stage = task run time - shuffle fetch
wait + deserialisation, summed over its tasks.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from driftjoin.control.autoscale.files import file_source_path, pending_files
from driftjoin.control.autoscale.latency import batch_waits, waiting_waits, weighted_quantile
from driftjoin.control.autoscale.metrics import StageMetrics, WindowMetrics
from driftjoin.generators.rates import RateSchedule
from driftjoin.spark.runtime import jvm
from driftjoin.spark.runtime.connect import refuse_on_connect

log = logging.getLogger("driftjoin.autoscale")
_RUN = re.compile(r"runId = ([0-9a-f-]+)")
_BATCH = re.compile(r"batch = (\d+)")


def parse_offset(offset: str | None) -> object:
    """An offset as the progress gives it, parsed; ``None`` when there is none. PySpark turns a
    missing offset into ``"None"`` (``str`` of a Java null) or ``"null"``, e.g. the file
    source's latest offset."""
    if not offset:
        return None
    try:
        return json.loads(offset)
    except (TypeError, ValueError):
        return None


def offset_records(offset: str | None) -> float | None:
    """Records an offset stands for: a generator's ``index``, or the sum of a Kafka-style
    ``{topic: {partition: offset}}`` map. ``None`` when the source's offsets do not count
    records (e.g. the file source's ``logOffset`` counts files)."""
    value = parse_offset(offset)
    if isinstance(value, dict) and "index" in value:
        return float(value["index"])
    if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
        leaves = [x for v in value.values() for x in v.values()]
        if leaves and all(isinstance(x, (int, float)) for x in leaves):
            return float(sum(leaves))
    return None


@dataclass
class SourceState:
    """What a source's offsets tell: processed offset, offered offset, and its schedule.

    A file source (``directory`` set) counts in records read since the collector first saw
    it: ``end`` is those records, ``latest`` adds the files not yet taken at the records per
    file read so far (:mod:`.files`).
    """

    end: float | None = None
    latest: float | None = None
    start_time: float | None = None
    schedule: RateSchedule | None = None
    total: float | None = None
    previous: float | None = None
    directory: str | None = None
    log_dir: str | None = None
    query_id: str = ""
    index: int = 0
    taken0: int | None = None
    read0: float = 0.0
    #: the newest batch whose progress counted in ``end``
    batch: int | None = None

    def update_file_backlog(self, spark) -> None:
        """``latest`` of a file source from its directory and its log (once per window)."""
        if self.log_dir is None:
            q = spark.streams.get(self.query_id)
            if q is None:
                return
            root = jvm.query_checkpoint(q)
            self.log_dir = f"{root.rstrip('/')}/sources/{self.index}"
        pending, taken = pending_files(self.directory, self.log_dir, self.batch)
        read = self.end or 0.0
        if self.taken0 is None:                 # records per file: counted from here on
            self.taken0, self.read0 = taken, read
        if pending == 0:
            self.latest = read
        elif taken > self.taken0 and read > self.read0:
            self.latest = read + pending * (read - self.read0) / (taken - self.taken0)

    def offered(self, now: float) -> float | None:
        """Records offered by ``now``: from the schedule if known, else the last latest offset."""
        if self.schedule is not None and self.start_time is not None:
            n = math.floor(float(self.schedule.count(now - self.start_time)) + 1e-9)
            return float(min(n, self.total)) if self.total is not None else float(n)
        return self.latest


@dataclass
class BatchRecord:
    """One micro-batch as the window sees it."""

    batch_id: int
    start: float
    duration: float
    rows: int
    lag: float
    waits: list[tuple[np.ndarray, np.ndarray]] = field(default_factory=list)


def _epoch(ts: str) -> float:
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


class ProcessCpu:
    """CPU seconds of the executors' process trees on this host (JVM + Python workers)."""

    def __init__(self, app_id: str, driver_pid: int) -> None:
        self.app_id = app_id
        self.driver_pid = driver_pid
        self.tick = os.sysconf("SC_CLK_TCK")

    def _procs(self) -> tuple[dict[int, int], dict[int, float], dict[str, int]]:
        parent: dict[int, int] = {}
        cpu: dict[int, float] = {}
        executors: dict[str, int] = {}
        for name in os.listdir("/proc"):
            if not name.isdigit():
                continue
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
                pid = int(name)
                parent[pid] = int(fields[1])
                cpu[pid] = sum(int(x) for x in fields[11:15]) / self.tick   # utime stime cutime cstime
                if parent[pid] and "java" in open(f"/proc/{name}/comm").read():
                    args = open(f"/proc/{name}/cmdline").read().split("\0")
                    if "CoarseGrainedExecutorBackend" in " ".join(args) and self.app_id in args:
                        executors[args[args.index("--executor-id") + 1]] = pid
            except (OSError, ValueError, IndexError):
                continue
        return parent, cpu, executors

    def sample(self) -> dict[str, float]:
        """CPU seconds so far per executor id (``"driver"`` in local mode)."""
        parent, cpu, executors = self._procs()
        roots = executors or {"driver": self.driver_pid}
        children: dict[int, list[int]] = {}
        for pid, ppid in parent.items():
            children.setdefault(ppid, []).append(pid)
        out = {}
        for eid, root in roots.items():
            total, todo = 0.0, [root]
            while todo:
                pid = todo.pop()
                total += cpu.get(pid, 0.0)
                todo.extend(children.get(pid, ()))
            out[eid] = total
        return out


def session_cpu(spark) -> Callable[[], float]:
    """A clock of the CPU seconds this session has used on this host so far: the executors'
    process trees (the driver's JVM in local mode; Python workers included) plus this Python
    driver. Benchmarks read it before and after
    a run: CPU per record is a Spark/core ratio the machine's load moves far less than time."""
    refuse_on_connect(spark, "measuring the session's CPU (the driver JVM's process id)",
                      "measure on the Connect server's machine, or run the benchmark from a classic session")
    tree = ProcessCpu(spark.sparkContext.applicationId, jvm.driver_pid(spark))

    def seconds() -> float:
        return sum(tree.sample().values()) + time.process_time()

    return seconds


class QueryMetricsCollector:
    """Gathers :class:`WindowMetrics` for the queries of one session.

    Feed it every progress event (:meth:`add_progress`); :meth:`window` closes the current
    monitoring window and returns its metrics. ``trigger_interval`` (seconds) is the query's
    processing-time trigger, which Spark does not report.
    """

    def __init__(self, spark, *, trigger_interval: float = 0.0, runs: set[str] | None = None) -> None:
        refuse_on_connect(spark, "the autoscaler's metrics (Spark's status store of stages and executors)",
                          "autoscale from a classic session (pyspark or spark-submit on the cluster's driver)")
        self._spark = spark
        self.trigger_interval = trigger_interval
        self.runs = runs
        self.sources: dict[str, SourceState] = {}
        self.batches: list[BatchRecord] = []
        self.operators: dict[str, dict[str, float]] = {}
        # the store keeps the stages of the session's earlier queries: windows start from now
        self._last_stage = self._newest_stage()
        self._t0 = time.time()
        self._lag0: float | None = None
        self._busy0: dict[str, float] = {}
        self._cpu = ProcessCpu(spark.sparkContext.applicationId, jvm.driver_pid(spark))
        self._cpu0 = self._cpu.sample()
        self._busy0 = {e: b for e, (_, b, _) in self._executors().items()}

    # -- progress ------------------------------------------------------------------------------

    def add_progress(self, p) -> None:
        if self.runs is not None and str(p.runId) not in self.runs:
            return
        start = _epoch(p.timestamp)
        waits: list[tuple[np.ndarray, np.ndarray]] = []
        lag = 0.0
        # records read: by offsets where they count records (a query that scans its source twice,
        # e.g. a stream-stream self-join, reports every row twice in numInputRows)
        rows = 0.0
        for i, s in enumerate(p.sources):
            # by query id, which a restart from the checkpoint keeps (the run id changes)
            state = self.sources.setdefault(f"{p.id}/{i}", SourceState(query_id=str(p.id), index=i,
                                                                         directory=file_source_path(s.description)))
            first, end = offset_records(s.startOffset), offset_records(s.endOffset)
            if state.directory is not None:
                first, end = state.end or 0.0, (state.end or 0.0) + s.numInputRows
            rows += (end - (first or 0.0)) if end is not None else s.numInputRows
            state.end, state.batch = end, int(p.batchId)
            if state.directory is None:
                state.latest = offset_records(s.latestOffset)
            info = parse_offset(s.latestOffset)
            if isinstance(info, dict) and "schedule" in info:
                state.schedule = RateSchedule.parse(info["schedule"]) if state.schedule is None else state.schedule
                state.start_time = float(info["start"])
                state.total = float(info["total"]) if info.get("total") is not None else None
            offered = state.offered(start)
            if offered is not None and end is not None:
                lag += max(0.0, offered - end)
            if state.schedule is not None and end is not None and end > (first or 0.0):
                waits.append(batch_waits(state.schedule, int(first or 0), int(end), start, offset=state.start_time))
        for op in p.stateOperators or ():
            acc = self.operators.setdefault(op.operatorName, {"updates_ms": 0.0, "commit_ms": 0.0, "rows_total": 0.0})
            acc["updates_ms"] += op.allUpdatesTimeMs
            acc["commit_ms"] += op.commitTimeMs
            acc["rows_total"] = float(op.numRowsTotal)
        self.batches.append(BatchRecord(int(p.batchId), start, p.batchDuration / 1000.0, int(rows), lag, waits))

    # -- status store --------------------------------------------------------------------------

    def _executors(self) -> dict[str, tuple[int, float, float]]:
        """Active executors: id -> (cores, cumulative task seconds, added at)."""
        out = {}
        for e in jvm.executor_summaries(self._spark):
            out[str(e.id())] = (int(e.totalCores()), e.totalDuration() / 1000.0, e.addTime().getTime() / 1000.0)
        if len(out) > 1:
            out.pop("driver", None)
        return out

    def workers(self) -> int:
        ex = self._executors()
        if list(ex) == ["driver"]:
            return ex["driver"][0]
        return len(ex)

    def _newest_stage(self) -> int:
        """The highest stage id in the status store, whatever its state (-1 if none)."""
        return max((int(s.stageId()) for s in jvm.stage_summaries(self._spark, complete_only=False)), default=-1)

    def _stages(self) -> tuple[StageMetrics, ...]:
        """Stages completed since the last window, aggregated by position in their batch."""
        per_batch: dict[tuple[str, int], list] = {}
        newest = self._last_stage
        for s in jvm.stage_summaries(self._spark, complete_only=True):
            sid = int(s.stageId())
            if sid <= self._last_stage:
                continue
            newest = max(newest, sid)
            desc = s.description()
            text = desc.get() if desc.isDefined() else ""
            run, batch = _RUN.search(text), _BATCH.search(text)
            if not run or not batch or (self.runs is not None and run.group(1) not in self.runs):
                continue
            useful = (s.executorRunTime() - s.shuffleFetchWaitTime() + s.executorDeserializeTime()) / 1000.0
            per_batch.setdefault((run.group(1), int(batch.group(1))), []).append(
                (sid, int(s.numTasks()), s.inputRecords() + s.shuffleReadRecords(), s.shuffleWriteRecords() + s.outputRecords(), useful))
        self._last_stage = newest
        acc: dict[str, list[float]] = {}
        for rows in per_batch.values():
            for pos, (_, tasks, rin, rout, useful) in enumerate(sorted(rows)):
                a = acc.setdefault(f"stage{pos}", [0, 0.0, 0.0, 0.0])
                a[0] = max(a[0], tasks)
                a[1] += rin
                a[2] += rout
                a[3] += useful
        names = sorted(acc, key=lambda n: int(n[5:]))
        return tuple(StageMetrics(n, (names[i - 1],) if i else (), int(acc[n][0]), acc[n][1], acc[n][2], acc[n][3])
                     for i, n in enumerate(names))

    # -- the window ----------------------------------------------------------------------------

    def _running(self) -> list[SourceState]:
        """The sources of the session's active queries. A stopped query offers nothing more to
        process, yet its generator's schedule would go on "offering" records, and Spark's
        listener bus may deliver its last progress after it stopped, even to a collector
        attached since (seen: a lag of 10,838 records in the next query's first window)."""
        try:
            active = {str(q.id) for q in self._spark.streams.active}
        except Exception as e:  # noqa: BLE001 (a session that cannot be asked: count every source)
            log.debug("active queries unknown: %s", e)
            return list(self.sources.values())
        return [s for s in self.sources.values() if s.query_id in active]

    def window(self, now: float | None = None) -> WindowMetrics:
        now = time.time() if now is None else now
        duration = max(now - self._t0, 1e-6)
        offered_now = processed = offered_then = 0.0
        lag = 0.0
        running = self._running()
        for state in running:
            if state.directory is not None:
                try:
                    state.update_file_backlog(self._spark)
                except Exception as e:  # e.g. a file system that cannot be listed: lag unknown
                    log.debug("file source %s: lag unknown: %s", state.directory, e)
            o = state.offered(now)
            if o is not None and state.end is not None:
                lag += max(0.0, o - state.end)
                offered_now += o
                then = state.offered(self._t0) if state.schedule is not None else state.previous
                offered_then += then if then is not None else o
                state.previous = o
        rows = sum(b.rows for b in self.batches)
        processed = rows / duration
        input_rate = (offered_now - offered_then) / duration if self.sources and offered_now > offered_then else processed
        lag0 = self._lag0 if self._lag0 is not None else (self.batches[0].lag if self.batches else lag)
        executors = self._executors()
        cpu_now = self._cpu.sample()
        idle, cpu_util, per_executor = [], [], {}
        for eid, (cores, busy, added) in executors.items():
            span = max(1e-6, now - max(self._t0, added)) * cores
            busy_frac = min(1.0, max(0.0, (busy - self._busy0.get(eid, 0.0)) / span))
            cpu_frac = busy_frac
            if eid in cpu_now:
                cpu_frac = min(1.0, max(0.0, (cpu_now[eid] - self._cpu0.get(eid, cpu_now[eid])) / span))
            idle.append(1.0 - busy_frac)
            cpu_util.append(cpu_frac)
            per_executor[eid] = {"cores": float(cores), "busy": busy_frac, "cpu": cpu_frac}
        waits = [w for b in self.batches for w in b.waits]
        for state in running:                           # and the records still waiting now
            offered = state.offered(now) if state.schedule is not None else None
            if offered is not None and state.end is not None and offered > state.end:
                waits.append(waiting_waits(state.schedule, int(state.end), int(offered), now, offset=state.start_time))
        wv = np.concatenate([v for v, _ in waits]) if waits else np.array([])
        ww = np.concatenate([w for _, w in waits]) if waits else np.array([])
        m = WindowMetrics(
            time=now, duration=duration,
            workers=executors["driver"][0] if list(executors) == ["driver"] else len(executors),
            input_rate=input_rate, processed_rate=processed, lag=lag, lag_change_rate=(lag - lag0) / duration,
            stages=self._stages(),
            cpu_utilisation=float(np.mean(cpu_util)) if cpu_util else math.nan,
            idle_per_second=float(np.mean(idle)) if idle else math.nan,
            batch_duration=float(np.mean([b.duration for b in self.batches])) if self.batches else math.nan,
            trigger_interval=self.trigger_interval, batches=len(self.batches), per_executor=per_executor,
            latency_p50=weighted_quantile(wv, ww, 0.5), latency_p95=weighted_quantile(wv, ww, 0.95),
            operators={k: dict(v) for k, v in self.operators.items()},
        )
        self._t0, self._lag0, self.batches, self.operators = now, lag, [], {}
        self._busy0 = {e: b for e, (_, b, _) in executors.items()}
        self._cpu0 = cpu_now
        return m
