"""What a task needs to know about the streaming query it runs in, so its statistics are exactly-once.

The operators write per-batch statistics from inside Spark tasks (:mod:`driftjoin.spark.runtime.stats`).
A statistic of a micro-batch that is never committed (the query stopped or crashed during the
batch) must not be counted, and a batch that is run twice (the crashed attempt and the replay
after a restart) must be counted once, from the attempt that committed. Spark tells a task its
query id, run id and batch id (task local properties ``sql.streaming.queryId``,
``spark.jobGroup.id``, ``streaming.sql.batchId``), but not where the query's checkpoint is, which
is what says whether a batch was committed.

:func:`track` attaches a listener to the session. Spark calls ``onQueryStarted`` synchronously,
in the query's thread, before the first micro-batch of each run. The listener then sets two
settings on the query's own session, which Spark hands to every task of the query as local
properties: :data:`CHECKPOINT` (the query's resolved checkpoint location) and :data:`FIRST_BATCH`
(the first batch id this run executes: one past the last commit in the checkpoint). A statistics
record thus carries query, run, batch, the run's first batch and the checkpoint, and a reader can
keep, for each query, the batches up to the last commit of the checkpoint's commits log, each
from the run that committed it: the run with the highest first batch not above it.

The same location gives the default ``metrics_dir`` of a balanced join
(:func:`default_metrics_dir`): ``<checkpoint>/driftjoin-metrics``, stable across restarts of the
query, resolved in the tasks from :data:`CHECKPOINT`.
"""

from __future__ import annotations

import logging
import uuid
from dataclasses import dataclass
from typing import Any

from pyarrow import fs as pafs

from driftjoin.spark.runtime.files import filesystem, plain_path, write_whole

log = logging.getLogger(__name__)

#: Settings the listener puts on each query's session; tasks see them as local properties.
CHECKPOINT = "spark.driftjoin.checkpoint"
FIRST_BATCH = "spark.driftjoin.firstBatch"
#: Prefix of a metrics directory resolved inside the query's checkpoint when the query starts.
AUTO = "driftjoin-auto:"
#: The folder of the default metrics directory inside a checkpoint.
METRICS_IN_CHECKPOINT = "driftjoin-metrics"

#: Query id -> checkpoint of every query started in this driver process (for the control plane).
STARTED: dict[str, str] = {}
_TRACKED: dict[str, Any] = {}
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
    """Give the starting query's tasks its checkpoint and first batch (runs before its first batch)."""
    execution = spark.streams.get(query_id)._jsq.streamingQuery()
    checkpoint = plain_path(str(execution.resolvedCheckpointRoot()))
    first = last_commit(checkpoint)
    conf = execution.sparkSessionForStream().conf()
    conf.set(CHECKPOINT, checkpoint)
    conf.set(FIRST_BATCH, str((first if first is not None else -1) + 1))
    STARTED[query_id] = checkpoint


def session_key(spark) -> str:
    """A key of ``spark``'s session, the same for every Python handle on it."""
    jsession = getattr(spark, "_jsparkSession", None)
    if jsession is None:  # Spark Connect
        return f"connect:{getattr(spark, 'session_id', id(spark))}"
    try:
        return str(jsession.sessionUUID())
    except Exception:  # py4j: an older Spark without the method
        return str(jsession.hashCode())


def track(spark) -> None:
    """Attach (once per session) the listener that tells each query's tasks its checkpoint.

    Needs a classic (non-Connect) session; elsewhere statistics are written without it and read
    back without the commit check.
    """
    if getattr(spark, "_jsparkSession", None) is None:
        log.warning("driftjoin: not a classic Spark session; operator statistics cannot be checked against commits")
        return
    key = session_key(spark)
    if key in _TRACKED:
        return
    from pyspark.sql.streaming import StreamingQueryListener

    class _QueryTracker(StreamingQueryListener):
        def onQueryStarted(self, event) -> None:  # noqa: N802 (Spark's names)
            try:
                _query_started(spark, str(event.id))
            except Exception as e:  # a listener must not fail the query: say why and go on
                log.warning("driftjoin: could not give query %s its checkpoint (%s); its statistics "
                            "will not be checked against commits", event.id, e)

        def onQueryProgress(self, event) -> None:  # noqa: N802
            pass

        def onQueryIdle(self, event) -> None:  # noqa: N802
            pass

        def onQueryTerminated(self, event) -> None:  # noqa: N802
            pass

    listener = _QueryTracker()
    spark.streams.addListener(listener)
    _TRACKED[key] = listener


def default_metrics_dir(spark) -> str:
    """A metrics directory inside the checkpoint of the query the operator ends up in.

    Only in local mode: on a cluster the executors would have to open the checkpoint location
    with ``pyarrow.fs``, which is not always possible (HDFS needs libhdfs), so a cluster needs an
    explicit ``metrics_dir``.
    """
    master = spark.sparkContext.master
    if not master.startswith("local"):
        raise ValueError(f"balance= without metrics_dir= works in local mode only (this session runs on {master}): "
                         "pass metrics_dir= a location the driver and every executor reach (a shared mount, or "
                         "s3://, hdfs://, gs://)")
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
