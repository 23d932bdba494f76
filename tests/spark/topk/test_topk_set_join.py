"""SWOOP on Spark at parallelism 1, 2 and 4: the change stream is Base's, change by change (so it
replays into the same top-k), streaming and static, self-join and two-stream; a restart with
another parallelism or partitioned design is refused; the "owner" and "probe" designs alike."""

from __future__ import annotations

import random

import pytest
from pyspark.sql import functions as F

from driftjoin.spark.topk.api import current_topk, invalid_sets, topk_set_join
from driftjoin.swoop import BaseTopK, DuplicateSetError, InvalidSetError, LateSetError

from ..helpers import assert_stamped, run_available_now, write_batches

pytestmark = pytest.mark.spark


def _stream_rows(n=300, seed=3):
    rnd = random.Random(seed)
    vocab = [f"t{i}" for i in range(40)]
    return [{"id": i, "tokens": rnd.sample(vocab[: 10 + i % 30], rnd.randint(1, 6)), "ts": float(i) * 0.5} for i in range(n)]


def _base_changes(batches, k, similarity, within, two_stream=False):
    """Base's change stream over micro-batches of rows, each in the operator's insert order
    (time, side, id, tokens), as (kind, left_id, right_id, similarity, change time in
    microseconds); refused sets as (kind, id, None, None, their time). ``within`` is inclusive
    at Spark's resolution: Base's strict window is half a microsecond longer."""
    base = BaseTopK(k, similarity, within + 0.5e-6, two_stream=two_stream)
    out = []
    side_of = (lambda r: r["side"]) if two_stream else (lambda r: None)
    for rows in batches:
        for r in sorted(rows, key=lambda r: (r["ts"], side_of(r) or "", r["id"], "\x1f".join(dict.fromkeys(r["tokens"])))):
            try:
                changes = base.insert(r["id"], r["tokens"], r["ts"], side_of(r))
            except InvalidSetError as e:
                kind = "late" if isinstance(e, LateSetError) else "duplicate" if isinstance(e, DuplicateSetError) else "?"
                out.append((kind, r["id"], None, None, round(r["ts"] * 1e6)))
                continue
            out += [(c.kind, c.pair.first, c.pair.second, round(c.pair.sim, 12), round(c.time * 1e6)) for c in changes]
    return out, base


def _spark_changes(df):
    rows = sorted(df.collect(), key=lambda r: r.seq)
    assert [r.seq for r in rows] == list(range(len(rows)))
    return [(r.kind, r.left_id, r.right_id, None if r.kind not in ("enter", "leave") else round(r.similarity, 12),
             round(r.change_time.timestamp() * 1e6)) for r in rows]


@pytest.mark.slow
@pytest.mark.parametrize(("parallelism", "design"), [(1, "owner"), (4, "owner"), (2, "probe")])
def test_streaming_self_join_changes_equal_base(spark, tmp_path, parallelism, design):
    rows = _stream_rows()
    late = {"id": 9999, "tokens": ["t1"], "ts": 1.0}
    dup = {"id": 290, "tokens": ["t3", "t4"], "ts": 149.5}  # id 290 (ts 145) is still in the window
    write_batches(tmp_path / "in", [rows[:100], rows[100:200], rows[200:], [late, {"id": 9998, "tokens": [], "ts": 200.0}, dup]])
    stream = (spark.readStream.schema("id long, tokens array<string>, ts double").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))
    changes = topk_set_join(stream, k=5, similarity="jaccard", within="20 seconds", parallelism=parallelism,
                            design=design)
    q = run_available_now(changes, tmp_path / "out", tmp_path / "ck")
    assert q.exception() is None
    out = spark.read.parquet(str(tmp_path / "out"))
    expected, base = _base_changes([rows[:100], rows[100:200], rows[200:], [late, dup]], 5, "jaccard", 20.0)
    got = _spark_changes(out)
    assert got == expected
    assert [(r[0], r[1]) for r in got if r[0] not in ("enter", "leave")] == [("late", 9999), ("duplicate", 290)]
    assert {(r.left_id, r.right_id): round(r.similarity, 12) for r in current_topk(out).collect()} == {
        (p.first, p.second): round(p.sim, 12) for p in base.topk()}
    dead = invalid_sets(spark.read.json(str(tmp_path / "in" / "b0003.json"), schema="id long, tokens array<string>, ts double")
                        .withColumn("ts", F.col("ts").cast("timestamp")))
    assert [r.reason for r in dead.collect()] == ["empty set"]


@pytest.mark.parametrize(("parallelism", "design"), [(1, "owner"), (2, "owner"), (4, "owner"), (2, "probe"),
                                                   (4, "probe")])
def test_static_two_stream_changes_equal_base(spark, parallelism, design):
    rows = _stream_rows(120, seed=5)
    for r in rows:
        r["side"] = "R" if r["id"] % 2 == 0 else "S"
    df = spark.createDataFrame([(r["id"], r["tokens"], r["ts"]) for r in rows], "id long, tokens array<string>, ts double")
    df = df.withColumn("ts", F.col("ts").cast("timestamp"))
    left, right = df.where("id % 2 = 0"), df.where("id % 2 = 1")
    changes = topk_set_join(left, right, k=4, similarity="cosine", within="15 seconds", parallelism=parallelism,
                            design=design)
    expected, _ = _base_changes([rows], 4, "cosine", 15.0, two_stream=True)
    assert _spark_changes(changes) == expected


@pytest.mark.parametrize(("parallelism", "design"), [(4, "owner"), (2, "probe")])
def test_static_string_ids_and_tied_times_equal_base(spark, parallelism, design):
    """String ids (routed one by one), many sets per timestamp (the insert order decides ties)."""
    rows = [{**r, "id": f"s{r['id']:03d}", "ts": float(int(r["ts"]) // 3)} for r in _stream_rows(150, seed=8)]
    df = spark.createDataFrame([(r["id"], r["tokens"], r["ts"]) for r in rows], "id string, tokens array<string>, ts double")
    changes = topk_set_join(df, k=6, similarity="dice", within="10 seconds", parallelism=parallelism, design=design)
    expected, _ = _base_changes([rows], 6, "dice", 10.0)
    assert _spark_changes(changes) == expected


@pytest.mark.slow
def test_restart_with_another_parallelism_or_design_is_refused(spark, tmp_path):
    rows = _stream_rows(60)
    write_batches(tmp_path / "in", [rows[:30], rows[30:]])
    stream = (spark.readStream.schema("id long, tokens array<string>, ts double").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))
    q = run_available_now(topk_set_join(stream, k=3, within="20 seconds", parallelism=2), tmp_path / "out", tmp_path / "ck")
    assert q.exception() is None
    write_batches(tmp_path / "in", [[{"id": 1000, "tokens": ["t1"], "ts": 100.0}]], start=2)
    # the plan stored with the checkpoint refuses another parallelism or design when the query
    # starts; the single operator (parallelism=1) on a checkpoint of the two-stage pipeline has
    # another operator count, which Spark's own state metadata check may refuse first
    for other, design, message in ((4, "owner", r"parallelism: checkpoint has 2, this query has 4"),
                                   (2, "probe", r"design: checkpoint has 'owner', this query has 'probe'"),
                                   (1, "owner", r"parallelism: checkpoint has 2, this query has 1|"
                                                r"STREAMING_STATEFUL_OPERATOR_NOT_MATCH_IN_STATE_METADATA")):
        with pytest.raises(Exception, match=message):
            run_available_now(topk_set_join(stream, k=3, within="20 seconds", parallelism=other, design=design),
                              tmp_path / "out", tmp_path / "ck")


@pytest.mark.slow
def test_streaming_shared_bound_is_published_adopted_and_exact(spark, tmp_path):
    """The workers' stocks go to the driver, the bound comes back, worker 0 binds it to the next
    batch and every worker adopts it there (stepped here by hand between two runs, as the
    attached listener does after every batch); the change stream stays Base's."""
    from driftjoin.spark.runtime.stats import read_stats
    from driftjoin.spark.topk.control import SharedBoundController

    rows = _stream_rows(240, seed=11)
    batches = [rows[i:i + 60] for i in range(0, 240, 60)]
    metrics = str(tmp_path / "metrics")
    write_batches(tmp_path / "in", batches[:2])
    stream = (spark.readStream.schema("id long, tokens array<string>, ts double").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))

    def run():
        changes = topk_set_join(stream, k=3, within="30 seconds", parallelism=2, share_bound=True, metrics_dir=metrics)
        assert run_available_now(changes, tmp_path / "out", tmp_path / "ck").exception() is None

    run()
    controller = SharedBoundController(metrics, 3, 2)
    controller.step()
    assert controller.version >= 1  # (the listener may have published first: then it is that version)
    write_batches(tmp_path / "in", batches[2:], start=2)
    run()
    # batch 2 routes by what batch 1 bound (the listener's version, if it stepped in time); batch 3
    # by what batch 2 bound: the hand-stepped version or a newer one
    adopted = [r["bound_version"] for r in read_stats(metrics, "swoop_worker") if r["seq"] >= 3]
    assert len(adopted) == 2 and min(adopted) >= 1
    assert_stamped(metrics, "swoop_worker", "swoop_merge")
    expected, _ = _base_changes(batches, 3, "jaccard", 30.0)
    assert _spark_changes(spark.read.parquet(str(tmp_path / "out"))) == expected


def test_bad_settings_fail_fast(spark, tmp_path):
    df = spark.createDataFrame([(1, ["a"], 0.0)], "id long, tokens array<string>, ts double")
    with pytest.raises(ValueError, match="k must be"):
        topk_set_join(df, k=0)
    with pytest.raises(ValueError, match="similarity"):
        topk_set_join(df, k=3, similarity="euclid")
    with pytest.raises(TypeError, match="tokens_col"):
        topk_set_join(df.withColumn("tokens", F.lit("x")), k=3)
    with pytest.raises(ValueError, match="parallelism must be"):
        topk_set_join(df, k=3, parallelism=0)
    with pytest.raises(ValueError, match="design must be one of 'owner', 'probe'"):
        topk_set_join(df, k=3, parallelism=2, design="token")
    with pytest.raises(ValueError, match="needs parallelism > 1"):
        topk_set_join(df, k=3, share_bound=True, metrics_dir=str(tmp_path / "m"))
    with pytest.raises(ValueError, match="needs metrics_dir"):
        topk_set_join(df, k=3, parallelism=2, share_bound=True)
    with pytest.raises(ValueError, match="applies to streams"):
        topk_set_join(df, k=3, parallelism=2, share_bound=True, metrics_dir=str(tmp_path / "m"))


def test_within_is_inclusive_and_window_its_deprecated_spelling(spark):
    """Sets exactly ``within`` apart compete, one microsecond more never; ``window=`` still works
    with its old meaning (times less than ``window`` apart) and warns with what to write."""
    t0 = 1_700_000_000.0
    df = spark.createDataFrame([(1, ["a", "b"], t0), (2, ["a", "b"], t0 + 10.0), (3, ["a", "b"], t0 + 20.000001)],
                               "id long, tokens array<string>, ts double")
    entered = [(r.left_id, r.right_id) for r in topk_set_join(df, k=5, within="10 seconds").collect() if r.kind == "enter"]
    assert entered == [(2, 1)]
    with pytest.warns(DeprecationWarning, match=r"write within='10 seconds'"):
        old = topk_set_join(df, k=5, window="10 seconds")
    assert [r for r in old.collect() if r.kind == "enter"] == []
    with pytest.raises(ValueError, match="give within= only"):
        topk_set_join(df, k=5, within="10 seconds", window="10 seconds")
