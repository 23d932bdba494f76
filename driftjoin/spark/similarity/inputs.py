"""The input columns of ``similarity_join`` and the settings read from them.

Both sides are brought to the columns the operators read (:func:`normalise`: ``side, id,
vector, ingest, time, time_reason[, raw]``); a vector column may be ``array<double>``,
``array<float>`` or an MLlib ``Vector``. A static input without ``dim=`` takes the most common
vector length (:func:`infer_dim`); :func:`join_windows` turns the window settings into the join's
:class:`~driftjoin.windows.Windowing`, what decides a record's windows and how late a record may
arrive.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.durations import parse_duration
from driftjoin.spark.runtime.columns import time_seconds
from driftjoin.spark.similarity.settings import DEFAULT_WINDOW
from driftjoin.windows import TICKS_PER_SECOND, UNBOUNDED, Windowing, windowing

log = logging.getLogger("driftjoin.spark.similarity")


def vector_column(df: DataFrame, name: str, float32: bool = False) -> Column:
    if name not in df.columns:
        raise ValueError(f"vector_col={name!r} is not a column of the input; columns are {df.columns}")
    dtype = df.schema[name].dataType
    if isinstance(dtype, T.UserDefinedType) and dtype.simpleString() == "vector":
        from pyspark.ml.functions import vector_to_array

        # vector_to_array fails on a null Vector: a missing vector is a dead letter, not an error
        return F.when(F.col(name).isNotNull(), vector_to_array(F.col(name), "float64"))
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.NumericType):
        return F.col(name).cast("array<float>" if float32 else "array<double>")
    raise TypeError(f"vector_col={name!r} has type {dtype.simpleString()}; use array<double>, array<float> or an MLlib Vector")


def normalise(df: DataFrame, side: int, id_col: str, vector_col: str, id_type: T.DataType,
               ingest_col: str | None, time_col: str | None, with_raw: bool, float32: bool = False,
               value: Column | None = None) -> DataFrame:
    """``side, id, vector, ingest, time, time_reason[, raw]``: the columns the operators read.

    ``ingest`` (epoch seconds) is the ingestion time (``ingest_col``, else the micro-batch
    time); ``time`` is the time that decides the window: ``time_col`` (event time) if given,
    else the ingestion time. ``time_reason`` says why a row has no usable time (null if it has).
    ``value``: the metric joins' compared column (strings, token sets, any value), given as
    ``value`` instead of ``vector``.
    """
    reasons = []
    if ingest_col:
        ingest, why = time_seconds(df, ingest_col, "ingest_col")
        reasons.append(why)
    else:
        ingest = F.unix_micros(F.current_timestamp()) / F.lit(1e6)
    basis = ingest
    if time_col:
        basis, why = time_seconds(df, time_col, "time_col")
        reasons.append(why)
    cols = [
        F.lit(side).cast("byte").alias("side"),
        F.col(id_col).cast(id_type).alias("id"),
        vector_column(df, vector_col, float32).alias("vector") if value is None else value.alias("value"),
        ingest.alias("ingest"),
        basis.alias("time"),
        (F.coalesce(*reasons) if reasons else F.lit(None)).cast("string").alias("time_reason"),
    ]
    if with_raw:
        cols.append(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("raw"))
    return df.select(*cols)


def infer_dim(inputs: list[DataFrame], vector_col: str) -> int:
    """The vector length most rows of a static input have (a malformed first row cannot decide it).

    An input with no non-empty vector (no rows at all, or none that can be joined) joins
    nothing whatever the dimension: it is taken as 1, so an empty input gives an empty result,
    and its rows are dead letters for their own reasons."""
    sizes = None
    for df in inputs:
        part = df.select(F.size(vector_column(df, vector_col)).alias("n"))
        sizes = part if sizes is None else sizes.unionByName(part)
    top = sizes.where(F.col("n") > 0).groupBy("n").count().orderBy(F.col("count").desc(), F.col("n")).limit(2).collect()
    if not top:
        log.info("similarity_join: the input has no non-empty vector, so no pairs; dim=1 assumed")
        return 1
    if len(top) == 2 and top[0]["count"] == top[1]["count"]:
        raise ValueError(f"cannot infer dim: vectors of length {top[0]['n']} and {top[1]['n']} are equally "
                         "common; pass dim= (rows of the other length become dead letters)")
    log.info("similarity_join: dim=%d inferred from the input (the most common vector length)", top[0]["n"])
    return int(top[0]["n"])


def declared_watermark(inputs: list[DataFrame], column: str) -> float | None:
    """The delay (seconds) of a watermark the inputs already carry on ``column`` (``withWatermark``)."""
    delays = {df.schema[column].metadata.get("spark.watermarkDelayMs") for df in inputs if column in df.columns}
    delays.discard(None)
    if len(delays) > 1:
        raise ValueError(f"the inputs carry different watermarks on {column!r} ({sorted(delays)} ms); give both the same delay")
    return delays.pop() / 1000.0 if delays else None




@dataclass(frozen=True)
class JoinWindows:
    """The windows of a join: which windows a record belongs to (``windows``), what time decides it
    (``time_basis``: ``"event"`` for ``time_col``, ``"ingest"`` for ``ingest_col``, ``"batch"``
    for the micro-batch time) and how far behind the largest time of earlier micro-batches a
    window still takes records (``lateness``, seconds)."""

    windows: Windowing
    time_basis: str
    lateness: float


def join_windows(left: DataFrame, right: DataFrame | None = None, *, window: str | float | None = DEFAULT_WINDOW,
                 slide: str | float | None = None, within: str | float | None = None, time_col: str | None = None,
                 ingest_col: str | None = None, watermark: str | float | None = None) -> JoinWindows:
    """The windows of a similarity join from its settings; fails before the start with what to change.

    Parameters
    ----------
    left, right : the inputs (``right=None``: a self-join); their streaming-ness and their
        declared watermarks (``withWatermark``) count.
    window : tumbling window length (with ``slide``: sliding); None: one unbounded window.
    slide : the slide of sliding windows (Spark's ``window()`` convention), at most ``window``.
    within : an interval join: pairs whose times differ by at most this much, each once.
    time_col, ingest_col : the event-time column, or a column of ingestion times; neither: the
        micro-batch time.
    watermark : how late a record may be (event time: required on a stream unless the input
        carries a watermark; ``ingest_col``: default one window, or one bucket of ``within``).

    A static input without ``time_col`` is one unbounded window (its rows share one time).

    Example::

        >>> jw = join_windows(spark.range(1), window="1 minute", slide="20 seconds")  # doctest: +SKIP
        >>> jw.windows.kind, jw.time_basis  # doctest: +SKIP
        ('sliding', 'batch')
    """
    if within is not None and window is DEFAULT_WINDOW:
        window = None
    windows = windowing(window, slide, within)
    if not left.isStreaming and time_col is None:
        windows = Windowing.unbounded()
    column = time_col or ingest_col
    if column is None:
        if watermark is not None:
            raise ValueError("watermark= needs time_col= (an event-time column) or ingest_col=")
        return JoinWindows(windows, "batch", 0.0)
    inputs = [d for d in (left, right) if d is not None]
    declared = declared_watermark(inputs, column)
    if watermark is not None:
        lateness = parse_duration(watermark, "watermark", allow_zero=True)
        if declared is not None and declared != lateness:
            raise ValueError(f"the input already has a watermark of {declared:g} seconds on {column!r} (withWatermark), "
                             f"but watermark={watermark!r}: drop watermark= to use the input's, or give the same delay")
    elif declared is not None:
        lateness = declared
    elif time_col is not None:
        if left.isStreaming:
            raise ValueError("event-time windows on a stream need watermark= (how late a record may arrive), e.g. watermark='10 seconds'")
        lateness = 0.0
    else:
        lateness = 0.0 if windows.kind == UNBOUNDED else windows.length / TICKS_PER_SECOND
    return JoinWindows(windows, "event" if time_col else "ingest", lateness)
