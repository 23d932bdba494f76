"""Per-batch operator statistics written as small JSON files, counted exactly once.

Each stateful operator key (a space partition, a worker, a dispatcher...) writes the statistics
of each micro-batch it processes. Inside a streaming query a record is stamped with the query id,
the run id and the Spark batch id, and on a classic session also with the run's first batch and
the query's checkpoint (:mod:`driftjoin.spark.runtime.queries`), and goes to
``<dir>/<operator>/<key>/<query id>/<batch id>-<run id>.json``: a task retried in the same run
overwrites its own file; the replay of a batch after a restart writes beside the crashed
attempt's. :func:`read_stats` then keeps, per query, only the batches the checkpoint's commits
log has committed, and each batch from the run that committed it, so the statistics agree with
what an exactly-once sink holds: a batch interrupted by a stop or a crash is not counted, a
replayed one is counted once. Several queries may share a directory (each has its own query id).
Outside a streaming query (a static join) the file is ``<dir>/<operator>/<key>/<seq>.json``,
``seq`` being the operator's own batch number.

Why the committing run is found. Spark runs a query's batches in order and a run starts at the
batch after the last commit. If runs ``R1, ..., Rn`` (in time) all wrote batch ``b``, none of
``R1..Rn-1`` committed it (the next run would not have run it again), so each of ``R2..Rn`` started
at ``b``, and ``R1`` at ``b`` or before: the committing run ``Rn`` has the highest first batch,
and among runs that started at ``b`` it is the latest. A record's run first batch is the stamp's
(classic session: one past the last commit when the run started) or else the lowest batch the
run wrote statistics for (Spark Connect, where tasks cannot learn it): every key of an operator
runs in every batch that has data (the heartbeats), so that is the run's first batch with data,
which is ``b`` for ``R2..Rn`` and at most ``b`` for ``R1`` as well. Ties are broken by the time
the record was written (the latest run wrote last). The checkpoint is the stamp's, or the one
written down for the query in ``<dir>/_queries/`` (Spark Connect); with neither (a Connect run
that ended before its plan was read, or a checkpoint that is gone) every batch counts.

``dir`` may be a local path or any URI ``pyarrow.fs`` understands (s3://, hdfs://, gs://), which a
real cluster needs, or a default directory inside the checkpoint (:data:`driftjoin.spark.runtime.queries.AUTO`).

**Batch timings.** A pair's latency (emission minus its later record's ingestion) splits into
waiting for its micro-batch to start, the batch's own work up to the emission, and handing the
output over (the rest of the operator, the sink, the state commit, Spark's commit log) until the
batch commits. The tasks know the emission only; the batch's start and commit are the driver's.
So the first statistics record a process writes for a query in a directory also leaves a marker
``<dir>/_batches/<query id>/`` (:func:`write_stats`), and the driver (:func:`track_batches`,
attached by every operator given a ``metrics_dir``) writes, after each committed micro-batch of a
query whose marker is there, ``<dir>/_batches/<query id>/<batch id>-<run id>.json``: when it
started, Spark's durations of its phases and its input rows. Spark reports a batch only once it
committed, so these are committed batches; :func:`read_batches` reads them.
"""

from __future__ import annotations

import json
import logging
import math
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from driftjoin.spark.runtime import hub
from driftjoin.spark.runtime.connect import session_key
from driftjoin.spark.runtime.files import write_whole
from driftjoin.spark.runtime.queries import AUTO, last_commit, metrics_filesystem, recorded_checkpoint, task_query

if TYPE_CHECKING:
    from pyarrow import fs as pafs
else:
    from driftjoin.deferred import pyarrow_fs as pafs

log = logging.getLogger(__name__)

#: Latency histogram buckets: upper bounds in seconds, 20 per decade from 1 ms to ~3 hours.
LATENCY_BOUNDS = np.round(10.0 ** np.arange(-3.0, 4.0, 0.05), 6)
#: Key of the query stamp in a statistics record.
STAMP = "_spark"
#: The folder of the driver's batch timings in a metrics directory.
BATCHES = "_batches"
#: (metrics directory, query id) whose batch marker this process has written.
_MARKED_BATCHES: set[tuple[str, str]] = set()
#: Metrics directories per session whose queries' batch timings the driver writes (:func:`track_batches`).
_BATCH_DIRS: dict[str, set[str]] = {}
_BATCH_LOCK = threading.Lock()
#: The key of the batch-timing writer among the session's listener callbacks.
BATCH_TRACKER = "driftjoin:batches"


def latency_histogram(latency: np.ndarray) -> list[int]:
    """Counts of ``latency`` (seconds) per bucket of :data:`LATENCY_BOUNDS` (+1 overflow)."""
    idx = np.searchsorted(LATENCY_BOUNDS, np.maximum(latency, 0.0), side="left")
    return np.bincount(idx, minlength=len(LATENCY_BOUNDS) + 1).tolist()


def histogram_quantile(hist: np.ndarray, q: float) -> float:
    """The bucket upper bound at quantile ``q`` of a latency histogram (nan if empty)."""
    total = hist.sum()
    if total == 0:
        return math.nan
    i = int(np.searchsorted(np.cumsum(hist), q * total, side="left"))
    return float(LATENCY_BOUNDS[min(i, len(LATENCY_BOUNDS) - 1)])


def write_stats(root: str, operator: str, key: int, seq: int, stats: dict[str, Any]) -> None:
    """Write one operator key's statistics of one micro-batch (see the module docstring)."""
    fs, base = metrics_filesystem(root)
    q = task_query()
    folder = f"{base}/{operator}/{key}"
    if q.query_id is not None and q.batch_id is not None:
        stats = {**stats, STAMP: {"query": q.query_id, "run": q.run_id, "batch": q.batch_id, "first_batch": q.first_batch,
                                  "checkpoint": q.checkpoint, "written": time.time()}}
        folder, name = f"{folder}/{q.query_id}", f"{q.batch_id:012d}-{q.run_id}.json"
        if (base, q.query_id) not in _MARKED_BATCHES:  # the driver writes this query's batch timings here
            fs.create_dir(f"{base}/{BATCHES}/{q.query_id}", recursive=True)
            _MARKED_BATCHES.add((base, q.query_id))
    else:
        name = f"{seq:012d}.json"
    write_whole(fs, f"{folder}/{name}", json.dumps(stats, separators=(",", ":")).encode())


def _committing_run(records: list[dict], first_batches: dict[str, int]) -> str:
    """Of the runs that wrote a batch, the one that committed it (module docstring): the highest
    first batch, then the latest written."""
    def order(s: dict) -> tuple:
        stamp = s[STAMP]
        first = stamp.get("first_batch")
        return (first_batches[stamp["run"]] if first is None else first, stamp["written"])

    return max(records, key=order)[STAMP]["run"]


def _json_files(root: str, folder: str) -> Iterator[Any]:
    """The parsed JSON files under ``folder`` of metrics directory ``root``, at any depth; hidden
    files and files cut short by a crash (not valid JSON) are skipped."""
    fs, base = metrics_filesystem(root)
    for info in fs.get_file_info(pafs.FileSelector(f"{base}/{folder}", recursive=True, allow_not_found=True)):
        if info.type != pafs.FileType.File or not info.path.endswith(".json") or info.base_name.startswith("."):
            continue
        with fs.open_input_stream(info.path) as f:
            try:
                yield json.loads(f.read())
            except ValueError:
                continue


def read_stats(root: str, operator: str, *, committed_only: bool = True, query_id: str | None = None) -> Iterator[dict[str, Any]]:
    """Every statistics record of ``operator`` that an exactly-once sink would count.

    Streaming records count only if their batch is committed in the query's checkpoint (when
    the checkpoint is unknown, gone or cannot be read, every batch counts) and only from the run
    that committed the batch; ``committed_only=False`` keeps uncommitted batches too (still one
    run per batch), ``query_id`` keeps one query's records. Files cut short by a crash are skipped.
    """
    batches: dict[tuple[str, int], list[dict]] = {}
    first_batches: dict[str, int] = {}
    for record in _json_files(root, operator):
        stamp = record.get(STAMP)
        if stamp is None:
            if query_id is None:
                yield record
            continue
        if query_id is None or stamp["query"] == query_id:
            batches.setdefault((stamp["query"], stamp["batch"]), []).append(record)
            first_batches[stamp["run"]] = min(first_batches.get(stamp["run"], stamp["batch"]), stamp["batch"])
    commits: dict[str, int | None] = {}
    for (query, batch), records in sorted(batches.items()):
        if committed_only:
            if query not in commits:
                checkpoint = max((r[STAMP]["checkpoint"] for r in records if r[STAMP].get("checkpoint")), default=None)
                checkpoint = checkpoint or recorded_checkpoint(root, query)
                commits[query] = None if checkpoint is None else last_commit(checkpoint)
            last = commits[query]
            if last is not None and batch > last:
                continue
        run = _committing_run(records, first_batches)
        yield from (r for r in records if r[STAMP]["run"] == run)


def read_newest_stats(root: str, operator: str) -> dict[int, dict[str, Any]]:
    """Per key of ``operator``, its newest statistics record (highest ``seq``, then the latest
    written), committed or not: the control plane's view of where each worker is now.

    A key's records lie in its folder (static joins) or in one folder per query under it
    (streaming: ``<query id>/<batch id>-<run id>.json``); in each folder the newest whole file
    counts (a crash may cut one short).
    """
    fs, base = metrics_filesystem(root)
    selector = pafs.FileSelector(f"{base}/{operator}", allow_not_found=True)
    out: dict[int, dict[str, Any]] = {}
    for folder in fs.get_file_info(selector):
        if folder.type != pafs.FileType.Directory or not folder.base_name.isdigit():
            continue
        entries = fs.get_file_info(pafs.FileSelector(folder.path))
        groups = [[i.path for i in entries if i.type == pafs.FileType.File]]
        groups += [[i.path for i in fs.get_file_info(pafs.FileSelector(d.path)) if i.type == pafs.FileType.File]
                   for d in entries if d.type == pafs.FileType.Directory]
        candidates = [r for files in groups if (r := _newest_whole(fs, files)) is not None]
        if candidates:
            out[int(folder.base_name)] = max(candidates, key=lambda r: (r.get("seq", -1), r.get(STAMP, {}).get("written", 0.0)))
    return out


def _newest_whole(fs: pafs.FileSystem, paths: list[str]) -> dict[str, Any] | None:
    """The record of the last-named whole ``.json`` file of ``paths`` (None if there is none)."""
    names = sorted(p for p in paths if p.endswith(".json") and not p.rsplit("/", 1)[-1].startswith("."))
    for path in reversed(names):
        with fs.open_input_stream(path) as f:
            try:
                return json.loads(f.read())
            except ValueError:
                continue
    return None


def track_batches(spark: Any, metrics_dir: str) -> None:
    """Write the timings of each committed micro-batch of ``spark``'s queries into ``metrics_dir``
    for the queries whose statistics go there (module docstring, "Batch timings").

    One listener callback per session (:mod:`driftjoin.spark.runtime.hub`) serves every
    directory registered here; a default directory inside the checkpoint (``AUTO``) is resolved
    in the tasks only, so it gets no timings."""
    if metrics_dir.startswith(AUTO):
        return
    key = session_key(spark)
    with _BATCH_LOCK:
        dirs = _BATCH_DIRS.get(key)
        if dirs is None:
            dirs = _BATCH_DIRS[key] = set()
            hub.register(spark, BATCH_TRACKER, lambda p: _write_batch(dirs, p))
        dirs.add(metrics_dir)


def _write_batch(dirs: set[str], p: hub.Progress) -> None:
    """Write one committed batch's timings into every directory that holds its query's statistics."""
    if p.started is None:
        return
    record = json.dumps({"query": p.query, "run": p.run, "batch": p.batch, "rows": p.rows, "started": p.started,
                         "durations_ms": p.durations}, separators=(",", ":")).encode()
    with _BATCH_LOCK:
        roots = list(dirs)
    for root in roots:
        try:
            fs, base = metrics_filesystem(root)
            folder = f"{base}/{BATCHES}/{p.query}"
            if fs.get_file_info(folder).type == pafs.FileType.Directory:
                write_whole(fs, f"{folder}/{p.batch:012d}-{p.run}.json", record)
        except OSError as e:  # timings are a report's extra: never fail the query for them
            log.debug("driftjoin: batch timings of %s not written to %s (%s)", p.query, root, e)


def read_batches(root: str, query_id: str | None = None) -> dict[tuple[str, int], dict[str, Any]]:
    """The batch timings the driver wrote into metrics directory ``root`` (``track_batches``), per
    (query id, batch id): ``started`` (epoch seconds), ``committed`` (``started`` plus Spark's
    ``triggerExecution``), ``durations_ms``, ``rows`` and ``run``. A batch reported by two runs
    (it cannot commit twice; a copied checkpoint could) keeps the later report."""
    out: dict[tuple[str, int], dict[str, Any]] = {}
    for r in _json_files(root, BATCHES):
        if query_id is not None and r["query"] != query_id:
            continue
        r["committed"] = r["started"] + r["durations_ms"].get("triggerExecution", 0) / 1000
        key = (r["query"], r["batch"])
        if key not in out or out[key]["started"] < r["started"]:
            out[key] = r
    return out
