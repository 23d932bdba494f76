"""SWOOP on Spark: the change stream replays into the same top-k as the Base oracle."""

from __future__ import annotations

import json
import os
import time

import pytest
from pyspark.sql import functions as F

from driftjoin.spark.topk import current_topk, invalid_sets, topk_set_join
from driftjoin.swoop import BaseTopK

pytestmark = pytest.mark.spark


def _stream_rows(n=300, seed=3):
    import random

    rnd = random.Random(seed)
    vocab = [f"t{i}" for i in range(40)]
    return [{"id": i, "tokens": rnd.sample(vocab[: 10 + i % 30], rnd.randint(1, 6)), "ts": float(i) * 0.5} for i in range(n)]


@pytest.mark.slow
def test_streaming_self_join_topk_equals_base(spark, tmp_path):
    rows = _stream_rows()
    (tmp_path / "in").mkdir()
    for b in range(3):
        with open(tmp_path / "in" / f"b{b}.json", "w") as f:
            for r in rows[b * 100:(b + 1) * 100]:
                f.write(json.dumps(r) + "\n")
        # one late set and one empty set in the last file
    with open(tmp_path / "in" / "b3.json", "w") as f:
        f.write(json.dumps({"id": 9999, "tokens": ["t1"], "ts": 1.0}) + "\n")
        f.write(json.dumps({"id": 9998, "tokens": [], "ts": 200.0}) + "\n")
    # the file source takes files in modification-time order: files written within one clock
    # tick would come in any order (b3 first makes every earlier set late)
    first_mtime = time.time() - 100
    for b in range(4):
        os.utime(tmp_path / "in" / f"b{b}.json", (first_mtime + b, first_mtime + b))
    stream = (spark.readStream.schema("id long, tokens array<string>, ts double").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))
    changes = topk_set_join(stream, k=5, similarity="jaccard", window="20 seconds")
    q = (changes.writeStream.format("parquet").option("path", str(tmp_path / "out"))
         .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    out = spark.read.parquet(str(tmp_path / "out"))
    base = BaseTopK(5, "jaccard", 20.0)
    for r in rows:
        base.insert(r["id"], r["tokens"], r["ts"])
    expected = {(p.first, p.second): round(p.sim, 12) for p in base.topk()}
    got = {(r.left_id, r.right_id): round(r.similarity, 12) for r in current_topk(out).collect()}
    assert got == expected
    late = out.where("kind = 'late'").collect()
    assert [r.left_id for r in late] == [9999]
    seqs = [r.seq for r in out.collect()]
    assert sorted(seqs) == list(range(len(seqs)))
    assert [r.reason for r in invalid_sets(spark.read.json(str(tmp_path / "in" / "b3.json"), schema="id long, tokens array<string>, ts double")
                                          .withColumn("ts", F.col("ts").cast("timestamp"))).collect()] == ["empty set"]


def test_static_two_stream_topk_equals_base(spark):
    rows = _stream_rows(120, seed=5)
    df = spark.createDataFrame([(r["id"], r["tokens"], r["ts"]) for r in rows], "id long, tokens array<string>, ts double")
    df = df.withColumn("ts", F.col("ts").cast("timestamp"))
    left, right = df.where("id % 2 = 0"), df.where("id % 2 = 1")
    changes = topk_set_join(left, right, k=4, similarity="cosine", window="15 seconds")
    base = BaseTopK(4, "cosine", 15.0, two_stream=True)
    for r in sorted(rows, key=lambda r: (r["ts"], r["id"] % 2)):
        base.insert(r["id"], r["tokens"], r["ts"], "R" if r["id"] % 2 == 0 else "S")
    expected = {(p.first, p.second): round(p.sim, 12) for p in base.topk()}
    got = {(r.left_id, r.right_id): round(r.similarity, 12) for r in current_topk(changes).collect()}
    assert got == expected


def test_bad_settings_fail_fast(spark):
    df = spark.createDataFrame([(1, ["a"], 0.0)], "id long, tokens array<string>, ts double")
    with pytest.raises(ValueError, match="k must be"):
        topk_set_join(df, k=0)
    with pytest.raises(ValueError, match="similarity"):
        topk_set_join(df, k=3, similarity="euclid")
    with pytest.raises(TypeError, match="tokens_col"):
        topk_set_join(df.withColumn("tokens", F.lit("x")), k=3)
