"""Figures 4 and 5 of the Streaming HyperCube paper on Spark: ``equi_join`` with SHC, PHJ and
Join-Biclique, and Spark's own stream-stream join, over generated Zipf streams.

Fig. 4: Zipf join keys, alpha from 0 to 2 at a fixed input size; Fig. 5: growing input at
alpha = 1. Full-stream joins (every pair), R and S share the hot set (a many-many join). Each run
is a streaming query over Parquet files, one file per side and micro-batch, run with
``trigger(availableNow=True)``; ``equi_join`` runs with ``output="count"`` (pairs counted per
worker, not materialised: alpha = 2 gives tens of millions of pairs) and Spark's join is
counted in ``foreachBatch``.

Columns of the table:

* ``max_work``: the most tuples handled plus pairs produced by any worker, the modelled parallel
  time of the paper's figures (as in ``bench/hypercube_core.py``); for Spark's join, per shuffle
  partition from the per-key counts of the input;
* ``max_load``: the most tuples any worker handled (routed copies + tuples installed by state
  moves), from the workers' per-batch statistics; for Spark's join, the most rows its shuffle
  puts in one partition (``pmod(hash(k), p)``, computed from the input; each row is stored and
  probes once there);
* ``max_stored``: the most tuples a worker held at the end of a batch (Spark: as max_load);
* ``moved``: tuples copied by SHC's state moves;
* ``batch_s``: the micro-batches' time without the first batch's query planning (about 10 s
  per query here, spent starting a Python process per stateful operator); ``plan_s`` that
  planning time. Spark's join has no Python operator, so it plans in well under a second.

A last run moves the hot set at every micro-batch (alpha = 1.5), which makes SHC move state.

``--scaling`` runs instead what parallel routing buys: throughput (input tuples per second of
micro-batch time) at 1 and 2 workers with the parallel routers and with the single dispatcher
(``--scale-size`` tuples in ``--batches`` micro-batches, uniform keys by default), and the work of
each worker at 1 to 16 workers (``--scale-ps``) for SHC and PHJ from the workers' statistics, on
a skewed stream of many micro-batches (``--work-size``, ``--work-batches``, ``--work-alpha``).
Writes ``bench/results/hypercube_spark_scaling.json``. With ``--master spark://...`` the
throughput runs use a standalone cluster (``scripts/cluster.sh start``) instead of ``local[2]``:
``p`` executors of one core for ``p`` workers, each ``p`` its own driver process (``spark.cores.max
= p``, started only once all ``p`` executors have registered); the work table is left out (it
comes from the statistics, the same wherever the tasks run). Writes
``bench/results/hypercube_spark_scaling_cluster.json``.

Run: ``.venv/bin/python bench/hypercube_spark.py`` (six streams x five systems: about 8 minutes
on two idle cores, much longer on a loaded machine; ``--alphas``, ``--sizes``, ``--no-moving``
to change the points). Writes ``bench/results/hypercube_spark.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from driftjoin.hypercube import Side, ZipfStreamSpec, zipf_stream
from driftjoin.spark.equi.api import equi_join
from driftjoin.spark.runtime.stats import read_stats
from driftjoin.spark.runtime.jvm import executor_count
from driftjoin.spark.runtime.session import cluster_session, local_session, prepare_for_stateful

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = "id long, k long, ts double, x long"
DOMAIN = 10_000
SYSTEMS = ("shc", "shc1", "phj", "jb", "spark")
ROUTINGS = ("parallel", "dispatcher")
#: a cluster run starts its first job only once all its executors have registered
WAIT_FOR_EXECUTORS = {"spark.scheduler.minRegisteredResourcesRatio": "1.0",
                      "spark.scheduler.maxRegisteredResourcesWaitingTime": "120s"}
LABELS = {"shc": "SHC (parallel routers)", "shc1": "SHC (one dispatcher, the paper's)", "phj": "PHJ",
          "jb": "Join-Biclique", "spark": "Spark stream-stream join"}


def write_stream(base: Path, spec: ZipfStreamSpec, batches: int) -> int:
    """The stream as ``batches`` Parquet files per side, modification times in batch order."""
    stream = zipf_stream(spec)
    per = -(-len(stream) // batches)
    start = time.time() - 3600
    for b in range(batches):
        part = stream[b * per:(b + 1) * per]
        for side, name in ((Side.R, "L"), (Side.S, "R")):
            rows = [t for t in part if t.side is side]
            (base / name).mkdir(parents=True, exist_ok=True)
            path = base / name / f"b{b:03d}.parquet"
            pq.write_table(pa.table({
                "id": pa.array([t.tid for t in rows], pa.int64()), "k": pa.array([t.key for t in rows], pa.int64()),
                "ts": pa.array([t.ts for t in rows], pa.float64()), "x": pa.array([t.tid * 7 for t in rows], pa.int64()),
            }), path)
            os.utime(path, (start + b, start + b))
    return len(stream)


def _read(spark, base: Path, name: str):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(base / name))


def _times(q) -> dict[str, float]:
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    total = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    plan = progress[0]["durationMs"].get("queryPlanning", 0) / 1000 if progress else 0.0
    return {"batches": len(progress), "time_s": total, "plan_s": plan, "batch_s": total - plan}


def run_equi(spark, data: Path, work: Path, algorithm: str, p: int, groups: int | None,
             routing: str = "parallel") -> dict[str, Any]:
    metrics = work / "metrics"
    joined = equi_join(_read(spark, data, "L"), _read(spark, data, "R"), on="k", algorithm=algorithm,
                       parallelism=p, groups=groups, metrics_dir=str(metrics), output="count", routing=routing)
    pairs: list[int] = []
    q = (joined.writeStream.foreachBatch(lambda df, _: pairs.append(sum(r.pairs for r in df.collect())))
         .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    load, stored, work = [0] * p, [0] * p, [0] * p
    workers = list(read_stats(str(metrics), "equi_worker"))
    for s in workers:
        w = s["worker"]
        load[w] += s["received"] + s["installed"]
        work[w] += s["received"] + s["installed"] + s["produced"]
        stored[w] = max(stored[w], s["stored"])
    if routing == "dispatcher":
        decisions = list(read_stats(str(metrics), "equi_dispatcher"))
        moved = sum(s["installs"] for s in decisions)
    else:  # the control plane's per-batch records (SHC), else none
        decisions = list(read_stats(str(metrics), "equi_control"))
        moved = sum(s["installed"] for s in workers)
    last = max(decisions, key=lambda s: s["batch"]) if decisions else {}
    return {
        "output": sum(pairs), "max_load": max(load), "mean_load": sum(load) / p, "max_work": max(work),
        "mean_work": sum(work) / p, "work": work, "max_stored": max(stored), "moved": moved,
        **{k: last.get(k, 0) for k in ("promotions", "demotions", "doublings", "halvings")}, **_times(q),
    }


def run_spark_join(spark, data: Path, work: Path, p: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    prepare_for_stateful(spark, p)
    left, right = _read(spark, data, "L"), _read(spark, data, "R").withColumnRenamed("id", "rid")
    joined = left.join(right.select("k", "rid"), "k")
    pairs: list[int] = []
    q = (joined.writeStream.foreachBatch(lambda df, _: pairs.append(df.count()))
         .option("checkpointLocation", str(work / "ck")).trigger(availableNow=True).start())
    q.awaitTermination()
    # where Spark's shuffle puts each key, and how many rows and pairs that partition gets
    counts = {}
    for name in ("L", "R"):
        per_key = spark.read.parquet(str(data / name)).groupBy("k").count()
        for r in per_key.select("k", F.pmod(F.hash("k"), F.lit(p)).alias("part"), "count").collect():
            counts.setdefault(r.k, [r.part, 0, 0])[1 if name == "L" else 2] = r["count"]
    load, work = [0] * p, [0] * p
    for part, n_l, n_r in counts.values():
        load[part] += n_l + n_r
        work[part] += n_l + n_r + n_l * n_r
    return {"output": sum(pairs), "max_load": max(load), "mean_load": sum(load) / p, "max_work": max(work),
            "max_stored": max(load), "moved": 0, **_times(q)}


def run_point(spark, spec: ZipfStreamSpec, p: int, batches: int, groups: int, scratch: Path) -> dict[str, Any]:
    data = scratch / "data"
    shutil.rmtree(scratch, ignore_errors=True)
    n = write_stream(data, spec, batches)
    rows: dict[str, Any] = {"input": n}
    for name in SYSTEMS:
        work = scratch / name
        start = time.perf_counter()
        if name == "spark":
            rows[name] = run_spark_join(spark, data, work, p)
        else:
            algorithm = {"jb": "biclique", "shc1": "shc"}.get(name, name)
            rows[name] = run_equi(spark, data, work, algorithm, p, groups if name == "jb" else None,
                                  "dispatcher" if name == "shc1" else "parallel")
        rows[name]["wall_s"] = time.perf_counter() - start
    outputs = {rows[s]["output"] for s in SYSTEMS}
    if len(outputs) != 1:
        raise RuntimeError(f"the joins disagree on the output size: { {s: rows[s]['output'] for s in SYSTEMS} }")
    return rows


def table(title: str, xname: str, points: list[tuple[Any, dict[str, Any]]]) -> None:
    print(f"\n{title}")
    head = (f"{xname:>7} {'system':>8} {'output':>12} {'max_work':>11} {'max_load':>9} {'mean_load':>9} "
            f"{'max_stored':>10} {'moved':>6} {'batch_s':>7} {'plan_s':>6} {'wall_s':>6}")
    print(head)
    print("-" * len(head))
    for x, rows in points:
        for name in SYSTEMS:
            r = rows[name]
            print(f"{x!s:>7} {name:>8} {r['output']:>12,} {r['max_work']:>11,} {r['max_load']:>9,} {r['mean_load']:>9.0f} "
                  f"{r['max_stored']:>10,} {r['moved']:>6,} {r['batch_s']:>7.1f} {r['plan_s']:>6.1f} {r['wall_s']:>6.1f}")
        print(f"{'':>7} batch time, one dispatcher / parallel routers (SHC): {rows['shc1']['batch_s'] / rows['shc']['batch_s']:.2f}x")


def plot(fig4: list, fig5: list, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 2, figsize=(11, 11))
    styles = {"shc": "o-", "shc1": "o:", "phj": "s--", "jb": "^:", "spark": "x-."}
    for col, (points, xlabel) in enumerate([(fig4, "Zipf alpha"), (fig5, "input tuples (alpha = 1)")]):
        xs = [x for x, _ in points]
        for name in SYSTEMS:
            for row, metric, ylabel in ((0, "max_work", "max work per worker (tuples + pairs)"),
                                        (1, "max_load", "max load per worker (tuples)"),
                                        (2, "batch_s", "micro-batch time, s (no planning)")):
                ax = axes[row][col]
                ax.plot(xs, [rows[name][metric] for _, rows in points], styles[name], label=LABELS[name])
                ax.set_xlabel(xlabel)
                ax.set_ylabel(ylabel)
                ax.grid(True, which="both", alpha=0.3)
        axes[0][col].set_yscale("log")
        axes[1][col].set_yscale("log")
    axes[0][0].set_title("Fig. 4 on Spark: Zipf, varying alpha")
    axes[0][1].set_title("Fig. 5 on Spark: Zipf, varying input size")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def throughput_local(spark, data: Path, scratch: Path, routings: tuple[str, ...] = ROUTINGS) -> list[dict[str, Any]]:
    """SHC at 1 and 2 workers, for each of ``routings``, in this session (``local[2]``)."""
    rows = []
    for routing in routings:
        for p in (1, 2):
            work = scratch / f"tp-{routing}-{p}"
            rows.append({"routing": routing, "p": p, **run_equi(spark, data, work, "shc", p, None, routing)})
            shutil.rmtree(work, ignore_errors=True)
    return rows


def throughput_child(cfg: dict[str, Any]) -> None:
    """One driver with ``p`` executors of one core on the cluster ``cfg["master"]``: a warm-up
    query, then SHC on the scaling stream for each routing; prints the rows as JSON."""
    p, scratch = cfg["p"], Path(cfg["scratch"])
    spark = cluster_session(cfg["master"], p, f"hypercube-scaling-{p}", max_executors=p, conf=WAIT_FOR_EXECUTORS)
    executors = executor_count(spark)
    run_equi(spark, scratch / "warm-up" / "data", scratch / f"warm-up-{p}", "shc", p, None)
    rows = []
    for routing in ROUTINGS:
        work = scratch / f"tp-{routing}-{p}"
        rows.append({"routing": routing, "p": p, "executors": executors,
                     **run_equi(spark, scratch / "scaling", work, "shc", p, None, routing)})
        shutil.rmtree(work, ignore_errors=True)
    spark.stop()
    print("RESULT " + json.dumps(rows), flush=True)


def throughput_cluster(master: str, scratch: Path) -> list[dict[str, Any]]:
    """SHC at 1 and 2 executors of one core on a standalone cluster, each count of executors its own driver process."""
    rows = []
    for p in (1, 2):
        cfg = {"master": master, "p": p, "scratch": str(scratch)}
        proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(cfg)], capture_output=True, text=True)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if not lines:
            raise RuntimeError(f"cluster run {cfg} failed:\n{proc.stderr[-3000:]}")
        rows += json.loads(lines[-1][len("RESULT "):])
    return rows


def scaling(spark, scratch: Path, size: int, alpha: float, batches: int, ps: list[int], seed: int,
            work_size: int, work_batches: int, work_alpha: float, master: str | None = None,
            routings: tuple[str, ...] = ROUTINGS) -> dict[str, Any]:
    """What parallel routing buys: throughput at 1 and 2 workers, parallel routers against the one
    dispatcher (same stream, one run; in this session, or with ``master`` on 1 and 2 executors of
    a standalone cluster), and each worker's work at ``ps`` workers from the workers' statistics
    (the load a larger cluster would see), on a stream of ``work_size`` tuples in
    ``work_batches`` micro-batches (many: the control plane decides one or two batches behind,
    so a stream of few batches shows mostly the lag)."""
    spec = ZipfStreamSpec(size // 2, size // 2, domain=DOMAIN, alpha_r=alpha, alpha_s=alpha, seed=seed)
    data = scratch / "scaling"
    shutil.rmtree(data, ignore_errors=True)
    n = write_stream(data, spec, batches)
    runs: dict[str, Any] = {"input": n, "alpha": alpha, "batches": batches, "throughput": [], "work": [],
                            "work_input": work_size, "work_batches": work_batches, "work_alpha": work_alpha, "master": master}
    where = f"p executors of 1 core on {master}" if master else "local[2]"
    print(f"\nThroughput: Zipf alpha = {alpha}, IN = {n:,} in {batches} micro-batches, SHC, output='count', {where}")
    head = f"{'routing':>10} {'p':>3} {'batch_s':>8} {'plan_s':>7} {'tuples/s':>9} {'vs p=1':>7}"
    print(head)
    print("-" * len(head))
    rows = throughput_cluster(master, scratch) if master else throughput_local(spark, data, scratch, routings)
    for r in sorted(rows, key=lambda x: (ROUTINGS.index(x["routing"]), x["p"])):
        rate = n / r["batch_s"]
        base = next((x["tuples_per_s"] for x in runs["throughput"] if x["routing"] == r["routing"]), rate)
        runs["throughput"].append({"tuples_per_s": rate, **r})
        print(f"{r['routing']:>10} {r['p']:>3} {r['batch_s']:>8.1f} {r['plan_s']:>7.1f} {rate:>9,.0f} {rate / base:>6.2f}x")
    tp = {(x["routing"], x["p"]): x["tuples_per_s"] for x in runs["throughput"]}
    if {(r, p) for r in ROUTINGS for p in (1, 2)} <= tp.keys():
        print(f"parallel / dispatcher throughput: p = 1 {tp[('parallel', 1)] / tp[('dispatcher', 1)]:.2f}x, "
              f"p = 2 {tp[('parallel', 2)] / tp[('dispatcher', 2)]:.2f}x")
    if not ps:
        return runs
    spec = ZipfStreamSpec(work_size // 2, work_size // 2, domain=DOMAIN, alpha_r=work_alpha, alpha_s=work_alpha, seed=seed)
    data = scratch / "scaling-work"
    shutil.rmtree(data, ignore_errors=True)
    n = write_stream(data, spec, work_batches)
    head = f"{'system':>6} {'p':>3} {'max_work':>10} {'mean_work':>10} {'max/mean':>8} {'total':>11} {'moved':>6}"
    print(f"\nWork per worker (tuples handled + pairs produced, from the workers' statistics; Zipf alpha = "
          f"{work_alpha}, IN = {n:,} in {work_batches} micro-batches, parallel routing)\n{head}")
    print("-" * len(head))
    for algorithm in ("shc", "phj"):
        for p in ps:
            work = scratch / f"work-{algorithm}-{p}"
            r = run_equi(spark, data, work, algorithm, p, None)
            runs["work"].append({"algorithm": algorithm, "p": p, **r})
            print(f"{algorithm:>6} {p:>3} {r['max_work']:>10,} {r['mean_work']:>10,.0f} {r['max_work'] / r['mean_work']:>8.2f} "
                  f"{sum(r['work']):>11,} {r['moved']:>6,}")
            shutil.rmtree(work, ignore_errors=True)
    return runs


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--p", type=int, default=8, help="workers = shuffle partitions (default 8)")
    parser.add_argument("--fig4-size", type=int, default=10_000, help="input tuples (R + S) for Fig. 4")
    parser.add_argument("--alphas", type=str, default="0,1,2", help="Zipf exponents for Fig. 4")
    parser.add_argument("--sizes", type=str, default="10000,20000,40000", help="input sizes for Fig. 5 (alpha = 1)")
    parser.add_argument("--batches", type=int, default=4, help="micro-batches per run")
    parser.add_argument("--groups", type=int, default=2, help="Join-Biclique subgroups")
    parser.add_argument("--no-moving", action="store_true", help="skip the moving-hot-set run")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--scaling", action="store_true", help="only the scaling runs (throughput at 1 and 2 "
                        "workers, both routings; work per worker at --scale-ps workers)")
    parser.add_argument("--scale-size", type=int, default=800_000, help="input tuples of the throughput runs")
    parser.add_argument("--scale-alpha", type=float, default=0.0, help="Zipf exponent of the throughput runs")
    parser.add_argument("--scale-ps", type=str, default="1,2,4,8,16", help="workers for the work-per-worker table")
    parser.add_argument("--scale-routings", type=str, default="parallel,dispatcher",
                        help="routings of the local throughput runs (parallel, dispatcher)")
    parser.add_argument("--work-size", type=int, default=20_000, help="input tuples of the work-per-worker runs")
    parser.add_argument("--work-batches", type=int, default=16, help="micro-batches of the work-per-worker runs")
    parser.add_argument("--work-alpha", type=float, default=1.0, help="Zipf exponent of the work-per-worker runs")
    parser.add_argument("--master", help="with --scaling: the throughput runs on this standalone cluster (spark://host:port, "
                        "scripts/cluster.sh start), 1 and 2 executors of one core; no work table")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        throughput_child(json.loads(args.child))
        return
    if args.master and not args.scaling:
        parser.error("--master applies to --scaling")
    alphas = [float(a) for a in args.alphas.split(",")]
    sizes = [int(s) for s in args.sizes.split(",")]
    start = time.perf_counter()
    spark = None if args.master else local_session(args.p, "hypercube-spark-bench", cores=2)
    scratch = Path(tempfile.mkdtemp(prefix="hypercube-spark-"))
    done: dict[ZipfStreamSpec, dict[str, Any]] = {}

    def point(total: int, alpha: float | tuple[float, ...], phases: int = 1) -> dict[str, Any]:
        spec = ZipfStreamSpec(total // 2, total // 2, domain=DOMAIN, alpha_r=alpha, alpha_s=alpha, phases=phases,
                              seed=args.seed)
        if spec not in done:  # Fig. 5's point at Fig. 4's size and alpha = 1 is the same run
            done[spec] = run_point(spark, spec, args.p, args.batches, args.groups, scratch)
        return done[spec]

    try:
        # warm-up (not recorded): the session's first query pays for JVM code generation and
        # the start of the Python workers
        warm = scratch / "warm-up"
        write_stream(warm / "data", ZipfStreamSpec(500, 500, domain=DOMAIN, seed=args.seed), 2)
        if spark is not None:  # on a cluster each driver warms up its own executors
            run_equi(spark, warm / "data", warm, "shc", args.p, None)
        if args.scaling:
            ps = [] if args.master or not args.scale_ps else [int(p) for p in args.scale_ps.split(",")]
            runs = scaling(spark, scratch, args.scale_size, args.scale_alpha, args.batches, ps, args.seed,
                           args.work_size, args.work_batches, args.work_alpha, args.master,
                           tuple(args.scale_routings.split(",")))
            RESULTS.mkdir(parents=True, exist_ok=True)
            runs.update(load_average=os.getloadavg(), cores=os.cpu_count(), seconds=time.perf_counter() - start)
            out = RESULTS / ("hypercube_spark_scaling_cluster.json" if args.master else "hypercube_spark_scaling.json")
            out.write_text(json.dumps(runs, indent=1))
            print(f"\nwrote {out} in {runs['seconds']:.0f} s "
                  f"(load average at the end {runs['load_average'][0]:.1f} on {os.cpu_count()} cores)")
            return
        fig4 = [(a, point(args.fig4_size, a)) for a in alphas]
        table(f"Fig. 4 on Spark: Zipf, varying alpha (p = {args.p}, IN = {args.fig4_size:,}, {args.batches} micro-batches)",
              "alpha", fig4)
        fig5 = [(n, point(n, 1.0)) for n in sizes]
        table(f"Fig. 5 on Spark: Zipf, varying IN (p = {args.p}, alpha = 1, {args.batches} micro-batches)", "IN", fig5)
        moving = [] if args.no_moving else [("moving", point(args.fig4_size * 2, 1.5, phases=args.batches))]
        if moving:
            table(f"Moving hot set: alpha = 1.5, a new hot set in every micro-batch (p = {args.p}, "
                  f"IN = {args.fig4_size * 2:,})", "stream", moving)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {
        "p": args.p, "domain": DOMAIN, "batches": args.batches, "biclique_groups": args.groups, "seed": args.seed,
        "fig4": [{"alpha": a, **rows} for a, rows in fig4],
        "fig5": [{"alpha": 1.0, **rows} for _, rows in fig5],
        "moving_hot_set": [{"alpha": 1.5, "phases": args.batches, **rows} for _, rows in moving],
        "load_average": os.getloadavg(), "cores": os.cpu_count(), "seconds": time.perf_counter() - start,
    }
    (RESULTS / "hypercube_spark.json").write_text(json.dumps(out, indent=1))
    plot(fig4, fig5, RESULTS / "hypercube_spark.png")
    print(f"\nwrote {RESULTS / 'hypercube_spark.json'} and .png in {out['seconds']:.0f} s "
          f"(load average at the end {out['load_average'][0]:.1f} on {os.cpu_count()} cores)")


if __name__ == "__main__":
    main(sys.argv[1:])
