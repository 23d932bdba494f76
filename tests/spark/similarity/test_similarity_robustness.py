"""similarity_join under the mistakes issue 12 found: each lost results silently or stopped the query.

Restart with other settings, null / unparsable / infinite times, a malformed first row of a
static input, extreme magnitudes, null MLlib vectors, an input that carries its own watermark,
centroids as a numpy array, and rows out of order across micro-batches.
"""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors, VectorUDT
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin import invalid_records, similarity_join
from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.spark.runtime.stats import read_stats

from ..helpers import run_available_now, write_batches

pytestmark = pytest.mark.spark

SCHEMA = "id long, vector array<double>, ts double"


def _rows(rng, start, n, t0=0.0, t1=10.0):
    return [{"id": start + i, "vector": rng.uniform(-1, 1, 2).tolist(), "ts": float(rng.uniform(t0, t1))} for i in range(n)]


def _expected(rows, threshold, metric="euclidean", window=None, two=False):
    m = get_metric(metric)
    ids = np.array([r["id"] for r in rows])
    side = np.array([r.get("side", 0) for r in rows], np.int8)
    win = np.zeros(len(rows), np.int64) if window is None else np.floor(np.array([r["ts"] for r in rows]) / window).astype(np.int64)
    found = oracle_pairs(ids, side, m.prepare(np.array([r["vector"] for r in rows])), win, m, threshold, not two)
    return {(a, b) for a, b, _ in found}


@pytest.mark.slow
def test_restart_with_other_parallelism_is_refused_and_the_old_settings_continue_exactly(spark, tmp_path):
    rng = np.random.default_rng(1)
    left, right = _rows(rng, 0, 300), _rows(rng, 10_000, 300)
    for side, rows in (("L", left), ("R", right)):
        write_batches(tmp_path / side, [rows[:100], rows[100:200]])

    def read(name):
        return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / name))

    def start(p):
        pairs = similarity_join(read("L"), read("R"), threshold=0.05, metric="euclidean", window=None, parallelism=p, dim=2)
        return run_available_now(pairs, tmp_path / "out", tmp_path / "ck")

    start(2)
    for side, rows in (("L", left), ("R", right)):
        write_batches(tmp_path / side, [rows[200:]], start=2)
    before = spark.read.parquet(str(tmp_path / "out")).count()
    with pytest.raises(Exception, match=r"parallelism: checkpoint has 2, this query has 5.*new checkpoint location"):
        start(5)
    assert spark.read.parquet(str(tmp_path / "out")).count() == before  # the refused batch committed nothing
    start(2)
    got = [(r.left_id, r.right_id) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    both = [r | {"side": 0} for r in left] + [r | {"side": 1} for r in right]
    assert len(got) == len(set(got)) and set(got) == _expected(both, 0.05, two=True)


@pytest.mark.slow
def test_bad_times_are_dead_letters_and_the_stream_keeps_running(spark, tmp_path):
    rng = np.random.default_rng(2)
    good = _rows(rng, 0, 120, 0, 100)
    text = [{"id": r["id"], "vector": r["vector"], "ts": f"2024-01-01 00:{int(r['ts']) // 60:02d}:{int(r['ts']) % 60:02d}"} for r in good]
    for r, t in zip(good, text):
        r["ts"] = float(int(r["ts"]))
    bad = [{"id": 900, "vector": [0.1, 0.1], "ts": None}, {"id": 901, "vector": [0.1, 0.1]},
           {"id": 902, "vector": [0.1, 0.1], "ts": "yesterday"}, {"id": 903, "vector": [0.1, 0.1], "ts": "2024-13-45 99:99:99"}]
    write_batches(tmp_path / "in", [text[:60] + bad[:2], text[60:] + bad[2:]])
    stream = spark.readStream.schema("id long, vector array<double>, ts string").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    settings = dict(metric="euclidean", dim=2, time_col="ts", watermark="1 hour")
    pairs = similarity_join(stream, threshold=0.1, window="1 minute", parallelism=2, metrics_dir=str(tmp_path / "m"), **settings)
    q = run_available_now(pairs, tmp_path / "out", tmp_path / "ck")
    dq = run_available_now(invalid_records(stream, **settings), tmp_path / "dead", tmp_path / "ck_dead")
    assert q.exception() is None and dq.exception() is None
    got = {(r.left_id, r.right_id) for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    base = 1704067200.0  # 2024-01-01 00:00:00 UTC
    assert got == _expected([r | {"ts": base + r["ts"]} for r in good], 0.1, window=60.0)
    dead = {r.id: r.reason for r in spark.read.parquet(str(tmp_path / "dead")).collect()}
    assert set(dead) == {900, 901, 902, 903}
    assert dead[900].startswith("missing time") and dead[902].startswith("unparsable time (ts): yesterday")
    # the static path refuses the same rows and joins the same pairs
    static = spark.read.schema("id long, vector array<double>, ts string").json(str(tmp_path / "in"))
    assert {(r.left_id, r.right_id) for r in similarity_join(static, threshold=0.1, window="1 minute", parallelism=2, **settings).collect()} == got
    assert {r.id for r in invalid_records(static, **settings).collect()} == set(dead)


def test_infinite_and_nan_numeric_times_are_dead_letters(spark):
    rows = [(1, [0.0, 0.0], 1.0), (2, [0.01, 0.0], 2.0), (3, [0.0, 0.01], float("inf")), (4, [0.0, 0.02], float("nan")),
            (5, [0.0, 0.03], -1e300)]
    df = spark.createDataFrame(rows, "id long, vector array<double>, ts double")
    settings = dict(metric="euclidean", time_col="ts")
    assert {(r.left_id, r.right_id) for r in similarity_join(df, threshold=0.05, window="1 minute", parallelism=2, **settings).collect()} == {(1, 2)}
    dead = {r.id: r.reason for r in invalid_records(df, **settings).collect()}
    assert set(dead) == {3, 4, 5} and all("not a point in time" in why for why in dead.values())


def test_static_dim_comes_from_the_most_common_length_not_the_first_row(spark):
    rng = np.random.default_rng(3)
    rows = [{"id": 0, "vector": [0.1, 0.2, 0.3]}] + [{"id": i, "vector": rng.uniform(-1, 1, 2).tolist()} for i in range(1, 400)]
    df = spark.createDataFrame([(r["id"], r["vector"]) for r in rows], "id long, vector array<double>")
    got = {(r.left_id, r.right_id) for r in similarity_join(df, threshold=0.05, metric="euclidean", parallelism=2).collect()}
    expected = _expected(rows[1:], 0.05)
    assert len(expected) > 50 and got == expected
    assert [(r.id, r.reason) for r in invalid_records(df, metric="euclidean").collect()] == [(0, "wrong dimension (expected 2)")]


def test_extreme_magnitudes_and_null_mllib_vectors(spark):
    angular = spark.createDataFrame(
        [(1, Vectors.dense([1e-200, 1e-200])), (2, Vectors.dense([1e200, 1e200])), (3, Vectors.dense([1.0, 1.0])),
         (4, Vectors.dense([1.0, -1.0])), (5, None)],
        T.StructType([T.StructField("id", T.LongType()), T.StructField("v", VectorUDT())]))
    got = {(r.left_id, r.right_id) for r in similarity_join(angular, threshold=0.01, vector_col="v", parallelism=2).collect()}
    assert got == {(1, 2), (1, 3), (2, 3)}
    assert [(r.id, r.reason) for r in invalid_records(angular, vector_col="v").collect()] == [(5, "missing vector")]
    euclid = spark.createDataFrame([(1, [1e200, 1e200]), (2, [1.0, 1.0]), (3, [1.0, 1.01]), (4, [-1e149, 0.0])],
                                   "id long, vector array<double>")
    assert [(r.left_id, r.right_id) for r in similarity_join(euclid, threshold=0.1, metric="euclidean", parallelism=2).collect()] == [(2, 3)]
    dead = invalid_records(euclid, metric="euclidean").collect()
    assert [r.id for r in dead] == [1] and "magnitude" in dead[0].reason


def test_centroids_as_a_numpy_array(spark):
    rng = np.random.default_rng(4)
    X = rng.uniform(-1, 1, (200, 2))
    df = spark.createDataFrame([(i, X[i].tolist()) for i in range(200)], "id long, vector array<double>")
    got = {(r.left_id, r.right_id) for r in similarity_join(df, threshold=0.1, metric="euclidean", parallelism=3,
                                                            centroids=np.array([[0.5, 0.5], [-0.5, 0.0], [0.0, -0.5]])).collect()}
    assert got == _expected([{"id": i, "vector": X[i].tolist()} for i in range(200)], 0.1)
    with pytest.raises(ValueError, match=r"shape \(3, dim\)"):
        similarity_join(df, threshold=0.1, parallelism=3, centroids=np.zeros((2, 2)))


@pytest.mark.slow
def test_input_watermark_is_used_and_rows_out_of_order_keep_their_pairs(spark, tmp_path):
    rng = np.random.default_rng(5)
    rows = _rows(rng, 0, 100, 0, 50) + _rows(rng, 100, 100, 70, 100) + _rows(rng, 200, 100, 10, 20)
    later = _rows(rng, 300, 5, 200, 210)
    late = {"id": 999, "vector": [0.0, 0.0], "ts": 5.0}  # window 0 after the frontier passed it: late
    write_batches(tmp_path / "in", [rows[:100], rows[100:200], rows[200:300], later, [late]])
    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
              .withColumn("ts", F.col("ts").cast("timestamp")).withWatermark("ts", "60 seconds"))
    with pytest.raises(ValueError, match="already has a watermark of 60 seconds"):
        similarity_join(stream, threshold=0.05, metric="euclidean", dim=2, time_col="ts", watermark="1 hour")
    pairs = similarity_join(stream, threshold=0.05, metric="euclidean", dim=2, parallelism=2, window="1 minute",
                            time_col="ts", metrics_dir=str(tmp_path / "m"))
    q = run_available_now(pairs, tmp_path / "out", tmp_path / "ck")
    assert q.exception() is None
    got = {(r.left_id, r.right_id) for r in spark.read.parquet(str(tmp_path / "out")).collect()}
    assert got == _expected(rows + later, 0.05, window=60.0)
    reported = [row for s in read_stats(str(tmp_path / "m"), "formulation") for row in s["late_rows"]]
    assert [r["id"] for r in reported] == [999]
