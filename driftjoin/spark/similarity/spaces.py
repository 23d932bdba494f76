"""The metric-space path of ``similarity_join`` (strings, token sets, user metrics): a stateless
router and one stateful operator keyed by worker, driving a strategy of :mod:`driftjoin.metric`,
in the shape every similarity path shares (:mod:`driftjoin.spark.similarity.shape`).

A join takes this path when its metric is not one of the vector metrics of
:mod:`driftjoin.distance` (``"levenshtein"``, ``"jaccard"``, a callable ``f(a, b)``,
:func:`driftjoin.user_metric`: :attr:`SimilaritySettings.on_space_path
<driftjoin.spark.similarity.settings.SimilaritySettings.on_space_path>`) or when its column holds
no vectors (then the checks say which metric fits the column: :func:`takes_space_path`). The
vector metrics on vector columns keep their own S3J and grid.

Before the start (:func:`space_plan`): the checks of the column, the sample (``sample=`` when
given: a static DataFrame with the value column, or a list of values; else a static input's first
rows), which gives S3J its centroids, pivot filtering its pivots and cells (a user metric's plan
reuses the distances of its triangle check), prefix filtering its global token order, ``auto``
its estimate (the core's counted work, :func:`driftjoin.metric.choose.choose`) and a user metric
its triangle check. Without one, a stream can still run PassJoin (edit distance) and prefix
filtering (Jaccard, with a token order by hash instead of frequency: exact, less pruning); S3J,
pivot filtering and user metrics need it.

Data path (one micro-batch)::

    input rows --mapInArrow(route_values)--> (worker key, role, record copy)     [strategy.route]
      --groupBy(worker key).transformWithStateInPandas(SpaceProcessor)--> pairs  [worker.add_routed]

The plan (:class:`SpacePlan`) holds the strategy, fixed before the start and shipped by
pickling: S3J's space and its centroids (records of a sample), pivot filtering's plan (pivots,
cells, the sample's distances), PassJoin's ``tau`` and worker count, prefix filtering's threshold with a :class:`~driftjoin.metric.spaces.JaccardSpace` whose
token order was fitted on a sample. The in-process runtime :class:`driftjoin.metric.engine.MetricEngine`
is what this follows, step for step:

- **Router** (stateless, every input task): a row the join cannot use goes to the dead letters
  (:func:`classify_rows`, the one test the dead-letter output shares: a missing id, an
  unusable time, the space's reasons for the value); the valid values are prepared with the
  plan's space, times become ticks, each record becomes its window copies
  (:func:`driftjoin.metric.records.expand`) and :meth:`~driftjoin.metric.base.Strategy.route`
  gives each copy its workers and role. Rows carry the raw value (Arrow passes it through
  untouched) and each worker prepares its own rows again. One row per record is its *home* row
  (its first routed row, of its earliest window), which lists it once in the statistics should
  it be late. Heartbeats last (:mod:`driftjoin.spark.runtime.heartbeats`).
- **Worker** (:class:`SpaceProcessor`, one key per logical worker): plan check, the window clock
  (:mod:`driftjoin.clock`: every key derives the same frontier from the heartbeats), late
  records refused whole at every key (:meth:`driftjoin.windows.Windowing.late`), the copies
  sorted into one deterministic order and joined by ``worker.add_routed`` with the rows' payload
  (each new pair once; a user metric's calls, the router's carried in the rows and the worker's,
  go to the statistics as ``distance_calls``), then ``expire_before`` the first open window.

Why each pair comes out exactly once on Spark: the strategies' routers are functions of the copy
and the plan, so a copy reaches the same workers whichever task routes it, and each worker's
``add`` returns a pair exactly once over any split of the stream into batches (the module
docstrings of :mod:`driftjoin.metric.s3j`, :mod:`driftjoin.metric.passjoin` and
:mod:`driftjoin.metric.prefix`). The state a batch leaves is what the next batch of the same
key restores, through Spark's state store, which commits with the output; a replayed batch starts
from the state of the last commit.

State (:class:`~driftjoin.spark.runtime.state.ChunkedState` ``metric_worker``): one chunk per run
a batch added to the worker's :class:`~driftjoin.metric.store.RunStore`, grouped by window, under
the run's part id (:attr:`~driftjoin.metric.store.RunStore.added`); runs merge in memory only, so
a batch writes what it added and a process whose cached worker is a batch or two old (Spark gave
the key's previous tasks to another Python worker) keeps its runs whose parts are all still
listed and reads only the chunks written since; a closed window is dropped by group. S3J adds the workset centroids and the buffered outer
copies, one chunk per batch each (groups :data:`CENTROIDS`, :data:`BUFFER`), removed once every
centroid of a chunk is forgotten or every copy's window closed; the clock and S3J's next workset
id in the meta fields.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
import time
from dataclasses import asdict, dataclass, field
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from driftjoin.clock import WindowClock, tick_of, ticks
from driftjoin.metric.base import STATE_FORMAT, Strategy, WorkerJoin, WorkerStats
from driftjoin.metric.choose import USER_METRIC_REASON, build_strategy, choose, is_user_metric, sample_free
from driftjoin.metric.pivots import PivotStrategy
from driftjoin.metric.records import MetricPairs, MetricRecords, concat_values, expand, take_values
from driftjoin.metric.s3j import S3JStrategy, S3JWorker
from driftjoin.metric.spaces import JaccardSpace, Space, get_space
from driftjoin.metric.store import Run
from driftjoin.metric.tokens import TokenOrder
from driftjoin.metric.validate import check_kind, check_user_metric, reasons
from driftjoin.metric_names import SET, kind_of
from driftjoin.s3j.compute import Pairs
from driftjoin.spark.runtime.columns import require_column
from driftjoin.spark.runtime.heartbeats import split_heartbeats
from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.queries import AUTO
from driftjoin.spark.runtime.settings import ColumnTypeError, SettingError, core
from driftjoin.spark.runtime.stages import stateful_stage
from driftjoin.spark.runtime.state import ChunkedState, Chunks, Meta, dumps
from driftjoin.spark.runtime.stats import latency_histogram, write_stats
from driftjoin.spark.similarity.choice import write_choice
from driftjoin.spark.similarity.inputs import JoinInputs, vector_column
from driftjoin.spark.similarity.settings import SimilaritySettings
from driftjoin.spark.similarity.shape import (
    SimilarityPlan,
    dead_letters,
    open_rows,
    pair_frames,
    pair_schema,
    routed,
    window_clock,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa

log = logging.getLogger("driftjoin")

#: Rows of a static input (per side) that ``auto``, S3J's centroids and the token order are drawn from.
SAMPLE_ROWS = 2000

#: Values of the sample ``auto`` runs each strategy on: the estimate scales with the square of the
#: sample for S3J (every record against every centroid within 2t, and at Jaccard t >= 0.5 every
#: record is outer everywhere), and counted work extrapolates (``expected``), so a smaller sample
#: keeps the choice while the centroids and the token order still come from the whole sample.
ESTIMATE_ROWS = 1000

#: Chunk groups of S3J's centroids and outer buffer (windows are the other groups; no window
#: id comes near them: a Spark timestamp's ticks are above -2^56).
CENTROIDS = -(2**63)
BUFFER = -(2**63) + 1
_EXTRA = (CENTROIDS, BUFFER)


def _fingerprint(value: Any) -> str:
    """A short stable fingerprint of a picklable value (centroids, a token order)."""
    return hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()[:16]


@dataclass(frozen=True, kw_only=True)
class SpacePlan(SimilarityPlan):
    """Everything the metric-space operators need, fixed when the query is built (shipped by pickling)."""

    strategy: Strategy
    space: Space
    #: what the compared column holds: "string", "set", "vector" or "other"
    value_kind: str
    #: what ``algorithm="auto"`` decided on (statistics and the stored plan)
    choice: dict = field(default_factory=dict)

    @property
    def algorithm(self) -> str:
        return self.strategy.name

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        s = self.strategy
        order = self.space.order.tokens.tolist() if isinstance(self.space, JaccardSpace) else None
        return {**self.shared_settings(), "state_format": f"metric-{STATE_FORMAT}", "algorithm": s.name,
                "metric": self.space.name, "value_kind": self.value_kind,
                "centroids": (_fingerprint(s.centroids) if isinstance(s, S3JStrategy) else
                              _fingerprint(s.plan.signature()) if isinstance(s, PivotStrategy) else None),
                "token_order": None if order is None else f"{len(order)}:{_fingerprint(order)}"}


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

    The one test of the join (which keeps the valid rows) and its dead-letter output (which
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


def route_values(plan: SpacePlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Validate, prepare, expand into window copies and route each copy (module docstring); heartbeats last."""
    keys = np.asarray(plan.keys, dtype=np.int32)

    def route(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, float] | None:
        reason, values = classify_rows(plan.space, plan.value_kind, batch)
        rows = open_rows(batch, reason)
        if rows is None:
            return None
        prepared = plan.space.prepare([values[i] for i in rows.idx.tolist()])
        # ids: the rows' indices in the batch (the real ids travel as Arrow columns)
        copies = expand(MetricRecords.of(rows.idx, prepared, ticks(rows.basis), rows.side), plan.windows)
        routing = plan.strategy.route(copies)
        row = copies.id[routing.row]
        calls = np.zeros(len(row), np.int64) if routing.calls is None else routing.calls
        home = np.ones(len(row), dtype=bool)
        home[1:] = row[1:] != row[:-1]  # routing is grouped by copy, copies by record, earliest window first
        take = pa.array(row)
        return pa.RecordBatch.from_arrays(
            [pa.array(keys[routing.worker], pa.int32()), pa.array(routing.role, pa.int8()),
             pa.array(copies.side[routing.row], pa.int8()), batch.column("id").take(take), batch.column("value").take(take),
             batch.column("ingest").take(take).cast(pa.float64()), pa.array(copies.time[routing.row], pa.int64()),
             pa.array(copies.window[routing.row], pa.int64()), pa.array(copies.ghost[routing.row]), pa.array(home),
             _payload(routing.payload, len(row), schema.field("payload").type), pa.array(calls, pa.int64())],
            schema=schema,
        ), rows.top

    return routed(plan, batches, schema, route, {"value": None, "payload": None})


def _payload(payload: np.ndarray | None, n: int, kind: pa.DataType) -> pa.Array:
    """The routing's payload rows as an Arrow list column (nulls when the strategy has none)."""
    if payload is None:
        return pa.nulls(n, kind)
    width = payload.shape[1]
    offsets = pa.array(np.arange(0, n * width + 1, width, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(np.ascontiguousarray(payload, np.float64).ravel()), type=kind)


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


class SpaceProcessor(OperatorProcessor):
    """The join of one worker of a metric strategy (key = the worker's slot key; module docstring)."""

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "metric_worker")

    def _new(self, slot: int) -> _Worker:
        core = self.plan.strategy.worker(slot)
        core.store.keep_added = True
        return _Worker(core, window_clock(self.plan))

    def _rebuild(self, slot: int, meta: Meta, chunks: Chunks, stale: _Worker | None) -> _Worker:
        """The worker from its chunks; decoded runs and pieces of a stale cached worker are reused by id."""
        w = self._new(slot)
        w.clock.seen = meta.fields["clock"]
        w.sizes = dict(meta.fields["sizes"])
        known: dict[int, Any] = {}
        if stale is not None:
            for g in _EXTRA:
                known.update(stale.pieces[g])
        core = w.core
        for g in chunks.groups():
            if g in _EXTRA:
                w.pieces[g] = dict(chunks.read(g, known))
                continue
            kept, new = chunks.keep_stale(g, () if stale is None else stale.core.store.windows.get(g, ()),
                                         lambda r: r.parts)
            core.store.windows[g] = kept
            for c, arrays in new:
                core.store.put(g, Run.from_arrays(arrays, (c,)))
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
        router_calls = int(pdf["calls"].sum()) if "calls" in pdf and len(pdf) else 0
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
        payload = np.stack(pdf["payload"].to_numpy()) if len(rec) and pdf["payload"].iloc[0] is not None else None
        pairs = (core.add_routed(rec, pdf["role"].to_numpy(dtype=np.int8), payload) if len(rec)
                 else MetricPairs.empty(rec.id.dtype))
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
            if is_user_metric(plan.space):  # every call of the user's metric: the router's and this worker's
                stats["distance_calls"] = router_calls + core.stats.calls
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
        """Write what the batch added and remove what it forgot (module docstring)."""
        w.sizes.update(chunks.add_runs(w.core.store))
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
        w.sizes = chunks.listed(w.sizes)


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


def value_kind(dtype: T.DataType, metric: Any) -> str:
    """What a column of type ``dtype`` holds for ``metric``: ``"string"``, ``"set"`` (an array of
    strings, or of integers under Jaccard), ``"vector"`` (an array of numbers, an MLlib Vector) or
    ``"other"``."""
    if isinstance(dtype, T.StringType):
        return "string"
    if isinstance(dtype, T.UserDefinedType) and dtype.simpleString() == "vector":
        return "vector"
    if isinstance(dtype, T.ArrayType):
        element = dtype.elementType
        if isinstance(element, T.StringType):
            return "set"
        if isinstance(element, T.IntegralType) and kind_of(metric) == SET:
            return "set"
        if isinstance(element, T.NumericType):
            return "vector"
    return "other"


def takes_space_path(join: JoinInputs) -> bool:
    """Whether the join takes the metric-space path (module docstring)."""
    s = join.settings
    if s.on_space_path:
        return True
    return s.column in join.left.columns and value_kind(join.left.schema[s.column].dataType, s.metric) != "vector"


def _value_column(df: DataFrame, name: str, kind: str) -> Column:
    if kind == "vector":
        return vector_column(df, name)
    if kind == "set" and isinstance(df.schema[name].dataType.elementType, T.IntegralType):
        return F.col(name).cast("array<long>")
    return F.col(name)


def _kind(join: JoinInputs) -> str:
    """What the compared column holds, alike on both sides."""
    s, kinds = join.settings, set()
    for df in join.frames:
        require_column(df, s.column, s.column_setting)
        kinds.add(value_kind(df.schema[s.column].dataType, s.metric))
    if len(kinds) > 1:
        raise ColumnTypeError(s.column_setting, f"={s.column!r} holds {' and '.join(sorted(kinds))} values on the two "
                                                "sides: give both sides the same column type", show_value=False)
    return kinds.pop()


def _sample_values(frames: list[DataFrame], column: str, kind: str, space: Space, rows: int) -> list[Any]:
    """The valid values of the first ``rows`` rows of each frame (the router's own test)."""
    out: list[Any] = []
    for df in frames:
        got = df.select(_value_column(df, column, kind).alias("v")).limit(rows).collect()
        values = python_values(kind, [r["v"] for r in got])
        out += [v for v, why in zip(values, (space.reason(v) for v in values)) if why is None]
    return out


def _given_sample(sample: Any, column: str, kind: str, space: Space, metric: Any) -> list[Any] | None:
    """The valid values of ``sample=`` (None when none is given): a static DataFrame with the value
    column of the input's type (its first rows), or a list of values like the input's. Its form
    and its column's type are checked before its rows are read; a sample without one valid value
    is a mistake whatever the strategy."""
    if sample is None:
        return None
    if isinstance(sample, DataFrame):
        if sample.isStreaming:
            raise SettingError("sample", "= must be a static DataFrame or a list of values, not a stream",
                               show_value=False)
        if column not in sample.columns:
            raise SettingError("sample", f"= has no column {column!r} (value_col); columns are {sample.columns}",
                               show_value=False)
        holds = value_kind(sample.schema[column].dataType, metric)
        if holds != kind:
            raise SettingError("sample", f"= column {column!r} holds {holds} values, the input's hold {kind} values: "
                                         "give the sample the input's column type", show_value=False)
        values = _sample_values([sample], column, kind, space, 10 * SAMPLE_ROWS)
        given = "its first rows hold"
    elif isinstance(sample, (str, bytes, Mapping)) or not isinstance(sample, Iterable):
        raise SettingError("sample", f"= must be a static DataFrame with column {column!r} or a list of values like "
                                     f"the input's, got {type(sample).__name__!r}", show_value=False)
    else:
        given_values = python_values(kind, list(sample))
        values = [v for v in given_values if space.reason(v) is None]
        given = f"its {len(given_values)} values hold" if given_values else "it holds"
    if not values:
        what = "" if space.value_type == "any" else f"{space.value_type} "
        raise SettingError("sample", f"= has no value metric={space.name!r} can join ({given} none that is valid: "
                                     f"{what}values like the input's column {column!r}); pass such values, or drop "
                                     "sample=", show_value=False)
    return values


@dataclass(frozen=True)
class SpaceChoice:
    """What ``algorithm`` resolved to and the counted estimates it was chosen on
    (recorded like the vector path's choice: :func:`driftjoin.spark.similarity.choice.write_choice`)."""

    algorithm: str
    reason: str
    metric: str
    parallelism: int
    sample_rows: int = 0
    window_rows: int = 0
    estimates: tuple = ()

    def as_dict(self) -> dict:
        return {**asdict(self), "estimates": [asdict(e) for e in self.estimates]}


def space_plan(join: JoinInputs, sample: Any) -> SpacePlan:
    """The plan of a metric-space join (module docstring): every check runs before Spark runs a
    job (the column's type before the sample is drawn, the user metric's triangle test on it)."""
    s = join.settings
    if not s.on_space_path:  # the column sends a vector metric's join here: the settings this path refuses
        s.refuse_on_space_path()
    kind = _kind(join)
    space = s.distance if isinstance(s.distance, Space) else core("metric", lambda: get_space(s.distance.name))
    core("metric", lambda: check_kind(space, kind, s.column))
    column, parallelism, partitions = s.column, join.parallelism, join.partitions
    values = _given_sample(sample, column, kind, space, s.metric)
    if values is None and not join.streaming:
        values = _sample_values(join.frames, column, kind, space, SAMPLE_ROWS)
    if not values and sample_free(space) is None:
        if values is None:
            raise SettingError("sample", f"= is required for metric={space.name!r} on a stream (a static DataFrame "
                                         f"with column {column!r}, or a list of values): S3J draws its centroids "
                                         "from it and the triangle inequality of a user metric is checked on it "
                                         "before the start", show_value=False)
        raise SettingError("sample", f"= is required: the first rows of the input hold no valid value to draw S3J's "
                                     f"centroids from (column {column!r}; invalid_records() lists why each row "
                                     "cannot be joined): pass sample= values like the input's", show_value=False)
    measured = core("metric", lambda: check_user_metric(space, values or []))  # pivot filtering's plan reuses these
    if join.streaming:
        rows = None if values is None else len(values)
    else:  # the one window of a static input, counted once every check has passed
        rows = sum(df.count() for df in join.frames)
    if isinstance(space, JaccardSpace):
        space = JaccardSpace(TokenOrder.from_sample(values or []))
        if values is None:
            log.info("similarity_join: no sample= for metric='jaccard' on a stream: prefix filtering orders tokens "
                     "by hash (exact; a sample's frequencies would prune more)")
    prepared = space.prepare(values) if values else None  # an empty static input: no sample either
    name, estimates = _resolve(s, space, prepared, parallelism, rows)
    w = join.windows
    strategy = build_strategy(name, space, s.threshold, parallelism, self_join=join.self_join, windows=w.windows,
                              sample=prepared, seed=s.seed, expected=rows, measured=measured,
                              reproducible=join.streaming)
    reason = "; ".join(r for r in (_reason(s.algorithm, name, estimates, prepared), strategy.describe()) if r)
    choice = SpaceChoice(name, reason, space.name, strategy.n_workers,
                         0 if prepared is None else len(prepared), rows or 0, tuple(estimates))
    log.info("similarity_join algorithm=%s: %s", name, choice.reason)
    if join.metrics_dir and not join.metrics_dir.startswith(AUTO):
        write_choice(join.metrics_dir, choice)
    if strategy.n_workers < parallelism:  # S3J: fewer distinct sample values than workers
        partitions = min(partitions, strategy.n_workers)
    return SpacePlan(strategy=strategy, space=space, threshold=s.threshold, parallelism=strategy.n_workers,
                     self_join=join.self_join, windows=w.windows, value_kind=kind, metrics_dir=join.metrics_dir,
                     time_basis=w.time_basis, lateness=w.lateness, partitions=partitions,
                     transport="lean" if s.output == "pairs-lean" else "flat", choice=choice.as_dict())


def space_pairs(join: JoinInputs, plan: SpacePlan) -> DataFrame:
    """The raw pair DataFrame of the metric-space path (the columns of the vector paths' flat or
    lean pairs)."""
    data = join.rows(value=lambda df: _value_column(df, join.settings.column, plan.value_kind))
    routed_schema = T.StructType([
        T.StructField("key", T.IntegerType()), T.StructField("role", T.ByteType()), T.StructField("side", T.ByteType()),
        T.StructField("id", join.id_type), T.StructField("value", data.schema["value"].dataType),
        T.StructField("ingest", T.DoubleType()), T.StructField("time", T.LongType()),
        T.StructField("window", T.LongType()), T.StructField("ghost", T.BooleanType()),
        T.StructField("home", T.BooleanType()), T.StructField("payload", T.ArrayType(T.DoubleType())),
        T.StructField("calls", T.LongType()),
    ])
    routed_arrow = arrow_schema(routed_schema)
    rows = data.mapInArrow(lambda it: route_values(plan, it, routed_arrow), routed_schema)
    return stateful_stage(rows, "key", lambda: SpaceProcessor(plan), pair_schema(join.id_type, plan.transport),
                          partitions=plan.partitions or plan.parallelism)


def _resolve(s: SimilaritySettings, space: Space, prepared: Any, parallelism: int, rows: int | None) -> tuple[str, list]:
    """The strategy ``algorithm`` names (``auto``: the least counted work on the sample)."""
    algorithm = s.algorithm
    if algorithm != "auto":
        if algorithm in ("s3j", "pivots") and prepared is None:
            raise SettingError("sample", f"= is required for algorithm={algorithm!r} on a stream (its "
                                         f"{'centroids' if algorithm == 's3j' else 'pivots'} are values of a sample)",
                               show_value=False)
        return algorithm, []
    if prepared is None:  # a stream without a sample: the strategy that needs none
        return sample_free(space), []
    n = min(ESTIMATE_ROWS, len(prepared))
    return choose(space, s.threshold, take_values(prepared, np.arange(n)), n_workers=parallelism,
                  expected=rows if rows is not None else len(prepared), seed=s.seed)


def _reason(algorithm: str, name: str, estimates: list, prepared: Any) -> str:
    if algorithm != "auto":
        return f"algorithm={algorithm!r} given"
    if not estimates:
        return f"no sample: {name} needs none" if prepared is None else USER_METRIC_REASON
    work = ", ".join(f"{e.strategy} {e.work:.3g}" for e in estimates)
    return f"least estimated work on {min(ESTIMATE_ROWS, len(prepared))} sample values ({work})"


def space_dead_letters(join: JoinInputs) -> DataFrame:
    """The dead-letter rows of a metric-space join (``invalid_records`` on this path)."""
    s = join.settings
    kind = _kind(join)
    space = s.distance if isinstance(s.distance, Space) else core("metric", lambda: get_space(s.distance.name))
    core("metric", lambda: check_kind(space, kind, s.column))
    data = join.rows(with_raw=True, value=lambda df: _value_column(df, s.column, kind))
    return dead_letters(data, lambda batch: classify_rows(space, kind, batch)[0])
