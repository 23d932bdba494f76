"""The one shape of the three similarity paths: what S3J, the grid and the metric-space path share.

``similarity_join`` runs one of three paths (:mod:`~driftjoin.spark.similarity.s3j` and
:mod:`~driftjoin.spark.similarity.grid` on vectors, :mod:`~driftjoin.spark.similarity.spaces` on
strings, token sets and user metrics). Each is the same pipeline::

    inputs (JoinInputs) --mapInArrow(router)--> (worker key, record copy)   [stateless]
      --stateful_stage(worker)--> pairs (the frames of pair_frames)         [state per key]
    inputs (with raw rows) --mapInArrow(dead_letter_batches)--> side, id, raw, reason

and a path module fills in only what differs: its plan (a :class:`SimilarityPlan`: the settings
every path stores with the checkpoint, :meth:`SimilarityPlan.shared_settings`, plus its own), its
test of a row (a reason per row, None where it can be joined: :func:`classify_vectors` for both
vector paths), what its router does with the valid rows, and its worker. This module holds the
shared parts: the plan's common fields, the router's opening (:func:`open_rows`: the valid rows,
their sides and times) and ending (:func:`routed`: the heartbeats every key needs), the windows
of a record (:func:`window_copies`), the dead-letter output (one test shared with the router, so a
row is always in exactly one of the two), and the pairs' schema and frames.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from driftjoin.clock import WindowClock, batch_max, tick_of, ticks
from driftjoin.distance import METRICS, Metric
from driftjoin.s3j.records import Records, expand
from driftjoin.spark.runtime.heartbeats import HEARTBEAT, heartbeat_batch
from driftjoin.spark.runtime.plan_guard import PLAN_KEY, OperatorPlan
from driftjoin.spark.runtime.vectors import validate
from driftjoin.windows import INTERVAL, UNBOUNDED, Windowing

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa

#: Pairs per output DataFrame: bounds the Arrow buffers between the Python worker and the JVM.
OUTPUT_CHUNK = 200_000

#: How pairs leave the Python worker: ``"flat"``, one row per pair, or ``"grouped"``, one row
#: per left record with its partners in Arrow list arrays (``output="grouped"``, or exploded in
#: the JVM for ``output="pairs-grouped"``). Measured in bench/s3j_low_selectivity.py (2 x 4,000
#: records/s, 60 s, same machine load): Spark took 19.6 s (summed over workers) to take flat
#: frames against 161 s for grouped object arrays and 191 s for grouped Arrow list columns:
#: PySpark 4.3 converts list columns of a transformWithStateInPandas output element by element.
#: ``"lean"``: one row per pair without the provenance columns (``output="pairs-lean"``): half
#: the columns for Spark to take, the cost that bounds the S3J paper's setting on 2 cores.
TRANSPORTS = ("flat", "grouped", "lean")


@dataclass(frozen=True, kw_only=True)
class SimilarityPlan(OperatorPlan):
    """What every similarity path's plan holds (a path's plan adds its own fields), fixed when
    the query is built and shipped to the tasks by pickling."""

    operator = "similarity_join"

    threshold: float
    parallelism: int
    self_join: bool
    #: the windows of the join (:func:`driftjoin.spark.similarity.inputs.join_windows`)
    windows: Windowing
    metrics_dir: str | None
    #: what defines a record's window: "event" (time_col), "ingest" (ingest_col) or "batch"
    time_basis: str = "batch"
    #: how far behind the largest time of earlier batches a window may still take records (seconds)
    lateness: float = 0.0
    #: Spark state partitions the workers are placed on (round-robin); None: one per worker
    partitions: int | None = None
    #: how pairs leave the Python worker (:data:`TRANSPORTS`)
    transport: str = "flat"

    def shared_settings(self) -> dict[str, Any]:
        """The settings every path stores with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        return {"operator": self.operator, "threshold": self.threshold, "parallelism": self.parallelism,
                "partitions": self.partitions or self.parallelism, "self_join": self.self_join,
                **self.windows.settings(), "time_basis": self.time_basis, "lateness": self.lateness,
                "metrics_dir": self.metrics_dir}

    @property
    def lean(self) -> bool:
        """Pairs without the provenance columns (``output="pairs-lean"``)."""
        return self.transport == "lean"


@dataclass(frozen=True, kw_only=True)
class VectorPlan(SimilarityPlan):
    """The plan of a vector path (S3J, the grid): the vector metric and the dimension."""

    #: the name of the vector metric (:data:`driftjoin.distance.METRICS`)
    metric: str
    dim: int

    @property
    def distance(self) -> Metric:
        """The vector metric (``metric`` is a registry name, resolved when the settings were checked)."""
        return METRICS[self.metric]


# -- the router: opening and ending ------------------------------------------------------------


@dataclass(frozen=True)
class Opened:
    """The rows of an input batch the join can use: their indices in the batch, sides, ingestion
    times and window-deciding times (seconds), and the largest of those times."""

    idx: np.ndarray
    side: np.ndarray
    ingest: np.ndarray
    basis: np.ndarray

    @property
    def top(self) -> float:
        return batch_max(self.basis)


def open_rows(batch: pa.RecordBatch, reason: np.ndarray) -> Opened | None:
    """The rows of ``batch`` whose ``reason`` is None (None when there is none)."""
    idx = np.nonzero(reason == None)[0]  # noqa: E711
    if not len(idx):
        return None

    def column(name: str, dtype: Any) -> np.ndarray:
        return batch.column(name).to_numpy(zero_copy_only=False)[idx].astype(dtype)

    return Opened(idx, column("side", np.int8), column("ingest", np.float64), column("time", np.float64))


def routed(plan: Any, batches: Iterator[pa.RecordBatch], schema: pa.Schema,
           route: Callable[[pa.RecordBatch], tuple[pa.RecordBatch, float] | None],
           beat: dict[str, Any] | None = None) -> Iterator[pa.RecordBatch]:
    """A router's output: ``route`` of each input batch (the routed rows and the batch's largest
    window time, or None when it has no valid row), then one heartbeat row per worker key and
    the plan key carrying the largest time seen (:mod:`driftjoin.spark.runtime.heartbeats`;
    ``beat``: further values the heartbeats carry)."""
    seen = -np.inf
    for batch in batches:
        out = route(batch)
        if out is None:
            continue
        rows, top = out
        seen = max(seen, top)
        yield rows
    yield heartbeat_batch(schema, [*plan.keys, PLAN_KEY], {"side": HEARTBEAT, "ingest": seen, **(beat or {})})


def classify_vectors(metric: Metric, dim: int, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """Why each input row of a vector path cannot be joined (None where it can) and the valid
    rows' vectors.

    The one test shared by the routers (which keep the valid rows) and the dead-letter output
    (which reports the others), so a row is always exactly one of the two. ``time_reason`` comes
    from the JVM side (:func:`driftjoin.spark.runtime.columns.time_seconds`: a missing,
    unparsable or non-finite time); the id and the vector are checked here.
    """
    _, reason, mat = validate(batch.column("id"), batch.column("vector"), dim, metric.needs_nonzero, metric.bounded)
    time_reason = batch.column("time_reason").to_numpy(zero_copy_only=False)
    vector_ok = reason == None  # noqa: E711
    reason = np.where(vector_ok & (time_reason != None), time_reason, reason)  # noqa: E711
    return reason, mat[(reason == None)[vector_ok]]  # noqa: E711


# -- windows -------------------------------------------------------------------------------------


def window_clock(plan: Any) -> WindowClock:
    """A new clock of the plan's windows and lateness (any plan with ``windows`` and ``lateness``)."""
    return WindowClock(plan.windows, tick_of(plan.lateness))


def window_copies(plan: Any, rec: Records, basis: np.ndarray) -> Records:
    """The window copies of records whose window-deciding times are ``basis`` (seconds)."""
    rec.time = ticks(basis)
    return expand(rec, plan.windows)


def first_copies(plan: Any, rec: Records) -> np.ndarray:
    """Which copies are their record's copy of its earliest window (each record has one)."""
    return rec.window == plan.windows.first_window(rec.time)


def window_bounds_us(windows: Windowing) -> tuple[int, int] | None:
    """``(step, offset)`` so that window ``k`` starts at ``k * step + offset`` microseconds
    (ticks are microseconds; its end: plus the window length); None when pairs have no window to
    report (an unbounded join, or an interval join, whose buckets are an implementation detail)."""
    if windows.kind in (UNBOUNDED, INTERVAL):
        return None
    return windows.slide, windows.offset


def late_records(rec: Records, late: np.ndarray) -> list[dict[str, Any]]:
    """The late records as the statistics list them (``late`` marks one copy of each record)."""
    return [{"side": int(s), "id": i.item() if hasattr(i, "item") else i, "window": int(w), "ingest": float(t)}
            for s, i, w, t in zip(rec.side[late], rec.id[late], rec.window[late], rec.ingest[late])]


# -- the dead-letter output ------------------------------------------------------------------------


def dead_letter_batches(classify: Callable[[pa.RecordBatch], np.ndarray],
                        batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows a router drops, with the reason ``classify`` gives (the router's own test)."""
    for batch in batches:
        reason = classify(batch)
        bad = np.nonzero(reason != None)[0]  # noqa: E711
        if len(bad) == 0:
            continue
        take = pa.array(bad)
        yield pa.RecordBatch.from_arrays(
            [batch.column("side").take(take).cast(pa.int8()), batch.column("id").take(take),
             batch.column("raw").take(take), pa.array(reason[bad].tolist(), pa.string())],
            names=["side", "id", "raw", "reason"],
        )


def dead_letters(data: DataFrame, classify: Callable[[pa.RecordBatch], np.ndarray]) -> DataFrame:
    """The dead-letter output of normalised rows with their ``raw`` JSON: ``side, id, raw, reason``."""
    schema = T.StructType([
        T.StructField("side", T.ByteType()), T.StructField("id", data.schema["id"].dataType),
        T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType()),
    ])
    return data.mapInArrow(lambda it: dead_letter_batches(classify, it), schema)


# -- the pairs ----------------------------------------------------------------------------------------


def pair_schema(id_type: T.DataType, transport: str) -> T.StructType:
    """The rows a path's workers emit: one per pair (``flat``; ``lean``: ids, distance and window
    only), or one per left record and window with its partners in arrays (``grouped``, S3J)."""
    if transport == "grouped":
        return T.StructType([
            T.StructField("left_id", id_type), T.StructField("window", T.LongType()),
            T.StructField("emit_us", T.LongType()), T.StructField("worker", T.IntegerType()),
            T.StructField("right_ids", T.ArrayType(id_type)), T.StructField("distances", T.ArrayType(T.DoubleType())),
            T.StructField("ingest_us", T.ArrayType(T.LongType())), T.StructField("worksets", T.ArrayType(T.LongType())),
        ])
    return T.StructType([
        T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("distance", T.DoubleType()),
        T.StructField("window", T.LongType()),
        *([] if transport == "lean" else [
            T.StructField("ingest_us", T.LongType()), T.StructField("emit_us", T.LongType()),
            T.StructField("worker", T.IntegerType()), T.StructField("workset", T.LongType())]),
    ])


def pair_frames(pairs: Any, worker: int, emit: float, lean: bool = False) -> Iterator[pd.DataFrame]:
    """Joined pairs as output frames of plain numbers, one row per pair, in bounded chunks;
    ``lean``: ids, distance and window only (``output="pairs-lean"``).

    The JVM builds the timestamps (:func:`driftjoin.spark.similarity.api.pair_columns`) far
    faster than pandas would, and the frames are built without copying (``copy=False``: pandas
    would otherwise consolidate the int64 columns into one block, measured ~50 ns per pair to build
    and ~20 ns more for Spark to convert back to Arrow column by column).
    """
    emit_us = int(round(emit * 1e6))
    ingest_us = None if lean else np.round(pairs.ingest * 1e6).astype(np.int64)
    for lo in range(0, len(pairs), OUTPUT_CHUNK):
        part = slice(lo, lo + OUTPUT_CHUNK)
        frame = {
            "left_id": pairs.left_id[part],
            "right_id": pairs.right_id[part],
            "distance": pairs.distance[part],
            "window": pairs.window[part],
        }
        if ingest_us is not None:
            n = len(frame["left_id"])
            frame.update({
                "ingest_us": ingest_us[part],
                "emit_us": np.full(n, emit_us, dtype=np.int64),
                "worker": np.full(n, worker, dtype=np.int32),
                "workset": pairs.workset[part],
            })
        yield pd.DataFrame(frame, copy=False)
