"""Spark's own checkpointing measured the CheckMate way (issue 17, part 1), public API only.

Spark's protocol is coordinated: each micro-batch writes its offsets (the WAL), commits every
stateful operator's state, and then the commit log, together. This bench runs one query
(``--query``) for each state store setting a user can choose (RocksDB with changelog
checkpointing, RocksDB without it, the HDFS-backed default store; ``--snapshot`` deltas between
snapshots) and trigger interval:

- ``q12``: a NexMark-Q12-style query (the rate source as bids, bidder = a hash of the value; a
  running count per bidder in 1-second event-time windows, update mode, the noop sink);
- ``similarity``: driftjoin's similarity join of two generated 2-D vector streams (half the rate
  each, Euclidean, threshold 0.005, 10-second windows, 2 workers, noop sink);
- ``equi``: driftjoin's equi join (SHC, the single dispatcher) of the same two streams on a key of 1,000 values drawn
  from the vectors, 10-second windows, 2 workers;
- ``natural``: driftjoin's natural join of the generated server-log documents, windows of
  2,000 documents, 2 partitions.

driftjoin's operators run on ``transformWithStateInPandas``, which needs RocksDB: the HDFS store
is skipped for them. Their sources pace rows in real time without a watermark in the query, so
a batch's rows are taken to have arrived between the previous batch's start and its own.
Reported from each batch's query progress:

- checkpoint time per batch: ``durationMs.walCommit + durationMs.commitOffsets`` plus every
  state operator's ``commitTimeMs`` (the CheckMate "checkpoint time" of Spark's round);
- batch time (``triggerExecution``), input and processed rows per second;
- latency p50/p99: a batch's rows arrived between its ``eventTime.min`` and ``eventTime.max``
  (``q12``; the previous and this batch's start for the others) and were done at
  ``timestamp + triggerExecution`` (rows spread evenly in between);
- MST: the highest rate tried whose median batch time stays within the trigger interval and
  whose processed rate is within 5% of the input rate;
- with ``--kill``: restart time (SIGKILL of the driver's process group to the first batch of
  the restarted query) and recovery time (to the first batch whose oldest row waited less than
  twice the median before the kill), as in ``bench/crash_harness.py``.

Each setting runs in its own driver process (``--child``), so the state store settings apply
and the kill is real. Example: ``nice -n 10 .venv/bin/python bench/checkpointing_spark.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np

STORES = {
    "changelog": ("org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider", "true"),
    "rocksdb": ("org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider", "false"),
    "hdfs": ("org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider", "false"),
}


# --- the driver of one setting (a separate process) ----------------------------------------------

QUERIES = ("q12", "similarity", "equi", "natural")
#: driftjoin's operators are transformWithStateInPandas, which runs on RocksDB only.
DRIFTJOIN_STORES = ("changelog", "rocksdb")


def _q12(spark, rate: float):
    from pyspark.sql import functions as F

    bids = (spark.readStream.format("rate").option("rowsPerSecond", int(rate)).option("numPartitions", 2).load()
            .select("timestamp", ((F.col("value") * 7919) % 1000).alias("bidder")))
    counts = bids.withWatermark("timestamp", "2 seconds").groupBy(F.window("timestamp", "1 second"), "bidder").count()
    return counts.writeStream.outputMode("update")


def _vectors(spark, rate: float, stream: int):
    return (spark.readStream.format("driftjoin").option("stream", stream).option("rate", max(1, int(rate / 2)))
            .option("dim", 2).option("seed", 11).option("partitions", 1).load())


def _similarity(spark, rate: float):
    from driftjoin import similarity_join

    return similarity_join(_vectors(spark, rate, 0), _vectors(spark, rate, 1), threshold=0.005, metric="euclidean",
                           window="10 seconds", dim=2, parallelism=2, ingest_col="ts").writeStream


def _equi(spark, rate: float):
    from pyspark.sql import functions as F

    from driftjoin import equi_join

    def keyed(stream: int):
        v = _vectors(spark, rate, stream)
        return v.select("id", "ts", F.floor((F.col("vector")[0] + 1) * 500).cast("long").alias("k"))

    # the single dispatcher (the pipeline measured when this query was added); the parallel
    # routing needs a metrics_dir that stays the same across the --kill restart
    return equi_join(keyed(0), keyed(1), on="k", within="10 seconds", time_col="ts", parallelism=2,
                     routing="dispatcher").writeStream


def _natural(spark, rate: float):
    from driftjoin import natural_join

    docs = (spark.readStream.format("driftjoin-docs").option("kind", "serverlog").option("rate", int(rate))
            .option("seed", 3).option("partitions", 1).load())
    return natural_join(docs, window=2000, partitions=2).writeStream


def _session(cfg: dict):
    """A local[2] session with the state store setting of ``cfg`` (driftjoin's own for its queries)."""
    provider, changelog = STORES[cfg["store"]]
    if cfg["query"] == "q12":
        from pyspark.sql import SparkSession

        spark = (SparkSession.builder.master("local[2]").appName("checkpointing-spark")
                 .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
                 .config("spark.sql.shuffle.partitions", "2").config("spark.sql.adaptive.enabled", "false")
                 .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -Dlog4j2.level=error")
                 .config("spark.sql.session.timeZone", "UTC").getOrCreate())
        spark.sparkContext.setLogLevel("ERROR")
    else:
        from driftjoin import local_session

        spark = local_session(2, "checkpointing-spark")
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", provider)
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", changelog)
    spark.conf.set("spark.sql.streaming.stateStore.minDeltasForSnapshot", str(cfg["snapshot"]))
    return spark


def child(cfg: dict) -> None:
    spark = _session(cfg)
    build = {"q12": _q12, "similarity": _similarity, "equi": _equi, "natural": _natural}[cfg["query"]]
    for rate in cfg["rates"]:
        ckpt = cfg["checkpoint"] or tempfile.mkdtemp(prefix="ckpt-spark-")
        q = (build(spark, rate).format("noop").option("checkpointLocation", ckpt)
             .trigger(processingTime=f"{cfg['trigger']} seconds").start())
        seen: set[int] = set()
        while cfg["batches"] <= 0 or len(seen) < cfg["batches"]:
            for p in q.recentProgress:
                d = json.loads(p.json) if hasattr(p, "json") else p
                if d["batchId"] in seen:
                    continue
                seen.add(d["batchId"])
                print(json.dumps({"rate": rate, "got": time.time(), "batchId": d["batchId"],
                                  "timestamp": d["timestamp"], "durationMs": d.get("durationMs", {}),
                                  "eventTime": d.get("eventTime", {}), "numInputRows": d.get("numInputRows", 0),
                                  "inputRowsPerSecond": d.get("inputRowsPerSecond", 0.0),
                                  "processedRowsPerSecond": d.get("processedRowsPerSecond", 0.0),
                                  "commitTimeMs": sum(s.get("commitTimeMs", 0) for s in d.get("stateOperators", []))}),
                      flush=True)
            time.sleep(0.2)
        q.stop()
        if not cfg["checkpoint"]:
            shutil.rmtree(ckpt, ignore_errors=True)
    spark.stop()


# --- the parent: run settings, read progress, compute the metrics ---------------------------------

def _ts(s: str) -> float:
    return datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def _start(cfg: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, __file__, "--child", json.dumps(cfg)], stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)


def _lines(proc: subprocess.Popen):
    for line in proc.stdout:
        line = line.strip()
        if line.startswith("{"):
            yield json.loads(line)


def _arrivals(b: dict, prev: dict | None) -> tuple[float, float] | None:
    """When a batch's rows arrived (earliest, latest): its event times, else since the batch before."""
    et = b["eventTime"]
    if "min" in et:
        return _ts(et["min"]), _ts(et["max"])
    if prev is None:
        return None
    return _ts(prev["timestamp"]), _ts(b["timestamp"])


def _done(b: dict) -> float:
    return _ts(b["timestamp"]) + b["durationMs"].get("triggerExecution", 0) / 1e3


def _latencies(batches: list[dict], chosen: list[dict]) -> np.ndarray:
    """Waits of the rows of the ``chosen`` batches (``batches``: all of them, in order)."""
    ids = {b["batchId"] for b in chosen}
    out = []
    for prev, b in zip([None, *batches[:-1]], batches):
        span = _arrivals(b, prev)
        if span is not None and b["batchId"] in ids:
            out.append(_done(b) - np.linspace(span[1], span[0], 50))
    return np.concatenate(out) if out else np.zeros(0)


def summarise(batches: list[dict], trigger: float, warmup: int = 2) -> dict[str, Any]:
    steady = [b for b in batches if b["numInputRows"] > 0][warmup:]
    if not steady:
        return {}
    dur = np.array([b["durationMs"].get("triggerExecution", 0) for b in steady], dtype=float)
    ckpt = np.array([b["durationMs"].get("walCommit", 0) + b["durationMs"].get("commitOffsets", 0) + b["commitTimeMs"]
                     for b in steady], dtype=float)
    lat = _latencies(batches, steady)
    inp = float(np.mean([b["inputRowsPerSecond"] for b in steady]))
    proc = float(np.mean([b["processedRowsPerSecond"] for b in steady]))
    return {"batches": len(steady), "batch_ms": float(np.median(dur)), "checkpoint_ms": float(np.median(ckpt)),
            "checkpoint_share": float(np.sum(ckpt) / max(np.sum(dur), 1.0)),
            "state_commit_ms": float(np.median([b["commitTimeMs"] for b in steady])),
            "input_rows_s": inp, "processed_rows_s": proc,
            "p50_ms": float(np.percentile(lat, 50) * 1e3) if len(lat) else float("nan"),
            "p99_ms": float(np.percentile(lat, 99) * 1e3) if len(lat) else float("nan"),
            "sustainable": bool(np.median(dur) <= trigger * 1e3 and proc >= 0.95 * inp)}


def run_setting(query: str, store: str, trigger: float, rates: list[float], batches: int, snapshot: int) -> list[dict]:
    proc = _start({"query": query, "store": store, "trigger": trigger, "rates": rates, "batches": batches,
                   "snapshot": snapshot, "checkpoint": None})
    lines = list(_lines(proc))
    proc.wait()
    rows = []
    for rate in rates:
        s = summarise([b for b in lines if b["rate"] == rate], trigger)
        rows.append({"query": query, "store": store, "trigger": trigger, "snapshot": snapshot, "rate": rate, **s})
    return rows


def kill_test(query: str, store: str, trigger: float, rate: float, snapshot: int, before: int = 5,
              after: int = 8) -> dict:
    ckpt = tempfile.mkdtemp(prefix="ckpt-spark-kill-")
    cfg = {"query": query, "store": store, "trigger": trigger, "rates": [rate], "batches": 0, "snapshot": snapshot,
           "checkpoint": ckpt}
    proc = _start(cfg)
    pre = []
    for b in _lines(proc):
        pre.append(b)
        if len(pre) >= before:
            break
    killed = time.time()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    spans = [(b, _arrivals(b, prev)) for prev, b in zip(pre, pre[1:])]
    waits = [_done(b) - span[0] for b, span in spans if span is not None]
    normal = 2 * float(np.median(waits)) if waits else float("nan")
    proc = _start(cfg)
    restart = recovery = float("nan")
    n = 0
    prev = None
    for b in _lines(proc):
        n += 1
        if np.isnan(restart):
            restart = b["got"] - killed
        span = _arrivals(b, prev)
        prev = b
        if span is not None and _done(b) - span[0] <= normal:
            recovery = b["got"] - killed
            break
        if n >= after:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    shutil.rmtree(ckpt, ignore_errors=True)
    return {"query": query, "store": store, "trigger": trigger, "rate": rate, "restart_s": restart, "recovery_s": recovery,
            "normal_wait_s": normal}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--query", default="q12", help=f"one or more of {','.join(QUERIES)}, comma-separated")
    ap.add_argument("--stores", default="changelog,rocksdb,hdfs")
    ap.add_argument("--triggers", default="1,4", help="trigger intervals in seconds")
    ap.add_argument("--rates", default="2000,20000,80000", help="input rows per second to try")
    ap.add_argument("--batches", type=int, default=8, help="batches per rate (the first 2 are warm-up)")
    ap.add_argument("--snapshot", type=int, default=10, help="minDeltasForSnapshot (deltas between snapshots)")
    ap.add_argument("--kill", action="store_true", help="also SIGKILL and restart each store once")
    ap.add_argument("--out", default="bench/results/checkpointing_spark.json")
    args = ap.parse_args()
    if args.child:
        child(json.loads(args.child))
        return
    rates = [float(x) for x in args.rates.split(",")]
    queries = args.query.split(",")
    unknown = sorted(set(queries) - set(QUERIES))
    if unknown:
        ap.error(f"unknown --query {', '.join(unknown)}: choose from {', '.join(QUERIES)}")
    triggers = [float(x) for x in args.triggers.split(",")]
    settings = [(q, store) for q in queries for store in args.stores.split(",")
                if q == "q12" or store in DRIFTJOIN_STORES]
    rows, kills = [], []
    print(f"{'query':<11}{'store':<10} {'trigger':>7} {'rate/s':>8} {'batch ms':>9} {'ckpt ms':>8} {'ckpt %':>6} "
          f"{'state ms':>8} {'proc/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ok':>3}")
    for query, store in settings:
        for trig in triggers:
            for r in run_setting(query, store, trig, rates, args.batches, args.snapshot):
                rows.append(r)
                if "batch_ms" not in r:
                    print(f"{query:<11}{store:<10} {trig:>7} {r['rate']:>8.0f}  (no steady batches)")
                    continue
                print(f"{query:<11}{store:<10} {trig:>7} {r['rate']:>8.0f} {r['batch_ms']:>9.0f} {r['checkpoint_ms']:>8.0f} "
                      f"{100 * r['checkpoint_share']:>6.1f} {r['state_commit_ms']:>8.0f} {r['processed_rows_s']:>9.0f} "
                      f"{r['p50_ms']:>8.0f} {r['p99_ms']:>8.0f} {'yes' if r['sustainable'] else 'no':>3}", flush=True)
    print("\nMST (highest sustainable rate tried):")
    for query, store in settings:
        for trig in triggers:
            ok = [r["rate"] for r in rows if (r["query"], r["store"], r["trigger"]) == (query, store, trig)
                  and r.get("sustainable")]
            print(f"  {query:<11}{store:<10} trigger {trig:g} s: {max(ok) if ok else 'none of the rates'}")
    if args.kill:
        print(f"\n{'query':<11}{'store':<10} {'restart s':>9} {'recovery s':>10}")
        for query, store in settings:
            k = kill_test(query, store, triggers[0], rates[len(rates) // 2], args.snapshot)
            kills.append(k)
            print(f"{query:<11}{store:<10} {k['restart_s']:>9.1f} {k['recovery_s']:>10.1f}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"settings": vars(args), "runs": rows, "kills": kills}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
