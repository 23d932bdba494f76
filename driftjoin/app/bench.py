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
import os
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
#: Every MLlib tuning done by ``bench batch`` (its whole grid), for ``lsh_setting="reuse"``.
LSH_TUNING = RESULTS / "lsh_tuning.json"


def _load() -> list[float]:
    """The machine's 1-, 5- and 15-minute load averages (``uptime``), rounded."""
    return [round(v, 2) for v in os.getloadavg()]


def _dominated(tables: int, bucket: float, met: list[dict]) -> bool:
    """Whether an MLlib setting does at least the work of one that already reached the recall asked.

    ``BucketedRandomProjectionLSH`` draws its hash vectors row by row from ``seed``, so the first
    ``k`` tables of any model with the same seed are the same; and a bucket of length ``m * b``
    (``m`` a power of two, so that even in floating point ``floor(x / mb) = floor(floor(x / b) / m)``)
    is a union of buckets of length ``b``. A setting with at least the tables of ``c`` and such a
    multiple of its bucket length thus finds a superset of ``c``'s candidate pairs: at least its
    recall for at least its work. Tuning skips it; only timing noise could have made it the fastest
    (``tests/app/test_bench_tuning.py`` checks both properties on MLlib).
    """
    return any(tables >= c["tables"] and bucket >= c["bucket"] and math.log2(bucket / c["bucket"]).is_integer()
               for c in met)


def _tuning_key(dataset: str, dim: int, rows: int, min_recall: float) -> str:
    """What a tuning depends on: the data set and dimension, the sample's rows, the recall asked, the grid tried."""
    return f"{dataset}/{dim}/{rows}/{min_recall:g}/{','.join(map(str, LSH_TABLES))}x{','.join(f'{b:g}' for b in LSH_BUCKETS)}"


def _timed(spark, label: str, seconds: float, fn):
    """Run ``fn`` (Spark jobs) under an operation tag interrupted after ``seconds``: (result, wall s) or (None, None).

    Tags work on classic and Spark Connect sessions alike (a job group needs the SparkContext)."""
    import threading

    spark.addTag(label)
    timer = threading.Timer(seconds, spark.interruptTag, args=(label,))
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
        spark.removeTag(label)


#: What ``bench batch`` can run side by side: driftjoin's algorithms on Spark, MLlib's LSH join,
#: FAISS's exact range search (one process) and a blocked numpy matrix-product join (one process).
BATCH_METHODS = ("auto", "grid", "s3j", "mllib", "faiss", "numpy")
#: Rows per block of the numpy reference join.
NUMPY_BLOCK = 1024


def numpy_join(x: np.ndarray, t: float) -> set[tuple[int, int]]:
    """The blocked matrix-product self-join a user would write in numpy (float32 products, one process)."""
    sq = np.einsum("ij,ij->i", x, x)
    out: set[tuple[int, int]] = set()
    for i0 in range(0, len(x), NUMPY_BLOCK):
        i1 = min(len(x), i0 + NUMPY_BLOCK)
        d2 = sq[i0:i1, None] + sq[None, i0:] - 2.0 * (x[i0:i1] @ x[i0:].T)
        ii, jj = np.nonzero(d2 <= t * t)
        keep = jj > ii
        out.update(zip((ii[keep] + i0).tolist(), (jj[keep] + i0).tolist()))
    return out


def faiss_join(x: np.ndarray, t: float) -> set[tuple[int, int]]:
    """FAISS's exact range search (IndexFlatL2, float32, every thread of the process) as a self-join."""
    import faiss

    index = faiss.IndexFlatL2(x.shape[1])
    index.add(np.ascontiguousarray(x, dtype=np.float32))
    lims, _, found = index.range_search(np.ascontiguousarray(x, dtype=np.float32), float(t) * float(t))
    counts = np.diff(lims).astype(np.int64)
    query = np.repeat(np.arange(len(x)), counts)
    keep = found > query
    return set(zip(query[keep].tolist(), found[keep].tolist()))


def bench_batch(sizes: list[int], dims: list[int], neighbours: float = 5.0, timeout: float = 900.0,
                min_recall: float = 0.9, lsh_setting: tuple[int, float] | str | None = None,
                datasets: tuple[str, ...] = ("gaussian",), methods: tuple[str, ...] = BATCH_METHODS,
                parallelism: int = 2, limits: dict[str, float] | None = None) -> list[dict]:
    """driftjoin's exact static joins vs MLlib's approximate LSH join, FAISS and numpy on the same data.

    Data (:mod:`driftjoin.generators.embeddings`, float32 vectors): ``gaussian`` clusters, ``aniso``
    (anisotropic, normalised) or ``text`` (TF-IDF + SVD of a real corpus); Euclidean distance,
    threshold chosen for about ``neighbours`` partners per row
    (:func:`driftjoin.spark.similarity.threshold.choose_threshold`). Every method self-joins the same rows and
    its (id, id) pairs are collected; recall is against driftjoin's exact result (all driftjoin
    algorithms must return the same pairs: ``exact_agree``).

    - ``auto``, ``grid``, ``s3j``: ``similarity_join`` on the static DataFrame, ``parallelism``
      workers (S3J with centroids sampled from the data).
    - ``mllib``: ``BucketedRandomProjectionLSH.approxSimilarityJoin``, tuned on a ``TUNE_ROWS``
      sample of the same data as a user would: every number of hash tables in ``LSH_TABLES`` and
      bucket length in ``LSH_BUCKETS`` x threshold, the fastest setting reaching ``min_recall``
      there (the most accurate if none does), skipping settings that do a superset of the work of
      one already reaching it (:func:`_dominated`); ``lsh_setting`` = (tables, bucket) skips tuning;
      ``lsh_setting="reuse"`` takes the setting an earlier run tuned by this same procedure on
      the same data set, dimension, sample rows and recall (``LSH_TUNING``; tuned and recorded
      there if none did). Every tuning's grid (seconds, recall) goes to the row and to ``LSH_TUNING``.
    - ``faiss``: ``IndexFlatL2.range_search`` in this process (exact search in float32).
    - ``numpy``: a blocked float32 matrix-product join in this process (:func:`numpy_join`).

    Spark methods are warmed up first; a run longer than ``timeout`` seconds (``limits[method]``
    if given) is cancelled (Spark) or skipped for the larger sizes (in-process references) and
    reported as a timeout. Each row records the machine's load averages before and after it.
    """
    import tempfile

    import pandas as pd
    from pyspark.sql import functions as F

    from driftjoin.generators.embeddings import embeddings
    from driftjoin.spark.runtime.session import local_session
    from driftjoin.spark.similarity.api import similarity_join
    from driftjoin.spark.similarity.choice import read_choice
    from driftjoin.spark.similarity.threshold import choose_threshold

    unknown = (set(methods) | set(limits or {})) - set(BATCH_METHODS)
    if unknown:
        raise ValueError(f"unknown methods {sorted(unknown)}; choose from {', '.join(BATCH_METHODS)}")
    limit = {m: (limits or {}).get(m, timeout) for m in BATCH_METHODS}
    tunings = json.loads(LSH_TUNING.read_text()) if LSH_TUNING.exists() else {}
    spark = local_session(parallelism, "driftjoin-bench-batch", driver_memory="12g")
    tmp = Path(tempfile.mkdtemp(prefix="driftjoin-bench-"))

    def frames(x: np.ndarray, with_lsh: bool):
        from pyspark.ml.functions import array_to_vector

        df = spark.createDataFrame(pd.DataFrame({"id": np.arange(len(x), dtype=np.int64), "vector": list(x)})).cache()
        df.count()
        vdf = None
        if with_lsh:
            vdf = df.select("id", array_to_vector("vector").alias("features")).cache()
            vdf.count()
        return df, vdf

    def exact(df, t, algorithm, metrics_dir=None):
        rows = similarity_join(df, threshold=t, metric="euclidean", parallelism=parallelism, algorithm=algorithm,
                               centroids="sample", metrics_dir=metrics_dir).select("left_id", "right_id").collect()
        return {(min(a, b), max(a, b)) for a, b in rows}

    def lsh(vdf, t, tables, bucket):
        from pyspark.ml.feature import BucketedRandomProjectionLSH

        model = BucketedRandomProjectionLSH(inputCol="features", outputCol="h", bucketLength=bucket * t,
                                            numHashTables=tables, seed=1).fit(vdf)
        joined = model.approxSimilarityJoin(vdf, vdf, t, distCol="d")
        rows = joined.select(F.col("datasetA.id").alias("a"), F.col("datasetB.id").alias("b")).where("a < b").collect()
        return {(a, b) for a, b in rows}

    done = RESULTS / "batch_compare.json"  # earlier runs' other (dataset, n, dim) rows are kept
    earlier = json.loads(done.read_text())["rows"] if done.exists() else []
    rows: list[dict] = [r for r in earlier if not (r["dataset"] in datasets and r["n"] in sizes and r["dim"] in dims)]
    slow_refs: dict[str, float] = {}  # in-process references that timed out: skip larger sizes
    driftjoin_methods = [m for m in methods if m in ("auto", "grid", "s3j")]
    for dataset in datasets:
        for dim in dims:
            tune_rows = min(TUNE_ROWS, min(sizes))
            x = embeddings(dataset, tune_rows, dim)
            t = choose_threshold(x, selectivity=min(0.5, neighbours / max(tune_rows, 2)), metric="euclidean")
            df, vdf = frames(x, "mllib" in methods)
            for m in driftjoin_methods:
                _attempt(lambda: _timed(spark, "warm-up", limit[m], lambda: exact(df, t, m)))
            best, tuned = None, None
            key = _tuning_key(dataset, dim, tune_rows, min_recall)
            if "mllib" in methods and lsh_setting == "reuse" and key in tunings:
                tuned = {**tunings[key], "reused": True}
                best = tuned["best"]
                print(f"{dataset} dim {dim}: MLlib setting reused from the tuning of {tuned['when']} on {tune_rows:,} rows "
                      f"-> {best['tables']} tables, bucket length {best['bucket']:g} x threshold", flush=True)
            elif "mllib" in methods:
                t0 = time.perf_counter()
                truth, _ = _timed(spark, "tune-exact", limit["auto"], lambda: exact(df, t, "auto"))
                tuning = []
                fixed = isinstance(lsh_setting, tuple)
                grid = [lsh_setting] if fixed else [(tb, bk) for tb in LSH_TABLES for bk in LSH_BUCKETS]
                dominated = []
                for tables, bucket in grid:
                    if _dominated(tables, bucket, [c for c in tuning if c["recall"] >= min_recall]):
                        dominated.append({"tables": tables, "bucket": bucket})
                        continue
                    got, secs = _timed(spark, "tune-lsh", min(limit["mllib"], 120.0), lambda: lsh(vdf, t, tables, bucket))
                    if got is not None and truth is not None:
                        tuning.append({"tables": tables, "bucket": bucket, "seconds": secs,
                                       "recall": len(got & truth) / len(truth) if truth else 1.0})
                        print(f"  MLlib {tables} tables, bucket {bucket:g} x t: {secs:.1f} s, recall "
                              f"{tuning[-1]['recall']:.3f}", flush=True)
                good = [c for c in tuning if c["recall"] >= min_recall]
                best = min(good, key=lambda c: c["seconds"]) if good else max(tuning, key=lambda c: c["recall"])
                tuned = {"best": best, "grid": tuning, "dominated": dominated, "seconds": time.perf_counter() - t0,
                         "rows": tune_rows, "when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "load": _load(),
                         "reused": False}
                print(f"{dataset} dim {dim}: MLlib tuned on {tune_rows:,} rows in {tuned['seconds']:.0f} s -> "
                      f"{best['tables']} tables, bucket length {best['bucket']:g} x threshold "
                      f"(recall {best['recall']:.3f}, {len(tuning)} settings run, {len(dominated)} dominated)", flush=True)
                if not fixed:
                    tunings[key] = {k: v for k, v in tuned.items() if k != "reused"}
                    RESULTS.mkdir(parents=True, exist_ok=True)
                    LSH_TUNING.write_text(json.dumps(tunings, indent=1))
            if vdf is not None:
                vdf.unpersist()
            df.unpersist()
            for n in sizes:
                try:
                    x = embeddings(dataset, n, dim)
                except ValueError as e:
                    print(f"{dataset} n={n:,} dim={dim}: skipped ({e})", flush=True)
                    continue
                t = choose_threshold(x, selectivity=min(0.5, neighbours / max(n, 2)), metric="euclidean")
                df, vdf = frames(x, "mllib" in methods)
                row: dict = {"dataset": dataset, "n": n, "dim": dim, "threshold": t, "parallelism": parallelism,
                             "results": {}, "load_before": _load()}
                if tuned is not None:
                    row["mllib_tuning"] = tuned
                truth = None
                for m in methods:
                    error = None
                    if m in ("faiss", "numpy"):
                        if slow_refs.get(f"{m}-{dim}", math.inf) <= n:
                            got, secs = None, None
                        else:
                            t0 = time.perf_counter()
                            got = faiss_join(x, t) if m == "faiss" else numpy_join(x, t)
                            secs = time.perf_counter() - t0
                            if secs > limit[m]:
                                slow_refs[f"{m}-{dim}"] = n * 1.5
                    elif m == "mllib":
                        (got, secs), error = _attempt(lambda: _timed(spark, "lsh", limit[m],
                                                                     lambda: lsh(vdf, t, best["tables"], best["bucket"])))
                    else:
                        mdir = str(tmp / f"{dataset}-{n}-{dim}-{m}")
                        (got, secs), error = _attempt(lambda: _timed(spark, m, limit[m], lambda: exact(df, t, m, mdir)))
                        if m == "auto":
                            row["auto_choice"] = read_choice(mdir)
                        if got is not None:
                            if truth is None:
                                truth = got
                            row["exact_agree"] = row.get("exact_agree", True) and got == truth
                    row["results"][m] = {"seconds": secs, "pairs": None if got is None else len(got), "got": got,
                                         "limit": limit[m], "error": error}
                    print(f"  {dataset} n={n:,} dim={dim} {m}: " + (f"{secs:.1f} s" if secs is not None else
                          f"failed: {error}" if error else f"not finished in {limit[m]:.0f} s"), flush=True)
                    if m == "mllib" and best is not None:
                        row["results"][m].update(tables=best["tables"], bucket=best["bucket"])
                for m, r in row["results"].items():
                    got = r.pop("got")
                    r["recall"] = None if got is None or truth is None else (len(got & truth) / len(truth) if truth else 1.0)
                row["load_after"] = _load()
                _ratios(row)
                rows.append(row)
                _print_batch_row(row)
                df.unpersist()
                if vdf is not None:
                    vdf.unpersist()
                _save("batch_compare", rows, None)
    spark.stop()
    return rows


def _attempt(run) -> tuple:
    """``(run(), None)``, or ``((None, None), reason)`` when a method fails (e.g. a Python worker killed for
    memory): the run goes on to the other methods and keeps the row."""
    try:
        return run(), None
    except Exception as e:  # noqa: BLE001 - any failure of one method is reported in its cell
        text = str(e)
        if "Python worker exited unexpectedly" in text:
            return (None, None), "Python worker crashed (killed for memory? see dmesg)"
        lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
        cause = next((ln for ln in lines if "Exception:" in ln or "Error:" in ln), lines[0] if lines else type(e).__name__)
        return (None, None), cause[:200]


def _ratios(row: dict) -> None:
    """Speed ratios of the row (a timeout gives a bound, marked with '>')."""
    res = row["results"]

    def secs(m: str) -> float | None:
        return res.get(m, {}).get("seconds")

    ours = secs("auto") or secs("grid")
    out = {}
    for ref in ("mllib", "faiss", "numpy", "s3j"):
        if ref in res and ours:
            out[f"{ref}_over_auto" if ref != "s3j" else "s3j_over_auto"] = (secs(ref) / ours) if secs(ref) else None
    row["ratios"] = out


def _print_batch_row(row: dict) -> None:
    cells = []
    for m, r in row["results"].items():
        if r.get("error"):
            cells.append(f"{m} failed")
        elif r["seconds"] is None:
            cells.append(f"{m} >{r['limit']:.0f}s")
        else:
            rec = "" if r["recall"] is None or m in ("auto", "grid", "s3j") else f" r={r['recall']:.3f}"
            cells.append(f"{m} {r['seconds']:.1f}s{rec}")
    choice = row.get("auto_choice") or {}
    print(f"{row['dataset']} n={row['n']:>9,} dim={row['dim']:>4} pairs={next((r['pairs'] for r in row['results'].values() if r['pairs'] is not None), 0):,}: "
          + " | ".join(cells) + (f" | auto={choice.get('algorithm')}" if choice else "")
          + ("" if row.get("exact_agree", True) else " | EXACT METHODS DISAGREE")
          + f" | load {row['load_before'][0]:g} -> {row['load_after'][0]:g}", flush=True)


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
    if name == "batch_compare":
        for dim in sorted({r["dim"] for r in rows}):
            sel = sorted((r for r in rows if r["dim"] == dim and r["dataset"] == rows[-1]["dataset"]), key=lambda r: r["n"])
            for m, style in (("auto", "o-"), ("mllib", "x--"), ("faiss", "s:")):
                pts = [(r["n"], r["results"][m]["seconds"]) for r in sel if r["results"].get(m, {}).get("seconds")]
                if pts:
                    ax.plot(*zip(*pts), style, label=f"{m}, dim {dim}")
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
