"""Entities kept current on a stream of person records: ``link`` then ``entities`` in one streaming query.

Two streams of the person generator (``format("driftjoin-persons")``, streams 0 and 1, whose
duplicates refer to each other's persons) at ``--rate`` records/s each, paced in real time, for
``--seconds``; their union is linked with itself under three rules, ``within="1 minute"`` on
event time, and the pairs go straight into ``entities`` in the same query (Parquet sink):

* dob equal and surname within 2 edits;
* postcode equal and the address words' Jaccard distance at most 0.4;
* given name and surname each within 1 edit.

Reported, per run (from the operators' statistics, committed batches only, the first two batches
of the run apart as start-up):

* does it keep up: records offered vs consumed, micro-batch duration;
* p50 / p99 latency of the pairs (link: emission minus the later record's ingestion) and of the
  entity updates (entities: emission minus the link's ingestion), side by side;
* state of the entity stage per batch: bytes written, bytes held, runs, linked records,
  ``state_bytes / records``: flat per linked record (the state holds the linked records and
  nothing else), or flat outright with ``--expire``;
* exactness: after the run, the records the query consumed are generated again and linked
  statically with the same rules (``link`` is exact, so those are the stream's pairs when no
  record came late); every record's final entity (``current_entities`` of the sink) must group
  the records exactly as the connected components of those pairs (scipy).

Run: ``flock /tmp/bench.lock .venv/bin/python bench/entities_stream.py`` (``--rate 1000 --seconds
300``; ``--expire "90 seconds"`` adds ``expire_after`` on the links' ingestion time). Writes
``bench/results/entities_stream.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

RESULTS = Path(__file__).resolve().parent / "results"
WORK = Path(__file__).resolve().parent / "out" / "entities_stream"
RULES = [{"dob": "equal", "surname": ("levenshtein", 2)},
         {"postcode": "equal", "address": ("jaccard", 0.4, "words")},
         {"given_name": ("levenshtein", 1), "surname": ("levenshtein", 1)}]
LINK = {"rules": RULES, "id_col": "id", "within": "1 minute", "time_col": "ts"}


def people(spark: Any, stream: int, args: argparse.Namespace, start: float, total: int | None = None) -> Any:
    reader = spark.read if total is not None else spark.readStream
    reader = (reader.format("driftjoin-persons").option("rate", args.rate).option("seed", args.seed)
              .option("stream", stream).option("start", start))
    if total is not None:
        return reader.option("total", total).option("pace", "false").load()
    return reader.option("pace", "true").load()


def steady(records: list[dict]) -> list[dict]:
    """Records of committed batches after each run's first two batches with data."""
    from driftjoin.app.report import STARTUP_BATCHES

    by_run: dict[Any, list[int]] = {}
    for r in records:
        stamp = r.get("_spark", {})
        by_run.setdefault(stamp.get("run"), []).append(stamp.get("batch", -1))
    skip = {(run, b) for run, bs in by_run.items() for b in sorted(set(bs))[:STARTUP_BATCHES]}
    return [r for r in records if (r.get("_spark", {}).get("run"), r.get("_spark", {}).get("batch", -1)) not in skip]


def quantiles(records: list[dict]) -> tuple[float, float]:
    from driftjoin.spark.runtime.stats import histogram_quantile

    hists = [np.asarray(r["latency_hist"]) for r in records if sum(r["latency_hist"])]
    if not hists:
        return float("nan"), float("nan")
    h = np.sum(hists, axis=0)
    return histogram_quantile(h, 0.5), histogram_quantile(h, 0.99)


def components_smallest(left: np.ndarray, right: np.ndarray) -> dict[int, int]:
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    codes, uniq = pd.factorize(np.concatenate([left, right]))
    n = len(left)
    graph = coo_matrix((np.ones(n, np.int8), (codes[:n], codes[n:])), shape=(len(uniq), len(uniq)))
    _, labels = connected_components(graph.tocsr(), directed=False)
    smallest = pd.Series(uniq).groupby(labels).transform("min").to_numpy()
    return dict(zip(np.asarray(uniq).tolist(), smallest.tolist()))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s per stream")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2, help="link's workers")
    ap.add_argument("--expire", default=None, help="entities' expire_after on the links' ingest_time (e.g. '90 seconds')")
    ap.add_argument("--trigger", default="2 seconds")
    args = ap.parse_args()

    from driftjoin import current_entities, entities, link, local_session
    from driftjoin.spark.runtime.stats import read_stats

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    metrics = str(WORK / "metrics")
    load_before = os.getloadavg()
    spark = local_session(2, "driftjoin-entities-stream")
    start = float(int(time.time()) + 20)
    stream = people(spark, 0, args, start).unionByName(people(spark, 1, args, start))
    pairs = link(stream, **LINK, watermark="10 seconds", parallelism=args.parallelism, metrics_dir=metrics)
    extra = {"time_col": "ingest_time", "expire_after": args.expire} if args.expire else {}
    out = entities(pairs, metrics_dir=metrics, **extra)
    query = (out.writeStream.format("parquet").option("path", str(WORK / "out"))
             .option("checkpointLocation", str(WORK / "ck")).trigger(processingTime=args.trigger).start())
    t0 = time.time()
    while time.time() - t0 < args.seconds + (start - t0) and query.isActive:
        time.sleep(2)
    query.stop()
    progress = query.recentProgress
    ended = [p for p in progress if p.get("numInputRows", 0) or True]
    offsets = [int(json.loads(s["endOffset"])["index"]) if isinstance(s["endOffset"], str) else int(s["endOffset"]["index"])
               for s in ended[-1]["sources"]]
    offered = 2 * args.rate * max(0.0, time.time() - start)
    durations = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in progress if p.get("numInputRows")]
    load_after = os.getloadavg()

    link_stats = list(read_stats(metrics, "link"))
    ent_stats = sorted(read_stats(metrics, "entities"), key=lambda r: r["seq"])
    p_link = quantiles(steady(link_stats))
    p_ent = quantiles(steady(ent_stats))
    late = sum(r.get("late", 0) for r in link_stats)
    state = [{"seq": r["seq"], "records": r["records"], "entities": r["entities"], "state_bytes": r["state_bytes"],
              "bytes_written": r["state"]["bytes_written"], "runs": r["state"]["runs"], "links": r["links"],
              "rows": r["rows"], "source": r["state"]["source"], "work_s": r["timings"]["work"],
              "state_read_s": r["timings"]["state_read"], "state_write_s": r["timings"]["state_write"]}
             for r in ent_stats]

    # exactness: the consumed records linked statically, components against the final entities
    t = time.perf_counter()
    static = people(spark, 0, args, start, offsets[0]).unionByName(people(spark, 1, args, start, offsets[1]))
    all_pairs = link(static, **LINK).select("left_id", "right_id").toPandas()
    check_s = time.perf_counter() - t
    truth = components_smallest(all_pairs["left_id"].to_numpy(), all_pairs["right_id"].to_numpy())
    final = current_entities(spark.read.parquet(str(WORK / "out"))).toPandas()
    groups_stream = final.groupby("entity_id")["record_id"].apply(lambda s: tuple(sorted(s))).tolist()
    by_root: dict[int, list[int]] = {}
    for rec, root in truth.items():
        by_root.setdefault(root, []).append(rec)
    groups_truth = [tuple(sorted(v)) for v in by_root.values()]
    same = sorted(groups_stream) == sorted(groups_truth)
    spark.stop()

    result = {
        "rate_per_stream": args.rate, "seconds": args.seconds, "expire_after": args.expire, "trigger": args.trigger,
        "load_before": load_before, "load_after": load_after, "consumed": offsets, "offered_estimate": offered,
        "batches": len(durations), "batch_s_median": float(np.median(durations)) if durations else None,
        "batch_s_p90": float(np.percentile(durations, 90)) if durations else None,
        "pairs_p50_s": p_link[0], "pairs_p99_s": p_link[1], "entities_p50_s": p_ent[0], "entities_p99_s": p_ent[1],
        "late_records": late, "pairs_static": len(all_pairs), "linked_records": len(truth),
        "entities_final": int(final["entity_id"].nunique()), "same_grouping": same, "check_s": check_s,
        "state": state,
    }
    consumed = sum(offsets)
    print(f"{consumed:,} records consumed in {args.seconds:.0f} s ({consumed / args.seconds:,.0f}/s; offered "
          f"{2 * args.rate:,.0f}/s), {len(durations)} batches, median {result['batch_s_median']:.2f} s, "
          f"p90 {result['batch_s_p90']:.2f} s; load {load_before[0]:.1f} -> {load_after[0]:.1f}")
    print(f"latency p50 / p99: pairs {p_link[0]:.2f} / {p_link[1]:.2f} s, entity updates {p_ent[0]:.2f} / {p_ent[1]:.2f} s")
    last = state[-1] if state else {}
    if state:
        mid = state[len(state) // 2]
        print(f"entity state: {last['records']:,} linked records in {last['entities']:,} entities, "
              f"{last['state_bytes'] / 1e6:.1f} MB in {last['runs']} runs ({last['state_bytes'] / max(last['records'], 1):.0f} "
              f"B per linked record; mid-run {mid['state_bytes'] / max(mid['records'], 1):.0f} B); written per batch: "
              f"median {np.median([s['bytes_written'] for s in state]) / 1e3:.0f} kB, max "
              f"{max(s['bytes_written'] for s in state) / 1e3:.0f} kB; cache: "
              f"{sum(s['source'] == 'cache' for s in state)} of {len(state)} batches")
    print(f"exactness: {len(all_pairs):,} pairs from the consumed records linked statically ({late} late records in "
          f"the stream); final entities {'equal' if same else 'DIFFER FROM'} the components of all links")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = "entities_stream" + ("_expire" if args.expire else "")
    (RESULTS / f"{name}.json").write_text(json.dumps(result, indent=1, default=str))
    plot(result, RESULTS / f"{name}.png")
    print(f"wrote {RESULTS / name}.json and .png")
    if not same:
        sys.exit(1)


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    s = result["state"]
    if not s:
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.5))
    seq = [r["seq"] for r in s]
    axes[0].plot(seq, [r["state_bytes"] / 1e6 for r in s], label="state held (MB)")
    axes[0].plot(seq, [r["records"] / 1e5 for r in s], label="linked records (x 100k)")
    axes[0].set(xlabel="entity batch", title="entity state")
    axes[0].legend(fontsize=7)
    axes[1].plot(seq, [r["bytes_written"] / 1e3 for r in s], label="written per batch (kB)")
    axes[1].plot(seq, [r["links"] / 100 for r in s], label="links per batch (x 100)")
    axes[1].set(xlabel="entity batch", title="writes follow the changes")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
