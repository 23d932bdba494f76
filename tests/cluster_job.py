"""A similarity join run against a Spark standalone cluster (separate master, worker and
executor processes). Used by tests/spark/test_cluster.py; prints 'OK <pairs>' on success.

    python tests/cluster_job.py spark://127.0.0.1:7077 WORKDIR
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from driftjoin import similarity_join
from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.spark.session import CHANGELOG, ROCKSDB


def main(master: str, work: Path) -> None:
    # the driver-side Python runners (stateful processors, listeners) start PYSPARK_PYTHON
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    rng = np.random.default_rng(4)
    n, n_batches = 800, 4
    X = rng.uniform(-1, 1, (n, 2))
    side = rng.integers(0, 2, n)
    ts = np.sort(rng.uniform(0, 100, n))
    for b in range(n_batches):
        for s, name in ((0, "L"), (1, "R")):
            d = work / name
            d.mkdir(parents=True, exist_ok=True)
            with open(d / f"b{b:03d}.json", "w") as f:
                for i in range(b * n // n_batches, (b + 1) * n // n_batches):
                    if side[i] == s:
                        f.write(json.dumps({"id": i, "vector": X[i].tolist(), "ts": float(ts[i])}) + "\n")
    spark = (SparkSession.builder.master(master).appName("driftjoin-cluster-test")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false").config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.adaptive.enabled", "false").config("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
             .config(CHANGELOG, "true").config("spark.pyspark.python", sys.executable).config("spark.pyspark.driver.python", sys.executable)
             .config("spark.python.authenticate.socketTimeout", "120s").config("spark.executor.memory", "1g").config("spark.cores.max", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    executors = spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1
    schema = "id long, vector array<double>, ts double"

    def read(name: str):
        return (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(work / name))
                .withColumn("ts", F.col("ts").cast("timestamp")))

    pairs = similarity_join(read("L"), read("R"), threshold=0.02, metric="angular", parallelism=2, dim=2,
                            window="1 minute", ingest_col="ts", metrics_dir=str(work / "metrics"),
                            balance="greedy", balance_options={"monitoring_window": 0.001, "di_threshold": 0.01})
    q = (pairs.writeStream.format("parquet").option("path", str(work / "out"))
         .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    out = spark.read.parquet(str(work / "out")).collect()
    hosts = {r[0] for r in spark.sparkContext.parallelize(range(8), 4).map(lambda _: os.getpid()).distinct().map(lambda p: (p,)).collect()}
    m = get_metric("angular")
    expected = oracle_pairs(np.arange(n), side.astype(np.int8), m.prepare(X), np.floor(ts / 60).astype(np.int64), m, 0.02, False)
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 60)) for r in out]
    assert len(got) == len(set(got)), "duplicates"
    assert set(got) == expected, f"{len(set(got) ^ expected)} pairs differ"
    assert os.getpid() not in hosts, "tasks ran in the driver process"
    print(f"OK {len(got)} pairs, {executors} executors, {len(hosts)} executor python processes")
    spark.stop()


if __name__ == "__main__":
    main(sys.argv[1], Path(sys.argv[2]))
