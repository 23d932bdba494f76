"""``equi_join`` against Spark's own stream-stream inner join, side by side in one session.

Issue 39, item 2: ``equi_join`` with ``output="rows"`` must never be slower than Spark's own
stream-stream join on keys without skew, and at least 2x faster at Zipf 1.1 on 2 cores. Both
joins read the same streams (Parquet files, one file per side and micro-batch,
``maxFilesPerTrigger=1``, ``trigger(availableNow=True)``), produce the same joined rows (the
key, then the left columns, then the right ones, named as ``equi_join`` names them) and hand
every micro-batch's rows to the same ``foreachBatch`` sink, which folds them into a fingerprint:
the row count and two sums of each row's 64-bit ``xxhash64`` over all its columns (an
order-free hash of the multiset of rows). The fingerprints must be equal, so both produced
exactly the same rows, duplicates included. Before the measured runs each join runs once,
unrecorded (both warm: JVM code generation, the Python workers).

Per stream (uniform keys, Zipf 0.8, Zipf 1.1 by default; ``--alphas``) and repetition, the two
joins run one after the other, in alternating order. Columns:

* ``total_s``: the sum of the micro-batches' ``triggerExecution`` from the query's progress,
  first batch's query planning included (what a user waits for these four batches);
* ``batches_s``: the same without the first batch's query planning (a long-running stream pays
  the planning once);
* ``spark/equi``: Spark's time over equi_join's (above 1: equi_join is faster), per column.

``--profile`` adds the breakdown of equi_join's batches from its workers' statistics (task
seconds of state read, state moves, the join, state write, the output build).

The last table says what a bigger cluster changes, from the work per worker (tuples handled
plus pairs produced: the modelled parallel time of the paper's figures), computed without Spark
on the same stream and micro-batches: Spark's join puts key ``k`` in shuffle partition
``pmod(hash(k), P)`` (its Murmur3 ``hash``, computed by Spark on the input) and does all its pairs
there, SHC runs the single-process model of the parallel routing
(:class:`driftjoin.hypercube.distributed.DistributedJoin`, the control plane one batch behind as
on Spark) with ``P`` workers. Their ratio bounds what ``P`` cores can give each join. The last
columns cut the same rows into more micro-batches (``--cluster-batches``, 16): SHC's decisions lag
the data by two batches, so with four batches the hot key's early pairs stay on its hash worker;
the "seeded" column runs the four batches with the control plane seeded by the first batch's
counts (``sample=``).

``--auto 8`` (the default) also runs ``equi_join(algorithm="auto")`` at 8 workers, its
``sample=`` the first micro-batch's two files (what a user holds before the stream starts); the
engine it chose (read back from the checkpoint's plan) is printed with each run. ``--seeded 8``
(the default) runs ``equi_join(algorithm="shc", sample=...)`` with the same sample: SHC's control
plane seeded with its counts, so the keys heavy in it are spread from the first batch (the
``p = 8`` column is SHC without a sample, its decisions two batches behind).

Run: ``flock /tmp/bench.lock .venv/bin/python bench/equi_vs_spark.py`` (``--ps 2,8``: equi_join
at 2 and 8 workers, both on 2 Spark partitions; about 6 minutes on two idle cores). Writes ``bench/results/equi_vs_spark.json`` and ``.png``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from driftjoin.hypercube import BatchSummary, Side, StreamTuple
from driftjoin.hypercube.distributed import DistributedJoin
from driftjoin.hypercube.generator import zipf_ranks
from driftjoin.spark.equi.api import equi_join
from driftjoin.spark.runtime.plan_store import read_plans
from driftjoin.spark.runtime.session import local_session, prepare_for_stateful
from driftjoin.spark.runtime.stats import read_stats

RESULTS = Path(__file__).resolve().parent / "results"
SCHEMA = "id long, k long, at timestamp, amount double, tag string"
#: every output column, in equi_join's order (Spark's join is selected into the same)
OUTPUT = ["k", "left_id", "left_at", "left_amount", "left_tag", "right_id", "right_at", "right_amount", "right_tag"]
TIMINGS = ("state_read", "moves", "join", "state_write", "output")


def write_streams(base: Path, size: int, domain: int, alpha: float, batches: int, seed: int) -> dict[str, Any]:
    """``size`` rows per side with Zipf(``alpha``) keys over ``domain`` values (one hot set for
    both sides), as ``batches`` Parquet files per side; returns the keys per side and batch."""
    rng = np.random.default_rng(seed)
    perm = rng.permutation(domain)
    start = time.time() - 3600
    keys: dict[str, list[np.ndarray]] = {}
    for s, name in enumerate(("L", "R")):
        k = perm[zipf_ranks(rng, size, alpha, domain)].astype(np.int64)
        ids = np.arange(size, dtype=np.int64) + s * 10**9
        at = (np.int64(1_700_000_000_000_000) + np.arange(size, dtype=np.int64) * 1000 + s)
        amount = np.round(rng.random(size) * 1000, 2)
        tag = np.char.add("tag-", (ids % 997).astype(str))
        (base / name).mkdir(parents=True, exist_ok=True)
        keys[name] = []
        for b, part in enumerate(np.array_split(np.arange(size), batches)):
            path = base / name / f"b{b:03d}.parquet"
            pq.write_table(pa.table({
                "id": pa.array(ids[part]), "k": pa.array(k[part]), "at": pa.array(at[part], pa.timestamp("us", "UTC")),
                "amount": pa.array(amount[part]), "tag": pa.array(tag[part].tolist(), pa.string()),
            }), path)
            os.utime(path, (start + b, start + b))
            keys[name].append(k[part])
    return keys


def _read(spark, base: Path, name: str):
    return spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).parquet(str(base / name))


def _sink(found: list[tuple[int, int, int]]):
    """The fingerprint of each batch's rows: count and two halves of the sum of their hashes."""
    from pyspark.sql import functions as F

    def fold(df, _batch: int) -> None:
        h = F.col("h")
        row = df.select(F.xxhash64(*[F.col(c) for c in OUTPUT]).alias("h")).agg(
            F.count(F.lit(1)).alias("n"), F.sum(h.bitwiseAND(F.lit(0xFFFFFFFF))).alias("lo"),
            F.sum(F.shiftright(h, 32)).alias("hi")).collect()[0]
        found.append((int(row["n"]), int(row["lo"] or 0), int(row["hi"] or 0)))

    return fold


def _run(query_df, work: Path) -> dict[str, Any]:
    found: list[tuple[int, int, int]] = []
    started = time.perf_counter()
    q = (query_df.writeStream.foreachBatch(_sink(found)).option("checkpointLocation", str(work / "ck"))
         .trigger(availableNow=True).start())
    q.awaitTermination()
    wall = time.perf_counter() - started
    progress = [p for p in q.recentProgress if p["numInputRows"]]
    total = sum(p["durationMs"]["triggerExecution"] for p in progress) / 1000
    plan = progress[0]["durationMs"].get("queryPlanning", 0) / 1000 if progress else 0.0
    rows = sum(f[0] for f in found)
    lo = sum(f[1] for f in found)
    hi = sum(f[2] for f in found)
    return {"rows": rows, "fingerprint": [rows, lo, hi], "total_s": total, "plan_s": plan, "batches_s": total - plan,
            "wall_s": wall, "batches": len(progress)}


def run_equi(spark, data: Path, work: Path, p: int, algorithm: str, seeded: bool = False) -> dict[str, Any]:
    metrics = work / "metrics"
    # the sample of auto and of seeded SHC: what a user has before the stream starts, here its
    # first micro-batch's files
    sample = tuple(spark.read.parquet(str(data / name / "b000.parquet")) for name in ("L", "R")) \
        if algorithm == "auto" or seeded else None
    joined = equi_join(_read(spark, data, "L"), _read(spark, data, "R"), on="k", algorithm=algorithm,
                       parallelism=p, metrics_dir=str(metrics), sample=sample)
    out = _run(joined, work)
    stats = list(read_stats(str(metrics), "equi_worker"))
    out["engine"] = read_plans(str(work / "ck"))[0]["settings"]["algorithm"]
    if not stats:  # Spark's own join: no workers of equi_join's
        out["timings"], out["max_work"] = {k: 0.0 for k in TIMINGS}, 0
        return out
    out["timings"] = {k: sum(s["timings"][k] for s in stats) for k in TIMINGS}
    out["max_work"] = max(_work(stats, p))
    return out


def _work(stats: list[dict[str, Any]], p: int) -> list[int]:
    work = [0] * p
    for s in stats:
        work[s["worker"]] += s["received"] + s["installed"] + s["produced"]
    return work


def run_spark(spark, data: Path, work: Path, partitions: int) -> dict[str, Any]:
    from pyspark.sql import functions as F

    prepare_for_stateful(spark, partitions)
    left = _read(spark, data, "L")
    right = _read(spark, data, "R")
    joined = left.alias("l").join(right.alias("r"), "k").select(
        F.col("k"), *[F.col(f"l.{c}").alias(f"left_{c}") for c in ("id", "at", "amount", "tag")],
        *[F.col(f"r.{c}").alias(f"right_{c}") for c in ("id", "at", "amount", "tag")])
    return _run(joined, work)


def spark_partition_work(spark, data: Path, keys: dict[str, list[np.ndarray]], ps: list[int]) -> dict[int, int]:
    """Spark's join: the most work (rows stored and probing + pairs) of one shuffle partition at ``P``."""
    from pyspark.sql import functions as F

    uniq = np.unique(np.concatenate([np.concatenate(v) for v in keys.values()]))
    df = spark.createDataFrame([(int(k),) for k in uniq], "k long")
    hashes = {int(r.k): int(r.h) for r in df.select("k", F.hash("k").alias("h")).collect()}
    out = {}
    for p in ps:
        work = np.zeros(p, dtype=np.int64)
        seen = {"L": {}, "R": {}}
        for b in range(len(keys["L"])):
            for name, other in (("L", "R"), ("R", "L")):
                # the left rows of a batch go first, so the right rows meet them: each pair once
                vals, counts = np.unique(keys[name][b], return_counts=True)
                for k, n in zip(vals.tolist(), counts.tolist()):
                    part = hashes[k] % p
                    work[part] += n + n * seen[other].get(k, 0)
                    seen[name][k] = seen[name].get(k, 0) + n
        out[p] = int(work.max())
    return out


def sample_counts(keys: dict[str, list[np.ndarray]]) -> BatchSummary:
    """The counts of the first micro-batch's keys: the sample the ``auto`` and ``seeded`` runs get."""
    counts: dict[tuple[Side, Any, int], int] = {}
    totals: dict[tuple[Side, int], int] = {}
    for side, name in ((Side.R, "L"), (Side.S, "R")):
        vals, n = np.unique(keys[name][0], return_counts=True)
        counts.update({(side, int(k), 0): int(c) for k, c in zip(vals.tolist(), n.tolist())})
        totals[(side, 0)] = int(n.sum())
    return BatchSummary(counts, None, None, totals)


def shc_model_work(keys: dict[str, list[np.ndarray]], ps: list[int], seed: int,
                   batches: int | None = None, sample: BatchSummary | None = None) -> dict[int, dict[str, Any]]:
    """SHC's parallel routing in one process (control plane one batch behind, as on Spark): max
    and mean work per worker; ``batches``: the same rows cut into that many micro-batches instead;
    ``sample``: the control plane seeded with these counts (``sample=``)."""
    out = {}
    if batches is not None:
        keys = {name: np.array_split(np.concatenate(parts), batches) for name, parts in keys.items()}
    batches = len(keys["L"])
    rng = np.random.default_rng(seed)
    stream: list[list[StreamTuple]] = []
    n = 0
    for b in range(batches):
        rows = [StreamTuple(Side.R, int(k), i, 0.0) for i, k in enumerate(keys["L"][b].tolist(), start=n)]
        rows += [StreamTuple(Side.S, int(k), i, 0.0) for i, k in enumerate(keys["R"][b].tolist(), start=n)]
        n += len(keys["L"][b]) + len(keys["R"][b])
        order = rng.permutation(len(rows))
        stream.append([StreamTuple(rows[i].side, rows[i].key, rows[i].tid, float(j)) for j, i in enumerate(order)])
    for p in ps:
        join = DistributedJoin("shc", p, behind=1, keep_pairs=False, kernel="columnar", seed=sample)
        for batch in stream:
            join.step(batch)
        m = join.metrics()
        work = [r + i + o for r, i, o in zip(m.received, m.installed, m.produced)]
        out[p] = {"max": max(work), "mean": sum(work) / p, "output": m.output}
    return out


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=20_000, help="rows per side")
    parser.add_argument("--domain", type=int, default=2_000, help="distinct keys")
    parser.add_argument("--batches", type=int, default=4, help="micro-batches")
    parser.add_argument("--alphas", type=str, default="0,0.8,1.1", help="Zipf exponents (0: uniform)")
    parser.add_argument("--ps", type=str, default="2,8", help="equi_join's workers, one run each (on 2 Spark partitions)")
    parser.add_argument("--algorithm", type=str, default="shc", help="equi_join's algorithm")
    parser.add_argument("--auto", type=str, default="8",
                        help="parallelisms at which equi_join(algorithm='auto') also runs, its sample the first "
                             "micro-batch's files ('' for none)")
    parser.add_argument("--seeded", type=str, default="8",
                        help="parallelisms at which equi_join(algorithm='shc', sample=...) also runs, the same sample "
                             "as auto's ('' for none)")
    parser.add_argument("--spark-partitions", type=int, default=2, help="Spark join's shuffle partitions")
    parser.add_argument("--repeats", type=int, default=2, help="runs of each join per stream (rotating order)")
    parser.add_argument("--cluster-ps", type=str, default="2,4,8,16,32", help="P of the work-per-worker table")
    parser.add_argument("--cluster-batches", type=int, default=16,
                        help="the work-per-worker table also cuts the stream into this many micro-batches")
    parser.add_argument("--profile", action="store_true", help="print equi_join's task seconds per part")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    alphas = [float(a) for a in args.alphas.split(",")]
    ps = [int(p) for p in args.ps.split(",")]
    systems = ["spark", *(f"p{p}" for p in ps), *(f"a{p}" for p in args.auto.split(",") if p),
               *(f"s{p}" for p in args.seeded.split(",") if p)]
    cluster_ps = [int(p) for p in args.cluster_ps.split(",") if p]
    started = time.perf_counter()
    load_start = os.getloadavg()
    spark = local_session(args.spark_partitions, "equi-vs-spark", cores=2)
    scratch = Path(tempfile.mkdtemp(prefix="equi-vs-spark-"))
    results: list[dict[str, Any]] = []

    def run(name: str, data: Path, work: Path) -> dict[str, Any]:
        if name == "spark":
            return run_spark(spark, data, work, args.spark_partitions)
        return run_equi(spark, data, work, int(name[1:]), "auto" if name[0] == "a" else "shc" if name[0] == "s"
                        else args.algorithm, seeded=name[0] == "s")

    try:
        warm = scratch / "warm"
        write_streams(warm / "data", 2_000, 200, 0.0, 2, args.seed)
        for name in systems:
            run(name, warm / "data", warm / name)
        runs = 0
        for alpha in alphas:
            data = scratch / f"a{alpha}"
            keys = write_streams(data / "data", args.size, args.domain, alpha, args.batches, args.seed)
            point: dict[str, Any] = {"alpha": alpha, "load": [os.getloadavg()[0]], **{name: [] for name in systems}}
            for rep in range(args.repeats):
                order = systems[runs % len(systems):] + systems[:runs % len(systems)]
                runs += 1
                for name in order:
                    work = data / f"{name}-{rep}"
                    r = run(name, data / "data", work)
                    point[name].append(r)
                    shutil.rmtree(work, ignore_errors=True)
                    print(f"  {_name(alpha)}: {_label(name):<21} {r['total_s']:6.2f} s ({r['batches_s']:.2f} s without "
                          f"planning), {r['rows']:,} rows{_engine(r)}", flush=True)
            point["load"].append(os.getloadavg()[0])
            prints = {tuple(r["fingerprint"]) for name in systems for r in point[name]}
            if len(prints) != 1:
                raise RuntimeError(f"alpha {alpha}: the joins' rows differ: {prints}")
            if cluster_ps:
                point["cluster"] = {"spark": spark_partition_work(spark, data / "data", keys, cluster_ps),
                                    "shc": shc_model_work(keys, cluster_ps, args.seed),
                                    "shc_more_batches": shc_model_work(keys, cluster_ps, args.seed, args.cluster_batches),
                                    "shc_seeded": shc_model_work(keys, cluster_ps, args.seed, sample=sample_counts(keys))}
            results.append(point)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    load_end = os.getloadavg()
    report(results, systems, args)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = {"settings": vars(args), "load_start": load_start, "load_end": load_end, "cores": os.cpu_count(),
           "seconds": time.perf_counter() - started, "points": results}
    (RESULTS / "equi_vs_spark.json").write_text(json.dumps(out, indent=1))
    plot(results, systems, RESULTS / "equi_vs_spark.png")
    print(f"\nwrote {RESULTS / 'equi_vs_spark.json'} and .png in {out['seconds']:.0f} s; load average "
          f"{load_start[0]:.1f} at the start, {load_end[0]:.1f} at the end ({os.cpu_count()} cores)")


def _median(runs: list[dict[str, Any]], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def _name(alpha: float) -> str:
    return "uniform" if alpha == 0 else f"Zipf {alpha:g}"


def _label(system: str) -> str:
    if system == "spark":
        return "Spark's join"
    return f"equi_join {dict(a='auto ', s='seeded ').get(system[0], '')}p = {system[1:]}"


def _engine(run: dict[str, Any]) -> str:
    return f" (ran {run['engine']})" if "engine" in run else ""


def report(results: list[dict[str, Any]], systems: list[str], args: Any) -> None:
    print(f"\nequi_join(algorithm={args.algorithm!r}, output='rows') at each parallelism p (2 Spark partitions) against "
          f"Spark's stream-stream join ({args.spark_partitions} shuffle partitions); {args.size:,} rows per side over "
          f"{args.domain:,} keys, {args.batches} micro-batches; median of {args.repeats} runs each; spark/equi above 1: "
          "equi_join is faster")
    equis = [s for s in systems if s != "spark"]
    head = (f"{'keys':>9} {'rows':>12} {'Spark total':>11} {'batches':>8} "
            + " ".join(f"{_label(s)[len('equi_join '):] + ' total':>17} {'batches':>8} {'ratio':>6} {'ratio b.':>8}"
                       for s in equis)
            + f" {'load':>9}")
    print(head)
    print("-" * len(head))
    for pt in results:
        s_t, s_b = _median(pt["spark"], "total_s"), _median(pt["spark"], "batches_s")
        line = f"{_name(pt['alpha']):>9} {pt['spark'][0]['rows']:>12,} {s_t:>10.2f}s {s_b:>7.2f}s"
        for e in equis:
            e_t, e_b = _median(pt[e], "total_s"), _median(pt[e], "batches_s")
            line += f" {e_t:>16.2f}s {e_b:>7.2f}s {s_t / e_t:>5.2f}x {s_b / e_b:>7.2f}x"
        print(line + f" {pt['load'][0]:>4.1f}-{pt['load'][1]:<4.1f}")
    if args.profile:
        print("\nequi_join's workers, task seconds (median run): " + ", ".join(TIMINGS))
        for pt in results:
            for e in equis:
                runs = sorted(pt[e], key=lambda r: r["total_s"])
                t = runs[len(runs) // 2]["timings"]
                print(f"{_name(pt['alpha']):>9} p={e[1:]:<3} " + " ".join(f"{t[k]:6.2f}" for k in TIMINGS)
                      + f"   max work per worker {runs[len(runs) // 2]['max_work']:,}")
    if results and "cluster" in results[0]:
        cps = sorted(results[0]["cluster"]["spark"])
        print("\nA bigger cluster, from the work per worker (tuples handled + pairs produced; Spark: its busiest "
              "shuffle partition; SHC: the busiest worker of the parallel routing's model, tables one batch behind)")
        more = args.cluster_batches
        head = (f"{'keys':>9} {'P':>3} {'Spark max work':>14} {'SHC max work':>12} {'SHC mean':>10} {'Spark/SHC':>9}"
                f" {f'SHC max, {more} batches':>20} {'Spark/SHC':>9} {'SHC seeded max':>14} {'Spark/SHC':>9}")
        print(head)
        print("-" * len(head))
        for pt in results:
            for p in cps:
                s = pt["cluster"]["spark"][p]
                h = pt["cluster"]["shc"][p]
                m = pt["cluster"]["shc_more_batches"][p]
                z = pt["cluster"]["shc_seeded"][p]
                print(f"{_name(pt['alpha']):>9} {p:>3} {s:>14,} {h['max']:>12,} {h['mean']:>10,.0f} {s / h['max']:>8.2f}x"
                      f" {m['max']:>20,} {s / m['max']:>8.2f}x {z['max']:>14,} {s / z['max']:>8.2f}x")


def plot(results: list[dict[str, Any]], systems: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    names = [_name(pt["alpha"]) for pt in results]
    x = np.arange(len(results))
    width = 0.8 / len(systems)
    for i, key in enumerate(systems):
        axes[0].bar(x + (i - (len(systems) - 1) / 2) * width, [_median(pt[key], "total_s") for pt in results], width,
                    label=_label(key))
    axes[0].set_xticks(x, names)
    axes[0].set_ylabel("seconds (micro-batches, planning included)")
    axes[0].set_yscale("log")
    axes[0].legend()
    if results and "cluster" in results[0]:
        for pt in results:
            cps = sorted(pt["cluster"]["spark"])
            axes[1].plot(cps, [pt["cluster"]["spark"][p] / pt["cluster"]["shc"][p]["max"] for p in cps], "o-",
                         label=_name(pt["alpha"]))
        axes[1].set_xscale("log", base=2)
        axes[1].set_xlabel("workers P")
        axes[1].set_ylabel("Spark's max work / SHC's max work")
        axes[1].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main(sys.argv[1:])
