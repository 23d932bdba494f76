"""Benchmark of the SWOOP core (driftjoin.swoop) against Base: set rate, latency, stock size.

Algorithms: ``swoop`` (the compiled engine, numba kernels; the default for the built-in
similarity functions), ``swoop-py`` (the pure-Python engine, the reference) and ``base``. The
kernels are compiled, or loaded from numba's on-disk cache, before anything is timed; the time
this takes is printed and stored as ``jit_warmup_s``.

For every workload, average window size |W| and k, the join is first filled to a steady state
(``WARMUP x |W|`` sets), then ``--measure`` further sets are timed one insert at a time:

* set rate: measured sets / their total processing time (section 7.1; token mapping included,
  unlike the paper's), by the wall clock (sum of the per-insert times) and by the process's
  CPU time over the measured loop (the machine is shared, and CPU time leaves out the time
  spent waiting for a core; it includes the per-insert clock reads, < 1%);
* latency: per-insert processing time by the wall clock, p50 / p99 / max (no queueing: the
  stream is replayed as fast as the join takes it);
* stock size: the maximum number of stock pairs over the whole run (Figure 13);
* SWOOP's pre-candidates and candidates per set (Figure 14's measures).

A configuration is skipped ("did not keep up") once the rate of a smaller window predicts that
its warm-up would exceed ``--budget`` seconds; Base additionally stops when its stock (all
overlapping pairs in the window) would exceed ``--base-max-stock`` pairs.

Workloads (driftjoin.swoop.generator): ``zipf`` -- independent Zipf(s=1) sets over 10^4 tokens,
5 to 15 tokens each, whose best pairs are only moderately similar (top-10 Jaccard ~0.6);
``neardup`` -- the same plus 20 % near-duplicates (a recent set with one token replaced), the
regime of tweets or reposts in which the skyband lower bound prunes well.

Writes bench/results/swoop_core.json (merged with earlier runs: a run replaces the rows it
measures, so a slow corner such as ``--windows 100000 --ks 10 --algorithms swoop`` can be run
on its own) and bench/results/swoop_core.png. Run ``.venv/bin/python bench/swoop_core.py
[--quick]``. The machine's speed varies with other load, so every row records the load average
and a pure-Python calibration loop; p99/max latencies include OS scheduling delays.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from driftjoin.swoop import BaseTopK, Swoop
from driftjoin.swoop.generator import set_stream

ALGORITHMS = ("swoop", "swoop-py", "base")

RESULTS = Path(__file__).resolve().parent / "results"
RATE = 1_000.0  # sets per time unit; the window duration is |W| / RATE
WARMUP = 1.2
WORKLOADS = {
    "zipf": dict(vocabulary=10_000, s=1.0, size=(5, 15)),
    "neardup": dict(vocabulary=10_000, s=1.0, size=(5, 15), near_duplicates=0.2),
}


def calibrate(n: int = 5_000_000) -> float:
    """CPU seconds of a 5M-iteration pure-Python loop (about 0.25 s on an idle modern core)."""
    start = time.process_time()
    x = 0
    for i in range(n):
        x += i
    return (time.process_time() - start) * 5_000_000 / n


def make_join(algorithm: str, k: int, window: float) -> Swoop | BaseTopK:
    if algorithm == "base":
        return BaseTopK(k, "jaccard", window)
    return Swoop(k, "jaccard", window, engine="compiled" if algorithm == "swoop" else "python")


def run(algorithm: str, workload: str, window: int, k: int, measure: int, seed: int) -> dict:
    """Fill one join to steady state, then time ``measure`` inserts one by one."""
    warm = int(WARMUP * window)
    stream = list(set_stream(warm + measure, rate=RATE, seed=seed, **WORKLOADS[workload]))
    join = make_join(algorithm, k, window / RATE)
    max_stock = 0
    started = time.perf_counter()
    for set_id, tokens, ts in stream[:warm]:
        join.insert(set_id, tokens, ts)
        max_stock = max(max_stock, len(join.stock))
    warmup_s = time.perf_counter() - started
    generator = getattr(join, "generator", None)
    pre0, cand0 = (generator.pre_candidates, generator.candidates) if generator else (0, 0)
    wall = np.empty(measure)
    wall_clock = time.perf_counter  # ~0.2 us a read; a CPU clock read costs ~2 us here
    cpu_started = time.process_time()
    for n, (set_id, tokens, ts) in enumerate(stream[warm:]):
        w0 = wall_clock()
        join.insert(set_id, tokens, ts)
        wall[n] = wall_clock() - w0
        max_stock = max(max_stock, len(join.stock))
    cpu_s = time.process_time() - cpu_started
    out = {
        "algorithm": algorithm,
        "workload": workload,
        "window": window,
        "k": k,
        "avg_window_size": join.window_size,
        "sets_per_s": measure / float(wall.sum()),
        "sets_per_cpu_s": measure / cpu_s,
        "latency_p50_ms": float(np.percentile(wall, 50)) * 1e3,
        "latency_p99_ms": float(np.percentile(wall, 99)) * 1e3,
        "latency_max_ms": float(wall.max()) * 1e3,
        "max_stock": max_stock,
        "warmup_s": warmup_s,
        "measured_sets": measure,
        # the machine is shared: load and the speed of a pure-Python loop right after the run
        "load_average": os.getloadavg()[0],
        "calibration_loop_s": calibrate(1_000_000),
    }
    if generator:
        out["pre_candidates_per_set"] = (generator.pre_candidates - pre0) / measure
        out["candidates_per_set"] = (generator.candidates - cand0) / measure
    return out


def sweep(args: argparse.Namespace) -> list[dict]:
    rows: list[dict] = []
    for workload in args.workloads:
        for algorithm in args.algorithms:
            measure = args.measure if algorithm == "swoop" else args.base_measure
            if algorithm == "swoop-py":
                measure = args.py_measure
            for k in args.ks:
                rate = math.inf
                for window in args.windows:
                    if WARMUP * window / rate > args.budget:
                        print(f"  skip {algorithm:5s} {workload:7s} |W|={window:>6} k={k:>4}: "
                              f"would need ~{WARMUP * window / rate:.0f}s to fill (did not keep up)")
                        continue
                    if algorithm == "base" and window * window / 2 > args.base_max_stock:
                        print(f"  skip base  {workload:7s} |W|={window:>6} k={k:>4}: "
                              f"stock of ~{window * window // 2:.0e} pairs (did not keep up)")
                        continue
                    row = run(algorithm, workload, window, k, measure, args.seed)
                    rate = row["sets_per_s"]
                    rows.append(row)
                    print(
                        f"  {algorithm:8s} {workload:7s} |W|={window:>6} k={k:>4}: "
                        f"{rate:9.0f} sets/s ({row['sets_per_cpu_s']:.0f} per CPU s)  "
                        f"p50 {row['latency_p50_ms']:7.3f} ms  "
                        f"p99 {row['latency_p99_ms']:7.3f} ms  max {row['latency_max_ms']:7.2f} ms  "
                        f"stock {row['max_stock']:>9}  load {row['load_average']:.1f} "
                        f"calib {row['calibration_loop_s']:.2f} s",
                        flush=True,
                    )
    return rows


def print_tables(rows: list[dict], windows: list[int], ks: list[int]) -> None:
    def cell(row: dict | None, key: str, fmt: str) -> str:
        return format(row[key], fmt) if row else "-"

    index = {(r["algorithm"], r["workload"], r["window"], r["k"]): r for r in rows}
    for workload in sorted({r["workload"] for r in rows}):
        for key, what in (("sets_per_s", "wall clock"), ("sets_per_cpu_s", "CPU time")):
            print(f"\n== workload {workload}: set rate (sets/s, {what}) ==")
            print(f"{'algorithm':>9} {'k':>5} " + " ".join(f"{'|W|=' + str(w):>11}" for w in windows))
            for algorithm in ALGORITHMS:
                for k in ks:
                    cells = [cell(index.get((algorithm, workload, w, k)), key, ".0f") for w in windows]
                    print(f"{algorithm:>9} {k:>5} " + " ".join(f"{c:>11}" for c in cells))
        for prefix, what in (("", "wall clock"),):
            print(f"\n== workload {workload}: SWOOP latency per insert, p50/p99/max ms ({what}) ==")
            for k in ks:
                cells = []
                for w in windows:
                    r = index.get(("swoop", workload, w, k))
                    cells.append(
                        f"{r[prefix + 'latency_p50_ms']:.2f}/{r[prefix + 'latency_p99_ms']:.2f}"
                        f"/{r[prefix + 'latency_max_ms']:.1f}"
                        if r
                        else "-"
                    )
                print(f"{'k=' + str(k):>9} " + " ".join(f"{c:>18}" for c in cells))
        print(f"\n== workload {workload}: maximum stock size (Figure 13) ==")
        for algorithm in ALGORITHMS:
            for k in ks:
                cells = [cell(index.get((algorithm, workload, w, k)), "max_stock", "d") for w in windows]
                print(f"{algorithm:>9} {k:>5} " + " ".join(f"{c:>11}" for c in cells))
        print(f"\n== workload {workload}: SWOOP pre-candidates / candidates per set ==")
        for k in ks:
            cells = [
                f"{r['pre_candidates_per_set']:.0f}/{r['candidates_per_set']:.1f}" if r else "-"
                for r in (index.get(("swoop", workload, w, k)) for w in windows)
            ]
            print(f"{'k=' + str(k):>9} " + " ".join(f"{c:>11}" for c in cells))


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(len(workloads), 2, figsize=(11, 4.2 * len(workloads)), squeeze=False)
    for row_axes, workload in zip(axes, workloads):
        rate_ax, stock_ax = row_axes
        for algorithm, style in (("swoop", "-o"), ("swoop-py", "-.^"), ("base", "--s")):
            for k in sorted({r["k"] for r in rows}):
                pts = sorted(
                    (r["window"], r["sets_per_s"], r["max_stock"])
                    for r in rows
                    if r["algorithm"] == algorithm and r["workload"] == workload and r["k"] == k
                )
                if not pts:
                    continue
                ws, rates, stocks = zip(*pts)
                line = rate_ax.plot(ws, rates, style, label=f"{algorithm} k={k}")[0]
                cpu_rates = [
                    r["sets_per_cpu_s"]
                    for r in sorted(rows, key=lambda r: r["window"])
                    if r["algorithm"] == algorithm and r["workload"] == workload and r["k"] == k
                ]
                rate_ax.plot(ws, cpu_rates, ":", color=line.get_color(), alpha=0.7)
                stock_ax.plot(ws, stocks, style, label=f"{algorithm} k={k}")
        rate_ax.axhline(1.5e4, color="grey", lw=0.8, ls=":", label="1.5e4 sets/s goal")
        for ax, title, ylabel in (
            (rate_ax, f"set rate ({workload}); dotted: per CPU second", "sets / s"),
            (stock_ax, f"maximum stock size ({workload}), Figure 13", "pairs"),
        ):
            ax.set_xscale("log")
            ax.set_yscale("log")
            ax.set_xlabel("average window size |W| (sets)")
            ax.set_ylabel(ylabel)
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[100, 1_000, 10_000, 100_000])
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--algorithms", nargs="+", default=["swoop", "base"], choices=ALGORITHMS)
    parser.add_argument("--measure", type=int, default=1000, help="timed SWOOP inserts per run")
    parser.add_argument("--base-measure", type=int, default=300, help="timed Base inserts per run")
    parser.add_argument("--py-measure", type=int, default=1000, help="timed swoop-py inserts per run")
    parser.add_argument("--budget", type=float, default=60.0, help="max predicted warm-up seconds")
    parser.add_argument("--base-max-stock", type=float, default=2e7)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="small smoke run (|W| <= 1e3, k = 10)")
    args = parser.parse_args()
    if args.quick:
        args.windows, args.ks, args.measure, args.base_measure = [100, 1_000], [10], 300, 100
    calibration = calibrate()
    load = os.getloadavg()
    print(f"calibration loop {calibration:.2f} s (about 0.25 s idle), load average {load[0]:.1f}")
    jit_started = time.perf_counter()
    from driftjoin.swoop import fast

    fast.warm_up()  # compile the kernels or load them from the cache, before any timing
    jit_s = time.perf_counter() - jit_started
    print(f"compiled engine ready in {jit_s:.1f} s (compiled, or loaded from numba's cache)")
    started = time.perf_counter()
    rows = sweep(args)
    # results accumulate across invocations: a run replaces the rows it measured
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "swoop_core.json"
    key = lambda r: (r["algorithm"], r["workload"], r["window"], r["k"])  # noqa: E731
    previous = json.loads(path.read_text())["runs"] if path.exists() else []
    fresh = {key(r) for r in rows}
    for row in rows:
        row["jit_warmup_s"] = jit_s
    rows = sorted([r for r in previous if key(r) not in fresh] + rows, key=key)
    windows = sorted({r["window"] for r in rows})
    ks = sorted({r["k"] for r in rows})
    print_tables(rows, windows, ks)
    meta = {
        "python": sys.version.split()[0],
        "rate_sets_per_time_unit": RATE,
        "workloads": {name: {**kw, "size": list(kw["size"])} for name, kw in WORKLOADS.items()},
        "similarity": "jaccard",
        "note": "calibration_loop_s per run: CPU seconds of a 5M-iteration Python loop (~0.25 idle)",
    }
    path.write_text(json.dumps({"meta": meta, "runs": rows}, indent=1))
    plot(rows, RESULTS / "swoop_core.png")
    print(f"\nwrote {path} and {RESULTS / 'swoop_core.png'} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
