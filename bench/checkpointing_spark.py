"""Spark's own checkpointing measured the CheckMate way (issue 17, part 1), public API only.

Spark's protocol is coordinated: each micro-batch writes its offsets (the WAL), commits every
stateful operator's state, and then the commit log, together. This bench runs a NexMark-Q12-
style query (the rate source as bids, bidder = a hash of the value; a running count per bidder
in 1-second event-time windows, update mode, the noop sink) for each state store setting a
user can choose (RocksDB with changelog checkpointing, RocksDB without it, the HDFS-backed
default store; ``--snapshot`` deltas between snapshots) and trigger interval, and reports from
each batch's query progress:

- checkpoint time per batch: ``durationMs.walCommit + durationMs.commitOffsets`` plus every
  state operator's ``commitTimeMs`` (the CheckMate "checkpoint time" of Spark's round);
- batch time (``triggerExecution``), input and processed rows per second;
- latency p50/p99: a batch's rows arrived between its ``eventTime.min`` and ``eventTime.max``
  and were done at ``timestamp + triggerExecution`` (rows spread evenly in between);
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

def child(cfg: dict) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    provider, changelog = STORES[cfg["store"]]
    spark = (SparkSession.builder.master("local[2]").appName("checkpointing-spark")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").config("spark.sql.adaptive.enabled", "false")
             .config("spark.sql.streaming.stateStore.providerClass", provider)
             .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", changelog)
             .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", str(cfg["snapshot"]))
             .config("spark.driver.extraJavaOptions", "-XX:+UseSerialGC -Dlog4j2.level=error")
             .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    for rate in cfg["rates"]:
        ckpt = cfg["checkpoint"] or tempfile.mkdtemp(prefix="ckpt-spark-")
        bids = (spark.readStream.format("rate").option("rowsPerSecond", int(rate)).option("numPartitions", 2).load()
                .select("timestamp", ((F.col("value") * 7919) % 1000).alias("bidder")))
        counts = (bids.withWatermark("timestamp", "2 seconds")
                  .groupBy(F.window("timestamp", "1 second"), "bidder").count())
        q = (counts.writeStream.outputMode("update").format("noop").option("checkpointLocation", ckpt)
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


def _latencies(batches: list[dict]) -> np.ndarray:
    out = []
    for b in batches:
        et = b["eventTime"]
        if "min" not in et:
            continue
        done = _ts(b["timestamp"]) + b["durationMs"].get("triggerExecution", 0) / 1e3
        out.append(done - np.linspace(_ts(et["max"]), _ts(et["min"]), 50))
    return np.concatenate(out) if out else np.zeros(0)


def summarise(batches: list[dict], trigger: float, warmup: int = 2) -> dict[str, Any]:
    steady = [b for b in batches if b["numInputRows"] > 0][warmup:]
    if not steady:
        return {}
    dur = np.array([b["durationMs"].get("triggerExecution", 0) for b in steady], dtype=float)
    ckpt = np.array([b["durationMs"].get("walCommit", 0) + b["durationMs"].get("commitOffsets", 0) + b["commitTimeMs"]
                     for b in steady], dtype=float)
    lat = _latencies(steady)
    inp = float(np.mean([b["inputRowsPerSecond"] for b in steady]))
    proc = float(np.mean([b["processedRowsPerSecond"] for b in steady]))
    return {"batches": len(steady), "batch_ms": float(np.median(dur)), "checkpoint_ms": float(np.median(ckpt)),
            "checkpoint_share": float(np.sum(ckpt) / max(np.sum(dur), 1.0)),
            "state_commit_ms": float(np.median([b["commitTimeMs"] for b in steady])),
            "input_rows_s": inp, "processed_rows_s": proc,
            "p50_ms": float(np.percentile(lat, 50) * 1e3) if len(lat) else float("nan"),
            "p99_ms": float(np.percentile(lat, 99) * 1e3) if len(lat) else float("nan"),
            "sustainable": bool(np.median(dur) <= trigger * 1e3 and proc >= 0.95 * inp)}


def run_setting(store: str, trigger: float, rates: list[float], batches: int, snapshot: int) -> list[dict]:
    proc = _start({"store": store, "trigger": trigger, "rates": rates, "batches": batches, "snapshot": snapshot,
                   "checkpoint": None})
    lines = list(_lines(proc))
    proc.wait()
    rows = []
    for rate in rates:
        s = summarise([b for b in lines if b["rate"] == rate], trigger)
        rows.append({"store": store, "trigger": trigger, "snapshot": snapshot, "rate": rate, **s})
    return rows


def kill_test(store: str, trigger: float, rate: float, snapshot: int, before: int = 5, after: int = 8) -> dict:
    ckpt = tempfile.mkdtemp(prefix="ckpt-spark-kill-")
    cfg = {"store": store, "trigger": trigger, "rates": [rate], "batches": 0, "snapshot": snapshot, "checkpoint": ckpt}
    proc = _start(cfg)
    pre = []
    for b in _lines(proc):
        pre.append(b)
        if len(pre) >= before:
            break
    killed = time.time()
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    waits = [_ts(b["timestamp"]) + b["durationMs"].get("triggerExecution", 0) / 1e3 - _ts(b["eventTime"]["min"])
             for b in pre[1:] if "min" in b["eventTime"]]
    normal = 2 * float(np.median(waits)) if waits else float("nan")
    proc = _start(cfg)
    restart = recovery = float("nan")
    n = 0
    for b in _lines(proc):
        n += 1
        if np.isnan(restart):
            restart = b["got"] - killed
        et = b["eventTime"]
        if "min" in et:
            wait = _ts(b["timestamp"]) + b["durationMs"].get("triggerExecution", 0) / 1e3 - _ts(et["min"])
            if wait <= normal:
                recovery = b["got"] - killed
                break
        if n >= after:
            break
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    shutil.rmtree(ckpt, ignore_errors=True)
    return {"store": store, "trigger": trigger, "rate": rate, "restart_s": restart, "recovery_s": recovery,
            "normal_wait_s": normal}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--child", help=argparse.SUPPRESS)
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
    rows, kills = [], []
    print(f"{'store':<10} {'trigger':>7} {'rate/s':>8} {'batch ms':>9} {'ckpt ms':>8} {'ckpt %':>6} {'state ms':>8} "
          f"{'proc/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'ok':>3}")
    for store in args.stores.split(","):
        for trig in (float(x) for x in args.triggers.split(",")):
            for r in run_setting(store, trig, rates, args.batches, args.snapshot):
                rows.append(r)
                if "batch_ms" not in r:
                    print(f"{store:<10} {trig:>7} {r['rate']:>8.0f}  (no steady batches)")
                    continue
                print(f"{store:<10} {trig:>7} {r['rate']:>8.0f} {r['batch_ms']:>9.0f} {r['checkpoint_ms']:>8.0f} "
                      f"{100 * r['checkpoint_share']:>6.1f} {r['state_commit_ms']:>8.0f} {r['processed_rows_s']:>9.0f} "
                      f"{r['p50_ms']:>8.0f} {r['p99_ms']:>8.0f} {'yes' if r['sustainable'] else 'no':>3}", flush=True)
    print("\nMST (highest sustainable rate tried):")
    for store in args.stores.split(","):
        for trig in (float(x) for x in args.triggers.split(",")):
            ok = [r["rate"] for r in rows if r["store"] == store and r["trigger"] == trig and r.get("sustainable")]
            print(f"  {store:<10} trigger {trig:g} s: {max(ok) if ok else 'none of the rates'}")
    if args.kill:
        trig = float(args.triggers.split(",")[0])
        print(f"\n{'store':<10} {'restart s':>9} {'recovery s':>10}")
        for store in args.stores.split(","):
            k = kill_test(store, trig, rates[len(rates) // 2], args.snapshot)
            kills.append(k)
            print(f"{store:<10} {k['restart_s']:>9.1f} {k['recovery_s']:>10.1f}", flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps({"settings": vars(args), "runs": rows, "kills": kills}, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
