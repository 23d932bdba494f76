"""``equi_join(algorithm="spark")`` and ``algorithm="auto"`` (:mod:`driftjoin.hypercube.choice`).

Spark's own join returns the rows SHC returns, named and ordered alike, dead letters left out, on
typed and composite keys and interval joins (static). ``auto`` chooses Spark's join when no key
of its sample (a static input: the input) is heavy and SHC when one is, writes the choice into the
checkpoint's plan, continues a stream exactly across a restart with the same choice, and refuses
a restart whose sample would choose the other engine before any batch runs.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import os
import random
import time
from decimal import Decimal

import pytest
from pyspark.sql import functions as F

from driftjoin.spark.equi.api import equi_join
from driftjoin.spark.runtime.plan_store import read_plans

pytestmark = pytest.mark.spark

SCHEMA = "id long, k long, t double, v string"


def _typed(spark):
    rng = random.Random(3)
    t0 = dt.datetime(2024, 5, 1, 12, 0, 0, 123456)
    left = [(i, f"g{rng.randrange(3)}", rng.choice([0, 0, 0, 1, 2, 3, None]), t0 + dt.timedelta(seconds=rng.uniform(0, 60)),
             Decimal(f"{i}.25"), bytes([i % 256, 7])) for i in range(150)]
    right = [(i, f"g{rng.randrange(3)}", rng.choice([0, 0, 1, 2, 3, 4]), t0 + dt.timedelta(seconds=rng.uniform(0, 60)),
              float(i) / 3 if i % 7 else float("nan")) for i in range(120)]
    right += [(500, "g1", 2, None, 1.0)]  # no time: a dead letter of the interval join
    ldf = spark.createDataFrame(left, "id int, grp string, k int, at timestamp, amount decimal(10,2), blob binary")
    rdf = spark.createDataFrame(right, "id long, grp string, k long, at timestamp, score double")
    return ldf, rdf


def test_spark_and_auto_return_shcs_rows_on_typed_composite_keys(spark, caplog) -> None:
    ldf, rdf = _typed(spark)
    for kw in ({}, {"within": "5 seconds", "time_col": "at"}):
        want = equi_join(ldf, rdf, on=["grp", "k"], algorithm="shc", parallelism=3, options={"min_heavy": 2}, **kw)
        rows = sorted(map(repr, want.collect()))
        assert len(rows) > 100
        for algorithm in ("spark", "auto"):
            with caplog.at_level(logging.INFO, logger="driftjoin"):
                got = equi_join(ldf, rdf, on=["grp", "k"], algorithm=algorithm, parallelism=3, **kw)
            assert got.columns == want.columns
            assert [f.dataType for f in got.schema] == [f.dataType for f in want.schema]
            assert sorted(map(repr, got.collect())) == rows, (algorithm, kw)
    # the choice follows SHC's definition at p = 3 (epsilon 1/6), counted here apart
    counts: dict = {}
    for df in (ldf, rdf):
        for r in df.where(F.col("k").isNotNull()).select("grp", "k").collect():
            counts[(r.grp, r.k)] = counts.get((r.grp, r.k), 0) + 1
    n = sum(counts.values())
    heavy = any(m > (1 / 3 - 1 / 12) * n for m in counts.values())
    said = [r.getMessage() for r in caplog.records if "algorithm='auto'" in r.getMessage()]
    assert said and all(("SHC" if heavy else "Spark's own join") in m for m in said)


def test_auto_chooses_by_heavy_keys_static(spark, caplog) -> None:
    rng = random.Random(5)
    uniform = [(i, rng.randrange(200), 0.0, "u") for i in range(800)]
    skewed = [(i, 7 if i % 3 == 0 else rng.randrange(200), 0.0, "s") for i in range(800)]
    for rows, engine in ((uniform, "Spark's own join"), (skewed, "SHC")):
        left = spark.createDataFrame(rows, SCHEMA)
        right = spark.createDataFrame(rows[::2], SCHEMA)
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="driftjoin"):
            got = equi_join(left, right, on="k", algorithm="auto", parallelism=4)
        assert any(engine in r.getMessage() for r in caplog.records)
        expected = {(a[0], b[0]) for a in rows for b in rows[::2] if a[1] == b[1]}
        ids = [(r.left_id, r.right_id) for r in got.select("left_id", "right_id").collect()]
        assert len(ids) == len(set(ids)) and set(ids) == expected


def _write(folder, name: str, batch: int, rows: list[tuple]) -> None:
    (folder / name).mkdir(parents=True, exist_ok=True)
    path = folder / name / f"b{batch:03d}.json"
    path.write_text("".join(json.dumps({"id": i, "k": k, "t": t, "v": v}) + "\n" for i, k, t, v in rows))
    stamp = time.time() - 3600 + batch
    os.utime(path, (stamp, stamp))


def test_auto_on_a_stream_keeps_its_choice_across_restarts_and_refuses_another(spark, tmp_path) -> None:
    rng = random.Random(9)
    batches = [[(b * 1000 + i, rng.randrange(300), float(i), f"x{i}") for i in range(150)] for b in range(4)]
    src = tmp_path / "in"
    uniform_sample = tuple(spark.createDataFrame(batches[0], SCHEMA) for _ in range(2))
    hot = [(i, 1, 0.0, "hot") for i in range(100)]
    skewed_sample = tuple(spark.createDataFrame(hot + batches[0], SCHEMA) for _ in range(2))

    def run(sample):
        read = [spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src / n)) for n in "LR"]
        joined = equi_join(*read, on="k", algorithm="auto", sample=sample, parallelism=3,
                           metrics_dir=str(tmp_path / "metrics"))
        q = (joined.select("left_id", "right_id").writeStream.format("parquet").option("path", str(tmp_path / "out"))
             .option("checkpointLocation", str(tmp_path / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()
        return q

    for b in range(2):
        _write(src, "L", b, batches[b])
        _write(src, "R", b, batches[b][::-1])
    run(uniform_sample)
    (plan,) = read_plans(str(tmp_path / "ck"))
    assert plan["settings"]["algorithm"] == "spark"
    for b in range(2, 4):
        _write(src, "L", b, batches[b])
        _write(src, "R", b, batches[b][::-1])
    with pytest.raises(Exception, match="algorithm: checkpoint has 'spark', this query has 'shc'"):
        run(skewed_sample)
    q = run(uniform_sample)
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 2
    rows = [r for batch in batches for r in batch]
    expected = {(a[0], b[0]) for a in rows for b in rows if a[1] == b[1]}
    got = [(r.left_id, r.right_id) for r in spark.read.parquet(str(tmp_path / "out")).collect()]
    assert len(got) == len(set(got)) and set(got) == expected


def test_a_sample_seeds_shc_so_a_hot_key_is_spread_from_the_first_batch_exactly_across_restarts(spark, tmp_path) -> None:
    from driftjoin.spark.runtime.stats import read_stats

    rng = random.Random(5)
    hot = 7
    batches = [[(b * 1000 + i, hot if i % 2 else rng.randrange(300), float(i), f"x{i}") for i in range(160)]
               for b in range(4)]
    rows = [r for batch in batches for r in batch]
    expected = {(a[0], b[0]) for a in rows for b in rows if a[1] == b[1]}
    skewed_sample = tuple(spark.createDataFrame(batches[0], SCHEMA) for _ in range(2))
    uniform_sample = tuple(spark.createDataFrame([r for r in batches[0] if r[1] != hot], SCHEMA) for _ in range(2))

    def run(name: str, sample, upto: int) -> tuple[set, list[dict]]:
        src, out = tmp_path / name / "in", tmp_path / name / "out"
        for b in range(upto):
            _write(src, "L", b, batches[b])
            _write(src, "R", b, batches[b][::-1])
        read = [spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(src / n)) for n in "LR"]
        joined = equi_join(*read, on="k", algorithm="shc", sample=sample, parallelism=3,
                           metrics_dir=str(tmp_path / name / "metrics"))
        q = (joined.select("left_id", "right_id").writeStream.format("parquet").option("path", str(out))
             .option("checkpointLocation", str(tmp_path / name / "ck")).trigger(availableNow=True).start())
        q.awaitTermination()
        got = [(r.left_id, r.right_id) for r in spark.read.parquet(str(out)).collect()]
        assert len(got) == len(set(got))
        return set(got), list(read_stats(str(tmp_path / name / "metrics"), "equi_worker"))

    def first_batch_share(stats: list[dict]) -> float:
        produced = [s["produced"] for s in stats if s["batch"] == 0]
        return max(produced) / sum(produced)

    got, stats = run("seeded", skewed_sample, 2)
    assert got == {(a, b) for a, b in expected if a < 2000 and b < 2000}
    assert first_batch_share(stats) < 0.6  # the hot key's 6,400 pairs of batch 0 on its grid of workers
    _, plain = run("plain", None, 1)
    assert first_batch_share(plain) > 0.9  # without a sample: all of them at the hot key's hash worker
    got, _ = run("seeded", uniform_sample, 4)  # a restart with another sample: the saved bindings route
    assert got == expected


def test_shc_refuses_a_sample_for_a_static_input(spark) -> None:
    df = spark.createDataFrame([(1, 1, 0.0, "a")], SCHEMA)
    with pytest.raises(ValueError, match="sample= is for streams with algorithm='shc': a static input is counted whole"):
        equi_join(df, df, on="k", algorithm="shc", sample=(df, df), parallelism=2)
