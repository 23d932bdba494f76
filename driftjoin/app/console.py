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
from dataclasses import dataclass, field

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
    #: the progress reports of the watched query, in batch order
    reports: list = field(default_factory=list)


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
    return Outcome(reason, log.poll(), len(log.with_input), error, log.progress)


def _fmt(v: object) -> str:
    if isinstance(v, float):
        return "n/a" if math.isnan(v) else f"{v:,.3f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def keeping_up(reports: list[dict], trigger_seconds: float | None) -> str | None:
    """Whether a stream kept up, from its progress reports after the start-up batches: ``"yes"``,
    or ``"no: ..."`` saying by how much; None when there is nothing to tell (too few batches).

    With a processing-time trigger a micro-batch that takes longer than the trigger makes the
    next one start late; back to back (no trigger), the stream falls behind when it processes
    fewer records per second than arrive.
    """
    from driftjoin.app.report import STARTUP_BATCHES

    steady = [p for p in reports if p.get("numInputRows")][STARTUP_BATCHES:]
    if len(steady) < 2:
        return None
    durations = sorted(p["durationMs"].get("triggerExecution", 0) / 1000 for p in steady)
    median = durations[len(durations) // 2]
    if trigger_seconds and median > trigger_seconds:
        return (f"no: the median micro-batch took {median:.1f} s, longer than the {trigger_seconds:g} s trigger "
                "(use a longer trigger, fewer workers or a lower rate)")
    arriving = sum(p.get("inputRowsPerSecond") or 0.0 for p in steady) / len(steady)
    processed = sum(p["numInputRows"] for p in steady) / max(sum(durations), 1e-9)
    if arriving and processed < 0.95 * arriving:
        return (f"no: {processed:,.0f} records/s processed of {arriving:,.0f} arriving (use a trigger of a few seconds, "
                "fewer workers or a lower rate)")
    return "yes"


def dead_letter_counts(spark, path: str | None, top: int = 3) -> str:
    """The dead letters in a sink and their most common reasons (a reason's text up to its first
    ``": "``, so values do not split it), e.g. ``"12 (not valid JSON 7, missing id 5)"``."""
    if path is None:
        return "not checked (generated input)"
    from pyspark.sql import functions as F

    try:
        dead = spark.read.parquet(path)
    except Exception:  # nothing written yet
        return "0"
    rows = (dead.groupBy(F.split(F.col("reason"), ": ").getItem(0).alias("reason")).count()
            .orderBy(F.col("count").desc(), "reason").collect())
    total = sum(r["count"] for r in rows)
    if not total:
        return "0"
    shown = ", ".join(f"{r['reason']} {r['count']:,}" for r in rows[:top])
    return f"{total:,} ({shown}{', ...' if len(rows) > top else ''})"


def count_rows(spark, path: str) -> int:
    """Rows of a Parquet sink, read through Spark (its log ignores files of failed attempts)."""
    try:
        return spark.read.parquet(path).count()
    except Exception:  # nothing written yet
        return 0


#: What lowers each part of the latency (:func:`driftjoin.app.report.latency_split`).
SPLIT_HINTS = {"wait": "waiting for its batch: a shorter trigger, or a cap on records per batch so one slow batch "
                       "does not make the next one larger",
               "work": "the batch's own work: more workers or cores, a lower threshold, fewer records per batch",
               "handover": "handing over the output: output=\"pairs-lean\", a cheaper sink (the pairs cross into Spark "
                           "and the sink before the batch commits)"}


def print_latency_split(console: Console, per_worker) -> None:
    """Per worker where a pair's steady latency goes (waiting, the batch's work, the hand-over),
    and which part is the largest with what lowers it."""
    shown = per_worker.dropna(subset=["wait_p99_s"])
    if not len(shown):
        return
    table = Table(title="where a pair's latency goes (steady state; p50 / p99 in seconds)")
    for c in ("worker", "waiting for its batch", "the batch's work", "handing over the output"):
        table.add_column(c, justify="right")
    for _, r in shown.iterrows():
        table.add_row(str(int(r.worker)), f"{_fmt(float(r.wait_p50_s))} / {_fmt(float(r.wait_p99_s))}",
                      f"{_fmt(float(r.work_p50_s))} / {_fmt(float(r.work_p99_s))}",
                      f"{_fmt(float(r.handover_p50_s))} / {_fmt(float(r.handover_p99_s))}")
    console.print(table)
    parts = {k: float(shown[f"{k}_p99_s"].max()) for k in SPLIT_HINTS}
    largest = max(parts, key=parts.get)
    console.print(f"largest part of the p99: {SPLIT_HINTS[largest]}")


def print_summary(console: Console, spark, job, outcome: Outcome, title: str) -> dict:
    """The summary of a run: this run's counts (records read and joined, pairs, ratios, late
    records), what the sinks hold over all runs of the checkpoint, whether the stream kept up,
    and per worker the pairs and the steady-state and start-up latency.

    ``job``: a started :class:`driftjoin.app.runner.Job` (or anything with its fields). The
    returned dict has the rows and ``nothing_valid``: a message when records were read but none
    was joined (every one a dead letter), else None.
    """
    from driftjoin.app.report import STARTUP_BATCHES, entities_summary, summary

    main = job.queries[0]
    link = getattr(job, "operator", "similarity_join") == "link"
    totals, per_worker = (summary(job.metrics_dir, run_id=str(main.runId), operator="link" if link else "computation")
                          if job.metrics_dir else ({}, None))
    rows: dict[str, object] = {"ended": outcome.reason, "micro-batches (this run)": outcome.batches,
                               "records read (this run)": outcome.records}
    if totals:
        rows["records joined (this run)"] = totals["records_in"]
        rows["pairs out (this run)"] = totals["pairs_out"]
        rows["duplication ratio (this run)"] = totals["duplication_ratio"]
        rows["comparisons ratio (this run)"] = totals["comparisons_ratio"]
        rows["late records (this run)"] = totals["late"]
        if link:
            rows["pairs per rule, first rule (this run)"] = ", ".join(
                f"{r}: {n:,}" for r, n in enumerate(totals.get("pairs_per_rule", []))) or "0"
            rows["records without a rule's field (this run)"] = ", ".join(
                f"{r}: {n:,}" for r, n in enumerate(totals.get("nulls_per_rule", []))) or "0"
    ents = entities_summary(job.metrics_dir, run_id=str(main.runId)) if getattr(job, "entities", False) else None
    if ents is not None:
        rows["entities now (records in them)"] = f"{ents['entities']:,} ({ents['records']:,})"
        rows["largest entity (records)"] = ents["largest"]
        rows["new entities (this run)"] = ents["new_entities"]
        rows["merges (this run)"] = ents["merges"]
        refused = ", ".join(f"{k} {v:,}" for k, v in ents["refused_by"].items() if v)
        rows["links refused by a guard (this run)"] = f"{ents['refused']:,}" + (f" ({refused})" if refused else "")
        if ents["expired_entities"]:
            rows["entities expired (this run)"] = ents["expired_entities"]
    if job.pairs_path:
        label = "entity rows in the sink (all runs)" if getattr(job, "entities", False) else "pairs in the sink (all runs)"
        rows[label] = count_rows(spark, job.pairs_path)
    rows["dead letters (all runs)"] = dead_letter_counts(spark, job.dead_letters_path)
    kept = None if job.available_now else keeping_up(outcome.reports, job.trigger_seconds)
    if kept is not None:
        rows["kept up with the trigger"] = kept
    table = Table(title=title)
    table.add_column("metric")
    table.add_column("value", justify="right")
    for k, v in rows.items():
        table.add_row(k, _fmt(v))
    console.print(table)
    if per_worker is not None and len(per_worker):
        wt = Table(title=f"per worker (latency: steady state; start-up = the first {STARTUP_BATCHES} micro-batches)")
        for c in ("worker", "pairs", "comparisons", "p50 latency (s)", "p99 latency (s)", "p99 at start-up (s)"):
            wt.add_column(c, justify="right")
        for _, r in per_worker.iterrows():
            wt.add_row(str(int(r.worker)), f"{int(r.pairs):,}", f"{int(r.comparisons):,}", _fmt(float(r.p50_latency_s)),
                       _fmt(float(r.p99_latency_s)), _fmt(float(r.startup_p99_latency_s)))
        console.print(wt)
        if "wait_p99_s" in per_worker.columns:
            print_latency_split(console, per_worker)
    nothing_valid = None
    if outcome.records and totals and not totals["records_in"] and not totals["late"]:
        nothing_valid = (f"nothing valid was read: {outcome.records:,} records read, none joined; dead letters: "
                         f"{rows['dead letters (all runs)']} (check dim, vector_col, id_col and the input's schema)")
    return {"rows": rows, "totals": totals, "per_worker": [] if per_worker is None else per_worker.to_dict("records"),
            "nothing_valid": nothing_valid}
