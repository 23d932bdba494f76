"""Checkpoints written before the operators took one settings object and one shape restart exactly.

Issue 34 moved the code that writes and reads operator state (the similarity paths' modules:
``similarity/metric.py`` became ``spaces.py``, ``plan.py`` went into ``s3j.py`` and ``shape.py``;
the old-state refusal and the plan guard became one each; the settings objects build every
plan). ``data/checkpoints_before_i34.tar.gz`` holds checkpoints of one streaming query of every
operator and path, written by the code before that change (driftjoin at commit 4064185, see
``data/README.md``), each with the rows of its first run (``<name>.rows.json``) and the rows of
one run of that code over all of the input (``<name>.full.json``). Each query is restarted from
its checkpoint, unpacked into a temporary folder (not the one it was written in:
:func:`driftjoin.relocate_checkpoint` makes it name its own files first), with more input: the
rows of the first run and of the restart together must hold no row twice and be the rows the
earlier code gave over all of the input: the restart neither loses, repeats nor changes a row.

The stored plans themselves are compared without running anything by ``test_plan_fingerprints.py``.
"""

from __future__ import annotations

import json
import shutil
import sys
import tarfile
import tempfile
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

DATA = Path(__file__).parent / "data" / "checkpoints_before_i34.tar.gz"
#: The columns compared (the ones every run gives alike: no worker, emit or ingest times).
PAIRS = ("left_id", "right_id", "distance", "window_start", "window_end")


def _vectors(spark, total: int, dim: int = 4, seed: int = 7, stream: int = 0) -> DataFrame:
    return (spark.readStream.format("driftjoin").option("dim", dim).option("total", total).option("pace", "false")
            .option("rate", 10).option("seed", seed).option("stream", stream).option("start", 0)
            .option("max_records_per_batch", 40).load())


def _words(spark, total: int) -> DataFrame:
    """Strings of 8 letters over {a, b} (the signs of a vector's elements): many at edit distance 1."""
    return _vectors(spark, total, dim=8).select("id", "ts", F.array_join(F.transform(
        "vector", lambda x: F.when(x > 0, F.lit("a")).otherwise(F.lit("b"))), "").alias("name"))


def _sets(spark, total: int) -> DataFrame:
    return _vectors(spark, total, dim=6).select("id", "ts", F.transform(
        "vector", lambda x, i: F.concat(i.cast("string"), F.lit(":"), F.floor(x * 2).cast("string"))).alias("tokens"))


def _keyed(spark, total: int, stream: int) -> DataFrame:
    return _vectors(spark, total, dim=2, seed=11, stream=stream).select(
        F.floor(F.col("vector")[0] * 4).cast("long").alias("k"), "id", "ts")


def _docs(spark, total: int) -> DataFrame:
    return (spark.readStream.format("driftjoin-docs").option("kind", "serverlog").option("total", total)
            .option("pace", "false").option("rate", 20).option("seed", 5).option("start", 0)
            .option("max_docs_per_batch", 60).load())


def _queries() -> dict[str, tuple[Callable[[Any, int], DataFrame], tuple[str, ...]]]:
    """Each query as a function of the session and the number of records, and the columns compared."""
    from driftjoin import equi_join, natural_join, similarity_join, topk_set_join

    words = ["aaaaaaaa", "abababab", "bbbbbbbb", "aabbaabb", "babababa", "abbbbbba", "baaaaaab", "aaaabbbb"]
    sets = [[f"{i}:{v}" for i, v in enumerate(row)] for row in ([0, 1, -1, 0, 1, -1], [1, 1, 0, 0, -1, -1],
                                                                 [0, 0, 0, 0, 0, 0], [-1, -1, 1, 1, 0, 0])]
    # tumbling windows in event time (the records' synthetic times): the same windows in every run
    windows = {"window": "10 seconds", "time_col": "ts", "watermark": "2 seconds"}
    vectors = {"threshold": 0.5, "metric": "euclidean", "parallelism": 2, "dim": 4, **windows}
    return {
        # the vector paths: S3J fused, S3J in two stages (balanced), the grid
        "s3j": (lambda spark, n: similarity_join(_vectors(spark, n), **vectors, algorithm="s3j"), PAIRS),
        "s3j_two_stage": (lambda spark, n: similarity_join(_vectors(spark, n), **vectors, algorithm="s3j",
                                                           balance="s3j"), PAIRS),
        "grid": (lambda spark, n: similarity_join(_vectors(spark, n), **vectors, algorithm="grid"), PAIRS),
        # the metric-space path: S3J on strings, PassJoin, prefix filtering on token sets
        "metric_s3j": (lambda spark, n: similarity_join(_words(spark, n), threshold=1, metric="levenshtein",
                                                        value_col="name", algorithm="s3j", sample=words,
                                                        parallelism=2, **windows), PAIRS),
        "passjoin": (lambda spark, n: similarity_join(_words(spark, n), threshold=1, metric="levenshtein",
                                                      value_col="name", algorithm="passjoin", parallelism=2,
                                                      within="5 seconds", time_col="ts", watermark="2 seconds"),
                     PAIRS),
        "prefix": (lambda spark, n: similarity_join(_sets(spark, n), threshold=0.5, metric="jaccard",
                                                    value_col="tokens", sample=sets, parallelism=2,
                                                    **windows), PAIRS),
        # the other operators
        "topk_probe": (lambda spark, n: topk_set_join(_sets(spark, n), k=5, within="10 seconds", parallelism=2,
                                                      design="probe"),
                       ("kind", "left_id", "right_id", "similarity", "change_time", "seq")),
        "natural": (lambda spark, n: natural_join(_docs(spark, n * 9 // 4), window="5 seconds", time_col="ts",
                                                  watermark="1 second", partitions=2, theta=0.0),
                    ("left_id", "right_id", "window_start", "window_end")),
        "equi_interval": (lambda spark, n: equi_join(_keyed(spark, n, 0), _keyed(spark, n, 1), on="k",
                                                     algorithm="phj", within="3 seconds", time_col="ts",
                                                     parallelism=2), ("k", "left_id", "right_id")),
        "equi_dispatcher": (lambda spark, n: equi_join(_keyed(spark, n, 0), _keyed(spark, n, 1).drop("ts"), on="k",
                                                       algorithm="biclique", parallelism=2, routing="dispatcher",
                                                       partitions=2), ("k", "left_id", "right_id")),
    }


#: Records of the first run and of all of the input.
BEFORE, AFTER = 80, 160


def _run(df: DataFrame, checkpoint: Path) -> list[dict]:
    rows: list[dict] = []
    q = (df.writeStream.foreachBatch(lambda b, _: rows.extend(r.asDict() for r in b.collect()))
         .option("checkpointLocation", str(checkpoint)).trigger(availableNow=True).start())
    q.awaitTermination()
    return rows


def _canonical(rows: list[dict], keys: tuple[str, ...]) -> list[tuple]:
    return sorted(tuple(str(row[k]) for k in keys) for row in rows)


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("before_i34")
    with tarfile.open(DATA) as tar:
        tar.extractall(folder, filter="data")
    return folder


@pytest.fixture
def docs_spark(spark):
    from driftjoin.spark.sources.documents import register

    register(spark)
    return spark


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(_queries()))
def test_a_checkpoint_written_before_the_change_restarts_exactly(docs_spark, checkpoints, name):
    from driftjoin import relocate_checkpoint

    build, keys = _queries()[name]
    first = json.loads((checkpoints / f"{name}.rows.json").read_text())
    full = json.loads((checkpoints / f"{name}.full.json").read_text())
    assert first and len(full) > len(first), "the fixture's runs produced rows, and more over all of the input"
    # written in another folder: its stateful operators' metadata name schema files there
    assert relocate_checkpoint(str(checkpoints / name)) >= 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        restarted = _run(build(docs_spark, AFTER), checkpoints / name)
    assert restarted, "the restarted query processed the new input"
    joined = _canonical(first + restarted, keys)
    assert len(set(joined)) == len(joined), "a row came out twice across the restart"
    assert joined == _canonical(full, keys), "the restart differs from the earlier code's run over all of the input"


def _written(build: Callable[[], DataFrame], checkpoint: Path, attempts: int = 3) -> list[dict]:
    """A run of the writer; on a loaded machine a Python worker can miss Spark's connect-back time:
    the run starts again from an empty checkpoint."""
    for attempt in range(attempts):
        try:
            return _run(build(), checkpoint)
        except Exception as e:  # noqa: BLE001 - only the worker's start is retried
            if "failed to connect back" not in str(e) or attempt == attempts - 1:
                raise
            shutil.rmtree(checkpoint, ignore_errors=True)
    raise AssertionError("unreachable")


def write_fixture(target: Path, names: list[str]) -> None:
    """Write the fixture into ``target`` (a ``.tar.gz``) with the driftjoin first on ``PYTHONPATH``
    (``data/README.md``): each query's first run and its run over all of the input. Given
    ``names``, only those queries are run again; the others are kept from ``target``."""
    from driftjoin.spark.runtime.session import local_session
    from driftjoin.spark.sources.documents import register

    queries = _queries()
    work = Path(tempfile.mkdtemp(prefix="before-i34-"))
    keep = [n for n in queries if names and n not in names]
    if keep:
        with tarfile.open(target) as tar:
            tar.extractall(work, filter="data", members=[m for m in tar.getmembers()
                                                         if m.name.split("/")[0].split(".")[0] in keep])
    spark = local_session(parallelism=2, app_name="before-i34", cores=2)
    register(spark)
    for name, (build, _) in queries.items():
        if name in keep:
            continue
        for rows, n, checkpoint in ((f"{name}.rows.json", BEFORE, work / name),
                                    (f"{name}.full.json", AFTER, work / "full" / name)):
            (work / rows).write_text(json.dumps(_written(lambda: build(spark, n), checkpoint), default=str))
    spark.stop()
    with tarfile.open(target, "w:gz") as tar:
        for name in queries:
            tar.add(work / name, arcname=name)
            tar.add(work / f"{name}.rows.json", arcname=f"{name}.rows.json")
            tar.add(work / f"{name}.full.json", arcname=f"{name}.full.json")
    shutil.rmtree(work)


if __name__ == "__main__":
    write_fixture(Path(sys.argv[1]), sys.argv[2:])
