"""Benchmark of partitioned SWOOP (driftjoin.swoop.partitioned) against the single-process join.

For every workload (as ``bench/swoop_core.py``: ``zipf`` and ``neardup``), window size |W| and
k, the single compiled join (``Swoop``) and ``PartitionedTopK`` for each design (``owner``:
indexed by one worker, probed by all; ``probe``: indexed by all, probed by one; ``token``:
token-space parts), parallelism p and
shared-bound setting are filled to a steady state (``WARMUP x |W|`` sets) in micro-batches of
``--batch`` sets, then ``--measure`` further sets are timed:

* sets/s: measured sets / the CPU seconds of the most loaded worker (the workers run in
  parallel on a cluster, each on its own core; here they run one after the other in one
  process and each one's CPU time is added up per micro-batch, as ``PartitionedTopK`` does);
  the single join's: measured sets / its CPU seconds; ``speedup`` is their ratio. The
  measured sets are run ``--repeat`` times from a pickled copy of the warm join and each
  worker's (and the single join's) smallest CPU time is taken: on a shared machine CPU time
  too grows with the other load (caches, hyper-threads), and by up to 2x for a few seconds.
  Python's cyclic garbage collector is paused while timing (after a full collection): its
  passes over all the workers' objects, which one process holds here, cost tens of
  milliseconds and land on whichever worker runs, while a cluster's workers collect their own;
* the merger's CPU seconds per set (the final single-key stage: one more core, not parallel);
* total worker CPU / single CPU: the work that partitioning adds (every worker probes every
  set; each prunes with the bound of its own pairs only);
* pruning power: pre-candidates per set (all workers, and the most loaded worker's) and
  candidates per set (pairs sent to a stock), against the single join's; the largest stock
  of a worker and the sum over workers at the end.

With ``--bound`` the control plane's shared bound (``share_bound=True``) is published after
every micro-batch, as the Spark operator would between micro-batches.

Writes bench/results/swoop_partitioned.json (merged with earlier runs by row key) and
bench/results/swoop_partitioned.png. Run with ``nice -n 10 .venv/bin/python
bench/swoop_partitioned.py [--quick]``.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import pickle
import sys
import time
from pathlib import Path

from swoop_core import RATE, RESULTS, WARMUP, WORKLOADS, calibrate  # bench/ is sys.path[0]

from driftjoin.swoop import Swoop
from driftjoin.swoop.generator import set_stream
from driftjoin.swoop.partitioned import PartitionedTopK

Row = dict


def _repeat(join: object, run, repeat: int) -> tuple[object, list[float]]:
    """Run ``run(copy)`` on ``repeat`` copies of ``join``; the last copy and the smallest CPU
    seconds per worker (``run`` returns a list of per-worker seconds)."""
    snapshot = pickle.dumps(join, protocol=pickle.HIGHEST_PROTOCOL)
    best: list[float] | None = None
    for _ in range(repeat):
        copy = pickle.loads(snapshot)
        gc.collect()
        gc.disable()
        try:
            cpu = run(copy)
        finally:
            gc.enable()
        best = cpu if best is None else [min(a, b) for a, b in zip(best, cpu)]
    return copy, best  # type: ignore[return-value]


def single(stream: list, warm: int, window: int, k: int, repeat: int) -> Row:
    """The single compiled join: CPU seconds of the measured inserts."""
    join = Swoop(k, "jaccard", window / RATE)
    for set_id, tokens, ts in stream[:warm]:
        join.insert(set_id, tokens, ts)
    pre0, cand0 = join.generator.pre_candidates, join.generator.candidates

    def run(copy: Swoop) -> list[float]:
        started = time.process_time()
        for set_id, tokens, ts in stream[warm:]:
            copy.insert(set_id, tokens, ts)
        return [time.process_time() - started]

    join, (cpu,) = _repeat(join, run, repeat)
    measured = len(stream) - warm
    return {
        "design": "single", "p": 1, "bound": False, "max_worker_cpu_s": cpu,
        "sets_per_s": measured / cpu, "total_cpu_s": cpu, "merger_cpu_s": 0.0,
        "pre_candidates_per_set": (join.generator.pre_candidates - pre0) / measured,
        "max_worker_pre_candidates_per_set": (join.generator.pre_candidates - pre0) / measured,
        "candidates_per_set": (join.generator.candidates - cand0) / measured,
        "max_stock": len(join.stock), "total_stock": len(join.stock),
    }  # fmt: skip


def partitioned(
    stream: list, warm: int, window: int, k: int, design: str, p: int, bound: bool, batch: int,
    repeat: int,
) -> Row:
    """``PartitionedTopK`` in micro-batches: per-worker CPU seconds of the measured batches."""
    join = PartitionedTopK(
        k, "jaccard", window / RATE, parallelism=p, design=design, share_bound=bound
    )
    rows = [(set_id, tokens, ts, None) for set_id, tokens, ts in stream]
    for start in range(0, warm, batch):
        join.insert_batch(rows[start : min(start + batch, warm)])
    pre0 = [w.generator.pre_candidates for w in join.workers]
    cand0 = [w.generator.candidates for w in join.workers]
    merger: list[float] = []

    def run(copy: PartitionedTopK) -> list[float]:
        cpu0, merger0 = list(copy.worker_cpu), copy.merger_cpu
        for start in range(warm, len(rows), batch):
            copy.insert_batch(rows[start : start + batch])
        merger.append(copy.merger_cpu - merger0)
        return [now - before for now, before in zip(copy.worker_cpu, cpu0)]

    join, cpu = _repeat(join, run, repeat)
    measured = len(rows) - warm
    pre = [w.generator.pre_candidates - x for w, x in zip(join.workers, pre0)]
    cand = [w.generator.candidates - x for w, x in zip(join.workers, cand0)]
    stocks = [len(w.stock) for w in join.workers]
    return {
        "design": design, "p": p, "bound": bound, "max_worker_cpu_s": max(cpu),
        "sets_per_s": measured / max(cpu), "total_cpu_s": sum(cpu), "merger_cpu_s": min(merger),
        "pre_candidates_per_set": sum(pre) / measured,
        "max_worker_pre_candidates_per_set": max(pre) / measured,
        "candidates_per_set": sum(cand) / measured,
        "max_stock": max(stocks), "total_stock": sum(stocks),
    }  # fmt: skip


def sweep(args: argparse.Namespace, save) -> list[Row]:  # type: ignore[no-untyped-def]
    variants = [("single", 1, False)] + [
        (design, p, bound)
        for design in args.designs
        for p in args.ps
        for bound in ([False, True] if args.bound else [False])
        if not (bound and p == 1)
    ]
    rows: list[Row] = []
    rates: dict[tuple, float] = {}  # (workload, design, p, bound, k) -> last rate (budget)
    for workload in args.workloads:
        for k in args.ks:
            for window in args.windows:
                warm = int(WARMUP * window)
                stream = list(set_stream(warm + args.measure, rate=RATE, seed=args.seed, **WORKLOADS[workload]))
                base: Row | None = None
                for design, p, bound in variants:
                    key = (workload, design, p, bound, k)
                    # the warm-up costs every worker the whole stream: p x the slowest worker
                    need = WARMUP * window * p / rates.get(key, math.inf)
                    if need > args.budget:
                        print(f"  skip {design:6s} p={p} bound={bound!s:5s} {workload:7s} |W|={window:>6} "
                              f"k={k:>4}: ~{need:.0f}s to fill (did not keep up)", flush=True)
                        continue
                    started = time.perf_counter()
                    if design == "single":
                        row = single(stream, warm, window, k, args.repeat)
                    else:
                        row = partitioned(stream, warm, window, k, design, p, bound, args.batch, args.repeat)
                    if design == "single":
                        base = row
                    rates[key] = row["sets_per_s"]
                    row.update(
                        workload=workload, window=window, k=k, measured_sets=args.measure,
                        batch=args.batch, repeat=args.repeat, seconds=time.perf_counter() - started,
                        load_average=os.getloadavg()[0],
                    )  # fmt: skip
                    if base is not None:
                        row["speedup"] = row["sets_per_s"] / base["sets_per_s"]
                        row["work_ratio"] = row["total_cpu_s"] / base["total_cpu_s"]
                    rows.append(row)
                    save(rows)  # after every row: a long sweep can be stopped without losing rows
                    print(
                        f"  {design:6s} p={p} bound={bound!s:5s} {workload:7s} |W|={window:>6} k={k:>4}: "
                        f"{row['sets_per_s']:8.0f} sets/s (x{row.get('speedup', 1):.2f})  "
                        f"work x{row.get('work_ratio', 1):.2f}  merger "
                        f"{1e6 * row['merger_cpu_s'] / args.measure:5.1f} us/set  pre/set "
                        f"{row['pre_candidates_per_set']:7.1f} (max worker "
                        f"{row['max_worker_pre_candidates_per_set']:7.1f})  cand/set "
                        f"{row['candidates_per_set']:5.1f}  stock {row['max_stock']}/{row['total_stock']}  "
                        f"load {row['load_average']:.1f}",
                        flush=True,
                    )
    return rows


def print_tables(rows: list[Row]) -> None:
    index = {(r["workload"], r["design"], r["p"], r["bound"], r["window"], r["k"]): r for r in rows}
    cols = sorted({(r["window"], r["k"]) for r in rows})
    variants = sorted({(r["design"], r["p"], r["bound"]) for r in rows}, key=lambda v: (v[0] != "single", v))
    for workload in sorted({r["workload"] for r in rows}):
        for title, fmt in (
            ("sets/s of the most loaded worker (speedup over the single join)",
             lambda r: f"{r['sets_per_s'] / 1e3:.1f}k (x{r.get('speedup', 1):.2f})"),
            ("pre-candidates per set: all workers / most loaded worker",
             lambda r: f"{r['pre_candidates_per_set']:.0f}/{r['max_worker_pre_candidates_per_set']:.0f}"),
            ("candidates per set; stock: largest worker / all workers",
             lambda r: f"{r['candidates_per_set']:.1f}; {r['max_stock']}/{r['total_stock']}"),
        ):  # fmt: skip
            print(f"\n== {workload}: {title} ==")
            print(f"{'variant':>20} " + " ".join(f"{f'|W|={w} k={k}':>20}" for w, k in cols))
            for design, p, bound in variants:
                cells = []
                for w, k in cols:
                    r = index.get((workload, design, p, bound, w, k))
                    cells.append(fmt(r) if r else "-")
                name = "single" if design == "single" else f"{design} p={p}{' +bound' if bound else ''}"
                print(f"{name:>20} " + " ".join(f"{c:>20}" for c in cells))


def plot(rows: list[Row], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({r["workload"] for r in rows})
    cols = sorted({(r["window"], r["k"]) for r in rows})
    fig, axes = plt.subplots(len(workloads), len(cols), figsize=(3.6 * len(cols), 3.4 * len(workloads)),
                             squeeze=False)
    for ax_row, workload in zip(axes, workloads):
        for ax, (window, k) in zip(ax_row, cols):
            single_rate = [r["sets_per_s"] for r in rows if r["workload"] == workload and r["design"] == "single"
                           and r["window"] == window and r["k"] == k]
            if single_rate:
                ax.axhline(single_rate[0], color="grey", ls=":", label="single join")
            for design, style in (("owner", "-o"), ("probe", "-^"), ("token", "--s")):
                for bound in (False, True):
                    pts = sorted((r["p"], r["sets_per_s"]) for r in rows
                                 if r["workload"] == workload and r["design"] == design and r["bound"] == bound
                                 and r["window"] == window and r["k"] == k)
                    if pts:
                        ax.plot(*zip(*pts), style, alpha=1.0 if bound else 0.6,
                                label=f"{design}{' +bound' if bound else ''}")
            ax.set_title(f"{workload} |W|={window} k={k}", fontsize=9)
            ax.set_xlabel("workers p")
            ax.set_ylabel("sets / s (most loaded worker)")
            ax.set_yscale("log")
            ax.grid(True, which="both", alpha=0.3)
            ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--windows", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--ks", type=int, nargs="+", default=[10, 100])
    parser.add_argument("--ps", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--designs", nargs="+", default=["owner", "probe", "token"],
                        choices=["owner", "probe", "token"])
    parser.add_argument("--workloads", nargs="+", default=list(WORKLOADS), choices=list(WORKLOADS))
    parser.add_argument("--bound", action=argparse.BooleanOptionalAction, default=True,
                        help="also run every p > 1 with the shared bound")
    parser.add_argument("--measure", type=int, default=10_000, help="timed sets per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs of the timed sets (smallest CPU time)")
    parser.add_argument("--batch", type=int, default=1000, help="sets per micro-batch")
    parser.add_argument("--budget", type=float, default=300.0, help="max predicted warm-up seconds")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--quick", action="store_true", help="small smoke run (|W| = 1e3, k = 10)")
    args = parser.parse_args()
    if args.quick:
        args.windows, args.ks, args.measure, args.workloads, args.repeat = [1_000], [10], 1000, ["zipf"], 1
    print(f"calibration loop {calibrate():.2f} s (about 0.25 s idle), load average {os.getloadavg()[0]:.1f}")
    from driftjoin.swoop import fast

    fast.warm_up()
    started = time.perf_counter()
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "swoop_partitioned.json"
    key = lambda r: (r["workload"], r["design"], r["p"], r["bound"], r["window"], r["k"])  # noqa: E731
    previous = json.loads(path.read_text())["runs"] if path.exists() else []
    meta = {"python": sys.version.split()[0], "rate_sets_per_time_unit": RATE, "similarity": "jaccard",
            "workloads": {name: {**kw, "size": list(kw["size"])} for name, kw in WORKLOADS.items()}}

    def merged(rows: list[Row]) -> list[Row]:
        """This run's rows and the earlier runs' other rows."""
        fresh = {key(r) for r in rows}
        return sorted([r for r in previous if key(r) not in fresh] + rows, key=lambda r: tuple(map(str, key(r))))

    def save(rows: list[Row]) -> None:
        path.write_text(json.dumps({"meta": meta, "runs": merged(rows)}, indent=1))

    rows = merged(sweep(args, save))
    print_tables(rows)
    plot(rows, RESULTS / "swoop_partitioned.png")
    print(f"\nwrote {path} and {RESULTS / 'swoop_partitioned.png'} ({time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
