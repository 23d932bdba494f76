"""Entities kept current on a stream: the pipeline (persons -> ``link`` -> ``entities``), and the entity stage alone.

Two streams of the person generator (:mod:`driftjoin.generators.persons`, streams 0 and 1, whose
duplicates refer to each other's persons) at ``--rate`` records/s each for ``--seconds``.

``--source persons`` (the pipeline): the two streams paced in real time
(``format("driftjoin-persons")``), their union linked with itself under three rules,
``within="1 minute"`` on event time (watermark 10 s), the pairs going straight into ``entities``
in the same query (Parquet sink):

* dob equal and surname within 2 edits;
* postcode equal and the address words' Jaccard distance at most 0.4;
* given name and surname each within 1 edit.

Exactness: after the run, the records the committed batches read (the offsets log) are generated
again and linked statically with the same rules (``link`` is exact, so these are the stream's pairs
when no record came late); every record's final entity must group the records as the connected
components of those pairs.

``--source links`` (the entity stage at the issue's rate): the same records' links are computed up
front (pairs agreeing on surname and dob, on given name and dob, or on given name, surname and
postcode, within one minute of each other, as ``bench/entities_static.py``'s rules), each dated by
its later record; a producer thread writes each second's links as a file at that second of wall
time (with the wall time as ``ingest_time``), and ``entities`` reads them as a stream. Exactness:
every record's final entity groups the records as the components of all links (scipy).

Reported (committed batches, the first two of the run apart as start-up): records (links) offered
and consumed, micro-batch times, p50/p99 latency of the pairs (link: emission minus the later
record's ingestion) and of the entity updates (entities: emission minus the link's ingestion), the
entity stage's state per batch (bytes held and written, runs, linked records, how the state was
found: process cache or rebuilt from its runs), its work and state times.

Run: ``flock /tmp/bench.lock .venv/bin/python bench/entities_stream.py --source links`` (``--rate 1000
--seconds 300``; ``--expire "90 seconds"`` adds ``expire_after`` on the links' time). Writes
``bench/results/entities_stream_<source>.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
from entities_static import rule_links  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
WORK = Path(__file__).resolve().parent / "out" / "entities_stream"
RULES = [{"dob": "equal", "surname": ("levenshtein", 2)},
         {"postcode": "equal", "address": ("jaccard", 0.4, "words")},
         {"given_name": ("levenshtein", 1), "surname": ("levenshtein", 1)}]
LINK = {"rules": RULES, "id_col": "id", "within": "1 minute", "time_col": "ts"}
WITHIN = 60.0


def people(spark: Any, stream: int, args: argparse.Namespace, start: float, total: int | None = None) -> Any:
    reader = spark.read if total is not None else spark.readStream
    reader = (reader.format("driftjoin-persons").option("rate", args.rate).option("seed", args.seed)
              .option("stream", stream).option("start", start))
    if total is not None:
        return reader.option("total", total).option("pace", "false").load()
    return reader.option("pace", "true").load()


def steady(records: list[dict], since: float) -> list[dict]:
    """Statistics of the batches that emitted at or after ``since`` (the start-up batches apart)."""
    return [r for r in records if r["time"] >= since]


def quantiles(records: list[dict]) -> tuple[float, float]:
    from driftjoin.spark.runtime.stats import histogram_quantile

    hists = [np.asarray(r["latency_hist"]) for r in records if sum(r["latency_hist"])]
    if not hists:
        return float("nan"), float("nan")
    h = np.sum(hists, axis=0)
    return histogram_quantile(h, 0.5), histogram_quantile(h, 0.99)


def consumed(checkpoint: Path) -> list[int]:
    """Records of each stream the committed batches read: the sources' end offsets in the offsets
    log of the last committed batch."""
    last = max(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    lines = (checkpoint / "offsets" / str(last)).read_text().splitlines()[2:]
    return [int(json.loads(line)["index"]) for line in lines]


def groups_of_components(left: np.ndarray, right: np.ndarray) -> list[tuple]:
    """The connected components of the links (scipy), each as its sorted records."""
    from scipy.sparse import coo_matrix
    from scipy.sparse.csgraph import connected_components

    codes, uniq = pd.factorize(np.concatenate([left, right]))
    n = len(left)
    graph = coo_matrix((np.ones(n, np.int8), (codes[:n], codes[n:])), shape=(len(uniq), len(uniq)))
    _, labels = connected_components(graph.tocsr(), directed=False)
    return sorted(tuple(sorted(g)) for g in pd.Series(np.asarray(uniq)).groupby(labels).agg(list))


def generated_links(args: argparse.Namespace, start: float) -> pd.DataFrame:
    """The links of the two streams' records (module docstring), dated by their later record."""
    from driftjoin.generators.persons import person_records

    n = int(args.rate * args.seconds)
    frames = []
    for s in (0, 1):
        df = pd.DataFrame(person_records(seed=args.seed, stream=s, start=0, count=n))
        df["t"] = start + np.arange(n) / args.rate
        frames.append(df)
    records = pd.concat(frames, ignore_index=True)
    links = rule_links(records)
    t = records.set_index("id")["t"]
    tl, tr = t.reindex(links["left_id"]).to_numpy(), t.reindex(links["right_id"]).to_numpy()
    links["t"] = np.maximum(tl, tr)
    return links[np.abs(tl - tr) <= WITHIN].sort_values("t").reset_index(drop=True)


def produce(links: pd.DataFrame, folder: Path, start: float, stop: threading.Event) -> None:
    """Write each second's links when that second has come (a temporary name, then a rename)."""
    folder.mkdir(parents=True, exist_ok=True)
    second = np.floor(links["t"].to_numpy() - start).astype(np.int64)
    bounds = np.searchsorted(second, np.arange(int(second.max()) + 2))
    for k in range(len(bounds) - 1):
        while time.time() < start + k + 1:
            if stop.is_set():
                return
            time.sleep(0.05)
        part = links.iloc[bounds[k]:bounds[k + 1]].copy()
        part["ingest_time"] = time.time()
        tmp = folder / f".s{k:05d}.parquet"
        part.to_parquet(tmp, index=False)
        tmp.rename(folder / f"s{k:05d}.parquet")


def run_links(spark: Any, args: argparse.Namespace, metrics: str) -> dict[str, Any]:
    from driftjoin import entities

    links = generated_links(args, 0.0)
    print(f"{len(links):,} links of {int(2 * args.rate * args.seconds):,} records ({len(links) / args.seconds:,.0f} "
          "links/s)", flush=True)
    folder = WORK / "links"
    folder.mkdir(parents=True, exist_ok=True)
    # a warm-up file (one link between two records of their own) so the query's start-up (Python
    # workers, state store) is paid before the timeline starts
    warm = pd.DataFrame({"left_id": [-2], "right_id": [-1], "t": [-1.0], "ingest_time": [time.time()]})
    warm.to_parquet(folder / "warm.parquet", index=False)
    schema = "left_id long, right_id long, t double, ingest_time double"
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 10).parquet(str(folder))
    extra = {"expire_after": args.expire} if args.expire else {}
    out = entities(stream, time_col="t", metrics_dir=metrics, **extra)
    t0 = time.time()
    query = (out.writeStream.format("parquet").option("path", str(WORK / "out"))
             .option("checkpointLocation", str(WORK / "ck")).trigger(processingTime=args.trigger).start())
    query.processAllAvailable()
    print(f"query started and warm in {time.time() - t0:.1f} s", flush=True)
    start = float(int(time.time()) + 2)
    links["t"] += start - float(links["t"].min() // 1)
    stop = threading.Event()
    producer = threading.Thread(target=produce, args=(links, folder, start, stop), daemon=True)
    producer.start()
    producer.join()
    end = time.time()
    query.processAllAvailable()
    drained = time.time() - end
    query.stop()
    links = pd.concat([warm, links], ignore_index=True)
    expected = groups_of_components(links["left_id"].to_numpy(), links["right_id"].to_numpy())
    return {"query": query, "expected": expected, "offered": len(links), "consumed": len(links), "start": start,
            "drain_s": drained, "what": "links", "check": "the components of all links"}


def run_persons(spark: Any, args: argparse.Namespace, metrics: str) -> dict[str, Any]:
    from driftjoin import entities, link

    start = float(int(time.time()) + args.lead)
    stream = people(spark, 0, args, start).unionByName(people(spark, 1, args, start))
    pairs = link(stream, **LINK, watermark="10 seconds", parallelism=args.parallelism, metrics_dir=metrics)
    extra = {"time_col": "ingest_time", "expire_after": args.expire} if args.expire else {}
    out = entities(pairs, metrics_dir=metrics, **extra)
    query = (out.writeStream.format("parquet").option("path", str(WORK / "out"))
             .option("checkpointLocation", str(WORK / "ck")).trigger(processingTime=args.trigger).start())
    while time.time() < start + args.seconds and query.isActive:
        time.sleep(2)
    query.stop()
    offsets = consumed(WORK / "ck")
    assert len(offsets) == 2 and min(offsets) > 0, f"offsets read from the checkpoint: {offsets}"
    static = people(spark, 0, args, start, offsets[0]).unionByName(people(spark, 1, args, start, offsets[1]))
    pairs = link(static, **LINK).select("left_id", "right_id").toPandas()
    expected = groups_of_components(pairs["left_id"].to_numpy(), pairs["right_id"].to_numpy())
    return {"query": query, "expected": expected, "offered": int(2 * args.rate * args.seconds),
            "consumed": sum(offsets), "start": start, "drain_s": None, "what": "records", "check": f"the components of the {len(pairs):,} pairs of "
                                                                 "the consumed records linked statically"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--source", choices=["links", "persons"], default="links")
    ap.add_argument("--rate", type=float, default=1000.0, help="records/s per stream")
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=2, help="link's workers (--source persons)")
    ap.add_argument("--expire", default=None, help="entities' expire_after (e.g. '90 seconds')")
    ap.add_argument("--trigger", default="1 second")
    ap.add_argument("--warmup", type=float, default=30.0,
                    help="seconds of stream whose batches count as start-up (not in the latency quantiles)")
    ap.add_argument("--lead", type=float, default=30.0,
                    help="--source persons: seconds between starting the query and the streams' first record")
    args = ap.parse_args()

    from driftjoin import current_entities, local_session
    from driftjoin.spark.runtime.stats import read_stats

    shutil.rmtree(WORK, ignore_errors=True)
    WORK.mkdir(parents=True)
    metrics = str(WORK / "metrics")
    load_before = os.getloadavg()
    spark = local_session(2, "driftjoin-entities-stream")
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")  # every batch's progress
    run = (run_links if args.source == "links" else run_persons)(spark, args, metrics)
    load_after = os.getloadavg()
    since = run["start"] + args.warmup
    progress = [p for p in run["query"].recentProgress if p.get("numInputRows")]
    durations = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in progress
                 if pd.Timestamp(p["timestamp"]).timestamp() >= since]
    startup = [p["durationMs"].get("triggerExecution", 0) / 1000 for p in progress
               if pd.Timestamp(p["timestamp"]).timestamp() < since]
    link_stats = list(read_stats(metrics, "link"))
    ent_stats = sorted(read_stats(metrics, "entities"), key=lambda r: r["seq"])
    p_link = quantiles(steady(link_stats, since))
    p_ent = quantiles(steady(ent_stats, since))
    state = [{"seq": r["seq"], "records": r["records"], "entities": r["entities"], "largest": r["largest"],
              "state_bytes": r["state_bytes"], "bytes_written": r["state"]["bytes_written"], "runs": r["state"]["runs"],
              "links": r["links"], "rows": r["rows"], "source": r["state"]["source"], "work_s": r["timings"]["work"],
              "state_read_s": r["timings"]["state_read"], "state_write_s": r["timings"]["state_write"],
              "expired": r["expired_entities"]} for r in ent_stats]
    final = current_entities(spark.read.parquet(str(WORK / "out"))).toPandas()
    got = sorted(tuple(sorted(g)) for g in final.groupby("entity_id")["record_id"].agg(list))
    same = got == run["expected"]
    spark.stop()

    result = {
        "source": args.source, "rate_per_stream": args.rate, "seconds": args.seconds, "expire_after": args.expire,
        "trigger": args.trigger, "load_before": load_before, "load_after": load_after, "what": run["what"],
        "offered": run["offered"], "consumed": run["consumed"], "warmup_s": args.warmup, "batches": len(durations),
        "startup_batches_s": startup, "drain_s": run["drain_s"],
        "batch_s_median": float(np.median(durations)) if durations else None,
        "batch_s_p90": float(np.percentile(durations, 90)) if durations else None,
        "pairs_p50_s": p_link[0], "pairs_p99_s": p_link[1], "entities_p50_s": p_ent[0], "entities_p99_s": p_ent[1],
        "late_records": sum(r.get("late", 0) for r in link_stats), "entities_final": len(got),
        "same_grouping": same, "state": state,
    }
    print(f"{run['consumed']:,} of {run['offered']:,} {run['what']} consumed in {args.seconds:.0f} s of stream, "
          f"load {load_before[0]:.1f} -> {load_after[0]:.1f}")
    print(f"start-up ({args.warmup:.0f} s of stream): {len(startup)} batches of {', '.join(f'{x:.1f}' for x in startup[:6])} s; "
          f"then {len(durations)} batches, median {result['batch_s_median'] or float('nan'):.2f} s, p90 "
          f"{result['batch_s_p90'] or float('nan'):.2f} s" + (f"; backlog drained {run['drain_s']:.1f} s after the last "
                                                               "file" if run["drain_s"] is not None else ""))
    pairs = "n/a (no link stage)" if args.source == "links" else f"{p_link[0]:.2f} / {p_link[1]:.2f} s"
    print(f"latency p50 / p99 after start-up: pairs {pairs}, entity updates {p_ent[0]:.2f} / {p_ent[1]:.2f} s")
    if state:
        last, mid = state[-1], state[len(state) // 2]
        work = [s["work_s"] + s["state_read_s"] + s["state_write_s"] for s in state]
        rebuilt = [s["state_read_s"] for s in state if s["source"] != "cache"]
        print(f"entity state: {last['records']:,} linked records in {last['entities']:,} entities (largest "
              f"{last['largest']:,}), {last['state_bytes'] / 1e6:.1f} MB in {last['runs']} runs "
              f"({last['state_bytes'] / max(last['records'], 1):.0f} B per linked record; mid-run "
              f"{mid['state_bytes'] / max(mid['records'], 1):.0f} B); written per batch: median "
              f"{np.median([s['bytes_written'] for s in state]) / 1e3:.0f} kB, max "
              f"{max(s['bytes_written'] for s in state) / 1e3:.0f} kB")
        print(f"entity stage per batch: median {np.median(work):.3f} s, p99 {np.percentile(work, 99):.3f} s; state from "
              f"the process cache in {len(state) - len(rebuilt)} of {len(state)} batches, rebuilt from its runs in "
              f"{len(rebuilt)} (median {np.median(rebuilt) if rebuilt else float('nan'):.3f} s)")
    print(f"final entities {'equal' if same else 'DIFFER FROM'} {run['check']} ({len(got):,} entities)")
    RESULTS.mkdir(parents=True, exist_ok=True)
    name = f"entities_stream_{args.source}" + ("_expire" if args.expire else "")
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
    axes[1].plot(seq, [r["links"] / 10 for r in s], label="links per batch (x 10)")
    axes[1].set(xlabel="entity batch", title="writes follow the changes")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


if __name__ == "__main__":
    main()
