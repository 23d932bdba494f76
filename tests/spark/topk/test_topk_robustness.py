"""topk_set_join under the mistakes issue 12 found: null tokens and duplicate ids came out as
``late``, an unparsable time stopped the query, and a restart could change k silently."""

from __future__ import annotations

import pytest

from driftjoin.spark.topk.api import current_topk, invalid_sets, topk_set_join
from driftjoin.swoop import BaseTopK

from ..helpers import run_available_now, write_batches

pytestmark = pytest.mark.spark

SCHEMA = "id long, tokens array<string>, ts string"


def _ts(seconds: float) -> str:
    return f"2024-01-01 00:{int(seconds) // 60:02d}:{int(seconds) % 60:02d}"


@pytest.mark.slow
def test_bad_sets_are_dead_letters_refused_sets_are_named_and_a_restart_cannot_change_k(spark, tmp_path):
    good = [{"id": i, "tokens": [f"t{(i * 7 + j) % 13}" for j in range(1 + i % 4)], "ts": _ts(i)} for i in range(60)]
    bad = [{"id": 100, "tokens": ["a", None, "b"], "ts": _ts(10)}, {"id": 101, "tokens": [None], "ts": _ts(11)},
           {"id": 102, "tokens": ["a"], "ts": "yesterday"}, {"id": 103, "tokens": ["a"]}, {"id": 104, "tokens": [], "ts": _ts(12)}]
    dup = {"id": 5, "tokens": ["t1", "t2"], "ts": _ts(30)}  # id 5 (ts 5 s) is still in the 60 s window
    write_batches(tmp_path / "in", [good[:30] + bad[:3], good[30:] + bad[3:] + [dup]])
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    q = run_available_now(topk_set_join(stream, k=5, within="1 minute"), tmp_path / "out", tmp_path / "ck")
    dq = run_available_now(invalid_sets(stream), tmp_path / "dead", tmp_path / "ck_dead")
    assert q.exception() is None and dq.exception() is None
    out = spark.read.parquet(str(tmp_path / "out"))
    assert [(r.kind, r.left_id) for r in out.where("kind NOT IN ('enter', 'leave')").collect()] == [("duplicate", 5)]
    dead = {r.id: r.reason for r in spark.read.parquet(str(tmp_path / "dead")).collect()}
    assert dead == {100: "null token", 101: "null token", 102: "unparsable time (ts): yesterday",
                    103: "missing time (ts)", 104: "empty set"}
    base = BaseTopK(5, "jaccard", 60.0 + 0.5e-6)  # within= is inclusive: Base's strict window half a microsecond longer
    for r in good:
        base.insert(r["id"], r["tokens"], 1704067200.0 + r["id"])
    assert {(r.left_id, r.right_id) for r in current_topk(out).collect()} == {(p.first, p.second) for p in base.topk()}
    write_batches(tmp_path / "in", [[{"id": 200, "tokens": ["t1"], "ts": _ts(61)}]], start=2)
    with pytest.raises(Exception, match=r"k: checkpoint has 5, this query has 10"):
        run_available_now(topk_set_join(stream, k=10, within="1 minute"), tmp_path / "out", tmp_path / "ck")
