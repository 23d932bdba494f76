"""Record latency of driftjoin's streaming joins beside the engine's floor, one scenario per command.

    flock /tmp/bench.lock .venv/bin/python bench/latency.py SCENARIO [--seconds S] [--conf KEY=VALUE ...]
        [--cap N] [--trigger SECONDS] [--label TEXT] [--no-floor]

Each scenario (``SCENARIOS``; ``--list`` prints them) runs in a fresh Python process (a new driver,
as a user's job starts), and right after it, in another fresh process of the same command, the
**floor**: the same source, the same sink, the same trigger and the same session settings with
one Python stateful stage of trivial work (``transformWithStateInPandas`` counting rows per key,
two keys, two state partitions) instead of the join. The ratios scenario / floor are measured in
one command, minutes apart, so the machine's load moves both.

What is measured, per input record (not sampled):

- **record latency** = the time its micro-batch committed (the progress report's ``timestamp``
  plus ``triggerExecution``) minus the time it arrived (a paced generator's record ``k``: ``start
  + k / rate``; a file: when the producer renamed it into the folder). It splits into **waiting**
  (until its batch started) and **the batch** (start to commit). The records of each batch come
  from the source offsets of its progress report (a file source's offsets through the
  checkpoint's source log), so every record is counted once.
- **pair latency** (similarity joins, what the issue's numbers are): the operator's emission
  time minus the pair's later ingestion time, from the workers' statistics (histograms of 20
  buckets per decade: a quantile is a bucket's upper bound, +12% at most); the dedup scenario
  reads it exactly from the sink instead. Per worker batch the emission splits the batch into
  the batch's own work (start to emission) and handing over the output (emission to commit).
- **steady state**: records that arrived 20 s or more after the query started (``--steady``);
  **start-up**: the records and pairs of the first two micro-batches with data.
- **batches**: durations (median, p90, max) of the steady batches with data, the number and
  median duration of batches without data (the empty-batch floor itself), Spark's phases.
- **kept up**: every offered record was processed, the last records were committed within
  ``max(5 s, 3 x the median batch)`` of their arrival, and the steady latency did not grow (the
  last third's median record latency at most 2x the first third's + 0.5 s).
- **load**: the 1-minute load average, sampled every 5 s during each process.

Writes ``bench/results/latency_<scenario>[_<label>].json`` and ``.png`` (record latency per
batch over time, scenario and floor) and prints one table. ``--conf`` passes Spark settings to
both processes (the levers of issue 37), ``--cap`` caps a batch's records per stream (generator
``max_records_per_batch``) or files (``maxFilesPerTrigger``), ``--trigger`` replaces the
scenario's processing-time trigger (0: back to back). ``--versus KEY=VALUE`` measures a lever:
each process (the scenario's, the floor's) runs twice, without and then with the setting, and the
ratios with / without are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
RESULTS = BENCH / "results"
WORK = BENCH / "out" / "latency"
#: records arriving this long after the query started are the steady state
STEADY_S = 20.0
#: micro-batches with data at the start of a run counted as start-up (as driftjoin.app.report)
STARTUP_BATCHES = 2


# ---------------------------------------------------------------------------------------------- scenarios


@dataclass(frozen=True)
class Scenario:
    """One benchmark setting. ``source``: "generator" (paced vector streams), "docs" (paced JSON
    documents) or "files" (a producer writes a file of JSON lines every ``tick`` seconds);
    ``rate``: records/s per stream (files: per side); ``trigger``: seconds (0: back to back)."""

    name: str
    what: str
    source: str
    rate: int
    seconds: float
    parallelism: int
    sink: str
    trigger: float
    streams: int = 2
    options: dict = field(default_factory=dict)
    goal: str = ""


SCENARIOS = {s.name: s for s in [
    Scenario("dedup", "FEBRL names, edit distance 2, within 30 s, PassJoin, 2 workers (issue 37's benchmark)",
             "files", 1000, 300, 2, "parquet", 0.0, goal="pair p50 <= 1 s, p99 <= 2 s over the whole run, kept up, exact"),
    Scenario("readme", "README's first example: angular 0.1%, 1-minute windows, 5 workers in 2 tasks, 1 s trigger",
             "generator", 1000, 180, 5, "parquet", 1.0, goal="pair p99 <= 2 s"),
    Scenario("demo", "driftjoin demo: angular 0.1%, 20 s windows, 2 workers, 1 s trigger, 60 s",
             "generator", 500, 60, 2, "parquet", 1.0, goal="pair p99 of the first two batches <= 3 s"),
    Scenario("s3j-0.01", "S3J paper setting at 0.01%: angular, 1-minute windows, 5 workers in 2 tasks, pairs-lean",
             "generator", 4000, 90, 5, "noop", 0.0, options={"selectivity": 0.0001}, goal="pair p99 <= 1.2 s"),
    Scenario("s3j-0.1", "S3J paper setting at 0.1% (the paper's): as above",
             "generator", 4000, 90, 5, "noop", 0.0, options={"selectivity": 0.001}, goal="pair p99 <= 4 s"),
    Scenario("topk", "topk_set_join: Zipf token sets (10,000 tokens, 5-15 per set), k = 10, within 10 s, 1 worker",
             "files", 1000, 120, 1, "parquet", 0.0, streams=1, goal="steady record p99 <= 4x the floor's"),
    Scenario("natural", "natural_join: server-log documents (docs/natural_join.md), 10 s windows, 2 joiners",
             "docs", 2000, 120, 2, "parquet", 0.0, streams=1, goal="steady record p99 <= 4x the floor's"),
    Scenario("equi", "equi_join (SHC): uniform keys over 10,000 values, within 30 s, 2 workers",
             "files", 1000, 120, 2, "parquet", 0.0, goal="steady record p99 <= 4x the floor's"),
]}


# ---------------------------------------------------------------------------------------------- inputs


class FileProducer:
    """Writes a file of JSON lines into ``folder`` every ``tick`` seconds (to a hidden name, then
    renamed: the file source sees whole files only) and remembers when each file and record arrived."""

    def __init__(self, folder: Path, lines: Callable[[int, float], list[dict]], seconds: float, tick: float = 0.5) -> None:
        self.folder, self.lines, self.tick = folder, lines, tick
        self.ticks = int(round(seconds / tick))
        self.arrived: dict[str, tuple[float, int]] = {}
        self.record_time: dict[int, float] = {}
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        folder.mkdir(parents=True, exist_ok=True)

    def start(self, at: float) -> None:
        self.started = at
        self.thread.start()

    def run(self) -> None:
        for k in range(self.ticks):
            if self.stop.is_set():
                return
            time.sleep(max(0.0, self.started + k * self.tick - time.time()))
            now = time.time()
            rows = self.lines(k, now)
            name = f"f{k:06d}.json"
            tmp = self.folder / f".{name}.tmp"
            tmp.write_text("".join(json.dumps(r) + "\n" for r in rows))
            tmp.rename(self.folder / name)
            self.arrived[name] = (time.time(), len(rows))
            for r in rows:
                self.record_time[r["id"]] = r["ts"]

    def records(self) -> int:
        return sum(n for _, n in self.arrived.values())


def febrl_lines(rate: int, seconds: float, tick: float, seed: int = 0) -> Callable[[int, float], list[dict]]:
    """bench/metric_spark.py's name stream: random FEBRL given name + surname pairs on both sides,
    plus FEBRL's originals on the left and their known duplicates on the right one second later."""
    sys.path.insert(0, str(BENCH))
    from metric_spark import febrl_groups

    rng = np.random.default_rng(seed)
    groups, given, sur = febrl_groups()
    order = rng.permutation(len(groups))
    per_tick = int(rate * tick)
    known_per_tick = max(1, len(groups) // int(seconds / tick) + 1)
    state = {"id": 0, "g": 0}

    def lines(k: int, now: float) -> list[dict]:
        out = []
        for side in (0, 1):
            for _ in range(per_tick):
                out.append({"id": state["id"], "side": side, "name": f"{given[rng.integers(len(given))]} "
                            f"{sur[rng.integers(len(sur))]}", "ts": now})
                state["id"] += 1
        for _ in range(known_per_tick):
            if state["g"] >= len(groups):
                break
            org, dups = groups[order[state["g"]]]
            state["g"] += 1
            left = state["id"]
            out.append({"id": left, "side": 0, "name": org, "ts": now, "known": -1})
            state["id"] += 1
            for dup in dups:
                out.append({"id": state["id"], "side": 1, "name": dup, "ts": now + 1.0, "known": left})
                state["id"] += 1
        return out

    return lines


def set_lines(rate: int, tick: float, seed: int = 0) -> Callable[[int, float], list[dict]]:
    """SWOOP's Zipf workload (bench/swoop_core.py ``zipf``) as JSON lines stamped with their arrival."""
    from driftjoin.swoop.generator import set_stream

    sets = set_stream(None, vocabulary=10_000, s=1.0, size=(5, 15), seed=seed, string_tokens=True)
    per_tick = int(rate * tick)

    def lines(k: int, now: float) -> list[dict]:
        return [{"id": int(i), "tokens": list(tokens), "ts": now} for i, tokens, _ in (next(sets) for _ in range(per_tick))]

    return lines


def key_lines(rate: int, tick: float, domain: int = 10_000, seed: int = 0) -> Callable[[int, float], list[dict]]:
    """Two sides of rows with uniform keys over ``domain`` values and a payload."""
    rng = np.random.default_rng(seed)
    per_tick = int(rate * tick)
    state = {"id": 0}

    def lines(k: int, now: float) -> list[dict]:
        out = []
        for side in (0, 1):
            for key in rng.integers(domain, size=per_tick).tolist():
                out.append({"id": state["id"], "side": side, "k": key, "x": state["id"] * 7 % 1000, "ts": now})
                state["id"] += 1
        return out

    return lines


# ---------------------------------------------------------------------------------------------- the runs


def trivial_processor():
    """The floor's stateful processor: counts a key's rows in one value (defined here, so the
    Python workers get it by value)."""
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import LongType, StructField, StructType

    class Count(StatefulProcessor):
        def init(self, handle) -> None:
            self.count = handle.getValueState("count", StructType([StructField("n", LongType())]))

        def handleInputRows(self, key, rows, timerValues) -> Iterator[pd.DataFrame]:  # noqa: N802
            n = sum(len(f) for f in rows)
            total = (self.count.get()[0] if self.count.exists() else 0) + n
            self.count.update((total,))
            yield pd.DataFrame({"key": [int(key[0])], "n": [total]})

        def close(self) -> None:
            pass

    return Count()


def floor_query(frames: list):
    """One Python stateful stage of trivial work over the scenario's input frames."""
    from pyspark.sql import functions as F

    rows = frames[0].select(F.pmod(F.hash(F.col("id")), F.lit(2)).cast("long").alias("key"))
    for f in frames[1:]:
        rows = rows.unionByName(f.select(F.pmod(F.hash(F.col("id")), F.lit(2)).cast("long").alias("key")))
    return rows.groupBy("key").transformWithStateInPandas(statefulProcessor=trivial_processor(),
                                                          outputStructType="key long, n long", outputMode="Update",
                                                          timeMode="None")


def build_inputs(spark, sc: Scenario, work: Path, cap: int | None, watermark: float | None = None
                 ) -> tuple[list, FileProducer | None]:
    """The scenario's input frames (with ``watermark``: Spark's ``withWatermark`` of that many
    seconds on ``ts``, as a user may declare it) and, for files, its producer (not started)."""
    frames, producer = _inputs(spark, sc, work, cap)
    if watermark is not None:
        frames = [f.withWatermark("ts", f"{watermark:g} seconds") for f in frames]
    return frames, producer


def _inputs(spark, sc: Scenario, work: Path, cap: int | None) -> tuple[list, FileProducer | None]:
    from pyspark.sql import functions as F

    total = int(sc.rate * sc.seconds)
    if sc.source == "generator":
        frames = []
        for i in range(sc.streams):
            r = (spark.readStream.format("driftjoin").option("stream", i).option("rate", sc.rate).option("dim", 2)
                 .option("seed", 7).option("total", total))
            if cap:
                r = r.option("max_records_per_batch", cap)
            frames.append(r.load())
        return frames, None
    if sc.source == "docs":
        r = spark.readStream.format("driftjoin-docs").option("kind", "serverlog").option("rate", sc.rate).option("total", total)
        if cap:
            r = r.option("max_docs_per_batch", cap)
        return [r.load()], None
    tick = 0.5
    if sc.name == "topk":
        lines, schema = set_lines(sc.rate, tick), "id long, tokens array<string>, ts double"
    elif sc.name == "equi":
        lines, schema = key_lines(sc.rate, tick), "id long, side int, k long, x long, ts double"
    else:
        lines, schema = febrl_lines(sc.rate, sc.seconds, tick), "id long, side int, name string, ts double"
    producer = FileProducer(work / "in", lines, sc.seconds, tick)
    stream = (spark.readStream.schema(schema).option("maxFilesPerTrigger", cap or 100_000).json(str(work / "in"))
              .withColumn("ts", F.col("ts").cast("timestamp")))
    if sc.streams == 1:
        return [stream], producer
    return [stream.where("side = 0").drop("side"), stream.where("side = 1").drop("side")], producer


def scenario_query(spark, sc: Scenario, frames: list, metrics: str):
    """The join of scenario ``sc`` over ``frames``: the DataFrame to write."""
    if sc.name == "dedup":
        from driftjoin import similarity_join

        pairs = similarity_join(frames[0], frames[1], threshold=2, metric="levenshtein", value_col="name",
                                within="30 seconds", time_col="ts", watermark="5 seconds", parallelism=2, output="pairs",
                                metrics_dir=metrics, partitions=sc.options.get("partitions"))
        return pairs.select("left_id", "right_id", "distance", "emit_time")
    if sc.name in ("readme", "demo") or sc.name.startswith("s3j"):
        from driftjoin import similarity_join

        kw = {"readme": dict(threshold=0.001, window="1 minute", parallelism=5, partitions=2),
              "demo": dict(threshold=0.001, window="20 seconds", parallelism=2)}.get(sc.name) or dict(
            threshold=sc.options["selectivity"], window="1 minute", parallelism=5, output="pairs-lean")
        if sc.options.get("partitions"):
            kw["partitions"] = sc.options["partitions"]
        return similarity_join(frames[0], frames[1], metric="angular", dim=2, ingest_col="ts", metrics_dir=metrics, **kw)
    if sc.name == "topk":
        from driftjoin import topk_set_join

        return topk_set_join(frames[0], k=10, similarity="jaccard", within="10 seconds", metrics_dir=metrics)
    if sc.name == "natural":
        from driftjoin.spark.natural.api import natural_join

        return natural_join(frames[0], window="10 seconds", time_col="ts", watermark="2 seconds", partitions=sc.parallelism,
                            metrics_dir=metrics)
    if sc.name == "equi":
        from driftjoin.spark.equi.api import equi_join

        return equi_join(frames[0], frames[1], on="k", within="30 seconds", time_col="ts", parallelism=sc.parallelism,
                         metrics_dir=metrics)
    raise ValueError(sc.name)


def load_sampler(samples: list[float], stop: threading.Event) -> threading.Thread:
    def run() -> None:
        while not stop.is_set():
            samples.append(os.getloadavg()[0])
            stop.wait(5.0)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def child(sc: Scenario, kind: str, args: argparse.Namespace, out: Path) -> None:
    """One process: the scenario's join (``kind`` "join") or its floor, then its raw measurements as JSON."""
    t_process = time.time()
    from driftjoin import local_session
    from driftjoin.spark.runtime.progress import ProgressLog

    conf = dict(c.split("=", 1) for c in args.conf)
    work = WORK / f"{sc.name}-{kind}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    parallelism = sc.parallelism if kind == "join" else 2
    warm = args.warm_up if args.warm_up is not None else sc.name == "demo"  # the demo warms up (driftjoin demo does)
    spark = local_session(parallelism, f"latency-{sc.name}-{kind}", conf=conf, warm_up=warm)
    t_session = time.time()
    frames, producer = build_inputs(spark, sc, work, args.cap, args.input_watermark)
    metrics = str(work / "metrics")
    trigger = sc.trigger if args.trigger is None else args.trigger
    load: list[float] = []
    stop = threading.Event()
    load_sampler(load, stop)
    if producer is not None:
        producer.start(time.time() + 1.0)
    if kind == "join" and sc.name == "demo" and args.trigger is None and not args.cap:
        from driftjoin.app.demo import start_demo_query  # the demo's own query, as `driftjoin demo` starts it

        q = start_demo_query(spark, work, seconds=sc.seconds, rate=sc.rate, parallelism=sc.parallelism)
    else:
        df = scenario_query(spark, sc, frames, metrics) if kind == "join" else floor_query(frames)
        writer = df.writeStream.option("checkpointLocation", str(work / "checkpoint")).trigger(processingTime=f"{trigger:g} seconds")
        writer = writer.format("noop") if sc.sink == "noop" else writer.format("parquet").option("path", str(work / "out"))
        q = writer.start()
    t_start = time.time()
    log = ProgressLog(q)
    # CPU of the JVM and its Python workers (not this driver, which also runs a file producer)
    from driftjoin.control.autoscale.collector import ProcessCpu
    from driftjoin.spark.runtime import jvm

    tree = ProcessCpu(spark.sparkContext.applicationId, jvm.driver_pid(spark))
    cpu_first: tuple[int, float] | None = None
    expected = sc.rate * sc.seconds * sc.streams if sc.source != "files" else None
    deadline = t_start + sc.seconds + max(60.0, sc.seconds)
    while time.time() < deadline and q.exception() is None:
        time.sleep(1.0)
        seen = log.poll()
        if cpu_first is None and seen:
            cpu_first = (seen, sum(tree.sample().values()))
        if expected is not None and seen >= expected:
            break
        if producer is not None and not producer.thread.is_alive():
            q.processAllAvailable()
            break
    log.poll()
    cpu_end = sum(tree.sample().values())
    t_end = time.time()
    error = q.exception()
    q.stop()
    stop.set()
    result: dict[str, Any] = {
        "scenario": sc.name, "kind": kind, "error": None if error is None else str(error)[:2000], "conf": conf,
        "cap": args.cap, "trigger_s": trigger, "warm_up": warm, "process_start": t_process, "session_ready": t_session,
        "query_start": t_start, "query_end": t_end, "load": load, "progress": log.progress,
        "cpu_ms_per_record": None if cpu_first is None or log.records <= cpu_first[0]
        else 1000 * (cpu_end - cpu_first[1]) / (log.records - cpu_first[0]),
    }
    if producer is not None:
        result["files"] = {name: list(v) for name, v in producer.arrived.items()}
        result["source_log"] = file_source_log(work / "checkpoint")
        result["offered"] = producer.records()
    else:
        result["offered"] = int(sc.rate * sc.seconds) * sc.streams
        result["rate"] = sc.rate
    if kind == "join":
        result["pairs"] = pair_measurements(spark, sc, work, metrics, producer)
    spark.stop()
    out.write_text(json.dumps(result, default=str))


def file_source_log(checkpoint: Path) -> dict[str, int]:
    """File name -> the file source's batch (log offset) that read it, from the checkpoint's source log."""
    out: dict[str, int] = {}
    for folder in sorted((checkpoint / "sources").glob("*")):
        for f in folder.iterdir():
            if f.name.startswith("."):
                continue
            for line in f.read_text().splitlines()[1:]:
                entry = json.loads(line)
                out[entry["path"].rsplit("/", 1)[-1]] = int(entry["batchId"])
    return out


def pair_measurements(spark, sc: Scenario, work: Path, metrics: str, producer: FileProducer | None) -> dict[str, Any]:
    """The pairs' latencies: per worker batch, the emission time, the batch and the latency
    histogram from the workers' statistics; for dedup also the exact latencies from the sink and
    the known duplicates found."""
    from driftjoin.spark.runtime.stats import STAMP, read_stats

    out: dict[str, Any] = {"batches": []}
    operator = {"topk": "swoop", "natural": "natural_joiner", "equi": "equi_worker"}.get(sc.name, "computation")
    for s in read_stats(metrics, operator):
        if "latency_hist" in s and STAMP in s:
            out["batches"].append({"batch": s[STAMP]["batch"], "emit": s["time"], "hist": s["latency_hist"],
                                   "worker": s.get("worker"), "pairs": s.get("pairs", 0),
                                   "timings": s.get("timings"), "state": s.get("state")})
    if sc.name == "dedup" and producer is not None:
        from pyspark.sql import functions as F
        from rapidfuzz.distance import Levenshtein

        rows = (spark.read.parquet(str(work / "out")).select("left_id", "right_id", F.unix_micros("emit_time").alias("emit_us"))
                .toPandas())
        times = producer.record_time
        later = np.maximum(rows["left_id"].map(times).to_numpy(float), rows["right_id"].map(times).to_numpy(float))
        out["exact_latency"] = (rows["emit_us"].to_numpy(float) / 1e6 - later).tolist()
        out["exact_emit"] = (rows["emit_us"].to_numpy(float) / 1e6).tolist()
        found = set(zip(rows["left_id"].tolist(), rows["right_id"].tolist()))
        out["duplicate_rows"] = int(len(rows) - len(found))
        names = {}
        known = []
        for f in sorted((work / "in").glob("f*.json")):
            for line in f.read_text().splitlines():
                r = json.loads(line)
                names[r["id"]] = r["name"]
                if r.get("known", -1) >= 0:
                    known.append((r["known"], r["id"]))
        within = [(a, b) for a, b in known if Levenshtein.distance(names[a], names[b]) <= 2]
        out["known_within_2"] = len(within)
        out["known_within_found"] = sum(1 for p in within if p in found)
        out["pairs_total"] = len(rows)
    return out


# ---------------------------------------------------------------------------------------------- analysis


def _when(p: dict) -> tuple[float, float]:
    """A progress report's batch start and commit (epoch seconds)."""
    start = datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
    return start, start + p["durationMs"].get("triggerExecution", 0) / 1000


def _offset(o: Any) -> Any:
    return json.loads(o) if isinstance(o, str) else o


def record_arrivals(r: dict) -> list[tuple[dict, np.ndarray]]:
    """(progress report, arrival times of the records it read) per batch with data."""
    out = []
    for p in r["progress"]:
        if not p["numInputRows"]:
            continue
        arrivals = []
        for src in p["sources"]:
            start, end = _offset(src.get("startOffset")), _offset(src.get("endOffset"))
            if end is None:
                continue
            if "logOffset" in end:  # a file source: files of log offsets (start, end]
                lo = -1 if start is None else start["logOffset"]
                for name, b in r["source_log"].items():
                    if lo < b <= end["logOffset"] and name in r["files"]:
                        t, n = r["files"][name]
                        arrivals.append(np.full(n, t))
            else:  # a paced generator: record k arrived at start + k / rate
                i0 = 0 if start is None else start["index"]
                arrivals.append(end["start"] + np.arange(i0, end["index"]) / r["rate"])
        out.append((p, np.concatenate(arrivals) if arrivals else np.zeros(0)))
    return out


def _q(x: np.ndarray, q: float) -> float | None:
    return float(np.percentile(x, q)) if len(x) else None


def analyse(r: dict, steady_s: float) -> dict[str, Any]:
    """The numbers of one process's run (module docstring)."""
    t0 = r["query_start"]
    batches = record_arrivals(r)
    lat, wait, arr, per_batch = [], [], [], []
    startup: list[np.ndarray] = []
    for i, (p, a) in enumerate(batches):
        s, c = _when(p)
        lat.append(c - a)
        wait.append(s - a)
        arr.append(a)
        if i < STARTUP_BATCHES:
            startup.append(c - a)
        per_batch.append({"batch": p["batchId"], "start": s - t0, "end": c - t0, "rows": p["numInputRows"],
                          "duration": c - s, "p99": _q(c - a, 99), "max": float((c - a).max()) if len(a) else None})
    lat_a = np.concatenate(lat) if lat else np.zeros(0)
    wait_a = np.concatenate(wait) if wait else np.zeros(0)
    arr_a = np.concatenate(arr) if arr else np.zeros(0)
    steady = arr_a >= t0 + steady_s
    data = [p for p, _ in batches]
    steady_batches = [p for p in data if _when(p)[0] >= t0 + steady_s]
    durations = np.array([p["durationMs"].get("triggerExecution", 0) / 1000 for p in steady_batches])
    empty = [p for p in r["progress"] if not p["numInputRows"] and _when(p)[0] >= t0 + steady_s]
    empty_d = np.array([p["durationMs"].get("triggerExecution", 0) / 1000 for p in empty])
    phases = {k: _q(np.array([p["durationMs"].get(k, 0) for p in steady_batches], float), 50)
              for k in ("latestOffset", "queryPlanning", "addBatch", "walCommit", "commitOffsets")}
    commits = np.array([sum(o.get("commitTimeMs", 0) for o in p.get("stateOperators", [])) for p in steady_batches], float)
    processed = int(sum(p["numInputRows"] for p in r["progress"]))
    # kept up: everything read, the last records committed soon after they arrived, no growth
    last = lat_a[arr_a >= arr_a.max() - 2.0] if len(arr_a) else np.zeros(0)
    thirds = np.array_split(np.argsort(arr_a[steady]), 3) if steady.sum() >= 3 else []
    sl = lat_a[steady]
    first_third = _q(sl[thirds[0]], 50) if thirds else None
    last_third = _q(sl[thirds[2]], 50) if thirds else None
    median_batch = float(np.median(durations)) if len(durations) else 0.0
    drain = float(last.max()) if len(last) else None
    kept = (processed >= r["offered"] and drain is not None and drain <= max(5.0, 3 * median_batch)
            and first_third is not None and last_third <= 2 * first_third + 0.5)
    load = r["load"] or [float("nan")]
    out = {
        "error": r["error"], "offered": r["offered"], "processed": processed,
        "record_p50": _q(sl, 50), "record_p99": _q(sl, 99), "record_max": _q(sl, 100),
        "wait_p50": _q(wait_a[steady], 50), "wait_p99": _q(wait_a[steady], 99),
        "startup_record_p99": _q(np.concatenate(startup), 99) if startup else None,
        "first_batches_s": [round(_when(p)[1] - t0, 2) for p in data[:STARTUP_BATCHES]],
        "session_s": r["session_ready"] - r["process_start"], "query_started_s": r["query_start"] - r["process_start"],
        "batch_p50": _q(durations, 50), "batch_p90": _q(durations, 90), "batch_max": _q(durations, 100),
        "batches_with_data": len(steady_batches), "empty_batches": len(empty), "empty_batch_p50": _q(empty_d, 50),
        "phases_ms_p50": phases, "state_commit_ms_p50": _q(commits, 50),
        "rows_per_batch_p50": _q(np.array([p["numInputRows"] for p in steady_batches], float), 50),
        "rows_per_batch_max": _q(np.array([p["numInputRows"] for p in steady_batches], float), 100),
        "drain_s": drain, "latency_first_third_p50": first_third, "latency_last_third_p50": last_third, "kept_up": bool(kept),
        "load_min": float(np.nanmin(load)), "load_p50": float(np.nanmedian(load)), "load_max": float(np.nanmax(load)),
        "per_batch": per_batch, "cpu_ms_per_record": r.get("cpu_ms_per_record"),
    }
    if "pairs" in r:
        out.update(analyse_pairs(r, t0, steady_s))
    return out


def analyse_pairs(r: dict, t0: float, steady_s: float) -> dict[str, Any]:
    """Pair latency (emission minus the later ingestion), start-up and steady, and the split of
    each worker batch into its own work (batch start to emission) and the hand-over (emission to commit)."""
    from driftjoin.spark.runtime.stats import histogram_quantile

    when = {p["batchId"]: _when(p) for p in r["progress"]}
    data_batches = sorted(p["batchId"] for p in r["progress"] if p["numInputRows"])
    startup = set(data_batches[:STARTUP_BATCHES])
    pairs = r["pairs"]
    steady_h, startup_h, work, handover = None, None, [], []
    for b in pairs["batches"]:
        h = np.asarray(b["hist"])
        if b["batch"] in startup:
            startup_h = h if startup_h is None else startup_h + h
        elif b["batch"] in when and when[b["batch"]][0] >= t0 + steady_s:
            steady_h = h if steady_h is None else steady_h + h
            if b["pairs"]:
                s, c = when[b["batch"]]
                work.append(b["emit"] - s)
                handover.append(c - b["emit"])
    out: dict[str, Any] = {
        "pair_p50": None if steady_h is None else histogram_quantile(steady_h, 0.5),
        "pair_p99": None if steady_h is None else histogram_quantile(steady_h, 0.99),
        "startup_pair_p99": None if startup_h is None else histogram_quantile(startup_h, 0.99),
        "pairs_steady": None if steady_h is None else int(steady_h.sum()),
        "work_p50": _q(np.array(work), 50), "work_p90": _q(np.array(work), 90),
        "handover_p50": _q(np.array(handover), 50), "handover_p90": _q(np.array(handover), 90),
    }
    if "exact_latency" in pairs:  # dedup: every pair, from the sink, over the whole run
        lat = np.array(pairs["exact_latency"])
        out.update({"exact_pair_p50": _q(lat, 50), "exact_pair_p99": _q(lat, 99),
                    "exact_pair_p99_steady": _q(lat[np.array(pairs["exact_emit"]) >= t0 + steady_s], 99),
                    "pairs_total": pairs["pairs_total"], "duplicate_rows": pairs["duplicate_rows"],
                    "known_within_2": pairs["known_within_2"], "known_within_found": pairs["known_within_found"]})
    return out


# ---------------------------------------------------------------------------------------------- report


def _f(v: Any, unit: str = "") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.2f}{unit}"
    return f"{v:,}{unit}" if isinstance(v, int) else str(v)


ROWS = [("records offered / processed", lambda a: f"{a['offered']:,} / {a['processed']:,}"),
        ("record latency p50 / p99 (s)", lambda a: f"{_f(a['record_p50'])} / {_f(a['record_p99'])}"),
        ("  of it waiting for the batch p50 / p99", lambda a: f"{_f(a['wait_p50'])} / {_f(a['wait_p99'])}"),
        ("pair latency p50 / p99 (s)", lambda a: f"{_f(a.get('pair_p50'))} / {_f(a.get('pair_p99'))}"),
        ("  exact from the sink, whole run p50 / p99", lambda a: f"{_f(a.get('exact_pair_p50'))} / {_f(a.get('exact_pair_p99'))}"),
        ("  batch's work / hand-over p50 (s)", lambda a: f"{_f(a.get('work_p50'))} / {_f(a.get('handover_p50'))}"),
        ("start-up: record / pair p99 (s)", lambda a: f"{_f(a['startup_record_p99'])} / {_f(a.get('startup_pair_p99'))}"),
        ("first two batches committed at (s)", lambda a: " / ".join(_f(x) for x in a["first_batches_s"])),
        ("batch p50 / p90 / max (s)", lambda a: f"{_f(a['batch_p50'])} / {_f(a['batch_p90'])} / {_f(a['batch_max'])}"),
        ("rows per batch p50 / max", lambda a: f"{_f(a['rows_per_batch_p50'])} / {_f(a['rows_per_batch_max'])}"),
        ("batches with data / empty (empty p50 s)", lambda a: f"{a['batches_with_data']} / {a['empty_batches']} ({_f(a['empty_batch_p50'])})"),
        ("state commit p50 (ms)", lambda a: _f(a["state_commit_ms_p50"])),
        ("CPU ms per record (JVM + workers)", lambda a: _f(a.get("cpu_ms_per_record"))),
        ("drain after the last record (s)", lambda a: _f(a["drain_s"])),
        ("kept up", lambda a: _f(a["kept_up"])),
        ("load average min / p50 / max", lambda a: f"{a['load_min']:.1f} / {a['load_p50']:.1f} / {a['load_max']:.1f}")]


def report(sc: Scenario, runs: dict[str, dict]) -> None:
    names = list(runs)
    first = runs[names[0]]
    print(f"\n{sc.name}: {sc.what}; {sc.streams} x {sc.rate:,}/s for {sc.seconds:g} s, {sc.sink} sink, trigger "
          f"{first.get('trigger_s', sc.trigger):g} s, cap {first.get('cap')}, warm-up {first.get('warm_up')}, "
          f"conf {first.get('conf') or '-'}; goal: {sc.goal}")
    for name in names:
        if runs[name].get("error"):
            print(f"  {name} FAILED: {runs[name]['error'][:400]}")
    width = 44
    print(f"{'':<{width}}" + "".join(f"{n:>26}" for n in names))
    for title, fn in ROWS:
        cells = []
        for n in names:
            try:
                cells.append(fn(runs[n]["analysis"]))
            except (KeyError, TypeError):
                cells.append("-")
        print(f"{title:<{width}}" + "".join(f"{c:>26}" for c in cells))
    if "floor" in runs and "join" in runs:
        j, f = runs["join"]["analysis"], runs["floor"]["analysis"]
        for key, title in (("record_p99", "record p99"), ("record_p50", "record p50"), ("batch_p50", "batch p50")):
            if j.get(key) and f.get(key):
                print(f"ratio to the floor, {title}: {j[key] / f[key]:.2f}x")


def versus_ratios(runs: dict[str, dict], versus: list[str]) -> None:
    """Each ``--versus`` run against the same kind without the settings (below 1: the settings help)."""
    for kind in ("join", "floor"):
        if kind not in runs or f"{kind}+" not in runs:
            continue
        a, b = runs[kind]["analysis"], runs[f"{kind}+"]["analysis"]
        cells = []
        for key, title in (("record_p50", "record p50"), ("record_p99", "record p99"), ("pair_p99", "pair p99"),
                           ("batch_p50", "batch p50"), ("cpu_ms_per_record", "CPU per record")):
            if a.get(key) and b.get(key):
                cells.append(f"{title} {b[key] / a[key]:.2f}x")
        print(f"{kind} with {' '.join(versus)} / without: " + ", ".join(cells))


def plot(sc: Scenario, runs: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4))
    for name, r in runs.items():
        pb = r["analysis"]["per_batch"]
        ax.plot([b["end"] for b in pb], [b["max"] for b in pb], marker=".", label=f"{name}: slowest record per batch")
    ax.axvline(STEADY_S, color="grey", lw=0.5)
    ax.set(xlabel="seconds since the query started", ylabel="record latency (s)", title=f"latency: {sc.name}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("scenario", nargs="?", choices=sorted(SCENARIOS))
    ap.add_argument("--list", action="store_true", help="print the scenarios and exit")
    ap.add_argument("--seconds", type=float, help="override the scenario's length")
    ap.add_argument("--rate", type=int, help="override the scenario's records/s per stream")
    ap.add_argument("--conf", action="append", default=[], help="a Spark setting KEY=VALUE for both runs (repeat)")
    ap.add_argument("--cap", type=int, help="records per stream (generators) or files (files) per batch at most")
    ap.add_argument("--trigger", type=float, help="processing-time trigger in seconds (0: back to back)")
    ap.add_argument("--partitions", type=int,
                    help="the join's Spark state partitions (dedup, readme, s3j scenarios; default: the scenario's)")
    ap.add_argument("--label", default="", help="suffix of the result files")
    ap.add_argument("--steady", type=float, default=STEADY_S, help="seconds after the start before the steady state")
    ap.add_argument("--warm-up", dest="warm_up", action="store_true", default=None,
                    help="local_session(warm_up=True) in both runs (default: only the demo, as `driftjoin demo`)")
    ap.add_argument("--no-warm-up", dest="warm_up", action="store_false", help="no warm-up, also for the demo")
    ap.add_argument("--input-watermark", type=float, help="declare withWatermark('ts', S seconds) on the inputs")
    ap.add_argument("--versus", action="append", default=[],
                    help="a Spark setting KEY=VALUE to measure against the run without it: each process runs twice, "
                         "without and with it, side by side (repeat to set several at once)")
    ap.add_argument("--no-floor", action="store_true", help="run the scenario only")
    ap.add_argument("--floor-only", action="store_true", help="run the floor only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.list or not args.scenario:
        for s in SCENARIOS.values():
            print(f"{s.name:<10} {s.what} ({s.streams} x {s.rate:,}/s, {s.seconds:g} s); goal: {s.goal}")
        return
    sc = SCENARIOS[args.scenario]
    if args.seconds:
        sc = Scenario(**{**sc.__dict__, "seconds": args.seconds})
    if args.rate:
        sc = Scenario(**{**sc.__dict__, "rate": args.rate})
    if args.partitions:
        sc = Scenario(**{**sc.__dict__, "options": {**sc.options, "partitions": args.partitions}})
    if args.child:
        child(sc, args.child, args, Path(args.out))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    kinds = ["floor"] if args.floor_only else ["join"] if args.no_floor else ["join", "floor"]
    runs: dict[str, dict] = {}
    suffix = f"_{args.label}" if args.label else ""
    # with --versus: each kind without, then with the settings, one after the other (A B A' B')
    variants = [(kind, extra) for kind in kinds for extra in ([[], args.versus] if args.versus else [[]])]
    for kind, extra in variants:
        name = f"{kind}+" if extra else kind
        out = WORK / f"{sc.name}-{name}.json"
        out.parent.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, __file__, sc.name, "--child", kind, "--out", str(out)]
        for c in args.conf + extra:
            cmd += ["--conf", c]
        for flag, value in (("--cap", args.cap), ("--trigger", args.trigger), ("--seconds", args.seconds), ("--rate", args.rate),
                            ("--input-watermark", args.input_watermark), ("--partitions", args.partitions)):
            if value is not None:
                cmd += [flag, str(value)]
        if args.warm_up is not None:
            cmd.append("--warm-up" if args.warm_up else "--no-warm-up")
        print(f"[{time.strftime('%H:%M:%S')}] {sc.name} {name} (load {os.getloadavg()[0]:.1f}) ...", flush=True)
        run = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        if run.returncode != 0 or not out.exists():
            print(run.stdout[-2000:], run.stderr[-4000:])
            raise SystemExit(f"{sc.name} {name} failed")
        r = json.loads(out.read_text())
        r["analysis"] = analyse(r, args.steady)
        runs[name] = r
    report(sc, runs)
    if args.versus:
        versus_ratios(runs, args.versus)
    (RESULTS / f"latency_{sc.name}{suffix}.json").write_text(json.dumps(
        {k: {"analysis": v["analysis"], "conf": v["conf"], "cap": v["cap"], "trigger_s": v["trigger_s"],
             "warm_up": v.get("warm_up")} for k, v in runs.items()},
        indent=1, default=str))
    plot(sc, runs, RESULTS / f"latency_{sc.name}{suffix}.png")


if __name__ == "__main__":
    main()
