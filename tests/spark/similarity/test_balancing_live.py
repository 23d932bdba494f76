"""Live rebalancing on Spark: worksets move between workers while the query runs, exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from pyspark.sql import functions as F

from driftjoin import similarity_join
from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.similarity.control import CONTROLLERS

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.parametrize("policy, split", [("greedy", False), ("s3j", True)])
def test_moves_inside_windows_keep_the_stream_exact(spark, tmp_path, policy, split):
    rng = np.random.default_rng(21)
    n, n_batches = 1200, 6
    # all data near one space-partition centroid: worker 0 creates every workset
    X = rng.normal(0.5, 0.15, (n, 2))
    side = rng.integers(0, 2, n)
    ts = np.sort(rng.uniform(0, 100, n))  # two windows, moves happen inside them
    for b in range(n_batches):
        for s, name in ((0, "L"), (1, "R")):
            d = tmp_path / name
            d.mkdir(exist_ok=True)
            with open(d / f"b{b:03d}.json", "w") as f:
                for i in range(b * n // n_batches, (b + 1) * n // n_batches):
                    if side[i] == s:
                        f.write(json.dumps({"id": i, "vector": X[i].tolist(), "ts": float(ts[i])}) + "\n")

    def read(name):
        return (spark.readStream.schema("id long, vector array<double>, ts double").option("maxFilesPerTrigger", 1)
                .json(str(tmp_path / name)).withColumn("ts", F.col("ts").cast("timestamp")))

    metrics = str(tmp_path / "metrics")
    pairs = similarity_join(read("L"), read("R"), threshold=0.05, metric="euclidean", parallelism=3, dim=2,
                            window="1 minute", ingest_col="ts", metrics_dir=metrics,
                            centroids=[[0.5, 0.5], [5.0, 5.0], [-5.0, -5.0]], balance=policy,
                            balance_options={"monitoring_window": 0.001, "di_threshold": 0.05, "split": split})
    q = (pairs.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    controller = CONTROLLERS[metrics]
    assert controller.decisions, "the controller never moved a workset"
    workers = {s["worker"] for s in read_stats(metrics, "computation") if s["pairs"] > 0}
    assert len(workers) >= 2, "after rebalancing more than one worker must produce pairs"
    out = spark.read.parquet(str(tmp_path / "out")).collect()
    m = get_metric("euclidean")
    expected = oracle_pairs(np.arange(n), side.astype(np.int8), X, np.floor(ts / 60).astype(np.int64), m, 0.05, False)
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 60)) for r in out]
    assert len(got) == len(set(got))
    assert set(got) == expected
