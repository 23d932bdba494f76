"""End-to-end Spark tests of natural_join against a brute-force natural join per window."""

from __future__ import annotations

import functools
import itertools
import json
import os

import pytest
from pyspark.sql import functions as F

from driftjoin.schemafree.document import flatten
from driftjoin.schemafree.generator import nobench_documents, server_log_documents
from driftjoin.schemafree.window import TimeWindow
from driftjoin.spark.natural.api import (
    invalid_documents,
    natural_join,
    natural_join_metrics,
)

from ..helpers import assert_stamped

pytestmark = pytest.mark.spark


@pytest.fixture
def docs_spark(spark):
    """The shared session with the driftjoin-docs source registered."""
    from driftjoin.spark.sources.documents import register

    register(spark)
    return spark

COMBOS = [("ag", "fptree"), ("sc", "hash"), ("ds", "nested")]
ROUTING = {"ag": "parallel", "sc": "parallel", "ds": "assigner"}


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


@pytest.mark.slow
def test_streaming_count_windows_every_partitioner_equals_brute_force(spark, tmp_path):
    """One query with three joins (AG/FP-tree, SC/hash, DS/nested loop) over 3 micro-batches; the
    DS join routes through the paper's single Assigner, the others in parallel."""
    raw = nobench_documents(400, seed=3, thousandth=6, optional=0.5, sparse_blocks=4)
    bounds = [0, 130, 270, 400]  # batch ends fall inside windows of 90
    write_files(tmp_path / "in", [[{"id": i, "doc": json.dumps(raw[i])} for i in range(a, b)] for a, b in zip(bounds, bounds[1:])])
    src = spark.readStream.schema("id long, doc string").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    joins = [
        natural_join(src, window=90, partitions=3, partitioner=p, local_join=lj, delta=2, theta=0.0,
                     metrics_dir=str(tmp_path / f"m_{p}"), routing=ROUTING[p]).withColumn("combo", F.lit(f"{p}/{lj}"))
        for p, lj in COMBOS
    ]  # value partitioning on a stream: test_parallel_routing_exact_at_1_3_8_joiners_static_and_streaming_across_a_restart
    union = joins[0].unionByName(joins[1]).unionByName(joins[2])
    q, out = run_stream(union, tmp_path, "out")
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 3
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
        assert_stamped(tmp_path / f"m_{p}", *(["natural_assigner"] if ROUTING[p] == "assigner" else []), "natural_joiner")


def test_static_every_partitioner_and_local_join_string_ids_and_core_metrics(spark, tmp_path):
    from driftjoin.schemafree.pipeline import natural_join_windows

    raw = nobench_documents(300, seed=4, thousandth=6, optional=0.5, sparse_blocks=4)
    df = spark.createDataFrame([(f"d{i:03d}", json.dumps(raw[i])) for i in range(300)], "key string, body string")
    expected = {(f"d{a:03d}", f"d{b:03d}", w) for a, b, w in brute_force(dict(enumerate(raw)), {i: i // 75 for i in range(300)})}
    combos = list(itertools.product(("ag", "sc", "ds"), ("fptree", "hash", "nested")))
    # the single Assigner routes sequentially, window by window, like the core; the parallel
    # routers (one fit on a sample, drawn on the driver) give the same pairs
    joins = [
        natural_join(df, window=75, partitions=3, partitioner=p, local_join=lj, id_col="key", doc_col="body", delta=2,
                     theta=0.0, metrics_dir=str(tmp_path / f"{p}_{lj}"), routing="assigner").withColumn("combo", F.lit(f"{p}/{lj}"))
        for p, lj in combos
    ] + [
        natural_join(df, window=75, partitions=3, partitioner=p, local_join=lj, id_col="key", doc_col="body", delta=2,
                     theta=0.0, sample_size=60).withColumn("combo", F.lit(f"parallel {p}/{lj}"))
        for p, lj in [*COMBOS, ("value", "hash")]
    ]
    union = joins[0]
    for j in joins[1:]:
        union = union.unionByName(j)
    out = union.collect()
    for p, lj in [*COMBOS, ("value", "hash")]:
        got = [(r.left_id, r.right_id, r.window) for r in out if r.combo == f"parallel {p}/{lj}"]
        assert len(got) == len(set(got)) and set(got) == expected, ("parallel", p, lj)
    for p, lj in combos:
        got = [(r.left_id, r.right_id, r.window) for r in out if r.combo == f"{p}/{lj}"]
        assert len(got) == len(set(got)) and set(got) == expected, (p, lj)
        metrics = natural_join_metrics(str(tmp_path / f"{p}_{lj}"))
        core = natural_join_windows(raw, 75, 3, p, lj, delta=2, theta=0.0).windows
        assert metrics["replication"].tolist() == pytest.approx([m.replication for m in core])
        assert metrics["max_load"].tolist() == pytest.approx([m.max_load for m in core])
        assert metrics["repartitions"].tolist() == [m.repartitions for m in core]
        assert metrics["pairs"].tolist() == [m.pairs for m in core]


def test_static_struct_documents_merged_time_attribute_and_processing_time(spark):
    rows = [(1, (7, "x", None)), (2, (7, None, (1,))), (3, (8, "x", None)), (4, (7, "y", (1,)))]
    df = spark.createDataFrame(rows, "id int, doc struct<u:int, a:string, n:struct<k:int>>")
    out = natural_join(df, window="1 hour", partitions=2, merged=True).collect()
    assert [(r.left_id, r.right_id, json.loads(r.merged)) for r in sorted(out)] == [
        (1, 2, {"a": "x", "n.k": 1, "u": 7}),
        (2, 4, {"a": "y", "n.k": 1, "u": 7}),
    ]
    raw = server_log_documents(300, seed=5, users=30, rate=20.0)
    logs = spark.createDataFrame([(i, json.dumps(d)) for i, d in enumerate(raw)], "id long, doc string")
    got = [(r.left_id, r.right_id, r.window) for r in natural_join(logs, window=TimeWindow(5.0), partitions=3).collect()]
    docs = {i: {k: v for k, v in d.items() if k != "timestamp"} for i, d in enumerate(raw)}
    expected = brute_force(docs, {i: int(d["timestamp"] // 5.0) for i, d in enumerate(raw)})
    assert len(got) == len(set(got)) and set(got) == expected and len({w for _, _, w in got}) >= 3


def test_two_streams_event_time_late_and_bad_rows(spark, tmp_path):
    """Only left x right pairs; windows by a time column; a late document and bad rows are skipped."""
    raw = server_log_documents(480, seed=7, users=25, rate=20.0, timestamp=False)
    t = [i / 20.0 for i in range(480)]  # 24 s: windows of 10 s are 0, 1, 2
    side = [i % 3 == 0 for i in range(480)]  # a third goes right
    batches = {0: [], 1: []}
    for b in range(3):
        for s in (0, 1):
            batches[s].append([{"id": i, "doc": json.dumps(raw[i]), "t": t[i]} for i in range(b * 160, (b + 1) * 160) if side[i] == s])
    late = {"id": 10_000, "doc": json.dumps(raw[0]), "t": 1.0}  # window 0: closed after batch 1 (16 s - 2 s > 10 s)
    batches[0][2] += [late, {"id": 10_001, "doc": "{oops", "t": 23.0}, {"id": None, "doc": "{}", "t": 23.0},
                      {"id": 10_002, "doc": "[1, 2]", "t": 23.0}, {"id": 10_003, "doc": "{}", "t": None}]
    write_files(tmp_path / "L", batches[0])
    write_files(tmp_path / "R", batches[1])
    schema = "id long, doc string, t double"

    def read(name):
        return spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / name))

    pairs = natural_join(read("L"), read("R"), window="10 seconds", time_col="t", watermark="2 seconds", partitions=3,
                         metrics_dir=str(tmp_path / "m"))
    q, out = run_stream(pairs, tmp_path, "out")
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 3
    docs = dict(enumerate(raw))
    expected = brute_force(docs, {i: int(t[i] // 10) for i in docs}, {i: int(side[i]) for i in docs})
    got = [(r.left_id, r.right_id, r.window) for r in out]
    assert len(got) == len(set(got)) and set(got) == expected
    assert all(not side[r.left_id] and side[r.right_id] for r in out)
    metrics = natural_join_metrics(str(tmp_path / "m"))
    assert metrics["late"].tolist() == [1, 0, 0] and metrics["pairs"].sum() == len(expected)
    static = spark.read.schema(schema).json(str(tmp_path / "L"))
    dead = {(r.id, r.reason) for r in invalid_documents(static, time_col="t").collect()}
    assert dead == {(10_001, "unparsable JSON: Expecting property name enclosed in double quotes (char 1)"),
                    (None, "missing id"), (10_002, "not a JSON object (got array)"), (10_003, "missing time")}


def test_bad_documents_go_to_dead_letters_and_valid_ones_still_join(spark):
    rows = [
        (1, '{"u": 1, "a": "x"}'), (2, '{"u": 1, "b": 2}'), (3, '{"u": 1, "a": "y"}'), (4, "{not json"),
        (5, "[1, 2]"), (6, '"text"'), (7, "null"), (8, None), (None, '{"u": 1}'), (9, '{"u": NaN}'),
        (10, '{"u": 1, "z": {"deep": [1, null]}}'), (11, "{}"),
    ]
    df = spark.createDataFrame(rows, "id long, doc string")
    got = {(r.left_id, r.right_id) for r in natural_join(df, partitions=2).collect()}
    assert got == {(1, 2), (2, 3), (1, 10), (2, 10), (3, 10)}
    dead = {(r.id, r.reason) for r in invalid_documents(df).collect()}
    assert dead == {
        (4, "unparsable JSON: Expecting property name enclosed in double quotes (char 1)"),
        (5, "not a JSON object (got array)"), (6, "not a JSON object (got string)"),
        (7, "not a JSON object (got null)"), (8, "missing document"), (None, "missing id"),
        (9, "unparsable JSON: NaN is not a JSON number"),
    }
    assert all(json.loads(r.raw).keys() == {"id", "doc"} for r in invalid_documents(df).collect())
    logs = spark.createDataFrame([(1, '{"timestamp": "noon"}'), (2, '{"a": 1}'), (3, '{"a": 1, "timestamp": 2}')],
                                 "id long, doc string")
    dead = {(r.id, r.reason) for r in invalid_documents(logs, window=TimeWindow(5.0)).collect()}
    assert dead == {(1, "time attribute 'timestamp' is not a number"), (2, "missing time attribute 'timestamp'")}


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"partitions": 0}, "partitions must be an integer >= 1"),
        ({"partitions": 2.5}, "partitions must be an integer >= 1"),
        ({"partitioner": "hypercube"}, "partitioner must be one of .*'ag'.*got 'hypercube'"),
        ({"local_join": "bnl"}, "local_join must be one of 'fptree', 'hash', 'nested', got 'bnl'"),
        ({"window": "soon"}, "is not a duration.*document count"),
        ({"window": 0}, "at least 1 document"),
        ({"window": True}, "is not a window"),
        ({"window": [10]}, "is not a window"),
        ({"window": 10, "watermark": "5 seconds"}, "watermark= applies to event-time windows only"),
        ({"window": TimeWindow(5.0), "time_col": "ts"}, "drop time_col="),
        ({"delta": 0}, "delta must be an integer >= 1"),
        ({"theta": -0.1}, "theta must be a finite number >= 0"),
        ({"doc_col": "nope"}, "doc_col='nope' is not a column"),
        ({"doc_col": "id"}, "has type bigint; use a string of JSON text"),
        ({"id_col": "key"}, "id_col='key' is not a column"),
        ({"time_col": "nope", "window": "1 minute"}, "time_col='nope' is not a column"),
        ({"sample": []}, "sample= holds no valid JSON object"),
        ({"sample": ['{"a": 1}'], "sample_size": 0}, "sample_size must be an integer >= 1"),
        ({"window": "1 minute", "slide": "20 seconds"}, "per tumbling window.*slide= .*not offered"),
        ({"within": "30 seconds"}, "per tumbling window.*within= .*not offered"),
    ],
)
def test_bad_settings_fail_before_the_job_starts(docs_spark, kwargs, message):
    stream = docs_spark.readStream.format("driftjoin-docs").option("total", 10).load()
    with pytest.raises((ValueError, TypeError), match=message):
        natural_join(stream, **kwargs)


def test_mixing_streaming_and_static_inputs_fails(docs_spark):
    stream = docs_spark.readStream.format("driftjoin-docs").option("total", 10).load()
    static = docs_spark.read.format("driftjoin-docs").option("total", 10).load()
    with pytest.raises(ValueError, match="must both be streaming or both static"):
        natural_join(stream, static)


def test_docs_source_static_streaming_and_join_with_sample(docs_spark):
    for kind in ("nobench", "serverlog"):
        df = docs_spark.read.format("driftjoin-docs").option("kind", kind).option("total", 1500).option("seed", 2).option("partitions", 3).load()
        again = docs_spark.read.format("driftjoin-docs").option("kind", kind).option("total", 1500).option("seed", 2).load()
        rows = sorted(df.collect())
        assert rows == sorted(again.collect()) and [r.id for r in rows] == list(range(1500))
        assert all(isinstance(json.loads(r.doc), dict) for r in rows)
    stream = (docs_spark.readStream.format("driftjoin-docs").option("kind", "serverlog").option("total", 2500)
              .option("pace", "false").option("max_docs_per_batch", 1000).option("start", 0).load())
    q = stream.writeStream.format("memory").queryName("docs_source_test").start()
    q.processAllAvailable()
    q.stop()
    assert [p["numInputRows"] for p in q.recentProgress if p["numInputRows"]] == [1000, 1000, 500]
    assert docs_spark.sql("select count(distinct id) from docs_source_test").first()[0] == 2500
    logs = docs_spark.read.format("driftjoin-docs").option("kind", "serverlog").option("total", 400).option("rate", 40).load()
    raw = {r.id: json.loads(r.doc) for r in logs.collect()}
    sample = [raw[i] for i in range(100)]
    got = [(r.left_id, r.right_id, r.window) for r in natural_join(logs, window="5 seconds", time_col="ts", partitions=3, sample=sample).collect()]
    expected = brute_force(raw, {i: i // 200 for i in raw})  # 40 per second: 200 documents per window
    assert len(got) == len(set(got)) and set(got) == expected


def test_replayed_batch_in_another_row_order_gives_the_same_rows_and_pairs():
    """Exactly-once needs determinism: a batch replayed from the previous state (rows arriving in
    another order after the shuffle) routes and joins exactly as the first attempt did."""
    import pickle

    import pandas as pd

    from driftjoin.spark.natural.assigner import Assigner
    from driftjoin.spark.natural.joiners import Joiner
    from driftjoin.spark.natural.plan import NaturalPlan

    plan = NaturalPlan(partitions=4, partitioner="ag", local_join="fptree", delta=2, theta=0.0, creators=1, expand=True,
                       window_kind="count", size=70, length=None, time_attribute=None, watermark=0.0, two_streams=False,
                       merged=True, sample_size=30, seed=0, metrics_dir=None)
    raw = nobench_documents(300, seed=8, thousandth=6, optional=0.5, sparse_blocks=4)
    batches = [pd.DataFrame({"akey": 0, "side": 0, "id": list(range(b, b + 60)), "time": float("nan"),
                             "avps": [json.dumps(flatten(raw[i])) for i in range(b, b + 60)]}) for b in range(0, 300, 60)]

    def step(a_state, j_states, pdf):
        assigner = Assigner(plan, pickle.loads(a_state) if a_state else None)
        routed = assigner.process(pdf).rows
        pairs, new_states = [], dict(j_states)
        for key, rows in routed.groupby("jkey"):
            joiner = Joiner(plan, plan.slot_of(key), pickle.loads(j_states[key]) if key in j_states else {})
            out, _, _, _ = joiner.process(rows.sample(frac=1, random_state=1), 0)
            pairs += list(zip(out["left_id"], out["right_id"], out["window"], out["merged"]))
            new_states[key] = pickle.dumps(joiner.windows)
        rows = sorted(map(tuple, routed.astype(str).values.tolist()))
        return pickle.dumps(assigner.state), new_states, rows, sorted(pairs)

    a_state, j_states, history = None, {}, []
    for pdf in batches:
        history.append((a_state, j_states))
        a_state, j_states, rows, pairs = step(a_state, j_states, pdf)
        replay = step(*history[-1], pdf.sample(frac=1, random_state=len(history)))
        assert replay[2] == rows and replay[3] == pairs
        assert pickle.loads(replay[0]).frontier == pickle.loads(a_state).frontier


PARALLELISM = (1, 3, 8)


# the default partitioner; association groups route the same way in tests/spark/natural/test_natural_routing.py
@pytest.mark.parametrize("partitioner", [pytest.param("value", marks=pytest.mark.slow)])
def test_parallel_routing_exact_at_1_3_8_joiners_static_and_streaming_across_a_restart(spark, tmp_path, partitioner):
    """The default routing (stateless routers, partitionings from the control plane) at 1, 3 and
    8 joiners: a static join, and a stream of 4 micro-batches in event-time windows that is
    stopped after 2 and restarted from its checkpoint (a new run: new controller, new decisions).
    With value partitioning the fits route by (bool, thousandth) where 12 such pairs divide the
    work, else they are association groups; whether a window gets a fit before it closes depends
    on when the driver's decisions land (tests/spark/natural/test_natural_routing.py checks value fits
    route each document to one joiner, deterministically)."""
    from tests.spark.helpers import write_batches

    raw = nobench_documents(360, seed=11, thousandth=6, optional=0.5, sparse_blocks=4)
    rows = [{"id": i, "doc": json.dumps(raw[i]), "t": i / 10} for i in range(360)]  # windows of 8 s: 80 documents
    expected = brute_force(dict(enumerate(raw)), {i: int(i / 10 // 8) for i in range(360)})
    static = spark.createDataFrame([(r["id"], r["doc"], r["t"]) for r in rows], "id long, doc string, t double")
    joins = [natural_join(static, window="8 seconds", time_col="t", partitions=p, partitioner=partitioner, delta=2,
                          theta=0.0, sample_size=50).withColumn("p", F.lit(p)) for p in PARALLELISM]
    out = functools.reduce(lambda a, b: a.unionByName(b), joins).collect()
    for p in PARALLELISM:
        got = [(r.left_id, r.right_id, r.window) for r in out if r.p == p]
        assert len(got) == len(set(got)) and set(got) == expected, p

    bounds = [0, 130, 250, 360]  # batch ends fall inside windows
    batches = [rows[a:b] for a, b in zip(bounds, bounds[1:])]
    write_batches(tmp_path / "in", batches[:2])
    src = spark.readStream.schema("id long, doc string, t double").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))

    def run():
        joins = [natural_join(src, window="8 seconds", time_col="t", watermark="20 seconds", partitions=p,
                              partitioner=partitioner, delta=2, theta=0.0, sample_size=50,
                              metrics_dir=str(tmp_path / f"m{p}")).withColumn("p", F.lit(p))
                 for p in PARALLELISM]
        # placement does not change the result: all joiners in 2 state partitions (8 tasks per
        # stateful operator per batch cost more than the joins)
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        return run_stream(functools.reduce(lambda a, b: a.unionByName(b), joins), tmp_path, "out")

    run()
    write_batches(tmp_path / "in", batches[2:], start=2)
    q, out = run()
    assert len([p for p in q.recentProgress if p["numInputRows"]]) == 1
    for p in PARALLELISM:
        got = [(r.left_id, r.right_id, r.window) for r in out if r.p == p]
        assert len(got) == len(set(got)) and set(got) == expected, p
        metrics = natural_join_metrics(str(tmp_path / f"m{p}"))
        assert metrics["pairs"].sum() == len(expected)
