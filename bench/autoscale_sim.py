"""Autoscalers at the thesis's scale, simulated: every policy on every workload shape.

    nice -n 10 .venv/bin/python bench/autoscale_sim.py [--minutes 60 --max-workers 70 --sizing thesis,waves]
        [--sections workloads,constant,cpu,joint,nexmark] [--nexmark bench/results/nexmark_live.json] [--out FILE]

Sections (``--sections``, all but ``nexmark`` by default; ``nexmark`` needs ``--nexmark``):

- ``workloads``: per workload, policy and sizing (``thesis``: the worker count the policy
  names; ``waves``: the fewest executors giving that count's throughput over the state
  partitions, see :mod:`driftjoin.control.autoscale.policies`), the thesis's metrics (section
  4.5.1): p50/p95 queue latency of every record offered (a record still waiting at the end
  counts its wait so far), beside them the records processed over records offered and the p95
  over the processed records only, p95 processing-time latency, mean workers, scaling actions,
  and on the steps workload the convergence time and steps after each change. One PNG per
  workload and sizing (workers and latency over time, like the thesis's Figures 4.3 to 4.7).
- ``constant``: a constant load at 50%, 70% and 90% of what 10 (and ``--max-workers``)
  workers take, starting at 1 worker and at all of them: whether each policy keeps up in the
  second half of the run and stops acting (settles), per sizing.
- ``cpu``: HPA-CPU's result against the CPU it reads per unit of busy time (0.6, 0.8, 1.0,
  1.2; ``bench/autoscale_live.py --cpu-rate`` measures it), per sizing.
- ``joint``: balance and scale together on a skewed, changing workload (``control/joint.py``).
- ``nexmark``: the thesis's five queries (Map, Filter, Incremental Join, Sliding and Session
  Window Aggregation) as multi-stage queries with the per-stage costs measured live
  (``bench/autoscale_live.py --queries map,filter,ij,sa,swa`` writes them; ``--nexmark``
  reads that JSON), on the cosine workload (thesis 4.6.3) and on steps (convergence, 4.6.4).

``--calibration FILE`` takes the engine constants (capacity per worker, batch and task
overheads, executor launch delay, state reload, restart pause, CPU per busy second) from the
live runs' JSON (bench/autoscale_live.py, its ``calibration`` of ``--query``); with
``--compare`` it replays every live run of that query instead (same schedule, policy, range,
cooldown, monitoring window, trigger and actuation path) and prints live and simulated side
by side. Writes ``--out`` (default bench/results/autoscale_sim.json) after each section, and
the PNGs beside it.
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

POLICIES = ["dhalion", "ds2", "hpa-cpu", "hpa-varga", "batch-interval", "spark-dynamic-allocation"]
OUT = Path(__file__).resolve().parent / "results"
SECTIONS = ("workloads", "constant", "cpu", "joint", "nexmark")


def workloads(seconds: float, peak: float) -> dict[str, RateSchedule]:
    return {
        "increasing": RateSchedule("increasing", low=0.0, high=peak, duration=seconds),
        "decreasing": RateSchedule("decreasing", low=0.0, high=peak, duration=seconds),
        "cosine": RateSchedule("cosine", low=0.1 * peak, high=peak, duration=seconds),
        "random": RateSchedule("random", low=0.1 * peak, high=peak, duration=seconds, step=60, jump=0.15, seed=7),
        "steps": RateSchedule("steps", low=0.2 * peak, high=peak, duration=seconds, levels=(0.0, 1.0, 0.5)),
    }


def scaler(policy: str, lo: int, hi: int, cooldown: float, sizing: str, partitions: int) -> Scaler:
    return Scaler(make_policy(policy), lo, hi, cooldown=cooldown, sizing=sizing, partitions=partitions)


def row(name: str, policy: str, r: SimResult, sched: RateSchedule, seconds: float) -> dict:
    out = {"workload": name, "policy": policy, "p50": r.latency(0.5), "p95": r.latency(0.95),
           "p95_processed": r.latency(0.95, "processed"), "proc_p95": r.latency(0.95, "processing"),
           "throughput_ratio": r.processed_fraction(), "mean_workers": r.mean_workers(seconds), "actions": r.actions}
    if name == "steps":
        third = seconds / 3
        for i, at in enumerate((third, 2 * third), 1):
            t, steps = convergence(r.workers, at, at + third, settle=min(600.0, third / 2))
            out[f"converge{i}_s"], out[f"converge{i}_steps"] = t, steps
    return out


def _f(x, fmt: str) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, fmt)


HEAD = (f"{'workload':11s} {'policy':25s} {'sizing':7s} {'p50 s':>8s} {'p95 s':>8s} {'thr/in':>7s} {'read p95':>9s} "
        f"{'proc p95':>9s} {'workers':>8s} {'actions':>7s}  convergence")


def line(x: dict, sizing: str) -> str:
    conv = (f"{_f(x['converge1_s'], '.0f')}s/{x['converge1_steps']} then {_f(x['converge2_s'], '.0f')}s/{x['converge2_steps']}"
            if "converge1_s" in x else "")
    return (f"{x['workload']:11s} {x['policy']:25s} {sizing:7s} {x['p50']:8.1f} {x['p95']:8.1f} {x['throughput_ratio']:7.2f} "
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
        sim = row(run["workload"], run["policy"], r, sched, seconds)
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

def section_workloads(args, cfg: SimConfig, figures: Path) -> list[dict]:
    seconds = args.minutes * 60
    peak = 0.8 * cfg.capacity * args.max_workers      # the peak needs ~80% of the workers
    rows = []
    print(HEAD)
    for name, sched in workloads(seconds, peak).items():
        for sizing in args.sizing:
            runs = {}
            for policy in POLICIES:
                start = args.max_workers if name == "decreasing" else 1
                sim = Simulation(sched, scaler(policy, 1, args.max_workers, args.cooldown, sizing, cfg.partitions), cfg,
                                 initial_workers=start)
                runs[policy] = r = sim.run(seconds)
                x = row(name, policy, r, sched, seconds) | {"sizing": sizing}
                rows.append(x)
                print(line(x, sizing), flush=True)
            plot(f"{name} workload, sizing {sizing}", runs, seconds, figures / f"autoscale_sim_{name}_{sizing}.png")
    return rows


def section_constant(args, cfg: SimConfig) -> list[dict]:
    """Constant loads at or below capacity: does each policy keep up and stop acting? ``kept_up``:
    the second half of the run processed at least 98% of what it offered and the lag at the end
    is at most 30 s of input (a backlog being worked off reads above 1.00)."""
    seconds = args.minutes * 60
    half = seconds / 2
    rows = []
    print(f"{'P':>3s} {'load':>5s} {'start':>5s} {'policy':25s} {'sizing':7s} {'thr/in 2nd half':>15s} {'end lag s':>9s} "
          f"{'acts':>5s} {'acts 2nd half':>13s} {'final':>5s} {'p95 s':>8s}  workers over time")
    for parts in sorted({10, args.max_workers}):
        pcfg = replace(cfg, partitions=parts)
        for load in (0.5, 0.7, 0.9):
            rate = load * cfg.capacity * parts
            sched = RateSchedule("constant", high=rate, duration=seconds)
            for start in (1, parts):
                for policy in POLICIES:
                    for sizing in args.sizing:
                        r = Simulation(sched, scaler(policy, 1, parts, args.cooldown, sizing, parts), pcfg,
                                       initial_workers=start).run(seconds)
                        late = sum(b[2] for b in r.batches if b[0] >= half) / (rate * half)
                        late_actions = sum(1 for t, _ in r.workers if t >= half)
                        end_lag = (r.offered - sum(b[2] for b in r.batches)) / rate
                        x = {"partitions": parts, "load": load, "start": start, "policy": policy, "sizing": sizing,
                             "throughput_second_half": late, "actions": r.actions, "actions_second_half": late_actions,
                             "final_workers": r.workers[-1][1], "p95": r.latency(0.95), "end_lag_s": end_lag,
                             "kept_up": bool(late >= 0.98 and end_lag <= 30.0),
                             "throughput_ratio": r.processed_fraction(), "workers": [(float(t), k) for t, k in r.workers]}
                        rows.append(x)
                        trail = " ".join(str(k) for _, k in r.workers[:12]) + (" ..." if len(r.workers) > 12 else "")
                        print(f"{parts:3d} {load:5.1f} {start:5d} {policy:25s} {sizing:7s} {late:15.2f} {end_lag:9.1f} {r.actions:5d} "
                              f"{late_actions:13d} {r.workers[-1][1]:5d} {x['p95']:8.1f}  {trail}", flush=True)
    return rows


def section_cpu(args, cfg: SimConfig) -> list[dict]:
    """HPA-CPU against the CPU reading per busy second (the simulator's ``cpu_per_busy``)."""
    seconds = args.minutes * 60
    peak = 0.8 * cfg.capacity * args.max_workers
    rows = []
    print(f"{'workload':11s} {'cpu/busy':>8s} {'sizing':7s} {'p50 s':>8s} {'p95 s':>8s} {'thr/in':>7s} {'workers':>8s} {'actions':>7s}")
    for name, sched in workloads(seconds, peak).items():
        for ratio in (0.6, 0.8, 1.0, 1.2):
            for sizing in args.sizing:
                start = args.max_workers if name == "decreasing" else 1
                r = Simulation(sched, scaler("hpa-cpu", 1, args.max_workers, args.cooldown, sizing, cfg.partitions),
                               replace(cfg, cpu_per_busy=ratio), initial_workers=start).run(seconds)
                x = row(name, "hpa-cpu", r, sched, seconds) | {"cpu_per_busy": ratio, "sizing": sizing}
                rows.append(x)
                print(f"{name:11s} {ratio:8.1f} {sizing:7s} {x['p50']:8.1f} {x['p95']:8.1f} {x['throughput_ratio']:7.2f} "
                      f"{x['mean_workers']:8.1f} {x['actions']:7d}", flush=True)
    return rows


def section_joint(args, cfg: SimConfig) -> list[dict]:
    seconds = args.minutes * 60
    parts = 20
    jcfg = replace(cfg, partitions=parts)
    loads = moving_hotspot(worksets=8 * parts, hot=6, hot_share=0.4, period=600, seed=1)
    sched = RateSchedule("cosine", low=0.05 * jcfg.capacity * parts, high=0.6 * jcfg.capacity * parts, duration=seconds)
    rows = []
    print(f"skewed, moving hot spot, cosine rate, {parts} state partitions, sizing {args.sizing[0]}")
    print(f"{'policy':10s} {'plane':18s} {'p50 s':>8s} {'p95 s':>8s} {'thr/in':>7s} {'proc p95':>9s} {'workers':>8s} "
          f"{'scalings':>8s} {'balancings':>10s}")
    for policy in ("ds2", "hpa-varga", "dhalion"):
        for plane, fixed in (("autoscale only", None), ("balance only, 10", 10), ("balance only, 20", 20), ("joint", None)):
            lo, hi = (fixed, fixed) if fixed else (1, parts)
            mode = "none" if plane == "autoscale only" else ("joint" if plane == "joint" else "balance")
            bal = WorksetBalancerModel(loads, parts, mode=mode)
            r = Simulation(sched, scaler(policy, lo, hi, 120, args.sizing[0], parts), jcfg, initial_workers=fixed or 4,
                           balancer=bal).run(seconds)
            x = {"policy": policy, "plane": plane, "p50": r.latency(0.5), "p95": r.latency(0.95),
                 "throughput_ratio": r.processed_fraction(), "proc_p95": r.latency(0.95, "processing"),
                 "mean_workers": r.mean_workers(seconds), "actions": r.actions, "balances": r.balance_actions}
            rows.append(x)
            print(f"{policy:10s} {plane:18s} {x['p50']:8.1f} {x['p95']:8.1f} {x['throughput_ratio']:7.2f} {x['proc_p95']:9.1f} "
                  f"{x['mean_workers']:8.1f} {x['actions']:8d} {x['balances']:10d}", flush=True)
    return rows


def nexmark_config(base: SimConfig, measured: dict) -> SimConfig:
    """A query's :class:`SimConfig` from its live measurement (``bench/autoscale_live.py``'s
    ``nexmark_costs``): its stages with their cost per record and selectivity, the batch
    overhead and the state reload."""
    stages = tuple(StageModel(s["name"], s["cost"], s["selectivity"], None) for s in measured["stages"])
    return replace(base, stages=stages, capacity=1.0 / sum(s.cost for s in stages),
                   batch_overhead=measured.get("batch_overhead", base.batch_overhead),
                   state_reload=measured.get("state_reload", base.state_reload))


def section_nexmark(args, cfg: SimConfig, figures: Path) -> list[dict]:
    """The thesis's queries (4.5.2) with their measured stages, on cosine and steps."""
    measured = json.loads(Path(args.nexmark).read_text())["nexmark_costs"]
    seconds = args.minutes * 60
    rows = []
    print(HEAD.replace("workload   ", "query/load "))
    for query, m in measured.items():
        qcfg = nexmark_config(cfg, m)
        peak = 0.8 * qcfg.stage_capacity() * args.max_workers
        scheds = workloads(seconds, peak)
        for name in ("cosine", "steps"):
            for sizing in args.sizing:
                runs = {}
                for policy in POLICIES:
                    r = Simulation(scheds[name], scaler(policy, 1, args.max_workers, args.cooldown, sizing, qcfg.partitions),
                                   qcfg).run(seconds)
                    runs[policy] = r
                    x = row(name, policy, r, scheds[name], seconds) | {"query": query, "sizing": sizing,
                                                                        "stages": [s.name for s in qcfg.stages]}
                    rows.append(x)
                    x2 = dict(x, workload=f"{query}/{name}"[:11])
                    print(line(x2, sizing), flush=True)
                plot(f"{query}, {name} workload, sizing {sizing}", runs, seconds,
                     figures / f"autoscale_sim_nexmark_{query}_{name}_{sizing}.png")
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60)
    ap.add_argument("--max-workers", type=int, default=70)
    ap.add_argument("--cooldown", type=float, default=300)
    ap.add_argument("--sizing", default="thesis,waves", help="comma-separated: thesis, waves, or thesis,waves (side by side)")
    ap.add_argument("--sections", default="workloads,constant,cpu,joint")
    ap.add_argument("--cpu-per-busy", type=float, help="CPU read per busy second (default: the simulator's, measured "
                    "live: bench/autoscale_live.py --cpu-rate)")
    ap.add_argument("--calibration", type=Path, help="bench/results/autoscale_live.json")
    ap.add_argument("--query", default="join", help="whose calibration: agg or join")
    ap.add_argument("--compare", action="store_true", help="replay the live runs of --query instead")
    ap.add_argument("--joint", action="store_true", help="add the joint section (as --sections ...,joint)")
    ap.add_argument("--nexmark", type=Path, help="the live NexMark runs' JSON (bench/autoscale_live.py --queries map,...)")
    ap.add_argument("--out", type=Path, default=OUT / "autoscale_sim.json")
    args = ap.parse_args()
    args.sizing = [s for s in args.sizing.split(",") if s]
    sections = [s for s in args.sections.split(",") if s] + (["joint"] if args.joint and "joint" not in args.sections else [])
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}: choose from {', '.join(SECTIONS)}")
    if "nexmark" in sections and not args.nexmark:
        raise SystemExit("--sections nexmark needs --nexmark FILE (bench/autoscale_live.py --queries map,filter,ij,sa,swa)")
    figures = args.out.resolve().parent
    figures.mkdir(parents=True, exist_ok=True)
    cfg = SimConfig(partitions=args.max_workers)
    if args.cpu_per_busy is not None:
        cfg = replace(cfg, cpu_per_busy=args.cpu_per_busy)
    if args.calibration:
        live = json.loads(args.calibration.read_text())
        if args.compare:
            rows = compare(live, args.query, args.sizing[0])
            (figures / f"autoscale_sim_vs_live_{args.query}.json").write_text(json.dumps(rows, indent=1, default=str))
            return
        cfg = calibrated(cfg, live["calibration"][args.query], ENGINE)
    print(f"engine: capacity {cfg.capacity:,.0f}/s per worker, {cfg.partitions} state partitions, CPU per busy second "
          f"{cfg.cpu_per_busy}, {args.minutes:g} minutes, cooldown {args.cooldown:g} s, sizing {', '.join(args.sizing)}")
    result: dict = {"config": asdict(cfg), "minutes": args.minutes, "sizing": args.sizing}

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
        else:
            result["nexmark"] = section_nexmark(args, cfg, figures)
        save()
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
