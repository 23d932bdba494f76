"""Benchmark of natural_join on Spark (not a test).

1. Partition quality on Spark (the paper's single Assigner, which refits per window as the
   core does): AG vs SC vs DS for m = 5, 8, 10, 20 joiners and two count-window sizes, on the server-log stream (like the paper's rwData) and, with ``--nobench``, the
   NoBench-style stream (nbData), both from the ``driftjoin-docs`` source. Each configuration is a static
   ``natural_join`` with ``metrics_dir`` (run in 2 shuffle partitions: placement does not change
   a static result); the table gives, averaged over the windows, the
   replication, the Gini coefficient of the joiner loads and the maximal processing load (share
   of a window's documents at the busiest joiner), plus the refits and the pairs. All
   configurations of one m run as one Spark job (a union of the joins).
2. Throughput: a streaming ``natural_join`` (``driftjoin-docs`` server log, noop sink) per
   partitioner at m = 8 and both routings (``parallel``: stateless routers and the control
   plane's partitionings; ``assigner``: the paper's single Assigner): documents per second over
   the micro-batches after the first (which pays query start-up), and the time the Assigner
   and the busiest joiner spent per batch (from the statistics files).
3. Scaling (``--scaling``, with 4): the join of the server log at 1 and 2 workers (a Spark of
   ``local[w]``, ``w`` input partitions and ``w`` joiners, each run in its own process), AG and
   value partitioning with parallel routing and AG behind the single Assigner (with
   ``--nobench`` also AG and value on the NoBench-style stream), in one run: documents per
   second and the ratio of 2 workers to 1. With
   ``--master spark://...`` the workers are executors of a standalone cluster
   (``scripts/cluster.sh start``): each run is its own driver with ``w`` executors of one core
   (``spark.cores.max = w``, started only once all ``w`` have registered); 4 is then left out
   (it runs no Spark, so it does not depend on the master).
4. Work per worker at 1 to 16 workers from the statistics (``--work``, or with ``--scaling``):
   the parallel routing played in one process without Spark (the same routers, joiners and
   controller) with m = 1, 2, 4, 8, 16 input tasks and joiners, AG and value partitioning
   (with ``--nobench`` on both streams); per micro-batch the documents the busiest router task
   routes (the single Assigner: all of them) plus those the busiest joiner receives, the
   speed-up that work allows over one worker, and the paper's replication and maximal load
   (documents kept over the joiners, and at the busiest one, per document).

Prints tables and writes bench/results/schemafree_spark.json and .png.
Run: .venv/bin/python bench/schemafree_spark.py [--quick] [--nobench] [--scaling [--master URL]] [--work]
(``--nobench`` with ``--scaling`` or ``--work``: the NoBench-style stream too)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from pyspark.sql import functions as F  # noqa: E402

from driftjoin.schemafree.document import flatten  # noqa: E402
from driftjoin.spark.sources.documents import register  # noqa: E402
from driftjoin.spark.runtime.stats import read_stats  # noqa: E402
from driftjoin.spark.natural.api import natural_join, natural_join_metrics  # noqa: E402
from driftjoin.spark.natural.plan import ASSIGNER_OP, JOINER_OP  # noqa: E402
from driftjoin.spark.runtime.jvm import executor_count  # noqa: E402
from driftjoin.spark.runtime.session import cluster_session, local_session  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results"
METHODS = ("ag", "sc", "ds")
KINDS = {"serverlog": "log", "nobench": "nb"}


def quality(spark, work: Path, kind: str, n: int, ms: list[int], windows: list[int]) -> list[dict[str, Any]]:
    """Per (m, window, method): mean routing quality over the windows of ``n`` documents."""
    df = spark.read.format("driftjoin-docs").option("kind", kind).option("total", n).option("seed", 1).option("partitions", 2).load()
    df = df.cache()
    df.count()
    rows = []
    for m in ms:
        started = time.perf_counter()
        joins = []
        for w in windows:
            for method in METHODS:
                tag = f"{kind}_{m}_{w}_{method}"
                # the single Assigner: per-window fits and delta keys, as the paper and the core
                joins.append(natural_join(df, window=w, partitions=m, partitioner=method, metrics_dir=str(work / tag),
                                          routing="assigner")
                             .withColumn("tag", F.lit(tag)))
        union = joins[0]
        for j in joins[1:]:
            union = union.unionByName(j)
        # placement does not change a static join's result or routing quality: run the m joiners
        # of every configuration in 2 shuffle partitions instead of m (20 tasks per stage on 2
        # cores cost more than the joins)
        spark.conf.set("spark.sql.shuffle.partitions", "2")
        counts = {r["tag"]: r["count"] for r in union.groupBy("tag").count().collect()}
        elapsed = time.perf_counter() - started
        for w in windows:
            for method in METHODS:
                tag = f"{kind}_{m}_{w}_{method}"
                metrics = natural_join_metrics(str(work / tag))
                rows.append({
                    "data": kind, "m": m, "window": w, "method": method, "windows": len(metrics),
                    "replication": float(metrics["replication"].mean()), "gini": float(metrics["gini"].mean()),
                    "max_load": float(metrics["max_load"].mean()), "max_load_worst": float(metrics["max_load"].max()),
                    "to_all": float((metrics["to_all"] / metrics["documents"]).mean()),
                    "refits": int(metrics["repartitions"].iloc[-1]), "pairs": counts.get(tag, 0),
                    "job_seconds_for_m": round(elapsed, 1),
                })
    df.unpersist()
    return rows


def throughput(spark, work: Path, method: str, total: int, batch: int, window: int, m: int, routing: str = "parallel",
               inputs: int = 2, kind: str = "serverlog", time_windows: bool = False, sample: bool = False) -> dict[str, Any]:
    """Steady-state documents per second of a streaming natural join (noop sink); with
    ``time_windows`` the windows are event-time windows over the source's ``ts`` (1000 documents
    per second) of ``window`` documents' length instead of count windows; with ``sample`` the
    first fit is made before the start on the stream's first 2000 documents (``sample=``)."""
    stream = (spark.readStream.format("driftjoin-docs").option("kind", kind).option("total", total).option("rate", 1000)
              .option("pace", "false").option("max_docs_per_batch", batch).option("start", 0).option("seed", 3)
              .option("partitions", inputs).load())
    metrics = work / f"tp_{method}_{routing}_{m}"
    windowing: dict[str, Any] = {"window": f"{window / 1000:g} seconds", "time_col": "ts"} if time_windows else {"window": window}
    if sample:
        windowing["sample"] = (spark.read.format("driftjoin-docs").option("kind", kind).option("total", 2000)
                               .option("seed", 3).option("start", 0).load())
    out = natural_join(stream, partitions=m, partitioner=method, metrics_dir=str(metrics), routing=routing, **windowing)
    started = time.perf_counter()
    # the default trigger honours max_docs_per_batch (availableNow would read everything at once)
    q = out.writeStream.format("noop").option("checkpointLocation", str(work / f"ck_{method}_{routing}_{m}")).start()
    q.processAllAvailable()
    q.stop()
    wall = time.perf_counter() - started
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    steady = progress[1:] or progress
    docs = sum(p["numInputRows"] for p in steady)
    seconds = sum(p["durationMs"]["triggerExecution"] for p in steady) / 1000
    assigner = {r["seq"]: r["elapsed"] for r in read_stats(str(metrics), ASSIGNER_OP)}
    joiners: dict[int, float] = {}
    opened: dict[int, str] = {}  # batch -> the fit its new windows opened with (joiner 0's record)
    copies: dict[int, list[int]] = {}  # window -> documents joiner 0 kept, copies it dropped (sent for another fit)
    for r in read_stats(str(metrics), JOINER_OP):
        joiners[r["seq"]] = max(joiners.get(r["seq"], 0.0), r["elapsed"])
        if r["joiner"] == 0 and r.get("opening") is not None:
            opened[r["seq"]] = r["opening"]
        if r["joiner"] == 0:
            for w, (kept, _owned, _to_all, dropped, *_unfitted) in r["windows"].items():
                seen = copies.setdefault(int(w), [0, 0])
                seen[0] += kept
                seen[1] += dropped
    return {
        "data": kind, "method": method, "routing": routing, "m": m, "windows": "time" if time_windows else "count",
        "sample": sample, "window": window, "batch": batch, "batches": len(progress),
        "docs_per_s": docs / seconds if seconds else 0.0, "batch_s": seconds / max(len(steady), 1),
        "first_batch_s": progress[0]["durationMs"]["triggerExecution"] / 1000 if progress else 0.0,
        "assigner_s": statistics.fmean(list(assigner.values())[1:] or list(assigner.values()) or [0.0]),
        "busiest_joiner_s": statistics.fmean(list(joiners.values())[1:] or list(joiners.values()) or [0.0]),
        "pairs": int(natural_join_metrics(str(metrics))["pairs"].sum()), "wall_s": wall,
        # measured batches (after the first) whose windows opened with a fit, not broadcast
        "fitted_batches": sum(1 for seq, key in opened.items() if seq > 0 and key != "0"),
        "joiner0_windows": {w: copies[w] for w in sorted(copies)},
    }


ROUTINGS = ("parallel", "assigner")
#: (partitioner, routing) of the scaling runs per stream: value partitioning and AG side by side
SCALING_RUNS = {"serverlog": (("ag", "parallel"), ("value", "parallel"), ("ag", "assigner")),
                "nobench": (("ag", "parallel"), ("value", "parallel"))}
#: a cluster run starts its first job only once all its executors have registered
WAIT_FOR_EXECUTORS = {"spark.scheduler.minRegisteredResourcesRatio": "1.0",
                      "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s"}


def scaling_child(cfg: dict[str, Any]) -> None:
    """One throughput run in its own process (``local[w]``, or ``w`` executors of one core on
    ``cfg["master"]``): prints its result as JSON."""
    w = cfg["workers"]
    if cfg.get("master"):
        spark = cluster_session(cfg["master"], w, f"schemafree-scaling-{w}", max_executors=w, conf=WAIT_FOR_EXECUTORS)
    else:
        spark = local_session(parallelism=w, cores=w, app_name=f"schemafree-scaling-{w}")
    register(spark)
    executors = executor_count(spark)
    work = Path(tempfile.mkdtemp(prefix="schemafree_scaling_"))
    try:
        result = throughput(spark, work, cfg["partitioner"], total=cfg["total"], batch=cfg["batch"], window=cfg["window"],
                            m=w, routing=cfg["routing"], inputs=w, kind=cfg["kind"], time_windows=cfg["time_windows"],
                            sample=cfg.get("sample", False))
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print("RESULT " + json.dumps({**result, "workers": w, "executors": executors}), flush=True)


def scaling(total: int, batch: int, window: int, kinds: tuple[str, ...], master: str | None = None,
            time_windows: bool = False, parallel_only: bool = False, sample: bool = False) -> list[dict[str, Any]]:
    """Throughput at 1 and 2 workers for every run of :data:`SCALING_RUNS`, alternating so drift
    in the machine's load hits all alike."""
    out = []
    for kind in kinds:
        for w in (1, 2):
            for partitioner, routing in SCALING_RUNS[kind]:
                if parallel_only and routing != "parallel":
                    continue
                cfg = {"workers": w, "routing": routing, "partitioner": partitioner, "kind": kind, "total": total,
                       "batch": batch, "window": window, "master": master, "time_windows": time_windows, "sample": sample}
                proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True)
                lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
                if not lines:
                    raise RuntimeError(f"scaling run {cfg} failed:\n{proc.stderr[-3000:]}")
                out.append(json.loads(lines[-1][len("RESULT "):]))
                where = f" ({out[-1]['executors']} executors)" if master else ""
                fitted = (f", {out[-1]['fitted_batches']} of {out[-1]['batches'] - 1} measured batches opened with a fit"
                          if routing == "parallel" else "")
                load = out[-1]["load"] = os.getloadavg()[0]
                print(f"  {kind:>9} {partitioner:>5} {routing:>8} workers={w}{where}: {out[-1]['docs_per_s']:.0f} docs/s{fitted}"
                      f", load average {load:.1f}", flush=True)
                if routing == "parallel" and w > 1:
                    print("      joiner 0 per window, kept / dropped: " + ", ".join(
                        f"{win}: {kept} / {dropped}" for win, (kept, dropped) in out[-1]["joiner0_windows"].items()), flush=True)
    return out


def work_per_worker(n: int, batch: int, window: int, ms: list[int], kind: str = "serverlog") -> list[dict[str, Any]]:
    """Per m: the documents the busiest router task and the busiest joiner handle, summed over
    the micro-batches, from the joiners' statistics of the parallel routing played in one
    process (:class:`~driftjoin.spark.natural.local.LocalRun`: the same routers, joiners and
    controller, m input tasks, the controller deciding after every batch) with AG and value
    partitioning, and from the single Assigner's routed rows (AG); the speed-up over one worker
    that this work allows; replication and maximal load over the whole stream (the documents
    the joiners keep, and the busiest one receives, per document)."""
    import pandas as pd

    from driftjoin.schemafree.generator import nobench_documents, server_log_documents
    from driftjoin.spark.natural.assigner import Assigner
    from driftjoin.spark.natural.plan import NaturalPlan
    from driftjoin.spark.natural.local import LocalRun

    docs = server_log_documents(n, seed=1, timestamp=False) if kind == "serverlog" else nobench_documents(n, seed=1)
    rows = [{"id": i, "doc": json.dumps(d)} for i, d in enumerate(docs)]
    batches = [rows[i:i + batch] for i in range(0, n, batch)]
    out = []
    for m in ms:
        for method in ("ag", "value"):
            work = Path(tempfile.mkdtemp(prefix="schemafree_work_"))
            plan = NaturalPlan(partitions=m, partitioner=method, local_join="fptree", delta=3, theta=0.2, creators=1,
                               expand=True, window_kind="count", size=window, length=None, time_attribute=None,
                               watermark=0.0, two_streams=False, merged=False, sample_size=2000, seed=0,
                               metrics_dir=None, control=str(work), lineage="work")
            run = LocalRun(plan)
            router = joiner = kept = later = 0
            started = time.process_time()
            for rows_b in batches:
                tasks = [rows_b[t::m] for t in range(m)]
                _, states, stats = run.attempt(tasks)
                run.commit(states)
                run.decide()
                router += max(len(t) for t in tasks)
                joiner += max(s["received"] for s in stats)
                kept += sum(s["received"] for s in stats)
                later += max(s["received"] for s in stats) if rows_b is not batches[0] else 0
            cpu = time.process_time() - started
            kinds = sorted({e["kind"] for e in run.controller.decisions if e.get("kind")})
            shutil.rmtree(work, ignore_errors=True)
            out.append({"data": kind, "m": m, "method": method, "routing": "parallel", "router_docs": router,
                        "joiner_docs": joiner, "replication": kept / n, "max_load": joiner / n,
                        "max_load_after_first": later / (n - len(batches[0])) if len(batches) > 1 else None, "fits": kinds,
                        "cpu_s": cpu})
        assigner = Assigner(NaturalPlan(**{**plan.__dict__, "partitioner": "ag", "control": None}), None)
        busiest = kept = later = 0
        for rows_b in batches:
            pdf = pd.DataFrame({"akey": 0, "side": 0, "id": [r["id"] for r in rows_b], "time": float("nan"),
                                "avps": [json.dumps(flatten(json.loads(r["doc"])), separators=(",", ":")) for r in rows_b]})
            routed = assigner.process(pdf).rows
            per_joiner = routed[routed["kind"] == 1].groupby("jkey").size()
            busiest += int(per_joiner.max())
            later += int(per_joiner.max()) if rows_b is not batches[0] else 0
            kept += int(per_joiner.sum())
        out.append({"data": kind, "m": m, "method": "ag", "routing": "assigner", "router_docs": n, "joiner_docs": busiest,
                    "replication": kept / n, "max_load": busiest / n,
                    "max_load_after_first": later / (n - len(batches[0])) if len(batches) > 1 else None, "fits": ["ag"],
                    "cpu_s": None})
    for r in out:
        r["work"] = r["router_docs"] + r["joiner_docs"]
        one = next(x for x in out if (x["method"], x["routing"]) == (r["method"], r["routing"]) and x["m"] == ms[0])
        r["speedup_bound"] = (one["router_docs"] + one["joiner_docs"]) / r["work"] * ms[0]
    return out


def plot(rows: list[dict[str, Any]], tp: list[dict[str, Any]], path: Path) -> None:
    kinds = sorted({r["data"] for r in rows})
    fig, axes = plt.subplots(len(kinds) + 1, 3, figsize=(13, 3.4 * (len(kinds) + 1)))
    windows = sorted({r["window"] for r in rows})
    styles = dict(zip(windows, ("-", "--", ":")))
    colours = {"ag": "tab:blue", "sc": "tab:orange", "ds": "tab:green"}
    for i, kind in enumerate(kinds):
        for j, metric in enumerate(("replication", "gini", "max_load")):
            ax = axes[i][j]
            for method in METHODS:
                for w in windows:
                    sel = sorted((r for r in rows if r["data"] == kind and r["method"] == method and r["window"] == w), key=lambda r: r["m"])
                    ax.plot([r["m"] for r in sel], [r[metric] for r in sel], styles[w], marker="o", color=colours[method],
                            label=f"{method.upper()} w={w}")
            ax.set_title(f"{kind}: {metric}")
            ax.set_xlabel("joiners m")
            if i == 0 and j == 0:
                ax.legend(fontsize=7)
    labels = [f"{t['method'].upper()}\n{t['routing']}" for t in tp]
    ax = axes[-1][0]
    ax.bar(labels, [t["docs_per_s"] for t in tp], color=[colours[t["method"]] for t in tp])
    ax.set_title(f"streaming throughput (docs/s), m={tp[0]['m'] if tp else '?'}")
    ax = axes[-1][1]
    ax.bar(labels, [t["batch_s"] for t in tp], color="grey", label="batch")
    ax.bar(labels, [t["assigner_s"] for t in tp], color="tab:red", label="assigner")
    ax.set_title("seconds per micro-batch")
    ax.legend(fontsize=7)
    axes[-1][2].axis("off")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="fewer documents and configurations")
    parser.add_argument("--nobench", action="store_true", help="also the NoBench-style stream (about twice the time)")
    parser.add_argument("--scaling", action="store_true", help="only sections 3 and 4: 1 vs 2 workers, work per worker")
    parser.add_argument("--work", action="store_true", help="only section 4 (no Spark: about a minute of CPU)")
    parser.add_argument("--master", help="with --scaling: run section 3 on this standalone cluster (spark://host:port, "
                        "scripts/cluster.sh start), 1 and 2 executors of one core each; section 4 is left out")
    parser.add_argument("--documents", type=int, help="with --scaling: documents per run (default 40000; --quick 6000)")
    parser.add_argument("--batch", type=int, help="with --scaling: documents per micro-batch and per window (default 10000)")
    parser.add_argument("--time-windows", action="store_true",
                        help="with --scaling: event-time windows over the source's ts instead of count windows")
    parser.add_argument("--sample", action="store_true",
                        help="with --scaling: fit the first partitioning before the start (sample=, 2000 documents)")
    parser.add_argument("--parallel-only", action="store_true", help="with --scaling: leave out the single Assigner")
    parser.add_argument("--no-work", action="store_true", help="with --scaling: leave out section 4")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        scaling_child(json.loads(args.child))
        return
    RESULTS.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    if args.scaling:
        run_scaling(args.quick, started, args.master, args.nobench, args.documents, args.time_windows, args.parallel_only,
                    not args.no_work, args.batch, args.sample)
        return
    if args.work:
        kinds = ("serverlog", "nobench") if args.nobench else ("serverlog",)
        per_worker = [r for kind in kinds for r in work_per_worker(8000, 1000, 2000, [1, 2, 4, 8, 16], kind)]
        print_work(per_worker)
        (RESULTS / "schemafree_work.json").write_text(json.dumps(per_worker, indent=1))
        return
    n = 3000 if args.quick else 8000
    ms = [5, 8] if args.quick else [5, 8, 10, 20]
    windows = [500, 2000] if args.quick else [1000, 4000]
    work = Path(tempfile.mkdtemp(prefix="schemafree_spark_"))
    spark = local_session(parallelism=8, app_name="schemafree-spark-bench")
    register(spark)
    try:
        rows = []
        for kind in KINDS if args.nobench else ("serverlog",):
            rows += quality(spark, work, kind, n, ms, windows)
        tp = [throughput(spark, work, method, total=6000 if args.quick else 12000, batch=2000, window=2000, m=8,
                         routing=routing)
              for method in METHODS for routing in ROUTINGS]
    finally:
        spark.stop()
        shutil.rmtree(work, ignore_errors=True)
    print(f"\nPartition quality on Spark ({n} documents per stream, count windows; means over windows)")
    print(f"{'data':>9} {'m':>3} {'window':>6} {'method':>6} {'repl':>6} {'gini':>6} {'maxload':>7} {'worst':>6} {'to_all':>6} {'refits':>6} {'pairs':>9}")
    for r in rows:
        print(f"{r['data']:>9} {r['m']:>3} {r['window']:>6} {r['method']:>6} {r['replication']:6.2f} {r['gini']:6.3f} "
              f"{r['max_load']:7.3f} {r['max_load_worst']:6.3f} {r['to_all']:6.3f} {r['refits']:>6} {r['pairs']:>9}")
    print("\nStreaming throughput (server log, m=8, count window 2000, 2000 documents per micro-batch)")
    print(f"{'method':>6} {'routing':>8} {'docs/s':>8} {'vs assigner':>11} {'s/batch':>8} {'assigner':>8} {'joiner':>8} {'1st batch':>9} {'pairs':>9}")
    for t in tp:
        ref = next(x for x in tp if x["method"] == t["method"] and x["routing"] == "assigner")
        print(f"{t['method']:>6} {t['routing']:>8} {t['docs_per_s']:8.0f} {t['docs_per_s'] / ref['docs_per_s']:11.2f} "
              f"{t['batch_s']:8.2f} {t['assigner_s']:8.2f} {t['busiest_joiner_s']:8.2f} {t['first_batch_s']:9.1f} {t['pairs']:>9}")
    total = time.perf_counter() - started
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"\ntotal {total:.0f} s, load average {load}")
    result = {"documents": n, "quality": rows, "throughput": tp, "seconds": total, "cpus": os.cpu_count(), "load": load}
    (RESULTS / "schemafree_spark.json").write_text(json.dumps(result, indent=1))
    plot(rows, tp, RESULTS / "schemafree_spark.png")
    print(f"wrote {RESULTS / 'schemafree_spark.json'} and .png")


def print_work(per_worker: list[dict[str, Any]]) -> None:
    for kind in sorted({r["data"] for r in per_worker}, reverse=True):
        print(f"\nWork per worker ({kind}, 8000 documents in batches of 1000, count windows of 2000): documents the"
              " busiest router task and the busiest joiner handle, summed over the batches; replication and maximal"
              " load over the stream, and the maximal load after the first batch (routed before any fit: broadcast)")
        print(f"{'m':>3} {'method':>6} {'routing':>8} {'router':>7} {'joiner':>7} {'work':>7} {'speed-up':>8} {'repl':>5} "
              f"{'maxload':>7} {'after 1st':>9}  fits")
        for r in (r for r in per_worker if r["data"] == kind):
            print(f"{r['m']:>3} {r['method']:>6} {r['routing']:>8} {r['router_docs']:7.0f} {r['joiner_docs']:7.0f} "
                  f"{r['work']:7.0f} {r['speedup_bound']:8.2f} {r['replication']:5.2f} {r['max_load']:7.3f} "
                  f"{r['max_load_after_first'] or 0:9.3f}  "
                  f"{' '.join(r['fits'])}")


def run_scaling(quick: bool, started: float, master: str | None = None, nobench: bool = False,
                documents: int | None = None, time_windows: bool = False, parallel_only: bool = False,
                work: bool = True, batch_size: int | None = None, sample: bool = False) -> None:
    total, batch, window = (6000, 1500, 3000) if quick else (40000, 10000, 10000)
    total = documents or total
    if batch_size:
        batch = window = batch_size
    kinds = ("serverlog", "nobench") if nobench else ("serverlog",)
    shape = f"event-time windows of {window / 1000:g} s ({window} documents)" if time_windows else f"count windows of {window}"
    print(f"Scaling: {' and '.join(kinds)}, {total} documents, {batch} per micro-batch, {shape}"
          + (", first fit on sample= (2000 documents)" if sample else "")
          + (f", standalone cluster {master}" if master else ""))
    tp = scaling(total, batch, window, kinds, master, time_windows, parallel_only, sample)
    per_worker = [] if master or not work else [
        r for kind in kinds for r in work_per_worker(8000, 1000, 2000, [1, 2, 4, 8, 16], kind)]
    where = f"w executors of 1 core on {master}" if master else "local[w]"
    print(f"\nThroughput at 1 and 2 workers ({where}, w input partitions, w joiners; steady state)")
    print(f"{'data':>9} {'method':>6} {'routing':>8} {'1 worker':>9} {'2 workers':>9} {'2 / 1':>6} {'s/batch (1/2)':>13} "
          f"{'busiest joiner s (1/2)':>23} {'assigner s (1/2)':>17} {'pairs':>9}")
    for kind in kinds:
        for method, routing in SCALING_RUNS[kind]:
            if parallel_only and routing != "parallel":
                continue
            one, two = (next(t for t in tp if (t["data"], t["method"], t["routing"], t["workers"]) == (kind, method, routing, w))
                        for w in (1, 2))
            print(f"{kind:>9} {method:>6} {routing:>8} {one['docs_per_s']:9.0f} {two['docs_per_s']:9.0f} "
                  f"{two['docs_per_s'] / one['docs_per_s']:6.2f} {one['batch_s']:6.2f} / {two['batch_s']:<4.2f} "
                  f"{one['busiest_joiner_s']:11.2f} / {two['busiest_joiner_s']:<9.2f} "
                  f"{one['assigner_s']:8.2f} / {two['assigner_s']:<6.2f} {one['pairs']:>9}")
        value2, ag2 = (next(t for t in tp if (t["data"], t["method"], t["routing"], t["workers"]) == (kind, m, "parallel", 2))
                       for m in ("value", "ag"))
        print(f"{kind}: value / AG at 2 workers (parallel routing): {value2['docs_per_s'] / ag2['docs_per_s']:.2f}")
    if per_worker:
        print_work(per_worker)
    total = time.perf_counter() - started
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    print(f"\ntotal {total:.0f} s, load average {load}")
    result = {"throughput": tp, "work_per_worker": per_worker, "seconds": total, "cpus": os.cpu_count(), "load": load,
              "master": master}
    name = "schemafree_scaling_cluster.json" if master else "schemafree_scaling.json"
    (RESULTS / name).write_text(json.dumps(result, indent=1))
    print(f"wrote {RESULTS / name}")


if __name__ == "__main__":
    main()
