"""``equi_join`` and ``topk_set_join`` on Spark against their cores, on the same data in one run.

Issue 13's goal: "equi_join and topk_set_join Spark time within 2x of their cores' time on the
same data; where a goal is missed, the breakdown must say what is left and why". Each run feeds
the same input, cut into the same micro-batches, to the Spark operator (a streaming query over
Parquet files, one file per side and micro-batch, ``maxFilesPerTrigger=1``,
``trigger(availableNow=True)``, noop sink) and to its plain Python/numpy core in this process:

* ``equi``: a Zipf stream (``bench/hypercube_spark.py``'s files) through
  ``equi_join(algorithm="shc")`` with the default parallel routing (stateless routers, the
  driver's control plane, ``p`` stateful workers) and ``output="rows"`` (the joined rows, as a
  user gets them); the core is :class:`driftjoin.hypercube.distributed.DistributedJoin`, the
  in-process reference the Spark operators follow (the same routing tables, planner and
  :class:`~driftjoin.hypercube.migration.WorkerState`), which keeps the pairs as id tuples;
* ``topk-p1``, ``topk-p2-owner``, ...: a Zipf set stream (``bench/swoop_core.py``'s ``zipf``
  workload, string tokens) through ``topk_set_join`` at parallelism 1 and 2 (``--topk-ps
  1,2,2:probe``: the partitioned design of each p > 1); the core is the compiled
  :class:`~driftjoin.swoop.Swoop` engine inserting the same sets in the same order (and for
  p > 1 also :class:`~driftjoin.swoop.partitioned.PartitionedTopK` with the same p and design in
  one process, its workers one after the other).

Columns: ``spark_s`` the micro-batches' time (the sum of each batch's ``triggerExecution`` from
the query's progress, read with :class:`~driftjoin.spark.runtime.progress.ProgressLog`), ``whole_s``
from ``start()`` to the end of the query, ``cores`` the CPU seconds the session used over that
time divided by it (JVM, Python workers and driver: how much of the machine one query already
takes, so what a second worker can still add), ``core_s`` the core's time over the same batches
(wall clock, one process), their ratios, and the output rows of both (they must agree: the workers'
pairs or the change rows the operator emitted, from its statistics, against the core's).

The breakdown of the Spark time, summed over the batches: Spark's per-batch phases
(``durationMs``: query planning, offsets, ``addBatch`` which runs the job, WAL and commit log
writes) and, inside ``addBatch``, the task seconds the operators record in their statistics
(``metrics_dir``: state read, the join itself, state write, and for ``equi`` the state moves and
the build of the joined rows' columns, ``output``)
plus the state store commit (``stateOperators[].commitTimeMs``). Task seconds are summed over
the tasks, which share 2 cores; what the records do not cover (Python worker round trips,
Arrow/pandas conversion, routing, shuffles, JSON rows, task scheduling) is the rest.

With ``--stages`` Spark's event log splits each batch's job into its stateless stage (scan,
routers, shuffle write) and its stateful stage (workers, state commit, sink): wall time, task
run time and the stages' own time metrics (:func:`stage_times`). ``--equi-partitions 4,2`` runs
``equi_join`` with each number of Spark partitions for its workers in one session (a value may
repeat, to interleave runs against the machine's drifting load).

Run: ``nice -n 10 .venv/bin/python bench/spark_vs_core.py`` (sizes: ``--equi-size``,
``--topk-sets``, ...; ``--only equi`` or ``--only topk``). Writes
``bench/results/spark_vs_core.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
from hypercube_spark import DOMAIN, _read, write_stream  # bench/ is sys.path[0]
from swoop_core import RATE, WORKLOADS

from driftjoin.control.autoscale.collector import session_cpu
from driftjoin.hypercube import ZipfStreamSpec, zipf_stream
from driftjoin.hypercube.distributed import DistributedJoin
from driftjoin.spark.equi.api import equi_join
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.runtime.progress import ProgressLog
from driftjoin.spark.runtime.session import local_session
from driftjoin.spark.topk.api import topk_set_join
from driftjoin.swoop import InvalidSetError, Swoop
from driftjoin.swoop.generator import set_stream
from driftjoin.swoop.partitioned import PartitionedTopK

RESULTS = Path(__file__).resolve().parent / "results"
SET_SCHEMA = "id long, tokens array<string>, ts double"
#: Spark's per-batch phases (``durationMs``), in the order a batch runs them.
PHASES = ("latestOffset", "getBatch", "queryPlanning", "walCommit", "addBatch", "commitOffsets")
TASK_COLOURS = {"state_read": "#8172b3", "moves": "#937860", "order": "#da8bc3", "join": "#55a868",
                "state_write": "#dd8452", "output": "#c44e52", "merge state_read": "#c6bde3", "merge join": "#a8d5b5",
                "merge state_write": "#f0c3a6"}


# ---- Spark: one streaming query, its progress and its operators' records ----------------------

def run_query(df, work: Path, events: Path | None = None) -> dict[str, Any]:
    """Run ``df`` to the noop sink until its input is consumed; Spark's times and phases (and
    with ``events``, Spark's event log folder, the stages' times: :func:`stage_times`)."""
    cpu = session_cpu(df.sparkSession)
    started, cpu_started = time.perf_counter(), cpu()
    q = (df.writeStream.format("noop").option("checkpointLocation", str(work / "ck"))
         .trigger(availableNow=True).start())
    log = ProgressLog(q)
    while q.isActive:
        log.poll()
        q.awaitTermination(0.5)
    whole, cpu_s = time.perf_counter() - started, cpu() - cpu_started
    if q.exception() is not None:
        raise RuntimeError(f"the query failed: {q.exception()}")
    log.poll()
    batches = log.with_input
    phases = {name: sum(p["durationMs"].get(name, 0) for p in batches) / 1000 for name in PHASES}
    total = sum(p["durationMs"]["triggerExecution"] for p in batches) / 1000
    phases["other"] = total - sum(phases.values())
    ops = [op for p in batches for op in p.get("stateOperators", [])]
    sink_rows = [p.get("sink", {}).get("numOutputRows", -1) for p in batches]
    return {
        "batches": len(batches), "spark_s": total, "whole_s": whole,
        "cpu_s": cpu_s, "cores": cpu_s / whole,
        "stages": stage_times(events, str(q.id), {p["batchId"] for p in batches}) if events is not None else {},
        "first_batch_s": batches[0]["durationMs"]["triggerExecution"] / 1000 if batches else 0.0,
        "phases": phases,
        "state_commit_s": sum(op.get("commitTimeMs", 0) for op in ops) / 1000,
        "state_updates_s": sum(op.get("allUpdatesTimeMs", 0) for op in ops) / 1000,
        "state_memory_bytes": max((op.get("memoryUsedBytes", 0) for op in ops), default=0),
        "input_rows": sum(p["numInputRows"] for p in batches),
        "sink_rows": sum(sink_rows) if all(r >= 0 for r in sink_rows) else None,
        "per_batch": [{"batch": p["batchId"], "rows": p["numInputRows"], **p["durationMs"],
                       "commitTimeMs": sum(op.get("commitTimeMs", 0) for op in p.get("stateOperators", []))}
                      for p in batches],
    }


#: SQL metrics of a stage that :func:`stage_times` reports, and their units per second ("time to
#: initialize Python workers" is left out: summed over a stage it came out at 10 to 20 times the
#: stage's wall time, so it does not measure time spent in the stage).
STAGE_METRICS = {"time to run Python workers": 1e3,
                 "time to execute Python code": 1e3, "shuffle write time": 1e9, "time to update": 1e3,
                 "time to commit changes": 1e3, "RocksDB: load - time taken to load the store": 1e3,
                 "RocksDB: commit - file sync to external storage time": 1e3}


def stage_times(events: Path, query: str, batch_ids: set[int]) -> dict[str, dict[str, float]]:
    """Per stage of a micro-batch's job, summed over the batches ``batch_ids`` of query ``query``,
    from Spark's event log: the stage's wall time (submission to completion), its tasks, their
    run time summed (``Executor Run Time``, task seconds on 2 cores) and the SQL metrics of its
    operators that are times (e.g. the Python workers' time). A batch's job has the stateless
    stage (scan, routers, shuffle write) first and the stateful one last."""
    jobs: dict[int, int] = {}  # stage id -> batch id
    order: dict[int, tuple[int, int]] = {}  # stage id -> (batch, position in its job)
    stages: dict[int, dict[str, Any]] = {}
    tasks: dict[int, float] = {}
    for path in sorted(events.rglob("*")):  # Spark 4 rolls its log: eventlog_v2_<app>/events_<n>_<app>
        if not path.is_file() or path.name.startswith("appstatus"):
            continue
        with open(path) as f:
            for line in f:
                try:
                    e = json.loads(line)
                except json.JSONDecodeError:
                    continue  # the line Spark is writing
                kind = e.get("Event")
                if kind == "SparkListenerJobStart":
                    props = e.get("Properties") or {}
                    batch = props.get("streaming.sql.batchId")
                    if props.get("sql.streaming.queryId") == query and batch is not None and int(batch) in batch_ids:
                        for i, sid in enumerate(sorted(e["Stage IDs"])):
                            jobs[sid] = int(batch)
                            order[sid] = (int(batch), i)
                elif kind == "SparkListenerTaskEnd":
                    run = (e.get("Task Metrics") or {}).get("Executor Run Time", 0)
                    tasks[e["Stage ID"]] = tasks.get(e["Stage ID"], 0.0) + run / 1000
                elif kind == "SparkListenerStageCompleted":
                    stages[e["Stage Info"]["Stage ID"]] = e["Stage Info"]
    out: dict[str, dict[str, float]] = {}
    last = {b: max(i for bb, i in order.values() if bb == b) for b in set(jobs.values())}
    for sid, (batch, i) in order.items():
        info = stages.get(sid)
        if info is None or "Completion Time" not in info:
            continue  # skipped (a shuffle already written) or not finished
        role = "stateful" if i == last[batch] else "stateless"
        row = out.setdefault(role, {"stages": 0, "wall_s": 0.0, "tasks": 0, "task_run_s": 0.0})
        row["stages"] += 1
        row["wall_s"] += (info["Completion Time"] - info["Submission Time"]) / 1000
        row["tasks"] += info["Number of Tasks"]
        row["task_run_s"] += tasks.get(sid, 0.0)
        for acc in info.get("Accumulables", []):
            name = acc.get("Name", "")
            if name in STAGE_METRICS and str(acc.get("Value", "")).isdigit():
                row[name] = row.get(name, 0.0) + int(acc["Value"]) / STAGE_METRICS[name]
    return out


def task_seconds(records: list[dict[str, Any]], prefix: str = "") -> dict[str, float]:
    """The operators' recorded ``timings`` summed over tasks and batches (task seconds)."""
    out: dict[str, float] = {}
    for r in records:
        for name, s in r.get("timings", {}).items():
            out[prefix + name] = out.get(prefix + name, 0.0) + s
    return out


def critical_path(records: list[dict[str, Any]]) -> float:
    """Per batch the longest recorded task, summed over batches (what parallel tasks cannot hide)."""
    longest: dict[int, float] = {}
    for r in records:
        b = r["_spark"]["batch"]
        longest[b] = max(longest.get(b, 0.0), sum(r.get("timings", {}).values()))
    return sum(longest.values())


# ---- equi_join -----------------------------------------------------------------------------

def equi_run(spark, scratch: Path, size: int, alpha: float, batches: int, p: int, seed: int,
             output: str = "rows", partitions: int | None = None, events: Path | None = None) -> dict[str, Any]:
    spec = ZipfStreamSpec(size // 2, size // 2, domain=DOMAIN, alpha_r=alpha, alpha_s=alpha, seed=seed)
    data, work = scratch / "equi-data", scratch / "equi"
    n = write_stream(data, spec, batches)
    metrics = work / "metrics"
    joined = equi_join(_read(spark, data, "L"), _read(spark, data, "R"), on="k", algorithm="shc", parallelism=p,
                       metrics_dir=str(metrics), output=output, partitions=partitions)
    parts = joined.sparkSession.conf.get("spark.sql.shuffle.partitions")
    row = {"run": f"equi-{output}-P{parts}", "operator": f"equi_join shc, p = {p}, partitions = {parts}, output={output!r}",
           "input": n, "alpha": alpha, "micro_batches": batches, "p": p, "partitions": int(parts),
           **run_query(joined, work, events)}
    workers = list(read_stats(str(metrics), "equi_worker"))
    row["spark_rows"] = sum(s["produced"] for s in workers)
    row["task_s"] = task_seconds(workers)
    row["critical_path_s"] = critical_path(workers)
    row["moved"] = sum(s["installed"] for s in workers)
    control = list(read_stats(str(metrics), "equi_control"))
    row["heavy_values"] = max((c["heavy"] for c in control), default=0)
    # the core: the same tuples in the same batch cuts (write_stream's cut), one process
    stream = zipf_stream(spec)
    per = -(-len(stream) // batches)
    core = DistributedJoin("shc", p)
    for b in range(batches):
        core.step(stream[b * per:(b + 1) * per])
    row.update(core_s=core.wall, core_rows=len(core.pairs), core_moved=core.metrics().moved,
               core_name="DistributedJoin (SHC, routers + planner + workers, one process)")
    return row


# ---- topk_set_join -------------------------------------------------------------------------

def write_sets(folder: Path, sets: list[tuple[int, list[str], float]], batches: int) -> None:
    """The sets as ``batches`` Parquet files, modification times in batch order."""
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(sets) // batches)
    start = time.time() - 3600
    for b in range(batches):
        part = sets[b * per:(b + 1) * per]
        path = folder / f"b{b:03d}.parquet"
        pq.write_table(pa.table({"id": pa.array([s[0] for s in part], pa.int64()),
                                 "tokens": pa.array([s[1] for s in part], pa.list_(pa.string())),
                                 "ts": pa.array([s[2] for s in part], pa.float64())}), path)
        os.utime(path, (start + b, start + b))


def core_single(sets: list, batches: int, k: int, window_s: float) -> tuple[float, int]:
    """Seconds and change rows (refused sets count one row, as on Spark) of the compiled engine."""
    join = Swoop(k, "jaccard", window_s)
    per = -(-len(sets) // batches)
    rows, seconds = 0, 0.0
    for b in range(batches):
        started = time.perf_counter()
        for set_id, tokens, ts in sets[b * per:(b + 1) * per]:
            try:
                rows += len(join.insert(set_id, tokens, ts))
            except InvalidSetError:
                rows += 1
        seconds += time.perf_counter() - started
    return seconds, rows


def core_partitioned(sets: list, batches: int, k: int, window_s: float, p: int, design: str) -> tuple[float, int]:
    join = PartitionedTopK(k, "jaccard", window_s, parallelism=p, design=design)
    per = -(-len(sets) // batches)
    rows, seconds = 0, 0.0
    for b in range(batches):
        part = [(set_id, tokens, ts, None) for set_id, tokens, ts in sets[b * per:(b + 1) * per]]
        started = time.perf_counter()
        changes, rejected = join.insert_batch(part)
        seconds += time.perf_counter() - started
        rows += len(changes) + len(rejected)
    return seconds, rows


def topk_runs(spark, scratch: Path, n: int, window: int, k: int, batches: int, ps: list[tuple[int, str]],
              seed: int) -> list[dict]:
    """``ps``: (parallelism, design) per run (the design matters for p > 1 only)."""
    sets = list(set_stream(n, rate=RATE, seed=seed, string_tokens=True, **WORKLOADS["zipf"]))
    data = scratch / "topk-data"
    write_sets(data, sets, batches)
    window_s = window / RATE
    band = window_s + 0.5e-6  # within= is inclusive: SWOOP's strict window is half a microsecond longer
    single_s, single_rows = core_single(sets, batches, k, band)
    rows = []
    for p, design in ps:
        name = f"topk-p{p}" + (f"-{design}" if p > 1 else "")
        work = scratch / name
        metrics = work / "metrics"
        stream = spark.readStream.schema(SET_SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(data))
        joined = topk_set_join(stream, k=k, within=window_s, metrics_dir=str(metrics), parallelism=p,
                               design=design)
        row = {"run": name, "operator": f"topk_set_join, p = {p}" + (f", {design}" if p > 1 else ""), "input": n,
               "window_sets": window, "k": k, "micro_batches": batches, "p": p, "design": design,
               **run_query(joined, work)}
        workers = list(read_stats(str(metrics), "swoop" if p == 1 else "swoop_worker"))
        merge = list(read_stats(str(metrics), "swoop_merge"))
        row["spark_rows"] = sum(s["changes"] for s in (workers if p == 1 else merge))
        row["task_s"] = {**task_seconds(workers), **task_seconds(merge, "merge ")}
        row["critical_path_s"] = critical_path(workers) + critical_path(merge)
        row["state_sources"] = {src: sum(1 for s in workers if s.get("state_source") == src)
                                for src in {s.get("state_source") for s in workers}}
        row.update(core_s=single_s, core_rows=single_rows, core_name="Swoop (compiled engine, one process)")
        if p > 1:
            row["partitioned_core_s"], row["partitioned_core_rows"] = core_partitioned(sets, batches, k, band, p,
                                                                                       design)
        rows.append(row)
        shutil.rmtree(work, ignore_errors=True)
    return rows


# ---- report --------------------------------------------------------------------------------

def table(rows: list[dict]) -> None:
    head = (f"{'run':>14} {'input':>8} {'batches':>7} {'spark_s':>8} {'input/s':>8} {'whole_s':>8} {'cores':>5} "
            f"{'core_s':>7} {'spark/core':>10} {'whole/core':>10} {'spark rows':>11} {'core rows':>11} {'agree':>5}")
    print(f"\n{head}\n{'-' * len(head)}")
    for r in rows:
        print(f"{r['run']:>14} {r['input']:>8,} {r['batches']:>7} {r['spark_s']:>8.1f} {r['input'] / r['spark_s']:>8,.0f} "
              f"{r['whole_s']:>8.1f} {r['cores']:>5.2f} "
              f"{r['core_s']:>7.2f} {r['spark_s'] / r['core_s']:>9.1f}x {r['whole_s'] / r['core_s']:>9.1f}x "
              f"{r['spark_rows']:>11,} {r['core_rows']:>11,} {'yes' if r['agree'] else 'NO':>5}")
        if "partitioned_core_s" in r:
            print(f"{'':>14} partitioned core (p = {r['p']}, one process): {r['partitioned_core_s']:.2f} s, "
                  f"{r['partitioned_core_rows']:,} rows; spark / it {r['spark_s'] / r['partitioned_core_s']:.1f}x")
    print("\nWhere the Spark time goes (seconds summed over the micro-batches; task seconds are summed over "
          "tasks sharing 2 cores)")
    for r in rows:
        ph = r["phases"]
        spark_phases = ", ".join(f"{k} {v:.1f}" for k, v in ph.items() if v >= 0.05)
        tasks = ", ".join(f"{k} {v:.1f}" for k, v in r["task_s"].items())
        print(f"  {r['run']}: {spark_phases}")
        print(f"  {'':{len(r['run'])}}  in addBatch (task s): {tasks}, state commit {r['state_commit_s']:.1f}; "
              f"longest task per batch {r['critical_path_s']:.1f} s; addBatch not covered by it and the commit "
              f"{r['rest_s']:.1f} s")
        for role, st in r.get("stages", {}).items():
            extra = ", ".join(f"{k} {v:.1f}" for k, v in st.items() if k not in ("stages", "wall_s", "tasks", "task_run_s"))
            print(f"  {'':{len(r['run'])}}  {role} stages: {st['stages']} stages, wall {st['wall_s']:.1f} s, "
                  f"{st['tasks']} tasks, task run {st['task_run_s']:.1f} s; {extra}")


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, bx) = plt.subplots(1, 2, figsize=(14, 2.5 + 1.1 * len(rows)))
    colours = {"queryPlanning": "#999999", "latestOffset": "#cccccc", "getBatch": "#dddddd", "walCommit": "#bbbbbb",
               "commitOffsets": "#aaaaaa", "other": "#eeeeee", "longest task": "#4c72b0",
               "state commit (summed over tasks)": "#dd8452",
               "rest of addBatch": "#c44e52", "core": "#55a868"}
    labels = []
    for i, r in enumerate(reversed(rows)):
        y = 2 * i
        left = 0.0
        segments = [("longest task", r["critical_path_s"]), ("state commit (summed over tasks)", r["state_commit_s"]),
                    ("rest of addBatch", r["rest_s"])]
        segments += [(k, r["phases"][k]) for k in PHASES if k != "addBatch"] + [("other", r["phases"]["other"])]
        for name, width in segments:
            if width > 0:
                ax.barh(y + 0.5, width, left=left, color=colours[name], label=name)
                left += width
        ax.barh(y - 0.5, r["core_s"], color=colours["core"], label="core")
        labels.append((y, f"{r['run']}\n{r['spark_s'] / r['core_s']:.1f}x"))
        left = 0.0
        for name, width in r["task_s"].items():
            bx.barh(y, width, left=left, label=name, color=TASK_COLOURS.get(name, "#dddddd"))
            left += width
    for a in (ax, bx):
        a.set_yticks([y for y, _ in labels], [t for _, t in labels])
        handles, names = a.get_legend_handles_labels()
        unique = dict(zip(names, handles))
        a.legend(unique.values(), unique.keys(), fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=4)
        a.grid(True, axis="x", alpha=0.3)
    ax.set_xlabel("seconds over all micro-batches (Spark: upper bar, core: lower bar)")
    ax.set_title("Spark against the core, same data")
    bx.set_xlabel("task seconds recorded by the operators (summed over tasks)")
    bx.set_title("inside the operators")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["equi", "topk"], help="run one operator only")
    parser.add_argument("--equi-size", type=int, default=200_000, help="input tuples (R + S)")
    parser.add_argument("--equi-alpha", type=float, default=0.0, help="Zipf exponent of the join keys")
    parser.add_argument("--equi-batches", type=int, default=10, help="micro-batches of the equi-join")
    parser.add_argument("--equi-p", type=int, default=4, help="equi_join workers")
    parser.add_argument("--equi-outputs", type=str, default="rows",
                        help="equi_join output modes to run: rows (the joined rows), count (pairs counted per worker)")
    parser.add_argument("--equi-partitions", type=str, default="",
                        help="equi_join Spark partitions to run, e.g. 4,2 (default: equi_join's own default)")
    parser.add_argument("--stages", action="store_true",
                        help="record Spark's event log and break each batch down by stage (stateless, stateful)")
    parser.add_argument("--java-options", type=str, default=None,
                        help="the driver JVM's options instead of local_session's fast-start ones "
                             "(-XX:+UseSerialGC -XX:TieredStopAtLevel=1), e.g. '-XX:+UseParallelGC'")
    parser.add_argument("--topk-sets", type=int, default=100_000, help="sets in the top-k stream")
    parser.add_argument("--topk-window", type=int, default=10_000, help="window in sets (|W|)")
    parser.add_argument("--topk-k", type=int, default=10)
    parser.add_argument("--topk-batches", type=int, default=10, help="micro-batches of the top-k join")
    parser.add_argument("--topk-ps", type=str, default="1,2",
                        help="topk_set_join parallelisms, each p > 1 optionally with its design: 1,2,2:probe")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    load_before = os.getloadavg()
    from driftjoin.swoop import fast

    fast.warm_up()  # the compiled kernels, before any timing (the Spark workers load them in their daemon)
    scratch = Path(tempfile.mkdtemp(prefix="spark-vs-core-"))
    events = scratch / "events" if args.stages else None
    conf = {} if args.java_options is None else {"spark.driver.extraJavaOptions": args.java_options}
    if events is not None:
        events.mkdir()
        conf |= {"spark.eventLog.enabled": "true", "spark.eventLog.dir": events.as_uri(), "spark.eventLog.compress": "false"}
    spark = local_session(max(args.equi_p, 2), "spark-vs-core-bench", cores=2, conf=conf)
    partitions = [int(x) for x in args.equi_partitions.split(",")] if args.equi_partitions else [None]
    rows: list[dict] = []
    try:
        # warm-up queries (not recorded): the session's first query of each kind pays for JVM code
        # generation and the start of the Python workers
        if args.only != "topk":
            for parts in dict.fromkeys(partitions):
                equi_run(spark, scratch / f"warm-equi-{parts}", 2_000, args.equi_alpha, 2, args.equi_p, args.seed,
                         partitions=parts)
            for output in args.equi_outputs.split(","):
                for i, parts in enumerate(partitions):  # a value may repeat (runs interleaved against drift)
                    rows.append(equi_run(spark, scratch / f"{output}-{i}-{parts}", args.equi_size, args.equi_alpha,
                                         args.equi_batches, args.equi_p, args.seed, output, parts, events))
            print(f"equi done at {time.perf_counter() - started:.0f} s", flush=True)
        if args.only != "equi":
            topk_runs(spark, scratch / "warm-topk", 1_000, 100, args.topk_k, 2, [(1, "owner")], args.seed)
            runs = [(int(p), design or "owner") for p, _, design in (x.partition(":") for x in args.topk_ps.split(","))]
            rows += topk_runs(spark, scratch, args.topk_sets, args.topk_window, args.topk_k, args.topk_batches, runs,
                              args.seed)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for r in rows:
        r["agree"] = r["spark_rows"] == r["core_rows"] and r.get("partitioned_core_rows", r["core_rows"]) == r["core_rows"]
        r["rest_s"] = r["phases"]["addBatch"] - r["critical_path_s"] - r["state_commit_s"]
        r["ratio"] = r["spark_s"] / r["core_s"]
        r["whole_ratio"] = r["whole_s"] / r["core_s"]
    table(rows)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"args": vars(args), "rows": rows, "load_average_before": load_before, "load_average_after": os.getloadavg(),
           "cores": os.cpu_count(), "seconds": time.perf_counter() - started,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    (RESULTS / "spark_vs_core.json").write_text(json.dumps(out, indent=1))
    plot(rows, RESULTS / "spark_vs_core.png")
    print(f"\nwrote {RESULTS / 'spark_vs_core.json'} and .png in {out['seconds']:.0f} s (load average "
          f"{load_before[0]:.1f} before, {out['load_average_after'][0]:.1f} after, {os.cpu_count()} cores)")
    if not all(r["agree"] for r in rows):
        raise SystemExit("the Spark operators and their cores disagree on the output rows")


if __name__ == "__main__":
    main(sys.argv[1:])
