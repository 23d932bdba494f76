"""similarity_join with a plain Python metric (a function of two values): ``auto`` runs pivot
filtering (driftjoin.metric.pivots), reports its distance calls (statistics under metrics_dir,
the summary), and the count stays within the brute force's pairs (the paper's S3J, by name, is
run with a user metric in test_metric_join.py). Static (self and two inputs) and streaming, against the oracle of
tests/metric/oracle.py with its own dynamic-programming edit distance."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.sql import functions as F

from driftjoin import similarity_join
from driftjoin.app.report import summary
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.similarity.choice import read_choice
from tests.metric.oracle import levenshtein, oracle

from ..helpers import run_available_now, write_batches

pytestmark = pytest.mark.spark


def words(n: int, seed: int) -> list[str]:
    """Short strings over few letters (many pairs one edit apart), unicode, empty, repeated."""
    rng = np.random.default_rng(seed)
    out = ["".join(rng.choice(list("abcde\u00e9"), size=rng.integers(0, 7))) for _ in range(n)]
    return out + out[:5]


def python_edits():
    """The oracle's plain Python edit distance, pickled by value (the Python workers cannot import
    the tests package)."""
    from pyspark import cloudpickle

    from tests.metric import oracle as oracle_module

    cloudpickle.register_pickle_by_value(oracle_module)
    return oracle_module.levenshtein


def _pairs(rows) -> set:
    got = [(r.left_id, r.right_id) for r in rows]
    assert len(got) == len(set(got)), "a pair came out twice"
    return set(got)


def test_static_python_metric_auto_runs_pivots_within_the_brute_force(spark, tmp_path):
    vals = words(200, 0)
    n = len(vals)
    df = spark.createDataFrame(list(enumerate(vals)), "id long, name string")
    left = spark.createDataFrame([(i, v) for i, v in enumerate(vals) if i % 3 == 0], "id long, name string")
    right = spark.createDataFrame([(i, v) for i, v in enumerate(vals) if i % 3 != 0], "id long, name string")
    edits = python_edits()
    joins = {"auto": similarity_join(df, threshold=1, metric=edits, value_col="name", parallelism=2,
                                     metrics_dir=str(tmp_path / "auto")),
             "two": similarity_join(left, right, threshold=2, metric=edits, value_col="name", parallelism=2,
                                    algorithm="pivots")}
    frames = [j.select("left_id", "right_id", F.lit(tag).alias("tag")) for tag, j in joins.items()]
    rows = frames[0].unionByName(frames[1]).collect()
    got = {tag: _pairs(r for r in rows if r.tag == tag) for tag in joins}
    want = set(oracle([(i, 0, v, 0) for i, v in enumerate(vals)], levenshtein, 1, True))
    assert got["auto"] == want and len(want) > 20
    assert got["two"] == {(i, j) for i in range(0, n, 3) for j in range(n) if j % 3 and levenshtein(vals[i], vals[j]) <= 2}
    choice = read_choice(str(tmp_path / "auto"))
    assert choice["algorithm"] == "pivots" and "never computes more distances than the brute force" in choice["reason"]
    calls = summary(str(tmp_path / "auto"))[0]["distance_calls"]
    assert calls == sum(s["distance_calls"] for s in read_stats(str(tmp_path / "auto"), "computation"))
    assert 0 < calls <= n * (n - 1) // 2


def test_streaming_python_metric_with_a_sample_restarts_from_its_checkpoint(spark, tmp_path):
    """A self-join stream in tumbling windows, pivots from sample= values, two micro-batches, a
    restart (the plan is made again on the driver and must match the checkpoint's), one more."""
    vals = words(90, 1)
    ts = np.sort(np.random.default_rng(2).uniform(0, 30, len(vals)))
    rows = [{"id": i, "name": v, "ts": float(t)} for i, (v, t) in enumerate(zip(vals, ts))]
    batches = [rows[k : k + 32] for k in range(0, len(rows), 32)]

    def join():
        stream = (spark.readStream.schema("id long, name string, ts double").option("maxFilesPerTrigger", 1)
                  .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))
        return similarity_join(stream, threshold=1, metric=python_edits(), value_col="name", window="10 seconds",
                               time_col="ts", watermark="30 seconds", sample=words(120, 3), parallelism=2,
                               metrics_dir=str(tmp_path / "m"))

    write_batches(tmp_path / "in", batches[:2])
    run_available_now(join(), tmp_path / "out", tmp_path / "ck")
    write_batches(tmp_path / "in", batches[2:], start=2)
    q = run_available_now(join(), tmp_path / "out", tmp_path / "ck")
    assert sum(1 for p in q.recentProgress if p["numInputRows"]) == 1
    got = spark.read.parquet(str(tmp_path / "out")).collect()
    keys = [(r.left_id, r.right_id, round(r.window_start.timestamp() * 1e6)) for r in got]
    want = oracle([(r["id"], 0, r["name"], round(r["ts"] * 1e6)) for r in rows], levenshtein, 1, True,
                  ("tumbling", 10_000_000, 0))
    assert len(keys) == len(set(keys)) and set(keys) == set(want) and len(want) > 5
    totals, _ = summary(str(tmp_path / "m"))
    assert read_choice(str(tmp_path / "m"))["algorithm"] == "pivots"
    assert totals["pairs_out"] == len(keys) and totals["distance_calls"] > 0
