"""The stateless stage of ``link``: validate, window, route (``mapInArrow``), and the dead letters.

Per Arrow batch of normalised rows (:func:`driftjoin.spark.link.inputs.normalise`):

1. :func:`classify_rows`, the one test the link and :func:`dead_letter_batches` share: a missing
   id, an unusable time, or a value a condition cannot use at all
   (:meth:`driftjoin.linkage.rules.Measure.reason`); a null value is not a dead letter (its
   conditions are false);
2. the valid rows become window copies (:meth:`driftjoin.windows.Windowing.copies`) with their times
   in ticks and the hot-key decision version of their window (version 0: the plan's);
3. :meth:`driftjoin.linkage.plan.LinkCore.route` gives each copy its workers: one row per copy and
   worker holding one of its entries, one of them the copy's *home* (its statistics);
4. heartbeats last, to every worker key and :data:`~driftjoin.spark.runtime.plan_guard.PLAN_KEY`,
   with the largest window time of the task (:mod:`driftjoin.spark.runtime.heartbeats`).

Routing is a function of the copy and the plan, so a copy reaches the same workers whichever
task routes it and whichever batch it comes in.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from driftjoin.clock import batch_max, ticks
from driftjoin.linkage.plan import LinkCore
from driftjoin.linkage.records import link_records
from driftjoin.linkage.rules import NULL_TIME
from driftjoin.spark.link.control import binding_for, table_for
from driftjoin.spark.link.plan import LinkPlan, arrow_fields
from driftjoin.spark.runtime.heartbeats import HEARTBEAT, heartbeat_batch
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.queries import task_query

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from driftjoin.deferred import pyarrow as pa, pyarrow_compute as pc


def load_tables(plan: LinkPlan, versions: np.ndarray, core: LinkCore | None = None) -> None:
    """Make every decision version in ``versions`` known to ``core`` (default: the plan's; a worker
    cached by an earlier task holds the core of that task's plan), read once per process."""
    core = plan.core if core is None else core
    for v in np.unique(versions).tolist():
        if v not in core.tables:
            core.tables[v] = table_for(plan.metrics_dir, task_query().query_id, v, core.tables[0])


def classify_rows(plan: LinkPlan, batch: pa.RecordBatch) -> np.ndarray:
    """Why each row cannot be linked (None where it can): missing id, unusable time, unusable value."""
    n = batch.num_rows
    reason = np.full(n, None, dtype=object)
    for m in plan.measures:
        if m.kind not in ("set", "ints", "vector"):  # only arrays can hold a value no condition can use
            continue
        for i, v in enumerate(batch.column(m.column).to_pylist()):
            if reason[i] is None:
                reason[i] = m.reason(v)
    time_reason = batch.column("time_reason").to_numpy(zero_copy_only=False)
    reason = np.where(time_reason != None, time_reason, reason)  # noqa: E711
    return np.where(batch.column("id").is_null().to_numpy(zero_copy_only=False), "missing id", reason)


def route_links(plan: LinkPlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The routed rows of every input batch (module docstring); heartbeats last."""
    keys = np.asarray(plan.keys, dtype=np.int32)
    seen = -np.inf
    q = task_query()
    binding = (binding_for(plan.metrics_dir, q.query_id, q.batch_id)
               if plan.metrics_dir and q.query_id is not None and q.batch_id is not None else None)
    for batch in batches:
        reason = classify_rows(plan, batch)
        idx = np.nonzero(reason == None)[0]  # noqa: E711
        if not len(idx):
            continue
        basis = batch.column("time").to_numpy(zero_copy_only=False)[idx].astype(np.float64)
        seen = max(seen, batch_max(basis))
        side = batch.column("side").to_numpy(zero_copy_only=False)[idx].astype(np.int8)
        ingest = batch.column("ingest").to_numpy(zero_copy_only=False)[idx].astype(np.float64)
        fields = arrow_fields(plan.kinds, batch, idx, ingest, np.zeros(len(idx), np.int64))
        # the real ids decide the hot-key cells (the workers see the same ids); ``at`` keeps each
        # copy's row in the Arrow batch, whose columns travel untouched
        ids = batch.column("id").take(pa.array(idx)).to_numpy(zero_copy_only=False)
        records = link_records(ids, fields, ticks(basis), side)
        c = plan.windows.copies(records.time)
        copies = records.take(c.row)
        copies.window, copies.ghost = c.window, c.ghost
        at = idx[c.row]
        if binding is not None:
            copies.value.version = binding.version_of(copies.window)
            load_tables(plan, copies.value.version)
        row, worker, home = plan.core.route(copies)
        rec = at[row]
        take = pa.array(rec)
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys[worker], pa.int32()), pa.array(copies.side[row], pa.int8()), batch.column("id").take(take),
             *[_routed_column(batch, c, take, plan.kinds[c]) for c in plan.kinds],
             batch.column("ingest").take(take).cast(pa.float64()), pa.array(copies.time[row], pa.int64()),
             pa.array(copies.window[row], pa.int64()), pa.array(copies.ghost[row]), pa.array(home),
             pa.array(copies.value.version[row], pa.int64())],
            schema=schema)
    lists = {c: None for c, k in plan.kinds.items() if k in ("set", "ints", "vector")}  # fillers a list column takes
    yield heartbeat_batch(schema, [*plan.keys, PLAN_KEY], {"side": HEARTBEAT, "ingest": seen, **lists})


def _routed_column(batch: pa.RecordBatch, c: str, take: pa.Array, kind: str) -> pa.Array:
    col = batch.column(c).take(take)
    if kind in ("date", "timestamp"):  # no nulls across the pandas boundary (an int column would become floats)
        return pc.fill_null(col, NULL_TIME)
    return col


def dead_letter_batches(plan: LinkPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows :func:`route_links` drops, with the reason (the dead-letter output)."""
    for batch in batches:
        reason = classify_rows(plan, batch)
        bad = np.nonzero(reason != None)[0]  # noqa: E711
        if len(bad) == 0:
            continue
        take = pa.array(bad)
        yield pa.RecordBatch.from_arrays(
            [batch.column("side").take(take).cast(pa.int8()), batch.column("id").take(take), batch.column("raw").take(take),
             pa.array(reason[bad].tolist(), pa.string())],
            names=["side", "id", "raw", "reason"])
