"""End-to-end Spark tests of similarity_join against the oracle (streaming and static)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pyspark.ml.linalg import Vectors
from pyspark.sql import functions as F

from driftjoin import invalid_records, similarity_join
from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.spark.runtime.stats import read_stats

from ..helpers import assert_stamped

pytestmark = pytest.mark.spark


def _write_batches(base, X, side, ts, n_batches):
    n = len(X)
    for b in range(n_batches):
        for s, name in ((0, "L"), (1, "R")):
            d = base / name
            d.mkdir(parents=True, exist_ok=True)
            with open(d / f"b{b:03d}.json", "w") as f:
                for i in range(b * n // n_batches, (b + 1) * n // n_batches):
                    if side[i] == s:
                        f.write(json.dumps({"id": i, "vector": X[i].tolist(), "ts": float(ts[i])}) + "\n")


@pytest.mark.slow
def test_streaming_two_streams_several_batches_and_windows_equal_oracle(spark, tmp_path):
    """Through the lean output (no provenance columns); the other streaming tests use the full one."""
    rng = np.random.default_rng(5)
    n, n_batches = 1500, 5
    X = rng.uniform(-1, 1, (n, 2))
    side = rng.integers(0, 2, n)
    ts = np.sort(rng.uniform(0, 150, n))  # three 1-minute windows, batches cross window ends
    _write_batches(tmp_path, X, side, ts, n_batches)
    schema = "id long, vector array<double>, ts double"

    def read(name):
        return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / name))
                .withColumn("ts", F.col("ts").cast("timestamp")))

    pairs = similarity_join(read("L"), read("R"), threshold=0.01, metric="angular", parallelism=3, dim=2,
                            window="1 minute", ingest_col="ts", metrics_dir=str(tmp_path / "metrics"), output="pairs-lean")
    assert pairs.columns == ["left_id", "right_id", "distance", "window_start", "window_end"]
    q = (pairs.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == n_batches
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    m = get_metric("angular")
    expected = oracle_pairs(np.arange(n), side.astype(np.int8), m.prepare(X), np.floor(ts / 60).astype(np.int64), m, 0.01, False)
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 60)) for r in out]
    assert len(got) == len(set(got))
    assert set(got) == expected
    assert all(r.distance <= 0.01 for r in out)
    stats = list(read_stats(str(tmp_path / "metrics"), "computation"))
    assert sum(s["pairs"] for s in stats) == len(expected)
    assert {s["worker"] for s in stats} <= {0, 1, 2}
    assert_stamped(tmp_path / "metrics", "formulation", "computation")


def test_static_self_join_string_ids_mllib_vectors(spark):
    rng = np.random.default_rng(2)
    n = 300
    X = rng.normal(size=(n, 5))
    df = spark.createDataFrame([(f"r{i}", Vectors.dense(X[i].tolist())) for i in range(n)], ["key", "features"])
    out = similarity_join(df, threshold=0.2, metric="cosine", id_col="key", vector_col="features", parallelism=2).collect()
    m = get_metric("cosine")
    ids = np.array([f"r{i}" for i in range(n)], dtype=object)
    expected = oracle_pairs(ids, np.zeros(n, np.int8), m.prepare(X), np.zeros(n, np.int64), m, 0.2, True)
    got = [(r.left_id, r.right_id, 0) for r in out]
    assert len(got) == len(set(got)) and set(got) == expected
    assert all(r.left_id < r.right_id for r in out)


def test_static_float_arrays_event_time_windows(spark):
    rng = np.random.default_rng(3)
    n = 400
    X = rng.uniform(-1, 1, (n, 3)).astype(np.float32)
    t = rng.uniform(0, 40, n)
    rows = [(i, X[i].tolist(), float(t[i])) for i in range(n)]
    df = spark.createDataFrame(rows, "id int, vector array<float>, t double").withColumn("t", F.col("t").cast("timestamp"))
    left, right = df.where("id % 2 = 0"), df.where("id % 2 = 1")
    out = similarity_join(left, right, threshold=0.3, metric="euclidean", time_col="t", window="10 seconds", parallelism=2).collect()
    m = get_metric("euclidean")
    vec = X.astype(np.float64)
    side = (np.arange(n) % 2).astype(np.int8)
    expected = oracle_pairs(np.arange(n), side, vec, np.floor(t / 10).astype(np.int64), m, 0.3, False)
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 10)) for r in out]
    assert len(got) == len(set(got)) and set(got) == expected


def test_bad_rows_go_to_dead_letters_and_valid_rows_still_join(spark):
    rows = [
        (1, [0.0, 0.0]), (2, [0.05, 0.0]), (3, None), (None, [0.0, 0.01]), (4, [0.0, float("nan")]),
        (5, [0.0, 0.02, 0.3]), (6, [0.01, 0.01]), (7, [float("inf"), 0.0]),
    ]
    df = spark.createDataFrame(rows, "id long, vector array<double>")
    pairs = {(r.left_id, r.right_id) for r in similarity_join(df, threshold=0.1, metric="euclidean", parallelism=2).collect()}
    assert pairs == {(1, 2), (1, 6), (2, 6)}
    dead = {(r.id, r.reason) for r in invalid_records(df, metric="euclidean", dim=2).collect()}
    assert dead == {
        (3, "missing vector"), (None, "missing id"), (4, "NaN, infinite or null element in vector"),
        (5, "wrong dimension (expected 2)"), (7, "NaN, infinite or null element in vector"),
    }


def test_zero_vector_is_dead_letter_for_angular(spark):
    df = spark.createDataFrame([(1, [0.0, 0.0]), (2, [1.0, 0.0]), (3, [1.0, 0.001])], "id long, vector array<double>")
    assert [(r.left_id, r.right_id) for r in similarity_join(df, threshold=0.01, parallelism=1).collect()] == [(2, 3)]
    assert [r.reason for r in invalid_records(df, dim=2).collect()] == ["zero vector has no direction (angular/cosine)"]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"threshold": 0}, "threshold must be a finite distance > 0"),
        ({"threshold": -1}, "threshold must be a finite distance > 0"),
        ({"threshold": 0.1, "metric": "sqeuclidean"}, "not a metric"),
        ({"threshold": 0.1, "metric": "hamming2"}, "unknown metric"),
        ({"threshold": 0.1, "parallelism": 0}, "parallelism must be an integer >= 1"),
        ({"threshold": 2.0, "metric": "angular"}, "exceeds the largest angular distance"),
        ({"threshold": 0.1, "window": "soon"}, "is not a duration"),
        ({"threshold": 0.1, "vector_col": "nope"}, "vector_col='nope' is not a column"),
        ({"threshold": True}, "threshold must be a number"),
        ({"threshold": 0.1, "window": "-5 seconds"}, "window must be positive"),
        ({"threshold": 0.1, "ingest_col": "arrival"}, "ingest_col='arrival' is not a column"),
        ({"threshold": 0.1, "time_col": "ts", "watermark": "-1 s"}, "watermark must be zero or positive"),
        ({"threshold": 0.1, "parallelism": 2, "centroids": [[0.0, float("nan")], [1.0, 1.0]]}, "centroids must be finite"),
        ({"threshold": 0.1, "parallelism": True}, "parallelism must be an integer >= 1"),
    ],
)
def test_bad_settings_fail_before_the_job_starts(spark, kwargs, message):
    df = spark.createDataFrame([(1, [1.0, 0.0])], "id long, vector array<double>")
    stream = spark.readStream.format("driftjoin").option("total", 10).load()
    with pytest.raises((ValueError, TypeError), match=message):
        similarity_join(stream, dim=2, **kwargs)
    with pytest.raises((ValueError, TypeError)):
        similarity_join(df, threshold=-1)


def test_stream_without_dim_fails_with_advice(spark):
    stream = spark.readStream.format("driftjoin").option("total", 10).load()
    with pytest.raises(ValueError, match="dim is required"):
        similarity_join(stream, threshold=0.1)


def test_generator_source_static_and_streaming(spark):
    df = spark.read.format("driftjoin").option("total", 3000).option("dim", 4).option("dist", "skewed").option("partitions", 2).load()
    assert df.count() == 3000 and df.select(F.countDistinct("id")).first()[0] == 3000
    again = spark.read.format("driftjoin").option("total", 3000).option("dim", 4).option("dist", "skewed").load()
    assert sorted(df.collect()) == sorted(again.collect())  # deterministic: a replay gives the same rows
    stream = (spark.readStream.format("driftjoin").option("total", 2500).option("pace", "false")
              .option("max_records_per_batch", 1000).option("start", 0).load())
    q = stream.writeStream.format("memory").queryName("gen_test").start()
    q.processAllAvailable()
    q.stop()
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [1000, 1000, 500]
    assert spark.sql("select count(distinct id) from gen_test").first()[0] == 2500


@pytest.mark.parametrize("algorithm", ["clusterjoin", "bruteforce"])
def test_baselines_on_spark_equal_oracle(spark, tmp_path, algorithm):
    rng = np.random.default_rng(11)
    n = 600
    X = rng.uniform(-1, 1, (n, 2))
    side = (np.arange(n) % 2).astype(np.int8)
    df = spark.createDataFrame([(i, X[i].tolist()) for i in range(n)], "id long, vector array<double>")
    left, right = df.where("id % 2 = 0"), df.where("id % 2 = 1")
    out = similarity_join(left, right, threshold=0.05, metric="angular", parallelism=3, algorithm=algorithm,
                          virtual_partitions=50).collect()
    m = get_metric("angular")
    expected = oracle_pairs(np.arange(n), side, m.prepare(X), np.zeros(n, np.int64), m, 0.05, False)
    got = [(r.left_id, r.right_id, 0) for r in out]
    assert len(got) == len(set(got)) and set(got) == expected


def test_output_shapes_agree(spark):
    """output='grouped' (one row per left record, arrays), 'pairs-grouped' (grouped transport
    exploded in the JVM) and 'pairs-lean' (S3J and grid) give the same pairs and distances as the
    default 'pairs'."""
    rng = np.random.default_rng(21)
    X = rng.uniform(-1, 1, (500, 3))
    df = spark.createDataFrame([(i, X[i].tolist()) for i in range(500)], "id long, vector array<double>")
    kw = dict(threshold=0.2, metric="euclidean", parallelism=3)
    pairs = sorted((r.left_id, r.right_id, round(r.distance, 12)) for r in similarity_join(df, **kw).collect())
    flat = sorted((r.left_id, r.right_id, round(r.distance, 12)) for r in similarity_join(df, output="pairs-grouped", **kw).collect())
    grouped = similarity_join(df, output="grouped", **kw).collect()
    exploded = sorted((r.left_id, b, round(d, 12)) for r in grouped for b, d in zip(r.right_ids, r.distances))
    lean = {a: similarity_join(df, output="pairs-lean", algorithm=a, **kw) for a in ("s3j", "grid")}
    assert all(j.columns == ["left_id", "right_id", "distance", "window_start", "window_end"] for j in lean.values())
    lean_pairs = {a: sorted((r.left_id, r.right_id, round(r.distance, 12)) for r in j.collect()) for a, j in lean.items()}
    assert len(pairs) > 100 and pairs == flat == exploded == lean_pairs["s3j"] == lean_pairs["grid"]
    assert all(len(r.right_ids) == len(r.distances) == len(r.ingest_times) for r in grouped)
    with pytest.raises(ValueError, match="'pairs-lean'"):
        similarity_join(df, output="grouped", algorithm="grid", **kw)
    with pytest.raises(ValueError, match="output must be one of"):
        similarity_join(df, output="rows", **kw)
