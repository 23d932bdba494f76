"""What one state call of a Python stateful processor costs, over TCP and over Unix domain sockets.

    flock /tmp/bench.lock .venv/bin/python bench/latency_state_calls.py [--calls 2000] [--batches 8]

Each state call of ``transformWithStateInPandas`` (``ValueState.get``/``exists``/``update``,
``MapState.getValue``/``updateValue``, the implicit key the engine sets per key) is a synchronous
protobuf round trip between the Python worker and the JVM's state server (SPARK-52333). A
streaming query of one stateful stage (2 keys, 2 partitions, noop sink, a paced generator source)
times ``--calls`` calls of each kind inside every batch; it runs twice, in two fresh processes
side by side: with ``spark.python.unix.domain.socket.enabled`` false (TCP, Spark's default) and
true. Prints the median microseconds per call per kind and the batch durations, and writes
``bench/results/latency_state_calls.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "latency_state_calls"
UDS = "spark.python.unix.domain.socket.enabled"


def timing_processor(calls: int):
    import pandas as pd
    from pyspark.sql.streaming.stateful_processor import StatefulProcessor
    from pyspark.sql.types import BinaryType, LongType, StructField, StructType

    blob = StructType([StructField("blob", BinaryType())])
    key = StructType([StructField("k", LongType())])

    class Timed(StatefulProcessor):
        def init(self, handle) -> None:
            self.value = handle.getValueState("v", blob)
            self.map = handle.getMapState("m", key, blob)

        def handleInputRows(self, k, rows, timerValues):  # noqa: N802
            for _ in rows:
                pass
            out = {}
            payload = (b"x" * 100,)
            t = time.perf_counter()
            for _ in range(calls):
                self.value.update(payload)
            out["value.update"] = time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(calls):
                self.value.get()
            out["value.get"] = time.perf_counter() - t
            t = time.perf_counter()
            for _ in range(calls):
                self.value.exists()
            out["value.exists"] = time.perf_counter() - t
            t = time.perf_counter()
            for i in range(calls):
                self.map.updateValue((i % 64,), payload)
            out["map.updateValue"] = time.perf_counter() - t
            t = time.perf_counter()
            for i in range(calls):
                self.map.getValue((i % 64,))
            out["map.getValue"] = time.perf_counter() - t
            yield pd.DataFrame({"kind": list(out), "us": [1e6 * v / calls for v in out.values()]})

        def close(self) -> None:
            pass

    return Timed()


def child(uds: bool, calls: int, batches: int, out: Path) -> None:
    from pyspark.sql import functions as F

    from driftjoin import local_session

    spark = local_session(2, "latency-state-calls", conf={UDS: str(uds).lower()})
    rows = (spark.readStream.format("driftjoin").option("rate", 200).option("dim", 2).load()
            .select(F.pmod(F.col("id"), F.lit(2)).alias("key")))
    got: list[dict] = []

    def collect(df, batch_id):
        got.extend(r.asDict() for r in df.collect())

    q = (rows.groupBy("key").transformWithStateInPandas(timing_processor(calls), "kind string, us double", "Update", "None")
         .writeStream.foreachBatch(collect).option("checkpointLocation", str(out.parent / f"ck-{uds}"))
         .trigger(processingTime="1 second").start())
    while len([p for p in q.recentProgress if p["numInputRows"]]) < batches + 2 and q.exception() is None:
        time.sleep(0.5)
    progress = [p for p in q.recentProgress if p["numInputRows"]][2:]
    q.stop()
    spark.stop()
    kinds = sorted({g["kind"] for g in got})
    out.write_text(json.dumps({
        "uds": uds, "load": os.getloadavg()[0],
        "us": {k: float(np.median([g["us"] for g in got[len(got) // 3:] if g["kind"] == k])) for k in kinds},
        "batch_ms": float(np.median([p["durationMs"]["triggerExecution"] for p in progress])) if progress else None}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2, help="TCP / UDS pairs, interleaved")
    ap.add_argument("--child", choices=["tcp", "uds"])
    ap.add_argument("--out")
    args = ap.parse_args()
    if args.child:
        child(args.child == "uds", args.calls, args.batches, Path(args.out))
        return
    import shutil

    shutil.rmtree(OUT, ignore_errors=True)
    OUT.mkdir(parents=True)
    results = []
    for r in range(args.rounds):
        for kind in ("tcp", "uds"):
            out = OUT / f"{kind}-{r}.json"
            subprocess.run([sys.executable, __file__, "--child", kind, "--calls", str(args.calls), "--batches",
                            str(args.batches), "--out", str(out)], cwd=ROOT, check=True, capture_output=True)
            results.append({"kind": kind, **json.loads(out.read_text())})
    kinds = sorted(results[0]["us"])
    print(f"state calls of transformWithStateInPandas, median microseconds per call ({args.calls} per kind, key and batch)")
    print(f"{'':<8}" + "".join(f"{k:>17}" for k in kinds) + f"{'batch (ms)':>12}{'load':>7}")
    for r in results:
        print(f"{r['kind']:<8}" + "".join(f"{r['us'][k]:>17.1f}" for k in kinds) + f"{r['batch_ms'] or 0:>12.0f}{r['load']:>7.1f}")
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "latency_state_calls.json").write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
