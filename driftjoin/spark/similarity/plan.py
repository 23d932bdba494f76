"""What the similarity join's operators share: the plan, a record's window, the input test, the
output frames.

The S3J operators (:mod:`~driftjoin.spark.similarity.s3j`) and the grid
(:mod:`~driftjoin.spark.similarity.grid`) read the same input rows with the same test
(:func:`classify`), give each record its window copies the same way (:func:`window_copies`:
:mod:`driftjoin.windows` on the plan's :class:`~driftjoin.windows.Windowing`) and emit pairs in
the same frames (:func:`pair_frames`), so ``similarity_join`` has one output schema and one
dead-letter output whichever algorithm runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import types as T

from driftjoin.clock import WindowClock, tick_of, ticks
from driftjoin.distance import get_metric
from driftjoin.s3j.records import Records, expand
from driftjoin.spark.runtime.plan_guard import OperatorPlan, digest
from driftjoin.spark.runtime.vectors import validate
from driftjoin.windows import INTERVAL, UNBOUNDED, Windowing

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


#: Version of the operators' state (stored with the plan: a checkpoint written with another is refused).
STATE_FORMAT = 4


@dataclass(frozen=True)
class S3JPlan(OperatorPlan):
    """Everything the operators need, fixed when the query is built (shipped by pickling)."""

    operator = "similarity_join"

    metric: str
    threshold: float
    dim: int
    parallelism: int
    centroids: np.ndarray
    self_join: bool
    #: the windows of the join (:func:`driftjoin.spark.similarity.inputs.join_windows`)
    windows: Windowing
    metrics_dir: str | None
    algorithm: str = "s3j"
    #: what defines a record's window: "event" (time_col), "ingest" (ingest_col) or "batch"
    time_basis: str = "batch"
    #: how far behind the largest time of earlier batches a window may still take records (seconds)
    lateness: float = 0.0
    #: Spark state partitions the workers are placed on (round-robin); None: one per worker
    partitions: int | None = None
    #: worksets may move between workers (live balancing): formulation and computation then
    #: run as two stateful stages; otherwise every workset stays on the worker of the space
    #: partition that created it and both run in one stage (:class:`FusedProcessor`)
    balanced: bool = False
    #: how pairs leave the Python worker (:data:`TRANSPORTS`)
    transport: str = "flat"

    @property
    def fused(self) -> bool:
        return self.algorithm == "s3j" and not self.balanced

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        return {"operator": "similarity_join", "state_format": STATE_FORMAT, "algorithm": self.algorithm,
                "metric": self.metric, "threshold": self.threshold, "dim": self.dim,
                "parallelism": self.parallelism, "partitions": self.partitions or self.parallelism,
                "stages": 1 if self.fused else 2, "transport": self.transport, "centroids": digest(self.centroids),
                "self_join": self.self_join, **self.windows.settings(), "time_basis": self.time_basis,
                "lateness": self.lateness, "metrics_dir": self.metrics_dir}


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


def classify(plan: S3JPlan, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """Why each input row cannot be joined (None where it can) and the valid rows' vectors.

    The one test shared by the join (which keeps the valid rows) and :func:`dead_letter_batches`
    (which reports the others), so a row is always exactly one of the two. ``time_reason`` comes
    from the JVM side (:func:`driftjoin.spark.runtime.columns.time_seconds`: a missing, unparsable or
    non-finite time); the id and the vector are checked here.
    """
    metric = get_metric(plan.metric)
    _, reason, mat = validate(batch.column("id"), batch.column("vector"), plan.dim, metric.needs_nonzero, metric.bounded)
    time_reason = batch.column("time_reason").to_numpy(zero_copy_only=False)
    vector_ok = reason == None  # noqa: E711
    reason = np.where(vector_ok & (time_reason != None), time_reason, reason)  # noqa: E711
    return reason, mat[(reason == None)[vector_ok]]  # noqa: E711


def late_records(rec: Records, late: np.ndarray) -> list[dict[str, Any]]:
    """The late records as the statistics list them (``late`` marks one copy of each record)."""
    return [{"side": int(s), "id": i.item() if hasattr(i, "item") else i, "window": int(w), "ingest": float(t)}
            for s, i, w, t in zip(rec.side[late], rec.id[late], rec.window[late], rec.ingest[late])]


def pair_frames(pairs: Any, worker: int, emit: float, lean: bool = False) -> Iterator[pd.DataFrame]:
    """Joined pairs as output frames of plain numbers, one row per pair, in bounded chunks;
    ``lean``: ids, distance and window only (``output="pairs-lean"``).

    The JVM builds the timestamps (see ``similarity_join``) far faster than pandas would, and
    the frames are built without copying (``copy=False``: pandas would otherwise consolidate the
    int64 columns into one block, measured ~50 ns per pair to build and ~20 ns more for Spark to
    convert back to Arrow column by column).
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


def member_schema(id_type: T.DataType) -> T.StructType:
    """The rows from the formulation to the computation (and from the stateless ClusterJoin and
    brute-force routers): one workset membership of a window copy each. ``time`` (ticks) and
    ``ghost`` hold the copy's time and ghost flag where the computation reads them (an interval
    join's pairs, the late test after a stateless router), else 0 and false."""
    return T.StructType([
        T.StructField("wkey", T.IntegerType()), T.StructField("workset", T.LongType()), T.StructField("role", T.ByteType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("vec", T.BinaryType()),
        T.StructField("ingest", T.DoubleType()), T.StructField("window", T.LongType()),
        T.StructField("time", T.LongType()), T.StructField("ghost", T.BooleanType()),
        T.StructField("store", T.BooleanType()),
    ])
