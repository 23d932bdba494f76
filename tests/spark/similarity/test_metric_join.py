"""similarity_join on strings, token sets and user metrics (the metric path) against a brute-force
oracle written here from the definitions (rapidfuzz's Levenshtein distance, plain set arithmetic;
the window rule of tests/metric/oracle.py): every strategy by name and ``auto``, static and
streaming, self and two-stream, tumbling, sliding and ``within`` windows, unicode and empty
strings, repeated tokens, thresholds exactly at a distance, a restart from the checkpoint, dead
letters and bad settings refused before the start.

Spark time is what this file costs, so several joins share one query (a union of their pair
DataFrames, told apart by a ``tag`` column) and the streams are a few small micro-batches.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from rapidfuzz.distance import Levenshtein

from driftjoin import invalid_records, similarity_join, user_metric
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.similarity.choice import read_choice
from tests.metric.oracle import jaccard, oracle

from ..helpers import assert_stamped, run_available_now, write_batches

pytestmark = pytest.mark.spark

#: unicode (accents, an astral character), empty strings, duplicates, pairs exactly 1 and 2 edits apart
WORDS = ["kitten", "sitten", "sitting", "", "a", "ab", "na\u00efve", "naive", "\U0001d11eab", "ab", "apple", "appel",
         "aple", "mitten", "smitten", "b", "\u00e9t\u00e9", "ete", "kitchen", "kitten"]

#: repeated tokens ({"a", "b"} and ["b", "a", "a"] are one set), pairs exactly 0.5 apart
SETS = [["a", "b"], ["a", "b", "c", "d"], ["b", "a", "a"], ["x"], ["x", "x", "y"], ["c", "d", "e"], ["a", "b", "c"],
        ["\u00e9t\u00e9", "x"], ["d", "c"], ["a", "b", "c", "d", "e", "f"]]


def lev(a: str, b: str) -> int:
    return Levenshtein.distance(a, b)


def _want(values, t, dist, times=None, window=None) -> Counter:
    """Oracle keys ``(left, right[, window start in µs])`` of a self-join of ``values`` (ids 0..n-1)."""
    times = [0] * len(values) if times is None else times
    return oracle([(i, 0, v, round(s * 1e6)) for i, (v, s) in enumerate(zip(values, times))], dist, t, True, window)


def _keys(rows, windowed: bool = False) -> Counter:
    got = Counter((r.left_id, r.right_id) + ((round(r.window_start.timestamp() * 1e6),) if windowed else ())
                  for r in rows)
    assert all(n == 1 for n in got.values()), "a pair came out twice"
    return got


def _union(joins: dict[str, DataFrame]) -> DataFrame:
    frames = [df.withColumn("tag", F.lit(tag)) for tag, df in joins.items()]
    out = frames[0]
    for df in frames[1:]:
        out = out.unionByName(df)
    return out


def _by_tag(rows) -> dict[str, list]:
    out: dict[str, list] = {}
    for r in rows:
        out.setdefault(r.tag, []).append(r)
    return out


def test_static_strings_every_strategy_and_sliding_windows(spark, tmp_path):
    times = [3.0 * i for i in range(len(WORDS))]  # records 0 s .. 57 s, some exactly on a 5 s boundary
    df = (spark.createDataFrame([(i, w, s) for i, (w, s) in enumerate(zip(WORDS, times))], "id long, name string, s double")
          .withColumn("ts", F.timestamp_seconds("s")))
    joins = {f"{a}-{t}": similarity_join(df, threshold=t, metric="levenshtein", value_col="name", algorithm=a,
                                         parallelism=3, window=None)
             for a in ("passjoin", "s3j") for t in (1, 2)}
    joins["sliding"] = similarity_join(df, threshold=2, metric="levenshtein", value_col="name", window="10 seconds",
                                       slide="5 seconds", time_col="ts", algorithm="passjoin", parallelism=2)
    got = _by_tag(_union(joins).collect())
    for a in ("passjoin", "s3j"):
        for t in (1, 2):
            rows = got.get(f"{a}-{t}", [])
            assert _keys(rows) == _want(WORDS, t, lev), (a, t)
            assert all(r.distance == lev(WORDS[r.left_id], WORDS[r.right_id]) for r in rows)
    assert _keys(got["sliding"], windowed=True) == _want(WORDS, 2, lev, times, ("sliding", 10_000_000, 5_000_000, 0))
    assert all(r.window_end.timestamp() - r.window_start.timestamp() == 10 for r in got["sliding"])
    # two inputs, string ids, auto: the choice is recorded beside the statistics
    left = spark.createDataFrame([(f"L{i}", w) for i, w in enumerate(WORDS[:12])], "key string, name string")
    right = spark.createDataFrame([(f"R{i}", w) for i, w in enumerate(WORDS[8:])], "key string, name string")
    rows = similarity_join(left, right, threshold=1, metric="levenshtein", id_col="key", value_col="name", parallelism=2,
                           metrics_dir=str(tmp_path / "m")).collect()
    want = {(f"L{i}", f"R{j}") for i, a in enumerate(WORDS[:12]) for j, b in enumerate(WORDS[8:]) if lev(a, b) <= 1}
    assert set(_keys(rows)) == want
    assert read_choice(str(tmp_path / "m"))["algorithm"] in ("passjoin", "s3j")


def test_static_token_sets_every_strategy_and_within(spark):
    times = [2.0 * i for i in range(len(SETS))]
    df = (spark.createDataFrame([(i, s, t) for i, (s, t) in enumerate(zip(SETS, times))], "id long, toks array<string>, s double")
          .withColumn("ts", F.timestamp_seconds("s")))
    joins = {f"{a}-{t}": similarity_join(df, threshold=t, metric="jaccard", value_col="toks", algorithm=a,
                                         parallelism=2, window=None)
             for a in ("prefix", "s3j", "auto") for t in (0.5, 0.0)}
    joins["within"] = similarity_join(df, threshold=0.5, metric="jaccard", value_col="toks", window=None,
                                      within="4 seconds", time_col="ts", algorithm="prefix", parallelism=2)
    got = _by_tag(_union(joins).collect())
    for a in ("prefix", "s3j", "auto"):
        for t in (0.5, 0.0):
            assert _keys(got.get(f"{a}-{t}", [])) == _want(SETS, t, jaccard), (a, t)
    assert _keys(got["within"]) == _want(SETS, 0.5, jaccard, times, ("interval", 4_000_000))
    assert all(r.window_start is None for r in got["within"])
    ints = [[1, 2, 3], [2, 3, 4], [1, 2, 3, 3], [7], [7, 8], [3, 4, 2]]
    left = spark.createDataFrame([(i, s) for i, s in enumerate(ints) if i % 2 == 0], "id int, toks array<int>")
    right = spark.createDataFrame([(i, s) for i, s in enumerate(ints) if i % 2 == 1], "id int, toks array<int>")
    rows = similarity_join(left, right, threshold=0.5, metric="jaccard", value_col="toks", parallelism=2).collect()
    want = {(i, j) for i in range(0, 6, 2) for j in range(1, 6, 2) if jaccard(ints[i], ints[j]) <= 0.5}
    assert set(_keys(rows)) == want


def test_user_metrics_and_the_triangle_check(spark):
    df = spark.createDataFrame(list(enumerate(WORDS)), "id long, name string")
    rng = np.random.default_rng(1)
    X = rng.uniform(0, 1, (60, 2))
    vectors = spark.createDataFrame([(i, x.tolist()) for i, x in enumerate(X)], "id long, v array<double>")
    manhattan = user_metric(pairwise=lambda A, B: np.abs(A[:, None, :] - B[None, :, :]).sum(axis=2), name="manhattan")
    # a lambda: pickled by value (a function of this test module is pickled by reference, and the
    # workers cannot import the test module; rapidfuzz's compiled functions do not pickle)
    edits = lambda a, b: Levenshtein.distance(a, b)  # noqa: E731
    callable_rows = similarity_join(df, threshold=1, metric=edits, value_col="name", parallelism=2).collect()
    assert _keys(callable_rows) == _want(WORDS, 1, lev)
    rows = similarity_join(vectors, threshold=0.2, metric=manhattan, value_col="v", parallelism=2).collect()
    assert _keys(rows) == _want(list(X), 0.2, lambda a, b: float(np.abs(a - b).sum()))
    squared = user_metric(pairwise=lambda A, B: ((A[:, None, :] - B[None, :, :]) ** 2).sum(axis=2), name="squared")
    with pytest.raises(ValueError, match=r"'squared' violates the triangle inequality: d\(a, c\) = .* for a=.*, b=.*, c="):
        similarity_join(vectors, threshold=0.2, metric=squared, value_col="v")
    with pytest.raises(ValueError, match=r"'lev2' violates the triangle inequality: .* for a=.*, b=.*, c="):
        def lev2(a, b):
            return lev(a, b) ** 2
        similarity_join(df, threshold=1, metric=lev2, value_col="name")


def test_dead_letters_and_settings_refused_before_the_start(spark):
    df = spark.createDataFrame([(1, "ab"), (2, None), (None, "ac"), (4, "abc")], "id long, name string")
    assert sorted(_keys(similarity_join(df, threshold=1, metric="levenshtein", value_col="name").collect())) == [(1, 4)]
    assert {(r.id, r.reason) for r in invalid_records(df, metric="levenshtein", value_col="name").collect()} == {
        (2, "null string"), (None, "missing id")}
    sets = spark.createDataFrame([(1, ["a"]), (2, []), (3, None), (4, ["a", None])], "id long, toks array<string>")
    assert {(r.id, r.reason) for r in invalid_records(sets, metric="jaccard", value_col="toks").collect()} == {
        (2, "empty token set: Jaccard distance needs at least one token"), (3, "null token set"),
        (4, "token None of type NoneType is neither str nor int")}
    # a user metric's own dead letter: a null value (a callable is never called on one)
    assert {(r.id, r.reason) for r in invalid_records(df, metric=lambda a, b: 0.0, value_col="name").collect()} == {
        (2, "null value"), (None, "missing id")}
    for frame, kwargs, message in [
        (df, {"threshold": 1.5, "metric": "levenshtein"}, "edit distance counts whole edits; use a whole number such as 1"),
        (sets, {"threshold": 1, "metric": "jaccard", "value_col": "toks"}, r"must be in \[0, 1\)"),
        (sets, {"threshold": -0.1, "metric": "jaccard", "value_col": "toks"}, r"must be in \[0, 1\)"),
        (df, {"threshold": 0.5, "metric": "jaccard"}, "column 'name' holds string values: use metric='levenshtein'"),
        (sets, {"threshold": 1, "metric": "levenshtein", "value_col": "toks"}, "metric='levenshtein' compares string values"),
        (df, {"threshold": 0.1}, "metric='angular' compares vector values, but column 'name' holds string values"),
        (df, {"threshold": 1, "metric": "levenshtein", "balance": "greedy"}, "fused per space partition"),
        (df, {"threshold": 1, "metric": "levenshtein", "algorithm": "prefix"},
         r"algorithm must be one of 'auto', 's3j', 'passjoin' \(for metric='levenshtein'\), got 'prefix'"),
        (df, {"threshold": 1, "metric": 3}, "metric must be the name of a distance .*, a callable f"),
        (df, {"threshold": 1, "metric": "levenshtein", "output": "grouped"}, "one row per pair"),
        (df, {"threshold": 1, "metric": "levenshtein", "window": "10 seconds", "slide": "20 seconds"},
         "slide='20 seconds' is longer than window='10 seconds'"),
        (df, {"threshold": 1, "metric": "levenshtein", "window": "10 seconds", "within": "5 seconds"},
         r"within= \(an interval join\) cannot be combined with window="),
    ]:
        with pytest.raises(ValueError, match=message):
            similarity_join(frame, **{"value_col": "name", **kwargs})


def _names(tmp_path, rows_by_batch, start=0):
    for side in (0, 1):
        write_batches(tmp_path / f"in{side}", [[r for r in rows if r["side"] == side] for rows in rows_by_batch], start=start)


def test_streaming_interval_join_of_names_restarts_from_its_checkpoint(spark, tmp_path):
    """Two streams, within= on event time, PassJoin and S3J side by side in one query over several
    micro-batches; a restart continues exactly, a restart with another threshold is refused.
    A null name (a JSON null) is a dead letter, never a pair."""
    rng = np.random.default_rng(7)
    base = ["anna", "ana", "hanna", "jon", "john", "johann", "marie", "maria", "mario", "\u00e9mile", "emile", ""]
    n = 100
    names = [base[k] for k in rng.integers(0, len(base), n)]
    ts = np.sort(rng.uniform(0, 50, n))
    rows = [{"id": i, "side": int(i % 2), "name": names[i], "ts": float(ts[i])} for i in range(n)]
    rows.append({"id": n, "side": 0, "name": None, "ts": 1.0})
    batches = [rows[k : k + 25] for k in range(0, len(rows), 25)]
    expected = oracle([(r["id"], r["side"], r["name"], round(r["ts"] * 1e6)) for r in rows[:n]], lev, 1, False,
                      ("interval", 5_000_000))

    def read(side):
        return (spark.readStream.schema("id long, side int, name string, ts double").option("maxFilesPerTrigger", 1)
                .json(str(tmp_path / f"in{side}")).withColumn("ts", F.col("ts").cast("timestamp")))

    def join(threshold=1):
        return _union({a: similarity_join(read(0), read(1), threshold=threshold, metric="levenshtein", value_col="name",
                                          within="5 seconds", time_col="ts", watermark="1 minute", algorithm=a,
                                          parallelism=3, sample=base, metrics_dir=str(tmp_path / f"m{a}"))
                       for a in ("passjoin", "s3j")})

    out, ck = tmp_path / "out", tmp_path / "ck"
    _names(tmp_path, batches[:2])
    run_available_now(join(), out, ck)
    _names(tmp_path, batches[2:], start=2)
    q = run_available_now(join(), out, ck)
    assert sum(1 for p in q.recentProgress if p["numInputRows"]) == len(batches) - 2
    got = _by_tag(spark.read.parquet(str(out)).collect())
    for a in ("passjoin", "s3j"):
        assert _keys(got[a]) == expected, a
        stats = list(read_stats(str(tmp_path / f"m{a}"), "computation"))
        assert sum(s["pairs"] for s in stats) == len(got[a]) and sum(s["late"] for s in stats) == 0
        assert_stamped(tmp_path / f"m{a}", "computation")
    _names(tmp_path, [batches[0]], start=9)
    with pytest.raises(StreamingQueryException, match="threshold: checkpoint has 1, this query has 2"):
        run_available_now(join(threshold=2), out, ck)


def test_streaming_token_set_self_join_in_tumbling_and_sliding_windows(spark, tmp_path):
    rng = np.random.default_rng(3)
    vocab = ["red", "green", "blue", "\u00e9t\u00e9", "x", "y"]
    n = 60
    sets = [list(rng.choice(vocab, rng.integers(1, 5))) for _ in range(n)]  # repeated tokens too
    ts = np.sort(rng.uniform(0, 30, n))
    batch_rows = [[{"id": i, "toks": sets[i], "ts": float(ts[i])} for i in range(k, min(n, k + 20))] for k in range(0, n, 20)]
    write_batches(tmp_path / "in", batch_rows)

    def stream():
        return (spark.readStream.schema("id long, toks array<string>, ts double").option("maxFilesPerTrigger", 1)
                .json(str(tmp_path / "in")).withColumn("ts", F.col("ts").cast("timestamp")))

    sample = spark.createDataFrame([(s,) for s in sets[:20]], "toks array<string>")
    common = dict(threshold=0.5, metric="jaccard", value_col="toks", time_col="ts", watermark="30 seconds",
                  sample=sample, parallelism=2)
    pairs = _union({"tumbling": similarity_join(stream(), window="10 seconds", algorithm="prefix", **common),
                    "sliding": similarity_join(stream(), window="10 seconds", slide="5 seconds", algorithm="s3j", **common)})
    run_available_now(pairs, tmp_path / "out", tmp_path / "ck")
    got = _by_tag(spark.read.parquet(str(tmp_path / "out")).collect())
    assert _keys(got["tumbling"], windowed=True) == _want(sets, 0.5, jaccard, ts, ("tumbling", 10_000_000, 0))
    assert _keys(got["sliding"], windowed=True) == _want(sets, 0.5, jaccard, ts, ("sliding", 10_000_000, 5_000_000, 0))
    assert all(r.window_end.timestamp() - r.window_start.timestamp() == 10 for rows in got.values() for r in rows)
