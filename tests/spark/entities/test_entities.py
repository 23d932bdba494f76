"""``entities`` on Spark against the oracle written apart (tests/entities/oracle.py): static
grouping, streaming rows batch by batch across a restart and a replayed batch (and a restart with other
settings refused), guards, the chained pairs -> entities query, dead letters and settings refused
before the start."""

from __future__ import annotations

import random
import shutil
from pathlib import Path

import pytest

from driftjoin import SettingError, current_entities, entities, invalid_entity_links

from ..helpers import run_available_now, write_batches
from tests.entities.oracle import Oracle, components

pytestmark = pytest.mark.spark


def _random_links(rnd: random.Random, n_links: int, n_records: int) -> list[tuple[int, int]]:
    return [(rnd.randrange(n_records), rnd.randrange(n_records)) for _ in range(n_links)]


def test_static_grouping_is_the_links_connected_components(spark):
    rnd = random.Random(5)
    links = [(a, b) for a, b in _random_links(rnd, 400, 500) if a != b]
    df = spark.createDataFrame(links, "left_id long, right_id long")
    rows = entities(df).collect()
    got: dict = {}
    for r in rows:
        assert r.kind == "new" and r.seq == 0 and r.side == 0
        got.setdefault(r.entity_id, set()).add(r.record_id)
    expected = components(sorted({x for pair in links for x in pair}), links)
    assert sorted(map(sorted, got.values())) == sorted(map(sorted, expected))
    assert all(entity == min(members) for entity, members in got.items())  # named by the smallest record
    assert all(r.entity_size == len(got[r.entity_id]) for r in rows)


def test_static_two_sided_string_ids_and_one_per_source(spark):
    df = spark.createDataFrame([("a", "a"), ("a", "b"), ("c", "b"), ("d", "x"), ("e", None)],
                               "l string, r string")
    rows = entities(df, left_col="l", right_col="r", two_sided=True).collect()
    ids = {(r.side, r.record_id): r.entity_id for r in rows}
    assert ids == {(0, "a"): "a", (1, "a"): "a", (1, "b"): "a", (0, "c"): "a", (0, "d"): "d", (1, "x"): "d"}
    one = entities(df, left_col="l", right_col="r", two_sided=True, one_per_source=True, time_col=None).collect()
    refused = sorted((r.record_id, r.other_id, r.reason) for r in one if r.kind == "refused")
    assert refused == [("a", "b", "one_per_source")]  # right b would join a second right record to left a
    assert {(r.side, r.record_id): r.entity_id for r in one if r.kind == "new"} == {
        (0, "a"): "a", (1, "a"): "a", (0, "c"): "c", (1, "b"): "c", (0, "d"): "d", (1, "x"): "d"}
    assert [(r.left_id, r.reason) for r in invalid_entity_links(df, left_col="l", right_col="r", two_sided=True).collect()] \
        == [("e", "missing right id (r)")]


def _links_stream(spark, folder: Path):
    return (spark.readStream.schema("a long, b long, t double, ingest_time timestamp").option("maxFilesPerTrigger", 1)
            .json(str(folder)))


def _by_seq(rows) -> dict[int, dict]:
    out: dict[int, dict] = {}
    for r in rows:
        if r.kind != "refused":
            out.setdefault(r.seq, {})[(r.side, r.record_id)] = (r.entity_id, r.previous_id, r.kind, r.entity_size)
    return out


def test_streaming_rows_match_the_oracle_across_a_restart_a_replayed_batch_and_refuse_other_settings(spark, tmp_path):
    rnd = random.Random(11)
    batches = [[(a, b, float(10 * i + rnd.randrange(5)), None, None) for a, b in _random_links(rnd, 7, 40)]
               for i in range(5)]
    files = [[{"a": a, "b": b, "t": t, "ingest_time": "2024-01-01T00:00:00Z"} for a, b, t, *_ in links]
             for links in batches]
    inp, out, ck, metrics = tmp_path / "in", tmp_path / "out", tmp_path / "ck", tmp_path / "metrics"
    settings = dict(left_col="a", right_col="b", time_col="t", max_size=6, metrics_dir=str(metrics))
    write_batches(inp, files[:3])
    run_available_now(entities(_links_stream(spark, inp), **settings), out, ck)
    first = sorted(map(tuple, spark.read.parquet(str(out)).drop("emit_time").collect()))
    # the restart replays batch 2 (its commit removed: a crash after the sink, before the commit),
    # then runs batches 3 and 4 on the state the replay left
    for name in ("2", ".2.crc"):
        (ck / "commits" / name).unlink(missing_ok=True)
    write_batches(inp, files[3:], start=3)
    run_available_now(entities(_links_stream(spark, inp), **settings), out, ck)
    rows = spark.read.parquet(str(out)).collect()
    # the rows of batches 0-2 once each (the sink kept the first run's rows of the replayed batch)
    assert sorted(map(tuple, spark.read.parquet(str(out)).where("seq <= 2").drop("emit_time").collect())) == first
    oracle = Oracle(max_size=6)
    expected_rows, expected_refused = {}, []
    for seq, links in enumerate(batches):
        got = oracle.batch(seq, links)
        if got["rows"]:
            expected_rows[seq] = got["rows"]
        expected_refused += [(seq, x[1], y[1], why) for x, y, why in got["refused"]]
    assert _by_seq(rows) == expected_rows
    assert sum(r.kind != "refused" for r in rows) == sum(map(len, expected_rows.values()))  # no row twice
    assert sorted((r.seq, r.record_id, r.other_id, r.reason) for r in rows if r.kind == "refused") == sorted(expected_refused)
    now = {(r.side, r.record_id): r.entity_id for r in current_entities(spark.read.parquet(str(out))).collect()}
    assert now == oracle.ids()
    from driftjoin.spark.runtime.stats import read_stats

    stats = sorted(read_stats(str(metrics), "entities"), key=lambda s: s["seq"])
    assert [s["seq"] for s in stats] == list(range(5))  # the replayed batch counted once
    assert stats[-1]["entities"] == len(set(oracle.ids().values()))
    assert sum(s["max_size"] for s in stats) == len(expected_refused)
    # a restart with another guard is refused before any batch (the plan stored with the checkpoint)
    write_batches(inp, [[{"a": 90, "b": 91, "t": 99.0, "ingest_time": "2024-01-01T00:00:00Z"}]], start=5)
    with pytest.raises(Exception, match="max_size: checkpoint has 6, this query has 7"):
        run_available_now(entities(_links_stream(spark, inp), **{**settings, "max_size": 7}), out, ck)


def test_pairs_to_entities_in_one_streaming_query(spark, tmp_path):
    from driftjoin import similarity_join

    names = ["anna", "anne", "hanna", "bob", "rob", "robin", "carl", "karl", "zoe"]
    rows = [{"id": i, "name": n, "ts": float(i)} for i, n in enumerate(names)]
    inp, out, ck = tmp_path / "in", tmp_path / "out", tmp_path / "ck"
    # two batches; hanna, rob and karl join entities founded in the first
    write_batches(inp, [[rows[i] for i in (0, 1, 3, 6)], [rows[i] for i in (2, 4, 5, 7, 8)]])
    records = (spark.readStream.schema("id long, name string, ts double").option("maxFilesPerTrigger", 1)
               .json(str(inp)))
    pairs = similarity_join(records, threshold=1, metric="levenshtein", value_col="name", window=None,
                            algorithm="passjoin", parallelism=2)
    run_available_now(entities(pairs), out, ck)
    now = {r.record_id: r.entity_id for r in current_entities(spark.read.parquet(str(out))).collect()}
    # anna-anne-hanna (1 edit chains), bob-rob, carl-karl; robin and zoe stay singletons
    assert now == {0: 0, 1: 0, 2: 0, 3: 3, 4: 3, 6: 6, 7: 6}


def test_settings_are_refused_before_the_start(spark):
    df = spark.createDataFrame([(1, 2)], "left_id long, right_id long")
    with pytest.raises(SettingError, match="max_size must be an integer >= 2"):
        entities(df, max_size=1)
    with pytest.raises(SettingError, match="one_per_source needs source_cols="):
        entities(df, one_per_source=True)
    with pytest.raises(SettingError, match="left_col is not a column of the links"):
        entities(df, left_col="x")
    with pytest.raises(SettingError, match="expire_after applies to streams"):
        entities(df, time_col="left_id", expire_after="1 minute")
    dbl = spark.createDataFrame([(1.0, 2.0)], "left_id double, right_id double")
    with pytest.raises(SettingError, match="record ids must be integers or strings"):
        entities(dbl)
