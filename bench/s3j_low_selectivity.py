"""Benchmark: the S3J paper's low-selectivity setting on Spark, beside the paper's figures.

Two streams of ``--rate`` records/s each (paper: 4,000), 2-D uniform, angular distance, 0.1%
selectivity, ``--parallelism`` workers (paper: 5), 1-minute processing-time windows. Prints
sustained throughput, p50/p99 latency per worker, duplication ratio and comparisons ratio, with
the paper's numbers beside them; writes JSON and a PNG (per-worker p99 latency over time) to
bench/results/. Also runs the same records through the in-process core (no Spark) in the same
run, so the Spark overhead shows as a ratio.

    .venv/bin/python bench/s3j_low_selectivity.py --seconds 120 --rate 4000 --sink noop [--output pairs,pairs-lean] [--partitions 5,2] [--trigger 0,5]

Also prints where a micro-batch's time went, summed over the workers' statistics (state read,
formulation, computation, building the output, Spark taking the output, state write) beside
Spark's own per-batch durations (query planning, the whole batch, state commit), and the state
bytes written per batch against how full the window was (flat when writes follow the batch),
and the CPU seconds per record of the whole query (JVM, Python workers, driver; after the first
batch) against the core's: a Spark/core ratio that, unlike the throughput ratio, does not stop
at the offered rate and moves less with the machine's load. ``--trigger`` sets the micro-batch
interval (several run side by side; the core then runs in batches of the same length): how the
Spark/core ratio falls as the fixed cost of a batch is spread over more records, against the
latency a longer batch adds.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

PAPER = {"duplication_ratio": 1.92, "comparisons_ratio": 5.82, "p99_latency_s": "< 1 (10 CPUs)"}


def core_throughput(rate: int, seconds: float, selectivity: float, parallelism: int, batch_s: float = 1.0) -> dict:
    from driftjoin.distance import get_metric
    from driftjoin.generators.vectors import generate_vectors
    from driftjoin.s3j.engine import S3JEngine
    from driftjoin.s3j.records import Records
    from driftjoin.s3j.space import random_centroids

    m = get_metric("angular")
    n = int(rate * seconds)
    vec = np.vstack([generate_vectors("uniform", seed=7, stream=s, start=0, count=n, dim=2) for s in (0, 1)])
    side = np.repeat([0, 1], n).astype(np.int8)
    ts = np.concatenate([np.arange(n) / rate, np.arange(n) / rate])
    order = np.argsort(ts, kind="stable")
    vec, side, ts = m.prepare(vec[order]), side[order], ts[order]
    ids = np.arange(2 * n)
    eng = S3JEngine(random_centroids(parallelism, 2, 0), m, selectivity, self_join=False, dim=2)
    step = int(2 * rate * batch_s)  # micro-batches of batch_s seconds
    t0, cpu0 = time.perf_counter(), time.process_time()
    pairs = cmp_ = mem = 0
    for a in range(0, 2 * n, step):
        sl = slice(a, a + step)
        w = np.floor(ts[sl] / 60).astype(np.int64)
        eng.expire_before(int(w.min()))
        p, st = eng.process(Records(ids[sl], side[sl], vec[sl], ts[sl], w))
        pairs += len(p)
        cmp_ += st.comparisons
        mem += st.memberships
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    return {"records": 2 * n, "seconds": dt, "records_per_s": 2 * n / dt, "pairs": pairs,
            "cpu_s_per_1000": 1000 * cpu / (2 * n),
            "duplication_ratio": mem / (2 * n), "comparisons_ratio": cmp_ / max(pairs, 1)}


def breakdown(metrics: str, progress: list[dict]) -> dict:
    """Seconds per phase summed over the workers' statistics, and Spark's per-batch durations."""
    from driftjoin.spark.runtime.stats import read_stats

    phases: dict[str, float] = {}
    written: list[tuple[int, int]] = []
    sources: dict[str, int] = {}
    for s in read_stats(metrics, "computation"):
        for k, v in (s.get("timings") or {}).items():
            phases[k] = phases.get(k, 0.0) + v
        for k, v in (s.get("steps") or {}).items():
            phases[k] = phases.get(k, 0.0) + v
        state = s.get("state") or {}
        written.append((s.get("windows", [0])[-1] if s.get("windows") else 0,
                        sum(p.get("bytes_written", 0) for p in state.values())))
        for p in state.values():
            sources[p["source"]] = sources.get(p["source"], 0) + 1
    data = [p for p in progress if p["numInputRows"]]
    spark = {k: float(np.median([p["durationMs"].get(k, 0) for p in data])) if data else 0.0
             for k in ("queryPlanning", "addBatch", "walCommit", "commitOffsets", "triggerExecution")}
    commits = [sum(o.get("commitTimeMs", 0) for o in p.get("stateOperators", [])) for p in data]
    spark["stateCommit"] = float(np.median(commits)) if commits else 0.0
    return {"phases_s": phases, "spark_median_ms": spark, "state_sources": sources,
            "bytes_written_per_batch": [b for _, b in written]}


def spark_run(rate: int, seconds: float, selectivity: float, parallelism: int, sink: str, out: Path,
              output: str = "pairs", partitions: int | None = None, source: str = "generator",
              trigger_s: float = 0.0) -> dict:
    from driftjoin.control.autoscale.collector import session_cpu
    from driftjoin.app.report import plot_latency, summary
    from driftjoin.spark.runtime.session import local_session, task_slots
    from driftjoin.spark.runtime.progress import ProgressLog
    from driftjoin.spark.similarity.api import similarity_join
    from pyspark.sql import functions as F

    shutil.rmtree(out, ignore_errors=True)
    spark = local_session(parallelism, "driftjoin-bench")
    total = int(rate * seconds)

    def stream(i: int):
        if source == "rate":
            # A JVM source, as Kafka or files would be: the same distribution (uniform in [-1, 1]^2)
            # from a hash of the row number, deterministic per row (rand() would repeat per batch).
            coordinate = [F.hash("value", F.lit(31 * i + d)) / F.lit(2.0 ** 31) for d in range(2)]
            return (spark.readStream.format("rate").option("rowsPerSecond", rate).option("numPartitions", 1).load()
                    .select((F.col("value") * 2 + i).alias("id"), F.array(*coordinate).alias("vector"),
                            F.col("timestamp").alias("ts")))
        return (spark.readStream.format("driftjoin").option("stream", i).option("rate", rate).option("dim", 2)
                .option("seed", 7).option("total", total).option("max_records_per_batch", int(2 * rate * max(1.0, trigger_s))).load())

    metrics = str(out / "metrics")
    pairs = similarity_join(stream(0), stream(1), threshold=selectivity, metric="angular", window="1 minute",
                            parallelism=parallelism, partitions=partitions, dim=2, ingest_col="ts",
                            metrics_dir=metrics, output=output)
    writer = pairs.writeStream.option("checkpointLocation", str(out / "checkpoint")).trigger(processingTime=f"{trigger_s:g} seconds")
    q = (writer.format("parquet").option("path", str(out / "pairs")) if sink == "parquet" else writer.format("noop")).start()
    t0 = time.time()
    log = ProgressLog(q)
    # CPU of the whole query (the JVM, its Python workers, this driver process) from the end of
    # the first batch on: a ratio to the core's CPU that the machine's load does not move much.
    cpu_now = session_cpu(spark)
    seen, first = 0, None
    while seen < 2 * total and time.time() - t0 < seconds * 5 + 120:
        time.sleep(1.0)
        seen = log.poll()
        if first is None and seen:
            first = (seen, cpu_now())
    cpu_s = cpu_now() - first[1] if first else float("nan")
    wall = time.time() - t0
    durations = [p["durationMs"].get("triggerExecution", 0) for p in log.with_input]
    parts = breakdown(metrics, log.progress)
    q.stop()
    totals, per_worker = summary(metrics)
    tasks = partitions or min(parallelism, task_slots(spark))  # similarity_join's default
    plot_latency(metrics, Path(f"bench/results/s3j_low_selectivity_{output}_{tasks}_{source}_{trigger_s:g}s.png"),
                 f"S3J on Spark: {rate}/s per stream ({source}), 0.1%, {parallelism} workers in {tasks} tasks, "
                 f"output={output}, trigger {trigger_s:g} s")
    spark.stop()
    return {"records": seen, "wall_s": wall, "tasks": tasks, "sustained_records_per_s": seen / wall, **totals,
            "batch_ms_p50": float(np.median(durations)) if durations else None,
            "batch_ms_max": float(max(durations)) if durations else None,
            "cpu_s_per_1000": 1000 * cpu_s / max(seen - first[0], 1) if first else None,
            "per_worker": per_worker.to_dict("records"), "breakdown": parts}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=4000, help="records/s per stream (paper: 4000)")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--parallelism", type=int, default=5)
    ap.add_argument("--selectivity", type=float, default=0.001)
    ap.add_argument("--sink", choices=["noop", "parquet"], default="noop")
    ap.add_argument("--output", default="pairs",
                    help="similarity_join output, or several separated by commas, run one after the other in this "
                         "run and printed side by side: pairs (one row per pair from Python), pairs-lean (without "
                         "the provenance columns), pairs-grouped (grouped rows exploded in the JVM), grouped")
    ap.add_argument("--partitions", default="",
                    help="Spark tasks the workers share, or several separated by commas, each run with every "
                         "output (default: similarity_join's own, min(workers, task slots))")
    ap.add_argument("--source", default="generator",
                    help="generator (driftjoin's Python data source, the same records as the core run) or rate "
                         "(Spark's JVM rate source with the same distribution, as Kafka or files would be); "
                         "several separated by commas run side by side")
    ap.add_argument("--trigger", default="0",
                    help="micro-batch interval in seconds (0: each batch starts when the last ends), or several "
                         "separated by commas run side by side; the core runs in batches of the same length")
    args = ap.parse_args()
    tasks: list[int | None] = [int(p) for p in args.partitions.split(",") if p] or [None]
    sources = args.source.split(",")
    triggers = [float(t) for t in args.trigger.split(",")]
    variants = {" ".join([o] + ([f"in {p}"] if len(tasks) > 1 else []) + ([f"from {src}"] if len(sources) > 1 else [])
                         + ([f"every {t:g}s"] if len(triggers) > 1 else [])):
                (o, p, src, t) for t in triggers for src in sources for o in args.output.split(",") for p in tasks}
    outputs = list(variants)
    Path("bench/results").mkdir(parents=True, exist_ok=True)
    cores = {t: core_throughput(args.rate, min(args.seconds, 60.0), args.selectivity, args.parallelism, max(1.0, t))
             for t in triggers}
    core = cores[triggers[0]]
    runs = {label: spark_run(args.rate, args.seconds, args.selectivity, args.parallelism, args.sink,
                             Path("bench/out/s3j_low"), o, p, src, t)
            for label, (o, p, src, t) in variants.items()}
    print(f"\nS3J low selectivity: 2 x {args.rate}/s, 2-D uniform, angular, {args.selectivity:.2%}, "
          f"{args.parallelism} workers in {'/'.join(sorted({str(r['tasks']) for r in runs.values()}))} tasks, "
          f"1-min windows, sink={args.sink}")
    width = max(20, max(len(o) for o in outputs) + 8)
    print(f"{'metric':<28}" + "".join(f"{'Spark ' + o:>{width}}" for o in outputs) + f"{'core only':>14}{'paper (Flink)':>16}")
    print(f"{'input rate (records/s)':<28}" + "".join(f"{2 * args.rate:>{width},}" for _ in outputs) + f"{'':>14}{8000:>16,}")
    print(f"{'sustained (records/s)':<28}" + "".join(f"{r['sustained_records_per_s']:>{width},.0f}" for r in runs.values())
          + f"{core['records_per_s']:>14,.0f}{'8,000':>16}")
    print(f"{'duplication ratio':<28}" + "".join(f"{r['duplication_ratio']:>{width}.2f}" for r in runs.values())
          + f"{core['duplication_ratio']:>14.2f}{PAPER['duplication_ratio']:>16}")
    print(f"{'comparisons ratio':<28}" + "".join(f"{r['comparisons_ratio']:>{width}.2f}" for r in runs.values())
          + f"{core['comparisons_ratio']:>14.2f}{PAPER['comparisons_ratio']:>16}")
    print(f"{'micro-batch time p50 (ms)':<28}" + "".join(f"{r['batch_ms_p50'] or 0:>{width},.0f}" for r in runs.values()))
    print(f"{'micro-batch time max (ms)':<28}" + "".join(f"{r['batch_ms_max'] or 0:>{width},.0f}" for r in runs.values()))
    print(f"{'worst worker p50 latency (s)':<28}" + "".join(
        f"{max(w['p50_latency_s'] for w in r['per_worker']):>{width}.2f}" for r in runs.values()))
    print(f"{'worst worker p99 latency (s)':<28}" + "".join(
        f"{max(w['p99_latency_s'] for w in r['per_worker']):>{width}.2f}" for r in runs.values())
          + f"{'':>14}{PAPER['p99_latency_s']:>16}")
    print(f"{'core/Spark throughput':<28}" + "".join(
        f"{core['records_per_s'] / max(r['sustained_records_per_s'], 1):>{width - 1}.1f}x" for r in runs.values()))
    print(f"{'CPU s per 1,000 records':<28}" + "".join(f"{r['cpu_s_per_1000'] or 0:>{width}.3f}" for r in runs.values())
          + f"{core['cpu_s_per_1000']:>14.3f}")
    if len(triggers) > 1:
        print(f"{'core CPU s/1,000 same batch':<28}" + "".join(
            f"{cores[variants[o][3]]['cpu_s_per_1000']:>{width}.3f}" for o in outputs))
    print(f"{'Spark/core CPU per record':<28}" + "".join(
        f"{(r['cpu_s_per_1000'] or 0) / cores[variants[o][3]]['cpu_s_per_1000']:>{width - 1}.1f}x"
        for o, r in runs.items()))
    for o, r in runs.items():
        b = r["breakdown"]
        print(f"\n[{o}] where the workers' time went (seconds, summed over workers and batches): "
              + ", ".join(f"{k} {v:.1f}" for k, v in sorted(b["phases_s"].items(), key=lambda kv: -kv[1])))
        print(f"[{o}] Spark per batch (median ms): " + ", ".join(f"{k} {v:.0f}" for k, v in b["spark_median_ms"].items()))
        w = b["bytes_written_per_batch"]
        if w:
            third = max(1, len(w) // 3)
            print(f"[{o}] state written per worker batch: first third {np.mean(w[:third]) / 1e6:.2f} MB, "
                  f"last third {np.mean(w[-third:]) / 1e6:.2f} MB; state found {b['state_sources']}")
    Path("bench/results/s3j_low_selectivity.json").write_text(json.dumps(
        {"args": vars(args), "spark": runs, "core": core, "core_by_trigger_s": cores, "paper": PAPER}, indent=2, default=str))


if __name__ == "__main__":
    main()
