"""Streaming similarity joins, ``algorithm="auto"`` against ``"s3j"``, side by side in one run.

Two settings, each run with both algorithms on the same generated streams (a benchmark, not a
test; numbers in docs/benchmarks.md):

- ``demo``: the demo's setting: two 2-D uniform streams of ``--rate`` records/s each (500),
  angular distance, 0.1% selectivity, 2 workers, 20-second windows (``auto`` must pick S3J);
- ``embed``: one 128-D stream of Gaussian clusters at ``--embed-rate`` records/s (1,000),
  Euclidean self-join with the threshold for about 5 partners per record and window, 2 workers,
  20-second windows (``auto`` picks the grid by the dimension).

The first run of a session pays the JVM's and the Python workers' warm-up. Per run: records
in, pairs out, late records (behind the window frontier: not joined), the sustained rate (records / time from the first batch until
the last record was processed), the largest per-worker p99 latency (emission minus the later
ingestion time, from the statistics) and the median micro-batch time.

    .venv/bin/python bench/grid_stream.py --seconds 60
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np

from driftjoin import local_session, similarity_join
from driftjoin.generators.vectors import generate_vectors
from driftjoin.spark.similarity.choice import read_choice
from driftjoin.app.report import summary
from driftjoin.spark.similarity.threshold import choose_threshold
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.runtime.progress import ProgressLog

RESULTS = Path("bench/results")


def run(spark, setting: str, algorithm: str, seconds: float, rate: int, dim: int, window: str, out: Path) -> dict:
    two = setting == "demo"
    total = int(rate * seconds)
    dist = "uniform" if two else "gaussian"
    if two:
        threshold, metric = 0.001, "angular"
    else:
        per_window = rate * 20
        sample = generate_vectors(dist, seed=7, stream=0, start=0, count=4000, dim=dim)
        threshold, metric = choose_threshold(sample, selectivity=5.0 / per_window, metric="euclidean"), "euclidean"

    def stream(i: int):
        return (spark.readStream.format("driftjoin").option("stream", i).option("rate", rate).option("dim", dim)
                .option("dist", dist).option("seed", 7).option("total", total).load())

    metrics = str(out / "metrics")
    pairs = similarity_join(stream(0), stream(1) if two else None, threshold=threshold, metric=metric, window=window,
                            parallelism=2, dim=dim, ingest_col="ts", metrics_dir=metrics, algorithm=algorithm)
    query = (pairs.writeStream.format("noop").option("checkpointLocation", str(out / "ck"))
             .trigger(processingTime="1 second").start())
    expected = total * (2 if two else 1)
    deadline = time.time() + seconds * 5 + 120
    log = ProgressLog(query)
    seen = 0
    while seen < expected and time.time() < deadline and query.isActive:
        time.sleep(1.0)
        seen = log.poll()
    progress = log.with_input
    query.stop()
    totals, per_worker = summary(metrics)
    late = sum(st.get("late", 0) for op in ("formulation", "computation") for st in read_stats(metrics, op))
    batch_ms = [p["durationMs"].get("triggerExecution", 0) for p in progress]
    started = progress[0]["timestamp"] if progress else None
    elapsed = None
    if progress:
        from datetime import datetime

        t0 = datetime.fromisoformat(progress[0]["timestamp"].replace("Z", "+00:00")).timestamp()
        t1 = datetime.fromisoformat(progress[-1]["timestamp"].replace("Z", "+00:00")).timestamp() + progress[-1]["durationMs"].get("triggerExecution", 0) / 1000
        elapsed = t1 - t0
    return {
        "setting": setting, "algorithm": algorithm, "chosen": (read_choice(metrics) or {}).get("algorithm"),
        "input_rate": rate * (2 if two else 1), "records": seen, "expected": expected, "pairs": totals["pairs_out"],
        "late_records": late,
        "sustained_rate": seen / elapsed if elapsed else None, "started": started,
        "p99_latency_s": float(per_worker["p99_latency_s"].max()) if len(per_worker) else None,
        "p50_latency_s": float(per_worker["p50_latency_s"].max()) if len(per_worker) else None,
        "batch_ms_median": float(np.median(batch_ms)) if batch_ms else None, "batches": len(progress),
        "threshold": threshold, "dim": dim,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=500, help="records/s per stream of the demo setting")
    ap.add_argument("--embed-rate", type=int, default=1000, help="records/s of the 128-D stream")
    ap.add_argument("--settings", default="demo,embed")
    ap.add_argument("--algorithms", default="auto,s3j")
    args = ap.parse_args()
    spark = local_session(2, "driftjoin-bench-stream")
    spark.sparkContext.setLogLevel("ERROR")
    rows = []
    for setting in args.settings.split(","):
        for algorithm in args.algorithms.split(","):
            out = Path(tempfile.mkdtemp(prefix=f"driftjoin-{setting}-{algorithm}-"))
            dim, rate = (2, args.rate) if setting == "demo" else (128, args.embed_rate)
            r = run(spark, setting, algorithm, args.seconds, rate, dim, "20 seconds", out)
            rows.append(r)
            shutil.rmtree(out, ignore_errors=True)
            def num(x: float | None, spec: str) -> str:
                return "n/a" if x is None else format(x, spec)

            print(f"{setting:>5} {algorithm:>4} (chose {r['chosen']}): {r['records']:,}/{r['expected']:,} records, "
                  f"{r['pairs']:,} pairs ({r['late_records']:,} late records), sustained {num(r['sustained_rate'], ',.0f')} "
                  f"records/s (offered {r['input_rate']:,}), p99 {num(r['p99_latency_s'], '.2f')} s, "
                  f"p50 {num(r['p50_latency_s'], '.2f')} s, median batch {num(r['batch_ms_median'], '.0f')} ms", flush=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "grid_stream.json").write_text(json.dumps(rows, indent=1))
    spark.stop()


if __name__ == "__main__":
    main()
