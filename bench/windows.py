"""Benchmark: what sliding windows and interval joins cost against tumbling windows, on the same stream.

Two streams of ``--rate`` records/s each, 2-D uniform, angular distance at ``--selectivity``
(the S3J paper's low-selectivity setting), ``--parallelism`` workers, windows over the records'
ingestion times. Every window kind of ``--kinds`` runs on the same records, side by side in one
run:

- **core** (S3J in one process, micro-batches of one second, the window clock of the Spark
  operators): copies per record (a sliding window holds a record ``window / slide`` times, an
  interval join twice), the copies held in state after each batch (mean and largest: bounded
  by the open windows), comparisons (pairs examined) per record and per window, pairs out,
  throughput and CPU per 1,000 records, each as a ratio to tumbling;
- **Spark** (``similarity_join`` streaming into the noop sink): sustained throughput, CPU
  seconds per 1,000 records of the whole query (JVM, Python workers, driver), micro-batch time,
  and the workers' state bytes over the run (first and last third, largest): flat when state
  is bounded by the watermark.

    nice -n 10 flock /tmp/driftjoin-heavy.lock .venv/bin/python bench/windows.py --seconds 120 --rate 2000

Writes bench/results/windows.json and a PNG of the state bytes over time per kind.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

import numpy as np

#: name -> similarity_join window settings
KINDS = {
    "tumbling 60s": {"window": "1 minute"},
    "sliding 60s/30s": {"window": "1 minute", "slide": "30 seconds"},
    "sliding 60s/20s": {"window": "1 minute", "slide": "20 seconds"},
    "within 30s": {"within": "30 seconds"},
    "within 60s": {"within": "1 minute"},
}


def windowing(settings: dict):
    from driftjoin.windows import windowing as build

    return build(settings.get("window"), settings.get("slide"), settings.get("within"))


def stream_records(rate: int, seconds: float):
    """The generator source's records of both streams (vectors drawn chunk by chunk as the source
    draws them, ids per stream), in time order: ids, sides, prepared vectors, times (seconds from
    the start; the Spark runs' windows are aligned to the wall clock instead)."""
    from driftjoin.distance import get_metric
    from driftjoin.generators.vectors import generate_vectors
    from driftjoin.spark.sources.generator import CHUNK

    m = get_metric("angular")
    n = int(rate * seconds)
    vec = np.vstack([np.vstack([generate_vectors("uniform", seed=7, stream=s, start=c, count=CHUNK, dim=2,
                                                 times=np.arange(c, c + CHUNK) / rate) for c in range(0, n, CHUNK)])[:n]
                     for s in (0, 1)])
    side = np.repeat([0, 1], n).astype(np.int8)
    ts = np.concatenate([np.arange(n) / rate, np.arange(n) / rate])
    order = np.argsort(ts, kind="stable")
    return np.concatenate([np.arange(n), np.arange(n)])[order], side[order], m.prepare(vec[order]), ts[order]


def core_run(settings: dict, rate: int, seconds: float, selectivity: float, parallelism: int) -> dict:
    """S3J in one process with the runtime's window steps (clock, late test, copies, expiry)."""
    from driftjoin.clock import WindowClock, ticks
    from driftjoin.distance import get_metric
    from driftjoin.s3j.engine import S3JEngine
    from driftjoin.s3j.records import Records, expand
    from driftjoin.s3j.space import random_centroids
    from driftjoin.s3j.workset import OUTER

    windows = windowing(settings)
    ids, side, vec, ts = stream_records(rate, seconds)
    eng = S3JEngine(random_centroids(parallelism, 2, 0), get_metric("angular"), selectivity, self_join=False, dim=2,
                    windows=windows)
    clock = WindowClock(windows, windows.length)  # ingest_col's default lateness: one window (bucket)
    step = 2 * rate
    copies = comparisons = pairs = 0
    held: list[int] = []
    windows_seen: set[int] = set()
    t0, cpu0 = time.perf_counter(), time.process_time()
    for a in range(0, len(ids), step):
        sl = slice(a, a + step)
        first = clock.first_open()
        if first is not None:
            eng.expire_before(first)
        batch = Records(ids[sl], side[sl], vec[sl], ts[sl], np.zeros(len(ids[sl]), np.int64), ticks(ts[sl]))
        late = clock.late(batch.time)
        batch = expand(batch.take(np.nonzero(~late)[0]), windows)
        p, st = eng.process(batch)
        copies += len(batch)
        comparisons += st.comparisons
        pairs += len(p)
        windows_seen.update(np.unique(batch.window).tolist())
        clock.advance(int(batch.time.max()))
        held.append(sum(int(((run.role & 3) != OUTER).sum()) for wk in eng.workers for runs in wk.windows.values()
                        for run in runs))
    dt, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    n_windows = len(windows_seen)
    steady = held[len(held) // 3:]
    return {"records": len(ids), "copies_per_record": copies / len(ids), "held_mean": float(np.mean(steady)),
            "held_max": int(max(held)), "held_first_third_max": int(max(held[: len(held) // 3] or [0])),
            "held_last_third_max": int(max(held[-(len(held) // 3):] or [0])), "held": held,
            "comparisons": comparisons, "comparisons_per_record": comparisons / len(ids),
            "windows": n_windows, "comparisons_per_window": comparisons / max(n_windows, 1), "pairs": pairs,
            "seconds": dt, "records_per_s": len(ids) / dt, "cpu_s_per_1000": 1000 * cpu / len(ids)}


def spark_run(settings: dict, rate: int, seconds: float, selectivity: float, parallelism: int, out: Path) -> dict:
    from driftjoin.control.autoscale.collector import session_cpu
    from driftjoin.spark.runtime.progress import ProgressLog
    from driftjoin.spark.runtime.session import local_session
    from driftjoin.spark.runtime.stats import read_stats
    from driftjoin.spark.similarity.api import similarity_join

    shutil.rmtree(out, ignore_errors=True)
    spark = local_session(parallelism, "driftjoin-bench-windows")
    total = int(rate * seconds)

    def stream(i: int):
        return (spark.readStream.format("driftjoin").option("stream", i).option("rate", rate).option("dim", 2)
                .option("seed", 7).option("total", total).option("max_records_per_batch", 2 * rate).load())

    metrics = str(out / "metrics")
    pairs = similarity_join(stream(0), stream(1), threshold=selectivity, metric="angular", parallelism=parallelism,
                            dim=2, ingest_col="ts", metrics_dir=metrics, output="pairs-lean", algorithm="s3j", **settings)
    q = pairs.writeStream.format("noop").option("checkpointLocation", str(out / "checkpoint")).start()
    t0 = time.time()
    log = ProgressLog(q)
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
    q.stop()
    spark.stop()
    # state bytes after each batch: the sum over workers of each worker's newest record so far
    newest: dict[int, int] = {}
    over_time: list[int] = []
    records = list(read_stats(metrics, "computation"))
    for s in sorted(records, key=lambda s: (s["seq"], s["worker"])):
        newest[s["worker"]] = s["state_bytes"]
        over_time.append(sum(newest.values()))
    third = max(1, len(over_time) // 3)
    return {"records": seen, "wall_s": wall, "sustained_records_per_s": seen / wall,
            "cpu_s_per_1000": 1000 * cpu_s / max(seen - first[0], 1) if first else None,
            "batch_ms_p50": float(np.median(durations)) if durations else None,
            "comparisons": sum(s["comparisons"] for s in records), "pairs": sum(s["pairs"] for s in records),
            "state_mb_first_third": float(np.mean(over_time[:third])) / 1e6 if over_time else None,
            "state_mb_last_third": float(np.mean(over_time[-third:])) / 1e6 if over_time else None,
            "state_mb_max": max(over_time) / 1e6 if over_time else None, "state_bytes": over_time}


def plot(runs: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4))
    for name, r in runs.items():
        ax.plot(np.array(r["state_bytes"]) / 1e6, label=name)
    ax.set_xlabel("worker batch (in order)")
    ax.set_ylabel("state (MB, all workers)")
    ax.set_title("similarity_join state over a run, by window kind")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=int, default=2000, help="records/s per stream")
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--parallelism", type=int, default=2)
    ap.add_argument("--selectivity", type=float, default=0.001)
    ap.add_argument("--kinds", default=",".join(KINDS), help="window kinds, separated by commas: " + ", ".join(KINDS))
    ap.add_argument("--no-spark", action="store_true", help="the core only")
    args = ap.parse_args()
    kinds = args.kinds.split(",")
    Path("bench/results").mkdir(parents=True, exist_ok=True)
    for k in kinds:  # compile the kernels and warm the caches before anything is timed
        core_run(KINDS[k], 200, 5.0, args.selectivity, args.parallelism)
    cores = {k: core_run(KINDS[k], args.rate, args.seconds, args.selectivity, args.parallelism) for k in kinds}
    sparks = {} if args.no_spark else {
        k: spark_run(KINDS[k], args.rate, args.seconds, args.selectivity, args.parallelism, Path("bench/out/windows"))
        for k in kinds}
    base = kinds[0]
    width = max(18, max(len(k) for k in kinds) + 3)
    print(f"\nWindow kinds on one stream: 2 x {args.rate}/s, {args.seconds:.0f} s, 2-D uniform, angular "
          f"{args.selectivity:.2%}, {args.parallelism} workers, ingestion time; ratios to {base!r}")

    def row(label: str, values: list, fmt: str) -> None:
        print(f"{label:<34}" + "".join(f"{v:>{width}{fmt}}" if v is not None else f"{'-':>{width}}" for v in values))

    print(f"{'':<34}" + "".join(f"{k:>{width}}" for k in kinds))
    c = [cores[k] for k in kinds]
    row("core: copies per record", [r["copies_per_record"] for r in c], ".2f")
    row("core: copies held (mean)", [r["held_mean"] for r in c], ",.0f")
    row("core: copies held (max)", [r["held_max"] for r in c], ",")
    row("core: held max, first/last third", [f"{r['held_first_third_max']:,}/{r['held_last_third_max']:,}" for r in c], "")
    row("core: comparisons per record", [r["comparisons_per_record"] for r in c], ".2f")
    row("core: comparisons per window", [r["comparisons_per_window"] for r in c], ",.0f")
    row("core: pairs out", [r["pairs"] for r in c], ",")
    row("core: records/s", [r["records_per_s"] for r in c], ",.0f")
    row("core: CPU s per 1,000 records", [r["cpu_s_per_1000"] for r in c], ".3f")
    row("core: CPU ratio to tumbling", [f"{r['cpu_s_per_1000'] / cores[base]['cpu_s_per_1000']:.2f}x" for r in c], "")
    if sparks:
        s = [sparks[k] for k in kinds]
        row("Spark: sustained records/s", [r["sustained_records_per_s"] for r in s], ",.0f")
        row("Spark: CPU s per 1,000 records", [r["cpu_s_per_1000"] for r in s], ".3f")
        row("Spark: CPU ratio to tumbling",
            [f"{(r['cpu_s_per_1000'] or 0) / sparks[base]['cpu_s_per_1000']:.2f}x" for r in s], "")
        row("Spark: micro-batch p50 (ms)", [r["batch_ms_p50"] for r in s], ",.0f")
        row("Spark: comparisons", [r["comparisons"] for r in s], ",")
        row("Spark: pairs out", [r["pairs"] for r in s], ",")
        row("Spark: state MB first/last third", [f"{r['state_mb_first_third']:.1f}/{r['state_mb_last_third']:.1f}" for r in s], "")
        row("Spark: state MB max", [r["state_mb_max"] for r in s], ".1f")
        plot(sparks, Path("bench/results/windows_state.png"))
    Path("bench/results/windows.json").write_text(json.dumps({"args": vars(args), "core": cores, "spark": sparks},
                                                             indent=1, default=str))


if __name__ == "__main__":
    main()
