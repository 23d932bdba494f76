"""Every operator on a Spark Connect session, static and streaming, against its oracle; the
dead-letter readers, choose_threshold, the report readers, statistics counted exactly once
across a restart, the controllers hearing their queries, and the clear refusals.

Small data and one shared server (conftest.py): each streaming query is a few micro-batches.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from driftjoin import choose_threshold, invalid_records, similarity_join
from driftjoin.distance import get_metric
from driftjoin.hypercube import Side, StreamTuple
from driftjoin.hypercube import oracle_pairs as equi_oracle
from driftjoin.s3j.oracle import oracle_pairs
from driftjoin.schemafree.document import flatten
from driftjoin.spark.equi.api import equi_join, invalid_equi_records
from driftjoin.spark.natural.api import invalid_documents, natural_join
from driftjoin.spark.runtime.connect import ConnectUnsupported, cluster_parallelism
from driftjoin.spark.runtime.queries import last_commit, recorded_checkpoint
from driftjoin.spark.runtime.stats import STAMP, read_stats
from driftjoin.spark.topk.api import invalid_sets, topk_set_join
from driftjoin.swoop import BaseTopK

from ..helpers import write_batches
from .conftest import ROOT

pytestmark = pytest.mark.spark


def _stream(spark, folder: Path, schema: str):
    return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(folder))


def _run(df, tmp_path: Path, name: str):
    """Run a streaming DataFrame to the end of its input into Parquet; returns the query and rows."""
    q = (df.writeStream.format("parquet").option("path", str(tmp_path / name))
         .option("checkpointLocation", str(tmp_path / f"ck_{name}")).trigger(availableNow=True).start())
    q.awaitTermination()
    return q, df.sparkSession.read.parquet(str(tmp_path / name)).collect()


def _recorded(metrics: Path, query_id: str, timeout: float = 60.0) -> str | None:
    """The checkpoint the query tracker wrote down for ``query_id`` (it hears the query's progress
    after the fact, through the client's listener bus)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = recorded_checkpoint(str(metrics), query_id)
        if found is not None:
            return found
        time.sleep(0.2)
    return None


def _vectors(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, (n, 2)), rng.integers(0, 2, n).astype(np.int8)


def test_similarity_join_static_and_streaming_equal_the_oracle_with_stamped_statistics(connect, tmp_path):
    from driftjoin.app.report import summary

    m = get_metric("euclidean")
    X, side = _vectors(300, 1)
    df = connect.createDataFrame([(i, X[i].tolist()) for i in range(len(X))], "id long, vector array<double>")
    got = [(r.left_id, r.right_id, 0) for r in similarity_join(df, threshold=0.08, metric="euclidean", parallelism=2).collect()]
    expected = oracle_pairs(np.arange(len(X)), np.zeros(len(X), np.int8), X, np.zeros(len(X), np.int64), m, 0.08, True)
    assert len(got) == len(set(got)) and set(got) == expected

    for s, name in ((0, "L"), (1, "R")):
        idx = np.flatnonzero(side == s)
        write_batches(tmp_path / name, [[{"id": int(i), "vector": X[i].tolist()} for i in part]
                                        for part in np.array_split(idx, 3)])
    metrics = tmp_path / "metrics"
    schema = "id long, vector array<double>"
    pairs = similarity_join(_stream(connect, tmp_path / "L", schema), _stream(connect, tmp_path / "R", schema),
                            threshold=0.08, metric="euclidean", parallelism=3, dim=2, window=None, algorithm="s3j",
                            metrics_dir=str(metrics), balance="greedy", balance_options={"monitoring_window": 0.1})
    q, rows = _run(pairs, tmp_path, "out")
    expected = oracle_pairs(np.arange(len(X)), side, X, np.zeros(len(X), np.int64), m, 0.08, False)
    got = [(r.left_id, r.right_id, 0) for r in rows]
    assert len(got) == len(set(got)) and set(got) == expected
    assert _recorded(metrics, q.id) == str(tmp_path / "ck_out")
    stats = list(read_stats(str(metrics), "computation"))
    assert stats and all(s[STAMP]["query"] == q.id and s[STAMP]["run"] == q.runId for s in stats)
    assert sum(s["pairs"] for s in stats) == len(expected)
    totals, _ = summary(str(metrics))
    assert totals["pairs_out"] == len(expected) and totals["records_in"] == len(X)


def test_restart_from_a_checkpoint_counts_each_batch_once(connect, tmp_path):
    """Two runs of one query: each batch counted once, from the run that ran it, and against the
    commit log of the checkpoint the tracker wrote down (the tasks cannot know it on Connect): a
    batch whose commit is missing is not counted. (A replayed batch is covered without Spark in
    tests/spark/runtime/test_metrics_exactly_once.py.)"""
    m = get_metric("euclidean")
    X, side = _vectors(240, 2)
    files = [np.arange(i, len(X), 4) for i in range(4)]
    write_batches(tmp_path / "in", [[{"id": int(i), "side": int(side[i]), "vector": X[i].tolist()} for i in f]
                                    for f in files[:3]])
    metrics = tmp_path / "metrics"

    def run():
        src = _stream(connect, tmp_path / "in", "id long, side int, vector array<double>")
        pairs = similarity_join(src.where("side = 0"), src.where("side = 1"), threshold=0.1, metric="euclidean",
                                parallelism=2, dim=2, window=None, algorithm="s3j", metrics_dir=str(metrics))
        return _run(pairs, tmp_path, "out")

    first, _ = run()
    write_batches(tmp_path / "in", [[{"id": int(i), "side": int(side[i]), "vector": X[i].tolist()} for i in files[3]]],
                  start=3)
    second, rows = run()
    assert second.id == first.id and second.runId != first.runId
    got = [(r.left_id, r.right_id, 0) for r in rows]
    expected = oracle_pairs(np.arange(len(X)), side, X, np.zeros(len(X), np.int64), m, 0.1, False)
    assert len(got) == len(set(got)) and set(got) == expected
    checkpoint = tmp_path / "ck_out"
    assert _recorded(metrics, first.id) == str(checkpoint)
    counted = list(read_stats(str(metrics), "computation"))
    assert {(s[STAMP]["batch"], s[STAMP]["run"]) for s in counted} == {
        (0, first.runId), (1, first.runId), (2, first.runId), (3, second.runId)}
    assert len(counted) == 2 * 4  # each worker's record of each batch, once
    assert sum(s["pairs"] for s in counted) == len(expected)
    for name in ("3", ".3.crc"):  # as a crash before the commit of batch 3 would leave it
        (checkpoint / "commits" / name).unlink()
    assert sorted({s[STAMP]["batch"] for s in read_stats(str(metrics), "computation")}) == [0, 1, 2]


def _sets(n: int, seed: int) -> list[dict]:
    rnd = np.random.default_rng(seed)
    vocab = [f"t{i}" for i in range(25)]
    return [{"id": i, "tokens": sorted(set(rnd.choice(vocab, rnd.integers(1, 5)).tolist())), "ts": float(i)}
            for i in range(n)]


def _base(rows: list[dict], k: int, within: float) -> list[tuple]:
    base = BaseTopK(k, "jaccard", within + 0.5e-6)  # within= is inclusive: Base's strict window half a microsecond longer
    out = []
    for r in sorted(rows, key=lambda r: (r["ts"], r["id"])):
        out += [(c.kind, c.pair.first, c.pair.second, round(c.pair.sim, 12)) for c in base.insert(r["id"], r["tokens"], r["ts"])]
    return out


def _changes(rows) -> list[tuple]:
    rows = sorted(rows, key=lambda r: r.seq)
    return [(r.kind, r.left_id, r.right_id, round(r.similarity, 12)) for r in rows]


def test_topk_set_join_static_and_streaming_equal_the_base_algorithm(connect, tmp_path):
    from pyspark.sql import functions as F

    rows = _sets(90, 3)
    df = connect.createDataFrame([(r["id"], r["tokens"], r["ts"]) for r in rows], "id long, tokens array<string>, ts double")
    df = df.withColumn("ts", F.col("ts").cast("timestamp"))
    assert _changes(topk_set_join(df, k=3, similarity="jaccard", within="20 seconds", parallelism=2).collect()) == \
        _base(rows, 3, 20.0)

    write_batches(tmp_path / "in", [rows[:45], rows[45:]])
    stream = _stream(connect, tmp_path / "in", "id long, tokens array<string>, ts double").withColumn(
        "ts", F.col("ts").cast("timestamp"))
    _, out = _run(topk_set_join(stream, k=3, similarity="jaccard", within="20 seconds", parallelism=2), tmp_path, "out")
    assert _changes(out) == _base(rows, 3, 20.0)


def _documents(n: int) -> dict[int, dict]:
    rnd = np.random.default_rng(4)
    return {i: {"a": int(rnd.integers(0, 3)), "b": {"c": int(rnd.integers(0, 2))}, **({"d": "x"} if i % 3 else {})}
            for i in range(n)}


def _natural_oracle(docs: dict[int, dict], window: int) -> set[tuple]:
    flat = {i: flatten(d) for i, d in docs.items()}
    pairs = set()
    for a in docs:
        for b in docs:
            if a < b and a // window == b // window:
                shared = flat[a].keys() & flat[b].keys()
                if shared and all(flat[a][k] == flat[b][k] for k in shared):
                    pairs.add((a, b, a // window))
    return pairs


def test_natural_join_static_and_streaming_equal_brute_force(connect, tmp_path):
    docs = _documents(120)
    expected = _natural_oracle(docs, 60)
    df = connect.createDataFrame([(i, json.dumps(d)) for i, d in docs.items()], "id long, doc string")
    got = [(r.left_id, r.right_id, r.window) for r in natural_join(df, window=60, partitions=2).collect()]
    assert len(got) == len(set(got)) and set(got) == expected

    write_batches(tmp_path / "in", [[{"id": i, "doc": json.dumps(docs[i])} for i in range(a, a + 40)] for a in (0, 40, 80)])
    joined = natural_join(_stream(connect, tmp_path / "in", "id long, doc string"), window=60, partitions=2,
                          metrics_dir=str(tmp_path / "metrics"))
    _, rows = _run(joined, tmp_path, "out")
    got = [(r.left_id, r.right_id, r.window) for r in rows]
    assert len(got) == len(set(got)) and set(got) == expected


def _keyed(n: int, seed: int) -> list[StreamTuple]:
    rnd = np.random.default_rng(seed)
    return [StreamTuple(Side(int(rnd.integers(0, 2))), int(rnd.zipf(1.6)) % 15, i, float(i)) for i in range(n)]


def test_equi_join_static_and_streaming_equal_the_oracle_and_its_controller_hears_every_batch(connect, tmp_path):
    stream = _keyed(400, 5)
    rows = {s: [(t.tid, t.key, t.ts) for t in stream if t.side == s] for s in Side}
    schema = "id long, k long, t double"
    left, right = (connect.createDataFrame(rows[s], schema) for s in Side)
    got = [(r.left_id, r.right_id) for r in equi_join(left, right, on="k", parallelism=2).collect()]
    assert len(got) == len(set(got)) and set(got) == equi_oracle(stream)

    for s, name in ((Side.R, "L"), (Side.S, "R")):
        write_batches(tmp_path / name, [[dict(zip(("id", "k", "t"), r)) for r in part]
                                        for part in (rows[s][: len(rows[s]) // 2], rows[s][len(rows[s]) // 2:])])
    metrics = tmp_path / "metrics"
    joined = equi_join(_stream(connect, tmp_path / "L", schema), _stream(connect, tmp_path / "R", schema), on="k",
                       parallelism=2, metrics_dir=str(metrics))
    q, out = _run(joined.select("left_id", "right_id"), tmp_path, "out")
    got = [(r.left_id, r.right_id) for r in out]
    assert len(got) == len(set(got)) and set(got) == equi_oracle(stream)
    deadline = time.time() + 60
    while len(list(read_stats(str(metrics), "equi_control"))) < 2 and time.time() < deadline:
        time.sleep(0.2)
    assert sorted(s["batch"] for s in read_stats(str(metrics), "equi_control")) == [0, 1]


def test_dead_letter_readers(connect):
    vectors = connect.createDataFrame([(1, [0.0, 0.0]), (2, None), (None, [0.1, 0.1]), (4, [0.0, float("nan")])],
                                      "id long, vector array<double>")
    assert {(r.id, r.reason) for r in invalid_records(vectors, metric="euclidean", dim=2).collect()} == {
        (2, "missing vector"), (None, "missing id"), (4, "NaN, infinite or null element in vector")}
    sets = connect.createDataFrame([(1, ["a"], 1.0), (2, [], 2.0)], "id long, tokens array<string>, ts double")
    assert [r.reason for r in invalid_sets(sets.selectExpr("id", "tokens", "cast(ts as timestamp) as ts")).collect()] == \
        ["empty set"]
    docs = connect.createDataFrame([(1, '{"a": 1}'), (2, "{not json"), (None, '{"a": 2}')], "id long, doc string")
    reasons = {r.id: r.reason for r in invalid_documents(docs).collect()}
    assert set(reasons) == {2, None} and reasons[None] == "missing id" and reasons[2].startswith("unparsable JSON")
    keyed = connect.createDataFrame([(1, 5), (2, None)], "id long, k long")
    assert [(r.side, json.loads(r.raw)["id"], r.reason) for r in invalid_equi_records(keyed, keyed.limit(0), on="k").collect()] == \
        [(0, 2, "null join key 'k'")]


def test_choose_threshold_on_a_static_and_a_streaming_frame(connect, tmp_path):
    X, _ = _vectors(200, 6)
    expected = choose_threshold(X, selectivity=0.05, metric="euclidean", sample=200)
    df = connect.createDataFrame([(i, X[i].tolist()) for i in range(len(X))], "id long, vector array<double>")
    assert choose_threshold(df, selectivity=0.05, metric="euclidean", sample=200) == pytest.approx(expected)
    write_batches(tmp_path / "in", [[{"id": i, "vector": X[i].tolist()} for i in range(len(X))]])
    stream = connect.readStream.schema("id long, vector array<double>").json(str(tmp_path / "in"))
    assert choose_threshold(stream, selectivity=0.05, metric="euclidean", sample=50, timeout=60) > 0


def test_what_needs_the_driver_jvm_is_refused_with_what_to_do(connect):
    from driftjoin import local_session
    from driftjoin.control.autoscale import autoscale

    with pytest.raises(ConnectUnsupported, match="dynamic allocation"):
        autoscale(connect, "ds2")
    with pytest.raises(ConnectUnsupported, match="remote"):
        local_session()



def test_the_default_parallelism_is_the_servers_cores_not_its_200_shuffle_partitions(connect):
    """A server started without ``spark.sql.shuffle.partitions`` (as the README's) has Spark's 200:
    the join's default workers are the cluster's cores instead (local[2]: 2), as a local session's."""
    m = get_metric("euclidean")
    X, _ = _vectors(300, 7)
    df = connect.createDataFrame([(i, X[i].tolist()) for i in range(len(X))], "id long, vector array<double>")
    connect.conf.unset("spark.sql.shuffle.partitions")
    try:
        assert connect.conf.get("spark.sql.shuffle.partitions") == "200"
        rows = similarity_join(df, threshold=0.08, metric="euclidean", algorithm="s3j").collect()
    finally:
        connect.conf.set("spark.sql.shuffle.partitions", "2")
    got = [(r.left_id, r.right_id, 0) for r in rows]
    expected = oracle_pairs(np.arange(len(X)), np.zeros(len(X), np.int8), X, np.zeros(len(X), np.int64), m, 0.08, True)
    assert len(got) == len(set(got)) and set(got) == expected
    assert {r.worker for r in rows} == {0, 1}
    # where the master is not local[N]: Spark's default parallelism, counted by a query (no sparkContext here)
    unset = SimpleNamespace(conf=SimpleNamespace(get=lambda key, default=None: None), range=connect.range)
    assert cluster_parallelism(unset) == cluster_parallelism(connect) == 2


NO_STOP_SCRIPT = """
import sys, tempfile
from pyspark.sql import SparkSession
from driftjoin import similarity_join

spark = SparkSession.builder.remote(sys.argv[1]).getOrCreate()
stream = spark.readStream.schema("id long, vector array<double>").json(sys.argv[2])
pairs = similarity_join(stream, threshold=0.15, metric="euclidean", dim=2, parallelism=2, window=None,
                        metrics_dir=tempfile.mkdtemp())          # metrics_dir: driftjoin listens to the query
q = pairs.writeStream.format("memory").queryName("pairs").trigger(availableNow=True).start()
q.awaitTermination()
print("pairs", spark.sql("SELECT count(*) FROM pairs").first()[0])
print("ends")
"""


def test_a_script_with_a_driftjoin_query_ends_quietly_without_stop(connect_url, tmp_path):
    """The issue's script as a user runs it (its own process), without ``spark.stop()`` (a script
    that ends early, or on a traceback): it never exited, waiting on the thread that reads the
    query events driftjoin listens to. The same script without driftjoin ends at once and prints
    nothing. The script that ends with ``spark.stop()`` (whose exit printed ``Failed to remove
    the listener ... NO_ACTIVE_SESSION``) is test_readme_server.py's client: a streaming
    driftjoin query that driftjoin listens to, then ``spark.stop()``, exit 0 and nothing on stderr."""
    write_batches(tmp_path / "in", [[{"id": i, "vector": [i / 10, 0.0]} for i in range(10)]])
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    env.pop("SPARK_CONNECT_MODE_ENABLED", None)
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(NO_STOP_SCRIPT), connect_url, str(tmp_path / "in")],
                            capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["pairs", "9", "ends"]
    assert result.stderr == ""
