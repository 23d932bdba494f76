"""What the command line shows while a join runs and after it ends: progress, then a summary.

Shared by ``driftjoin demo`` and ``driftjoin run``. :func:`watch` follows the running queries
(records read, the last micro-batch and its duration) until they end by themselves (an
``availableNow`` trigger drains its input, a bounded generator is read to its end), a time
limit passes, Ctrl-C is pressed or a query fails. :func:`print_summary` prints the paper's
metrics from the operators' statistics (which count committed micro-batches only, like the
sink) and what the sink holds.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from driftjoin.spark.runtime.progress import ProgressLog


@dataclass
class Outcome:
    """How a run ended: ``"drained"``, ``"complete"``, ``"timeout"``, ``"interrupted"`` or ``"failed"``."""

    reason: str
    records: int
    batches: int
    error: BaseException | None = None


def watch(queries: list, console: Console, *, total: int | None = None, limit: float | None = None,
          poll: float = 1.0) -> Outcome:
    """Show progress of ``queries[0]`` (the join) until every query ends, ``total`` records were
    read, ``limit`` seconds passed, Ctrl-C, or a query fails. Stops the queries that still run.

    Spark keeps the last 100 progress reports; the count of records read is the sum over them
    plus what was counted before they rolled out (:class:`ProgressLog`).
    """
    main = queries[0]
    log = ProgressLog(main)
    start = time.time()
    reason, error = "drained", None
    columns = [TextColumn("{task.description}")]
    columns += [BarColumn(), TextColumn("{task.completed:,}/{task.total:,} records")] if total else [TextColumn("{task.completed:,} records")]
    with Progress(*columns, TimeElapsedColumn(), console=console, transient=False) as progress:
        task = progress.add_task("starting", total=total)
        try:
            while True:
                failed = next((q for q in queries if q.exception() is not None), None)
                if failed is not None:
                    reason, error = "failed", failed.exception()
                    break
                records = log.poll()
                last = main.lastProgress
                desc = f"batch {last['batchId']} ({last['durationMs'].get('triggerExecution', 0):,} ms)" if last else "starting"
                progress.update(task, completed=min(records, total) if total else records, description=desc)
                if not any(q.isActive for q in queries):
                    break
                if total is not None and records >= total:
                    reason = "complete"
                    break
                if limit is not None and time.time() - start >= limit:
                    reason = "timeout"
                    break
                time.sleep(poll)
        except KeyboardInterrupt:
            reason = "interrupted"
    for q in queries:
        if q.isActive:
            q.stop()
    if reason != "failed":
        failed = next((q for q in queries if q.exception() is not None), None)
        if failed is not None:
            reason, error = "failed", failed.exception()
    return Outcome(reason, log.poll(), len(log.reports), error)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:,.3f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def print_summary(console: Console, metrics_dir: str | None, title: str, extra: dict[str, object] | None = None) -> dict:
    """The summary table (records in, pairs out, ratios, per-worker latency) and ``extra`` rows."""
    from driftjoin.app.report import summary

    totals: dict = {}
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    per_worker = None
    if metrics_dir:
        totals, per_worker = summary(metrics_dir)
        for k in ("records_in", "pairs_out", "duplication_ratio", "comparisons_ratio"):
            table.add_row(k.replace("_", " "), _fmt(totals[k]))
    for k, v in (extra or {}).items():
        table.add_row(k, _fmt(v))
    console.print(table)
    if per_worker is not None and len(per_worker):
        wt = Table(title="per worker")
        for c in ("worker", "pairs", "comparisons", "p50 latency (s)", "p99 latency (s)"):
            wt.add_column(c, justify="right")
        for _, r in per_worker.iterrows():
            wt.add_row(str(int(r.worker)), f"{int(r.pairs):,}", f"{int(r.comparisons):,}", _fmt(float(r.p50_latency_s)),
                       _fmt(float(r.p99_latency_s)))
        console.print(wt)
    return {"totals": totals, "per_worker": [] if per_worker is None else per_worker.to_dict("records")}
