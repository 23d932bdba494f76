"""Autoscalers live on the standalone cluster: every policy on every workload shape, 1-2 executors.

    DRIFTJOIN_CLUSTER_PORT=7277 nice -n 10 bash scripts/cluster.sh start --workers 2
    nice -n 10 .venv/bin/python bench/autoscale_live.py --master spark://127.0.0.1:7277 \\
        [--queries agg,join] [--workloads steps,cosine,...] [--policies ds2,...] [--minutes 3] \\
        [--restart steps] [--joint] [--capacity agg=N,join=M] [--out FILE] \\
        [--centroids 64] [--peak between] [--actuation-rate agg=R] [--actuation-repeats 3]
    nice -n 10 .venv/bin/python bench/autoscale_live.py --merge A.json,B.json   # pieces -> one matrix

The queries read the generator source driven by the thesis's workload shapes (section 4.5.3,
option ``schedule``): ``agg``, a plain Spark aggregation of each micro-batch (``foreachBatch``:
no state store, nothing to reload when executors change), ``join``, driftjoin's similarity
self-join (two stateful operators, state reloaded by the executors that take its partitions),
and the thesis's NexMark queries ``map``, ``filter``, ``ij``, ``sa``, ``swa``
(:mod:`driftjoin.control.autoscale.nexmark`; their per-stage costs, measured in the runs at
one executor, go to the JSON's ``nexmark_costs`` for ``bench/autoscale_sim.py --nexmark``).
``--centroids N`` makes the aggregation's records costlier (grouped by the nearest of N
fixed centroids) so that one executor cannot carry a peak that two can.
Each (query, workload, policy) runs once for ``--minutes`` on a fresh checkpoint, starting at 1
executor (2 on ``decreasing``); Spark's dynamic allocation runs in a second driver process (its
session must be created with it). ``--restart`` repeats the given workloads with the
stop-and-restart actuation path (``mode="restart"``); ``--joint`` runs the similarity join on
a skewed, drifting workload with the balancer alone, the autoscaler alone and both together
(:func:`driftjoin.control.joint.attach_joint`).

First a probe measures each query's capacity at 1 and 2 executors (the offered rate rises to
far above it) and sizes the workloads: their peak is 1.2 times the better of the two (on an
idle machine 2 executors would double it; on this shared one they add much less). Reported
per run (thesis 4.5.1): p50/p95 queue latency of every record offered (batch start minus the
time the source offered the record; a record not read by the end of the run counts its wait
until then), beside it the records processed over records offered and the p95 over the records
read only, p50/p95 processing-time latency (batch end minus that time; for the join also
driftjoin's own, pair emit time minus the later ingestion time, from its statistics), records
processed over records offered, mean executors, scaling actions with their actuation time, the
pause they caused, and on ``steps`` the convergence time and steps after each change; the
machine's load average at the start and end of every run (other people's jobs share these
2 cores). Writes ``--out`` (default bench/results/autoscale_live.json, with a ``calibration``
section that ``bench/autoscale_sim.py --calibration`` reads) and, in the same directory, one
PNG per query and workload.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from driftjoin.control.autoscale.latency import batch_waits, waiting_waits, weighted_quantile
from driftjoin.control.autoscale.nexmark import QUERIES as NEXMARK_QUERIES
from driftjoin.control.autoscale.simulator import convergence
from driftjoin.generators.rates import RateSchedule

OUT = Path(__file__).resolve().parent / "results"
POLICIES = ["dhalion", "ds2", "hpa-cpu", "hpa-varga", "batch-interval", "spark-dynamic-allocation"]
WORKLOADS = ["increasing", "decreasing", "cosine", "random", "steps"]
PARTITIONS = 2          # state partitions = the most executors that can work (2 cores here)
LEAD = 10.0             # seconds between starting a query and the start of its schedule
#: per query: workload length, monitoring window and cooldown (a join batch takes ~15 s here)
#: and (``probe_rate``) the probe's final offered rate, records/s, and (``max_batch``) the most
#: records per micro-batch (maxOffsetsPerTrigger's role: a query that fell behind reads its
#: backlog in bounded batches instead of one that outgrows an executor's memory)
DEFAULTS = {"minutes": {"agg": 2.0, "join": 3.0}, "window": {"agg": 10.0, "join": 30.0}, "cooldown": {"agg": 30.0, "join": 60.0},
            "probe_rate": {"agg": 1_000_000, "join": 6_000}, "max_batch": {"agg": 2_000_000, "join": 20_000}}
#: the thesis's NexMark queries (driftjoin.control.autoscale.nexmark): the aggregation's settings
NEXMARK = tuple(NEXMARK_QUERIES)
for _setting in DEFAULTS.values():
    _setting.update({q: _setting["agg"] for q in NEXMARK})
#: vector dimension: 16 makes the aggregation's records cost enough that one executor can fall behind;
#: the NexMark queries read only the index and the time (1, the least the source generates)
DIM = {"agg": 16, "join": 2} | {q: 1 for q in NEXMARK}
#: the workloads' peak over the probe's capacity: at the peak the query is near or over what
#: this machine gives it (which moves with the other jobs' load)
PEAK = 1.2


def per_query(args, name: str, kind: str) -> float:
    """A setting given as one number for every query or as ``agg=2.5,join=4``."""
    raw = getattr(args, name) or ""
    if raw and "=" not in raw:
        return float(raw)
    given = {k: float(v) for k, v in (x.split("=") for x in raw.split(",") if x)}
    return given.get(kind, DEFAULTS[name][kind])


def workload_peak(peak: str, capacity: float, probe: dict | None) -> float:
    """The workloads' peak, records/s: ``peak`` times ``capacity``, or with ``"between"`` midway
    between the probe's capacities at 1 and at 2 executors; when 2 gave no more than 1 (a
    shared machine), 1.2 times the one executor's, which then no executor count carries."""
    if peak != "between":
        return float(peak) * capacity
    c1, c2 = (float(probe[k]["records_per_s"]) for k in ("1", "2"))
    if c2 <= c1:
        print(f"2 executors took no more than 1 ({c2:,.0f} against {c1:,.0f} records/s): peak 1.2 x the one executor's", flush=True)
        return PEAK * c1
    return 0.5 * (c1 + c2)


def query_options(args, kind: str) -> dict:
    """The settings of ``kind``'s :class:`Query` that the command line gives."""
    return {"max_batch": int(per_query(args, "max_batch", kind)), "centroids": args.centroids if kind == "agg" else 0}


def schedules(seconds: float, peak: float) -> dict[str, RateSchedule]:
    """The five shapes at this scale (the simulator's :func:`workloads` with a finer random walk)."""
    return {
        "increasing": RateSchedule("increasing", low=0.1 * peak, high=peak, duration=seconds),
        "decreasing": RateSchedule("decreasing", low=0.1 * peak, high=peak, duration=seconds),
        "cosine": RateSchedule("cosine", low=0.1 * peak, high=peak, duration=seconds),
        "random": RateSchedule("random", low=0.1 * peak, high=peak, duration=seconds, step=15, jump=0.3, seed=7),
        "steps": RateSchedule("steps", low=0.2 * peak, high=peak, duration=seconds, levels=(0.0, 1.0, 0.5)),
    }


# -- one query ---------------------------------------------------------------------------------

def nearest_centroid(F, dim: int, k: int):
    """The index (1-based) of the nearest of ``k`` fixed centroids of ``dim`` dimensions to each
    record's vector: k-means' assignment step in Spark SQL (no UDF), ``k * dim`` squared
    differences per record. ``--centroids`` groups the aggregation by it, which raises the cost
    of a record (not the rate) until one executor cannot carry the workload's peak."""
    rng = np.random.default_rng(3)
    centres = F.array(*[F.array(*[F.lit(float(x)) for x in c]) for c in rng.uniform(-1.0, 1.0, (k, dim))])
    dist = F.transform(centres, lambda c: F.aggregate(F.zip_with("vector", c, lambda a, b: (a - b) * (a - b)),
                                                      F.lit(0.0), lambda s, x: s + x))
    return F.array_position(dist, F.array_min(dist))


class Query:
    """One benchmark query on the generator source: how to start it, and its own statistics."""

    def __init__(self, spark, kind: str, spec: str, work: Path, *, trigger: float, start: float, dist: str = "uniform",
                 balance: str = "none", parallelism: int = PARTITIONS, max_batch: int, centroids: int = 0) -> None:
        from pyspark.sql import functions as F

        from driftjoin import similarity_join

        self.kind, self.work, self.trigger = kind, work, trigger
        self.metrics = str(work / "metrics")
        reader = (spark.readStream.format("driftjoin").option("schedule", spec).option("dim", DIM[kind]).option("dist", dist)
                  .option("seed", 1).option("partitions", PARTITIONS).option("drift_period", 60).option("start", start)
                  .option("max_records_per_batch", max_batch))
        stream = reader.load()
        if kind in NEXMARK:
            from driftjoin.control.autoscale.nexmark import OUTPUT_MODE, query

            spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
            result = query(stream, kind)
            self._writer = lambda: result.writeStream.format("noop").outputMode(OUTPUT_MODE[kind])
        elif kind == "agg":
            spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))

            key = nearest_centroid(F, DIM[kind], centroids) if centroids else F.col("id") % 64

            def per_batch(df, _batch_id: int) -> None:
                (df.groupBy(key.alias("k"))
                 .agg(F.count("*").alias("n"), F.avg(F.aggregate("vector", F.lit(0.0), lambda a, x: a + x * x)).alias("sq"))
                 .write.format("noop").mode("overwrite").save())
            self._writer = lambda: stream.writeStream.foreachBatch(per_batch)
        else:
            pairs = similarity_join(stream, threshold=0.01, metric="euclidean", parallelism=parallelism, dim=DIM[kind],
                                    window="30 seconds", ingest_col="ts", metrics_dir=self.metrics, balance=balance,
                                    balance_options={"monitoring_window": 10.0, "di_threshold": 0.1})
            self._writer = lambda: pairs.writeStream.format("noop")
        from driftjoin.spark.similarity.control import CONTROLLERS
        self.balancer = CONTROLLERS.get(self.metrics) if balance != "none" else None

    def start(self):
        return (self._writer().option("checkpointLocation", str(self.work / "ck"))
                .trigger(processingTime=f"{int(self.trigger * 1000)} milliseconds").start())

    def pair_latency(self) -> tuple[float, float]:
        """driftjoin's processing-time latency of the join's pairs (emit minus ingestion), p50/p95."""
        if self.kind != "join":
            return math.nan, math.nan
        from driftjoin.spark.runtime.stats import histogram_quantile, read_stats

        hist = None
        for s in read_stats(self.metrics, "computation"):
            h = np.asarray(s["latency_hist"])
            hist = h if hist is None else hist + h
        if hist is None:
            return math.nan, math.nan
        return histogram_quantile(hist, 0.5), histogram_quantile(hist, 0.95)


class Recorder:
    """Every progress event of the run (a listener) and the executor count every second."""

    def __init__(self, spark, t0: float) -> None:
        from pyspark.sql.streaming import StreamingQueryListener

        from driftjoin.control.autoscale.actuator import ExecutorActuator

        self.spark, self.progress, self.workers = spark, [], []
        self.executors = ExecutorActuator(spark)
        self.t0 = t0                            # the schedule's zero: times are seconds after it
        self._stop = threading.Event()
        progress = self.progress

        class _Listener(StreamingQueryListener):
            def onQueryStarted(self, event) -> None:  # noqa: N802
                pass

            def onQueryProgress(self, event) -> None:  # noqa: N802
                progress.append(json.loads(event.progress.json))

            def onQueryIdle(self, event) -> None:  # noqa: N802
                pass

            def onQueryTerminated(self, event) -> None:  # noqa: N802
                pass

        self.listener = _Listener()
        spark.streams.addListener(self.listener)
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while not self._stop.is_set():
            try:
                n = self.executors.count()
                if not self.workers or self.workers[-1][1] != n:
                    self.workers.append((time.time() - self.t0, n))
            except Exception:  # the session is stopping
                pass
            self._stop.wait(1.0)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.spark.streams.removeListener(self.listener)


# -- what a run measured -----------------------------------------------------------------------

def _epoch(ts: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


def batches_of(progress: list[dict], t0: float) -> tuple[list[dict], float | None]:
    """Per micro-batch with input: start (s after ``t0``), duration, rows, offsets; and the
    source's start time (the schedule's zero) from its latest offset."""
    out, source_start = [], None
    for p in progress:
        src = p["sources"][0]
        latest = src.get("latestOffset")
        latest = json.loads(latest) if isinstance(latest, str) and latest not in ("null", "None") else latest
        if isinstance(latest, dict) and "start" in latest:
            source_start = float(latest["start"])
        end = json.loads(src["endOffset"]) if isinstance(src["endOffset"], str) else src["endOffset"]
        first = src.get("startOffset")
        first = json.loads(first) if isinstance(first, str) and first not in ("null", "None") else first
        if p["numInputRows"] <= 0 or not isinstance(end, dict):
            continue
        lo = int(first["index"]) if isinstance(first, dict) else 0
        # rows by offsets: a stream-stream self-join scans its source twice and counts every row twice
        out.append({"start": _epoch(p["timestamp"]) - t0, "duration": p["batchDuration"] / 1000.0, "rows": int(end["index"]) - lo,
                    "first": lo, "end": int(end["index"]), "batch": p["batchId"], "run": p["runId"]})
    return out, source_start


def latencies(batches: list[dict], sched: RateSchedule, offset: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Queue and processing-time latency samples of every batch's records, and their weights.
    ``offset``: the schedule's zero in the batches' clock."""
    queue, proc, weight = [], [], []
    for b in batches:
        q, w = batch_waits(sched, b["first"], b["end"], b["start"], offset=offset)
        p, _ = batch_waits(sched, b["first"], b["end"], b["start"] + b["duration"], offset=offset)
        queue.append(q)
        proc.append(p)
        weight.append(w)
    if not queue:
        return np.array([]), np.array([]), np.array([])
    return np.concatenate(queue), np.concatenate(proc), np.concatenate(weight)


def quantile(values: np.ndarray, weights: np.ndarray, q: float) -> float:
    return weighted_quantile(values, weights, q)


def pauses(batches: list[dict], actions: list[dict], mode: str) -> None:
    """Per action, what it cost the query: ``mode="restart"``: the gap without batches around
    it; ``"live"``: how much longer the first batch after the new executor count ran than the
    median of the batches before (state partitions reloaded, Python workers started)."""
    for a in actions:
        path = a.get("path", mode)
        done = a["time"] + (a["actuation_s"] if math.isfinite(a["actuation_s"]) else 0.0)
        before = [b for b in batches if b["start"] + b["duration"] <= a["time"] + 1e-6]
        after = [b for b in batches if b["start"] >= done - 1e-6]
        if not before or not after:
            a["pause_s"] = a["extra_batch_s"] = math.nan
            continue
        last_end = max(b["start"] + b["duration"] for b in before)
        a["pause_s"] = after[0]["start"] - last_end if path == "restart" else 0.0   # live: batches run on meanwhile
        recent = [b["duration"] for b in before[-5:]]
        a["extra_batch_s"] = after[0]["duration"] - float(np.median(recent))


def summarise(run: dict, sched: RateSchedule, seconds: float) -> dict:
    """The run's metrics. ``p50``/``p95``: the thesis's queue latency of every record offered
    by the end of the run (a record never read counts its wait until then, so a policy that
    falls behind cannot look fast: :mod:`driftjoin.control.autoscale.latency`);
    ``p95_processed``: over the records read only; ``proc_*``: to the end of their batch."""
    batches, workers = run["batches"], run["workers"]
    q, p, w = latencies(batches, sched, run["source_start"])
    offered = float(sched.count(seconds))
    processed = sum(b["rows"] for b in batches)
    read = max((b["end"] for b in batches), default=0)
    wq, ww = waiting_waits(sched, read, int(offered), seconds, offset=run["source_start"])
    pts = [(min(max(t, 0.0), seconds), k) for t, k in workers] + [(seconds, workers[-1][1] if workers else 0)]
    mean_workers = sum((b[0] - a[0]) * a[1] for a, b in zip(pts, pts[1:])) / seconds
    qa, wa = np.concatenate([q, wq]), np.concatenate([w, ww])
    out = {"p50": quantile(qa, wa, 0.5), "p95": quantile(qa, wa, 0.95), "p95_processed": quantile(q, w, 0.95),
           "proc_p50": quantile(p, w, 0.5), "proc_p95": quantile(p, w, 0.95), "throughput_ratio": processed / max(offered, 1.0),
           "mean_workers": mean_workers, "n_actions": len(run["actions"]) or max(0, len(workers) - 1)}
    if run["workload"] == "steps":
        third = seconds / 3
        for i, at in enumerate((third, 2 * third), 1):
            t, steps = convergence(workers, at, at + third, settle=third / 2)
            out[f"converge{i}_s"], out[f"converge{i}_steps"] = t, steps
    return out


# -- running --------------------------------------------------------------------------------------

def run_one(spark, kind: str, workload: str, sched: RateSchedule, policy: str, args, *, mode: str = "live",
            dist: str = "uniform", balance: str = "none", joint: bool = False, initial: int | None = None,
            min_workers: int = 1, max_workers: int = PARTITIONS, parallelism: int = PARTITIONS) -> dict:
    """One (query, workload, policy) run of ``sched.duration`` seconds on a fresh checkpoint."""
    from driftjoin.control.autoscale import autoscale
    from driftjoin.control.autoscale.actuator import ExecutorActuator

    seconds = sched.duration
    work = Path(tempfile.mkdtemp(prefix=f"autoscale-{kind}-", dir=args.work))
    external = policy == "spark-dynamic-allocation"
    if not external:
        start_with = initial or (max_workers if workload == "decreasing" else min_workers)
        ExecutorActuator(spark, executor_timeout=300).scale_to(start_with)
    zero = time.time() + LEAD
    query = Query(spark, kind, sched.spec(), work, trigger=args.trigger, start=zero, dist=dist, balance=balance,
                  parallelism=parallelism, **query_options(args, kind))
    load0 = os.getloadavg()
    rec = Recorder(spark, zero)
    ctl = None
    if policy == "fixed":                       # no autoscaler: the balancer alone at a fixed count
        q = query.start()
    else:
        ctl = autoscale(spark, policy, min_workers=min_workers, max_workers=max_workers,
                        cooldown=per_query(args, "cooldown", kind), monitoring_window=per_query(args, "window", kind),
                        mode=mode, start=query.start, executor_timeout=300, trigger_interval=args.trigger,
                        sizing=args.sizing)
    if joint:
        from driftjoin.control.joint import attach_joint
        attach_joint(ctl, query.balancer)
    try:
        time.sleep(max(0.0, zero + seconds - time.time()))
    finally:
        if ctl is not None:
            ctl.stop()
            q = ctl.query
        q.stop()
        rec.close()
    actions = []
    for r in (ctl.history if ctl is not None else []):
        if r.target is not None:
            actions.append({"time": r.metrics.time - rec.t0, "before": r.workers, "after": r.target,
                            "actuation_s": r.actuation_seconds, "error": r.error})
    batches, source_start = batches_of(rec.progress, rec.t0)
    run = {"query": kind, "workload": workload, "policy": policy, "mode": mode, "balance": balance, "joint": joint,
           "spec": sched.spec(), "seconds": seconds, "load_start": load0[0], "load_end": os.getloadavg()[0],
           "trigger": args.trigger, "window": per_query(args, "window", kind), "cooldown": per_query(args, "cooldown", kind),
           "sizing": args.sizing,
           "centroids": query_options(args, kind)["centroids"],
           "source_start": (source_start - rec.t0) if source_start else 0.0, "batches": batches,
           "workers": rec.workers, "actions": actions,
           "windows": [{k: v for k, v in r.row().items() if k != "per_executor"} | {"time": r.metrics.time - rec.t0}
                       for r in (ctl.history if ctl is not None else [])],
           "balancings": len(query.balancer.decisions) if query.balancer is not None else 0,
           "balancer_decisions": [{"time": d.time - rec.t0, "bins": d.bins, "forced": d.forced, "moves": d.moves,
                                   "di_before": d.di_before, "di_after": d.di_after}
                                  for d in (query.balancer.decisions if query.balancer is not None else [])]}
    pauses(batches, actions, mode)
    run.update(summarise(run, sched, seconds))
    run["pair_p50"], run["pair_p95"] = query.pair_latency()
    shutil.rmtree(work, ignore_errors=True)
    return run


def probe(spark, kind: str, args) -> dict:
    """Capacity at 1 and 2 executors: the offered rate rises from 0 to far above what the query
    can take (``PROBE``) over ``--probe-seconds``; capacity is the highest rate it processed
    from the start of a batch to the end of a later one at least 30 s on (a lower bound when it
    kept up to the end)."""
    from driftjoin.control.autoscale.actuator import ExecutorActuator

    out = {}
    for k in (1, 2):
        ExecutorActuator(spark, executor_timeout=300).scale_to(k)
        work = Path(tempfile.mkdtemp(prefix=f"probe-{kind}-", dir=args.work))
        zero = time.time() + LEAD
        spec = RateSchedule("increasing", low=0.0, high=per_query(args, "probe_rate", kind), duration=args.probe_seconds).spec()
        query = Query(spark, kind, spec, work, trigger=args.trigger, start=zero, **query_options(args, kind))
        rec = Recorder(spark, zero)
        q = query.start()
        try:
            time.sleep(max(0.0, zero + args.probe_seconds - time.time()))
        finally:
            q.stop()
            rec.close()
        batches, _ = batches_of(rec.progress, rec.t0)
        rows = np.array([b["rows"] for b in batches])
        rate = max((rows[i:j + 1].sum() / (batches[j]["start"] + batches[j]["duration"] - batches[i]["start"])
                    for i in range(len(batches)) for j in range(i, len(batches))
                    if batches[j]["start"] + batches[j]["duration"] - batches[i]["start"] >= 30
                    and (j == i or batches[j - 1]["start"] + batches[j - 1]["duration"] - batches[i]["start"] < 30)), default=math.nan)
        offered = float(RateSchedule.parse(spec).count(args.probe_seconds))
        out[k] = {"records_per_s": float(rate), "kept_up": bool(rows.sum() >= 0.95 * offered), "batches": len(batches),
                  "load": os.getloadavg()[0]}
        shutil.rmtree(work, ignore_errors=True)
        print(f"probe {kind}: {k} executor(s): {rate:,.0f} records/s at most over 30 s"
              f"{' (kept up: a lower bound)' if out[k]['kept_up'] else ''}, {len(batches)} batches, load {out[k]['load']:.1f}", flush=True)
    return out


def actuation(spark, kind: str, args, rate: float) -> dict:
    """Both actuation paths, each way, under the query at a constant ``rate``: live 1 -> 2 and
    2 -> 1 (``requestTotalExecutors`` / ``killExecutor``), then stop-and-restart 1 -> 2 and
    2 -> 1, ``--actuation-repeats`` times, each after 4 batches and once the query caught up
    (at most 2 minutes); per action its actuation time, the gap without batches, how much
    longer the first batch after it ran, the time to the first committed batch, the records it
    delayed and the backlog it started from (:func:`disruption`)."""
    from driftjoin.control.autoscale.actuator import ExecutorActuator, RestartActuator

    executors = ExecutorActuator(spark, executor_timeout=300)
    executors.scale_to(1)
    work = Path(tempfile.mkdtemp(prefix=f"actuation-{kind}-", dir=args.work))
    zero = time.time() + LEAD
    spec = f"constant:high={rate:.0f}"
    query = Query(spark, kind, spec, work, trigger=args.trigger, start=zero, **query_options(args, kind))
    rec = Recorder(spark, zero)
    restart = RestartActuator(executors, query.start)
    restart.query = query.start()

    sched = RateSchedule.parse(spec)

    normal = math.inf                           # the oldest record's wait before the first action

    def waits() -> list[float]:
        batches, source_start = batches_of(list(rec.progress), zero)
        return oldest_waits(batches, sched, (source_start - zero) if source_start else 0.0)

    def after_batches(n: int, timeout: float = 120.0) -> None:
        """``n`` batches with input more, and the query caught up: the oldest record of each of
        the last 2 batches waited at most a trigger interval longer than before the first
        action (or ``timeout`` s; each action records the wait it started from)."""
        done = lambda: sum(p["numInputRows"] > 0 for p in rec.progress)  # noqa: E731
        target, deadline = done() + n, time.time() + timeout
        while (done() < target or max(waits()[-2:], default=math.inf) > normal + args.trigger) and time.time() < deadline:
            time.sleep(1)

    actions = []
    try:
        after_batches(4)
        normal = max(waits()[1:4], default=math.inf)
        for _ in range(args.actuation_repeats):
            for path, n in (("live", 2), ("live", 1), ("restart", 2), ("restart", 1)):
                before, t = executors.count(), time.time() - zero
                seconds = executors.scale_to(n) if path == "live" else restart.scale_to(n)
                actions.append({"time": t, "before": before, "after": n, "actuation_s": seconds, "error": "", "path": path})
                after_batches(4)
    finally:
        restart.query.stop()
        rec.close()
    batches, source_start = batches_of(rec.progress, zero)
    pauses(batches, actions, "live")
    disruption(batches, actions, sched, (source_start - zero) if source_start else 0.0, args.trigger)
    shutil.rmtree(work, ignore_errors=True)
    for a in actions:
        print(f"actuation {kind}: {a['path']:7s} {a['before']}->{a['after']} in {a['actuation_s']:.1f} s, no batch for "
              f"{_f(a['pause_s'], '.1f')} s, next batch {_f(a['extra_batch_s'], '+.1f')} s against the median, first commit "
              f"after {_f(a['first_commit_s'], '.1f')} s (on the new count {_f(a['effective_s'], '.1f')} s), "
              f"{_f(a['records_delayed'], ',.0f')} records delayed by {_f(a['extra_delay_s'], '.1f')} s on average, "
              f"from a wait of {_f(a['wait_before_s'], '.1f')} s (load {os.getloadavg()[0]:.1f})", flush=True)
    for path in ("live", "restart"):
        for way, up in (("1->2", True), ("2->1", False)):
            some = [a for a in actions if a["path"] == path and (a["after"] > a["before"]) == up]
            med = {k: float(np.nanmedian([a[k] for a in some])) if some else math.nan
                   for k in ("actuation_s", "pause_s", "first_commit_s", "effective_s", "records_delayed", "extra_delay_s")}
            print(f"actuation {kind}: {path:7s} {way} median of {len(some)}: in {_f(med['actuation_s'], '.1f')} s, no batch for "
                  f"{_f(med['pause_s'], '.1f')} s, first commit after {_f(med['first_commit_s'], '.1f')} s (on the new count "
                  f"{_f(med['effective_s'], '.1f')} s), {_f(med['records_delayed'], ',.0f')} records delayed by "
                  f"{_f(med['extra_delay_s'], '.1f')} s", flush=True)
    return {"rate": rate, "actions": actions, "batches": batches, "workers": rec.workers, "load": os.getloadavg()[0]}


def cpu_probe(spark, kind: str, args, rate: float) -> dict:
    """The CPU an executor's process tree uses per second of task busy time (what HPA-CPU reads
    against what the tasks do): ``kind`` at a constant ``rate`` on one executor for
    ``--cpu-seconds``, the controller's collector in dry run (nothing changes), every
    monitoring window of 10 s with the executor at least 20% busy; with the machine's load
    average, since other jobs' CPU takes the executor's share (run it on a quiet machine)."""
    from driftjoin.control.autoscale import autoscale
    from driftjoin.control.autoscale.actuator import ExecutorActuator

    ExecutorActuator(spark, executor_timeout=300).scale_to(1)
    work = Path(tempfile.mkdtemp(prefix=f"cpu-{kind}-", dir=args.work))
    zero = time.time() + LEAD
    query = Query(spark, kind, f"constant:high={rate:.0f}", work, trigger=args.trigger, start=zero, **query_options(args, kind))
    loads = [os.getloadavg()[0]]
    ctl = autoscale(spark, "ds2", dry_run=True, monitoring_window=10.0, cooldown=0, max_workers=1, start=query.start,
                    trigger_interval=args.trigger)
    try:
        deadline = zero + args.cpu_seconds
        while time.time() < deadline:
            time.sleep(5)
            loads.append(os.getloadavg()[0])
    finally:
        ctl.stop()
        ctl.query.stop()
    shutil.rmtree(work, ignore_errors=True)
    windows = [r.metrics for r in ctl.history if r.metrics.batches and 1.0 - r.metrics.idle_per_second >= 0.2]
    ratios = [w.cpu_utilisation / (1.0 - w.idle_per_second) for w in windows]
    out = {"rate": rate, "ratios": ratios, "busy": [1.0 - w.idle_per_second for w in windows], "load": loads,
           "cpu_per_busy": float(np.median(ratios)) if ratios else math.nan}
    print(f"cpu {kind}: {len(ratios)} windows at {rate:,.0f} records/s on one executor, busy {_f(np.median(out['busy']) if ratios else math.nan, '.2f')}, "
          f"CPU per busy second {_f(out['cpu_per_busy'], '.2f')} (windows {', '.join(f'{x:.2f}' for x in ratios)}), "
          f"load average {min(loads):.1f}-{max(loads):.1f}", flush=True)
    return out


def oldest_waits(batches: list[dict], sched: RateSchedule, offset: float) -> list[float]:
    """Per batch, how long its oldest record had waited when it started (s): about the previous
    batch's duration when the query keeps up, more while it works off a backlog."""
    return [b["start"] - (offset + float(sched.time_of(np.array([b["first"]]))[0])) for b in batches]


def disruption(batches: list[dict], actions: list[dict], sched: RateSchedule, offset: float, trigger: float) -> None:
    """What each action cost the records, at a constant offered rate. ``first_commit_s``: from
    the action's start to the end of the first batch that started after it (the restart path
    commits nothing until the query is back); ``effective_s``: to the end of the first batch
    that started once the new executor count was in place. ``records_delayed``: records read
    between this action and the next whose queue latency exceeded the normal one (the weighted
    median of the 5 batches before the action) by more than a trigger interval;
    ``extra_delay_s``: their mean latency above the normal one. ``wait_before_s``: the oldest
    record's wait in the last batch before the action (the backlog it started from)."""
    for i, a in enumerate(actions):
        done = a["time"] + (a["actuation_s"] if math.isfinite(a["actuation_s"]) else 0.0)
        until = actions[i + 1]["time"] if i + 1 < len(actions) else math.inf
        before = [b for b in batches if b["start"] + b["duration"] <= a["time"]][-5:]
        first = next((b for b in batches if b["start"] >= a["time"]), None)
        effective = next((b for b in batches if b["start"] >= done), None)
        a["wait_before_s"] = oldest_waits(before[-1:], sched, offset)[0] if before else math.nan
        a["first_commit_s"] = first["start"] + first["duration"] - a["time"] if first else math.nan
        a["effective_s"] = effective["start"] + effective["duration"] - a["time"] if effective else math.nan
        q0, _, w0 = latencies(before, sched, offset)
        q, _, w = latencies([b for b in batches if a["time"] <= b["start"] < until], sched, offset)
        if not len(q0) or not len(q):
            a["records_delayed"] = a["extra_delay_s"] = math.nan
            continue
        normal = quantile(q0, w0, 0.5)
        late = q > normal + trigger
        a["records_delayed"] = float(w[late].sum())
        a["extra_delay_s"] = float(np.average(q[late] - normal, weights=w[late])) if late.any() else 0.0


def warm_up(spark, kind: str, args, batches: int = 2, timeout: float = 400.0) -> None:
    """Start the executors' Python workers for ``kind`` (imports take minutes on a loaded
    machine) before anything is measured: run it until ``batches`` batches with input are done."""
    from driftjoin.control.autoscale.actuator import ExecutorActuator

    if not args.dynamic:
        ExecutorActuator(spark, executor_timeout=300).scale_to(PARTITIONS)
    work = Path(tempfile.mkdtemp(prefix=f"warm-{kind}-", dir=args.work))
    rec = Recorder(spark, time.time())
    q = Query(spark, kind, "constant:high=200", work, trigger=1.0, start=time.time(), **query_options(args, kind)).start()
    deadline = time.time() + timeout
    while time.time() < deadline and sum(p["numInputRows"] > 0 for p in rec.progress) < batches:
        time.sleep(2)
    q.stop()
    rec.close()
    shutil.rmtree(work, ignore_errors=True)


def calibrate(kind: str, runs: list[dict], args, probe: dict | None = None) -> dict:
    """The simulator's engine constants (:class:`SimConfig`) from the live runs of ``kind``.

    Batch duration against records per batch, fitted by least squares at 1 and at 2 executors
    (batches of all controller runs, without those running while an action was carried out
    and the first one after it): ``a_k + n / c_k``. The simulator's model of the same batch is
    ``batch_overhead + task_overhead * ceil(P / k) + n * stretch / (k * capacity)``, so
    ``capacity = c_1``, ``task_overhead = a_1 - a_2`` (P = 2), ``batch_overhead = a_1 - 2 *
    task_overhead``, and ``machine_cores = c_2 / c_1``: what the second executor added on this
    shared machine (2 if it doubled the rate). Launch delay: median time until an added
    executor was there; state reload: median extra time of the first batch after a live
    action; restart pause: median gap without batches around a restart.
    """
    fits = {}
    for k in (1, 2):
        xs, ys = [], []
        for run in runs:
            if run["policy"] == "spark-dynamic-allocation":
                continue
            spans = [(a["time"], a["time"] + (a["actuation_s"] if math.isfinite(a["actuation_s"]) else 0.0)) for a in run["actions"]]
            skip = {id(b) for lo, hi in spans for b in run["batches"] if b["start"] <= hi and b["start"] + b["duration"] >= lo}
            skip |= {id(next((b for b in run["batches"] if b["start"] > hi), None)) for _, hi in spans}
            for b in run["batches"][1:]:
                at = [n for t, n in run["workers"] if t <= b["start"]]
                if id(b) not in skip and at and at[-1] == k:
                    xs.append(b["rows"])
                    ys.append(b["duration"])
        if len(xs) >= 5 and np.ptp(xs) > 0:
            slope, intercept = np.polyfit(xs, ys, 1)
            resid = np.array(ys) - (intercept + slope * np.array(xs))
            fits[k] = {"intercept_s": float(intercept), "records_per_s": 1.0 / slope if slope > 0 else math.nan,
                       "batches": len(xs), "rmse_s": float(np.sqrt(np.mean(resid ** 2))), "mean_batch_s": float(np.mean(ys))}
    c1 = fits.get(1, {}).get("records_per_s", math.nan)
    c2 = fits.get(2, {}).get("records_per_s", math.nan)
    if not math.isfinite(c1) and probe and "1" in probe:      # too few batches at 1 executor: the probe's saturated rate
        c1 = float(probe["1"]["records_per_s"])
    if not math.isfinite(c2) and probe and "2" in probe:
        c2 = float(probe["2"]["records_per_s"])
    task_overhead = 0.1
    if 1 in fits and 2 in fits and fits[1]["intercept_s"] > fits[2]["intercept_s"]:
        task_overhead = fits[1]["intercept_s"] - fits[2]["intercept_s"]
    a1 = fits.get(1, fits.get(2, {})).get("intercept_s", 0.5 + 2 * task_overhead)
    measured = (probe or {}).get("actuation", {}).get("actions", [])
    live = [a for r in runs if r["mode"] == "live" for a in r["actions"] if not a["error"]]
    live += [a for a in measured if a["path"] == "live"]
    adds = [a["actuation_s"] for a in live if a["after"] > a["before"]]
    removes = [a["actuation_s"] for a in live if a["after"] < a["before"]]
    reload = [a["extra_batch_s"] for a in live if math.isfinite(a.get("extra_batch_s", math.nan))]
    restarts = [a for r in runs if r["mode"] == "restart" for a in r["actions"] if not a["error"]]
    restarts += [a for a in measured if a["path"] == "restart"]
    gaps = [a["pause_s"] for a in restarts if math.isfinite(a.get("pause_s", math.nan))]

    def med(v: list[float], default: float) -> float:
        return float(np.median(v)) if v else default

    def setting(name: str, default: float) -> float:
        given = {r[name] for r in runs if name in r}
        if len(given) > 1:
            raise ValueError(f"runs of {kind} with different {name}s: {sorted(given)}")
        return given.pop() if given else default

    # CPU of the executors' process trees per unit of task busy time (what HPA-CPU reads): the
    # CPU measurement's when there is one, else the runs' windows
    cpu = (probe or {}).get("cpu", {}).get("ratios") or [
        w["cpu_utilisation"] / (1.0 - w["idle_per_second"]) for r in runs for w in r["windows"]
        if w.get("idle_per_second") is not None and 1.0 - w["idle_per_second"] > 0.2 and w.get("cpu_utilisation") is not None]
    return {"capacity": c1, "machine_cores": min(2.0, max(1.0, c2 / c1)) if math.isfinite(c1 / c2) else math.nan,
            "batch_overhead": max(0.0, a1 - 2 * task_overhead), "task_overhead": task_overhead, "partitions": PARTITIONS,
            "launch_delay": med(adds, math.nan), "remove_s": med(removes, math.nan), "state_reload": max(0.0, med(reload, 0.0)),
            "restart_pause": med(gaps, math.nan), "restart_actuation_s": med([a["actuation_s"] for a in restarts], math.nan),
            "n_adds": len(adds), "n_reload": len(reload), "n_restarts": len(restarts), "fits": fits,
            "cpu_per_busy": min(1.0, med(cpu, 0.8)), "idle_timeout": 30.0,
            # the runs' settings (all alike: one matrix), else this invocation's
            "trigger_interval": setting("trigger", args.trigger),
            "monitoring_window": setting("window", per_query(args, "window", kind)),
            "cooldown": setting("cooldown", per_query(args, "cooldown", kind)),
            "centroids": setting("centroids", query_options(args, kind)["centroids"])}


def nexmark_costs(kind: str, runs: list[dict]) -> dict:
    """A NexMark query's stages as the simulator models them (``StageModel``), from the
    monitoring windows of its runs at one executor: per stage (by position in the batch, as
    the collector names them) its useful seconds per *source* record (``cost``; a stage's own
    records in and out per source record beside it), so a chain of stages with selectivity 1
    gives DS2 the same optimal parallelism as the real records would; the batch overhead is
    what a batch took beyond its stages' useful time (one core runs them one after another)."""
    src = useful_batches = batches = 0.0
    acc: dict[str, list[float]] = {}
    for run in runs:
        for w in run["windows"]:
            if w["workers"] != 1 or not w["batches"] or not w["stages"] or not w["processed_rate"]:
                continue
            n = w["processed_rate"] * w["duration"]
            src += n
            batches += w["batches"]
            useful_batches += w["batch_duration"] * w["batches"] - sum(st["useful_time"] for st in w["stages"])
            for st in w["stages"]:
                a = acc.setdefault(st["name"], [0.0, 0.0, 0.0, 0.0])
                a[0] += st["useful_time"]
                a[1] += st["records_in"]
                a[2] += st["records_out"]
                a[3] = max(a[3], st["tasks"])
    if not src:
        raise ValueError(f"no monitoring window of {kind} at one executor with stages")
    stages = [{"name": name, "cost": a[0] / src, "selectivity": 1.0, "in_per_source": a[1] / src,
               "out_per_source": a[2] / src, "tasks": int(a[3])} for name, a in sorted(acc.items(), key=lambda x: int(x[0][5:]))]
    return {"stages": stages, "batch_overhead": max(0.0, useful_batches / batches), "source_records": src,
            "capacity_1": 1.0 / sum(st["cost"] for st in stages)}


# -- reporting ------------------------------------------------------------------------------------

def _f(x: float, fmt: str = "8.1f") -> str:
    """``x`` formatted, or ``-`` in the same width when it is missing (nan, None)."""
    if isinstance(x, (int, float)) and math.isfinite(x):
        return format(x, fmt)
    width = fmt.split(".")[0]
    return format("-", f">{width}") if width.isdigit() else "-"


HEADER = (f"{'query':6s} {'workload':10s} {'policy':24s} {'mode':7s} {'p50 s':>6s} {'p95 s':>6s} {'thr/in':>6s} {'read95':>6s} "
          f"{'proc50':>6s} {'proc95':>6s} {'pair95':>6s} {'workers':>7s} {'acts':>4s} {'load':>9s}  convergence / actuation")


def line(r: dict) -> str:
    conv = ""
    if r["workload"] == "steps" and "converge1_s" in r:
        conv = f"{_f(r['converge1_s'], '.0f')}s/{r['converge1_steps']} then {_f(r['converge2_s'], '.0f')}s/{r['converge2_steps']}; "
    acts = ", ".join(f"{a['before']}->{a['after']} {_f(a['actuation_s'], '.0f')}s" + (f" pause {_f(a['pause_s'], '.0f')}s" if r["mode"] == "restart" else "")
                     + (" ERR" if a["error"] else "") for a in r["actions"])
    return (f"{r['query']:6s} {r['workload']:10s} {r['policy']:24s} {r['mode']:7s} {_f(r['p50'], '6.1f')} {_f(r['p95'], '6.1f')} "
            f"{_f(r['throughput_ratio'], '6.2f')} {_f(r.get('p95_processed'), '6.1f')} "
            f"{_f(r['proc_p50'], '6.1f')} {_f(r['proc_p95'], '6.1f')} {_f(r['pair_p95'], '6.1f')} "
            f"{_f(r['mean_workers'], '7.2f')} {r['n_actions']:4d} {r['load_start']:4.1f}/{r['load_end']:4.1f}  {conv}{acts}")


def plot(runs: list[dict], out: Path) -> None:
    """One PNG per query, workload and path, into directory ``out``."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups: dict[tuple[str, str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["query"], r["workload"], r["mode"] if not r["joint"] and r["balance"] == "none" else "joint"), []).append(r)
    for (kind, workload, mode), rs in groups.items():
        fig, (a, b, c) = plt.subplots(3, 1, figsize=(9, 8), sharex=True)
        sched = RateSchedule.parse(rs[0]["spec"])
        t = np.linspace(0, rs[0]["seconds"], 200)
        c.plot(t / 60, sched.rate(t), "k--", lw=1, label="offered")
        for r in rs:
            label = r["policy"] if mode != "joint" else f"{r['policy']} ({r['plane']})"
            pts = r["workers"] + [(r["seconds"], r["workers"][-1][1])] if r["workers"] else []
            if pts:
                a.step([p[0] / 60 for p in pts], [p[1] for p in pts], where="post", label=label)
            starts = np.array([x["start"] for x in r["batches"]])
            if len(starts):
                per = [batch_waits(sched, x["first"], x["end"], x["start"], offset=r["source_start"])[0] for x in r["batches"]]
                b.plot(starts / 60, [np.median(v) for v in per], lw=0.9, label=label)
                c.plot(starts / 60, [x["rows"] / max(x["duration"], 1e-3) for x in r["batches"]], lw=0.7, label=label)
        a.set_ylabel("executors")
        b.set_ylabel("queue latency (s,\nmedian per batch)")
        c.set_ylabel("records/s (batch rows\nover its duration)")
        c.set_xlabel("minutes")
        a.legend(fontsize=7, ncol=3)
        a.set_title(f"{kind}, {workload} workload, live ({mode})")
        fig.tight_layout()
        fig.savefig(out / f"autoscale_live_{kind}_{workload}_{mode}.png", dpi=110)
        plt.close(fig)


# -- main -----------------------------------------------------------------------------------------

def session(master: str, dynamic: bool):
    from driftjoin.control.autoscale import dynamic_allocation_conf
    from driftjoin.spark.runtime.session import cluster_session

    conf = dynamic_allocation_conf(1, PARTITIONS, idle_timeout="30s") if dynamic else {}
    return cluster_session(master, PARTITIONS, "driftjoin-autoscale-bench", max_executors=PARTITIONS, conf=conf)


def child(args) -> None:
    """Runs the plan given in ``--plan`` (a JSON list of runs) in this driver; writes ``--out``."""
    plan = json.loads(Path(args.plan).read_text())
    spark = session(args.master, args.dynamic)
    runs, probes = [], {}
    for kind in dict.fromkeys(item["query"] for item in plan):
        warm_up(spark, kind, args)
    for item in plan:
        if item.get("probe"):
            found = probes[item["query"]] = probe(spark, item["query"], args)
            if args.actuation_repeats > 0:
                found["actuation"] = actuation(spark, item["query"], args, 0.5 * max(found[1]["records_per_s"], found[2]["records_per_s"]))
            continue
        if item.get("cpu"):                      # the CPU reading per busy second, alone
            probes.setdefault(item["query"], {})["cpu"] = cpu_probe(spark, item["query"], args, item["rate"])
            Path(args.out).write_text(json.dumps({"runs": runs, "probes": probes}, default=str))
            continue
        if item.get("actuation"):                # the actuation step alone, at a given rate
            probes.setdefault(item["query"], {})["actuation"] = actuation(spark, item["query"], args, item["rate"])
            Path(args.out).write_text(json.dumps({"runs": runs, "probes": probes}, default=str))
            continue
        sched = RateSchedule.parse(item["spec"])
        r = run_one(spark, item["query"], item["workload"], sched, item["policy"], args, mode=item.get("mode", "live"),
                    dist=item.get("dist", "uniform"), balance=item.get("balance", "none"), joint=item.get("joint", False),
                    initial=item.get("initial"), min_workers=item.get("min_workers", 1), max_workers=item.get("max_workers", PARTITIONS),
                    parallelism=item.get("parallelism", PARTITIONS))
        r["plane"] = item.get("plane", "")
        runs.append(r)
        print(line(r), flush=True)
        Path(args.out).write_text(json.dumps({"runs": runs, "probes": probes}, default=str))
    Path(args.out).write_text(json.dumps({"runs": runs, "probes": probes}, default=str))
    spark.stop()


def spawn(args, plan: list[dict], dynamic: bool, name: str) -> dict:
    plan_file = Path(args.work) / f"{name}.plan.json"
    out = Path(args.out).resolve().parent / f"autoscale_live_{name}.part.json"
    plan_file.write_text(json.dumps(plan))
    cmd = [sys.executable, __file__, "--child", "--plan", str(plan_file), "--out", str(out), "--master", args.master,
           "--minutes", str(args.minutes), "--trigger", str(args.trigger), "--window", str(args.window),
           "--cooldown", str(args.cooldown), "--probe-seconds", str(args.probe_seconds), "--work", args.work,
           "--probe-rate", str(args.probe_rate), "--max-batch", str(args.max_batch), "--centroids", str(args.centroids),
           "--actuation-repeats", str(args.actuation_repeats), "--peak", args.peak, "--sizing", args.sizing,
           "--cpu-seconds", str(args.cpu_seconds)]
    if dynamic:
        cmd.append("--dynamic")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    proc = subprocess.run(cmd, env=env, stdout=sys.stdout, stderr=open(Path(args.work) / f"{name}.log", "w"))
    if proc.returncode != 0:
        print(f"driver {name} failed (exit {proc.returncode}); see {Path(args.work) / f'{name}.log'}", flush=True)
    return json.loads(out.read_text()) if out.exists() else {"runs": [], "probes": {}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--master", default=os.environ.get("DRIFTJOIN_CLUSTER", "spark://127.0.0.1:7077"))
    ap.add_argument("--queries", default="agg,join")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--policies", default=",".join(POLICIES))
    ap.add_argument("--minutes", default="", help="workload length (default agg=2,join=3)")
    ap.add_argument("--trigger", type=float, default=2.0, help="processing-time trigger (s)")
    ap.add_argument("--window", default="", help="monitoring window, s (default agg=10,join=30)")
    ap.add_argument("--cooldown", default="", help="cooldown after each action, s (default agg=30,join=60; the thesis: 300)")
    ap.add_argument("--restart", default="", help="workloads to repeat with the stop-and-restart path")
    ap.add_argument("--restart-policies", default="ds2")
    ap.add_argument("--joint", action="store_true", help="the joint plane on a skewed, drifting workload")
    ap.add_argument("--joint-policy", default="ds2")
    ap.add_argument("--joint-planes", default="",
                    help="with --joint: only these planes, separated by ';' (balance only, 1; balance only, 2; "
                         "autoscale only; joint), e.g. to rerun one after a change (--merge combines the files)")
    ap.add_argument("--capacity", default="", help="skip the probe: records/s the query sustains, e.g. agg=8000,join=900")
    ap.add_argument("--probe-seconds", type=float, default=150.0)
    ap.add_argument("--probe-rate", default="", help="the probe's final offered rate, records/s (default agg=1000000,join=6000)")
    ap.add_argument("--max-batch", default="", help="records per micro-batch at most (default agg=2000000,join=20000)")
    ap.add_argument("--centroids", type=int, default=0, help="agg: group by the nearest of this many fixed centroids "
                    "(k-means' assignment step, centroids x 16 squared differences per record) instead of id %% 64: "
                    "a costlier record at the same rate")
    ap.add_argument("--actuation-repeats", type=int, default=1, help="cycles of the probe's actuation step "
                    "(live 1->2, 2->1, restart 1->2, 2->1); 0: the probe only")
    ap.add_argument("--actuation-rate", default="", help="the actuation step alone (no probe) at this constant "
                    "rate, records/s, e.g. agg=15000; with --capacity, before the runs")
    ap.add_argument("--cpu-rate", default="", help="measure the CPU per busy second of a query at this constant rate "
                    "on one executor (e.g. agg=12000 with --centroids 64), before the runs")
    ap.add_argument("--cpu-seconds", type=float, default=90.0, help="how long the CPU measurement runs")
    ap.add_argument("--peak", default=str(PEAK), help="the workloads' peak: a factor over the capacity (default 1.2), or "
                    "'between': midway between the probe's capacities at 1 and at 2 executors (a peak one executor "
                    "cannot carry and two can)")
    ap.add_argument("--sizing", default="waves", choices=("thesis", "waves"),
                    help="worker counts as the policy names them (thesis) or wave-efficient over the state partitions")
    ap.add_argument("--out", default=str(OUT / "autoscale_live.json"))
    ap.add_argument("--merge", default="", help="combine earlier outputs (comma-separated JSON files) into --out "
                    "with one calibration and the figures, running nothing")
    ap.add_argument("--work", default=str(Path(tempfile.gettempdir()) / "driftjoin-autoscale-live"))
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dynamic", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--plan", help=argparse.SUPPRESS)
    args = ap.parse_args()
    Path(args.work).mkdir(parents=True, exist_ok=True)
    if args.child:
        child(args)
        return
    Path(args.out).resolve().parent.mkdir(parents=True, exist_ok=True)
    if args.merge:
        report(args, *merged([f for f in args.merge.split(",") if f]))
        return
    queries = [q for q in args.queries.split(",") if q]
    policies = [p for p in args.policies.split(",") if p]
    print(f"uptime: {os.getloadavg()} (load average on {os.cpu_count()} cores, other people's jobs included)", flush=True)
    capacity = {k: float(v) for k, v in (x.split("=") for x in args.capacity.split(",") if x)}
    probes = {}
    todo = [q for q in queries if q not in capacity]
    if args.peak == "between" and not todo:
        raise SystemExit("--peak between needs the probe: leave out --capacity")
    if todo:
        probes = spawn(args, [{"probe": True, "query": q} for q in todo], False, "probe")["probes"]
        for q in todo:                          # what the best executor count sustains
            capacity[q] = max(float(probes[q][k]["records_per_s"]) for k in ("1", "2"))
    print(HEADER, flush=True)
    plan, dynamic_plan = [], []
    for kind in queries:
        peak = workload_peak(args.peak, capacity[kind], probes.get(kind))
        scheds = schedules(per_query(args, "minutes", kind) * 60, peak)
        for workload in args.workloads.split(","):
            for policy in policies:
                item = {"query": kind, "workload": workload, "policy": policy, "spec": scheds[workload].spec()}
                (dynamic_plan if policy == "spark-dynamic-allocation" else plan).append(item)
        for workload in (w for w in args.restart.split(",") if w):
            for policy in args.restart_policies.split(","):
                plan.append({"query": kind, "workload": workload, "policy": policy, "spec": scheds[workload].spec(), "mode": "restart"})
    if args.joint:
        peak = PEAK * capacity.get("join", 0.0)
        spec = RateSchedule("cosine", low=0.2 * peak, high=peak, duration=per_query(args, "minutes", "join") * 60).spec()
        # 4 state partitions over 1-2 executors: with 2 the joint plane could only balance as the balancer does
        base = {"query": "join", "workload": "joint-cosine", "spec": spec, "dist": "drift", "parallelism": 4}
        planes = [base | {"policy": "fixed", "balance": "s3j", "initial": 1, "min_workers": 1, "max_workers": 1, "plane": "balance only, 1"},
                  base | {"policy": "fixed", "balance": "s3j", "initial": 2, "min_workers": 2, "max_workers": 2, "plane": "balance only, 2"},
                  base | {"policy": args.joint_policy, "plane": "autoscale only"},
                  base | {"policy": args.joint_policy, "balance": "s3j", "joint": True, "plane": "joint"}]
        wanted = {p.strip() for p in args.joint_planes.split(";") if p.strip()}
        plan += [p for p in planes if not wanted or p["plane"] in wanted]
    for kind, rate in ((k, float(v)) for k, v in (x.split("=") for x in args.cpu_rate.split(",") if x)):
        plan.insert(0, {"cpu": True, "query": kind, "rate": rate})
    for kind, rate in ((k, float(v)) for k, v in (x.split("=") for x in args.actuation_rate.split(",") if x)):
        plan.insert(0, {"actuation": True, "query": kind, "rate": rate})
    results = []
    if plan:
        out = spawn(args, plan, False, "controller")
        results = out["runs"]
        for kind, found in out["probes"].items():
            probes.setdefault(kind, {}).update(found)
    if dynamic_plan:
        results += spawn(args, dynamic_plan, True, "dynamic")["runs"]
    report(args, probes, capacity, results)


def merged(files: list[str]) -> tuple[dict, dict, list[dict]]:
    """Probes, capacities and runs of earlier outputs (a matrix run in pieces, e.g. one
    workload at a time between other people's jobs); a later probe of a query wins."""
    probes, capacity, runs = {}, {}, []
    for name in files:
        data = json.loads(Path(name).read_text())
        for kind, found in (data.get("capacity_probe") or {}).items():
            probes.setdefault(kind, {}).update(found)
        capacity.update(data.get("capacity_used") or {})
        runs += data["runs"]
    return probes, capacity, runs


def report(args, probes: dict, capacity: dict, results: list[dict]) -> None:
    """Calibration, JSON and figures of the runs; the table again when they come from ``--merge``.
    A probe alone (``--policies ""``) is written too, for ``--merge`` with later pieces."""
    if not results and not probes:
        return
    data = {"uptime_end": os.getloadavg(), "cores": os.cpu_count(), "settings": {k: v for k, v in vars(args).items()},
            "capacity_probe": probes, "capacity_used": capacity, "runs": results}
    if args.merge:
        print(HEADER)
        for r in results:
            print(line(r))
    matrix = [r for r in results if not r["joint"] and r["balance"] == "none"]
    data["calibration"] = {}
    for kind in dict.fromkeys(r["query"] for r in matrix):
        try:
            data["calibration"][kind] = calibrate(kind, [r for r in matrix if r["query"] == kind], args, probes.get(kind))
        except (ValueError, np.linalg.LinAlgError) as e:
            print(f"calibration of {kind} skipped: {e}")
    data["nexmark_costs"] = {}
    for kind in dict.fromkeys(r["query"] for r in matrix if r["query"] in NEXMARK):
        try:
            cost = nexmark_costs(kind, [r for r in matrix if r["query"] == kind])
        except ValueError as e:
            print(f"stage costs of {kind} skipped: {e}")
            continue
        cost["state_reload"] = data["calibration"].get(kind, {}).get("state_reload", math.nan)
        data["nexmark_costs"][kind] = cost
        print(f"stages of {kind}: " + ", ".join(f"{st['name']} {st['cost'] * 1e6:.1f} us/record ({st['tasks']} tasks, "
                                                 f"in {st['in_per_source']:.2f}, out {st['out_per_source']:.2f} per record)"
                                                 for st in cost["stages"])
              + f"; batch overhead {cost['batch_overhead']:.2f} s; one executor {cost['capacity_1']:,.0f} records/s")
    Path(args.out).write_text(json.dumps(data, default=str, indent=1))
    if not results:
        print(f"probes only; JSON {args.out}")
        return
    figures = Path(args.out).resolve().parent
    figures.mkdir(parents=True, exist_ok=True)
    plot(results, figures)
    print(f"\n{len(results)} runs; JSON {args.out}; PNGs {figures}/autoscale_live_*.png")
    for kind, cal in data["calibration"].items():
        print(f"calibration {kind}: " + ", ".join(f"{k}={_f(v, '.3g')}" for k, v in cal.items() if k != "fits"))
        for k, fit in cal["fits"].items():
            print(f"  {k} executor(s): batch = {fit['intercept_s']:.1f} s + records / {fit['records_per_s']:,.0f}/s "
                  f"({fit['batches']} batches, rmse {fit['rmse_s']:.1f} s)")


if __name__ == "__main__":
    main()
