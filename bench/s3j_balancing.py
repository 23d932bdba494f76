"""Benchmark: adaptive workset balancing, the setting of the S3J paper's Figure 6.

Two uniform 2-D streams, 8,000 records/s in total (``--scale`` multiplies the rate), angular
distance at 0.1% selectivity, 5 workers, 1-minute windows, balancing at each window start
(``--at any`` balances inside windows too), and a drifting-distribution run. Policies ``none``,
``greedy`` and ``s3j`` run side by side on the same records in one run.

Runs the S3J core in one process, one micro-batch per second of stream time, and models the
workers as independent processors: each worker's measured compute time per batch is queued
behind its previous batches, so a worker's p99 latency per batch is its finish time minus the
batch start (what 5 separate machines would see; on Spark the workers share this machine's 2
cores). Prints per window: DI, the load (comparisons) of each worker, max per-worker p99
latency, worksets moved and bytes moved; writes JSON and a PNG of per-worker p99 latency over
time per policy (the paper's Figure 6) to bench/results/.

    .venv/bin/python bench/s3j_balancing.py --windows 4 --scale 0.25
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

import numpy as np

from driftjoin.spark.similarity.control import BalanceController
from driftjoin.distance import get_metric
from driftjoin.generators.vectors import generate_vectors
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.records import Records
from driftjoin.s3j.space import random_centroids

WINDOW = 60.0


def run(policy: str, dist: str, rate: float, windows: int, workers: int, at: str, split: bool, seed: int) -> dict:
    m = get_metric("angular")
    per_stream = int(rate / 2)
    secs = int(windows * WINDOW)
    eng = S3JEngine(random_centroids(workers, 2, seed), m, 0.001, self_join=False, dim=2)
    ctl = BalanceController(tempfile.mkdtemp(prefix="dj-bal-"), workers, 2, policy=policy, at=at,
                            monitoring_window=1e-9, di_threshold=0.05, latency_spread=0.5, split=split)
    finish = np.zeros(workers)
    rows: list[dict] = []
    window_stats: dict[int, list[float]] = {}
    lat_series: list[tuple[float, int, float]] = []
    for sec in range(secs):
        w = int(sec // WINDOW)
        if sec % WINDOW == 0:
            if window_stats:
                loads = ctl.worker_loads(window_stats)
                prev = rows[-1]
                d = ctl.decide(window_stats, loads, prev["p99_per_worker"], w, float(sec))
                if d is not None:
                    eng.set_assignment(dict(ctl.assignment), dict(ctl.splits))
                    prev["moves_after"], prev["bytes_moved_after"] = d.moves, d.bytes_moved
            rows.append({"window": w, "policy": policy, "dist": dist, "p99_per_worker": [0.0] * workers,
                         "load_per_worker": [0.0] * workers, "moves_after": 0, "bytes_moved_after": 0.0})
            window_stats = {}
            eng.expire_before(w)
        ts = sec + np.arange(per_stream) / per_stream
        vec = np.vstack([generate_vectors(dist, seed=seed, stream=s, start=sec * per_stream, count=per_stream, dim=2,
                                          times=ts, drift_period=4 * WINDOW) for s in (0, 1)])
        side = np.repeat([0, 1], per_stream).astype(np.int8)
        ids = np.concatenate([np.arange(sec * per_stream, (sec + 1) * per_stream) * 2 + s for s in (0, 1)])
        order = np.argsort(np.concatenate([ts, ts]), kind="stable")
        batch = Records(ids[order], side[order], m.prepare(vec[order]), np.concatenate([ts, ts])[order], np.full(2 * per_stream, w, np.int64))
        _, st = eng.process(batch)
        c = st.worksets
        for g in set(c.comparisons) | set(c.inner) | set(c.outlier) | set(c.outer):
            new = ctl.workset_load(c.comparisons.get(g, 0), c.inner.get(g, 0), c.outlier.get(g, 0), c.outer.get(g, 0))
            old = window_stats.get(g, [0.0, 0.0])
            window_stats[g] = [old[0] + new[0], old[1] + new[1]]
        row = rows[-1]
        for k in range(workers):
            t = st.worker_seconds.get(k, 0.0)
            finish[k] = max(finish[k], sec + 1.0) + t
            p99 = finish[k] - sec  # the batch's first record waited this long
            row["p99_per_worker"][k] = max(row["p99_per_worker"][k], p99)
            row["load_per_worker"][k] += st.worker_comparisons.get(k, 0)
            lat_series.append((sec + 1.0, k, p99))
    for r in rows:
        loads = np.array(r["load_per_worker"])
        r["di"] = float(np.abs(loads - loads.mean()).sum())
        r["di_relative"] = float(r["di"] / loads.sum()) if loads.sum() else 0.0
        r["max_p99"] = float(max(r["p99_per_worker"]))
    return {"windows": rows, "latency": lat_series, "decisions": [d.__dict__ for d in ctl.decisions]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--windows", type=int, default=4)
    ap.add_argument("--scale", type=float, default=0.25, help="fraction of the paper's 8,000 records/s")
    ap.add_argument("--workers", type=int, default=5)
    ap.add_argument("--at", choices=["window", "any"], default="window")
    ap.add_argument("--split", action="store_true", help="also split irremovable worksets (beyond the paper)")
    ap.add_argument("--seed", type=int, default=3)
    args = ap.parse_args()
    rate = 8000 * args.scale
    results = {}
    for dist in ("uniform", "drift"):
        for policy in ("none", "greedy", "s3j"):
            results[(dist, policy)] = run(policy, dist, rate, args.windows, args.workers, args.at, args.split, args.seed)
    print(f"\nWorkset balancing (Figure 6 setting): {rate:,.0f} records/s, 0.1%, {args.workers} workers, 1-min windows, "
          f"balancing at {'each window start' if args.at == 'window' else 'any batch'}{', with splits' if args.split else ''}")
    for dist in ("uniform", "drift"):
        print(f"\n[{dist}]  per window: relative DI | max p99 latency (s) | worksets moved after it")
        print(f"{'window':>6}" + "".join(f"{p:>34}" for p in ("none", "greedy", "s3j")))
        for i in range(args.windows):
            cells = []
            for policy in ("none", "greedy", "s3j"):
                r = results[(dist, policy)]["windows"][i]
                cells.append(f"{r['di_relative']:>10.2f} {r['max_p99']:>10.2f} {r['moves_after']:>6} ({r['bytes_moved_after'] / 1e3:,.0f} kB)")
            print(f"{i:>6}" + "".join(f"{c:>34}" for c in cells))
        for policy in ("none", "greedy", "s3j"):
            loads = [", ".join(f"{x / 1e6:.1f}" for x in r["load_per_worker"]) for r in results[(dist, policy)]["windows"]]
            print(f"  {policy:>6} load per worker (M comparisons) by window: " + " | ".join(loads))
    out = Path("bench/results")
    out.mkdir(parents=True, exist_ok=True)
    (out / "s3j_balancing.json").write_text(json.dumps({f"{d}/{p}": v for (d, p), v in results.items()}, indent=1, default=str))
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 6), sharey="row")
    for row, dist in enumerate(("uniform", "drift")):
        for col, policy in enumerate(("none", "greedy", "s3j")):
            ax = axes[row][col]
            series = np.array(results[(dist, policy)]["latency"])
            for k in range(args.workers):
                sel = series[series[:, 1] == k]
                ax.plot(sel[:, 0], sel[:, 2], label=f"worker {k}", lw=1)
            for wdw in range(1, args.windows):
                ax.axvline(wdw * WINDOW, color="grey", lw=0.5, ls="--")
            ax.set_title(f"{dist}, balance={policy}")
            ax.set_xlabel("stream time (s)")
            if col == 0:
                ax.set_ylabel("p99 latency (s)")
    axes[0][0].legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(out / "s3j_balancing.png", dpi=100)
    print(f"\nwrote {out / 's3j_balancing.json'} and {out / 's3j_balancing.png'}")


if __name__ == "__main__":
    main()
