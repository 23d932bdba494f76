"""Autoscalers at the thesis's scale, simulated: every policy on every workload shape.

    nice -n 10 .venv/bin/python bench/autoscale_sim.py [--minutes 60 --max-workers 70 --joint]

Prints, per workload and policy, the thesis's metrics (section 4.5.1): p50/p95 queue latency
(batch start minus the time the record was offered), p95 processing-time latency (batch end
minus that time), throughput over input rate, mean workers, scaling actions, and on the steps
workload the convergence time and steps after each change. Writes bench/results/autoscale_sim.json
and one PNG per workload (workers and latency over time, one line per policy, like the
thesis's Figures 4.3 to 4.7). ``--joint`` adds the balance-and-scale comparison on a skewed,
changing workload. ``--calibration FILE`` takes the engine constants (capacity per worker,
batch and task overheads, executor launch delay, state reload, restart pause) from the live
runs' JSON (bench/autoscale_live.py, its ``calibration`` of ``--query``); with ``--compare``
it replays every live run of that query instead (same schedule, policy, range, cooldown,
monitoring window, trigger and actuation path) and prints live and simulated side by side:

    nice -n 10 .venv/bin/python bench/autoscale_sim.py --calibration bench/results/autoscale_live.json --query agg --compare
"""

from __future__ import annotations

import argparse
import json
import math
from dataclasses import asdict, replace
from pathlib import Path

import numpy as np

from driftjoin.control.autoscale import Scaler, make_policy
from driftjoin.control.autoscale.simulator import SimConfig, SimResult, Simulation, convergence
from driftjoin.control.joint import WorksetBalancerModel, moving_hotspot
from driftjoin.generators.rates import RateSchedule

POLICIES = ["dhalion", "ds2", "hpa-cpu", "hpa-varga", "batch-interval", "spark-dynamic-allocation"]
OUT = Path(__file__).resolve().parent / "results"


def workloads(seconds: float, peak: float) -> dict[str, RateSchedule]:
    return {
        "increasing": RateSchedule("increasing", low=0.0, high=peak, duration=seconds),
        "decreasing": RateSchedule("decreasing", low=0.0, high=peak, duration=seconds),
        "cosine": RateSchedule("cosine", low=0.1 * peak, high=peak, duration=seconds),
        "random": RateSchedule("random", low=0.1 * peak, high=peak, duration=seconds, step=60, jump=0.15, seed=7),
        "steps": RateSchedule("steps", low=0.2 * peak, high=peak, duration=seconds, levels=(0.0, 1.0, 0.5)),
    }


def row(name: str, policy: str, r: SimResult, sched: RateSchedule, seconds: float) -> dict:
    offered = float(sched.count(seconds))
    out = {"workload": name, "policy": policy, "p50": r.latency(0.5), "p95": r.latency(0.95),
           "proc_p95": r.latency(0.95, "processing"), "throughput_ratio": sum(b[2] for b in r.batches) / max(offered, 1),
           "mean_workers": r.mean_workers(seconds), "actions": r.actions}
    if name == "steps":
        third = seconds / 3
        for i, at in enumerate((third, 2 * third), 1):
            t, steps = convergence(r.workers, at, at + third, settle=min(600.0, third / 2))
            out[f"converge{i}_s"], out[f"converge{i}_steps"] = t, steps
    return out


def plot(name: str, runs: dict[str, SimResult], seconds: float) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    for policy, r in runs.items():
        t, k = zip(*(r.workers + [(seconds, r.workers[-1][1])]))
        a.step(np.array(t) / 60, k, where="post", label=policy)
        starts = np.array([x[0] for x in r.batches])
        per_batch = [np.median(q) for q in np.split(r.queue_latency[0], np.cumsum([min(x[2], 256) for x in r.batches])[:-1])] if r.batches else []
        b.plot(starts / 60, per_batch, lw=0.8, label=policy)
    a.set_ylabel("workers")
    b.set_ylabel("queue latency (s, median per batch)")
    b.set_yscale("symlog")
    b.set_xlabel("minutes")
    a.legend(fontsize=7, ncol=3)
    a.set_title(f"{name} workload (simulated)")
    fig.tight_layout()
    fig.savefig(OUT / f"autoscale_sim_{name}.png", dpi=110)
    plt.close(fig)


#: engine constants a calibration carries to the thesis-scale runs (the run settings stay)
ENGINE = ("capacity", "batch_overhead", "task_overhead", "launch_delay", "state_reload", "restart_pause", "cpu_per_busy")
#: and what a replay of a live run takes as well (the machine's contention included)
REPLAY = ENGINE + ("machine_cores", "partitions", "trigger_interval", "monitoring_window", "idle_timeout")


def calibrated(base: SimConfig, cal: dict, fields: tuple[str, ...]) -> SimConfig:
    return replace(base, **{k: float(cal[k]) if k != "partitions" else int(cal[k]) for k in fields
                            if cal.get(k) is not None and math.isfinite(float(cal[k]))})


def compare(live: dict, query: str) -> list[dict]:
    """Every live run of ``query`` replayed in the simulator with the calibration, side by side."""
    cal = live["calibration"][query]
    cfg = calibrated(SimConfig(), cal, REPLAY)
    out = []
    print(f"live vs simulated, {query}: capacity {cfg.capacity:,.0f}/s per worker, batch overhead {cfg.batch_overhead:.1f} s, "
          f"task overhead {cfg.task_overhead:.2f} s, launch {cfg.launch_delay:.0f} s, reload {cfg.state_reload:.1f} s, "
          f"restart pause {cfg.restart_pause:.0f} s, machine cores {cfg.machine_cores:.2f}")
    print(f"{'workload':10s} {'policy':24s} {'mode':7s} {'p50 live/sim':>13s} {'p95 live/sim':>13s} {'thr/in live/sim':>16s} "
          f"{'workers live/sim':>17s} {'actions live/sim':>16s}")
    for run in live["runs"]:
        if run["query"] != query or run.get("joint") or run.get("balance", "none") != "none":
            continue
        sched = RateSchedule.parse(run["spec"])
        seconds = run["seconds"]
        start = cfg.partitions if run["workload"] == "decreasing" and run["policy"] != "spark-dynamic-allocation" else 1
        scaler = Scaler(make_policy(run["policy"]), 1, cfg.partitions, cooldown=cal["cooldown"])
        r = Simulation(sched, scaler, replace(cfg, mode=run["mode"]), initial_workers=start).run(seconds)
        sim = row(run["workload"], run["policy"], r, sched, seconds)
        x = {"workload": run["workload"], "policy": run["policy"], "mode": run["mode"], "live": {k: run.get(k) for k in
             ("p50", "p95", "proc_p95", "throughput_ratio", "mean_workers", "n_actions")}, "sim": sim}
        out.append(x)

        def pair(a, b, fmt: str) -> str:
            fa = "-" if a is None or (isinstance(a, float) and math.isnan(a)) else format(a, fmt)
            fb = "-" if b is None or (isinstance(b, float) and math.isnan(b)) else format(b, fmt)
            return f"{fa}/{fb}"
        lv = x["live"]
        print(f"{run['workload']:10s} {run['policy']:24s} {run['mode']:7s} {pair(lv['p50'], sim['p50'], '.1f'):>13s} "
              f"{pair(lv['p95'], sim['p95'], '.1f'):>13s} {pair(lv['throughput_ratio'], sim['throughput_ratio'], '.2f'):>16s} "
              f"{pair(lv['mean_workers'], sim['mean_workers'], '.2f'):>17s} {pair(lv['n_actions'], sim['actions'], 'd'):>16s}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--max-workers", type=int, default=70)
    ap.add_argument("--cooldown", type=float, default=300)
    ap.add_argument("--calibration", type=Path, help="bench/results/autoscale_live.json")
    ap.add_argument("--query", default="join", help="whose calibration: agg or join")
    ap.add_argument("--compare", action="store_true", help="replay the live runs of --query instead")
    ap.add_argument("--joint", action="store_true")
    args = ap.parse_args()
    OUT.mkdir(exist_ok=True)
    seconds = args.minutes * 60
    cfg = SimConfig(partitions=args.max_workers)
    if args.calibration:
        live = json.loads(args.calibration.read_text())
        if args.compare:
            rows = compare(live, args.query)
            (OUT / f"autoscale_sim_vs_live_{args.query}.json").write_text(json.dumps(rows, indent=1, default=str))
            return
        cfg = calibrated(cfg, live["calibration"][args.query], ENGINE)
    peak = 0.8 * cfg.capacity * args.max_workers      # the peak needs ~80% of the workers
    rows = []
    print(f"{'workload':11s} {'policy':25s} {'p50 s':>8s} {'p95 s':>8s} {'proc p95':>9s} {'thr/in':>7s} {'workers':>8s} {'actions':>7s}  convergence")
    for name, sched in workloads(seconds, peak).items():
        runs = {}
        for policy in POLICIES:
            start = args.max_workers if name == "decreasing" else 1
            sim = Simulation(sched, Scaler(make_policy(policy), 1, args.max_workers, cooldown=args.cooldown), cfg, initial_workers=start)
            runs[policy] = r = sim.run(seconds)
            rows.append(row(name, policy, r, sched, seconds))
            x = rows[-1]
            conv = (f"{x['converge1_s']:.0f}s/{x['converge1_steps']} then {x['converge2_s']:.0f}s/{x['converge2_steps']}"
                    if name == "steps" else "")
            print(f"{name:11s} {policy:25s} {x['p50']:8.1f} {x['p95']:8.1f} {x['proc_p95']:9.1f} {x['throughput_ratio']:7.2f} "
                  f"{x['mean_workers']:8.1f} {x['actions']:7d}  {conv}")
        plot(name, runs, seconds)
    joint_rows = []
    if args.joint:
        parts = 20
        jcfg = replace(cfg, partitions=parts)
        loads = moving_hotspot(worksets=8 * parts, hot=6, hot_share=0.4, period=600, seed=1)
        sched = RateSchedule("cosine", low=0.05 * jcfg.capacity * parts, high=0.6 * jcfg.capacity * parts, duration=seconds)
        print(f"\nskewed, moving hot spot, cosine rate, {parts} state partitions")
        print(f"{'policy':10s} {'plane':18s} {'p50 s':>8s} {'p95 s':>8s} {'proc p95':>9s} {'workers':>8s} {'scalings':>8s} {'balancings':>10s}")
        for policy in ("ds2", "hpa-varga", "dhalion"):
            for plane, fixed in (("autoscale only", None), ("balance only, 10", 10), ("balance only, 20", 20), ("joint", None)):
                lo, hi = (fixed, fixed) if fixed else (1, parts)
                mode = "none" if plane == "autoscale only" else ("joint" if plane == "joint" else "balance")
                bal = WorksetBalancerModel(loads, parts, mode=mode)
                r = Simulation(sched, Scaler(make_policy(policy), lo, hi, cooldown=120), jcfg, initial_workers=fixed or 4,
                               balancer=bal).run(seconds)
                x = {"policy": policy, "plane": plane, "p50": r.latency(0.5), "p95": r.latency(0.95),
                     "proc_p95": r.latency(0.95, "processing"), "mean_workers": r.mean_workers(seconds),
                     "actions": r.actions, "balances": r.balance_actions}
                joint_rows.append(x)
                print(f"{policy:10s} {plane:18s} {x['p50']:8.1f} {x['p95']:8.1f} {x['proc_p95']:9.1f} {x['mean_workers']:8.1f} "
                      f"{x['actions']:8d} {x['balances']:10d}")
    (OUT / "autoscale_sim.json").write_text(json.dumps({"config": asdict(cfg), "minutes": args.minutes, "rows": rows,
                                                          "joint": joint_rows}, default=lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else v, indent=1))


if __name__ == "__main__":
    main()
