"""Start-up and restart: where the seconds before the first committed micro-batch go.

    .venv/bin/python bench/startup.py [--parallelism 5] [--rows 20000] [--runs 3]

Each run is a fresh Python process (as after a crash): it creates the local session, builds a
similarity join over a JSON file stream (2-D, two streams), starts it with ``availableNow`` and
times, from the process start: session ready, query started, first batch committed (with
Spark's own phases of that batch), and the second batch. The first run starts from an empty
checkpoint, the later ones restart from it with one more file per stream (the restart path).
Both worker start-ups run side by side, interleaved: Python workers forked from driftjoin's
preloading daemon (the default) and from PySpark's plain one, each with its own checkpoint.
Prints a table with the ratios and writes bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "startup"


def write_file(folder: Path, name: str, n: int, seed: int, mtime: float) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "w") as f:
        for i, v in enumerate(rng.uniform(-1, 1, (n, 2)).tolist()):
            f.write(json.dumps({"id": seed * 10_000_000 + i, "vector": v}) + "\n")
    os.utime(folder / name, (mtime, mtime))


def child(parallelism: int, preload: bool, out: Path) -> None:
    """One process: session, query, first two batches; prints a JSON line of timings."""
    t0 = time.time()
    from driftjoin import local_session, similarity_join

    spark = local_session(parallelism, "driftjoin-startup", preload_workers=preload)
    t_session = time.time()

    def read(side: str):
        return spark.readStream.schema("id long, vector array<double>").option("maxFilesPerTrigger", 1).json(str(OUT / "in" / side))

    pairs = similarity_join(read("L"), read("R"), threshold=0.01, metric="euclidean", window=None, dim=2,
                            parallelism=parallelism)
    q = (pairs.writeStream.format("noop").option("checkpointLocation", str(out))
         .trigger(availableNow=True).start())
    t_started = time.time()
    done: list[float] = []
    while q.isActive and len(done) < 2:
        time.sleep(0.05)
        n = len([p for p in q.recentProgress if p["numInputRows"]])
        while len(done) < n:
            done.append(time.time())
    q.awaitTermination()
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    first = progress[0]["durationMs"] if progress else {}
    print(json.dumps({"session_s": t_session - t0, "query_started_s": t_started - t0,
                      "first_batch_s": done[0] - t0 if done else None,
                      "second_batch_s": done[1] - t0 if len(done) > 1 else None,
                      "first_batch_phases_ms": first,
                      "first_state_commit_ms": sum(o.get("commitTimeMs", 0) for o in progress[0].get("stateOperators", []))
                      if progress else None}))
    spark.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallelism", type=int, default=5)
    ap.add_argument("--rows", type=int, default=20_000, help="records per file and stream")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--child", choices=["preload", "plain"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.parallelism, args.child == "preload", OUT / f"ck-{args.child}")
        return
    shutil.rmtree(OUT, ignore_errors=True)
    results = []
    for run in range(args.runs):
        for side, seed in (("L", 1), ("R", 2)):
            for b in range(2):
                write_file(OUT / "in" / side, f"r{run}b{b}.json", args.rows, seed * 100 + run * 10 + b, 1_700_000_000 + run * 10 + b)
        for daemon in ("plain", "preload"):
            started = time.time()
            line = subprocess.run([sys.executable, __file__, "--child", daemon, "--parallelism", str(args.parallelism)],
                                  capture_output=True, text=True, cwd=ROOT).stdout.strip().splitlines()[-1]
            results.append({"run": run, "kind": "fresh" if run == 0 else "restart", "daemon": daemon,
                            "wall_s": time.time() - started, **json.loads(line)})
    print(f"\nstart-up and restart, similarity_join, {args.parallelism} workers, 2 x {args.rows:,} records per batch "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(f"{'run':<10}{'daemon':<9}{'session (s)':>12}{'query started':>15}{'1st batch':>11}{'2nd batch':>11}"
          "   Spark phases of the 1st batch (ms)")
    for r in results:
        phases = ", ".join(f"{k} {v}" for k, v in r["first_batch_phases_ms"].items() if v >= 50)
        print(f"{r['kind']:<10}{r['daemon']:<9}{r['session_s']:>12.1f}{r['query_started_s']:>15.1f}"
              f"{r['first_batch_s'] or 0:>11.1f}{r['second_batch_s'] or 0:>11.1f}   {phases}; state commit {r['first_state_commit_ms']}")
    for kind in ("fresh", "restart"):
        batch = {d: np.median([r["first_batch_s"] - r["query_started_s"] for r in results
                               if r["kind"] == kind and r["daemon"] == d and r["first_batch_s"]] or [np.nan])
                 for d in ("plain", "preload")}
        print(f"{kind}: query start to 1st batch committed, median: plain {batch['plain']:.1f} s, "
              f"preload {batch['preload']:.1f} s (plain/preload {batch['plain'] / batch['preload']:.2f}x)")
    Path(ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "startup.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
