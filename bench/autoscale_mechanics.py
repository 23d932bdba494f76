"""What the autoscaling simulator assumes about Spark, measured on a real standalone cluster.

    DRIFTJOIN_CLUSTER_PORT=7977 PYTHONPATH=$PWD flock -o /tmp/bench.lock bash scripts/cluster.sh start --workers 4
    PYTHONPATH=$PWD flock /tmp/bench.lock nice -n 10 .venv/bin/python bench/autoscale_mechanics.py \\
        --master spark://127.0.0.1:7977 [--sections waves,stateful,restart,ij] [--inputs bench/inputs/spark_mechanics.json]
    DRIFTJOIN_CLUSTER_PORT=7977 bash scripts/cluster.sh stop

Four executors of one core on this machine's two cores: as far as 2 cores allow, the
mechanisms the thesis-scale simulation (bench/autoscale_sim.py) rests on.

- ``waves``: a stage of ``P`` tasks on ``k`` executors (``requestTotalExecutors``), P from 1 to 12,
  k from 1 to 4. Tasks *throttled* by sleeping ``--task-seconds`` (no CPU: four executors on two
  cores run four at once) show the scheduling alone: Spark hands tasks to free executors, so
  the stage takes ``ceil(P / k)`` waves. Tasks that *spin* for that much CPU show the cores:
  beyond two running tasks they stretch (the simulator's ``machine_cores``).
- ``stateful``: a streaming aggregation over ``--state-partitions`` state partitions whose
  stateful tasks each sleep ``--task-seconds`` (one key per partition, chosen by Spark's own
  hash), under 1 to 4 executors changed live: the micro-batch takes as many waves as its
  stateful stage (with the state stores' locality preference, which Spark honours for
  ``spark.locality.wait``); on 6 partitions 3 and 4 executors give the same batch.
- ``restart``: the thesis's stop-and-restart on Spark (``RestartActuator``: ``query.stop()``,
  change the executors, start again from the checkpoint) of a stateful aggregation over
  ``--restart-partitions`` state partitions, alternately removing and adding executors: from the
  action to the first batch's start after it (the simulator's ``restart_pause`` when executors
  are removed; when they are added the restart also waits for them to launch, the simulator's
  ``launch_delay``; the batch the stop interrupted is lost), from the last batch's end before
  it (no batch for), and the first batch's extra time (``state_reload``).
- ``ij``: the NexMark Incremental Join (driftjoin.control.autoscale.nexmark) at one executor,
  constant rates and time-to-lives: its join stage's CPU time per micro-batch (the status
  store's, which the other jobs on these cores do not inflate) against the source records of
  the batch and the rows in its state (a least-squares fit of ``cpu = k + a * records + b *
  rows + c * records * rows / partitions``), the model of its growing, non-linear cost that the
  simulator takes (StageModel ``state_ttl``, ``state_cost``, ``probe_cost``).

Every measurement records the machine's load average beside it (other sessions share these 2
cores). Writes ``--out`` (default bench/results/autoscale_mechanics.json) and, with
``--inputs FILE``, the small summary that bench/autoscale_sim.py reads (restart pause, state
reload, the Incremental Join's state model), merged into FILE section by section.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

OUT = Path(__file__).resolve().parent / "results"


def load() -> float:
    return os.getloadavg()[0]


def _task(kind: str, seconds: float):
    def run(i: int) -> int:
        if kind == "sleep":
            time.sleep(seconds)
        else:                              # spin until this thread has used `seconds` of CPU
            t = time.thread_time()
            x = 0
            while time.thread_time() - t < seconds:
                x += 1
        return i
    return run


def section_waves(spark, act, args) -> list[dict]:
    """Stage time of P throttled (sleeping) or CPU-bound tasks on k executors."""
    sc = spark.sparkContext
    rows = []
    d = args.task_seconds
    print(f"{'kind':6s} {'k':>2s} {'P':>3s} {'waves':>5s} {'stage s':>8s} {'per wave s':>10s} {'load':>5s}")
    for k in args.executors:
        act.scale_to(k)
        for _ in range(2):                 # every executor's Python worker started
            sc.parallelize(range(4 * k), 4 * k).map(_task("sleep", 0.05)).count()
        for kind, sizes in (("sleep", args.tasks), ("cpu", sorted({1, 2, k, 2 * k}))):
            for p in sizes:
                times = []
                for _ in range(args.repeats):
                    t0 = time.time()
                    sc.parallelize(range(p), p).map(_task(kind, d)).count()
                    times.append(time.time() - t0)
                w = math.ceil(p / k)
                x = {"section": "waves", "kind": kind, "executors": k, "tasks": p, "waves": w, "task_s": d,
                     "stage_s": float(np.median(times)), "all_s": times, "load": load()}
                x["per_wave_s"] = x["stage_s"] / w
                rows.append(x)
                print(f"{kind:6s} {k:2d} {p:3d} {w:5d} {x['stage_s']:8.2f} {x['per_wave_s']:10.2f} {x['load']:5.1f}", flush=True)
    return rows


def _keys(spark, partitions: int) -> list[int]:
    """One grouping key per state partition: the first id whose Spark hash lands there."""
    from pyspark.sql import functions as F

    got = (spark.range(50 * partitions).select("id", F.expr(f"pmod(hash(id), {partitions})").alias("p")).toPandas()
           .groupby("p")["id"].min().sort_index())
    if len(got) != partitions:
        raise RuntimeError(f"no key for some of the {partitions} partitions")
    return [int(v) for v in got.to_numpy()]


class Progress:
    """Every progress event of the session's queries: (run id, batch start epoch s, duration s, rows)."""

    def __init__(self, spark) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        self.events: list[dict] = []
        lock = threading.Lock()
        events = self.events

        class _L(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:  # noqa: N802
                pass

            def onQueryProgress(self, event) -> None:  # noqa: N802
                p = event.progress
                from datetime import datetime, timezone
                start = datetime.strptime(p.timestamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
                ops = p.stateOperators
                with lock:
                    events.append({"run": str(p.runId), "batch": p.batchId, "start": start,
                                   "duration": p.durationMs.get("triggerExecution", 0) / 1000.0, "rows": p.numInputRows,
                                   "state_rows": sum(o.numRowsTotal for o in ops) if ops else 0})

            def onQueryIdle(self, event) -> None:  # noqa: N802
                pass

            def onQueryTerminated(self, event) -> None:  # noqa: N802
                pass

        self.listener = _L()
        spark.streams.addListener(self.listener)

    def of(self, run: str) -> list[dict]:
        return [e for e in list(self.events) if e["run"] == run and e["rows"] > 0]


def _wait_batches(prog: Progress, run: str, n: int, timeout: float = 300.0) -> list[dict]:
    deadline = time.time() + timeout
    while len(prog.of(run)) < n:
        if time.time() > deadline:
            raise RuntimeError(f"{n} batches did not come within {timeout:.0f} s")
        time.sleep(0.2)
    return prog.of(run)


def section_stateful(spark, act, prog: Progress, args, work: Path) -> list[dict]:
    """Batch duration of a stateful query whose stateful tasks sleep, on 1..4 executors."""
    import pandas as pd
    from pyspark.sql import functions as F
    from pyspark.sql.streaming.state import GroupStateTimeout

    p = args.state_partitions
    d = args.task_seconds
    spark.conf.set("spark.sql.shuffle.partitions", str(p))
    keys = _keys(spark, p)
    pick = F.element_at(F.array(*[F.lit(k) for k in keys]), (F.col("value") % p + 1).cast("int"))

    def sleepy(key, pdfs, state):
        n = sum(len(x) for x in pdfs)
        time.sleep(d)
        yield pd.DataFrame({"key": [key[0]], "n": [n]})

    out = (spark.readStream.format("rate").option("rowsPerSecond", 4 * p).load().select(pick.alias("key"))
           .groupBy("key").applyInPandasWithState(sleepy, "key long, n long", "n long", "update", GroupStateTimeout.NoTimeout))
    ck = work / "stateful"
    shutil.rmtree(ck, ignore_errors=True)
    act.scale_to(max(args.executors))
    q = (out.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(ck))
         .trigger(processingTime="500 milliseconds").start())
    rows = []
    try:
        run = str(q.runId)
        _wait_batches(prog, run, 3)
        print(f"{'k':>2s} {'P':>3s} {'waves':>5s} {'batch s (median)':>16s} {'batches':>7s} {'load':>5s}")
        for k in sorted(args.executors, reverse=True):
            act.scale_to(k)
            seen = len(prog.of(run))
            _wait_batches(prog, run, seen + 2 + args.batches)
            batches = prog.of(run)[seen + 2: seen + 2 + args.batches]
            dur = [b["duration"] for b in batches]
            x = {"section": "stateful", "executors": k, "partitions": p, "waves": math.ceil(p / k), "task_s": d,
                 "batch_s": float(np.median(dur)), "batches": dur, "load": load()}
            rows.append(x)
            print(f"{k:2d} {p:3d} {x['waves']:5d} {x['batch_s']:16.2f} {len(dur):7d} {x['load']:5.1f}", flush=True)
    finally:
        q.stop()
    return rows


def section_restart(spark, act, prog: Progress, args, work: Path) -> list[dict]:
    """The stop-and-restart pause of a stateful aggregation, per state partition count."""
    from pyspark.sql import functions as F

    from driftjoin.control.autoscale.actuator import RestartActuator

    rows = []
    print(f"{'P':>3s} {'from':>4s} {'to':>3s} {'actuation s':>11s} {'pause s':>7s} {'no batch for s':>14s} {'first batch s':>13s} "
          f"{'median batch s':>14s} {'load':>5s}")
    for p in args.restart_partitions:
        spark.conf.set("spark.sql.shuffle.partitions", str(p))
        ck = work / f"restart{p}"
        shutil.rmtree(ck, ignore_errors=True)
        agg = (spark.readStream.format("rate").option("rowsPerSecond", args.restart_rate).load()
               .groupBy((F.col("value") % 10_000).alias("k")).agg(F.count("*").alias("n"), F.sum("value").alias("s")))

        def start():
            return (agg.writeStream.format("noop").outputMode("update").option("checkpointLocation", str(ck))
                    .trigger(processingTime="1 second").start())

        counts = [max(args.executors), min(2, max(args.executors))]
        act.scale_to(counts[0])
        restart = RestartActuator(act, start)
        restart.query = start()
        try:
            _wait_batches(prog, str(restart.query.runId), 4)
            for i in range(args.restarts):
                before_run = str(restart.query.runId)
                _wait_batches(prog, before_run, len(prog.of(before_run)) + 2)
                target = counts[(i + 1) % 2]
                src = act.count()
                t_action = time.time()
                took = restart.scale_to(target)
                after_run = str(restart.query.runId)
                after = _wait_batches(prog, after_run, 3)
                before = [b for b in prog.of(before_run) if b["start"] + b["duration"] <= t_action + 30]
                last_end = max(b["start"] + b["duration"] for b in before)
                first = min(after, key=lambda b: b["start"])
                steady = float(np.median([b["duration"] for b in before[-5:]]))
                x = {"section": "restart", "partitions": p, "from": src, "to": target, "actuation_s": took,
                     "pause_s": first["start"] - t_action, "no_batch_s": first["start"] - last_end,
                     "first_batch_s": first["duration"], "median_batch_s": steady,
                     "extra_first_batch_s": first["duration"] - steady, "load": load()}
                rows.append(x)
                print(f"{p:3d} {src:4d} {target:3d} {took:11.1f} {x['pause_s']:7.1f} {x['no_batch_s']:14.1f} {x['first_batch_s']:13.1f} "
                      f"{steady:14.1f} {x['load']:5.1f}", flush=True)
        finally:
            restart.query.stop()
    return rows


def stage_batches(spark, run: str) -> dict[int, list[dict]]:
    """Per micro-batch of query run ``run``, its completed stages in order: tasks, records in, run
    time and CPU time (seconds; CPU time is what the work took, whatever else shared the cores)."""
    import re

    from driftjoin.spark.runtime.jvm import stage_summaries

    out: dict[int, list] = {}
    for st in stage_summaries(spark, complete_only=True):
        desc = st.description()
        text = desc.get() if desc.isDefined() else ""
        m_run, m_batch = re.search(r"runId = ([0-9a-f-]+)", text), re.search(r"batch = (\d+)", text)
        if not m_run or m_run.group(1) != run or not m_batch:
            continue
        out.setdefault(int(m_batch.group(1)), []).append(
            (int(st.stageId()), {"tasks": int(st.numTasks()), "records_in": float(st.inputRecords() + st.shuffleReadRecords()),
                                 "run_s": st.executorRunTime() / 1000.0, "cpu_s": st.executorCpuTime() / 1e9}))
    return {b: [x for _, x in sorted(v, key=lambda t: t[0])] for b, v in out.items()}


def section_ij(spark, act, prog: Progress, args, work: Path) -> list[dict]:
    """The Incremental Join's join stage per micro-batch: CPU and run time against the records
    it takes and the rows in its state, at constant rates and time-to-lives, one executor."""
    from driftjoin.control.autoscale.nexmark import NexmarkSettings, query

    act.scale_to(1)
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    rows = []
    print(f"{'rate/s':>8s} {'ttl s':>5s} {'batches':>7s} {'source/batch':>12s} {'state rows':>10s} {'join cpu s':>10s} "
          f"{'join run s':>10s} {'cpu us/record':>13s} {'load':>5s}")
    for rate in args.ij_rates:
        for ttl in args.ij_ttls:
            ck = work / f"ij_{rate}_{ttl}"
            shutil.rmtree(ck, ignore_errors=True)
            seconds = args.ij_seconds
            stream = (spark.readStream.format("driftjoin").option("schedule", f"constant:high={rate},duration={seconds + 60}")
                      .option("dim", 1).option("seed", 1).option("partitions", 2).option("start", time.time() + 5)
                      .option("max_records_per_batch", int(rate * 20)).load())
            q = (query(stream, "ij", NexmarkSettings(ttl=float(ttl))).writeStream.format("noop").outputMode("append")
                 .option("checkpointLocation", str(ck)).trigger(processingTime="1 second").start())
            try:
                run = str(q.runId)
                _wait_batches(prog, run, 2)
                time.sleep(seconds)
            finally:
                q.stop()
            progress = {e["batch"]: e for e in prog.of(run)}
            stages = stage_batches(spark, run)
            got = []
            for b, sts in sorted(stages.items()):
                e = progress.get(b)
                if e is None or b < 2 or len(sts) < 3:        # the first batches start the Python and state stores
                    continue
                join = sts[-1]
                x = {"section": "ij", "rate": rate, "ttl": ttl, "partitions": 2, "batch": b, "source_records": e["rows"],
                     "state_rows": e["state_rows"], "batches": 1, "join_cpu_s": join["cpu_s"], "join_run_s": join["run_s"],
                     "join_in": join["records_in"], "stages": sts, "load": load()}
                got.append(x)
            rows += got
            if got:
                cpu = sum(x["join_cpu_s"] for x in got)
                src = sum(x["source_records"] for x in got)
                print(f"{rate:8d} {ttl:5d} {len(got):7d} {src / len(got):12.0f} {np.median([x['state_rows'] for x in got]):10.0f} "
                      f"{cpu:10.2f} {sum(x['join_run_s'] for x in got):10.2f} {1e6 * cpu / max(src, 1):13.3f} {load():5.1f}",
                      flush=True)
    return rows


def fit_ij(rows: list[dict]) -> dict:
    """Least squares (non-negative) of the join stage's CPU time per batch (or useful time per
    window) on (1, source records, state rows x batches, source records x state rows of a
    partition): a fixed cost per batch, a cost per record, a scan of the state per batch, a probe
    whose cost grows with the state; and the rows per source record of the time-to-live (state
    rows / (rate x ttl))."""
    from scipy.optimize import nnls

    pts = [r for r in rows if r["batches"]]
    if len(pts) < 5:
        return {}
    n = np.array([r["source_records"] for r in pts])
    s = np.array([r["state_rows"] for r in pts])
    b = np.array([r["batches"] for r in pts], dtype=float)
    u = np.array([r.get("join_cpu_s", r.get("join_useful_s")) for r in pts])
    parts = np.array([r.get("partitions", 2) for r in pts], dtype=float)
    a_mat = np.column_stack([b, n, s * b, n * s / parts])
    scale = a_mat.max(axis=0)
    scale[scale == 0] = 1.0
    coef, _ = nnls(a_mat / scale, u)
    coef = coef / scale
    pred = a_mat @ coef
    r2 = 1.0 - float(np.sum((u - pred) ** 2) / max(np.sum((u - u.mean()) ** 2), 1e-12))
    steady = [r["state_rows"] / (r["rate"] * r["ttl"]) for r in pts if r["state_rows"] > 0]
    return {"per_batch_s": float(coef[0]), "per_source_record_s": float(coef[1]), "per_state_row_per_batch_s": float(coef[2]),
            "per_record_per_partition_row_s": float(coef[3]), "r2": r2, "windows": len(pts),
            "state_rows": [float(s.min()), float(s.max())],
            "state_rows_per_source_record_of_ttl": float(np.median(steady)) if steady else math.nan}


def summarise(res: dict) -> dict:
    """The small form bench/autoscale_sim.py reads (bench/inputs/spark_mechanics.json)."""
    out: dict = {}
    rs = res.get("restart", [])
    if rs:
        by_p: dict[int, list[dict]] = {}
        for r in rs:
            by_p.setdefault(r["partitions"], []).append(r)
        out["restart"] = {}
        for p, v in by_p.items():
            down = [r for r in v if r["to"] < r["from"]] or v
            up = [r for r in v if r["to"] > r["from"]]
            x = {"pause_s": float(np.median([r["pause_s"] for r in down])),
                 "extra_first_batch_s": float(np.median([r["extra_first_batch_s"] for r in v])),
                 "actuation_s": float(np.median([r["actuation_s"] for r in v])), "n": len(v),
                 "load": [min(r["load"] for r in v), max(r["load"] for r in v)]}
            if up and any(r["to"] < r["from"] for r in v):   # a restart that adds executors also waits for them
                x["pause_up_s"] = float(np.median([r["pause_s"] for r in up]))
                x["launch_s"] = max(0.0, x["pause_up_s"] - x["pause_s"])
            out["restart"][str(p)] = x
    if res.get("ij"):
        out["ij"] = fit_ij(res["ij"])
    for name in ("waves", "stateful"):
        if res.get(name):
            out[name] = [{k: v for k, v in r.items() if k not in ("all_s", "batches", "section")} for r in res[name]]
    out["measured"] = res.get("measured", {})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", default=os.environ.get("DRIFTJOIN_CLUSTER", "spark://127.0.0.1:7077"))
    ap.add_argument("--sections", default="waves,stateful,restart,ij")
    ap.add_argument("--executors", default="1,2,3,4", help="executor counts (the cluster's workers of one core)")
    ap.add_argument("--tasks", default="1,2,3,4,6,8,12", help="task counts of the waves section")
    ap.add_argument("--task-seconds", type=float, default=1.0, help="each throttled task's sleep (or CPU) seconds")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--state-partitions", type=int, default=6)
    ap.add_argument("--batches", type=int, default=4, help="batches measured per executor count (stateful)")
    ap.add_argument("--restart-partitions", default="4,70")
    ap.add_argument("--restart-rate", type=int, default=2000)
    ap.add_argument("--restarts", type=int, default=4)
    ap.add_argument("--ij-rates", default="20000,60000")
    ap.add_argument("--ij-ttls", default="5,40")
    ap.add_argument("--ij-seconds", type=float, default=80.0)
    ap.add_argument("--ij-window", type=float, default=10.0)
    ap.add_argument("--out", type=Path, default=OUT / "autoscale_mechanics.json")
    ap.add_argument("--inputs", type=Path, help="merge the summary into this small file (bench/inputs/spark_mechanics.json)")
    ap.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "driftjoin-mechanics")
    ap.add_argument("--summarise", action="store_true", help="only write --inputs from the measurements in --out")
    args = ap.parse_args()
    if args.summarise:
        if not args.inputs:
            raise SystemExit("--summarise writes --inputs FILE: give it")
        full = json.loads(args.out.read_text())
        summary = summarise(full)
        by = full.get("measured_by_section", {})
        summary["measured"] = {name: by.get(name, full["measured"]) for name in ("waves", "stateful", "restart", "ij") if name in full}
        args.inputs.write_text(json.dumps(summary, indent=1, default=str) + "\n")
        print(f"wrote {args.inputs} from {args.out}")
        return
    args.executors = [int(x) for x in args.executors.split(",")]
    args.tasks = [int(x) for x in args.tasks.split(",")]
    args.restart_partitions = [int(x) for x in args.restart_partitions.split(",")]
    args.ij_rates = [int(x) for x in args.ij_rates.split(",")]
    args.ij_ttls = [int(x) for x in args.ij_ttls.split(",")]
    sections = args.sections.split(",")
    unknown = set(sections) - {"waves", "stateful", "restart", "ij"}
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}: choose from waves, stateful, restart, ij")
    if args.master.startswith("local"):
        raise SystemExit("the mechanics need executors to add and remove: a standalone cluster (scripts/cluster.sh start "
                         "--workers 4) and --master spark://...")

    from driftjoin.control.autoscale.actuator import ExecutorActuator
    from driftjoin.spark.runtime.session import cluster_session

    args.work.mkdir(parents=True, exist_ok=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    spark = cluster_session(args.master, 2, "driftjoin-autoscale-mechanics", max_executors=max(args.executors))
    act = ExecutorActuator(spark, executor_timeout=180)
    act.check()
    prog = Progress(spark)
    res: dict = json.loads(args.out.read_text()) if args.out.exists() else {}
    for name in ("waves", "stateful", "restart", "ij"):      # sections of an earlier run keep when they were measured
        if name in res:
            res.setdefault("measured_by_section", {}).setdefault(name, dict(res.get("measured", {})))
    res["measured"] = {"when": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "master": args.master,
                       "load_start": load(), "cores": os.cpu_count(), "spark": spark.version}
    for name in sections:
        print(f"\n== {name} ==", flush=True)
        if name == "waves":
            res[name] = section_waves(spark, act, args)
        elif name == "stateful":
            res[name] = section_stateful(spark, act, prog, args, args.work)
        elif name == "restart":
            res[name] = section_restart(spark, act, prog, args, args.work)
        else:
            res[name] = section_ij(spark, act, prog, args, args.work)
        res["measured"]["load_end"] = load()
        res["measured"]["seconds"] = round(time.time() - t0)
        res.setdefault("measured_by_section", {})[name] = dict(res["measured"])
        args.out.write_text(json.dumps(res, indent=1, default=str))
        if args.inputs:
            old = json.loads(args.inputs.read_text()) if args.inputs.exists() else {}
            summary = summarise({name: res[name], "measured": res["measured"]})
            old.update({k: v for k, v in summary.items() if k != "measured"})
            old.setdefault("measured", {})[name] = res["measured"] | {"load_end": load()}
            args.inputs.write_text(json.dumps(old, indent=1, default=str) + "\n")
    if "ij" in res:
        print("Incremental Join model:", json.dumps(fit_ij(res["ij"])))
    print(f"wrote {args.out}" + (f" and {args.inputs}" if args.inputs else ""))
    spark.stop()


if __name__ == "__main__":
    main()
