"""similarity_join(algorithm="grid"/"auto") on Spark against the oracle (kept short)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from driftjoin import similarity_join
from driftjoin.distance import get_metric
from driftjoin.grid.choice import read_choice
from driftjoin.report import summary
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.spark.metrics_sink import read_stats

pytestmark = pytest.mark.spark


def _clusters(n, dim, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(8, dim))[rng.integers(0, 8, n)] + rng.normal(0, 0.15, (n, dim))).astype(dtype)


@pytest.mark.slow
def test_grid_stream_two_streams_float32_windows_equal_oracle(spark, tmp_path):
    n, n_batches, dim = 600, 2, 24
    X = _clusters(n, dim, 1, np.float32)
    rng = np.random.default_rng(1)
    side = rng.integers(0, 2, n)
    ts = np.sort(rng.uniform(0, 90, n))  # two 1-minute windows, batches cross the window end
    for b in range(n_batches):
        for s, name in ((0, "L"), (1, "R")):
            d = tmp_path / name
            d.mkdir(exist_ok=True)
            with open(d / f"b{b}.json", "w") as f:
                for i in range(b * n // n_batches, (b + 1) * n // n_batches):
                    if side[i] == s:
                        f.write(json.dumps({"id": i, "vector": X[i].tolist(), "ts": float(ts[i])}) + "\n")
    schema = "id long, vector array<float>, ts double"

    def read(name):
        return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / name))
                .withColumn("ts", F.col("ts").cast("timestamp")))

    m = get_metric("cosine")
    t = 0.02
    pairs = similarity_join(read("L"), read("R"), threshold=t, metric="cosine", parallelism=3, dim=dim, window="1 minute",
                            ingest_col="ts", algorithm="grid", metrics_dir=str(tmp_path / "metrics"))
    q = (pairs.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    expected = oracle_pairs(np.arange(n), side.astype(np.int8), m.prepare(X.astype(np.float64)),
                            np.floor(ts / 60).astype(np.int64), m, t, False)
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 60)) for r in out]
    assert len(expected) > 100 and len(got) == len(set(got)) and set(got) == expected
    stats = list(read_stats(str(tmp_path / "metrics"), "computation"))
    assert sum(s["pairs"] for s in stats) == len(expected)
    assert sum(s["records"] for s in stats) == n  # each input record counted once
    totals, _ = summary(str(tmp_path / "metrics"))
    assert totals["records_in"] == n and 1.0 <= totals["duplication_ratio"] <= 3.0
    assert read_choice(str(tmp_path / "metrics"))["algorithm"] == "grid"


def test_grid_static_self_join_string_ids_and_dead_rows(spark):
    n, dim = 500, 40
    X = _clusters(n, dim, 2)
    rows = [(f"r{i}", X[i].tolist()) for i in range(n)] + [("bad", [1.0] * (dim - 1)), (None, X[0].tolist())]
    df = spark.createDataFrame(rows, "key string, vec array<double>")
    m = get_metric("euclidean")
    out = similarity_join(df, threshold=1.2, metric="euclidean", id_col="key", vector_col="vec", parallelism=2,
                          algorithm="grid").collect()
    ids = np.array([f"r{i}" for i in range(n)], dtype=object)
    expected = oracle_pairs(ids, np.zeros(n, np.int8), X, np.zeros(n, np.int64), m, 1.2, True)
    got = [(r.left_id, r.right_id, 0) for r in out]
    assert len(expected) > 200 and len(got) == len(set(got)) and set(got) == expected
    assert all(r.left_id < r.right_id for r in out)


def test_auto_picks_s3j_in_2d_and_grid_for_embeddings(spark, tmp_path):
    rng = np.random.default_rng(4)
    low = spark.createDataFrame(pd.DataFrame({"id": np.arange(800), "vector": list(rng.uniform(-1, 1, (800, 2)))}))
    out = similarity_join(low, threshold=0.01, metric="angular", parallelism=2, metrics_dir=str(tmp_path / "low")).collect()
    assert read_choice(str(tmp_path / "low"))["algorithm"] == "s3j"
    m = get_metric("angular")
    X = rng.uniform(-1, 1, (800, 2))
    assert {(r.left_id, r.right_id, 0) for r in out} == oracle_pairs(
        np.arange(800), np.zeros(800, np.int8), m.prepare(np.vstack(low.toPandas()["vector"])), np.zeros(800, np.int64), m, 0.01, True)
    del X
    high = spark.createDataFrame(pd.DataFrame({"id": np.arange(600), "vector": list(_clusters(600, 96, 5))}))
    similarity_join(high, threshold=1.5, metric="euclidean", parallelism=2, metrics_dir=str(tmp_path / "high")).count()
    choice = read_choice(str(tmp_path / "high"))
    assert choice["algorithm"] == "grid" and choice["s3j_duplication"] > choice["grid_copies"]
    stream = spark.readStream.format("driftjoin").option("dim", 96).load()
    similarity_join(stream, threshold=0.1, dim=96, parallelism=2, metrics_dir=str(tmp_path / "s96"))
    assert read_choice(str(tmp_path / "s96"))["algorithm"] == "grid"
    similarity_join(stream, threshold=0.1, dim=96, parallelism=2, metrics_dir=str(tmp_path / "s96b"),
                    sample=rng.uniform(-1, 1, (300, 96)))
    assert read_choice(str(tmp_path / "s96b"))["sample_rows"] == 300


def test_grid_settings_fail_before_start(spark):
    stream = spark.readStream.format("driftjoin").option("dim", 8).load()
    with pytest.raises(ValueError, match="algorithm="):
        similarity_join(stream, threshold=0.1, dim=8, algorithm="grids")
    with pytest.raises(ValueError, match="balance= moves S3J worksets"):
        similarity_join(stream, threshold=0.1, dim=8, algorithm="grid", balance="s3j", metrics_dir="/tmp/x")
    with pytest.raises(ValueError, match="block_bytes"):
        similarity_join(stream, threshold=0.1, dim=8, algorithm="grid", block_bytes=10)
    with pytest.raises(ValueError, match="sample="):
        similarity_join(stream, threshold=0.1, dim=8, sample=np.zeros((10, 3)))
