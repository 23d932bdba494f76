"""similarity_join's sliding windows and interval joins on Spark against a brute-force oracle:
duplicates one second apart across a minute boundary, streams of two kinds of time (event time,
ingestion time) restarted from their checkpoint, both vector algorithms, bad settings refused."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from pyspark.sql import functions as F

from driftjoin import similarity_join
from driftjoin.distance import get_metric

from ..helpers import run_available_now, write_batches

pytestmark = pytest.mark.spark


def oracle(ids, side, vec, ts, metric, t, self_join, *, window=None, slide=None, within=None) -> Counter:
    """``(left, right, window start in seconds or None)``, once per window holding both (windows
    ``[k slide, k slide + window)``), or once per pair within ``within`` seconds; times are whole
    microseconds."""
    us = np.round(np.asarray(ts) * 1e6).astype(np.int64)
    d = metric.pairwise(vec, vec)
    out: Counter = Counter()
    for i in range(len(ids)):
        for j in range(len(ids)):
            if d[i, j] > t or (self_join and i >= j) or (not self_join and not (side[i] == 0 and side[j] == 1)):
                continue
            pair = (min(ids[i], ids[j]), max(ids[i], ids[j])) if self_join else (ids[i], ids[j])
            if within is not None:
                if abs(us[i] - us[j]) <= within * 1_000_000:
                    out[(*pair, None)] += 1
                continue
            w, s = int(window * 1e6), int(slide * 1e6)
            lo, hi = min(us[i], us[j]), max(us[i], us[j])
            for k in range(lo // s - w // s - 1, lo // s + 1):
                if k * s <= lo and hi < k * s + w:
                    out[(*pair, k * s / 1e6)] += 1
    return out


def _got(rows) -> Counter:
    return Counter((r.left_id, r.right_id, None if r.window_start is None else r.window_start.timestamp()) for r in rows)


def test_duplicates_one_second_apart_across_a_minute_boundary(spark):
    """The issue's case: a tumbling window never joins them, an interval join does (once, without a
    window), a sliding window once per window holding both, with that window's bounds."""
    df = spark.createDataFrame([(1, [0.6, 0.8], 59.5), (2, [0.6, 0.8], 60.5)], "id long, vector array<double>, ts double")
    common = dict(threshold=0.001, metric="angular", parallelism=2, time_col="ts", algorithm="s3j")
    assert similarity_join(df, window="1 minute", **common).collect() == []
    rows = similarity_join(df, within="1 second", **common).collect()
    assert [(r.left_id, r.right_id, r.window_start, r.window_end) for r in rows] == [(1, 2, None, None)]
    rows = similarity_join(df, window="1 minute", slide="20 seconds", algorithm="grid",
                           **{k: v for k, v in common.items() if k != "algorithm"}).collect()
    assert sorted((r.window_start.timestamp(), r.window_end.timestamp()) for r in rows) == [(20.0, 80.0), (40.0, 100.0)]
    grouped = similarity_join(df, window="1 minute", slide="20 seconds", output="grouped", **common).collect()
    assert sorted((r.left_id, r.window_start.timestamp(), list(r.right_ids)) for r in grouped) == [(1, 20.0, [2]), (1, 40.0, [2])]


def test_bad_window_settings_fail_before_the_start(spark):
    df = spark.createDataFrame([(1, [0.6, 0.8], 59.5)], "id long, vector array<double>, ts double")
    for settings, message in (({"window": "20 seconds", "slide": "1 minute"}, "slide.*longer than window"),
                              ({"window": "1 minute", "within": "5 seconds"}, "within=.*cannot be combined"),
                              ({"slide": "5 seconds", "window": None}, "need window="),
                              ({"within": "-1 second"}, "within"),
                              ({"window": "0 seconds"}, "window must be"),
                              ({"window": "1 minute", "slide": "0 seconds"}, "slide must be")):
        with pytest.raises(ValueError, match=message):
            similarity_join(df, threshold=0.1, time_col="ts", **settings)


def _write(folder, rows, side, sides, parts, start):
    """``parts`` files per side, numbered from ``start`` (later files have later mtimes)."""
    for s in sides:
        part = [r for r in rows if side[r["id"]] == s]
        bounds = np.linspace(0, len(part), parts + 1).astype(int)
        write_batches(folder / "LR"[s], [part[a:b] for a, b in zip(bounds, bounds[1:])], start=start)


@pytest.mark.slow
@pytest.mark.parametrize("case", [
    {"window": 30.0, "slide": 10.0, "algorithm": "s3j", "time": "event", "self_join": False},
    {"within": 5.0, "algorithm": "grid", "time": "ingest", "self_join": True},
])
def test_streams_with_sliding_and_interval_windows_restart_exactly(spark, tmp_path, case):
    """Micro-batches cross window (and bucket) boundaries; half the input runs, the query stops,
    the rest runs from the checkpoint: every pair exactly as often as the oracle says."""
    rng = np.random.default_rng(3)
    n = 360
    centers = rng.normal(size=(40, 3))
    X = centers[rng.integers(0, 40, n)] + rng.normal(0, 0.01, (n, 3))
    # times on and one microsecond beside 5-second boundaries, and anywhere, over 90 seconds
    edges = rng.integers(0, 18, n) * 5.0 + rng.choice([-1e-6, 0.0, 1e-6], n)
    ts = np.sort(np.where(rng.random(n) < 0.5, edges, rng.uniform(0, 90, n)).clip(0, None))
    self_join = case["self_join"]
    side = np.zeros(n, int) if self_join else rng.integers(0, 2, n)
    rows = [{"id": i, "vector": X[i].tolist(), "ts": float(ts[i])} for i in range(n)]
    settings = {k: f"{case[k]:g} seconds" for k in ("window", "slide", "within") if k in case}
    if case["time"] == "event":
        times = {"time_col": "ts", "watermark": "10 seconds"}
    else:
        times = {"ingest_col": "ts"}
    first, second = rows[: n // 2], rows[n // 2:]

    def run():
        def read(name):
            return (spark.readStream.schema("id long, vector array<double>, ts double").option("maxFilesPerTrigger", 1)
                    .json(str(tmp_path / name)).withColumn("ts", F.col("ts").cast("timestamp")))

        right = None if self_join else read("R")
        pairs = similarity_join(read("L"), right, threshold=0.05, metric="euclidean", parallelism=2, dim=3,
                                algorithm=case["algorithm"], **settings, **times)
        return run_available_now(pairs, tmp_path / "out", tmp_path / "ck")

    sides = (0,) if self_join else (0, 1)
    _write(tmp_path, first, side, sides, 3, 0)
    run()
    _write(tmp_path, second, side, sides, 3, 3)
    q = run()
    assert sum(1 for p in q.recentProgress if p["numInputRows"]) >= 2
    got = _got(spark.read.parquet(str(tmp_path / "out")).collect())
    expected = oracle(np.arange(n), side, X, ts, get_metric("euclidean"), 0.05, self_join,
                      window=case.get("window"), slide=case.get("slide"), within=case.get("within"))
    assert len(expected) > 50
    assert got == expected
