"""Autoscalers at the thesis's scale, simulated: every policy on every workload shape.

    nice -n 10 .venv/bin/python bench/autoscale_sim.py [--minutes 60 --max-workers 70]
        [--setups thesis/restart,waves/restart,waves/live] [--sections nexmark,sweeps,workloads,constant,cpu,joint]
        [--queries map,filter,ij,sa,swa,ij-premise] [--sweeps peak,overprovisioning,target,restart_pause]
        [--workloads increasing,decreasing,cosine,random,steps]
        [--nexmark bench/inputs/nexmark_costs.json] [--mechanics bench/inputs/spark_mechanics.json] [--out FILE]

A *setup* is a sizing and an actuation (``--setups``): sizing ``thesis`` acts on the worker
count the policy names, ``waves`` on the fewest executors giving that count's throughput over
the state partitions (:mod:`driftjoin.control.autoscale.policies`, the default of
``autoscale()``); actuation ``restart`` is the thesis's stop-and-restart (the batch in flight
is lost, no batch runs for the restart pause measured on Spark, then the state is reloaded),
``live`` adds and removes executors under the running query (the default of ``autoscale()``).
``thesis/restart`` is the thesis's operating point; ``waves/live`` is what a user gets.

Sections (``--sections``; ``nexmark,sweeps,workloads,constant,cpu`` by default):

- ``nexmark``: the thesis's five queries (Map, Filter, Incremental Join, Sliding and Session
  Window Aggregate) as multi-stage queries with the per-stage costs measured live
  (``--nexmark``, committed small in bench/inputs/), the Incremental Join with its state
  growing with the rate (the model bench/autoscale_mechanics.py fitted on Spark, in
  ``--mechanics``; on Spark its state terms are about 0, so ``ij-premise`` also runs it as the
  thesis describes it, a record's cost doubled by the state at the peak). Map and SWA on the
  five workloads (the thesis's workload comparison, 4.6.2, and convergence on steps, 4.6.4);
  Filter, IJ and SA on cosine (4.6.3). Per run the
  thesis's metrics (4.5.1): p50/p95 queue latency of every record offered (a record still
  waiting at the end counts its wait so far), records processed over offered, mean workers,
  scaling actions, on steps the convergence time and steps after each change; and the worker
  trace's shape: the highest count, when the top of the range was first reached, how often the
  scaling direction turned (reversals: DS2's oscillation). Every workload starts at 1 worker
  but the decreasing one, which starts "from an appropriate for the high throughput
  configuration" (4.5.3): the workers its peak needs, counted by the setup's sizing (0.8 x 70
  = 56 under ``thesis``, which Spark's waves run like 35; 70 under ``waves``).
- ``sweeps``: the settings the thesis fixed (``--sweeps``), swept with the thesis's value marked
  (its four policies and ``dhalion-stage``, on Map and SWA): the peak
  (0.2 to 1.0 of what the most workers take; this project assumed 0.8), DS2's
  over-provisioning (0 to 0.5; the thesis 0.2, and 0 in its convergence runs), HPA's CPU
  target (0.5 to 0.9; the thesis 0.7, "the best performing among the values tested") and the
  restart pause (the measured one to 120 s).
- ``workloads``: the five workload shapes on a one-stage query of 2,000 records/s per worker.
- ``constant``: a constant load at 50%, 70% and 90% of what 10 (and ``--max-workers``)
  workers take, starting at 1 worker and at all of them: whether each policy keeps up in the
  second half of the run and stops acting (settles).
- ``cpu``: HPA-CPU's result against the CPU it reads per unit of busy time (0.6 to 1.2;
  ``bench/autoscale_live.py --cpu-rate`` measures it).
- ``joint``: balance and scale together on a skewed, changing workload (``control/joint.py``).

``--calibration FILE`` takes the engine constants (capacity per worker, batch and task
overheads, executor launch delay, state reload, restart pause, CPU per busy second) from a
live run's JSON (bench/autoscale_live.py, its ``calibration`` of ``--query``); with
``--compare`` it replays every live run of that query instead (same schedule, policy, range,
cooldown, monitoring window, trigger and actuation path) and prints live and simulated side
by side. Deterministic (no seed but the random workload's). Writes ``--out`` (default
bench/results/autoscale_sim.json) after each section, the PNGs beside it, and prints the
docs' tables (``--markdown``; ``--from a.json,b.json`` merges runs of different sections,
queries (``--queries``) or sweeps (``--sweeps``), so the pieces can run on both cores at once).
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from driftjoin.control.autoscale import Scaler, make_policy
from driftjoin.control.autoscale.simulator import SimConfig, SimResult, Simulation, StageModel, convergence
from driftjoin.control.joint import WorksetBalancerModel, moving_hotspot
from driftjoin.generators.rates import RateSchedule

POLICIES = ["dhalion", "dhalion-stage", "ds2", "hpa-cpu", "hpa-varga", "batch-interval", "spark-dynamic-allocation"]
#: the thesis's autoscalers (and its Dhalion by stage): the policies the sweeps of its settings run
THESIS_POLICIES = ["dhalion", "dhalion-stage", "ds2", "hpa-cpu", "hpa-varga"]
OUT = Path(__file__).resolve().parent / "results"
INPUTS = Path(__file__).resolve().parent / "inputs"
SECTIONS = ("nexmark", "sweeps", "workloads", "constant", "cpu", "joint")
WORKLOADS = ("increasing", "decreasing", "cosine", "random", "steps")
#: the thesis's workload comparison and convergence (Map, SWA: every shape) and query comparison (cosine)
QUERY_WORKLOADS = {"map": WORKLOADS, "swa": WORKLOADS, "filter": ("cosine",), "ij": ("cosine",), "sa": ("cosine",),
                   "ij-premise": ("cosine",)}
#: the thesis's values of the swept settings (4.6.1), and this project's assumed peak
THESIS = {"peak": 0.8, "overprovisioning": 0.2, "target": 0.7}
#: the values the sweeps section tries (the restart pause also tries the measured one)
SWEEPS = {"peak": (0.2, 0.4, 0.6, 0.8, 1.0), "overprovisioning": (0.0, 0.1, 0.2, 0.5), "target": (0.5, 0.6, 0.7, 0.8, 0.9),
          "restart_pause": (30.0, 60.0, 120.0)}


def workloads(seconds: float, peak: float) -> dict[str, RateSchedule]:
    return {
        "increasing": RateSchedule("increasing", low=0.0, high=peak, duration=seconds),
        "decreasing": RateSchedule("decreasing", low=0.0, high=peak, duration=seconds),
        "cosine": RateSchedule("cosine", low=0.1 * peak, high=peak, duration=seconds),
        "random": RateSchedule("random", low=0.1 * peak, high=peak, duration=seconds, step=60, jump=0.15, seed=7),
        "steps": RateSchedule("steps", low=0.2 * peak, high=peak, duration=seconds, levels=(0.0, 1.0, 0.5)),
    }


def scaler(policy: str, lo: int, hi: int, cooldown: float, sizing: str, partitions: int, **options: float) -> Scaler:
    return Scaler(make_policy(policy, **options), lo, hi, cooldown=cooldown, sizing=sizing, partitions=partitions)


def parse_setups(text: str) -> list[tuple[str, str]]:
    """``"thesis/restart,waves/live"`` -> [("thesis", "restart"), ("waves", "live")]."""
    out = []
    for item in text.split(","):
        sizing, _, mode = item.partition("/")
        if sizing not in ("thesis", "waves") or mode not in ("live", "restart"):
            raise SystemExit(f"setup {item!r}: write sizing/actuation with sizing thesis or waves and actuation live or "
                             "restart, e.g. thesis/restart,waves/live")
        out.append((sizing, mode))
    return out


def reversals(workers: list[tuple[float, int]]) -> int:
    """How often the scaling direction turned (up then down, or down then up): an oscillation
    count from the worker count over time."""
    steps = [b[1] - a[1] for a, b in zip(workers, workers[1:]) if b[1] != a[1]]
    return sum(1 for a, b in zip(steps, steps[1:]) if (a > 0) != (b > 0))


def row(name: str, policy: str, r: SimResult, sched: RateSchedule, seconds: float, most: int) -> dict:
    """A run's metrics: the thesis's (4.5.1) and the worker trace's shape (highest count, when
    ``most``, the range's top, was first reached, direction reversals)."""
    at_max = next((float(t) for t, k in r.workers if k >= most), None)
    out = {"workload": name, "policy": policy, "p50": r.latency(0.5), "p95": r.latency(0.95),
           "p95_processed": r.latency(0.95, "processed"), "proc_p95": r.latency(0.95, "processing"),
           "throughput_ratio": r.processed_fraction(), "mean_workers": r.mean_workers(seconds), "actions": r.actions,
           "start_workers": r.workers[0][1], "peak_workers": max(k for _, k in r.workers), "at_max_s": at_max,
           "reversals": reversals(r.workers), "trace": [(round(float(t), 1), int(k)) for t, k in r.workers]}
    if name == "steps":
        third = seconds / 3
        for i, at in enumerate((third, 2 * third), 1):
            t, steps = convergence(r.workers, at, at + third, settle=min(600.0, third / 2))
            out[f"converge{i}_s"], out[f"converge{i}_steps"] = t, steps
    return out


def _f(x, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


HEAD = (f"{'workload':11s} {'policy':25s} {'setup':14s} {'p50 s':>8s} {'p95 s':>8s} {'thr/in':>7s} {'read p95':>9s} "
        f"{'proc p95':>9s} {'workers':>8s} {'actions':>7s}  convergence")


def line(x: dict, setup: str) -> str:
    conv = (f"{_f(x['converge1_s'], '.0f')}s/{x['converge1_steps']} then {_f(x['converge2_s'], '.0f')}s/{x['converge2_steps']}"
            if "converge1_s" in x else "")
    return (f"{x['workload']:11s} {x['policy']:25s} {setup:14s} {x['p50']:8.1f} {x['p95']:8.1f} {x['throughput_ratio']:7.2f} "
            f"{_f(x['p95_processed'], '9.1f')} {_f(x['proc_p95'], '9.1f')} {x['mean_workers']:8.1f} {x['actions']:7d}  {conv}")


def plot(name: str, runs: dict[str, SimResult], seconds: float, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for policy, r in runs.items():
        t, k = zip(*(r.workers + [(seconds, r.workers[-1][1])]))
        a.step(np.array(t) / 60, k, where="post", label=policy)
        starts = np.array([x[0] for x in r.batches])
        sizes = [min(x[2], 256) for x in r.batches]
        per_batch = [np.median(q) for q in np.split(r.queue_latency[0], np.cumsum(sizes)[:-1])] if r.batches else []
        b.plot(starts / 60, per_batch, lw=0.8, label=policy)
    a.set_ylabel("workers")
    b.set_ylabel("queue latency (s, median per batch)")
    b.set_yscale("symlog")
    b.set_xlabel("minutes")
    a.legend(fontsize=7, ncol=3)
    a.set_title(f"{name} (simulated)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


#: engine constants a calibration carries to the thesis-scale runs (the run settings stay)
ENGINE = ("capacity", "batch_overhead", "task_overhead", "launch_delay", "state_reload", "restart_pause", "cpu_per_busy")
#: and what a replay of a live run takes as well (the machine's contention included)
REPLAY = ENGINE + ("machine_cores", "partitions", "trigger_interval", "monitoring_window", "idle_timeout")


def calibrated(base: SimConfig, cal: dict, fields: tuple[str, ...]) -> SimConfig:
    return replace(base, **{k: float(cal[k]) if k != "partitions" else int(cal[k]) for k in fields
                            if cal.get(k) is not None and math.isfinite(float(cal[k]))})


def compare(live: dict, query: str, sizing: str) -> list[dict]:
    """Every live run of ``query`` replayed in the simulator with the calibration, side by side."""
    cal = live["calibration"][query]
    cfg = calibrated(SimConfig(), cal, REPLAY)
    out = []
    print(f"live vs simulated, {query}: capacity {cfg.capacity:,.0f}/s per worker, batch overhead {cfg.batch_overhead:.1f} s, "
          f"task overhead {cfg.task_overhead:.2f} s, launch {cfg.launch_delay:.0f} s, reload {cfg.state_reload:.1f} s, "
          f"restart pause {cfg.restart_pause:.0f} s, machine cores {cfg.machine_cores:.2f}, sizing {sizing}")
    print(f"{'workload':10s} {'policy':24s} {'mode':7s} {'p50 live/sim':>13s} {'p95 live/sim':>13s} {'thr/in live/sim':>16s} "
          f"{'workers live/sim':>17s} {'actions live/sim':>16s}")
    for run in live["runs"]:
        if run["query"] != query or run.get("joint") or run.get("balance", "none") != "none":
            continue
        sched = RateSchedule.parse(run["spec"])
        seconds = run["seconds"]
        start = cfg.partitions if run["workload"] == "decreasing" and run["policy"] != "spark-dynamic-allocation" else 1
        sc = scaler(run["policy"], 1, cfg.partitions, cal["cooldown"], sizing, cfg.partitions)
        r = Simulation(sched, sc, replace(cfg, mode=run["mode"]), initial_workers=start).run(seconds)
        sim = row(run["workload"], run["policy"], r, sched, seconds, cfg.partitions)
        x = {"workload": run["workload"], "policy": run["policy"], "mode": run["mode"], "live": {k: run.get(k) for k in
             ("p50", "p95", "proc_p95", "throughput_ratio", "mean_workers", "n_actions")}, "sim": sim}
        out.append(x)

        def pair(a, b, fmt: str) -> str:
            return f"{_f(a, fmt)}/{_f(b, fmt)}"
        lv = x["live"]
        print(f"{run['workload']:10s} {run['policy']:24s} {run['mode']:7s} {pair(lv['p50'], sim['p50'], '.1f'):>13s} "
              f"{pair(lv['p95'], sim['p95'], '.1f'):>13s} {pair(lv['throughput_ratio'], sim['throughput_ratio'], '.2f'):>16s} "
              f"{pair(lv['mean_workers'], sim['mean_workers'], '.2f'):>17s} {pair(lv['n_actions'], sim['actions'], 'd'):>16s}")
    return out


# -- sections -------------------------------------------------------------------------------------

def setup_name(sizing: str, mode: str) -> str:
    return f"{sizing}/{mode}"


def start_workers(name: str, peak: float, sizing: str, args, partitions: int) -> int:
    """Where a run starts: the decreasing workload at the workers its peak needs (the thesis,
    4.5.3: "an appropriate for the high throughput configuration"; ``peak`` a share of what
    ``--max-workers`` take) as the setup's sizing counts them, every other workload at 1."""
    if name != "decreasing":
        return 1
    sc = scaler("ds2", 1, args.max_workers, args.cooldown, sizing, partitions)
    return sc.clamp(sc.size(math.ceil(peak * args.max_workers - 1e-9)))


def run_setups(args, cfg: SimConfig, sched: RateSchedule, seconds: float, policies: list[str], peak: float,
               tag: dict, name: str, plot_as: str | None = None, figures: Path | None = None,
               options: dict[str, dict] | None = None) -> list[dict]:
    """Every policy under every setup on one schedule whose peak is ``peak`` of what the most
    workers take; a row per run (printed), a PNG per setup."""
    rows = []
    for sizing, mode in args.setups:
        runs = {}
        mcfg = replace(cfg, mode=mode)
        first = start_workers(name, peak, sizing, args, cfg.partitions)
        for policy in policies:
            sim = Simulation(sched, scaler(policy, 1, args.max_workers, args.cooldown, sizing, cfg.partitions,
                                           **(options or {}).get(policy, {})), mcfg, initial_workers=first)
            runs[policy] = r = sim.run(seconds)
            x = row(name, policy, r, sched, seconds, args.max_workers) | tag | {"sizing": sizing, "actuation": mode,
                                                                                "setup": setup_name(sizing, mode)}
            rows.append(x)
            print(line(dict(x, workload=(tag.get("query", "") + "/" + name if tag.get("query") else name)[:11]),
                       setup_name(sizing, mode)), flush=True)
        if plot_as and figures is not None:
            plot(f"{plot_as}, {setup_name(sizing, mode)}", runs, seconds,
                 figures / f"autoscale_sim_{plot_as.replace(' ', '_').replace(',', '')}_{sizing}_{mode}.png")
    return rows


def section_workloads(args, cfg: SimConfig, figures: Path) -> list[dict]:
    seconds = args.minutes * 60
    peak = args.peak * cfg.capacity * args.max_workers      # the peak needs ~80% of the workers
    rows = []
    print(HEAD)
    for name, sched in workloads(seconds, peak).items():
        rows += run_setups(args, cfg, sched, seconds, POLICIES, args.peak, {}, name, plot_as=f"{name} workload",
                           figures=figures)
    return rows


def section_constant(args, cfg: SimConfig) -> list[dict]:
    """Constant loads at or below capacity: does each policy keep up and stop acting? ``kept_up``:
    the second half of the run processed at least 98% of what it offered and the lag at the end
    is at most 30 s of input (a backlog being worked off reads above 1.00)."""
    seconds = args.minutes * 60
    half = seconds / 2
    rows = []
    print(f"{'P':>3s} {'load':>5s} {'start':>5s} {'policy':25s} {'setup':14s} {'thr/in 2nd half':>15s} {'end lag s':>9s} "
          f"{'acts':>5s} {'acts 2nd half':>13s} {'final':>5s} {'p95 s':>8s}  workers over time")
    for parts in sorted({10, args.max_workers}):
        pcfg = replace(cfg, partitions=parts)
        for load in (0.5, 0.7, 0.9):
            rate = load * cfg.capacity * parts
            sched = RateSchedule("constant", high=rate, duration=seconds)
            for start in (1, parts):
                for policy in POLICIES:
                    for sizing, mode in args.setups:
                        r = Simulation(sched, scaler(policy, 1, parts, args.cooldown, sizing, parts), replace(pcfg, mode=mode),
                                       initial_workers=start).run(seconds)
                        late = sum(b[2] for b in r.batches if b[0] >= half) / (rate * half)
                        late_actions = sum(1 for t, _ in r.workers if t >= half)
                        end_lag = (r.offered - sum(b[2] for b in r.batches)) / rate
                        x = {"partitions": parts, "load": load, "start": start, "policy": policy, "sizing": sizing,
                             "actuation": mode, "setup": setup_name(sizing, mode),
                             "throughput_second_half": late, "actions": r.actions, "actions_second_half": late_actions,
                             "final_workers": r.workers[-1][1], "p95": r.latency(0.95), "end_lag_s": end_lag,
                             "kept_up": bool(late >= 0.98 and end_lag <= 30.0),
                             "throughput_ratio": r.processed_fraction(), "workers": [(float(t), k) for t, k in r.workers]}
                        rows.append(x)
                        trail = " ".join(str(k) for _, k in r.workers[:12]) + (" ..." if len(r.workers) > 12 else "")
                        print(f"{parts:3d} {load:5.1f} {start:5d} {policy:25s} {x['setup']:14s} {late:15.2f} {end_lag:9.1f} "
                              f"{r.actions:5d} {late_actions:13d} {r.workers[-1][1]:5d} {x['p95']:8.1f}  {trail}", flush=True)
    return rows


def section_cpu(args, cfg: SimConfig) -> list[dict]:
    """HPA-CPU against the CPU reading per busy second (the simulator's ``cpu_per_busy``)."""
    seconds = args.minutes * 60
    peak = args.peak * cfg.capacity * args.max_workers
    rows = []
    print(f"{'workload':11s} {'cpu/busy':>8s} {'setup':14s} {'p50 s':>8s} {'p95 s':>8s} {'thr/in':>7s} {'workers':>8s} {'actions':>7s}")
    for name, sched in workloads(seconds, peak).items():
        for ratio in (0.6, 0.8, 1.0, 1.2):
            for sizing, mode in args.setups:
                start = start_workers(name, args.peak, sizing, args, cfg.partitions)
                r = Simulation(sched, scaler("hpa-cpu", 1, args.max_workers, args.cooldown, sizing, cfg.partitions),
                               replace(cfg, cpu_per_busy=ratio, mode=mode), initial_workers=start).run(seconds)
                x = row(name, "hpa-cpu", r, sched, seconds, args.max_workers) | {"cpu_per_busy": ratio, "sizing": sizing, "actuation": mode,
                                                               "setup": setup_name(sizing, mode)}
                rows.append(x)
                print(f"{name:11s} {ratio:8.1f} {x['setup']:14s} {x['p50']:8.1f} {x['p95']:8.1f} {x['throughput_ratio']:7.2f} "
                      f"{x['mean_workers']:8.1f} {x['actions']:7d}", flush=True)
    return rows


def section_joint(args, cfg: SimConfig) -> list[dict]:
    seconds = args.minutes * 60
    parts = 20
    jcfg = replace(cfg, partitions=parts)
    loads = moving_hotspot(worksets=8 * parts, hot=6, hot_share=0.4, period=600, seed=1)
    sched = RateSchedule("cosine", low=0.05 * jcfg.capacity * parts, high=0.6 * jcfg.capacity * parts, duration=seconds)
    rows = []
    print(f"skewed, moving hot spot, cosine rate, {parts} state partitions, sizing {args.setups[0][0]}, live actuation")
    print(f"{'policy':10s} {'plane':18s} {'p50 s':>8s} {'p95 s':>8s} {'thr/in':>7s} {'proc p95':>9s} {'workers':>8s} "
          f"{'scalings':>8s} {'balancings':>10s}")
    for policy in ("ds2", "hpa-varga", "dhalion"):
        for plane, fixed in (("autoscale only", None), ("balance only, 10", 10), ("balance only, 20", 20), ("joint", None)):
            lo, hi = (fixed, fixed) if fixed else (1, parts)
            mode = "none" if plane == "autoscale only" else ("joint" if plane == "joint" else "balance")
            bal = WorksetBalancerModel(loads, parts, mode=mode)
            r = Simulation(sched, scaler(policy, lo, hi, 120, args.setups[0][0], parts), jcfg, initial_workers=fixed or 4,
                           balancer=bal).run(seconds)
            x = {"policy": policy, "plane": plane, "p50": r.latency(0.5), "p95": r.latency(0.95),
                 "throughput_ratio": r.processed_fraction(), "proc_p95": r.latency(0.95, "processing"),
                 "mean_workers": r.mean_workers(seconds), "actions": r.actions, "balances": r.balance_actions}
            rows.append(x)
            print(f"{policy:10s} {plane:18s} {x['p50']:8.1f} {x['p95']:8.1f} {x['throughput_ratio']:7.2f} {x['proc_p95']:9.1f} "
                  f"{x['mean_workers']:8.1f} {x['actions']:8d} {x['balances']:10d}", flush=True)
    return rows


def nexmark_config(base: SimConfig, measured: dict, state: dict | None = None) -> SimConfig:
    """A query's :class:`SimConfig` from its live measurement (``bench/autoscale_live.py``'s
    ``nexmark_costs``, bench/inputs/nexmark_costs.json): its stages with their cost per source
    record and selectivity, the batch overhead; ``state`` (the Incremental Join's fit from
    bench/autoscale_mechanics.py) gives its last stage a state of ``ttl`` seconds that a batch
    scans and a record probes, at the fit's costs relative to its cost per record (the fit is
    CPU time on another day, the stage costs useful time: their ratio carries over)."""
    stages = [StageModel(s["name"], s["cost"], s["selectivity"], None) for s in measured["stages"]]
    if state:
        g = state["state_rows_per_source_record_of_ttl"]
        last = stages[-1]
        k = last.cost / state["per_source_record_s"] if state["per_source_record_s"] > 0 else 0.0
        stages[-1] = StageModel(last.name, last.cost, last.selectivity, None, state_ttl=state["ttl"],
                                state_cost=k * state["per_state_row_per_batch_s"] * g,
                                probe_cost=k * state["per_record_per_partition_row_s"] * g)
    stages_t = tuple(stages)
    return replace(base, stages=stages_t, capacity=1.0 / sum(s.cost for s in stages_t),
                   batch_overhead=measured.get("batch_overhead", base.batch_overhead))


def premise_config(plain: SimConfig, ttl: float, rate: float) -> SimConfig:
    """The Incremental Join as the thesis describes it ("a constantly growing state and a
    non-linear to the input computational cost"), which Spark's does not show (its fitted state
    terms are about 0): its join stage keeps ``ttl`` seconds of records and a record's probe costs
    so much per row of its partition that at ``rate`` it doubles the query's cost per record."""
    stages = list(plain.query())
    per_record = sum(st.cost for st in stages)
    last = stages[-1]
    probe = per_record / (rate * ttl / plain.partitions)
    stages[-1] = StageModel(last.name, last.cost, last.selectivity, None, state_ttl=ttl, probe_cost=probe)
    return replace(plain, stages=tuple(stages))


def capacity_at(cfg: SimConfig, workers: int, rate_guess: float) -> float:
    """Records/s ``workers`` take through every stage, the state at that rate included (a
    fixed point: a stage's state grows with the rate it takes)."""
    rate = rate_guess
    for _ in range(50):
        per = 0.0
        for st in cfg.query():
            per += st.cost
            if st.state_ttl is not None:
                rows = rate * st.state_ttl
                p = st.tasks or cfg.partitions
                per += st.probe_cost * rows / p + st.state_cost * rows / max(rate * cfg.trigger_interval, 1e-9)
        new = workers / per
        if abs(new - rate) <= 1e-6 * rate:
            break
        rate = 0.5 * (rate + new)
    return rate


def _nexmark_inputs(args) -> tuple[dict, dict | None]:
    measured = json.loads(Path(args.nexmark).read_text())["nexmark_costs"]
    state = None
    if args.mechanics and Path(args.mechanics).exists():
        fit = json.loads(Path(args.mechanics).read_text()).get("ij")
        if fit and fit.get("per_source_record_s") is not None:
            state = dict(fit, ttl=args.ij_ttl)
    return measured, state


def section_nexmark(args, cfg: SimConfig, figures: Path) -> list[dict]:
    """The thesis's queries (4.5.2) with their measured stages: Map and SWA on every workload,
    Filter, IJ and SA on cosine."""
    measured, state = _nexmark_inputs(args)
    seconds = args.minutes * 60
    rows = []
    print(HEAD.replace("workload   ", "query/load "))
    configs = {q: nexmark_config(cfg, m, state if q == "ij" else None) for q, m in measured.items() if q in args.queries}
    if "ij" in measured and "ij-premise" in args.queries:   # the thesis's premise: at the peak its state doubles a record's cost
        plain = nexmark_config(cfg, measured["ij"])
        configs["ij-premise"] = premise_config(plain, args.ij_ttl, args.peak * plain.stage_capacity() * args.max_workers)
    for query, qcfg in configs.items():
        cap = capacity_at(qcfg, args.max_workers, qcfg.stage_capacity() * args.max_workers)
        scheds = workloads(seconds, args.peak * cap)
        for name in [w for w in QUERY_WORKLOADS.get(query, ("cosine",)) if w in args.workloads]:
            rows += run_setups(args, qcfg, scheds[name], seconds, POLICIES, args.peak,
                               {"query": query, "stages": [s.name for s in qcfg.query()], "capacity": cap}, name,
                               plot_as=f"nexmark {query} {name}", figures=figures)
    return rows


def section_sweeps(args, cfg: SimConfig, done=lambda rows: None) -> list[dict]:
    """The thesis's fixed settings swept: peak, DS2's over-provisioning, HPA's target, restart
    pause, in ``--sweeps`` order; ``done(rows)`` after each setting's value (the bench writes
    its JSON then, so a long run that stops keeps what finished)."""
    measured, state = _nexmark_inputs(args)
    seconds = args.minutes * 60
    rows = []
    configs = {q: nexmark_config(cfg, measured[q], state if q == "ij" else None) for q in ("map", "swa")
               if q in measured and q in args.queries}
    caps = {q: capacity_at(c, args.max_workers, c.stage_capacity() * args.max_workers) for q, c in configs.items()}
    print(HEAD.replace("workload   ", "query/load "))
    for query, qcfg in configs.items():
        scheds = workloads(seconds, args.peak * caps[query])
        for sweep in args.sweeps:
            if sweep == "peak":
                for peak in SWEEPS["peak"]:
                    for name in ("increasing", "cosine"):
                        sched = workloads(seconds, peak * caps[query])[name]
                        rows += [x | {"sweep": "peak", "value": peak} for x in
                                 run_setups(args, qcfg, sched, seconds, THESIS_POLICIES, peak, {"query": query}, name)]
                    done(rows)
            elif sweep == "overprovisioning":
                for op in SWEEPS["overprovisioning"]:
                    for name in ("steps", "cosine"):
                        rows += [x | {"sweep": "overprovisioning", "value": op} for x in
                                 run_setups(args, qcfg, scheds[name], seconds, ["ds2"], args.peak, {"query": query}, name,
                                            options={"ds2": {"overprovisioning": op}})]
                    done(rows)
            elif sweep == "target":
                for target in SWEEPS["target"]:
                    for name in ("increasing", "decreasing", "cosine", "random"):
                        rows += [x | {"sweep": "target", "value": target} for x in
                                 run_setups(args, qcfg, scheds[name], seconds, ["hpa-cpu", "hpa-varga"], args.peak,
                                            {"query": query}, name,
                                            options={"hpa-cpu": {"target": target}, "hpa-varga": {"target": target}})]
                    done(rows)
            else:
                for pause in sorted({round(cfg.restart_pause, 1), *SWEEPS["restart_pause"]}):
                    pcfg = replace(qcfg, restart_pause=pause)
                    sub = argparse.Namespace(**vars(args))
                    sub.setups = [(sz, md) for sz, md in args.setups if md == "restart"]
                    for name in ("cosine", "increasing"):
                        rows += [x | {"sweep": "restart_pause", "value": pause} for x in
                                 run_setups(sub, pcfg, scheds[name], seconds, THESIS_POLICIES, args.peak, {"query": query},
                                            name)]
                    done(rows)
    return rows


# -- the docs' tables ----------------------------------------------------------------------------

def _conv(x: dict, i: int) -> str:
    t, n = x.get(f"converge{i}_s"), x.get(f"converge{i}_steps")
    if n is None:
        return ""
    if n == 0:
        return "none needed"
    return f"never ({n})" if t is None or (isinstance(t, float) and math.isnan(t)) else f"{t:.0f} s/{n}"


def _cell(x: dict | None, turns: bool = False) -> str:
    """p95 s (thr/in, mean workers, actions[, when the top of the range was first reached][,
    direction reversals])."""
    if x is None:
        return ""
    extra = ""
    if x.get("at_max_s") is not None and x.get("start_workers") != x.get("peak_workers"):
        extra += f", max at {x['at_max_s']:.0f} s"
    if turns and x.get("reversals") is not None:
        extra += f", {x['reversals']} reversals"
    return f"{x['p95']:.0f} ({x['throughput_ratio']:.2f}, {x['mean_workers']:.0f}, {x['actions']}{extra})"


#: the lists a run's JSON holds per section (merged by ``--markdown --from``)
RESULT_LISTS = ("nexmark", "sweeps", "rows", "constant", "cpu", "joint")


def merged(paths: list[Path]) -> dict:
    """Several runs' JSONs as one (sections run apart, e.g. on both cores): the first's settings,
    every run's rows, the setups in order of appearance."""
    out: dict = {}
    for path in paths:
        part = json.loads(path.read_text())
        if not out:
            out = {k: v for k, v in part.items() if k not in RESULT_LISTS}
            out["setups"] = []
        for k in RESULT_LISTS:
            if k in part:
                out.setdefault(k, []).extend(part[k])
        out["setups"] += [su for su in part.get("setups", []) if su not in out["setups"]]
    return out


def markdown(result: dict) -> None:
    """The tables docs/autoscaling.md shows, from a JSON this bench wrote."""
    setups = result.get("setups", [])
    nx = result.get("nexmark", [])
    if nx:
        print("\n### NexMark queries: p95 s (thr/in, mean workers, actions; when the maximum was first reached, if it was "
              "and the run did not start there)\n")
        print("| query | workload | policy | " + " | ".join(setups) + " |")
        print("|---|---|---|" + "---|" * len(setups))
        keys = dict.fromkeys((x["query"], x["workload"], x["policy"]) for x in nx)
        for q, w, pol in keys:
            cells = [_cell(next((x for x in nx if (x["query"], x["workload"], x["policy"], x["setup"]) == (q, w, pol, su)), None))
                     for su in setups]
            print(f"| {q} | {w} | {pol} | " + " | ".join(cells) + " |")
        steps = [x for x in nx if x["workload"] == "steps"]
        if steps:
            print("\n### Convergence on steps (after the rise; after the fall): time/actions\n")
            print("| query | policy | " + " | ".join(setups) + " |")
            print("|---|---|" + "---|" * len(setups))
            for q, pol in dict.fromkeys((x["query"], x["policy"]) for x in steps):
                cells = []
                for su in setups:
                    x = next((x for x in steps if (x["query"], x["policy"], x["setup"]) == (q, pol, su)), None)
                    cells.append(f"{_conv(x, 1)}; {_conv(x, 2)}" if x else "")
                print(f"| {q} | {pol} | " + " | ".join(cells) + " |")
    sw = result.get("sweeps", [])
    for sweep, label in (("peak", "peak (share of what the most workers take)"), ("overprovisioning", "DS2's over-provisioning"),
                         ("target", "HPA's CPU / utilisation target"), ("restart_pause", "restart pause, s")):
        rows = [x for x in sw if x.get("sweep") == sweep]
        if not rows:
            continue
        values = sorted({x["value"] for x in rows})
        mark = ("this project's assumption marked * (the thesis does not state its peak)" if sweep == "peak" else
                "the thesis's value marked *" if sweep in THESIS else "the pause measured on Spark first")
        print(f"\n### Sweep of {label}: p95 s (thr/in, mean workers, actions); {mark}\n")
        print("| query | workload | policy | setup | " + " | ".join(f"{v:g}{'*' if THESIS.get(sweep) == v else ''}"
                                                         for v in values) + " |")
        print("|---|---|---|---|" + "---|" * len(values))
        for q, w, pol, su in dict.fromkeys((x["query"], x["workload"], x["policy"], x["setup"]) for x in rows):
            cells = []
            for v in values:
                x = next((x for x in rows if (x["query"], x["workload"], x["policy"], x["setup"], x["value"]) == (q, w, pol, su, v)),
                         None)
                cell = _cell(x, turns=sweep == "overprovisioning")
                if x is not None and w == "steps":
                    cell += f"; {_conv(x, 1)}; {_conv(x, 2)}"
                cells.append(cell)
            print(f"| {q} | {w} | {pol} | {su} | " + " | ".join(cells) + " |")
    wl = result.get("rows", [])
    if wl:
        print("\n### One-stage query, 2,000 records/s per worker: p95 s (thr/in, mean workers, actions)\n")
        print("| workload | policy | " + " | ".join(setups) + " |")
        print("|---|---|" + "---|" * len(setups))
        for w, pol in dict.fromkeys((x["workload"], x["policy"]) for x in wl):
            print(f"| {w} | {pol} | " + " | ".join(_cell(next((x for x in wl if (x["workload"], x["policy"], x["setup"]) ==
                                                                 (w, pol, su)), None)) for su in setups) + " |")
    const = result.get("constant", [])
    if const:
        print("\n### Constant load: kept up / settled (not kept up: thr/in of the 2nd half, lag at the end s)\n")
        print("| P | load | start | setup | kept up | settled | not kept up |")
        print("|---|---|---|---|---|---|---|")
        for pp, load, start, su in dict.fromkeys((x["partitions"], x["load"], x["start"], x["setup"]) for x in const):
            xs = [x for x in const if (x["partitions"], x["load"], x["start"], x["setup"]) == (pp, load, start, su)]
            up = sum(x["kept_up"] for x in xs)
            settled = [x["policy"] for x in xs if x["actions_second_half"]]
            bad = "; ".join(f"{x['policy']} {x['throughput_second_half']:.2f}, {x['end_lag_s']:.0f}" for x in xs if not x["kept_up"])
            print(f"| {pp} | {load} | {start} | {su} | {up} of {len(xs)} | {len(xs) - len(settled)} of {len(xs)}"
                  f"{' (not: ' + ', '.join(settled) + ')' if settled else ''} | {bad} |")
    cpu = result.get("cpu", [])
    if cpu:
        ratios = sorted({x["cpu_per_busy"] for x in cpu})
        print("\n### HPA-CPU against the CPU it reads per busy second: p95 s (thr/in, mean workers, actions); "
              f"the simulator's value marked *\n")
        default = result.get("config", {}).get("cpu_per_busy")
        print("| workload | setup | " + " | ".join(f"{r:g}{'*' if r == default else ''}" for r in ratios) + " |")
        print("|---|---|" + "---|" * len(ratios))
        for w, su in dict.fromkeys((x["workload"], x["setup"]) for x in cpu):
            print(f"| {w} | {su} | " + " | ".join(_cell(next((x for x in cpu if (x["workload"], x["setup"], x["cpu_per_busy"])
                                                              == (w, su, r)), None)) for r in ratios) + " |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--max-workers", type=int, default=70)
    ap.add_argument("--cooldown", type=float, default=300)
    ap.add_argument("--peak", type=float, default=THESIS["peak"], help="the workloads' peak, a share of what --max-workers "
                    "take (this project's assumption: 0.8; the sweeps section varies it)")
    ap.add_argument("--setups", default="thesis/restart,waves/restart,waves/live",
                    help="sizing/actuation pairs: sizing thesis or waves, actuation restart (the thesis's) or live")
    ap.add_argument("--sections", default="nexmark,sweeps,workloads,constant,cpu")
    ap.add_argument("--queries", default=",".join(QUERY_WORKLOADS), help="the NexMark queries of the nexmark and sweeps "
                    "sections (the sweeps run map and swa among them)")
    ap.add_argument("--sweeps", default=",".join(SWEEPS), help="the settings the sweeps section varies")
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="the nexmark section's workloads (of each query's)")
    ap.add_argument("--restart-pause", type=float, help="seconds without batches after a restart (default: measured on "
                    "Spark, --mechanics, at the most state partitions measured)")
    ap.add_argument("--cpu-per-busy", type=float, help="CPU read per busy second (default: the simulator's, measured "
                    "live: bench/autoscale_live.py --cpu-rate)")
    ap.add_argument("--calibration", type=Path, help="bench/results/autoscale_live.json")
    ap.add_argument("--query", default="join", help="whose calibration: agg or join")
    ap.add_argument("--compare", action="store_true", help="replay the live runs of --query instead")
    ap.add_argument("--joint", action="store_true", help="add the joint section (as --sections ...,joint)")
    ap.add_argument("--nexmark", type=Path, default=INPUTS / "nexmark_costs.json",
                    help="the NexMark queries' per-stage costs (bench/autoscale_live.py --queries map,...; committed small)")
    ap.add_argument("--mechanics", type=Path, default=INPUTS / "spark_mechanics.json",
                    help="Spark's restart pause and the Incremental Join's state model (bench/autoscale_mechanics.py)")
    ap.add_argument("--ij-ttl", type=float, default=10.0, help="the Incremental Join's time-to-live, s (the live query's)")
    ap.add_argument("--out", type=Path, default=OUT / "autoscale_sim.json")
    ap.add_argument("--markdown", action="store_true", help="print the docs' tables from --out (no simulation)")
    ap.add_argument("--from", dest="sources", help="with --markdown: the JSONs to print from, comma-separated (runs of "
                    "different sections merged; default --out)")
    args = ap.parse_args()
    args.setups = parse_setups(args.setups)
    args.queries = [q for q in args.queries.split(",") if q]
    args.sweeps = [x for x in args.sweeps.split(",") if x]
    args.workloads = [x for x in args.workloads.split(",") if x]
    wrong = ([f"--queries {q}" for q in args.queries if q not in QUERY_WORKLOADS] + [f"--sweeps {x}" for x in args.sweeps
                                                                                    if x not in SWEEPS]
             + [f"--workloads {x}" for x in args.workloads if x not in WORKLOADS])
    if wrong:
        raise SystemExit(f"{', '.join(wrong)}: choose queries from {', '.join(QUERY_WORKLOADS)}, sweeps from "
                         f"{', '.join(SWEEPS)} and workloads from {', '.join(WORKLOADS)}")
    sections = [s for s in args.sections.split(",") if s] + (["joint"] if args.joint and "joint" not in args.sections else [])
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    if {"nexmark", "sweeps"} & set(sections) and not args.nexmark.exists():
        raise SystemExit(f"--nexmark {args.nexmark} does not exist (bench/autoscale_live.py --queries map,filter,ij,sa,swa "
                         "writes the costs)")
    if args.markdown:
        markdown(merged([Path(x) for x in args.sources.split(",")] if args.sources else [args.out]))
        return
    figures = args.out.resolve().parent
    figures.mkdir(parents=True, exist_ok=True)
    cfg = SimConfig(partitions=args.max_workers)
    if args.cpu_per_busy is not None:
        cfg = replace(cfg, cpu_per_busy=args.cpu_per_busy)
    mech = json.loads(args.mechanics.read_text()) if args.mechanics and args.mechanics.exists() else {}
    restart = mech.get("restart", {})
    if restart:
        most = restart[max(restart, key=int)]
        cfg = replace(cfg, restart_pause=float(most["pause_s"]), restart_reload=max(0.0, float(most["extra_first_batch_s"])),
                      launch_delay=float(most.get("launch_s", cfg.launch_delay)))
    if args.restart_pause is not None:
        cfg = replace(cfg, restart_pause=args.restart_pause)
    if args.calibration:
        live = json.loads(args.calibration.read_text())
        if args.compare:
            rows = compare(live, args.query, args.setups[0][0])
            (figures / f"autoscale_sim_vs_live_{args.query}.json").write_text(json.dumps(rows, indent=1, default=str))
            return
        cfg = calibrated(cfg, live["calibration"][args.query], ENGINE)
    print(f"engine: capacity {cfg.capacity:,.0f}/s per worker, {cfg.partitions} state partitions, CPU per busy second "
          f"{cfg.cpu_per_busy}, restart pause {cfg.restart_pause:.1f} s, first batch after it +{cfg.restart_reload or cfg.state_reload:.1f} s, "
          f"after a live action +{cfg.state_reload:.1f} s, launch delay "
          f"{cfg.launch_delay:.0f} s, {args.minutes:g} minutes, cooldown {args.cooldown:g} s, peak {args.peak:g} of "
          f"{args.max_workers} workers, setups {', '.join(setup_name(*x) for x in args.setups)}")
    result: dict = {"config": asdict(cfg), "minutes": args.minutes, "setups": [setup_name(*x) for x in args.setups],
                    "peak": args.peak, "max_workers": args.max_workers, "cooldown": args.cooldown,
                    "inputs": {"nexmark": str(args.nexmark), "mechanics": str(args.mechanics) if mech else None}}

    def save() -> None:
        args.out.write_text(json.dumps(result, default=lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else v,
                                       indent=1))

    for name in sections:
        print(f"\n== {name} ==", flush=True)
        if name == "workloads":
            result["rows"] = section_workloads(args, cfg, figures)
        elif name == "constant":
            result["constant"] = section_constant(args, cfg)
        elif name == "cpu":
            result["cpu"] = section_cpu(args, cfg)
        elif name == "joint":
            result["joint"] = section_joint(args, cfg)
        elif name == "sweeps":
            result["sweeps"] = section_sweeps(args, cfg, done=lambda rows: (result.__setitem__("sweeps", rows), save()))
        else:
            result["nexmark"] = section_nexmark(args, cfg, figures)
        save()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
