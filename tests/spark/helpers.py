"""Shared helpers of the Spark tests: input files in micro-batch order, streaming runs, jobs on
the standalone cluster."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Iterable
from urllib.parse import urlparse

import pytest

#: Modification time of the first input file: the file source takes files in mtime order, and
#: files written within one clock tick would come in any order.
FIRST_MTIME = 1_700_000_000


def write_batches(folder: Path, batches: Iterable[Iterable[Any]], *, start: int = 0, first_mtime: int = FIRST_MTIME) -> None:
    """One JSON-lines file per micro-batch (``b{start + i}.json``) with increasing mtimes.

    A row is a dict (written as JSON) or a str (written as it is: a malformed line).
    """
    folder.mkdir(parents=True, exist_ok=True)
    for i, rows in enumerate(batches, start=start):
        path = folder / f"b{i:04d}.json"
        with open(path, "w") as f:
            for row in rows:
                f.write((row if isinstance(row, str) else json.dumps(row)) + "\n")
        os.utime(path, (first_mtime + i, first_mtime + i))


def run_available_now(df, out: Path, checkpoint: Path, fmt: str = "parquet"):
    """Run a streaming DataFrame to the end of its input; returns the finished query."""
    q = (df.writeStream.format(fmt).option("path", str(out)).option("checkpointLocation", str(checkpoint))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    return q


def assert_stamped(metrics_dir: Path | str, *operators: str) -> None:
    """Every statistics file of ``operators`` was written by a streaming query's task stamped with
    its query, run and batch (so :func:`read_stats` counts it exactly once, like the sink), and
    ``read_stats`` gives back exactly the records of the committed batches, one run each."""
    from driftjoin.spark.runtime.queries import last_commit
    from driftjoin.spark.runtime.stats import STAMP, read_stats

    for op in operators:
        files = [p for p in Path(metrics_dir, op).rglob("*.json") if not p.name.startswith(".")]
        assert files, f"{op}: no statistics written"
        records = [json.loads(p.read_text()) for p in files]
        unstamped = [str(p) for p, r in zip(files, records) if STAMP not in r]
        assert not unstamped, f"{op}: statistics without the query stamp: {unstamped[:3]}"
        counted = list(read_stats(str(metrics_dir), op))
        per_batch = {}
        for r in records:
            s = r[STAMP]
            per_batch.setdefault((s["query"], s["batch"]), set()).add(s["run"])
        committed = {q: last_commit(next(r[STAMP]["checkpoint"] for r in records if r[STAMP]["query"] == q))
                     for q, _ in per_batch}
        assert all(len(runs) == 1 for runs in per_batch.values())  # no replays here: one run per batch
        assert len(counted) == sum(1 for r in records if r[STAMP]["batch"] <= committed[r[STAMP]["query"]]), op


#: The standalone cluster `.ci/run` starts (scripts/cluster.sh) for the cluster tests.
MASTER = os.environ.get("DRIFTJOIN_CLUSTER")
needs_cluster = pytest.mark.skipif(not MASTER, reason="no standalone cluster: run scripts/cluster.sh start and set DRIFTJOIN_CLUSTER")


#: The cluster jobs started in the background when the collected tests include them.
_BACKGROUND: dict[str, Future] = {}


def start_cluster_jobs(scripts: list[str]) -> None:
    """Start ``scripts`` one after another in a background thread, each in a fresh work folder.

    A cluster job is its own driver process on the standalone cluster; the suite's process only
    waits for it (two minutes and more), so the jobs run while the local tests go on and their
    tests collect the results. They run one at a time: the autoscaling job needs both workers."""
    if not MASTER or not scripts:
        return
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="cluster-jobs")
    for script in scripts:
        work = Path(tempfile.mkdtemp(prefix=f"driftjoin-{Path(script).stem}-"))
        _BACKGROUND[script] = pool.submit(_run_cluster_job, script, work, 900)
    pool.shutdown(wait=False)


def run_cluster_job(script: str, work: Path, timeout: float = 900) -> str:
    """The line starting with ``OK`` that ``tests/<script> MASTER work`` printed: from its
    background run if one was started (:func:`start_cluster_jobs`), else run now in ``work``."""
    started = _BACKGROUND.get(script)
    if started is not None:
        return started.result(timeout=2 * timeout)
    return _run_cluster_job(script, work, timeout)


def _run_cluster_job(script: str, work: Path, timeout: float) -> str:
    """Run ``tests/<script> MASTER work`` as its own driver (a process has one SparkContext and
    the suite's is local); returns the line starting with ``OK`` it must print. A cluster that
    is named but not there fails the test (CI started it), rather than waiting for executors."""
    address = urlparse(MASTER)
    try:
        socket.create_connection((address.hostname, address.port or 7077), timeout=5).close()
    except OSError as e:
        pytest.fail(f"DRIFTJOIN_CLUSTER={MASTER} but no master answers there ({e}): start it with "
                    "scripts/cluster.sh start, or unset DRIFTJOIN_CLUSTER to skip the cluster tests")
    job = Path(__file__).resolve().parents[1] / script
    run = subprocess.run([sys.executable, str(job), MASTER, str(work)], capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    ok = [line for line in run.stdout.splitlines() if line.startswith("OK")]
    assert ok, run.stdout[-3000:]
    return ok[0]
