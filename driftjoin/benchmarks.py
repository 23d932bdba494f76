"""``driftjoin bench``: the S3J paper's Tables 2 and 3, and the exact batch join vs Spark MLlib LSH.

- ``selectivity`` (Table 2): two 2-D uniform streams, 2,000 records/s each, 5 workers, 1-minute
  windows, 5-minute streams, selectivity 10%, 5%, 1%, 0.5%, 0.1%, S3J and ClusterJoin (500
  virtual partitions): duplication ratio, comparisons ratio, sustained throughput, p99 latency,
  with the paper's numbers in the same table.
- ``parallelism`` (Table 3): 8,000 records/s in total, 0.1% selectivity, parallelism 5, 10, 15, 20.
- ``batch``: the exact join on static DataFrames vs ``BucketedRandomProjectionLSH.approxSimilarityJoin``
  (Euclidean) on the same data in the same run: wall time, pairs, recall against the exact result.

The streaming tables run the same S3J/ClusterJoin operators in one process, a micro-batch per
second of stream time, and model each worker as its own processor (the paper ran 5 to 20 Flink
workers with 2 CPUs each; this machine has 2 cores). A worker's records are queued behind its
earlier batches, so throughput is the input rate it sustains and latency is its finish time minus
the batch's ingestion; a configuration that falls behind is reported as not keeping up, like the
paper's "timeout". ``--scale`` multiplies rates and durations (1.0 = the paper's settings).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np

from driftjoin.distance import get_metric
from driftjoin.generators.vectors import generate_vectors
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.records import Records
from driftjoin.s3j.space import random_centroids

PAPER_TABLE2 = {  # selectivity: (S3J dup, CJ dup, S3J cmp, CJ cmp); None = timeout
    0.10: (1.96, None, 1.58, None), 0.05: (1.96, None, 1.65, None), 0.01: (1.94, 6.17, 1.77, 9.70),
    0.005: (1.97, 3.53, 1.95, 11.16), 0.001: (1.92, 1.49, 5.82, 24.51),
}
PAPER_TABLE3 = {5: (1.96, 1.49, 4.48, 20.36), 10: (2.12, 1.49, 3.16, 20.36), 15: (2.37, 1.49, 2.93, 20.36), 20: (2.62, 1.49, 2.65, 20.36)}
RESULTS = Path("bench/results")


def stream_run(algorithm: str, selectivity: float, rate_per_stream: float, seconds: float, workers: int,
               window: float = 60.0, seed: int = 7, give_up_lag: float = 60.0) -> dict:
    """One streaming configuration through the in-process operators; the paper's metrics."""
    m = get_metric("angular")
    # 2-D uniform directions: the angular distance of a random pair is uniform on [0, 1]
    centroids = random_centroids(500 if algorithm == "clusterjoin" else workers, 2, seed)
    eng = S3JEngine(centroids, m, selectivity, self_join=False, dim=2, algorithm=algorithm, parallelism=workers)
    per = max(1, int(rate_per_stream))
    finish = np.zeros(workers)
    hist: list[float] = []
    records = memberships = comparisons = centroid_comparisons = pairs = 0
    lag = 0.0
    for sec in range(int(seconds)):
        w = int(sec // window)
        eng.expire_before(w)
        ts = sec + np.arange(per) / per
        vec = np.vstack([generate_vectors("uniform", seed=seed, stream=s, start=sec * per, count=per, dim=2) for s in (0, 1)])
        ids = np.concatenate([np.arange(sec * per, (sec + 1) * per) * 2 + s for s in (0, 1)])
        batch = Records(ids, np.repeat([0, 1], per).astype(np.int8), m.prepare(vec), np.concatenate([ts, ts]),
                        np.full(2 * per, w, np.int64))
        p, st = eng.process(batch)
        records += len(batch)
        memberships += st.memberships
        comparisons += st.comparisons
        centroid_comparisons += st.centroid_comparisons
        pairs += len(p)
        for k in range(workers):
            finish[k] = max(finish[k], sec + 1.0) + st.worker_seconds.get(k, 0.0)
            hist.append(finish[k] - sec)
        lag = float(finish.max() - (sec + 1.0))
        if lag > give_up_lag:
            break
    elapsed = float(finish.max()) if records else 0.0
    return {
        "algorithm": algorithm, "selectivity": selectivity, "workers": workers, "records": records,
        "duplication_ratio": memberships / records if records else math.nan,
        "comparisons_ratio": comparisons / pairs if pairs else math.nan, "pairs": pairs,
        "comparisons_ratio_with_centroids": (comparisons + centroid_comparisons) / pairs if pairs else math.nan,
        "throughput": records / elapsed if elapsed else math.nan, "input_rate": 2 * rate_per_stream,
        "p99_latency_s": float(np.quantile(hist, 0.99)) if hist else math.nan,
        "keeps_up": lag <= 5.0, "final_lag_s": lag,
    }


def _fmt(x: float | None, spec: str = ".2f") -> str:
    return "timeout" if x is None else ("n/a" if isinstance(x, float) and math.isnan(x) else format(x, spec))


def bench_selectivity(scale: float = 1.0, workers: int = 5) -> list[dict]:
    rate, seconds = 2000 * scale, max(10.0, 300 * scale)
    rows = []
    for sel in PAPER_TABLE2:
        for alg in ("s3j", "clusterjoin"):
            rows.append(stream_run(alg, sel, rate, seconds, workers, window=min(60.0, seconds)))
    print(f"\nTable 2 (selectivity): 2 x {rate:,.0f} records/s, {seconds:.0f} s streams, {workers} workers, 1-min windows")
    print(f"{'sel':>6} | {'dup S3J':>8} {'paper':>6} | {'dup CJ':>8} {'paper':>7} | {'cmp S3J':>8} {'paper':>6} | {'cmp CJ':>8} {'paper':>7} | "
          f"{'thr S3J':>9} {'thr CJ':>9} | {'p99 S3J':>8} {'p99 CJ':>8}")
    for sel, paper in PAPER_TABLE2.items():
        s, c = [r for r in rows if r["selectivity"] == sel]
        tag = lambda r, k: _fmt(r[k]) if r["keeps_up"] else f"{_fmt(r[k])}*"  # noqa: E731
        print(f"{sel:>6.1%} | {tag(s, 'duplication_ratio'):>8} {_fmt(paper[0]):>6} | {tag(c, 'duplication_ratio'):>8} {_fmt(paper[1]):>7} | "
              f"{tag(s, 'comparisons_ratio'):>8} {_fmt(paper[2]):>6} | {tag(c, 'comparisons_ratio'):>8} {_fmt(paper[3]):>7} | "
              f"{s['throughput']:>9,.0f} {c['throughput']:>9,.0f} | {s['p99_latency_s']:>8.2f} {c['p99_latency_s']:>8.2f}")
    print("* = did not keep up with the input rate (the paper's 'timeout'); throughput in records/s, p99 in s")
    _save("table2_selectivity", rows, scale)
    return rows


def bench_parallelism(scale: float = 1.0) -> list[dict]:
    rate, seconds = 4000 * scale, max(10.0, 300 * scale)
    rows = []
    for p in PAPER_TABLE3:
        for alg in ("s3j", "clusterjoin"):
            rows.append(stream_run(alg, 0.001, rate, seconds, p, window=min(300.0, seconds)))
    print(f"\nTable 3 (parallelism): 2 x {rate:,.0f} records/s, 0.1%, {seconds:.0f} s streams and windows")
    print(f"{'p':>3} | {'dup S3J':>8} {'paper':>6} | {'dup CJ':>7} {'paper':>6} | {'cmp S3J':>8} {'+cent':>7} {'paper':>6} | "
          f"{'cmp CJ':>7} {'+cent':>7} {'paper':>6} | {'thr S3J':>8} {'thr CJ':>8} | {'p99 S3J':>8} {'p99 CJ':>8}")
    for p, paper in PAPER_TABLE3.items():
        s, c = [r for r in rows if r["workers"] == p]
        print(f"{p:>3} | {_fmt(s['duplication_ratio']):>8} {paper[0]:>6} | {_fmt(c['duplication_ratio']):>7} {paper[1]:>6} | "
              f"{_fmt(s['comparisons_ratio']):>8} {_fmt(s['comparisons_ratio_with_centroids']):>7} {paper[2]:>6} | "
              f"{_fmt(c['comparisons_ratio']):>7} {_fmt(c['comparisons_ratio_with_centroids']):>7} {paper[3]:>6} | "
              f"{s['throughput']:>8,.0f} {c['throughput']:>8,.0f} | {s['p99_latency_s']:>8.2f} {c['p99_latency_s']:>8.2f}")
    print("cmp = record-to-record distance computations / pairs; +cent = also counting record-to-centroid "
          "distances of a linear scan (space or virtual partitions and workset centroids)")
    _save("table3_parallelism", rows, scale)
    return rows


#: MLlib settings tried when tuning: hash tables x bucket length (in thresholds).
LSH_TABLES = (1, 2, 4, 8)
LSH_BUCKETS = (1.0, 2.0, 4.0)
#: Rows of the sample MLlib is tuned on (and of the warm-up runs).
TUNE_ROWS = 2_000


def _timed(spark, label: str, seconds: float, fn):
    """Run ``fn`` (Spark jobs) under a job group cancelled after ``seconds``: (result, wall s) or (None, None)."""
    import threading

    sc = spark.sparkContext
    sc.setJobGroup(label, label, interruptOnCancel=True)
    timer = threading.Timer(seconds, sc.cancelJobGroup, args=(label,))
    timer.start()
    t0 = time.perf_counter()
    try:
        return fn(), time.perf_counter() - t0
    except Exception:  # a cancelled job surfaces as a Py4J/Spark error
        if time.perf_counter() - t0 >= seconds * 0.99:
            return None, None
        raise
    finally:
        timer.cancel()
        sc.setLocalProperty("spark.jobGroup.id", None)


def bench_batch(sizes: list[int], dims: list[int], neighbours: float = 5.0, timeout: float = 900.0,
                min_recall: float = 0.9, lsh_setting: tuple[int, float] | None = None) -> list[dict]:
    """Exact static join vs MLlib's approximate LSH join on the same data, in the same session.

    Data: 16 Gaussian clusters (spread 0.1) in ``dim`` dimensions, threshold chosen for about
    ``neighbours`` partners per row (:func:`driftjoin.selectivity.choose_threshold`). Both joins
    collect the (id, id) pairs of a self-join; recall is against the exact result.

    MLlib is tuned on a ``TUNE_ROWS`` sample of the same distribution, as a user would: every
    number of hash tables in ``LSH_TABLES`` and bucket length in ``LSH_BUCKETS`` x threshold,
    keeping the fastest setting that reaches ``min_recall`` there (the most accurate if none
    does); that setting then runs on the full data. Both methods are warmed up first (the first
    Spark query of a session pays about 7 s of JVM warm-up). A run longer than ``timeout``
    seconds is cancelled and reported as a timeout. ``lsh_setting`` = (tables, bucket length in
    thresholds) skips the tuning and runs MLlib with that setting.
    """
    import pandas as pd
    from pyspark.ml.feature import BucketedRandomProjectionLSH
    from pyspark.ml.functions import array_to_vector
    from pyspark.sql import functions as F

    from driftjoin.selectivity import choose_threshold
    from driftjoin.spark.session import local_session
    from driftjoin.spark.similarity import similarity_join

    spark = local_session(2, "driftjoin-bench-batch", driver_memory="12g")

    def data(n: int, dim: int):
        X = generate_vectors("gaussian", seed=1, stream=0, start=0, count=n, dim=dim, clusters=16, spread=0.1)
        t = choose_threshold(X, selectivity=min(0.5, neighbours / max(n, 2)), metric="euclidean")
        df = spark.createDataFrame(pd.DataFrame({"id": np.arange(n, dtype=np.int64), "vector": list(X)})).cache()
        vdf = df.select("id", array_to_vector("vector").alias("features")).cache()
        df.count(), vdf.count()  # materialise both caches before any timing
        return t, df, vdf

    def exact(df, t):
        rows = similarity_join(df, threshold=t, metric="euclidean", parallelism=2, centroids="sample").select("left_id", "right_id").collect()
        return {(min(a, b), max(a, b)) for a, b in rows}

    def lsh(vdf, t, tables, bucket):
        model = BucketedRandomProjectionLSH(inputCol="features", outputCol="h", bucketLength=bucket * t,
                                            numHashTables=tables, seed=1).fit(vdf)
        joined = model.approxSimilarityJoin(vdf, vdf, t, distCol="d")
        rows = joined.select(F.col("datasetA.id").alias("a"), F.col("datasetB.id").alias("b")).where("a < b").collect()
        return {(a, b) for a, b in rows}

    done = RESULTS / "batch_vs_mllib.json"  # earlier runs' other (n, dim) rows are kept
    earlier = json.loads(done.read_text())["rows"] if done.exists() else []
    tuned = lsh_setting is None
    rows: list[dict] = [r for r in earlier if r["n"] not in sizes or r["dim"] not in dims or r.get("tuned", True) != tuned]
    for dim in dims:
        tune_rows = min(TUNE_ROWS, min(sizes))
        t, df, vdf = data(tune_rows, dim)
        exact(df, t)  # warm-up
        truth, _ = _timed(spark, "tune-exact", timeout, lambda: exact(df, t))
        tuning = []
        grid = [lsh_setting] if lsh_setting else [(tables, bucket) for tables in LSH_TABLES for bucket in LSH_BUCKETS]
        for tables, bucket in grid:
            got, secs = _timed(spark, "tune-lsh", min(timeout, 120.0), lambda: lsh(vdf, t, tables, bucket))
            if got is not None:
                tuning.append({"tables": tables, "bucket": bucket, "seconds": secs,
                               "recall": len(got & truth) / len(truth) if truth else 1.0})
        good = [c for c in tuning if c["recall"] >= min_recall]
        best = min(good, key=lambda c: c["seconds"]) if good else max(tuning, key=lambda c: c["recall"])
        print(f"dim {dim}: MLlib tuned on {tune_rows:,} rows -> {best['tables']} tables, bucket length "
              f"{best['bucket']:g} x threshold (recall {best['recall']:.3f}, {len(tuning)} settings tried)", flush=True)
        df.unpersist()
        vdf.unpersist()
        for n in sizes:
            t, df, vdf = data(n, dim)
            pairs, t_exact = _timed(spark, "exact", timeout, lambda: exact(df, t))
            got, t_lsh = _timed(spark, "lsh", timeout, lambda: lsh(vdf, t, best["tables"], best["bucket"]))
            recall = (len(got & pairs) / len(pairs) if pairs else 1.0) if got is not None and pairs is not None else None
            row = {"n": n, "dim": dim, "threshold": t, "exact_seconds": t_exact,
                   "exact_pairs": len(pairs) if pairs is not None else None,
                   "lsh_seconds": t_lsh, "lsh_pairs": len(got) if got is not None else None, "lsh_recall": recall,
                   "lsh_tables": best["tables"], "lsh_bucket": best["bucket"], "tuning": tuning, "tuned": tuned,
                   "speedup": t_lsh / t_exact if t_exact and t_lsh else None}
            rows.append(row)
            late = f"> {timeout:.0f} s (timeout)"

            def took(secs: float | None, count: int | None) -> str:
                return late if secs is None else f"{secs:7.1f} s {count:>10,} pairs"

            speedup = f"{row['speedup']:.1f}x" if row["speedup"] else (f"> {timeout / t_exact:.1f}x" if t_exact else "n/a")
            print(f"n={n:>9,} dim={dim:>4}: exact {took(t_exact, row['exact_pairs'])} | MLlib LSH {took(t_lsh, row['lsh_pairs'])}"
                  f"{'' if recall is None else f', recall {recall:.3f}'} | exact/MLlib speedup {speedup}", flush=True)
            df.unpersist()
            vdf.unpersist()
            _save("batch_vs_mllib", rows, None)
    spark.stop()
    return rows


def _save(name: str, rows: list[dict], scale: float | None) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(json.dumps({"scale": scale, "rows": rows}, indent=1, default=str))
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:  # pragma: no cover
        return
    fig, ax = plt.subplots(figsize=(6, 3.5))
    if name == "batch_vs_mllib":
        for dim in sorted({r["dim"] for r in rows}):
            sel = sorted((r for r in rows if r["dim"] == dim and r.get("tuned", True)), key=lambda r: r["n"])
            ax.plot([r["n"] for r in sel if r["exact_seconds"]], [r["exact_seconds"] for r in sel if r["exact_seconds"]], "o-", label=f"exact, dim {dim}")
            ax.plot([r["n"] for r in sel if r["lsh_seconds"]], [r["lsh_seconds"] for r in sel if r["lsh_seconds"]], "x--", label=f"MLlib LSH, dim {dim}")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("rows")
        ax.set_ylabel("wall time (s)")
    else:
        key = "selectivity" if name.startswith("table2") else "workers"
        for alg in ("s3j", "clusterjoin"):
            sel = [r for r in rows if r["algorithm"] == alg]
            ax.plot([r[key] for r in sel], [r["comparisons_ratio"] for r in sel], "o-", label=f"{alg} comparisons ratio")
            ax.plot([r[key] for r in sel], [r["duplication_ratio"] for r in sel], "x--", label=f"{alg} duplication ratio")
        if key == "selectivity":
            ax.set_xscale("log")
        ax.set_xlabel(key)
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(RESULTS / f"{name}.png", dpi=100)
    plt.close(fig)
