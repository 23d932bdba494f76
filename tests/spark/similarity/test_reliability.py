"""A fuzzed stream of malformed lines mixed with valid ones never stops the query, every bad row
reaches the dead-letter output with a reason, the valid rows' result equals the oracle; a query
restarted from its checkpoint (same package version) goes on exactly."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
from pyspark.sql import functions as F

from driftjoin import invalid_records, similarity_join
from driftjoin.distance import get_metric
from driftjoin.s3j.oracle import oracle_pairs

pytestmark = [pytest.mark.spark, pytest.mark.slow]

SCHEMA = "id long, vector array<double>, ts double"


def _garbage(rnd: random.Random) -> str:
    return rnd.choice([
        "{not json", "", "[1, 2, 3]", '{"id": "x", "vector": [0.1, 0.2], "ts": 1}', '{"id": 5}',
        '{"vector": [0.1, 0.2], "ts": 1}', '{"id": 7, "vector": "abc", "ts": 1}', '{"id": 8, "vector": [0.1], "ts": 1}',
        '{"id": 9, "vector": [0.1, NaN], "ts": 1}', '{"id": 10, "vector": [0.0, 0.0], "ts": 1}',
        '{"id": 11, "vector": [1e309, 0], "ts": 1}', '{"id": 12, "vector": [0.1, null], "ts": 1}',
        "\x00\x01binary", '{"id": 13, "vector": [0.1, 0.2, 0.3], "ts": 1}',
    ])


def test_fuzzed_stream_keeps_running_and_valid_rows_equal_oracle(spark, tmp_path):
    rnd = random.Random(17)
    rng = np.random.default_rng(17)
    valid = []
    (tmp_path / "in").mkdir()
    lines_bad = 0
    for b in range(3):
        with open(tmp_path / "in" / f"b{b}.json", "w") as f:
            for k in range(150):
                if rnd.random() < 0.3:
                    f.write(_garbage(rnd) + "\n")
                    lines_bad += 1
                else:
                    rid = 1000 + b * 1000 + k
                    v = rng.uniform(-1, 1, 2).tolist()
                    valid.append((rid, v))
                    f.write(json.dumps({"id": rid, "vector": v, "ts": 30.0}) + "\n")
    stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
              .withColumn("ts", F.col("ts").cast("timestamp")))
    pairs = similarity_join(stream, threshold=0.02, metric="angular", parallelism=2, dim=2, window="1 minute", ingest_col="ts")
    q = (pairs.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    dead = invalid_records(stream, metric="angular", dim=2)
    dq = (dead.writeStream.format("parquet").option("path", str(tmp_path / "dead"))
          .option("checkpointLocation", str(tmp_path / "ck_dead")).trigger(availableNow=True).start())
    q.awaitTermination()
    dq.awaitTermination()
    assert q.exception() is None and dq.exception() is None
    m = get_metric("angular")
    ids = np.array([r for r, _ in valid])
    vec = m.prepare(np.array([v for _, v in valid]))
    expected = oracle_pairs(ids, np.zeros(len(ids), np.int8), vec, np.zeros(len(ids), np.int64), m, 0.02, True)
    got = [(r.left_id, r.right_id, 0) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert len(got) == len(set(got)) and set(got) == expected
    dead_rows = spark.read.parquet(str(tmp_path / "dead")).collect()
    assert all(r.reason for r in dead_rows)
    # every garbage line that Spark turns into a row is a dead letter (blank lines are no rows)
    blank = sum(1 for b in range(3) for line in open(tmp_path / "in" / f"b{b}.json") if not line.strip())
    assert len(dead_rows) == lines_bad - blank
    assert not {r.id for r in dead_rows if r.id is not None} & set(ids.tolist())


def test_restart_from_checkpoint_continues_exactly(spark, tmp_path):
    rng = np.random.default_rng(8)
    X = rng.uniform(-1, 1, (600, 2))
    (tmp_path / "in").mkdir()

    def write(b):
        with open(tmp_path / "in" / f"b{b}.json", "w") as f:
            for i in range(b * 100, (b + 1) * 100):
                f.write(json.dumps({"id": i, "vector": X[i].tolist(), "ts": float(i // 300 * 60)}) + "\n")

    def run():
        stream = (spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
                  .withColumn("ts", F.col("ts").cast("timestamp")))
        pairs = similarity_join(stream, threshold=0.03, metric="angular", parallelism=2, dim=2, window="1 minute", ingest_col="ts")
        q = (pairs.writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()

    for b in range(3):
        write(b)
    run()  # first run: half of the data, then the query stops
    for b in range(3, 6):
        write(b)
    run()  # restarted from the checkpoint: state (worksets, window members) is read back
    m = get_metric("angular")
    expected = oracle_pairs(np.arange(600), np.zeros(600, np.int8), m.prepare(X), (np.arange(600) // 300).astype(np.int64), m, 0.03, True)
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 60)) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert len(got) == len(set(got)) and set(got) == expected
