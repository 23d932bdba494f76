"""The metric similarity joins on Spark (strings, token sets, user metrics): a stateless router and
one stateful operator keyed by worker, driving a strategy of :mod:`driftjoin.metric`.

Data path (one micro-batch)::

    input rows --mapInArrow(route_metric)--> (worker key, role, record copy)     [strategy.route]
      --groupBy(worker key).transformWithStateInPandas(MetricProcessor)--> pairs  [worker.add]

The plan (:class:`MetricPlan`) holds the strategy, fixed before the start and shipped by
pickling: S3J's space and its centroids (records of a sample), PassJoin's ``tau`` and worker
count, prefix filtering's threshold with a :class:`~driftjoin.metric.spaces.JaccardSpace` whose
token order was fitted on a sample. The in-process runtime :class:`driftjoin.metric.engine.MetricEngine`
is what this follows, step for step:

- **Router** (stateless, every input task): a row the join cannot use goes to the dead letters
  (:func:`classify_rows`, the one test :func:`dead_letter_batches` shares: a missing id, an
  unusable time, the space's reasons for the value); the valid values are prepared with the
  plan's space, times become ticks, each record becomes its window copies
  (:func:`driftjoin.metric.records.expand`) and :meth:`~driftjoin.metric.base.Strategy.route`
  gives each copy its workers and role. Rows carry the raw value (Arrow passes it through
  untouched) and each worker prepares its own rows again. One row per record is its *home* row
  (its first routed row, of its earliest window), which lists it once in the statistics should
  it be late. Heartbeats last (:mod:`driftjoin.spark.runtime.heartbeats`).
- **Worker** (:class:`MetricProcessor`, one key per logical worker): plan check, the window clock
  (:mod:`driftjoin.clock`: every key derives the same frontier from the heartbeats), late
  records refused whole at every key (:meth:`driftjoin.windows.Windowing.late`), the copies
  sorted into one deterministic order and joined by ``worker.add`` (each new pair once), then
  ``expire_before`` the first open window.

Why each pair comes out exactly once on Spark: the strategies' routers are functions of the copy
and the plan, so a copy reaches the same workers whichever task routes it, and each worker's
``add`` returns a pair exactly once over any split of the stream into batches (the module
docstrings of :mod:`driftjoin.metric.s3j`, :mod:`driftjoin.metric.passjoin` and
:mod:`driftjoin.metric.prefix`). The state a batch leaves is what the next batch of the same
key restores, through Spark's state store, which commits with the output; a replayed batch starts
from the state of the last commit.

State (:class:`~driftjoin.spark.runtime.state.ChunkedState` ``metric_worker``): one chunk per run
of the worker's :class:`~driftjoin.metric.store.RunStore`, grouped by window (a batch writes the
runs it created and removes the runs they merged, :attr:`~driftjoin.metric.store.RunStore.retired`;
a closed window is dropped by group); S3J adds the workset centroids and the buffered outer
copies, one chunk per batch each (groups :data:`CENTROIDS`, :data:`BUFFER`), removed once every
centroid of a chunk is forgotten or every copy's window closed; the clock and S3J's next workset
id in the meta fields.
"""

from __future__ import annotations

import hashlib
import pickle
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from driftjoin.clock import WindowClock, batch_max, tick_of, ticks
from driftjoin.metric.base import STATE_FORMAT, Strategy, WorkerJoin, WorkerStats
from driftjoin.metric.records import MetricPairs, MetricRecords, concat_values, expand, take_values
from driftjoin.metric.s3j import S3JStrategy, S3JWorker
from driftjoin.metric.spaces import JaccardSpace, Space
from driftjoin.metric.store import Run
from driftjoin.metric.validate import reasons
from driftjoin.s3j.compute import Pairs
from driftjoin.spark.runtime.heartbeats import HEARTBEAT, heartbeat_batch, split_heartbeats
from driftjoin.spark.runtime.keys import SlotPlan
from driftjoin.spark.runtime.plan_guard import PLAN_KEY, PlanGuard
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.state import ChunkedState, Chunks, Meta, dumps
from driftjoin.spark.runtime.stats import latency_histogram, write_stats
from driftjoin.spark.similarity.plan import ADOPTABLE, pair_frames, window_clock
from driftjoin.windows import Windowing

#: Chunk groups of S3J's centroids and outer buffer (windows are the other groups; no window
#: id comes near them: a Spark timestamp's ticks are above -2^56).
CENTROIDS = -(2**63)
BUFFER = -(2**63) + 1
_EXTRA = (CENTROIDS, BUFFER)


def _fingerprint(value: Any) -> str:
    """A short stable fingerprint of a picklable value (centroids, a token order)."""
    return hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()[:16]


@dataclass(frozen=True)
class MetricPlan(SlotPlan):
    """Everything the metric operators need, fixed when the query is built (shipped by pickling)."""

    strategy: Strategy
    space: Space
    threshold: float
    parallelism: int
    self_join: bool
    windows: Windowing
    #: what the compared column holds: "string", "set", "vector" or "other"
    value_kind: str
    metrics_dir: str | None
    time_basis: str = "batch"
    #: how far behind the largest time of earlier batches a window may still take records (seconds)
    lateness: float = 0.0
    partitions: int | None = None
    #: how pairs leave the Python worker: "flat" or "lean" (no provenance columns)
    transport: str = "flat"
    #: what ``algorithm="auto"`` decided on (statistics and the stored plan)
    choice: dict = field(default_factory=dict)

    @property
    def algorithm(self) -> str:
        return self.strategy.name

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        s = self.strategy
        order = self.space.order.tokens.tolist() if isinstance(self.space, JaccardSpace) else None
        return {"operator": "similarity_join", "state_format": f"metric-{STATE_FORMAT}", "algorithm": s.name,
                "metric": self.space.name, "threshold": self.threshold, "value_kind": self.value_kind,
                "parallelism": self.parallelism, "partitions": self.partitions or self.parallelism,
                "centroids": _fingerprint(s.centroids) if isinstance(s, S3JStrategy) else None,
                "token_order": None if order is None else f"{len(order)}:{_fingerprint(order)}",
                "self_join": self.self_join, **self.windows.settings(), "time_basis": self.time_basis,
                "lateness": self.lateness, "metrics_dir": self.metrics_dir}

    def guard(self, handle: StatefulProcessorHandle) -> PlanGuard:
        return PlanGuard(handle, "similarity_join", self.settings(), ADOPTABLE)


def python_values(kind: str, values: list[Any]) -> list[Any]:
    """Column values as the metric cores and user metrics see them, the same in the router (from
    Arrow) and in the workers (from pandas): vectors as float64 arrays, token sets as lists."""
    if kind == "vector":
        return [None if v is None else np.asarray(v, dtype=np.float64) for v in values]
    if kind == "set":
        return [v.tolist() if isinstance(v, np.ndarray) else v for v in values]
    return values


def classify_rows(space: Space, kind: str, batch: pa.RecordBatch) -> tuple[np.ndarray, list[Any]]:
    """Why each input row cannot be joined (None where it can) and the values of all rows.

    The one test of the join (which keeps the valid rows) and :func:`dead_letter_batches` (which
    reports the others): a missing id, the reason the JVM gave for an unusable time
    (:func:`driftjoin.spark.runtime.columns.time_seconds`), else the space's reason for the value
    (:func:`driftjoin.metric.validate.reasons`: a null string or set, an empty token set, ...).
    """
    values = python_values(kind, batch.column("value").to_pylist())
    reason = np.array(reasons(space, values), dtype=object)
    time_reason = batch.column("time_reason").to_numpy(zero_copy_only=False)
    reason = np.where(time_reason != None, time_reason, reason)  # noqa: E711
    reason = np.where(batch.column("id").is_null().to_numpy(zero_copy_only=False), "missing id", reason)
    return reason, values


def route_metric(plan: MetricPlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Validate, prepare, expand into window copies and route each copy (module docstring); heartbeats last."""
    keys = np.asarray(plan.keys, dtype=np.int32)
    seen = -np.inf
    for batch in batches:
        reason, values = classify_rows(plan.space, plan.value_kind, batch)
        idx = np.nonzero(reason == None)[0]  # noqa: E711
        if not len(idx):
            continue
        basis = batch.column("time").to_numpy(zero_copy_only=False)[idx].astype(np.float64)
        seen = max(seen, batch_max(basis))
        side = batch.column("side").to_numpy(zero_copy_only=False)[idx].astype(np.int8)
        prepared = plan.space.prepare([values[i] for i in idx.tolist()])
        # ids: the rows' indices in the batch (the real ids travel as Arrow columns)
        copies = expand(MetricRecords.of(idx, prepared, ticks(basis), side), plan.windows)
        routing = plan.strategy.route(copies)
        row = copies.id[routing.row]
        home = np.ones(len(row), dtype=bool)
        home[1:] = row[1:] != row[:-1]  # routing is grouped by copy, copies by record, earliest window first
        take = pa.array(row)
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys[routing.worker], pa.int32()), pa.array(routing.role, pa.int8()),
             pa.array(copies.side[routing.row], pa.int8()), batch.column("id").take(take), batch.column("value").take(take),
             batch.column("ingest").take(take).cast(pa.float64()), pa.array(copies.time[routing.row], pa.int64()),
             pa.array(copies.window[routing.row], pa.int64()), pa.array(copies.ghost[routing.row]), pa.array(home)],
            schema=schema,
        )
    yield heartbeat_batch(schema, [*plan.keys, PLAN_KEY], {"side": HEARTBEAT, "ingest": seen, "value": None})


def dead_letter_batches(space: Space, kind: str, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows :func:`route_metric` drops, with the reason (the dead-letter output)."""
    for batch in batches:
        reason, _ = classify_rows(space, kind, batch)
        bad = np.nonzero(reason != None)[0]  # noqa: E711
        if len(bad) == 0:
            continue
        take = pa.array(bad)
        yield pa.RecordBatch.from_arrays(
            [batch.column("side").take(take).cast(pa.int8()), batch.column("id").take(take), batch.column("raw").take(take),
             pa.array(reason[bad].tolist(), pa.string())],
            names=["side", "id", "raw", "reason"],
        )


@dataclass
class _Worker:
    """One worker's join, its clock and what its chunks hold (for a stale cache and for pruning):
    ``pieces[group][chunk]`` is a decoded chunk of S3J's centroids or buffer, ``sizes[chunk]``
    the bytes of every chunk."""

    core: WorkerJoin
    clock: WindowClock
    pieces: dict[int, dict[int, Any]] = field(default_factory=lambda: {CENTROIDS: {}, BUFFER: {}})
    sizes: dict[int, int] = field(default_factory=dict)

    def nbytes(self) -> int:
        return int(sum(self.sizes.values()))


class MetricProcessor(OperatorProcessor):
    """The join of one worker of a metric strategy (key = the worker's slot key; module docstring)."""

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "metric_worker")

    def _new(self, slot: int) -> _Worker:
        return _Worker(self.plan.strategy.worker(slot), window_clock(self.plan))

    def _rebuild(self, slot: int, meta: Meta, chunks: Chunks, stale: _Worker | None) -> _Worker:
        """The worker from its chunks; decoded runs and pieces of a stale cached worker are reused by id."""
        w = self._new(slot)
        w.clock.seen = meta.fields["clock"]
        w.sizes = dict(meta.fields["sizes"])
        known: dict[int, Any] = {}
        if stale is not None:
            known = {r.label: r for runs in stale.core.store.windows.values() for r in runs if r.label is not None}
            for g in _EXTRA:
                known.update(stale.pieces[g])
        core = w.core
        for g in chunks.groups():
            if g in _EXTRA:
                w.pieces[g] = dict(chunks.read(g, known))
            else:
                core.store.windows[g] = [v if isinstance(v, Run) else Run.from_arrays(v, c) for c, v in chunks.read(g, known)]
        if isinstance(core, S3JWorker):
            cent = list(w.pieces[CENTROIDS].values())
            buf = [MetricRecords(*a) for a in w.pieces[BUFFER].values()]
            core.centroids = concat_values([c for c, _ in cent]) if cent else None
            core.ids = np.concatenate([i for _, i in cent]) if cent else np.zeros(0, np.int64)
            core.next_id = meta.fields["next_id"]
            core.buffer = MetricRecords.concat(buf) if buf else None
            first = w.clock.first_open()
            if first is not None:  # what the saved batch pruned after its chunks were written
                core.expire_before(first)
        return w

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        plan = self.plan
        t0 = time.perf_counter()
        pdf, top = split_heartbeats(pdf)
        slot = plan.slot_of(key)
        loaded = self.state.load(key, lambda meta, chunks, stale: self._rebuild(slot, meta, chunks, stale),
                                 lambda: self._new(slot))
        w: _Worker = loaded.value
        core, clock, chunks = w.core, w.clock, loaded.chunks
        t1 = time.perf_counter()
        pdf = pdf.sort_values(["time", "side", "id", "window"], kind="stable").reset_index(drop=True)
        times = pdf["time"].to_numpy(dtype=np.int64)
        late = clock.late(times)
        home = pdf["home"].to_numpy(dtype=bool)
        late_rows = [{"side": int(s), "id": i.item() if hasattr(i, "item") else i, "time": int(t)}
                     for s, i, t in zip(pdf["side"][late & home], pdf["id"][late & home], times[late & home])]
        pdf = pdf[~late].reset_index(drop=True)
        values = python_values(plan.value_kind, pdf["value"].tolist())
        rec = MetricRecords(pdf["id"].to_numpy(), pdf["side"].to_numpy(dtype=np.int8), plan.space.prepare(values),
                            pdf["time"].to_numpy(dtype=np.int64), pdf["window"].to_numpy(dtype=np.int64),
                            pdf["ghost"].to_numpy(dtype=bool))
        core.stats = WorkerStats()
        s3j = isinstance(core, S3JWorker)
        n_ids, n_buffer = (len(core.ids), 0 if core.buffer is None else len(core.buffer)) if s3j else (0, 0)
        centroid_before = core.centroid_comparisons if s3j else 0
        pairs = core.add(rec, pdf["role"].to_numpy(dtype=np.int8)) if len(rec) else MetricPairs.empty(rec.id.dtype)
        t2 = time.perf_counter()
        clock.advance(tick_of(top))
        first = clock.first_open()
        fresh = self._fresh_pieces(core, n_ids, n_buffer) if s3j else []
        if first is not None:
            core.expire_before(first)
            chunks.drop_groups(lambda g: g in _EXTRA or g >= first)
        self._persist(w, chunks, fresh, first)
        t3 = time.perf_counter()
        self.state.save(key, loaded, w.nbytes(), {"clock": clock.seen, "sizes": w.sizes,
                                                  **({"next_id": core.next_id} if s3j else {})})
        emit = time.time()
        out = Pairs(pairs.left_id, pairs.right_id, pairs.distance, pairs.window,
                       _pair_ingest(pdf, pairs, plan.self_join), np.full(len(pairs), -1, np.int64))
        if plan.metrics_dir and (len(rec) or late_rows):
            stats = {
                "worker": slot, "seq": loaded.seq, "time": emit, "algorithm": plan.algorithm, "metric": plan.space.name,
                "comparisons": core.stats.comparisons, "candidates": core.stats.candidates, "pairs": len(pairs),
                "records": int(pdf["home"].sum()), "memberships": len(rec), "state_bytes": w.nbytes(),
                "latency_hist": latency_histogram(emit - out.ingest), "windows": sorted(int(g) for g in core.store.windows),
                "worksets": {}, "late": len(late_rows), "late_rows": late_rows,
                "timings": {"state_read": t1 - t0, "work": t2 - t1, "state_write": t3 - t2},
                "state": {"source": loaded.source, "chunks_read": chunks.read_count, "bytes_written": chunks.written_bytes,
                          "calls": chunks.calls},
            }
            if s3j:
                stats["centroid_comparisons"] = core.centroid_comparisons - centroid_before
                stats["worksets_open"] = core.n_worksets
            if plan.choice:
                stats["choice"] = plan.choice
            write_stats(plan.metrics_dir, "computation", slot, loaded.seq, stats)
        yield from pair_frames(out, slot, emit, lean=plan.transport == "lean")

    @staticmethod
    def _fresh_pieces(core: S3JWorker, n_ids: int, n_buffer: int) -> list[tuple[int, Any]]:
        """S3J's centroids and buffered outer copies this batch added, as chunks to write."""
        out: list[tuple[int, Any]] = []
        if len(core.ids) > n_ids:
            new = np.arange(n_ids, len(core.ids))
            out.append((CENTROIDS, (take_values(core.centroids, new), core.ids[new])))
        if core.buffer is not None and len(core.buffer) > n_buffer:
            out.append((BUFFER, core.buffer.take(np.arange(n_buffer, len(core.buffer))).arrays()))
        return out

    @staticmethod
    def _persist(w: _Worker, chunks: Chunks, fresh: list[tuple[int, Any]], first: int | None) -> None:
        """Write what the batch added and remove what it merged or forgot (module docstring)."""
        store = w.core.store
        for g, label in store.retired:
            if g in store.windows:  # else its window closed and its group is gone already
                chunks.remove(g, label)
        store.retired.clear()
        for g, runs in store.windows.items():
            for run in runs:
                if run.label is None:
                    blob = dumps(run.arrays())
                    run.label = chunks.add_pickled(g, blob)
                    w.sizes[run.label] = len(blob)
        for g, piece in fresh:
            blob = dumps(piece)
            c = chunks.add_pickled(g, blob)
            w.pieces[g][c] = piece
            w.sizes[c] = len(blob)
        if isinstance(w.core, S3JWorker):
            live = w.core.ids
            for c, (_, ids) in list(w.pieces[CENTROIDS].items()):
                if not np.isin(ids, live).any():
                    chunks.remove(CENTROIDS, c)
                    del w.pieces[CENTROIDS][c]
            if first is not None:
                for c, arrays in list(w.pieces[BUFFER].items()):
                    if MetricRecords(*arrays).window.max() < first:
                        chunks.remove(BUFFER, c)
                        del w.pieces[BUFFER][c]
        listed = {c for g in chunks.groups() for c in chunks.ids(g)}
        w.sizes = {c: n for c, n in w.sizes.items() if c in listed}


def _pair_ingest(pdf: pd.DataFrame, pairs: Any, self_join: bool) -> np.ndarray:
    """The later ingestion time of each pair's two records: every pair has a record of this batch
    (the one that completed it), whose ingestion time is looked up by side and id."""
    n = len(pairs)
    if n == 0:
        return np.zeros(0)
    table = pdf.groupby(["side", "id"])["ingest"].max()
    left = table.reindex(pd.MultiIndex.from_arrays([np.zeros(n, np.int8), pairs.left_id])).to_numpy(dtype=np.float64)
    right = table.reindex(pd.MultiIndex.from_arrays([np.full(n, 0 if self_join else 1, np.int8), pairs.right_id]))
    return np.fmax(left, right.to_numpy(dtype=np.float64))
