"""Why the five-minute FEBRL dedup stream is slower than a stream of package names: the work per
record, by data, by the age of the stream and by the length of a micro-batch, in one process.

    .venv/bin/python bench/latency_dedup.py [--seconds 120] [--rate 1000] [--batches 1,2,5,10,20]

The Spark operator of the dedup benchmark (``similarity_join(..., metric="levenshtein",
threshold=2, within="30 seconds", parallelism=2)``, PassJoin) runs its core, the workers'
``add``, on each micro-batch; this drives the same core (:class:`driftjoin.metric.engine.MetricEngine`
with :class:`~driftjoin.metric.passjoin.PassJoinStrategy`, 2 workers, an interval join of 30 s)
over the same records cut into micro-batches of ``--batches`` seconds of input, and measures CPU
seconds (``time.process_time``: what the machine's load moves least), candidates, comparisons and
pairs per record, over time. Two streams of ``--rate`` records/s per side:

* ``febrl``: bench/latency.py's dedup stream (random FEBRL given name + surname pairs on both
  sides, FEBRL's known duplicates one second apart);
* ``packages``: names of Python packages (the package list in ../.library/env/packages/pypi.tsv,
  drawn at random, one name per record; read only if it is there).

A record of a micro-batch of ``b`` seconds is compared with the window (``within`` = 30 s of each
side) and with the other records of its batch; if a batch's cost per record grows with ``b``, a
slow batch makes the next one bigger and dearer: the stream snowballs. Prints one table per
stream and writes ``bench/results/latency_dedup.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

BENCH = Path(__file__).resolve().parent
PYPI = Path("/work/.library/env/packages/pypi.tsv")


def febrl(rate: int, seconds: float, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Names, sides and times (s) of bench/latency.py's dedup stream, in arrival order."""
    sys.path.insert(0, str(BENCH))
    from latency import febrl_lines

    tick = 0.5
    lines = febrl_lines(rate, seconds, tick, seed)
    rows = [r for k in range(int(seconds / tick)) for r in lines(k, k * tick)]
    return [r["name"] for r in rows], np.array([r["side"] for r in rows], np.int8), np.array([r["ts"] for r in rows])


def packages(rate: int, seconds: float, seed: int = 0) -> tuple[list[str], np.ndarray, np.ndarray]:
    names = [line.split("\t", 1)[0] for line in PYPI.read_text(errors="replace").splitlines()[1:] if line]
    rng = np.random.default_rng(seed)
    n = int(rate * seconds)
    out, side, ts = [], [], []
    for s in (0, 1):
        out += [names[i] for i in rng.integers(len(names), size=n)]
        side += [s] * n
        ts.append(np.arange(n) / rate)
    order = np.argsort(np.concatenate(ts), kind="stable")
    return [out[i] for i in order], np.array(side, np.int8)[order], np.concatenate(ts)[order]


def run(names: list[str], side: np.ndarray, ts: np.ndarray, batch_s: float) -> list[dict]:
    from driftjoin.metric.engine import MetricEngine
    from driftjoin.metric.passjoin import PassJoinStrategy
    from driftjoin.metric.records import MetricRecords
    from driftjoin.metric.spaces import LevenshteinSpace
    from driftjoin.windows import TICKS_PER_SECOND, Windowing

    space = LevenshteinSpace()
    eng = MetricEngine(PassJoinStrategy(2, 2, self_join=False, windows=Windowing.interval(30 * TICKS_PER_SECOND)))
    ticks = (ts * TICKS_PER_SECOND).astype(np.int64)
    out = []
    edges = np.searchsorted(ts, np.arange(0, ts.max() + batch_s, batch_s))
    for lo, hi in zip(edges, edges[1:]):
        if hi <= lo:
            continue
        recs = MetricRecords.of(np.arange(lo, hi), space.prepare(names[lo:hi]), ticks[lo:hi], side[lo:hi])
        for w in eng.workers.values():
            w.stats.candidates = w.stats.comparisons = 0
        cpu = time.process_time()
        pairs = eng.process(recs)
        cpu = time.process_time() - cpu
        cand = sum(w.stats.candidates for w in eng.workers.values())
        cmp_ = sum(w.stats.comparisons for w in eng.workers.values())
        out.append({"t": float(ts[lo]), "records": int(hi - lo), "cpu_s": cpu, "pairs": len(pairs), "candidates": cand,
                    "comparisons": cmp_})
    return out


def summarise(batches: list[dict], t_from: float, t_to: float) -> dict:
    sel = [b for b in batches if t_from <= b["t"] < t_to]
    n = sum(b["records"] for b in sel) or 1
    return {"records": n, "cpu_ms_per_record": 1000 * sum(b["cpu_s"] for b in sel) / n,
            "pairs_per_record": sum(b["pairs"] for b in sel) / n,
            "candidates_per_record": sum(b["candidates"] for b in sel) / n,
            "comparisons_per_record": sum(b["comparisons"] for b in sel) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=120)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--batches", default="1,2,5,10,20")
    args = ap.parse_args()
    batch_lengths = [float(b) for b in args.batches.split(",")]
    streams = {"febrl": febrl(args.rate, args.seconds)}
    if PYPI.exists():
        streams["packages"] = packages(args.rate, args.seconds)
    results = {}
    print(f"PassJoin core, edit distance 2, within 30 s, 2 workers, 2 x {args.rate:,}/s, {args.seconds:g} s "
          f"(load average {os.getloadavg()[0]:.1f}); per record: CPU ms / pairs / candidates / comparisons")
    for name, (names, side, ts) in streams.items():
        results[name] = {}
        print(f"\n{name}: mean name length {np.mean([len(x) for x in names]):.1f}")
        print(f"{'batch (s)':>10}{'first 30 s':>34}{'after 30 s':>34}{'CPU s per s of input':>22}")
        for b in batch_lengths:
            batches = run(names, side, ts, b)
            early, late = summarise(batches, 0, 30), summarise(batches, 30, 1e9)
            per_s = late["cpu_ms_per_record"] * 2 * args.rate / 1000
            results[name][b] = {"early": early, "steady": late, "cpu_s_per_s": per_s, "batches": batches}

            def cell(x: dict) -> str:
                return (f"{x['cpu_ms_per_record']:.3f} / {x['pairs_per_record']:.2f} / {x['candidates_per_record']:.0f}"
                        f" / {x['comparisons_per_record']:.1f}")

            print(f"{b:>10g}{cell(early):>34}{cell(late):>34}{per_s:>22.2f}", flush=True)
    out = BENCH / "results" / "latency_dedup.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
