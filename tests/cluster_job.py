"""A similarity join run against a Spark standalone cluster (separate master, worker and
executor processes). Used by tests/spark/runtime/test_cluster.py; prints 'OK <pairs>' on success.

    python tests/cluster_job.py spark://127.0.0.1:7077 WORKDIR

The input files, the session and the check against the oracle are shared with
tests/autoscale_cluster_job.py (the same join while executors come and go).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from driftjoin import similarity_join
from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.spark.runtime.jvm import executor_count
from driftjoin.spark.runtime.session import cluster_session

THRESHOLD = 0.02
METRIC = "angular"


class Inputs:
    """``n`` 2-D records over two sides, in ``n_batches`` files per side (one file per micro-batch)."""

    def __init__(self, work: Path, n: int, n_batches: int, seed: int = 4) -> None:
        rng = np.random.default_rng(seed)
        self.work, self.n = work, n
        self.X = rng.uniform(-1, 1, (n, 2))
        self.side = rng.integers(0, 2, n)
        self.ts = np.sort(rng.uniform(0, 100, n))
        for b in range(n_batches):
            for s, name in ((0, "L"), (1, "R")):
                d = work / name
                d.mkdir(parents=True, exist_ok=True)
                with open(d / f"b{b:03d}.json", "w") as f:
                    for i in range(b * n // n_batches, (b + 1) * n // n_batches):
                        if self.side[i] == s:
                            f.write(json.dumps({"id": i, "vector": self.X[i].tolist(), "ts": float(self.ts[i])}) + "\n")
                os.utime(d / f"b{b:03d}.json", (1_700_000_000 + b, 1_700_000_000 + b))  # the file source's order

    def read(self, spark: SparkSession, name: str) -> DataFrame:
        return (spark.readStream.schema("id long, vector array<double>, ts double").option("maxFilesPerTrigger", 1)
                .json(str(self.work / name)).withColumn("ts", F.col("ts").cast("timestamp")))

    def pairs(self, spark: SparkSession) -> DataFrame:
        return similarity_join(self.read(spark, "L"), self.read(spark, "R"), threshold=THRESHOLD, metric=METRIC, parallelism=2,
                               dim=2, window="1 minute", ingest_col="ts", metrics_dir=str(self.work / "metrics"),
                               balance="greedy", balance_options={"monitoring_window": 0.001, "di_threshold": 0.01})

    def check(self, spark: SparkSession) -> int:
        """The output against the oracle: no pair missing, none extra, none twice. Returns the pairs."""
        out = spark.read.parquet(str(self.work / "out")).collect()
        m = get_metric(METRIC)
        expected = oracle_pairs(np.arange(self.n), self.side.astype(np.int8), m.prepare(self.X),
                                np.floor(self.ts / 60).astype(np.int64), m, THRESHOLD, False)
        got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 60)) for r in out]
        assert len(got) == len(set(got)), f"{len(got) - len(set(got))} duplicate pairs"
        assert set(got) == expected, f"{len(set(got) - expected)} pairs too many, {len(expected - set(got))} missing"
        return len(got)


def main(master: str, work: Path) -> None:
    inputs = Inputs(work, 800, 4)
    spark = cluster_session(master, 2, "driftjoin-cluster-test", max_executors=2)
    executors = executor_count(spark)
    q = (inputs.pairs(spark).writeStream.format("parquet").option("path", str(work / "out"))
         .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    pairs = inputs.check(spark)
    hosts = {r[0] for r in spark.sparkContext.parallelize(range(8), 4).map(lambda _: os.getpid()).distinct().map(lambda p: (p,)).collect()}
    assert os.getpid() not in hosts, "tasks ran in the driver process"
    print(f"OK {pairs} pairs, {executors} executors, {len(hosts)} executor python processes")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
