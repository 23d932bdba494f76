"""``link`` on a stream: the person generator at 2 x 1,000 records/s, three rules, ``within="1 minute"``.

Two paced ``driftjoin-persons`` streams (seed 1; stream 1's duplicates refer to stream 0's
entities and back; ids unique across streams) are unioned and self-linked with three rules
(date of birth and surname within 2 edits; postcode and address words within Jaccard 0.4; given
name and surname each within 1 edit), ``within="1 minute"`` on the ingestion time ``ts``, 2
workers, a Parquet sink, a processing-time trigger of ``--trigger`` seconds, for ``--seconds``;
each stream gives a batch at most ``1.5 * rate * trigger`` records (the start-up backlog is spread
over the first batches and then drained: a cap of exactly the rate would keep it for the whole run).
Reported from the query progress and the operator's statistics (steady state: after the first
two batches):

* keeps up: records read against records offered, median batch time against the trigger;
* state: the workers' state bytes per batch over time (bounded: an interval join holds the
  records of ``B + within`` of event time, so state grows for two minutes of records, then drops
  as each bucket closes and grows again with the next: a sawtooth of one bucket);
* latency: p50 and p99 (emit time minus the later record's ingestion time), beside the same
  query's *floor*: a second run at 2 x 5 records/s, where a batch does almost no work;
* recall: of the known duplicates (same ``entity``) generated within a minute of each other, the
  share the rules linked.

Run: ``flock /tmp/bench.lock .venv/bin/python bench/link_stream.py``. Writes
``bench/results/link_stream.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"
WORK = Path(__file__).resolve().parent / "out" / "link_stream"
RULES = [
    {"dob": "equal", "surname": ("levenshtein", 2)},
    {"postcode": "equal", "address": ("jaccard", 0.4, "words")},
    {"given_name": ("levenshtein", 1), "surname": ("levenshtein", 1)},
]


def run(spark, rate: float, seconds: float, trigger: float, tag: str) -> dict:
    from driftjoin import link
    from driftjoin.app.report import summary
    from driftjoin.spark.runtime.stats import read_stats

    work = WORK / tag
    if work.exists():
        shutil.rmtree(work)

    def stream(k: int):
        # at most 1.5 triggers' records per batch: the records generated while the query starts
        # would otherwise be one batch (2 x 28,700 at 1,000/s) that a loaded machine cannot finish,
        # and a cap of exactly one trigger's records would never drain them
        return (spark.readStream.format("driftjoin-persons").option("rate", rate).option("seed", 1)
                .option("stream", k).option("max_records_per_batch", max(1, int(1.5 * rate * trigger))).load())

    people = stream(0).unionByName(stream(1))
    pairs = link(people, rules=RULES, within="1 minute", ingest_col="ts", parallelism=2,
                 metrics_dir=str(work / "metrics"))
    q = (pairs.writeStream.format("parquet").option("path", str(work / "pairs"))
         .option("checkpointLocation", str(work / "ckpt")).trigger(processingTime=f"{trigger:g} seconds").start())
    start = time.time()
    progress = []
    while time.time() - start < seconds:
        time.sleep(5)
        progress = q.recentProgress
        if q.exception():
            raise q.exception()
    q.stop()
    elapsed = time.time() - start
    progress = [p for p in progress if p.get("numInputRows")]
    steady = progress[2:]
    durations = [p["durationMs"]["triggerExecution"] / 1000 for p in steady]
    read = sum(p["numInputRows"] for p in progress)
    totals, per_worker = summary(str(work / "metrics"), operator="link")
    stats = sorted(read_stats(str(work / "metrics"), "link"), key=lambda s: s["time"])
    state = {}
    for s in stats:
        state[s["seq"]] = state.get(s["seq"], 0) + s["state_bytes"]
    return {"tag": tag, "rate_per_stream": rate, "seconds": round(elapsed, 1), "offered": int(2 * rate * elapsed),
            "read": read, "batches": len(progress), "median_batch_s": round(float(np.median(durations)), 2) if durations else None,
            "trigger_s": trigger, "pairs": totals.get("pairs_out"), "pairs_per_rule": totals.get("pairs_per_rule"),
            "p50_s": float(np.nanmax(per_worker["p50_latency_s"])) if len(per_worker) else None,
            "p99_s": float(np.nanmax(per_worker["p99_latency_s"])) if len(per_worker) else None,
            "state_bytes": [state[k] for k in sorted(state)], "path": str(work)}


def recall(spark, path: str, n: int, rate: float, within: float = 60.0) -> dict:
    """Known duplicates (same entity) among the first ``n`` records of each stream generated within
    ``within`` seconds of each other, and the share of them linked."""
    from driftjoin.generators.persons import person_records

    pairs = spark.read.parquet(f"{path}/pairs").select("left_id", "right_id")
    recs = [person_records(1, s, 0, n) for s in (0, 1)]
    by_entity: dict[int, list[tuple[int, float]]] = {}
    for s, r in enumerate(recs):
        for k, (i, e) in enumerate(zip(r["id"].tolist(), r["entity"].tolist())):
            by_entity.setdefault(e, []).append((i, k / rate))
    known = {(min(a, b), max(a, b)) for group in by_entity.values() for x, (a, ta) in enumerate(group)
             for b, tb in group[x + 1:] if abs(ta - tb) <= within}
    got = {(r.left_id, r.right_id) for r in pairs.collect()}
    found = len(known & got)
    return {"known_duplicates": len(known), "found": found, "recall": round(found / max(len(known), 1), 4),
            "other_pairs": len(got - known)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=1000.0, help="records per second per stream")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--trigger", type=float, default=4.0)
    ap.add_argument("--floor-seconds", type=float, default=60.0)
    args = ap.parse_args()
    from driftjoin import local_session

    load = os.getloadavg()
    spark = local_session(2, "link-stream")
    main_run = run(spark, args.rate, args.seconds, args.trigger, "main")
    main_run.update(recall(spark, main_run["path"], int(main_run["read"] // 2 * 0.95), args.rate))
    floor = run(spark, 5.0, args.floor_seconds, args.trigger, "floor")
    rows = [main_run, floor]
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "link_stream.json").write_text(json.dumps({"load_before": load, "load_after": os.getloadavg(),
                                                         "rows": rows}, indent=1))
    print(f"load average before {load[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    for r in rows:
        print({k: v for k, v in r.items() if k != "state_bytes"})
        sb = r["state_bytes"]
        if sb:
            print(f"  state bytes per batch: first {sb[0]:,}, at 1/3 {sb[len(sb) // 3]:,}, at 2/3 {sb[2 * len(sb) // 3]:,}, "
                  f"last {sb[-1]:,}")
    try:
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(6, 3.5))
        ax.plot(np.array(main_run["state_bytes"]) / 2**20)
        ax.set_xlabel("micro-batch")
        ax.set_ylabel("workers' state (MiB)")
        fig.tight_layout()
        fig.savefig(RESULTS / "link_stream.png")
    except ImportError:
        pass
    spark.stop()


if __name__ == "__main__":
    main()
