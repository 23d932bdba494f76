"""Crash harness: SIGKILL the driver of a running similarity join again and again, restart it from
its checkpoint, and check at the end that every pair came out exactly once.

A producer writes JSON-lines input files for two streams at a steady rate until the last crash
(each record carries its ingestion time, so windows do not depend on when a batch ran). The job (this file with
``--job``) joins them with a checkpoint into the Parquet sink. The harness kills the job's whole
process group (driver, JVM, Python workers) with SIGKILL at random moments, often inside a
micro-batch, ``--crashes`` times, restarting it each time; then lets it drain the input and
compares the sink, read through Spark, with the brute-force oracle.

Reports per crash the restart time (kill to the first micro-batch committed again) and the
recovery time (kill to the first batch whose p99 latency is back under twice the pre-crash
median). ``--balance greedy`` makes the balancer move worksets while it crashes.

    .venv/bin/python bench/crash_harness.py --crashes 10
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

THRESHOLD = 0.01
WINDOW = "20 seconds"


def producer(work: Path, per_file: int, interval: float, seed: int, stop: threading.Event, done: threading.Event) -> None:
    """Write one file per stream every ``interval`` seconds until ``stop`` is set."""
    rng = np.random.default_rng(seed)
    f = 0
    while not stop.is_set():
        now = time.time()
        for side in ("L", "R"):
            d = work / "in" / side
            d.mkdir(parents=True, exist_ok=True)
            tmp = d / f".f{f:05d}.json.tmp"
            with open(tmp, "w") as out:
                for k in range(per_file):
                    rid = (f * per_file + k) * 2 + (side == "R")
                    out.write(json.dumps({"id": rid, "vector": rng.uniform(-1, 1, 2).tolist(), "ts": now}) + "\n")
            tmp.rename(d / f"f{f:05d}.json")
        f += 1
        time.sleep(interval)
    done.set()


def job(work: Path, final: bool, balance: str) -> None:
    """The streaming join itself (run as a separate process by the harness)."""
    from pyspark.sql import functions as F

    from driftjoin import local_session, similarity_join

    spark = local_session(2, "driftjoin-crash-job")

    def read(side: str):
        # the final run drains whatever is left in one go; the crashing runs take 2 files a batch
        return (spark.readStream.schema("id long, vector array<double>, ts double")
                .option("maxFilesPerTrigger", 100_000 if final else 2)
                .json(str(work / "in" / side)).withColumn("ts", F.col("ts").cast("timestamp")))

    pairs = similarity_join(read("L"), read("R"), threshold=THRESHOLD, metric="angular", parallelism=2, dim=2,
                            window=WINDOW, ingest_col="ts", metrics_dir=str(work / "metrics"), balance=balance,
                            balance_options={"monitoring_window": 2.0, "di_threshold": 0.02} if balance != "none" else None)
    w = pairs.writeStream.format("parquet").option("path", str(work / "out")).option("checkpointLocation", str(work / "ck"))
    q = (w.trigger(availableNow=True) if final else w.trigger(processingTime="500 milliseconds")).start()
    q.awaitTermination()


def _commits(work: Path) -> int:
    d = work / "ck" / "commits"
    return max((int(p.name) for p in d.iterdir() if p.name.isdigit()), default=-1) if d.exists() else -1


def _batch_p99s(work: Path, since: float) -> list[tuple[float, float]]:
    from driftjoin.spark.metrics_sink import histogram_quantile, read_stats

    out = []
    for s in read_stats(str(work / "metrics"), "computation"):
        if s["time"] > since and s["pairs"]:
            out.append((s["time"], histogram_quantile(np.asarray(s["latency_hist"]), 0.99)))
    return sorted(out)


def start_job(work: Path, final: bool, balance: str, log) -> subprocess.Popen:
    args = [sys.executable, __file__, "--job", str(work), "--balance", balance] + (["--final"] if final else [])
    return subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def oracle(work: Path) -> set[tuple]:
    from driftjoin.distance import get_metric
    from driftjoin.s3j.oracle import oracle_pairs

    rows = [json.loads(line) | {"side": 0 if side == "L" else 1} for side in ("L", "R")
            for p in sorted((work / "in" / side).glob("f*.json")) for line in open(p)]
    m = get_metric("angular")
    ids = np.array([r["id"] for r in rows])
    vec = m.prepare(np.array([r["vector"] for r in rows]))
    side = np.array([r["side"] for r in rows], dtype=np.int8)
    window = np.floor(np.array([r["ts"] for r in rows]) / 20.0).astype(np.int64)
    return oracle_pairs(ids, side, vec, window, m, THRESHOLD, False)


def harness(args: argparse.Namespace) -> None:
    work = Path(args.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = open(work / "jobs.log", "ab")
    stop, done = threading.Event(), threading.Event()
    threading.Thread(target=producer, args=(work, args.per_file, args.interval, args.seed, stop, done), daemon=True).start()
    rnd = random.Random(args.seed)
    proc = start_job(work, False, args.balance, log)
    while _commits(work) < 3:  # warm up: a few batches before the first crash
        time.sleep(0.2)
    crashes = []
    for c in range(args.crashes):
        time.sleep(rnd.uniform(args.min_gap, args.max_gap))
        before = _commits(work)
        pre = [p for _, p in _batch_p99s(work, 0.0)]
        normal = max(2.0 * float(np.median(pre[-20:])) if pre else 2.0, 1.0)
        t_kill = time.time()
        kill(proc)
        proc = start_job(work, False, args.balance, log)
        restart = recovery = None
        while time.time() - t_kill < 300 and (restart is None or recovery is None):
            if restart is None and _commits(work) > before:
                restart = time.time() - t_kill
            if recovery is None:
                ok = [t for t, p in _batch_p99s(work, t_kill) if p <= normal]
                if ok:
                    recovery = ok[0] - t_kill
            time.sleep(0.2)
        crashes.append({"crash": c + 1, "killed_after_batch": before, "restart_s": restart, "recovery_s": recovery,
                        "normal_p99_s": normal})
        print(f"crash {c + 1:2d}: killed after batch {before}, restart {restart or float('nan'):.1f} s, "
              f"recovery {recovery or float('nan'):.1f} s", flush=True)
    stop.set()
    done.wait()
    kill(proc)
    final = start_job(work, True, args.balance, log)
    final.wait()
    from driftjoin import local_session

    spark = local_session(2, "driftjoin-crash-check")
    out = spark.read.parquet(str(work / "out")).collect()
    got = [(r.left_id, r.right_id, int(r.window_start.timestamp() // 20)) for r in out]
    expected = oracle(work)
    duplicates = len(got) - len(set(got))
    missing = len(expected - set(got))
    extra = len(set(got) - expected)
    spark.stop()
    summary = {"crashes": crashes, "pairs": len(got), "expected": len(expected), "duplicates": duplicates,
               "missing": missing, "extra": extra, "balance": args.balance,
               "passed": sum(1 for c in crashes if c["restart_s"] is not None) if duplicates == missing == extra == 0 else 0}
    rs = [c["restart_s"] for c in crashes if c["restart_s"] is not None]
    rc = [c["recovery_s"] for c in crashes if c["recovery_s"] is not None]
    print(f"\npairs {len(got):,} (oracle {len(expected):,}): duplicates {duplicates}, missing {missing}, extra {extra}")
    print(f"restart time: median {np.median(rs):.1f} s, max {max(rs):.1f} s; recovery time: median {np.median(rc):.1f} s, max {max(rc):.1f} s")
    print(f"{summary['passed']}/{len(crashes)} crashes passed (restarted, nothing lost, nothing repeated)")
    Path("bench/results").mkdir(parents=True, exist_ok=True)
    Path(f"bench/results/crash_harness_{args.balance}.json").write_text(json.dumps(summary, indent=1))
    if summary["passed"] != len(crashes):
        sys.exit(1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", help=argparse.SUPPRESS)
    ap.add_argument("--final", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--work", default="bench/out/crash")
    ap.add_argument("--crashes", type=int, default=10)
    ap.add_argument("--per-file", type=int, default=100)
    ap.add_argument("--interval", type=float, default=1.0, help="seconds between input files")
    ap.add_argument("--min-gap", type=float, default=4.0)
    ap.add_argument("--max-gap", type=float, default=9.0)
    ap.add_argument("--balance", choices=["none", "greedy", "s3j"], default="none")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    if args.job:
        job(Path(args.job), args.final, args.balance)
    else:
        harness(args)


if __name__ == "__main__":
    main()
