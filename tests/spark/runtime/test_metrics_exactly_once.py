"""Operator statistics agree with what an exactly-once sink holds (issue 12, found item 10).

A statistic of a micro-batch that never committed (the query stopped or failed during it) is not
counted; a batch run twice (a failed attempt, then the replay after a restart) is counted once,
from the run that committed it; queries sharing a metrics directory keep their own statistics.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from pyspark.sql import functions as F

from driftjoin.app.report import summary
from driftjoin.spark.runtime import stats
from driftjoin.spark.runtime.queries import TaskQuery, checkpoint_in_plan, record_checkpoint, recorded_checkpoint
from driftjoin.spark.runtime.stats import read_newest_stats, read_stats, write_stats


def _commit(checkpoint: Path, last: int) -> None:
    (checkpoint / "commits").mkdir(parents=True, exist_ok=True)
    for b in range(last + 1):
        (checkpoint / "commits" / str(b)).write_text("v1\n{}\n")


def _as_task(monkeypatch, query: str, run: str, batch: int, first: int, checkpoint: Path) -> None:
    monkeypatch.setattr(stats, "task_query", lambda: TaskQuery(query, run, batch, first, f"file:{checkpoint}"))


def _stats(worker: int, batch: int, run: str) -> dict:
    """A computation operator's record of one batch: 10 records in, 1 pair out."""
    return {"worker": worker, "batch": batch, "run": run, "seq": batch, "time": float(batch), "comparisons": 2, "pairs": 1,
            "memberships": 12, "state_bytes": 0, "latency_hist": [0] * (len(stats.LATENCY_BOUNDS) + 1),
            "records": 10, "worksets": {}}


def test_uncommitted_and_replayed_batches_are_counted_once(tmp_path, monkeypatch):
    metrics, ck_a, ck_b = str(tmp_path / "m"), tmp_path / "ck_a", tmp_path / "ck_b"
    # query A, run 1 (starts at batch 0): batches 0..3 on workers 0 and 1, then crashes in batch 3
    for b in range(4):
        for w in (0, 1):
            _as_task(monkeypatch, "qa", "run1", b, 0, ck_a)
            write_stats(metrics, "computation", w, b, _stats(w, b, "run1"))
    # run 2 starts at batch 3 (last commit 2) and replays it on worker 1 only (worker 0 got no rows
    # this time), then commits 3 and 4 and is stopped during batch 5
    for b in (3, 4, 5):
        _as_task(monkeypatch, "qa", "run2", b, 3, ck_a)
        write_stats(metrics, "computation", 1, b, _stats(1, b, "run2"))
    _commit(ck_a, 4)
    # query B shares the directory: batch 0 committed, batch 1 not
    for b in (0, 1):
        _as_task(monkeypatch, "qb", "runB", b, 0, ck_b)
        write_stats(metrics, "computation", 0, b, _stats(0, b, "runB"))
    _commit(ck_b, 0)
    # a static join's statistics (no query) in the same directory count as they are
    monkeypatch.setattr(stats, "task_query", lambda: TaskQuery(None, None, None, None, None))
    write_stats(metrics, "computation", 0, 0, _stats(0, -1, "static"))

    got = sorted((s["run"], s["batch"], s["worker"]) for s in read_stats(metrics, "computation"))
    assert got == sorted([("run1", b, w) for b in range(3) for w in (0, 1)]
                         + [("run2", 3, 1), ("run2", 4, 1), ("runB", 0, 0), ("static", -1, 0)])
    only_a = {(s["run"], s["batch"]) for s in read_stats(metrics, "computation", query_id="qa")}
    assert only_a == {("run1", 0), ("run1", 1), ("run1", 2), ("run2", 3), ("run2", 4)}
    assert (summary(metrics)[0]["pairs_out"], summary(metrics, query_id="qa")[0]["records_in"]) == (10, 80)
    everything = {(s["run"], s["batch"]) for s in read_stats(metrics, "computation", committed_only=False)}
    assert ("run2", 5) in everything and ("runB", 1) in everything and ("run1", 3) not in everything


def test_two_runs_starting_at_the_same_batch_the_later_one_counts(tmp_path, monkeypatch):
    metrics, ck = str(tmp_path / "m"), tmp_path / "ck"
    for run, t in (("early", 100.0), ("late", 200.0)):  # run "early" crashed in its first batch
        monkeypatch.setattr(stats.time, "time", lambda t=t: t)
        _as_task(monkeypatch, "q", run, 7, 7, ck)
        write_stats(metrics, "swoop", 0, 0, {"run": run})
    _commit(ck, 7)
    assert [s["run"] for s in read_stats(metrics, "swoop")] == ["late"]


def test_a_deleted_checkpoint_leaves_its_statistics_counted(tmp_path, monkeypatch):
    metrics = str(tmp_path / "m")
    _as_task(monkeypatch, "q", "run", 0, 0, tmp_path / "gone")  # never created: nothing to check against
    write_stats(metrics, "swoop", 0, 0, {"run": "run"})
    assert len(list(read_stats(metrics, "swoop"))) == 1
    (tmp_path / "gone").mkdir()  # exists, nothing committed yet
    assert list(read_stats(metrics, "swoop")) == []


def test_connect_stamps_without_checkpoint_or_first_batch_count_the_same(tmp_path, monkeypatch):
    """On Spark Connect the tasks know only query, run and batch: the checkpoint is written down
    in the metrics directory by the query tracker, and a run's first batch is the lowest batch it
    wrote. The crash-and-replay story of the first test counts the same batches."""
    metrics, ck = str(tmp_path / "m"), tmp_path / "ck"

    def as_connect_task(run: str, batch: int) -> None:
        monkeypatch.setattr(stats, "task_query", lambda: TaskQuery("qa", run, batch, None, None))

    for b in range(4):  # run 1 crashes in batch 3
        for w in (0, 1):
            as_connect_task("run1", b)
            write_stats(metrics, "computation", w, b, _stats(w, b, "run1"))
    for b in (3, 4, 5):  # run 2 replays batch 3 on worker 1 only, commits 3 and 4, stops in batch 5
        as_connect_task("run2", b)
        write_stats(metrics, "computation", 1, b, _stats(1, b, "run2"))
    _commit(ck, 4)
    everything = sorted((s["run"], s["batch"]) for s in read_stats(metrics, "computation"))
    assert ("run2", 5) in everything  # no checkpoint known yet: every batch counts, one run each
    record_checkpoint(metrics, "qa", f"file:{ck}")
    record_checkpoint(metrics, "qa", "/elsewhere")  # written once per query: the first stays
    assert recorded_checkpoint(metrics, "qa") == f"file:{ck}"
    got = sorted((s["run"], s["batch"], s["worker"]) for s in read_stats(metrics, "computation"))
    assert got == sorted([("run1", b, w) for b in range(3) for w in (0, 1)] + [("run2", 3, 1), ("run2", 4, 1)])


def test_a_runs_checkpoint_is_read_from_its_plan():
    plan = ("!TransformWithStateInPySpark transformWithStateUDF(k#2L)#3, [k#2L], [k#4L, props#5], Append, NoTime, "
            "state info [ checkpoint = file:/tmp/tmps0qlooep/ck/state, runId = 3e0259f0-4fcb-4052-a398-0af6f476131b, "
            "opId = 0, ver = 0, numPartitions = 2] stateStoreCkptIds = None, 1795771277608, 0, 0, pandas, true, false")
    assert checkpoint_in_plan(plan, "3e0259f0-4fcb-4052-a398-0af6f476131b") == "/tmp/tmps0qlooep/ck"
    assert checkpoint_in_plan(plan, "another-run") is None
    assert checkpoint_in_plan("No physical plan. Waiting for data.", "3e0259f0-4fcb-4052-a398-0af6f476131b") is None


def test_control_plane_reads_each_keys_newest_record_across_runs_and_queries(tmp_path, monkeypatch):
    """The shared bound's view (read_newest_stats): per key the newest record, committed or not,
    wherever the query stamp put it (one folder per query under the key)."""
    metrics, ck = str(tmp_path / "m"), tmp_path / "ck"
    for run, first, batches in (("r1", 0, (0, 1, 2)), ("r2", 2, (2, 3))):  # r1 killed in batch 2, r2 replays it
        for b in batches:
            for w in (0, 1):
                if (w, b) != (1, 3):  # worker 1 got no rows in batch 3
                    _as_task(monkeypatch, "q", run, b, first, ck)
                    write_stats(metrics, "swoop_worker", w, b, {"seq": b, "run": run})
    _commit(ck, 2)
    (tmp_path / "m" / "swoop_worker" / "0" / "q" / "000000000009-r9.json").write_text('{"seq": 9')  # cut short by a crash
    newest = read_newest_stats(metrics, "swoop_worker")
    assert {w: (r["seq"], r["run"]) for w, r in newest.items()} == {0: (3, "r2"), 1: (2, "r2")}
    monkeypatch.setattr(stats, "task_query", lambda: TaskQuery(None, None, None, None, None))
    write_stats(metrics, "swoop_worker", 2, 5, {"seq": 5, "run": "static"})  # a static join's file in the key folder
    assert read_newest_stats(metrics, "swoop_worker")[2]["run"] == "static"


def _vectors(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-1, 1, (n, 2))


def _write(folder: Path, name: str, ids, vecs) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(json.dumps({"id": int(i), "vector": v.tolist()}) + "\n" for i, v in zip(ids, vecs)))


MAGIC = 1_000_001


@pytest.mark.slow
def test_summary_equals_sink_when_a_batch_fails_and_after_its_replay(spark, tmp_path):
    """The issue's case: a query stops during a batch whose operators already wrote their
    statistics. Here the batch fails after the similarity computation (a filter raises on one
    pair), so the failure is certain and the batch is never committed; then the query restarts
    from its checkpoint without the failing filter and replays it."""
    from driftjoin import similarity_join

    left, right = tmp_path / "L", tmp_path / "R"
    _write(left, "a.json", range(0, 200), _vectors(200, 1))
    _write(right, "a.json", range(200, 400), _vectors(200, 2))
    metrics, out, ck = str(tmp_path / "metrics"), str(tmp_path / "out"), str(tmp_path / "ck")

    def run(fail: bool):
        def read(folder):
            return spark.readStream.schema("id long, vector array<double>").option("maxFilesPerTrigger", 1).json(str(folder))

        pairs = similarity_join(read(left), read(right), threshold=0.05, metric="euclidean", window=None, parallelism=2,
                                dim=2, metrics_dir=metrics)
        if fail:
            pairs = pairs.where(F.when(F.col("left_id") == MAGIC, F.raise_error(F.lit("stop in the batch"))).otherwise(F.lit(True)))
        q = (pairs.writeStream.format("parquet").option("path", out).option("checkpointLocation", ck)
             .trigger(availableNow=True).start())
        try:
            q.awaitTermination()
        except Exception:
            assert fail
        return q

    run(False)
    first = spark.read.parquet(out).count()
    assert first > 0 and summary(metrics)[0]["pairs_out"] == first
    # the second batch holds a pair (MAGIC, MAGIC + 1) at distance 0, on which the filter raises
    _write(left, "b.json", [*range(400, 600), MAGIC], np.vstack([_vectors(200, 3), [[0.5, 0.5]]]))
    _write(right, "b.json", [*range(600, 800), MAGIC + 1], np.vstack([_vectors(200, 4), [[0.5, 0.5]]]))
    failed = run(True)
    assert failed.exception() is not None
    uncommitted = [s for s in read_stats(metrics, "computation", committed_only=False) if s["_spark"]["batch"] == 1]
    assert uncommitted and sum(s["pairs"] for s in uncommitted) > 0  # the failed batch did write its statistics
    assert spark.read.parquet(out).count() == first
    assert summary(metrics)[0]["pairs_out"] == first
    run(False)  # restart from the checkpoint: batch 1 is replayed and committed
    rows = spark.read.parquet(out).collect()
    assert len(rows) > first and len({(r.left_id, r.right_id) for r in rows}) == len(rows)
    totals, _ = summary(metrics)
    assert totals["pairs_out"] == len(rows)
    assert totals["records_in"] == 802
