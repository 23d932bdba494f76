"""similarity_join on token sets that sit exactly on thresholds binary floating point cannot write
(issue 33: 7 of 10 tokens shared is distance 3/10 and joins at ``threshold=0.3``), static and
streaming, through prefix filtering, S3J and ``auto``, against the exact oracle of
tests/metric/oracle.py (Jaccard distances as fractions); the reported distance is the nearest float
of the exact one. Several joins share one query (a union told apart by a ``tag`` column)."""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import pytest
from pyspark.sql import functions as F

from driftjoin import similarity_join
from tests.metric.oracle import jaccard, oracle

from ..helpers import run_available_now, write_batches

pytestmark = pytest.mark.spark

W = [f"w{i}" for i in range(7)]
U = [f"u{i}" for i in range(9)]
V = ["v0", "v1", "v2"]
#: distances 3/10 (ids 0-1), 2/11 and 3/11 (with 2), 7/10 (3-4), 1/10 (5-6), 1/11 and 2/11 (with 7)
SETS = [W + ["a", "b"], W + ["c"], W + ["a", "b", "c", "d"], V + ["d0", "d1", "d2", "d3"], V + ["e0", "e1", "e2"],
        U, U + ["g"], U + ["g", "h"], ["a", "v0"], ["c", "d"]]


def _want(t) -> Counter:
    return oracle([(i, 0, s, 0) for i, s in enumerate(SETS)], jaccard, t, True)


def _check(rows, t) -> None:
    got = Counter((r.left_id, r.right_id) for r in rows)
    assert got == _want(t), t
    assert all(r.distance == float(jaccard(SETS[r.left_id], SETS[r.right_id])) for r in rows)


def _union(joins):
    frames = [df.withColumn("tag", F.lit(tag)) for tag, df in joins.items()]
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


#: just below 3/10, and the same float as 0.3: only if the exact number reaches the workers are the
#: pairs at 3/10 left out
BELOW = Fraction(3, 10) - Fraction(1, 10**18)


def test_static_pairs_on_the_threshold_join_in_every_algorithm(spark):
    df = spark.createDataFrame(list(enumerate(SETS)), "id long, toks array<string>")
    cases = {"s3j-0.3": ("s3j", 0.3), "auto-0.7": ("auto", 0.7),
             "prefix-0.1": ("prefix", 0.1), "prefix-below": ("prefix", BELOW)}
    joins = {tag: similarity_join(df, threshold=t, metric="jaccard", value_col="toks", algorithm=a, parallelism=2,
                                  window=None) for tag, (a, t) in cases.items()}
    rows = _union(joins).collect()
    for tag, (_, t) in cases.items():
        _check([r for r in rows if r.tag == tag], t)
    assert (0, 1) in _want(0.3) and (3, 4) in _want(0.7) and (5, 6) in _want(0.1)  # the pairs on the thresholds
    assert (0, 1) not in _want(BELOW) and float(BELOW) == 0.3


def test_streaming_pairs_on_the_threshold_join(spark, tmp_path):
    write_batches(tmp_path / "in", [[{"id": i, "toks": s, "ts": 1.0} for i, s in enumerate(SETS) if i % 2 == k]
                                    for k in (0, 1)])
    stream = (spark.readStream.schema("id long, toks array<string>, ts double").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))
    sample = spark.createDataFrame([(s,) for s in SETS], "toks array<string>")
    common = dict(threshold=0.3, metric="jaccard", value_col="toks", time_col="ts", window="1 hour",
                  watermark="1 hour", sample=sample, parallelism=2)
    pairs = _union({"prefix": similarity_join(stream, algorithm="prefix", **common),
                    "s3j": similarity_join(stream, algorithm="s3j", **common)})
    run_available_now(pairs, tmp_path / "out", tmp_path / "ck")
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    for tag in ("prefix", "s3j"):
        _check([r for r in rows if r.tag == tag], 0.3)
