"""Start-up and restart: where the seconds before the first committed micro-batch go.

    .venv/bin/python bench/startup.py [--parallelism 5] [--rows 20000] [--runs 3] [--compare archive|daemon]

Each run is a fresh Python process (as after a crash): it creates the local session, builds a
similarity join over a JSON file stream (2-D, two streams), starts it with ``availableNow`` and
times, from the process start: session ready, query started, first batch committed (with
Spark's own phases of that batch), and the second batch. The first run starts from an empty
checkpoint, the later ones restart from it with one more file per stream (the restart path).
Two set-ups run side by side, interleaved, each with its own checkpoint: ``--compare archive``
(default) the driver JVM with and without the class-data-sharing archive of
:mod:`driftjoin.spark.runtime.class_archive` (built first if missing); ``--compare daemon`` Python workers
forked from driftjoin's preloading daemon (the default) and from PySpark's plain one.
After its measured query, each process starts the same join once more on a fresh checkpoint
("warm"): that query's first batch pays only the per-query costs, so the difference between
the two first batches is what a process pays once (the JVM and PySpark warming up their
transformWithStateInPandas machinery), whatever the join and the data.
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

from driftjoin.spark.runtime import class_archive

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "startup"


def write_file(folder: Path, name: str, n: int, seed: int, mtime: float) -> None:
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / name, "w") as f:
        for i, v in enumerate(rng.uniform(-1, 1, (n, 2)).tolist()):
            f.write(json.dumps({"id": seed * 10_000_000 + i, "vector": v}) + "\n")
    os.utime(folder / name, (mtime, mtime))


#: The two set-ups of each comparison: (name, local_session keyword arguments); the default second.
SETUPS = {"archive": (("no-archive", {"class_archive": False}), ("archive", {"class_archive": True})),
          "daemon": (("plain", {"preload_workers": False}), ("preload", {"preload_workers": True}))}


def child(parallelism: int, options: dict, out: Path) -> None:
    """One process: session, query, first two batches; prints a JSON line of timings."""
    t0 = time.time()
    from driftjoin import local_session, similarity_join

    spark = local_session(parallelism, "driftjoin-startup", **options)
    t_session = time.time()

    def read(side: str):
        return spark.readStream.schema("id long, vector array<double>").option("maxFilesPerTrigger", 1).json(str(OUT / "in" / side))

    def run(checkpoint: Path) -> tuple[float, list[float], list[dict]]:
        pairs = similarity_join(read("L"), read("R"), threshold=0.01, metric="euclidean", window=None, dim=2,
                                parallelism=parallelism)
        q = (pairs.writeStream.format("noop").option("checkpointLocation", str(checkpoint))
             .trigger(availableNow=True).start())
        started = time.time()
        done: list[float] = []
        while q.isActive and len(done) < 2:
            time.sleep(0.05)
            n = len([p for p in q.recentProgress if p["numInputRows"]])
            while len(done) < n:
                done.append(time.time())
        q.awaitTermination()
        return started, done, [p for p in q.recentProgress if p["numInputRows"]]

    t_started, done, progress = run(out)
    warm = out.parent / f"{out.name}-warm"
    shutil.rmtree(warm, ignore_errors=True)
    warm_started, warm_done, warm_progress = run(warm)
    print(json.dumps({"session_s": t_session - t0, "query_started_s": t_started - t0,
                      "first_batch_s": done[0] - t0 if done else None,
                      "second_batch_s": done[1] - t0 if len(done) > 1 else None,
                      "first_batch_phases_ms": progress[0]["durationMs"] if progress else {},
                      "first_state_commit_ms": _commit_ms(progress),
                      "warm_first_batch_s": warm_done[0] - warm_started if warm_done else None,
                      "warm_phases_ms": warm_progress[0]["durationMs"] if warm_progress else {},
                      "warm_state_commit_ms": _commit_ms(warm_progress)}))
    spark.stop()


def _commit_ms(progress: list[dict]) -> int | None:
    """The state operators' commit time of the first batch with input."""
    return sum(o.get("commitTimeMs", 0) for o in progress[0].get("stateOperators", [])) if progress else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--parallelism", type=int, default=5)
    ap.add_argument("--rows", type=int, default=20_000, help="records per file and stream")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--compare", choices=sorted(SETUPS), default="archive")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.parallelism, dict(SETUPS[args.compare])[args.child], OUT / f"ck-{args.child}")
        return
    shutil.rmtree(OUT, ignore_errors=True)
    if args.compare == "archive" and class_archive.build() is None:
        raise SystemExit("no class archive could be built (python -m driftjoin.spark.runtime.class_archive says why)")
    (base, _), (default, _) = SETUPS[args.compare]
    results = []
    for run in range(args.runs):
        for side, seed in (("L", 1), ("R", 2)):
            for b in range(2):
                write_file(OUT / "in" / side, f"r{run}b{b}.json", args.rows, seed * 100 + run * 10 + b, 1_700_000_000 + run * 10 + b)
        for setup in (base, default):
            started = time.time()
            line = subprocess.run([sys.executable, __file__, "--child", setup, "--compare", args.compare,
                                   "--parallelism", str(args.parallelism)],
                                  capture_output=True, text=True, cwd=ROOT).stdout.strip().splitlines()[-1]
            results.append({"run": run, "kind": "fresh" if run == 0 else "restart", "setup": setup,
                            "wall_s": time.time() - started, **json.loads(line)})
    print(f"\nstart-up and restart, similarity_join, {args.parallelism} workers, 2 x {args.rows:,} records per batch "
          f"(load average {os.getloadavg()[0]:.1f})")
    print(f"{'run':<10}{'set-up':<12}{'session (s)':>12}{'query started':>15}{'1st batch':>11}{'2nd batch':>11}"
          f"{'warm 1st':>10}   Spark phases of the 1st batch (ms) | of the warm query's 1st batch")
    for r in results:
        phases = ", ".join(f"{k} {v}" for k, v in r["first_batch_phases_ms"].items() if v >= 50)
        warm = ", ".join(f"{k} {v}" for k, v in r["warm_phases_ms"].items() if v >= 50)
        print(f"{r['kind']:<10}{r['setup']:<12}{r['session_s']:>12.1f}{r['query_started_s']:>15.1f}"
              f"{r['first_batch_s'] or 0:>11.1f}{r['second_batch_s'] or 0:>11.1f}{r['warm_first_batch_s'] or 0:>10.1f}"
              f"   {phases}; state commit {r['first_state_commit_ms']} | {warm}; state commit {r['warm_state_commit_ms']}")
    for kind in ("fresh", "restart"):
        batch = {d: np.median([r["first_batch_s"] - r["query_started_s"] for r in results
                               if r["kind"] == kind and r["setup"] == d and r["first_batch_s"]] or [np.nan])
                 for d in (base, default)}
        warm = np.median([r["warm_first_batch_s"] for r in results if r["kind"] == kind and r["warm_first_batch_s"]] or [np.nan])
        session = {d: np.median([r["session_s"] for r in results if r["kind"] == kind and r["setup"] == d] or [np.nan])
                   for d in (base, default)}
        print(f"{kind}: session, median: {base} {session[base]:.1f} s, {default} {session[default]:.1f} s "
              f"({session[base] / session[default]:.2f}x); query start to 1st batch committed, median: "
              f"{base} {batch[base]:.1f} s, {default} {batch[default]:.1f} s ({batch[base] / batch[default]:.2f}x); "
              f"the same query again in the warm process {warm:.1f} s")
    Path(ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / f"startup-{args.compare}.json").write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
