"""End-to-end Spark tests of natural_join against a brute-force natural join per window."""

from __future__ import annotations

import itertools
import json
import os

import pytest
from pyspark.sql import functions as F

from driftjoin.schemafree.document import flatten
from driftjoin.schemafree.generator import nobench_documents, server_log_documents
from driftjoin.schemafree.window import TimeWindow
from driftjoin.spark.natural import invalid_documents, natural_join, natural_join_metrics

pytestmark = pytest.mark.spark

COMBOS = [("ag", "fptree"), ("sc", "hash"), ("ds", "nested")]


def brute_force(docs: dict, window_of: dict, side_of: dict | None = None) -> set[tuple]:
    """Every joining pair per window by plain set logic; (left, right, window)."""
    flat = {i: flatten(d) for i, d in docs.items()}
    by_window: dict[int, list] = {}
    for i in sorted(docs):
        by_window.setdefault(window_of[i], []).append(i)
    pairs = set()
    for w, members in by_window.items():
        for a, b in itertools.combinations(members, 2):
            if side_of is not None:
                if side_of[a] == side_of[b]:
                    continue
                if side_of[a] == 1:
                    a, b = b, a
            shared = flat[a].keys() & flat[b].keys()
            if shared and all(flat[a][k] == flat[b][k] for k in shared):
                pairs.add((a, b, w) if side_of is not None else (min(a, b), max(a, b), w))
    return pairs


def write_files(folder, batches, *, first_mtime=1_700_000_000):
    """One JSON-lines file per micro-batch, with increasing mtimes (the file source's order)."""
    folder.mkdir(parents=True, exist_ok=True)
    for b, rows in enumerate(batches):
        path = folder / f"b{b:03d}.json"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows))
        os.utime(path, (first_mtime + b, first_mtime + b))


def run_stream(df, tmp_path, name):
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / name))
         .option("checkpointLocation", str(tmp_path / f"ck_{name}")).trigger(availableNow=True).start())
    q.awaitTermination()
    return q, df.sparkSession.read.parquet(str(tmp_path / name)).collect()


def test_streaming_count_windows_every_partitioner_equals_brute_force(spark, tmp_path):
    raw = nobench_documents(400, seed=3, thousandth=6, optional=0.5, sparse_blocks=4)
    write_files(tmp_path / "in", [[{"id": i, "doc": json.dumps(raw[i])} for i in range(b * 80, (b + 1) * 80)] for b in range(5)])
    src = spark.readStream.schema("id long, doc string").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    joins = [
        natural_join(src, window=90, partitions=4, partitioner=p, local_join=lj, delta=2, theta=0.0,
                     metrics_dir=str(tmp_path / f"m_{p}")).withColumn("combo", F.lit(f"{p}/{lj}"))
        for p, lj in COMBOS
    ]
    union = joins[0].unionByName(joins[1]).unionByName(joins[2])
    q, out = run_stream(union, tmp_path, "out")
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 5
    expected = brute_force(dict(enumerate(raw)), {i: i // 90 for i in range(400)})
    for p, lj in COMBOS:
        got = [(r.left_id, r.right_id, r.window) for r in out if r.combo == f"{p}/{lj}"]
        assert len(got) == len(set(got)), p
        assert set(got) == expected, p
        metrics = natural_join_metrics(str(tmp_path / f"m_{p}"))
        assert metrics["window"].tolist() == [0, 1, 2, 3, 4]
        assert metrics["documents"].tolist() == [90, 90, 90, 90, 40]
        assert metrics["pairs"].sum() == len(expected)
        assert metrics["to_all"].iloc[1:].sum() > 0  # documents matching no partition
        assert metrics["repartitions"].iloc[-1] > 0  # refitted between windows
        assert metrics["closed"].tolist() == [True] * 4 + [False]
