"""Benchmark of the schema-free natural join core (not a test).

1. Partition quality (Section VII-E 1-3): AG vs SC vs DS on a server-log stream (like
   the paper's rwData) and a NoBench-style stream (nbData), for m = 5, 8, 10, 20 and
   several count-window sizes: replication, Gini coefficient of the load, maximal
   processing load and the share of windows that triggered a repartition, averaged over
   the windows of the stream.
2. Local join time (Section VII-E 5): FPTreeJoin vs nested-loop (NLJ) vs hash-based
   (HBJ) join on one worker for 1e3 to 1e5 documents; a run that exceeds the budget
   (default 60 s) is stopped, reported as such, and larger sizes of that algorithm are
   skipped.

Prints tables and writes bench/results/schemafree_core.json and .png.
Run: .venv/bin/python bench/schemafree_core.py [--quick] [--budget 60]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from driftjoin.schemafree.document import Document  # noqa: E402
from driftjoin.schemafree.fptree import AttributeOrder  # noqa: E402
from driftjoin.schemafree.generator import nobench_documents, server_log_documents  # noqa: E402
from driftjoin.schemafree.localjoin import LocalJoinName, make_local_join  # noqa: E402
from driftjoin.schemafree.metrics import gini  # noqa: E402
from driftjoin.schemafree.partitioner import Partitioner, PartitionerName  # noqa: E402
from driftjoin.schemafree.pipeline import load_documents, route_windows  # noqa: E402
from driftjoin.schemafree.window import CountWindow  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHODS: tuple[PartitionerName, ...] = ("ag", "sc", "ds")
JOINS: tuple[LocalJoinName, ...] = ("fptree", "nested", "hash")


def dataset(name: str, n: int, seed: int = 1) -> list[Document]:
    """Documents of a named generator (count windows, so no timestamp)."""
    if name == "log":
        raw = server_log_documents(n, seed, timestamp=False)
    else:
        raw = nobench_documents(n, seed)
    return load_documents(raw, CountWindow(max(n, 1)))


def partition_quality(docs: list[Document], window: int, m: int, method: PartitionerName) -> dict[str, Any]:
    """Mean routing quality over the windows of ``docs``."""
    started = time.perf_counter()
    windows = list(route_windows(docs, CountWindow(window), Partitioner(m, method)))
    rows = [(sum(w.loads) / len(w.docs), max(w.loads) / len(w.docs), w.loads) for w in windows]
    return {
        "replication": statistics.fmean(r for r, _, _ in rows),
        "max_load": statistics.fmean(ml for _, ml, _ in rows),
        "gini": statistics.fmean(gini(loads) for _, _, loads in rows),
        "repartition_rate": sum(w.repartitioned for w in windows) / len(windows),
        "seconds": time.perf_counter() - started,
    }


def time_local_join(docs: list[Document], name: LocalJoinName, budget: float) -> dict[str, Any]:
    """Probe-then-insert every document; stop once ``budget`` seconds are exceeded."""
    order = AttributeOrder.from_sample(d.avps for d in docs)
    local = make_local_join(name, order)
    pairs = 0
    started = time.perf_counter()
    for index, doc in enumerate(docs):
        pairs += len(local.join(doc))
        local.insert(doc)
        if index % 64 == 0 and time.perf_counter() - started > budget:
            return {"seconds": None, "stopped_after": index + 1, "pairs": pairs}
    return {"seconds": time.perf_counter() - started, "stopped_after": None, "pairs": pairs}


def run_partitioning(datasets: list[str], ms: list[int], windows: list[int], count: int) -> list[dict[str, Any]]:
    rows = []
    for data in datasets:
        docs = dataset(data, max(windows) * count)
        for window in windows:
            for m in ms:
                for method in METHODS:
                    stats = partition_quality(docs[: window * count], window, m, method)
                    rows.append({"dataset": data, "window": window, "m": m, "method": method, **stats})
    return rows


def run_joins(datasets: list[str], sizes: list[int], budget: float) -> list[dict[str, Any]]:
    rows = []
    for data in datasets:
        docs = dataset(data, max(sizes), seed=7)
        stopped: set[str] = set()
        for size in sizes:
            for name in JOINS:
                if name in stopped:
                    rows.append({"dataset": data, "docs": size, "join": name, "seconds": None, "skipped": True})
                    continue
                result = time_local_join(docs[:size], name, budget)
                if result["seconds"] is None:
                    stopped.add(name)
                rows.append({"dataset": data, "docs": size, "join": name, "skipped": False, **result})
    return rows


def print_partitioning(rows: list[dict[str, Any]]) -> None:
    print("\nPartition quality (means over windows; theta = 0.2, delta = 3)")
    print(f"{'data':8}{'window':>7}{'m':>4}  {'method':6}{'repl.':>7}{'Gini':>7}{'maxload':>9}{'repart.':>9}{'sec':>7}")
    for r in rows:
        print(
            f"{r['dataset']:8}{r['window']:>7}{r['m']:>4}  {r['method']:6}{r['replication']:>7.2f}"
            f"{r['gini']:>7.3f}{r['max_load']:>9.3f}{r['repartition_rate']:>9.2f}{r['seconds']:>7.1f}"
        )


def print_joins(rows: list[dict[str, Any]], budget: float) -> None:
    print(f"\nLocal join time on one worker (budget {budget:.0f} s)")
    print(f"{'data':8}{'docs':>8}  {'join':8}{'seconds':>14}{'pairs':>10}")
    for r in rows:
        if r["skipped"]:
            text = "skipped"
        elif r["seconds"] is None:
            text = f">{budget:.0f} (stop@{r['stopped_after']})"
        else:
            text = f"{r['seconds']:.2f}"
        pairs = "" if r["skipped"] or r["seconds"] is None else str(r["pairs"])
        print(f"{r['dataset']:8}{r['docs']:>8}  {r['join']:8}{text:>14}{pairs:>10}")


def plot(part_rows: list[dict[str, Any]], join_rows: list[dict[str, Any]], window: int, path: Path) -> None:
    datasets = sorted({r["dataset"] for r in part_rows})
    metrics = (("replication", "replication"), ("gini", "Gini"), ("max_load", "max. processing load"))
    fig, axes = plt.subplots(len(datasets) + 1, 3, figsize=(13, 3.4 * (len(datasets) + 1)))
    for i, data in enumerate(datasets):
        for j, (key, label) in enumerate(metrics):
            ax = axes[i][j]
            for method in METHODS:
                pts = sorted(
                    (r["m"], r[key]) for r in part_rows
                    if r["dataset"] == data and r["method"] == method and r["window"] == window
                )
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=method.upper())
            ax.set_title(f"{data}: {label} (window {window})")
            ax.set_xlabel("m")
            ax.legend()
    for j, data in enumerate(sorted({r["dataset"] for r in join_rows})):
        ax = axes[-1][j]
        for name in JOINS:
            pts = [(r["docs"], r["seconds"]) for r in join_rows
                   if r["dataset"] == data and r["join"] == name and r["seconds"] is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=name)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{data}: local join time (s)")
        ax.set_xlabel("documents on one worker")
        ax.legend()
    for k in range(len({r["dataset"] for r in join_rows}), 3):
        axes[-1][k].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke run")
    parser.add_argument("--budget", type=float, default=60.0, help="seconds before a local join is stopped")
    parser.add_argument("--join-datasets", default="log", help="comma list of log,nobench for the join timing")
    args = parser.parse_args()
    if args.quick:
        ms, windows, count, sizes = [5, 8], [200, 400], 3, [300, 1000]
    else:
        ms, windows, count, sizes = [5, 8, 10, 20], [1000, 2000, 4000], 4, [1000, 3000, 10000, 30000, 100000]
    started = time.perf_counter()
    part_rows = run_partitioning(["log", "nobench"], ms, windows, count)
    print_partitioning(part_rows)
    join_rows = run_joins(args.join_datasets.split(","), sizes, args.budget)
    print_joins(join_rows, args.budget)
    RESULTS.mkdir(parents=True, exist_ok=True)
    report = {
        "config": {"ms": ms, "windows": windows, "windows_per_stream": count, "sizes": sizes,
                   "budget_s": args.budget, "theta": 0.2, "delta": 3},
        "partitioning": part_rows,
        "local_join": join_rows,
        "total_seconds": time.perf_counter() - started,
    }
    (RESULTS / "schemafree_core.json").write_text(json.dumps(report, indent=2))
    plot(part_rows, join_rows, windows[len(windows) // 2], RESULTS / "schemafree_core.png")
    print(f"\nwrote {RESULTS / 'schemafree_core.json'} and .png in {report['total_seconds']:.0f} s")


if __name__ == "__main__":
    main()
