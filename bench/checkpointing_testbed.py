"""CheckMate on the testbed: COOR, UNC and CIC on the thesis's queries (chapter 3, section 3.7).

Sections (``--sections``; ``normal,failure,overhead,skew,cyclic`` by default):

- ``normal``: per query, protocol (and the checkpoint-free run) and number of workers, the
  maximum sustainable throughput probed to saturation (``--probes``; :mod:`driftjoin.
  checkpointing.mst`), then a run at 80% of it: p50 and p99 latency, message overhead, the
  average checkpoint time, checkpoints taken and invalid ones (Figures 3.7 to 3.10 before the
  failure, Table 3.2 at these workers).
- ``failure``: each protocol at 80% of its own MST (``--failure-load``) with one failure
  (``--failure-at``, 30% of the run: the thesis's 18th second of 60): p50 and p99 latency, restart
  and recovery time, messages and records replayed, checkpoints taken and the invalid share
  (Figures 3.9 to 3.11, Table 3.3).
- ``overhead``: message overhead at ``--overhead-workers`` (Table 3.2's 10 and 50), each
  protocol (not the checkpoint-free run: 1 by construction) at ``--overhead-load`` (80%) of
  the ``normal`` section's per-worker MST times the workers (scaled linearly, not probed at
  these counts: says so in the table). A lower load is faster but not the same: the markers
  and checkpoint metadata per interval weigh more against fewer records (Q8 at 50 workers:
  COOR 1.20x at 2% of the MST, 1.00x at 80%).
- ``skew``: Q3, Q8, Q12 under the thesis's three protocols (``--skew-protocols``) at 50% and
  80% of each protocol's non-skewed MST with ``--hot`` hot items: p50 latency and average
  checkpoint time; and at 50% with a failure: restart time (Figures 3.12, 3.13).
- ``cyclic``: the reachability query under UNC and CIC at 75% of MST with a failure at 80% of
  the run: checkpoint time, restart time, invalid checkpoints (Table 3.4).
- ``intervals``: one query under each protocol at several checkpoint intervals.

Runs of the thesis's length: its Table 3.3 counts 8 checkpoints per instance under COOR in a
60-second run, so a run here is 8 checkpoint intervals (``--duration 0.4 --interval 0.05``,
simulated seconds). UNC and CIC's timers follow each worker's clock, its phase drawn from the
seed over ``--clock-skew`` of the interval (default the whole interval: workers that start
their clocks when they start); every table prints the setting it ran with.

Every run with a failure is checked record for record: the same run without the failure
(same input, rate and seed) must give the same output (the queries' canonical form, a multiset
of records; the ``exact`` column); a mismatch is printed and makes the bench exit with 1.

Costs: measured on this machine at the start of the run (``python -m
driftjoin.checkpointing.calibrate``, about 10 s), or taken from the calibration file
``--costs FILE`` names (``bench/inputs/checkpointing_costs.json`` is the one the docs used);
the bench prints which, with the values, and stores them in the JSON.

Prints the tables and writes ``--out`` (a directory, default ``bench/results``):
``checkpointing_testbed.json`` and the PNG figures in the thesis's shapes, again after every
section, so a run that stops keeps what finished. Runs are simulated (time in simulated
seconds; a worker = one CPU) and deterministic; each takes wall time in proportion to the
records it processes, so they run in parallel (``--jobs``). Example (the docs' tables):
``nice -n 10 .venv/bin/python bench/checkpointing_testbed.py --costs bench/inputs/checkpointing_costs.json``,
then ``--markdown`` (same ``--out``) prints them from the JSON.

MSTs measured once serve the other sections: ``--save-msts FILE`` writes the normal section's
rows (small: no timelines) with the settings they depend on, ``--mst-from FILE[,FILE...]``
takes them instead of probing again and refuses files measured under other settings (run
length, interval, timers, seed, nodes, costs). ``bench/inputs/checkpointing_msts.json`` holds the
MSTs the docs' tables at 80% rest on, so those tables rerun from the repository alone.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from driftjoin.checkpointing import CostModel, RunConfig, run
from driftjoin.checkpointing.calibrate import describe, measured_now
from driftjoin.checkpointing.mst import estimate, search

#: the protocols the sections run (``--protocols``): the thesis's three and CIC with delta piggybacks
PROTOCOLS = ("coor", "unc", "cic", "cic-delta")
#: records/s per worker for the first (estimate) run of the MST search: a moderate load
BASE_RATE = {"q1": 30000.0, "q3": 30000.0, "q8": 20000.0, "q12": 20000.0, "reach": 5000.0, "s3j": 150.0}
COLORS = {"coor": "tab:blue", "unc": "tab:orange", "cic": "tab:green", "cic-delta": "tab:olive", "cic-packed": "tab:cyan",
          "none": "gray"}
THESIS_OVERHEAD = {"q1": (2.10, 2.53), "q3": (1.82, 2.58), "q8": (1.74, 2.49), "q12": (1.79, 2.58)}


def _cfg(args: argparse.Namespace, **kw: Any) -> RunConfig:
    base = dict(duration=args.duration, interval=args.interval, costs=args.costs, seed=args.seed, clocks=args.clocks)
    base.update(kw)
    base["clock_skew"] = None if args.clock_skew is None else args.clock_skew * base["interval"]
    if base.get("query") == "reach" and args.nodes:
        base["params"] = {**base.get("params", {}), "nodes": args.nodes}
    return RunConfig(**base)


def task_normal(job: dict) -> dict:
    """MST probed to saturation, then the metrics of a run at 80% of it; with ``probes == 0`` the
    MST is the utilisation estimate (extrapolated) and the metrics those of the estimate's run."""
    cfg, probes = job["cfg"], job["probes"]
    if probes == 0:
        est, res = estimate(cfg, BASE_RATE[cfg.query] * cfg.workers)
        out = res.summary()
        out.update(mst=est, estimate=est, probes=[], upper=None, saturated=False, load=res.rate / est)
        return out
    m = search(cfg, BASE_RATE[cfg.query] * cfg.workers, probes=probes, tolerance=job.get("tolerance", 0.03))
    at = run(replace(cfg, rate=0.8 * m.mst))
    out = at.summary()
    out.update(mst=m.mst, estimate=m.estimate, probes=m.probes, upper=m.upper if m.saturated else None,
               saturated=m.saturated, load=0.8)
    return out


def clock_note(args: argparse.Namespace, interval: float | None = None) -> str:
    """The UNC/CIC timer setting a table ran with (printed above it)."""
    iv = interval or args.interval
    skew = iv if args.clock_skew is None else args.clock_skew * iv
    return (f"UNC/CIC timers on each {'worker' if args.clocks == 'worker' else 'instance'}'s clock, phases drawn (seed "
            f"{args.seed}) over {skew * 1e3:g} ms of the {iv * 1e3:g} ms interval"
            + (" (whole interval)" if abs(skew - iv) < 1e-12 else " (in step)" if skew == 0 else ""))


def task_run(job: dict) -> dict:
    """One run; with failures also the same run without them, and whether their outputs agree
    record for record (``exact``)."""
    cfg = job["cfg"]
    res = run(cfg)
    out = res.summary()
    out.update(job.get("tag", {}))
    if cfg.failures:
        reference = run(replace(cfg, failures=(), trace=False))
        out["exact"] = res.result == reference.result
        out["reference_outputs"] = reference.outputs
    if job.get("timeline"):
        out["timeline"] = res.timeline
    else:
        out.pop("timeline", None)
    return out


def exactness(rows: list[dict]) -> list[dict]:
    """The runs whose output differs from their failure-free run's (printed)."""
    bad = [r for r in rows if r.get("exact") is False]
    checked = sum(1 for r in rows if "exact" in r)
    print(f"record for record: {checked - len(bad)} of {checked} recovered runs equal their failure-free run")
    for r in bad:
        print(f"  MISMATCH {r['query']} {r['protocol']} {r['workers']} workers, rate {r['rate']:.0f}: {r['outputs']} outputs "
              f"against {r['reference_outputs']}")
    return bad


def _pool(fn: Any, jobs: list[dict], n: int) -> list[dict]:
    if not jobs:
        return []
    started = time.time()
    with mp.get_context("fork").Pool(n) as pool:
        out = []
        for k, res in enumerate(pool.imap(fn, jobs), 1):
            out.append(res)
            print(f"  {k}/{len(jobs)} done ({time.time() - started:.0f} s)", end="\r", flush=True)
    print()
    return out


def _fmt(x: float, nd: int = 1) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{nd}f}"


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


def _mst_of(normal: list[dict], query: str, protocol: str, workers: int) -> float:
    for r in normal:
        if (r["query"], r["protocol"], r["workers"]) == (query, protocol, workers):
            return r["mst"]
    raise KeyError((query, protocol, workers))


def section_normal(args: argparse.Namespace) -> list[dict]:
    jobs = []
    for q in args.queries:
        for p in ("none",) + args.protocols:
            if q == "reach" and p == "coor":
                continue
            for w in getattr(args, "workers_of", {}).get(q, args.workers):
                jobs.append({"cfg": _cfg(args, query=q, protocol=p, workers=w), "probes": args.probes,
                             "tolerance": args.tolerance})
    print(f"normal operation: {len(jobs)} MST searches ({'probed to saturation, ' + str(args.probes) + ' probes at most' if args.probes else 'utilisation estimate, extrapolated'}), "
          f"then a run at 80% of each; {args.duration:g} s runs, a checkpoint every {args.interval:g} s; {clock_note(args)}")
    rows = _pool(task_normal, jobs, args.jobs)
    print(f"\n{'query':<6} {'proto':<9} {'W':>2} {'MST/s':>9} {'sat':>3} {'norm':>5} {'p50 ms':>7} {'p99 ms':>7} {'ckpt ms':>8} "
          f"{'ckpts':>6} {'inv%':>5} {'bytes x':>7} {'proto%':>6}")
    for r in rows:
        none = _mst_of(rows, r["query"], "none", r["workers"])
        r["mst_norm"] = r["mst"] / none if none else float("nan")
        print(f"{r['query']:<6} {r['protocol']:<9} {r['workers']:>2} {r['mst']:>9.0f} {'yes' if r['saturated'] else 'NO':>3} "
              f"{r['mst_norm']:>5.2f} {_fmt(r['p50_ms'], 2):>7} {_fmt(r['p99_ms'], 2):>7} {_fmt(r['avg_checkpoint_ms'], 2):>8} "
              f"{r['checkpoints']:>6} {_fmt(r['invalid_pct']):>5} {r['overhead_ratio']:>7.2f} {100 * r['protocol_share']:>6.1f}")
    unsat = [r for r in rows if args.probes and not r["saturated"]]
    if unsat:
        print(f"WARNING: {len(unsat)} searches did not bracket their MST within {args.probes} probes (sat = NO): raise --probes")
    return rows


def section_failure(args: argparse.Namespace, normal: list[dict]) -> list[dict]:
    jobs = []
    for q in args.queries:
        for p in args.protocols:
            if q == "reach" and p == "coor":
                continue
            for w in args.failure_workers:
                rate = args.failure_load * _mst_of(normal, q, p, w)
                jobs.append({"cfg": _cfg(args, query=q, protocol=p, workers=w, rate=rate,
                                         failures=[args.failure_at * args.duration]), "timeline": True})
    print(f"failure: {len(jobs)} runs at {args.failure_load:.0%} of each protocol's MST, a failure at {args.failure_at:.0%} of "
          f"each {args.duration:g} s run; {clock_note(args)}")
    rows = _pool(task_run, jobs, args.jobs)
    print(f"\n{'query':<6} {'proto':<9} {'W':>3} {'rate/s':>10} {'p50 ms':>7} {'p99 ms':>7} {'restart ms':>10} {'recovery ms':>11} "
          f"{'replayed msgs':>13} {'replayed recs':>13} {'rolled back':>11} {'ckpts':>6} {'invalid%':>8} {'exact':>5}")
    for r in rows:
        f = r["failures"][0]
        print(f"{r['query']:<6} {r['protocol']:<9} {r['workers']:>3} {r['rate']:>10.0f} {_fmt(r['p50_ms'], 2):>7} "
              f"{_fmt(r['p99_ms'], 1):>7} {1e3 * f['restart_s']:>10.2f} {_fmt(1e3 * f['recovery_s']):>11} "
              f"{f['replayed_messages']:>13} {f['replayed_records']:>13} {f['rolled_back']:>11} {r['checkpoints']:>6} "
              f"{r['invalid_pct']:>8.1f} {str(r['exact']):>5}")
    return rows


def section_overhead(args: argparse.Namespace, normal: list[dict]) -> list[dict]:
    """Table 3.2 at ``--overhead-workers``: every protocol at ``--overhead-load`` of the normal
    section's per-worker MST (at its largest worker count) times the workers, failure-free. Not
    the checkpoint-free run: it sends no protocol bytes, so its ratio is 1 by construction (and
    at 50 workers it was a third of the section's time)."""
    jobs = []
    for q in [q for q in args.queries if q in THESIS_OVERHEAD]:
        for p in args.protocols:
            base_w = max(r["workers"] for r in normal if r["query"] == q and r["protocol"] == p)
            per_worker = _mst_of(normal, q, p, base_w) / base_w
            for w in args.overhead_workers:
                jobs.append({"cfg": _cfg(args, query=q, protocol=p, workers=w, rate=args.overhead_load * per_worker * w),
                             "tag": {"mst_from_workers": base_w}})
    print(f"overhead: {len(jobs)} runs at {args.overhead_load:.0%} of the per-worker MST probed at the normal section's workers, times the "
          f"workers (not probed at these counts); {clock_note(args)}")
    rows = _pool(task_run, jobs, args.jobs)
    print(f"\n{'query':<6} {'proto':<9} {'W':>3} {'rate/s':>10} {'bytes x':>7} {'thesis x':>8} {'proto%':>6} {'ckpt ms':>8} "
          f"{'drained':>7}")
    for r in rows:
        thesis = THESIS_OVERHEAD[r["query"]][0 if r["workers"] <= 10 else 1] if r["protocol"].startswith("cic") else 1.0
        print(f"{r['query']:<6} {r['protocol']:<9} {r['workers']:>3} {r['rate']:>10.0f} {r['overhead_ratio']:>7.2f} "
              f"{thesis:>8.2f} {100 * r['protocol_share']:>6.1f} {_fmt(r['avg_checkpoint_ms'], 2):>8} {str(r['drained']):>7}")
    return rows


def section_skew(args: argparse.Namespace, normal: list[dict]) -> list[dict]:
    w = args.skew_workers
    jobs = []
    for q in [q for q in ("q3", "q8", "q12") if q in args.queries]:
        for p in args.skew_protocols:
            for load in (0.5, 0.8):
                for hot in args.hot:
                    rate = load * _mst_of(normal, q, p, w)
                    jobs.append({"cfg": _cfg(args, query=q, protocol=p, workers=w, rate=rate, hot=hot),
                                 "tag": {"load": load}})
            for hot in args.hot:
                rate = 0.5 * _mst_of(normal, q, p, w)
                jobs.append({"cfg": _cfg(args, query=q, protocol=p, workers=w, rate=rate, hot=hot,
                                         failures=[args.failure_at * args.duration]),
                             "tag": {"load": 0.5, "failed": True}})
    print(f"skew: {len(jobs)} runs on {w} workers at 50% and 80% of each protocol's non-skewed MST, hot items "
          f"{', '.join(f'{h:.0%}' for h in args.hot)}; failures at {args.failure_at:.0%} of the run (50%); {clock_note(args)}")
    rows = _pool(task_run, jobs, args.jobs)
    print(f"\n{'query':<6} {'proto':<9} {'load':>4} {'hot':>4} {'p50 ms':>8} {'p99 ms':>8} {'ckpt ms':>8} {'drained':>7} "
          f"{'restart ms':>10} {'recovery ms':>11} {'exact':>5}")
    for r in rows:
        f = r["failures"][0] if r["failures"] else {}
        restart = 1e3 * f["restart_s"] if f else float("nan")
        recovery = 1e3 * f["recovery_s"] if f else float("nan")
        print(f"{r['query']:<6} {r['protocol']:<9} {r['load']:>4} {r['hot']:>4} {_fmt(r['p50_ms'], 2):>8} "
              f"{_fmt(r['p99_ms'], 1):>8} {_fmt(r['avg_checkpoint_ms'], 2):>8} {str(r['drained']):>7} {_fmt(restart, 2):>10} "
              f"{_fmt(recovery):>11} {str(r.get('exact', '')):>5}")
    return rows


def section_cyclic(args: argparse.Namespace, normal: list[dict]) -> list[dict]:
    """Table 3.4: the reachability query under UNC and CIC with a failure at 80% of the run, at
    75% of each protocol's MST, per clock setting (``--cyclic-clocks``), with its own duration
    and interval (``--cyclic-duration``, ``--cyclic-interval``: the thesis ran 60 s)."""
    duration = args.cyclic_duration or args.duration
    interval = args.cyclic_interval or args.interval
    jobs = []
    for clocks in args.cyclic_clocks:
        for p in [p for p in args.protocols if p != "coor"]:
            for w in args.cyclic_workers:
                rate = 0.75 * _mst_of(normal, "reach", p, w) if "reach" in args.queries else BASE_RATE["reach"] * w
                jobs.append({"cfg": _cfg(args, query="reach", protocol=p, workers=w, rate=rate, duration=duration,
                                         interval=interval, failures=[0.8 * duration], clocks=clocks),
                             "tag": {"clocks": clocks}})
    print(f"cyclic: {len(jobs)} runs ({duration:g} s, a checkpoint every {interval:g} s, failure at {0.8 * duration:g} s, 75% of "
          f"each protocol's MST); {clock_note(args, interval)}")
    rows = _pool(task_run, jobs, args.jobs)
    print(f"\n{'clocks':<8} {'proto':<9} {'W':>2} {'rate/s':>9} {'ckpt ms':>8} {'restart ms':>10} {'recovery ms':>11} {'ckpts':>6} "
          f"{'invalid %':>9} {'useless':>7} {'rolled back':>11} {'replayed':>9} {'forced':>6} {'bytes x':>7} {'exact':>5}")
    for r in rows:
        f = r["failures"][0]
        print(f"{r['clocks']:<8} {r['protocol']:<9} {r['workers']:>2} {r['rate']:>9.0f} {_fmt(r['avg_checkpoint_ms'], 2):>8} "
              f"{1e3 * f['restart_s']:>10.2f} {_fmt(1e3 * f['recovery_s']):>11} {r['checkpoints']:>6} {_fmt(r['invalid_pct']):>9} "
              f"{r['invalid'] - r['discarded']:>7} {f['rolled_back']:>11} {f['replayed_messages']:>9} {r['forced']:>6} "
              f"{r['overhead_ratio']:>7.2f} {str(r['exact']):>5}")
    return rows


def section_intervals(args: argparse.Namespace, normal: list[dict]) -> list[dict]:
    w = args.failure_workers[0]
    q = args.interval_query
    jobs = []
    for p in args.protocols:
        rate = 0.8 * _mst_of(normal, q, p, w)
        for iv in args.intervals:
            jobs.append({"cfg": _cfg(args, query=q, protocol=p, workers=w, rate=rate, interval=iv,
                                     failures=[0.5 * args.duration])})
    print(f"intervals: {len(jobs)} runs of {q}; {clock_note(args)} (of each run's interval)")
    rows = _pool(task_run, jobs, args.jobs)
    print(f"\n{'proto':<9} {'interval':>8} {'ckpts':>6} {'ckpt ms':>8} {'p99 ms':>8} {'restart ms':>10} {'recovery ms':>11} "
          f"{'replayed':>8} {'exact':>5}")
    for r in rows:
        f = r["failures"][0]
        print(f"{r['protocol']:<9} {r['interval']:>8} {r['checkpoints']:>6} {_fmt(r['avg_checkpoint_ms'], 2):>8} "
              f"{_fmt(r['p99_ms'], 2):>8} {1e3 * f['restart_s']:>10.1f} {_fmt(1e3 * f['recovery_s']):>11} "
              f"{f['replayed_messages'] + f['replayed_records']:>8} {str(r['exact']):>5}")
    return rows


# --- figures in the thesis's shapes ---------------------------------------------------------------

def figures(out: Path, res: dict) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    colors = COLORS
    protocols = [p for p in COLORS if p != "none" and any(r["protocol"] == p for x in res.values() if isinstance(x, list)
                                                            for r in x if isinstance(r, dict))]
    normal = res.get("normal", [])
    queries = sorted({r["query"] for r in normal})
    if normal:
        for key, ylabel, fname, log in (("mst_norm", "MST / checkpoint-free MST", "fig3_7_mst.png", False),
                                        ("avg_checkpoint_ms", "average checkpoint time (ms)", "fig3_8_checkpoint_time.png", True)):
            fig, axes = plt.subplots(1, len(queries), figsize=(3.2 * len(queries), 3), squeeze=False)
            for ax, q in zip(axes[0], queries):
                for p in protocols:
                    pts = sorted((r["workers"], r[key]) for r in normal
                                 if r["query"] == q and r["protocol"] == p and _finite(r[key]))
                    if pts:
                        ax.plot([x for x, _ in pts], [y for _, y in pts], "o-", color=colors[p], label=p.upper())
                ax.set_title(q.upper())
                ax.set_xlabel("workers")
                if log and ax.lines:
                    ax.set_yscale("log")
            axes[0][0].set_ylabel(ylabel)
            axes[0][0].legend()
            fig.tight_layout()
            fig.savefig(out / fname, dpi=110)
            plt.close(fig)
            paths.append(out / fname)
    failure = res.get("failure", [])
    if failure:
        fq = sorted({r["query"] for r in failure})
        wmax = max(r["workers"] for r in failure)
        for pct, fname in ((1, "fig3_9_p50_latency.png"), (2, "fig3_10_p99_latency.png")):
            fig, axes = plt.subplots(1, len(fq), figsize=(3.2 * len(fq), 3), squeeze=False)
            for ax, q in zip(axes[0], fq):
                plotted = False
                for r in failure:
                    if r["query"] == q and r["workers"] == wmax:
                        tl = [t for t in r["timeline"] if t[pct] > 0]
                        plotted |= bool(tl)
                        ax.plot([t[0] for t in tl], [t[pct] for t in tl], color=colors[r["protocol"]],
                                label=r["protocol"].upper(), lw=1)
                        ax.axvline(r["failures"][0]["time"], color="k", ls="--", lw=0.8)
                if plotted:
                    ax.set_yscale("log")
                ax.set_title(f"{q.upper()}, {wmax} workers")
                ax.set_xlabel("time (s)")
            axes[0][0].set_ylabel(("p50" if pct == 1 else "p99") + " latency (ms)")
            axes[0][0].legend()
            fig.tight_layout()
            fig.savefig(out / fname, dpi=110)
            plt.close(fig)
            paths.append(out / fname)
        fig, ax = plt.subplots(figsize=(7, 3))
        labels = sorted({(r["query"], r["workers"]) for r in failure})
        width = 0.8 / max(1, len(protocols))
        for k, p in enumerate(protocols):
            ys = [next((1e3 * r["failures"][0]["restart_s"] for r in failure
                        if (r["query"], r["workers"], r["protocol"]) == (q, w, p)), 0.0) for q, w in labels]
            ax.bar([i + width * (k - (len(protocols) - 1) / 2) for i in range(len(labels))], ys, width, color=colors[p],
                   label=p.upper())
        ax.set_xticks(range(len(labels)), [f"{q.upper()}\n{w}W" for q, w in labels], fontsize=7)
        ax.set_ylabel("restart time (ms)")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / "fig3_11_restart.png", dpi=110)
        plt.close(fig)
        paths.append(out / "fig3_11_restart.png")
    skew = [r for r in res.get("skew", []) if not r.get("failed")]
    if skew:
        sq = sorted({r["query"] for r in skew})
        fig, axes = plt.subplots(2, 2 * len(sq), figsize=(2.6 * 2 * len(sq), 5), squeeze=False)
        for row, load in enumerate((0.5, 0.8)):
            for k, q in enumerate(sq):
                for col, key, label in ((2 * k, "p50_ms", "p50 latency (ms)"), (2 * k + 1, "avg_checkpoint_ms", "checkpoint time (ms)")):
                    ax = axes[row][col]
                    for p in protocols:
                        pts = sorted((r["hot"], r[key]) for r in skew
                                     if (r["query"], r["protocol"], r["load"]) == (q, p, load) and _finite(r[key]))
                        ax.plot([100 * x for x, _ in pts], [y for _, y in pts], "o-", color=colors[p], label=p.upper())
                    if any(len(line.get_xdata()) for line in ax.lines):
                        ax.set_yscale("log")
                    ax.set_title(f"{q.upper()} {int(100 * load)}% MST", fontsize=8)
                    ax.set_xlabel("hot items %", fontsize=8)
                    ax.set_ylabel(label, fontsize=8)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(out / "fig3_12_skew.png", dpi=110)
        plt.close(fig)
        paths.append(out / "fig3_12_skew.png")
    return paths


SECTIONS = ("normal", "failure", "overhead", "skew", "cyclic", "intervals")


# --- the docs' tables -------------------------------------------------------------------------------

def _n(x: Any, nd: int = 0) -> str:
    """A number for a markdown cell: thousands separated, '-' when missing."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:,.{nd}f}"


def _settings_line(st: dict, section: str) -> str:
    skew = st.get("clock_skew")
    interval = st["interval"] if section != "cyclic" else (st.get("cyclic_interval") or st["interval"])
    duration = st["duration"] if section != "cyclic" else (st.get("cyclic_duration") or st["duration"])
    share = 1.0 if skew is None else float(skew)
    timers = ("every worker's timer at a phase drawn over the whole interval (seed "
              f"{st['seed']})" if share == 1.0 else "the timers in step" if share == 0.0
              else f"phases drawn over {share:.0%} of the interval (seed {st['seed']})")
    return (f"{duration:g} s runs ({duration / interval:g} intervals of {interval * 1e3:g} ms), UNC/CIC timers on each "
            f"{st['clocks']}'s clock, {timers}")


def markdown(res: dict) -> None:
    """The tables docs/checkpointing.md shows, from a JSON this bench wrote (``--markdown``)."""
    st = res["settings"]
    normal = res.get("normal", [])
    probed = any(r.get("probes") for r in normal) or not normal and st.get("probes", 8) > 0
    mst = "MST" if probed else "estimated MST"
    if normal:
        how = ("MST probed to saturation, the metrics at 80% of it" if probed else
               "MST **estimated** from one run at a moderate rate (rate / busiest worker's utilisation, `--probes 0`: an "
               "extrapolation, not a sustainable rate), the metrics of that run (its share of the estimate: 'run at')")
        print(f"\n### Normal operation, {_settings_line(st, 'normal')}: {how}\n")
        print("| query | protocol | W | MST /s | probes (bracketed) | MST / checkpoint-free | run at | p50 ms | p99 ms | "
              "checkpoint ms | checkpoints | bytes x |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in normal:
            print(f"| {r['query']} | {r['protocol']} | {r['workers']} | {_n(r['mst'])} | {len(r.get('probes') or [])} "
                  f"({'yes' if r.get('saturated') else 'no'}) | {_n(r.get('mst_norm'), 2)} | {_n(100 * r['load'], 0)}% | "
                  f"{_n(r['p50_ms'], 2)} | {_n(r['p99_ms'], 2)} | {_n(r['avg_checkpoint_ms'], 2)} | {r['checkpoints']} | "
                  f"{_n(r['overhead_ratio'], 2)} |")
    failure = res.get("failure", [])
    if failure:
        print(f"\n### One failure at {st['failure_at']:.0%} of the run, {st['failure_load']:.0%} of each protocol's {mst}, "
              f"{_settings_line(st, 'failure')}\n")
        print("| query | protocol | W | rate /s | p50 ms | p99 ms | restart ms | recovery ms | replayed messages | "
              "replayed records | checkpoints | invalid % | exact |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in failure:
            f = r["failures"][0]
            print(f"| {r['query']} | {r['protocol']} | {r['workers']} | {_n(r['rate'])} | {_n(r['p50_ms'], 2)} | "
                  f"{_n(r['p99_ms'], 1)} | {_n(1e3 * f['restart_s'], 2)} | {_n(1e3 * f['recovery_s'], 0)} | "
                  f"{_n(f['replayed_messages'])} | {_n(f['replayed_records'])} | {r['checkpoints']} | "
                  f"{_n(r['invalid_pct'], 1)} | {r.get('exact')} |")
    over = res.get("overhead", [])
    if over:
        protos = list(dict.fromkeys(r["protocol"] for r in over))
        load = st.get("overhead_load", 0.8)
        print(f"\n### Message overhead (all bytes over data bytes, Table 3.2) at {load:.0%} of the per-worker {mst} at "
              f"{max(r.get('mst_from_workers', 0) for r in over)} workers times the workers, {_settings_line(st, 'overhead')}\n")
        print("| query | W | " + " | ".join(protos) + " | thesis CIC |")
        print("|---|---|" + "---|" * (len(protos) + 1))
        for q, w in dict.fromkeys((r["query"], r["workers"]) for r in over):
            cells = [_n(next((r["overhead_ratio"] for r in over if (r["query"], r["workers"], r["protocol"]) == (q, w, p)),
                             None), 2) for p in protos]
            thesis = THESIS_OVERHEAD.get(q, (None, None))[0 if w <= 10 else 1]
            print(f"| {q} | {w} | " + " | ".join(cells) + f" | {_n(thesis, 2)} |")
    skew = res.get("skew", [])
    if skew:
        hots = sorted({r["hot"] for r in skew})
        print(f"\n### Skew on {st['skew_workers']} workers, {_settings_line(st, 'skew')}: p50 ms / checkpoint ms / p99 ms "
              "per hot-item share\n")
        print("| query | protocol | load | " + " | ".join(f"hot {h:.0%}" for h in hots) + " |")
        print("|---|---|---|" + "---|" * len(hots))
        for q, p, load in dict.fromkeys((r["query"], r["protocol"], r["load"]) for r in skew if not r.get("failed")):
            cells = []
            for h in hots:
                r = next((r for r in skew if (r["query"], r["protocol"], r["load"], r["hot"]) == (q, p, load, h)
                          and not r.get("failed")), None)
                cells.append("" if r is None else f"{_n(r['p50_ms'], 2)} / {_n(r['avg_checkpoint_ms'], 1)} / "
                             f"{_n(r['p99_ms'], 0)}")
            print(f"| {q} | {p} | {load:.0%} | " + " | ".join(cells) + " |")
        failed = [r for r in skew if r.get("failed")]
        if failed:
            print(f"\nWith a failure at {st['failure_at']:.0%} of the run (50% of the MST): restart ms / recovery ms per "
                  "hot-item share\n")
            print("| query | protocol | " + " | ".join(f"hot {h:.0%}" for h in hots) + " |")
            print("|---|---|" + "---|" * len(hots))
            for q, p in dict.fromkeys((r["query"], r["protocol"]) for r in failed):
                cells = []
                for h in hots:
                    r = next((r for r in failed if (r["query"], r["protocol"], r["hot"]) == (q, p, h)), None)
                    f = r["failures"][0] if r else None
                    cells.append("" if f is None else f"{_n(1e3 * f['restart_s'], 2)} / {_n(1e3 * f['recovery_s'], 0)}")
                print(f"| {q} | {p} | " + " | ".join(cells) + " |")
    cyc = res.get("cyclic", [])
    if cyc:
        print(f"\n### Cyclic query (Table 3.4), 75% of each protocol's MST, a failure at 80% of the run, "
              f"{_settings_line(st, 'cyclic')}\n")
        print("| clocks | protocol | W | rate /s | checkpoint ms | restart ms | recovery ms | checkpoints | invalid % | "
              "useless | rolled back | replayed messages | forced | bytes x | exact |")
        print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
        for r in cyc:
            f = r["failures"][0]
            print(f"| {r['clocks']} | {r['protocol']} | {r['workers']} | {_n(r['rate'])} | {_n(r['avg_checkpoint_ms'], 2)} | "
                  f"{_n(1e3 * f['restart_s'], 2)} | {_n(1e3 * f['recovery_s'], 0)} | {r['checkpoints']} | "
                  f"{_n(r['invalid_pct'], 1)} | {r['invalid'] - r['discarded']} | {f['rolled_back']} | "
                  f"{_n(f['replayed_messages'])} | {r['forced']} | {_n(r['overhead_ratio'], 2)} | {r.get('exact')} |")


#: the settings an MST depends on: a ``--mst-from`` file measured under others is refused
MST_SETTINGS = ("duration", "interval", "clocks", "clock_skew", "seed", "nodes")


def _costs_values(costs: Any) -> dict:
    """A cost model's values as its JSON gives them back (tuples as lists), to compare."""
    return json.loads(json.dumps(costs.__dict__ if isinstance(costs, CostModel) else costs, default=str))


def read_msts(paths: str, args: argparse.Namespace) -> list[dict]:
    """The normal-section rows of the files ``paths`` names (comma-separated: testbed JSONs or
    ``--save-msts`` files), merged; a file measured under other settings or costs than this
    run's, or two files with different MSTs for one query, protocol and worker count, stop the
    bench with what to change."""
    rows: dict[tuple, dict] = {}
    for path in paths.split(","):
        doc = json.loads(Path(path).read_text())
        st = doc["settings"]
        differ = [f"--{k.replace('_', '-')} {st.get(k)} there, {getattr(args, k)} here" for k in MST_SETTINGS
                  if st.get(k) != getattr(args, k)]
        if isinstance(st.get("costs"), dict) and _costs_values(st["costs"]) != _costs_values(args.costs):
            differ.append("other costs (--costs)")
        if differ:
            raise SystemExit(f"--mst-from {path}: its MSTs were measured under other settings ({'; '.join(differ)}): run "
                             "with the same settings or measure the MSTs again (leave out --mst-from)")
        for r in doc["normal"]:
            key = (r["query"], r["protocol"], r["workers"])
            if key in rows and rows[key]["mst"] != r["mst"]:
                raise SystemExit(f"--mst-from: two MSTs for {key} ({rows[key]['mst']:.0f} and {r['mst']:.0f} in {path}): "
                                 "keep one of the files")
            rows[key] = r
    return list(rows.values())


def save_msts(path: Path, res: dict) -> None:
    """Write the normal section's rows without their timelines, with the settings and costs
    they were measured under (``--save-msts``): what ``--mst-from`` needs, a few KB."""
    keep = {k: res["settings"][k] for k in (*MST_SETTINGS, "costs")}  # each row names its query, workers and probes
    rows = [{k: v for k, v in r.items() if k != "timeline"} for r in res["normal"]]
    path.write_text(json.dumps({"settings": keep, "costs": res["costs"], "normal": rows}, indent=1, default=str) + "\n")
    print(f"wrote {path} ({len(rows)} MSTs)")


def check_settings(args: argparse.Namespace, sections: list[str]) -> None:
    """What the sections need from ``--queries`` (their MSTs), checked before anything runs."""
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    if args.mst_from:
        have = {r["query"] for p in args.mst_from.split(",") for r in json.loads(Path(p).read_text())["normal"]}
    else:
        have = set(args.queries)
    need = []
    if "skew" in sections and not {"q3", "q8", "q12"} & set(args.queries):
        need.append("the skew section runs q3, q8 and q12: add one of them to --queries or leave skew out of --sections")
    if "intervals" in sections and args.interval_query not in have:
        need.append(f"the intervals section runs {args.interval_query} (--interval-query): add it to --queries (or to the "
                    f"--mst-from file's) or leave intervals out of --sections")
    from driftjoin.checkpointing.protocols import PROTOCOLS as KNOWN
    bad = [p for p in args.protocols + args.skew_protocols if p not in KNOWN or p == "none"]
    if bad:
        need.append(f"--protocols {','.join(bad)}: choose from {', '.join(p for p in KNOWN if p != 'none')}")
    if args.clock_skew is not None and not 0.0 <= args.clock_skew <= 1.0:
        need.append(f"--clock-skew {args.clock_skew:g} must be in [0, 1]: a share of the interval")
    if not 0.0 < args.overhead_load <= 1.0:
        need.append(f"--overhead-load {args.overhead_load:g} must be in (0, 1]: a share of each protocol's MST")
    if not 0.0 < args.failure_load <= 1.0:
        need.append(f"--failure-load {args.failure_load:g} must be in (0, 1]: a share of each protocol's MST")
    if need:
        raise SystemExit("; ".join(need))


def load_costs(args: argparse.Namespace) -> tuple[CostModel, dict]:
    """The run's costs: from ``--costs FILE``, else measured now; printed either way."""
    if args.costs:
        costs, measured = CostModel.read(args.costs)
        source = f"from {args.costs}" + (f" (measured {measured['when']}, load average {measured['load_average'][0]:.1f})"
                                         if measured else " (no note of when it was measured)")
    else:
        costs, measured = measured_now()
        source = (f"measured now, {measured['when']} in {measured['seconds']} s, load average "
                  f"{measured['load_average'][0]:.1f} -> {measured['load_average'][1]:.1f}")
    print(f"costs {source}:\n{describe(costs)}", flush=True)
    return costs, {"source": args.costs or "calibrated at the start", "measured": measured}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sections", default="normal,failure,overhead,skew,cyclic")
    ap.add_argument("--queries", default="q1,q3,q8,q12,reach")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="of coor, unc, cic (the thesis's, full vectors), "
                    "cic-packed, cic-delta")
    ap.add_argument("--workers", default="10", help="workers for the MST searches")
    ap.add_argument("--failure-workers", default="10")
    ap.add_argument("--overhead-workers", default="10,50", help="workers of the overhead section (Table 3.2: 10 and 50)")
    ap.add_argument("--overhead-load", type=float, default=0.8, help="the overhead section's rate as a share of each "
                    "protocol's per-worker MST times the workers (a bytes ratio: about the same at a lower load, faster)")
    ap.add_argument("--skew-workers", type=int, default=10)
    ap.add_argument("--cyclic-workers", default="5,10")
    ap.add_argument("--cyclic-clocks", default="worker", help="clock settings of the cyclic section (worker, instance)")
    ap.add_argument("--cyclic-duration", type=float, help="simulated seconds of the cyclic runs (default --duration)")
    ap.add_argument("--cyclic-interval", type=float, help="checkpoint interval of the cyclic runs (default --interval)")
    ap.add_argument("--nodes", type=int, default=1_000_000, help="the reachability query's static nodes (the thesis: 1M)")
    ap.add_argument("--intervals", default="0.05,0.1,0.2")
    ap.add_argument("--interval-query", default="q8", help="the query of the intervals section")
    ap.add_argument("--hot", default="0,0.1,0.2,0.3", help="hot-item shares of the skew section (the thesis: 10 to 30%%)")
    ap.add_argument("--duration", type=float, default=0.4, help="simulated seconds of input per run (the thesis's length: "
                    "8 intervals)")
    ap.add_argument("--interval", type=float, default=0.05, help="checkpoint interval (simulated seconds)")
    ap.add_argument("--clocks", default="worker", choices=("worker", "instance"),
                    help="UNC and CIC: checkpoint timers on the worker's clock (the thesis) or each instance's own")
    ap.add_argument("--clock-skew", type=float, default=None, help="over how much of the interval the workers' timer phases "
                    "are drawn (0: in step; default 1, the whole interval)")
    ap.add_argument("--probes", type=int, default=8, help="probes per MST search, to saturation (0: the utilisation "
                    "estimate alone, extrapolated)")
    ap.add_argument("--tolerance", type=float, default=0.05, help="an MST search stops once the lowest unsustainable "
                    "rate probed is within this share above the highest sustainable one")
    ap.add_argument("--skew-protocols", default="coor,unc,cic", help="the skew section's protocols (the thesis's three)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--costs", help="a calibration file (python -m driftjoin.checkpointing.calibrate --out FILE, e.g. "
                    "bench/inputs/checkpointing_costs.json); default: calibrate now")
    ap.add_argument("--out", default="bench/results", help="directory for the JSON and the figures")
    ap.add_argument("--mst-from", help="take the normal section (MSTs) from these earlier JSONs (comma-separated; a "
                    "testbed JSON or a --save-msts file, e.g. bench/inputs/checkpointing_msts.json) instead of measuring")
    ap.add_argument("--save-msts", help="write the normal section's MSTs, small, to this file (for --mst-from)")
    ap.add_argument("--failure-at", type=float, default=0.3, help="failure time as a share of the run (the thesis: 18 s of 60)")
    ap.add_argument("--failure-load", type=float, default=0.8, help="the failure section's rate as a share of each "
                    "protocol's MST (the thesis: 0.8)")
    ap.add_argument("--markdown", action="store_true", help="print the docs' tables from --out's JSON (no run)")
    args = ap.parse_args()
    if args.markdown:
        markdown(json.loads((Path(args.out) / "checkpointing_testbed.json").read_text()))
        return
    args.queries = args.queries.split(",")
    args.workers = [int(x) for x in args.workers.split(",")]
    args.failure_workers = [int(x) for x in args.failure_workers.split(",")]
    args.overhead_workers = [int(x) for x in args.overhead_workers.split(",")]
    args.protocols = tuple(args.protocols.split(","))
    args.skew_protocols = tuple(args.skew_protocols.split(","))
    args.cyclic_workers = [int(x) for x in args.cyclic_workers.split(",")]
    args.cyclic_clocks = args.cyclic_clocks.split(",")
    args.intervals = [float(x) for x in args.intervals.split(",")]
    args.hot = [float(x) for x in args.hot.split(",")]
    sections = args.sections.split(",")
    check_settings(args, sections)
    # the MSTs the selected sections run at (a share of): measured for their worker counts too
    needed = ((set(args.failure_workers) if {"failure", "intervals"} & set(sections) else set())
              | ({args.skew_workers} if "skew" in sections else set()))
    if not needed <= set(args.workers):
        args.workers = sorted(set(args.workers) | needed)
    # the cyclic section needs the reachability query's MSTs at its own worker counts only
    args.workers_of = {q: sorted(set(args.workers) | (set(args.cyclic_workers) if q == "reach" and "cyclic" in sections
                                                      else set())) for q in args.queries}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    args.costs, costs_note = load_costs(args)
    started = time.time()
    res: dict[str, Any] = {"settings": {k: (v if not isinstance(v, CostModel) else v.__dict__) for k, v in vars(args).items()},
                           "costs": costs_note}
    path = out / "checkpointing_testbed.json"

    def save(name: str) -> None:
        path.write_text(json.dumps(res, indent=1, default=str))
        for p in figures(out, res):
            print(f"wrote {p}")
        print(f"wrote {path} after the {name} section ({time.time() - started:.0f} s)", flush=True)

    if args.mst_from:  # reuse the MSTs (and normal-operation rows) of earlier runs
        res["normal"] = read_msts(args.mst_from, args)
    else:
        res["normal"] = section_normal(args)
        save("normal")
    if args.save_msts:
        save_msts(Path(args.save_msts), res)
    for name, fn in (("failure", section_failure), ("overhead", section_overhead), ("skew", section_skew),
                     ("cyclic", section_cyclic), ("intervals", section_intervals)):
        if name in sections:
            res[name] = fn(args, res["normal"])
            save(name)
    bad = exactness([r for name in SECTIONS[1:] for r in res.get(name, [])])
    if bad:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
