"""The plan stored with the checkpoint: a restart with other settings is refused (naming them) or,
for settings that do not touch state, adopted; the refused batch commits nothing, and the old
settings go on exactly. equi_join and natural_join here (similarity_join and topk_set_join have
their own robustness tests)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from driftjoin.schemafree.generator import nobench_documents
from driftjoin.spark.equi.api import equi_join, invalid_equi_records
from driftjoin.spark.natural.api import natural_join
from driftjoin.spark.runtime.plan_guard import PlanChangedError, PlanGuard
from driftjoin.spark.runtime.static import MemoryHandle

from ..helpers import run_available_now, write_batches


def test_plan_guard_stores_adopts_and_refuses_with_every_changed_setting() -> None:
    handle = MemoryHandle()
    value = handle.getValueState("plan", None)
    handle.getValueState = lambda name, schema: value  # one key's state across "restarts"
    first = {"threshold": 0.1, "parallelism": 2, "metrics_dir": "/a", "window": [60.0]}
    PlanGuard(handle, "op", first, frozenset({"metrics_dir"})).check()
    PlanGuard(handle, "op", first, frozenset({"metrics_dir"})).check()
    PlanGuard(handle, "op", first | {"metrics_dir": "/b"}, frozenset({"metrics_dir"})).check()
    assert json.loads(value.get()[0])["metrics_dir"] == "/b"
    with pytest.raises(PlanChangedError) as err:
        PlanGuard(handle, "op", first | {"threshold": 0.2, "parallelism": 5, "metrics_dir": "/c"}, frozenset({"metrics_dir"})).check()
    text = str(err.value)
    assert "parallelism: checkpoint has 2, this query has 5" in text and "threshold: checkpoint has 0.1, this query has 0.2" in text
    assert "metrics_dir" not in text and "new checkpoint location" in text
    assert json.loads(value.get()[0])["metrics_dir"] == "/b"  # a refused plan is not stored


@pytest.mark.spark
@pytest.mark.slow
def test_equi_join_refuses_another_parallelism_and_dead_letters_infinite_times(spark, tmp_path) -> None:
    def rows(lo, hi, side):
        return [{"id": i, "k": i % 17, "t": float(i)} for i in range(lo, hi) if i % 2 == side]

    bad = [{"id": 9000, "k": 3, "t": "Infinity"}, {"id": 9001, "k": 4, "t": "NaN"}, {"id": 9002, "k": None, "t": 5.0}]
    write_batches(tmp_path / "L", [rows(0, 100, 0) + bad[:2], rows(100, 200, 0)])
    write_batches(tmp_path / "R", [rows(0, 100, 1) + bad[2:], rows(100, 200, 1)])

    def read(name):
        return (spark.readStream.schema("id long, k long, t double").option("allowNonNumericNumbers", "true")
                .option("maxFilesPerTrigger", 1).json(str(tmp_path / name)))

    def start(p, algorithm="shc", routing="parallel"):
        joined = equi_join(read("L"), read("R"), on="k", algorithm=algorithm, parallelism=p, within=1000.0, time_col="t",
                           routing=routing, metrics_dir=str(tmp_path / "metrics"))
        return run_available_now(joined.select("k", "left_id", "right_id"), tmp_path / "out", tmp_path / "ck")

    start(2)
    dead = run_available_now(invalid_equi_records(read("L"), read("R"), on="k", time_col="t"), tmp_path / "dead", tmp_path / "ckd")
    assert dead.exception() is None
    assert sorted(r.reason for r in spark.read.parquet(str(tmp_path / "dead")).collect()) == [
        "null join key 'k'", "time (t) is not a point in time: Infinity", "time (t) is not a point in time: NaN"]
    write_batches(tmp_path / "L", [rows(200, 300, 0)], start=2)
    write_batches(tmp_path / "R", [rows(200, 300, 1)], start=2)
    for p, algorithm, routing, changed in (
            (4, "shc", "parallel", "parallelism: checkpoint has 2, this query has 4"),
            (2, "phj", "parallel", "algorithm: checkpoint has 'shc', this query has 'phj'"),
            # Spark refuses first here (one stateful operator became two); the plan key would next
            (2, "shc", "dispatcher", "STREAMING_STATEFUL_OPERATOR_NOT_MATCH|routing: checkpoint has 'parallel'")):
        with pytest.raises(Exception, match=changed):
            start(p, algorithm, routing)
    start(2)
    got = Counter((r.left_id, r.right_id) for r in spark.read.parquet(str(tmp_path / "out")).collect())
    expected = {(a, b) for a in range(0, 300, 2) for b in range(1, 300, 2) if a % 17 == b % 17}
    assert set(got) == expected and max(got.values()) == 1


@pytest.mark.spark
@pytest.mark.slow
def test_natural_join_refuses_other_partitions_or_partitioner_and_adopts_another_local_join(spark, tmp_path) -> None:
    docs = nobench_documents(240, seed=3)
    batches = [[{"id": i, "doc": json.dumps(docs[i])} for i in range(b * 80, (b + 1) * 80)] for b in range(3)]
    write_batches(tmp_path / "in", batches[:2])
    stream = spark.readStream.schema("id long, doc string").option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))

    def start(ck="ck", out="out", **kw):
        settings = {"window": 1000, "partitions": 3} | kw
        return run_available_now(natural_join(stream, **settings), tmp_path / out, tmp_path / ck)

    start()
    start(ck="ck_assigner", out="out_assigner", routing="assigner")
    write_batches(tmp_path / "in", batches[2:], start=2)
    with pytest.raises(Exception, match="partitions: checkpoint has 3, this query has 4"):
        start(partitions=4)
    # the partitioner makes the fits of windows opened later; the single Assigner keeps its fit in
    # its state and would go on with the old one, so a change is refused in both routings
    with pytest.raises(Exception, match="partitioner: checkpoint has 'value', this query has 'ag'"):
        start(partitioner="ag")
    # the single Assigner is one more stateful operator in front of the joiners: Spark refuses
    # the other routing before the first batch, whichever way round
    refused = "routing: checkpoint has|STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA"
    with pytest.raises(Exception, match=refused):
        start(routing="assigner")
    with pytest.raises(Exception, match=refused):
        start(ck="ck_assigner", out="out_assigner")
    start(local_join="hash")  # every local join is exact: adopted
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    reference = natural_join(spark.read.schema("id long, doc string").json(str(tmp_path / "in")), window=1000, partitions=3)
    assert Counter((r.left_id, r.right_id) for r in rows) == Counter((r.left_id, r.right_id) for r in reference.collect())
