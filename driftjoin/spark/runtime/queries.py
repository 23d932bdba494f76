"""What a task needs to know about the streaming query it runs in, so its statistics are exactly-once.

The operators write per-batch statistics from inside Spark tasks (:mod:`driftjoin.spark.runtime.stats`).
A statistic of a micro-batch that is never committed (the query stopped or crashed during the
batch) must not be counted, and a batch that is run twice (the crashed attempt and the replay
after a restart) must be counted once, from the attempt that committed. Spark tells a task its
query id, run id and batch id (task local properties ``sql.streaming.queryId``,
``spark.jobGroup.id``, ``streaming.sql.batchId``), but not where the query's checkpoint is, which
is what says whether a batch was committed.

:func:`track` tells them, in the way the session allows:

- **Classic session.** A callback of the session's one query listener
  (:mod:`driftjoin.spark.runtime.hub`), which Spark calls synchronously, in the query's thread,
  before the first micro-batch of each run, sets two settings on the query's own session, which
  Spark hands to every task of the query as local properties: :data:`CHECKPOINT` (the query's
  resolved checkpoint location) and :data:`FIRST_BATCH` (the first batch id this run executes:
  one past the last commit in the checkpoint). A statistics record thus carries query, run,
  batch, the run's first batch and the checkpoint.
- **Spark Connect.** The client has no handle on the query's JVM session, so the tasks learn
  neither. The record carries query, run and batch (Spark's own task properties). The
  checkpoint is learnt on this side from the run's physical plan (each stateful operator's
  ``state info`` names it: :func:`checkpoint_in_plan`) when the listener hears the run's first
  finished micro-batch or its end, and written down once per query in the metrics directory
  (``_queries/<query id>.json``, :func:`record_checkpoint`). The run's first batch is taken from
  the records themselves: the lowest batch the run wrote statistics for.

A reader then keeps, for each query, the batches up to the last commit of the checkpoint's
commits log, each from the run that committed it: the run with the highest first batch not above
it (:mod:`driftjoin.spark.runtime.stats` has the argument, and why the record-based first batch
picks the same run).

On a classic session the same location gives the default ``metrics_dir`` of a balanced join
(:func:`default_metrics_dir`): ``<checkpoint>/driftjoin-metrics``, stable across restarts of the
query, resolved in the tasks from :data:`CHECKPOINT`; on Spark Connect that default is a
temporary directory (local mode only).
"""

from __future__ import annotations

import json
import logging
import re
import tempfile
import threading
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from driftjoin.spark.runtime import hub, jvm
from driftjoin.spark.runtime.connect import is_connect, master, session_key, shares_files
from driftjoin.spark.runtime.files import filesystem, plain_path, read_whole, write_whole
from driftjoin.spark.runtime.settings import SettingError

if TYPE_CHECKING:
    from pyarrow import fs as pafs
else:
    from driftjoin.deferred import pyarrow_fs as pafs

log = logging.getLogger(__name__)

#: Settings the listener puts on each query's session; tasks see them as local properties.
CHECKPOINT = "spark.driftjoin.checkpoint"
FIRST_BATCH = "spark.driftjoin.firstBatch"
#: Prefix of a metrics directory resolved inside the query's checkpoint when the query starts.
AUTO = "driftjoin-auto:"
#: The folder of the default metrics directory inside a checkpoint.
METRICS_IN_CHECKPOINT = "driftjoin-metrics"

#: The folder of a metrics directory where Spark Connect queries' checkpoints are written down.
QUERIES = "_queries"

#: Query id -> checkpoint of every query started in (classic) or heard by (Spark Connect) this process.
STARTED: dict[str, str] = {}
_TRACKED: dict[str, Any] = {}
_TRACKED_LOCK = threading.Lock()
#: The key of the query tracker among the session's listener callbacks (:mod:`driftjoin.spark.runtime.hub`).
TRACKER = "driftjoin:queries"
#: Default metrics directories whose marker this process has left (see :func:`metrics_filesystem`).
_MARKED: set[tuple[str, str]] = set()


@dataclass(frozen=True)
class TaskQuery:
    """The streaming query a task runs in (all None outside a streaming query) and the task's
    partition (0 outside a task)."""

    query_id: str | None
    run_id: str | None
    batch_id: int | None
    first_batch: int | None
    checkpoint: str | None
    partition: int = 0


def task_query() -> TaskQuery:
    """Read the query's identity from the running task's local properties (the one reader of
    Spark's task context in driftjoin)."""
    try:
        from pyspark import TaskContext

        tc = TaskContext.get()
    except ImportError:  # pragma: no cover - pyspark is a dependency
        tc = None
    if tc is None:
        return TaskQuery(None, None, None, None, None)
    prop = tc.getLocalProperty
    batch, first = prop("streaming.sql.batchId"), prop(FIRST_BATCH)
    return TaskQuery(prop("sql.streaming.queryId"), prop("spark.jobGroup.id"), None if batch is None else int(batch),
                     None if first is None else int(first), prop(CHECKPOINT), tc.partitionId())


def last_commit(checkpoint: str) -> int | None:
    """The last committed batch id in a checkpoint's commits log (-1: none yet; None: the
    checkpoint is gone or unreadable, so nothing can be said).

    Spark keeps only the newest commit files, but batches commit in order, so every batch up
    to the newest one is committed.
    """
    try:
        fs, base = filesystem(checkpoint)
        if fs.get_file_info(base).type != pafs.FileType.Directory:
            return None
        info = fs.get_file_info(pafs.FileSelector(f"{base.rstrip('/')}/commits", allow_not_found=True))
    except (OSError, ValueError):
        return None
    ids = [int(i.base_name) for i in info if i.base_name.isdigit()]
    return max(ids, default=-1)


def _query_started(spark, query_id: str) -> None:
    """Give the starting query's tasks its checkpoint and first batch (classic session: runs before
    its first batch)."""
    query = spark.streams.get(query_id)
    checkpoint = plain_path(jvm.query_checkpoint(query))
    first = last_commit(checkpoint)
    jvm.set_query_conf(query, {CHECKPOINT: checkpoint, FIRST_BATCH: str((first if first is not None else -1) + 1)})
    STARTED[query_id] = checkpoint


#: A stateful operator's line in a streaming query's physical plan names the query's checkpoint.
_STATE_INFO = re.compile(r"state info \[ checkpoint = (?P<checkpoint>\S+?)/state, runId = (?P<run>[0-9a-fA-F-]+)")


def checkpoint_in_plan(plan: str, run_id: str) -> str | None:
    """The checkpoint of run ``run_id`` named by its physical plan (the ``state info`` of any
    stateful operator), or None.

    >>> checkpoint_in_plan("... state info [ checkpoint = file:/tmp/ck/state, runId = 0a-1, opId = 0 ...", "0a-1")
    '/tmp/ck'
    """
    for m in _STATE_INFO.finditer(plan):
        if m.group("run") == run_id:
            return plain_path(m.group("checkpoint"))
    return None


def _connect_checkpoint(spark, query_id: str, run_id: str) -> str | None:
    """The checkpoint of a query run on a Spark Connect session, from its physical plan, which
    the server keeps after the run's first planned micro-batch, also once the run has ended."""
    return checkpoint_in_plan(jvm.connect_query_plan(spark, query_id, run_id), run_id)


def record_checkpoint(root: str, query_id: str, checkpoint: str) -> None:
    """Write down in metrics directory ``root`` that query ``query_id`` checkpoints to
    ``checkpoint`` (for statistics whose stamp cannot carry it: Spark Connect)."""
    fs, base = metrics_filesystem(root)
    path = f"{base}/{QUERIES}/{query_id}.json"
    if fs.get_file_info(path).type != pafs.FileType.File:
        write_whole(fs, path, json.dumps({"query": query_id, "checkpoint": checkpoint}).encode())


def recorded_checkpoint(root: str, query_id: str) -> str | None:
    """The checkpoint :func:`record_checkpoint` wrote down for ``query_id`` in ``root`` (or None)."""
    fs, base = metrics_filesystem(root)
    data = read_whole(fs, f"{base}/{QUERIES}/{query_id}.json")
    return None if data is None else json.loads(data)["checkpoint"]


class _ClassicTracker:
    """Gives each query of a classic session its checkpoint and first batch when it starts."""

    def __init__(self, spark) -> None:
        self.spark = spark

    def attach(self) -> None:
        hub.register(self.spark, TRACKER, lambda _: None, on_started=self.started)

    def started(self, query_id: str) -> None:
        try:
            _query_started(self.spark, query_id)
        except Exception as e:  # a listener must not fail the query: say why and go on
            log.warning("driftjoin: could not give query %s its checkpoint (%s); its statistics will not be checked "
                        "against commits", query_id, e)


class _ConnectTracker:
    """Finds each query run's checkpoint on a Spark Connect session, after the run's first
    micro-batch (or its end), and writes it down in every metrics directory of the session."""

    def __init__(self, spark) -> None:
        self.spark = spark
        self.dirs: set[str] = set()
        self.known: set[tuple[str, str]] = set()
        self.lock = threading.Lock()

    def attach(self) -> None:
        hub.register(self.spark, TRACKER, self.progress, on_ended=self.find)

    def progress(self, p: hub.Progress) -> None:
        self.find(p.query, p.run)

    def find(self, query_id: str, run_id: str) -> None:
        with self.lock:
            if (query_id, run_id) in self.known:
                return
            self.known.add((query_id, run_id))
            dirs = list(self.dirs)
        checkpoint = _connect_checkpoint(self.spark, query_id, run_id)
        if checkpoint is None:
            return
        STARTED[query_id] = checkpoint
        for root in dirs:
            record_checkpoint(root, query_id, checkpoint)


def track(spark, metrics_dir: str | None = None) -> None:
    """Attach (once per session) what tells each query's statistics its checkpoint.

    A classic session: a listener callback that Spark runs when each query starts, before its
    first batch, sets the checkpoint and the run's first batch on the query's session (the tasks
    see them as local properties). A Spark Connect session cannot reach the query's JVM session:
    its queries' checkpoints are learnt from their plans after each run's first batch and written
    down in ``metrics_dir`` (:func:`record_checkpoint`), where the readers of statistics find them.
    """
    key = session_key(spark)
    with _TRACKED_LOCK:
        tracker = _TRACKED.get(key)
        if tracker is None:
            tracker = _TRACKED[key] = _ConnectTracker(spark) if is_connect(spark) else _ClassicTracker(spark)
            tracker.attach()
    if metrics_dir is not None and isinstance(tracker, _ConnectTracker):
        with tracker.lock:
            tracker.dirs.add(metrics_dir)
            known = [(q, STARTED[q]) for q, _ in tracker.known if q in STARTED]
        for query_id, checkpoint in known:
            record_checkpoint(metrics_dir, query_id, checkpoint)


def default_metrics_dir(spark) -> str:
    """A metrics directory for a join that needs one and was given none.

    Only where this process, the driver and the executors share one file system (local mode):
    on a classic session a directory inside the checkpoint of the query the operator ends up in
    (stable across restarts of the query); on Spark Connect, whose tasks cannot learn the
    checkpoint, a new temporary directory (decisions start afresh when the query is restarted:
    pass ``metrics_dir=`` to keep them). On a cluster the executors would have to open the
    location with ``pyarrow.fs``, which is not always possible (HDFS needs libhdfs), so a cluster
    needs an explicit ``metrics_dir``.
    """
    if not shares_files(spark):
        raise SettingError("metrics_dir", f"is required with balance= unless the session runs in local mode with the "
                                          f"driver on this machine (this session runs on {master(spark)}"
                                          f"{', through Spark Connect' if is_connect(spark) else ''}): pass "
                                          "metrics_dir= a location this process, the driver and every executor reach "
                                          "(a shared mount, or s3://, hdfs://, gs://)", show_value=False)
    if is_connect(spark):
        root = tempfile.mkdtemp(prefix="driftjoin-metrics-")
        track(spark, root)
        return root
    track(spark)
    return f"{AUTO}{uuid.uuid4().hex}"


def resolve_in_task(root: str) -> str:
    """The real directory of ``root`` inside a task (``root`` itself unless it is an :data:`AUTO` one)."""
    if not root.startswith(AUTO):
        return root
    q = task_query()
    if q.checkpoint is None:
        raise RuntimeError("driftjoin: this query's checkpoint is unknown to its tasks, so the default metrics_dir of "
                           "balance= cannot be placed; pass metrics_dir= to the join")
    return f"{q.checkpoint.rstrip('/')}/{METRICS_IN_CHECKPOINT}"


def metrics_filesystem(root: str) -> tuple[pafs.FileSystem, str]:
    """File system and base path (no trailing ``/``) of a metrics directory; in a task, a default
    (:data:`AUTO`) directory is resolved inside the query's checkpoint and marked with
    ``<dir>/_plans/<token>``, so the driver's controller finds it."""
    resolved = resolve_in_task(root)
    fs, base = filesystem(resolved)
    base = base.rstrip("/")
    if root != resolved and (base, root) not in _MARKED:
        write_whole(fs, f"{base}/_plans/{root[len(AUTO):]}", b"")
        _MARKED.add((base, root))
    return fs, base
