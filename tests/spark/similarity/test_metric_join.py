"""similarity_join on strings, token sets and user metrics (the metric path) against a brute-force
oracle written from the definitions (tests/metric/oracle.py): every strategy static and streaming,
self and two-stream, unicode and empty strings, repeated tokens, thresholds exactly at a distance,
a restart from the checkpoint, dead letters and bad settings refused before the start."""

from __future__ import annotations

import numpy as np
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import functions as F

from driftjoin import invalid_records, similarity_join, user_metric
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.similarity.choice import read_choice
from tests.metric.oracle import jaccard, levenshtein, oracle

from ..helpers import assert_stamped, run_available_now, write_batches

pytestmark = pytest.mark.spark

#: unicode (accents, an astral character), empty strings, duplicates, pairs exactly 1 and 2 edits apart
WORDS = ["kitten", "sitten", "sitting", "", "a", "ab", "na\u00efve", "naive", "\U0001d11eab", "ab", "apple", "appel",
         "aple", "mitten", "smitten", "b", "\u00e9t\u00e9", "ete", "kitchen", "kitten"]


def _expected(values, t, dist, self_join=True, sides=None, ids=None):
    ids = list(range(len(values))) if ids is None else ids
    sides = [0] * len(values) if sides is None else sides
    return oracle([(i, s, v, 0) for i, s, v in zip(ids, sides, values)], dist, t, self_join)


def _got(rows):
    got = [(r.left_id, r.right_id) for r in rows]
    assert len(got) == len(set(got)), "a pair came out twice"
    return sorted(got)


def test_static_strings_every_strategy_equal_the_oracle(spark, tmp_path):
    df = spark.createDataFrame(list(enumerate(WORDS)), "id long, name string")
    for t in (1, 2):
        want = sorted(_expected(WORDS, t, levenshtein))
        for algorithm in ("passjoin", "s3j"):
            rows = similarity_join(df, threshold=t, metric="levenshtein", value_col="name", algorithm=algorithm,
                                   parallelism=3).collect()
            assert _got(rows) == want, (algorithm, t)
            assert all(r.distance == levenshtein(WORDS[r.left_id], WORDS[r.right_id]) for r in rows)
    # two streams, string ids, auto: the choice is recorded beside the statistics
    left = spark.createDataFrame([(f"L{i}", w) for i, w in enumerate(WORDS[:12])], "key string, name string")
    right = spark.createDataFrame([(f"R{i}", w) for i, w in enumerate(WORDS[8:])], "key string, name string")
    rows = similarity_join(left, right, threshold=1, metric="levenshtein", id_col="key", value_col="name", parallelism=2,
                           metrics_dir=str(tmp_path / "m")).collect()
    want = {(f"L{i}", f"R{j}") for i, a in enumerate(WORDS[:12]) for j, b in enumerate(WORDS[8:]) if levenshtein(a, b) <= 1}
    assert set(_got(rows)) == want
    assert read_choice(str(tmp_path / "m"))["algorithm"] in ("passjoin", "s3j")


def test_static_token_sets_equal_the_oracle(spark):
    sets = [["a", "b"], ["a", "b", "c", "d"], ["b", "a", "a"], ["x"], ["x", "x", "y"], ["c", "d", "e"], ["a", "b", "c"],
            ["\u00e9t\u00e9", "x"], ["d", "c"], ["a", "b", "c", "d", "e", "f"]]
    df = spark.createDataFrame(list(enumerate(sets)), "id long, toks array<string>")
    for t in (0.5, 0.0):  # {a, b} and {a, b, c, d} are exactly 0.5 apart; repeated tokens count once
        want = sorted(_expected(sets, t, jaccard))
        for algorithm in ("prefix", "s3j"):
            rows = similarity_join(df, threshold=t, metric="jaccard", value_col="toks", algorithm=algorithm,
                                   parallelism=2).collect()
            assert _got(rows) == want, (algorithm, t)
    ints = [[1, 2, 3], [2, 3, 4], [1, 2, 3, 3], [7], [7, 8], [3, 4, 2]]
    left = spark.createDataFrame([(i, s) for i, s in enumerate(ints) if i % 2 == 0], "id int, toks array<int>")
    right = spark.createDataFrame([(i, s) for i, s in enumerate(ints) if i % 2 == 1], "id int, toks array<int>")
    rows = similarity_join(left, right, threshold=0.5, metric="jaccard", value_col="toks", parallelism=2).collect()
    want = {(i, j) for i in range(0, 6, 2) for j in range(1, 6, 2) if jaccard(ints[i], ints[j]) <= 0.5}
    assert set(_got(rows)) == want


def test_user_metrics_and_the_triangle_check(spark):
    df = spark.createDataFrame(list(enumerate(WORDS)), "id long, name string")
    rows = similarity_join(df, threshold=1, metric=levenshtein, value_col="name", parallelism=2).collect()
    assert _got(rows) == sorted(_expected(WORDS, 1, levenshtein))
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (60, 2))
    vectors = spark.createDataFrame([(i, x.tolist()) for i, x in enumerate(X)], "id long, v array<double>")
    manhattan = user_metric(lambda A, B: np.abs(A[:, None, :] - B[None, :, :]).sum(axis=2), name="manhattan")
    rows = similarity_join(vectors, threshold=0.2, metric=manhattan, value_col="v", parallelism=2).collect()
    assert _got(rows) == sorted(_expected(list(X), 0.2, lambda a, b: float(np.abs(a - b).sum())))
    squared = user_metric(lambda A, B: ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2), name="squared")
    with pytest.raises(ValueError, match="violates the triangle inequality: d\\(a, c\\)"):
        similarity_join(vectors, threshold=0.2, metric=squared, value_col="v")


def test_dead_letters_and_settings_refused_before_the_start(spark):
    df = spark.createDataFrame([(1, "ab"), (2, None), (None, "ac"), (4, "abc")], "id long, name string")
    assert _got(similarity_join(df, threshold=1, metric="levenshtein", value_col="name").collect()) == [(1, 4)]
    assert {(r.id, r.reason) for r in invalid_records(df, metric="levenshtein", value_col="name").collect()} == {
        (2, "null string"), (None, "missing id")}
    sets = spark.createDataFrame([(1, ["a"]), (2, []), (3, None), (4, ["a", None])], "id long, toks array<string>")
    assert {(r.id, r.reason) for r in invalid_records(sets, metric="jaccard", value_col="toks").collect()} == {
        (2, "empty token set: Jaccard distance needs at least one token"), (3, "null token set"),
        (4, "token None of type NoneType is neither str nor int")}
    for kwargs, message in [
        ({"threshold": 1.5, "metric": "levenshtein"}, "edit distance counts whole edits"),
        ({"threshold": 1, "metric": "jaccard", "value_col": "toks"}, "must be in \\[0, 1\\)"),
        ({"threshold": 1, "metric": "jaccard"}, "column 'name' holds string values: use metric='levenshtein'"),
        ({"threshold": 0.1}, "metric='angular' compares vector values, but column 'name' holds string values"),
        ({"threshold": 1, "metric": "levenshtein", "balance": "greedy"}, "fused per space partition"),
        ({"threshold": 1, "metric": "levenshtein", "algorithm": "prefix"}, "does not apply to metric='levenshtein'"),
        ({"threshold": 1, "metric": "levenshtein", "output": "grouped"}, "one row per pair"),
    ]:
        frame = sets if kwargs.get("value_col") == "toks" else df
        with pytest.raises(ValueError, match=message):
            similarity_join(frame, **{"value_col": "name", **kwargs})


def _names(tmp_path, rows_by_batch, start=0):
    for side in (0, 1):
        write_batches(tmp_path / f"in{side}", [[r for r in rows if r["side"] == side] for rows in rows_by_batch], start=start)


def test_streaming_interval_join_of_names_restarts_from_its_checkpoint(spark, tmp_path):
    """Two streams, within= on event time, PassJoin then S3J over several micro-batches; a restart
    continues exactly, a restart with another threshold is refused."""
    rng = np.random.default_rng(7)
    base = ["anna", "ana", "hanna", "jon", "john", "johann", "marie", "maria", "mario", "\u00e9mile", "emile", ""]
    n = 120
    names = [base[k] for k in rng.integers(0, len(base), n)]
    ts = np.sort(rng.uniform(0, 60, n))
    rows = [{"id": i, "side": int(i % 2), "name": names[i], "ts": float(ts[i])} for i in range(n)]
    batches = [rows[k : k + 24] for k in range(0, n, 24)]
    expected = oracle([(r["id"], r["side"], r["name"], round(r["ts"] * 1e6)) for r in rows], levenshtein, 1, False,
                      ("interval", 5_000_000))

    def read(side):
        return (spark.readStream.schema("id long, side int, name string, ts double").option("maxFilesPerTrigger", 1)
                .json(str(tmp_path / f"in{side}")).withColumn("ts", F.col("ts").cast("timestamp")))

    def join(threshold=1, algorithm="passjoin", tag=""):
        return similarity_join(read(0), read(1), threshold=threshold, metric="levenshtein", value_col="name",
                               within="5 seconds", time_col="ts", watermark="1 minute", algorithm=algorithm,
                               parallelism=3, sample=base, metrics_dir=str(tmp_path / f"m{tag}"))

    for algorithm in ("passjoin", "s3j"):
        out, ck = tmp_path / f"out-{algorithm}", tmp_path / f"ck-{algorithm}"
        _names(tmp_path, batches[:3])
        run_available_now(join(algorithm=algorithm, tag=algorithm), out, ck)
        _names(tmp_path, batches[3:], start=3)
        q = run_available_now(join(algorithm=algorithm, tag=algorithm), out, ck)
        assert sum(1 for p in q.recentProgress if p["numInputRows"]) == 2
        got = spark.read.parquet(str(out)).collect()
        assert sorted(_got(got)) == sorted(expected.elements()), algorithm
        stats = list(read_stats(str(tmp_path / f"m{algorithm}"), "computation"))
        assert sum(s["pairs"] for s in stats) == len(got) and sum(s["late"] for s in stats) == 0
        assert_stamped(tmp_path / f"m{algorithm}", "computation")
        for side in (0, 1):
            for f in (tmp_path / f"in{side}").iterdir():
                f.unlink()
    _names(tmp_path, [batches[0]], start=9)
    with pytest.raises(StreamingQueryException, match="threshold: checkpoint has 1, this query has 2"):
        run_available_now(join(threshold=2, algorithm="s3j", tag="s3j"), tmp_path / "out-s3j", tmp_path / "ck-s3j")


def test_streaming_token_set_self_join_in_tumbling_windows(spark, tmp_path):
    rng = np.random.default_rng(3)
    vocab = ["red", "green", "blue", "\u00e9t\u00e9", "x", "y"]
    n = 90
    sets = [list(rng.choice(vocab, rng.integers(1, 5))) for _ in range(n)]  # repeated tokens too
    ts = np.sort(rng.uniform(0, 40, n))
    batch_rows = [[{"id": i, "toks": sets[i], "ts": float(ts[i])} for i in range(k, min(n, k + 30))] for k in range(0, n, 30)]
    write_batches(tmp_path / "in", batch_rows)
    stream = (spark.readStream.schema("id long, toks array<string>, ts double").option("maxFilesPerTrigger", 1)
              .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))
    sample = spark.createDataFrame([(s,) for s in sets[:30]], "toks array<string>")
    for algorithm in ("prefix", "s3j"):
        pairs = similarity_join(stream, threshold=0.5, metric="jaccard", value_col="toks", window="10 seconds",
                                time_col="ts", watermark="30 seconds", algorithm=algorithm, sample=sample, parallelism=2)
        run_available_now(pairs, tmp_path / f"out-{algorithm}", tmp_path / f"ck-{algorithm}")
        got = spark.read.parquet(str(tmp_path / f"out-{algorithm}")).collect()
        keys = [(r.left_id, r.right_id, round(r.window_start.timestamp() * 1e6)) for r in got]
        expected = oracle([(i, 0, sets[i], round(ts[i] * 1e6)) for i in range(n)], jaccard, 0.5, True,
                          ("tumbling", 10_000_000, 0))
        assert sorted(keys) == sorted(expected.elements()), algorithm
        assert all(r.window_end.timestamp() - r.window_start.timestamp() == 10 for r in got)
