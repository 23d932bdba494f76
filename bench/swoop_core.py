"""Benchmark of the SWOOP core (driftjoin.swoop) against Base: set rate, latency, stock size.

Algorithms: ``swoop`` (the compiled engine, numba kernels, with its default filtered scan of the
inverted lists), ``swoop-paper`` (the same engine with ``scan="paper"``: Algorithm 4 as
written), ``swoop-py`` (the pure-Python engine, the reference), ``base`` (the paper's Base: all
overlapping pairs in a sorted stock) and ``brute`` (:class:`Brute`: every insert compares the new
set with every valid window set, vectorised with numpy, and keeps the minimal stock; its
warm-up only fills the window, with the stock copied from a SWOOP join at the same point, since
at 1e6 sets it compares a few dozen sets a second; after the measured inserts its stock must
equal SWOOP's, which the run asserts). The kernels are compiled, or loaded from numba's on-disk
cache, before anything is timed; the time this takes is printed and stored as ``jit_warmup_s``.

For every workload, average window size |W| and k, the join is first filled to a steady state
(``WARMUP x |W|`` sets), then ``--measure`` further sets are timed one insert at a time:

* set rate: measured sets / their total processing time (section 7.1; token mapping included,
  unlike the paper's), by the wall clock (sum of the per-insert times) and by the process's
  CPU time over the measured loop (the machine is shared, and CPU time leaves out the time
  spent waiting for a core; it includes the per-insert clock reads, < 1%);
* latency: per-insert processing time by the wall clock, p50 / p99 / max (no queueing: the
  stream is replayed as fast as the join takes it);
* stock size: the maximum number of stock pairs over the whole run (Figure 13);
* SWOOP's pre-candidates and candidates per set (Figure 14's measures), list entries read and
  window sets whose tokens were compared per set;
* retention: the rate at each window over the rate at the smallest window measured, per
  algorithm (issue 39's goal: >= 0.6 from 1e4 to 1e6; the paper's C++ keeps 0.77, 4.7e4 to 3.6e4
  sets/s), and the filtered scan's rate over the paper's scan's in the same run.

A configuration is skipped ("did not keep up") once the rate of a smaller window predicts that
its warm-up would exceed ``--budget`` seconds; Base additionally stops when its stock (all
overlapping pairs in the window) would exceed ``--base-max-stock`` pairs.

Workloads (driftjoin.swoop.generator): ``zipf`` -- independent Zipf(s=1) sets over 10^4 tokens,
5 to 15 tokens each, whose best pairs are only moderately similar (top-10 Jaccard ~0.6);
``neardup`` -- the same plus 20 % near-duplicates (a recent set with one token replaced), the
regime of tweets or reposts in which the skyband lower bound prunes well; ``zipf-large`` --
Zipf(s=1) sets of 8 to 20 tokens over 2 * 10^4 tokens (issue 39's third stream).

Writes bench/results/swoop_core.json (merged with earlier runs: a run replaces the rows it
measures, so a slow corner such as ``--windows 100000 --ks 10 --algorithms swoop`` can be run
on its own) and bench/results/swoop_core.png. Run ``.venv/bin/python bench/swoop_core.py
[--quick]``; issue 39's comparison (docs/benchmarks.md)::

    flock /tmp/bench.lock nice -n 10 .venv/bin/python bench/swoop_core.py --ks 10 \
        --windows 10000 100000 1000000 --algorithms swoop swoop-paper brute \
        --workloads zipf neardup zipf-large --measure 5000 --budget 300

The machine's speed varies with other load, so every row records the load average and a
pure-Python calibration loop; p99/max latencies include OS scheduling delays.
"""

from __future__ import annotations

import argparse
from bisect import bisect_left
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

from driftjoin.swoop import BaseTopK, Swoop
from driftjoin.swoop.generator import set_stream

ALGORITHMS = ("swoop", "swoop-paper", "swoop-py", "base", "brute")
SWOOPS = ("swoop", "swoop-paper", "swoop-py")

RESULTS = Path(__file__).resolve().parent / "results"
RATE = 1_000.0  # sets per time unit; the window duration is |W| / RATE
WARMUP = 1.2
WORKLOADS = {
    "zipf": dict(vocabulary=10_000, s=1.0, size=(5, 15)),
    "neardup": dict(vocabulary=10_000, s=1.0, size=(5, 15), near_duplicates=0.2),
    "zipf-large": dict(vocabulary=20_000, s=1.0, size=(8, 20)),
}
PAPER = {10_000: 4.7e4, 1_000_000: 3.6e4}  # the paper's C++ SWOOP, one core, k = 10 (issue 39)


def calibrate(n: int = 5_000_000) -> float:
    """CPU seconds of a 5M-iteration pure-Python loop (about 0.25 s on an idle modern core)."""
    start = time.process_time()
    x = 0
    for i in range(n):
        x += i
    return (time.process_time() - start) * 5_000_000 / n


class Brute:
    """The brute force: each insert computes the Jaccard similarity of the new set with every valid
    window set (a mark per token, one gather and one segmented sum over the window's tokens with
    numpy), then keeps the minimal stock (the pairs with fewer than ``k`` dominators, as Base and
    SWOOP): the pairs below the stock's lower bound at their end time are dropped in bulk, the
    rest merged with the stock, whose skyband is recomputed. Pairs are ``(-sim, -end, i, j)`` as
    in SWOOP's stock (``i``, ``j``: arrival numbers). Tokens are the generator's integers."""

    def __init__(self, k: int, window: float, vocabulary: int) -> None:
        self.k, self.window = k, window
        self.marks = np.zeros(vocabulary, np.int32)
        self.flat = np.zeros(1 << 16, np.int32)  # window sets' tokens, set h's from starts[h]
        self.starts = np.zeros(1 << 12, np.int64)  # sets h .. n - 1 are valid; starts[n]: tail
        self.sizes = np.zeros(1 << 12, np.int64)
        self.ends = np.zeros(1 << 12, np.float64)
        self.seqs = np.zeros(1 << 12, np.int64)
        self.h = self.n = 0
        self.stock: list[tuple[float, float, int, int]] = []
        self.seq = 0

    def fill(self, tokens: list[int], ts: float) -> np.ndarray:
        """Add a set to the window (without comparing it: the warm-up)."""
        r = np.unique(np.asarray(tokens, np.int32))
        if self.n + 1 >= len(self.starts) or self.starts[self.n] + len(r) > len(self.flat):
            self._compact(len(r))
        n, tail = self.n, self.starts[self.n]
        self.flat[tail : tail + len(r)] = r
        self.sizes[n], self.ends[n], self.seqs[n] = len(r), ts + self.window, self.seq
        self.starts[n + 1] = tail + len(r)
        self.n += 1
        self.seq += 1
        return r

    def _compact(self, more: int) -> None:
        """Move the valid sets to the front, growing the arrays when they are over half full."""
        h, n = self.h, self.n
        lo, hi = self.starts[h], self.starts[n]
        rows = max(len(self.starts), 2 * (n - h + 2))
        toks = max(len(self.flat), 2 * (hi - lo + more))
        flat = np.zeros(toks, np.int32)
        flat[: hi - lo] = self.flat[lo:hi]
        self.flat = flat
        for name in ("starts", "sizes", "ends", "seqs"):
            old = getattr(self, name)
            new = np.zeros(rows, old.dtype)
            new[: n - h + (name == "starts")] = old[h : n + (name == "starts")]
            setattr(self, name, new)
        self.starts[: n - h + 1] -= lo
        self.h, self.n = 0, n - h

    def expire(self, now: float) -> None:
        """Drop the sets and pairs whose end is ``now`` or earlier."""
        self.h += int(np.searchsorted(self.ends[self.h : self.n], now, side="right"))
        self.stock = [key for key in self.stock if -key[1] > now]

    def insert(self, tokens: list[int], ts: float) -> None:
        self.expire(ts)
        h, n = self.h, self.n
        r = np.unique(np.asarray(tokens, np.int32))
        if n > h:
            lo = self.starts[h]
            self.marks[r] = 1
            o = np.add.reduceat(self.marks[self.flat[lo : self.starts[n]]], self.starts[h:n] - lo)
            self.marks[r] = 0
            hit = np.flatnonzero(o)
            o = o[hit].astype(np.float64)
            sim = o / (len(r) + self.sizes[h:n][hit] - o)  # Jaccard, SWOOP's float operations
            end = self.ends[h:n][hit]
            keep = sim >= self._lb(end)
            fresh = [(-s, -e, self.seq, int(j)) for s, e, j in
                     zip(sim[keep].tolist(), end[keep].tolist(), self.seqs[h:n][hit][keep].tolist())]
            if fresh:
                self.stock = self._skyband(self.stock + fresh)
        self.fill(r, ts)

    def _lb(self, end: np.ndarray) -> np.ndarray:
        """The k-th best stock similarity among the pairs ending at or after each ``end`` (a
        staircase over the stock's ends; 0 where fewer than k pairs)."""
        by_end = sorted(((-key[1], -key[0]) for key in self.stock), reverse=True)
        best: list[float] = []  # the k best similarities of the pairs ending at e or later
        step_end, step_lb = [], []
        for e, sim in by_end:
            best.append(sim)
            best.sort(reverse=True)
            del best[self.k :]
            step_end.append(e)
            step_lb.append(best[-1] if len(best) == self.k else 0.0)
        if not step_end:
            return np.zeros(len(end))
        # the stock pair of the smallest end >= end: step_end descends, so search its reverse
        ends, lbs = np.array(step_end[::-1]), np.array(step_lb[::-1])
        at = np.searchsorted(ends, end, side="left")
        return np.where(at < len(ends), lbs[np.minimum(at, len(ends) - 1)], 0.0)

    def _skyband(self, keys: list) -> list:
        out, ends = [], []  # ends of the pairs before this one in stock order, sorted
        for key in sorted(keys):
            end = -key[1]
            at = bisect_left(ends, end)
            if len(ends) - at < self.k:  # fewer than k earlier pairs end no earlier
                out.append(key)
            ends.insert(at, end)
        return out


def make_join(algorithm: str, k: int, window: float) -> Swoop | BaseTopK:
    if algorithm == "base":
        return BaseTopK(k, "jaccard", window)
    if algorithm == "swoop-py":
        return Swoop(k, "jaccard", window, engine="python")
    return Swoop(k, "jaccard", window, engine="compiled",
                 scan="paper" if algorithm == "swoop-paper" else "filtered")


def run_brute(workload: str, window: int, k: int, measure: int, stream: list, stocks: dict) -> dict:
    """Fill the brute force's window, take the stock of the SWOOP join of the same run at the
    same point (``stocks``, from :func:`run`), time ``measure`` inserts, then check the stock
    against that join's after as many inserts."""
    warm = int(WARMUP * window)
    brute = Brute(k, window / RATE, WORKLOADS[workload]["vocabulary"])
    started = time.perf_counter()
    for set_id, tokens, ts in stream[:warm]:
        brute.fill(tokens, ts)
        if brute.n - brute.h > 2 * window:
            brute.expire(ts)
    brute.expire(stream[warm - 1][2])
    brute.stock = stocks["warm"]
    warmup_s = time.perf_counter() - started
    wall = np.empty(measure)
    cpu_started = time.process_time()
    for n, (set_id, tokens, ts) in enumerate(stream[warm : warm + measure]):
        w0 = time.perf_counter()
        brute.insert(tokens, ts)
        wall[n] = time.perf_counter() - w0
    cpu_s = time.process_time() - cpu_started
    brute.expire(stream[warm + measure - 1][2])
    assert brute.stock == stocks["measured"], "the brute force and SWOOP disagree"
    return {
        "algorithm": "brute", "workload": workload, "window": window, "k": k,
        "avg_window_size": float(brute.n - brute.h),
        "sets_per_s": measure / float(wall.sum()), "sets_per_cpu_s": measure / cpu_s,
        "latency_p50_ms": float(np.percentile(wall, 50)) * 1e3,
        "latency_p99_ms": float(np.percentile(wall, 99)) * 1e3,
        "latency_max_ms": float(wall.max()) * 1e3,
        "max_stock": len(brute.stock), "warmup_s": warmup_s, "measured_sets": measure,
        "load_average": os.getloadavg()[0], "calibration_loop_s": calibrate(1_000_000),
    }


def run(algorithm: str, workload: str, window: int, k: int, measure: int, stream: list,
        stocks: dict, snapshot: int) -> dict:
    """Fill one join to steady state, then time ``measure`` inserts one by one. The compiled
    SWOOP join leaves its stock after the warm-up and after ``snapshot`` measured inserts in
    ``stocks`` (the brute force's start and check)."""
    warm = int(WARMUP * window)
    join = make_join(algorithm, k, window / RATE)
    max_stock = 0
    started = time.perf_counter()
    for set_id, tokens, ts in stream[:warm]:
        join.insert(set_id, tokens, ts)
        max_stock = max(max_stock, len(join.stock))
    warmup_s = time.perf_counter() - started
    if algorithm == "swoop":
        stocks["warm"] = list(join.stock)
    generator = getattr(join, "generator", None)
    pre0, cand0 = (generator.pre_candidates, generator.candidates) if generator else (0, 0)
    scan0, verify0 = (getattr(generator, "scanned", 0), getattr(generator, "verified", 0))
    wall = np.empty(measure)
    wall_clock = time.perf_counter  # ~0.2 us a read; a CPU clock read costs ~2 us here
    cpu_started = time.process_time()
    for n, (set_id, tokens, ts) in enumerate(stream[warm : warm + measure]):
        w0 = wall_clock()
        join.insert(set_id, tokens, ts)
        wall[n] = wall_clock() - w0
        max_stock = max(max_stock, len(join.stock))
        if n == snapshot - 1 and algorithm == "swoop":
            stocks["measured"] = list(join.stock)
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
    if hasattr(generator, "scanned"):
        out["scanned_per_set"] = (generator.scanned - scan0) / measure
        out["verified_per_set"] = (generator.verified - verify0) / measure
    return out


def sweep(args: argparse.Namespace) -> list[dict]:
    """Per workload and window one stream, the algorithms side by side on it."""
    rows: list[dict] = []
    algorithms = list(args.algorithms)
    if "brute" in algorithms:  # it starts from the compiled SWOOP join's stock
        algorithms = ["swoop"] + [a for a in algorithms if a != "swoop"]
    measures = {"swoop": args.measure, "swoop-paper": args.measure, "swoop-py": args.py_measure,
                "base": args.base_measure, "brute": args.brute_measure}
    for workload in args.workloads:
        rate = {(a, k): math.inf for a in algorithms for k in args.ks}
        for window in args.windows:
            warm = int(WARMUP * window)
            longest = max(measures[a] for a in algorithms)
            stream = list(set_stream(warm + longest, rate=RATE, seed=args.seed, **WORKLOADS[workload]))
            for k in args.ks:
                stocks: dict = {}
                for algorithm in algorithms:
                    fill = rate["swoop" if algorithm == "brute" else algorithm, k]
                    if WARMUP * window / fill > args.budget:
                        print(f"  skip {algorithm:11s} {workload:10s} |W|={window:>7} k={k:>4}: "
                              f"would need ~{WARMUP * window / fill:.0f}s to fill (did not keep up)")
                        continue
                    if algorithm == "base" and window * window / 2 > args.base_max_stock:
                        print(f"  skip base        {workload:10s} |W|={window:>7} k={k:>4}: "
                              f"stock of ~{window * window // 2:.0e} pairs (did not keep up)")
                        continue
                    if algorithm == "brute":
                        if "warm" not in stocks:
                            continue
                        row = run_brute(workload, window, k, measures["brute"], stream, stocks)
                    else:
                        row = run(algorithm, workload, window, k, measures[algorithm], stream,
                                  stocks, measures["brute"])
                        rate[algorithm, k] = row["sets_per_s"]
                    rows.append(row)
                    print(
                        f"  {algorithm:11s} {workload:10s} |W|={window:>7} k={k:>4}: "
                        f"{row['sets_per_s']:9.0f} sets/s ({row['sets_per_cpu_s']:.0f} per CPU s)  "
                        f"p50 {row['latency_p50_ms']:7.3f} ms  "
                        f"p99 {row['latency_p99_ms']:7.3f} ms  max {row['latency_max_ms']:7.2f} ms  "
                        f"stock {row['max_stock']:>9}  load {row['load_average']:.1f} "
                        f"calib {row['calibration_loop_s']:.2f} s"
                        + (f"  scanned/set {row['scanned_per_set']:.0f} read/set "
                           f"{row['pre_candidates_per_set']:.0f}" if "scanned_per_set" in row else ""),
                        flush=True,
                    )
    return rows


def print_tables(rows: list[dict], windows: list[int], ks: list[int]) -> None:
    def cell(row: dict | None, key: str, fmt: str) -> str:
        return format(row[key], fmt) if row and key in row else "-"

    def line(label: str, cells: list[str], width: int = 11) -> None:
        print(f"{label:>17} " + " ".join(f"{c:>{width}}" for c in cells))

    index = {(r["algorithm"], r["workload"], r["window"], r["k"]): r for r in rows}
    for workload in sorted({r["workload"] for r in rows}):
        for key, what in (("sets_per_s", "wall clock"), ("sets_per_cpu_s", "CPU time")):
            print(f"\n== workload {workload}: set rate (sets/s, {what}) ==")
            line("algorithm k", [f"|W|={w}" for w in windows])
            for algorithm in ALGORITHMS:
                for k in ks:
                    cells = [cell(index.get((algorithm, workload, w, k)), key, ".0f") for w in windows]
                    if any(c != "-" for c in cells):
                        line(f"{algorithm} {k}", cells)
            if key == "sets_per_s" and workload != "zipf-large":
                line("paper's C++ 10", [f"{PAPER[w]:.0f}" if w in PAPER else "-" for w in windows])
        print(f"\n== workload {workload}: retention (CPU rate / the rate at the smallest window) ==")
        for algorithm in SWOOPS + ("brute",):
            for k in ks:
                got = [index.get((algorithm, workload, w, k)) for w in windows]
                first = next((r for r in got if r), None)
                if first:
                    line(f"{algorithm} {k}", [f"{r['sets_per_cpu_s'] / first['sets_per_cpu_s']:.2f}"
                                              if r else "-" for r in got])
        print(f"\n== workload {workload}: ratios of CPU rates in the same run ==")
        for a, b in (("swoop", "swoop-paper"), ("swoop", "brute"), ("swoop-paper", "brute")):
            for k in ks:
                pairs = [(index.get((a, workload, w, k)), index.get((b, workload, w, k))) for w in windows]
                if any(x and y for x, y in pairs):
                    line(f"{a}/{b} {k}"[-17:], [f"{x['sets_per_cpu_s'] / y['sets_per_cpu_s']:.2f}"
                                                if x and y else "-" for x, y in pairs])
        print(f"\n== workload {workload}: latency per insert, p50/p99/max ms (wall clock) ==")
        for algorithm in ("swoop", "swoop-paper", "brute"):
            for k in ks:
                got = [index.get((algorithm, workload, w, k)) for w in windows]
                if any(got):
                    line(f"{algorithm} {k}", [
                        f"{r['latency_p50_ms']:.2f}/{r['latency_p99_ms']:.2f}/{r['latency_max_ms']:.1f}"
                        if r else "-" for r in got], 18)
        print(f"\n== workload {workload}: maximum stock size (Figure 13) ==")
        for algorithm in ALGORITHMS:
            for k in ks:
                cells = [cell(index.get((algorithm, workload, w, k)), "max_stock", "d") for w in windows]
                if any(c != "-" for c in cells):
                    line(f"{algorithm} {k}", cells)
        print(f"\n== workload {workload}: per set: list entries read / pre-candidates / candidates ==")
        for algorithm in ("swoop", "swoop-paper"):
            for k in ks:
                got = [index.get((algorithm, workload, w, k)) for w in windows]
                if any(got):
                    line(f"{algorithm} {k}", [
                        f"{cell(r, 'scanned_per_set', '.0f')}/{r['pre_candidates_per_set']:.0f}"
                        f"/{r['candidates_per_set']:.1f}" if r else "-" for r in got], 18)


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = sorted({r["workload"] for r in rows})
    fig, axes = plt.subplots(len(workloads), 2, figsize=(11, 4.2 * len(workloads)), squeeze=False)
    for row_axes, workload in zip(axes, workloads):
        rate_ax, stock_ax = row_axes
        styles = (("swoop", "-o"), ("swoop-paper", "-v"), ("swoop-py", "-.^"), ("base", "--s"),
                  ("brute", "--x"))
        for algorithm, style in styles:
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
        if workload != "zipf-large":
            rate_ax.plot(list(PAPER), list(PAPER.values()), "k*", ms=9, label="paper's C++ (k=10)")
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
    parser.add_argument("--brute-measure", type=int, default=200, help="timed brute inserts per run")
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
