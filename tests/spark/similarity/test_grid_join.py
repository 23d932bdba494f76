"""similarity_join(algorithm="grid"/"auto") on Spark against the oracle (kept short)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F

from driftjoin import similarity_join
from driftjoin.app.report import summary
from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.similarity.choice import read_choice

from ..helpers import assert_stamped, run_available_now, write_batches

pytestmark = pytest.mark.spark


def _clusters(n, dim, seed, dtype=np.float64):
    rng = np.random.default_rng(seed)
    return (rng.normal(size=(8, dim))[rng.integers(0, 8, n)] + rng.normal(0, 0.15, (n, dim))).astype(dtype)


@pytest.mark.slow
def test_grid_stream_float32_windows_restart_and_a_changed_algorithm_is_refused(spark, tmp_path):
    """auto on a 24-D stream picks the grid; after a restart from the checkpoint the grid state
    continues exactly, and a restart that asks for S3J is refused (the choice is fixed)."""
    n, dim = 600, 24
    X = _clusters(n, dim, 1, np.float32)
    rng = np.random.default_rng(1)
    side = rng.integers(0, 2, n)
    ts = np.sort(rng.uniform(0, 90, n))  # two 1-minute windows, batches cross the window end
    rows = [{"id": i, "vector": X[i].tolist(), "ts": float(ts[i])} for i in range(n)]
    for s, name in ((0, "L"), (1, "R")):
        part = [r for r in rows if side[r["id"]] == s]
        write_batches(tmp_path / name, [part[: len(part) // 2]])
    schema = "id long, vector array<float>, ts double"

    def start(algorithm):
        def read(name):
            return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / name))
                    .withColumn("ts", F.col("ts").cast("timestamp")))

        pairs = similarity_join(read("L"), read("R"), threshold=0.02, metric="cosine", parallelism=3, dim=dim,
                                window="1 minute", ingest_col="ts", algorithm=algorithm, metrics_dir=str(tmp_path / "metrics"))
        return run_available_now(pairs, tmp_path / "out", tmp_path / "ck")

    start("auto")
    assert read_choice(str(tmp_path / "metrics"))["algorithm"] == "grid"
    for s, name in ((0, "L"), (1, "R")):
        part = [r for r in rows if side[r["id"]] == s]
        write_batches(tmp_path / name, [part[len(part) // 2:]], start=1)
    before = spark.read.parquet(str(tmp_path / "out")).count()
    # S3J has two stateful operators where the grid has one: Spark refuses the checkpoint's state
    # metadata (a change with the same operators would be refused by the plan guard, "algorithm")
    with pytest.raises(Exception, match=r"STATEFUL_OPERATOR_NOT_MATCH|algorithm: checkpoint has 'grid'"):
        start("s3j")
    assert spark.read.parquet(str(tmp_path / "out")).count() == before  # the refused batch committed nothing
    start("auto")
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    m = get_metric("cosine")
    expected = oracle_pairs(np.arange(n), side.astype(np.int8), m.prepare(X.astype(np.float64)),
                            np.floor(ts / 60).astype(np.int64), m, 0.02, False)
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 60)) for r in out]
    assert len(expected) > 100 and len(got) == len(set(got)) and set(got) == expected
    stats = list(read_stats(str(tmp_path / "metrics"), "computation"))
    assert sum(s["pairs"] for s in stats) == len(expected)
    assert sum(s["records"] for s in stats) + sum(s.get("late", 0) for s in stats) == n  # each record counted once
    assert_stamped(tmp_path / "metrics", "computation")
    totals, _ = summary(str(tmp_path / "metrics"))
    assert 1.0 <= totals["duplication_ratio"] <= 3.0


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


def test_grid_settings_fail_before_start(spark, tmp_path):
    stream = spark.readStream.format("driftjoin").option("dim", 8).load()
    with pytest.raises(ValueError, match="algorithm must be one of"):
        similarity_join(stream, threshold=0.1, dim=8, algorithm="grids")
    with pytest.raises(ValueError, match="balance moves S3J worksets"):
        similarity_join(stream, threshold=0.1, dim=8, algorithm="grid", balance="s3j", metrics_dir=str(tmp_path / "x"))
    with pytest.raises(ValueError, match="block_bytes"):
        similarity_join(stream, threshold=0.1, dim=8, algorithm="grid", block_bytes=10)
    with pytest.raises(ValueError, match="sample="):
        similarity_join(stream, threshold=0.1, dim=8, sample=np.zeros((10, 3)))
