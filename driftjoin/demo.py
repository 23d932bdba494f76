"""``driftjoin demo``: two generated vector streams through the S3J join on an embedded Spark.

Streams for about ``seconds`` seconds, shows progress, then prints the paper's metrics (records
in, pairs out, duplication ratio, comparisons ratio, p50/p99 latency per worker) and writes a PNG
of per-worker p99 latency over time.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table


def run_demo(out_dir: Path, seconds: float = 60.0, rate: int = 500, parallelism: int = 2,
             selectivity: float = 0.001, window: str = "20 seconds", dist: str = "uniform") -> dict:
    from driftjoin.report import plot_latency, summary
    from driftjoin.spark.session import local_session
    from driftjoin.spark.similarity import similarity_join

    console = Console()
    shutil.rmtree(out_dir, ignore_errors=True)
    out_dir.mkdir(parents=True)
    console.print(f"[bold]driftjoin demo[/bold]: 2 streams x {rate} records/s, 2-D {dist}, angular distance, "
                  f"selectivity {selectivity:.2%}, {parallelism} workers, {window} windows, {seconds:.0f} s")
    spark = local_session(parallelism, "driftjoin-demo")
    total = int(rate * seconds)
    # 2-D uniform directions: angular distance is uniform on [0, 1], so threshold = selectivity
    threshold = selectivity

    def stream(i: int):
        return (spark.readStream.format("driftjoin").option("stream", i).option("rate", rate).option("dim", 2)
                .option("dist", dist).option("seed", 7).option("total", total).load())

    metrics = str(out_dir / "metrics")
    pairs = similarity_join(stream(0), stream(1), threshold=threshold, metric="angular", window=window,
                            parallelism=parallelism, dim=2, ingest_col="ts", metrics_dir=metrics)
    query = (pairs.writeStream.format("parquet").option("path", str(out_dir / "pairs"))
             .option("checkpointLocation", str(out_dir / "checkpoint")).trigger(processingTime="1 second").start())
    seen = 0
    deadline = time.time() + seconds * 4 + 120
    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed:,}/{task.total:,} records"),
                  TimeElapsedColumn(), console=console) as progress:
        task = progress.add_task("streaming", total=2 * total)
        while seen < 2 * total and time.time() < deadline and query.isActive:
            time.sleep(1.0)
            seen = sum(p["numInputRows"] for p in query.recentProgress) if query.recentProgress else seen
            last = query.lastProgress
            desc = f"batch {last['batchId']} ({last['durationMs'].get('triggerExecution', 0)} ms)" if last else "starting"
            progress.update(task, completed=min(seen, 2 * total), description=desc)
    query.stop()
    totals, per_worker = summary(metrics)
    plot = plot_latency(metrics, out_dir / "latency.png", f"driftjoin demo: p99 latency per worker ({parallelism} workers)")
    table = Table(title="driftjoin demo summary")
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k in ("records_in", "pairs_out", "duplication_ratio", "comparisons_ratio"):
        v = totals[k]
        table.add_row(k.replace("_", " "), f"{v:,.3f}" if isinstance(v, float) else f"{v:,}")
    console.print(table)
    wt = Table(title="per worker")
    for c in ("worker", "pairs", "comparisons", "p50 latency (s)", "p99 latency (s)"):
        wt.add_column(c, justify="right")
    for _, r in per_worker.iterrows():
        wt.add_row(str(int(r.worker)), f"{int(r.pairs):,}", f"{int(r.comparisons):,}", f"{r.p50_latency_s:.3f}", f"{r.p99_latency_s:.3f}")
    console.print(wt)
    console.print(f"latency plot: {plot}\npairs (Parquet, read with spark.read.parquet): {out_dir / 'pairs'}")
    spark.stop()
    return {"totals": totals, "per_worker": per_worker.to_dict("records"), "plot": str(plot)}
