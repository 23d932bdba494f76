"""The inputs of ``similarity_join``, and what they decide together with its checked settings.

:class:`JoinInputs` is what every similarity path starts from: the two inputs, the checked
settings (:class:`~driftjoin.spark.similarity.settings.SimilaritySettings`) and what the inputs
decide with them, checked before any Spark job runs: whether the join is a stream (both inputs
alike), the time columns, the windows (:func:`join_windows`: what decides a record's windows and
how late a record may arrive), the type the ids are read as, the workers and the Spark partitions
they are placed on. :meth:`JoinInputs.rows` brings both sides to the columns the routers read
(``side, id, vector | value, ingest, time, time_reason[, raw]``); a vector column may be
``array<double>``, ``array<float>`` or an MLlib ``Vector``. A static input without ``dim=`` takes
the most common vector length (:func:`infer_dim`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.spark.runtime.columns import check_time_column, common_id_type, require_column, time_seconds
from driftjoin.spark.runtime.session import prepare_session, worker_placement
from driftjoin.spark.runtime.settings import ColumnTypeError, SettingError
from driftjoin.spark.runtime.stages import inputs_streaming
from driftjoin.spark.similarity.settings import SimilaritySettings
from driftjoin.windows import TICKS_PER_SECOND, UNBOUNDED, Windowing

log = logging.getLogger("driftjoin.spark.similarity")


def vector_column(df: DataFrame, name: str, float32: bool = False, setting: str = "vector_col") -> Column:
    """The vectors of column ``name`` as ``array<double>`` (``float32``: ``array<float>``)."""
    require_column(df, name, setting)
    dtype = df.schema[name].dataType
    if isinstance(dtype, T.UserDefinedType) and dtype.simpleString() == "vector":
        from pyspark.ml.functions import vector_to_array

        # vector_to_array fails on a null Vector: a missing vector is a dead letter, not an error
        return F.when(F.col(name).isNotNull(), vector_to_array(F.col(name), "float64"))
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.NumericType):
        return F.col(name).cast("array<float>" if float32 else "array<double>")
    raise ColumnTypeError(setting, f"={name!r} has type {dtype.simpleString()}; use array<double>, array<float> or "
                                   "an MLlib Vector", show_value=False)


def _normalise(df: DataFrame, side: int, join: JoinInputs, compared: tuple[str, Column], with_raw: bool) -> DataFrame:
    """``side, id, <compared>, ingest, time, time_reason[, raw]``: the columns the routers read
    (``compared``: the name and column of the compared values, ``vector`` or ``value``).

    ``ingest`` (epoch seconds) is the ingestion time (``ingest_col``, else the micro-batch
    time); ``time`` is the time that decides the window: ``time_col`` (event time) if given,
    else the ingestion time. ``time_reason`` says why a row has no usable time (null if it has).
    """
    s = join.settings
    reasons = []
    if s.ingest_col:
        ingest, why = time_seconds(df, s.ingest_col, "ingest_col")
        reasons.append(why)
    else:
        ingest = F.unix_micros(F.current_timestamp()) / F.lit(1e6)
    basis = ingest
    if s.time_col:
        basis, why = time_seconds(df, s.time_col, "time_col")
        reasons.append(why)
    cols = [
        F.lit(side).cast("byte").alias("side"),
        F.col(s.id_col).cast(join.id_type).alias("id"),
        compared[1].alias(compared[0]),
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
        raise SettingError("dim", f"is required here: vectors of length {top[0]['n']} and {top[1]['n']} are equally "
                                  "common, so it cannot be inferred (rows of the other length become dead letters)",
                           show_value=False)
    log.info("similarity_join: dim=%d inferred from the input (the most common vector length)", top[0]["n"])
    return int(top[0]["n"])


def declared_watermark(inputs: list[DataFrame], column: str) -> float | None:
    """The delay (seconds) of a watermark the inputs already carry on ``column`` (``withWatermark``)."""
    delays = {df.schema[column].metadata.get("spark.watermarkDelayMs") for df in inputs if column in df.columns}
    delays.discard(None)
    if len(delays) > 1:
        raise SettingError("watermark", f"differs between the inputs: they carry watermarks of {sorted(delays)} ms on "
                                        f"{column!r} (withWatermark); give both the same delay", show_value=False)
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


def join_windows(left: DataFrame, right: DataFrame | None, settings: SimilaritySettings) -> JoinWindows:
    """The windows of a similarity join from its checked ``settings`` (their windows and watermark,
    parsed once) and its inputs; fails before the start with what to change.

    The inputs count through their streaming-ness and their declared watermarks
    (``withWatermark``): a static input without ``time_col`` is one unbounded window (its rows
    share one time); an event-time stream needs a watermark, given or declared; ``ingest_col``
    without one waits one window (or one bucket of ``within``).

    Example::

        >>> jw = join_windows(spark.range(1), None, SimilaritySettings.check({"threshold": 0.1, "slide": "20 seconds"}))  # doctest: +SKIP
        >>> jw.windows.kind, jw.time_basis  # doctest: +SKIP
        ('unbounded', 'batch')
    """
    s = settings
    windows = s.windows
    if not left.isStreaming and s.time_col is None:
        windows = Windowing.unbounded()
    column = s.time_col or s.ingest_col
    if column is None:
        return JoinWindows(windows, "batch", 0.0)
    inputs = [d for d in (left, right) if d is not None]
    declared = declared_watermark(inputs, column)
    if s.lateness is not None:
        lateness = s.lateness
        if declared is not None and declared != lateness:
            raise SettingError("watermark", f"={s.watermark!r} differs: the input already has a watermark of "
                                            f"{declared:g} seconds on {column!r} (withWatermark); drop watermark= to "
                                            "use the input's, or give the same delay", show_value=False)
    elif declared is not None:
        lateness = declared
    elif s.time_col is not None:
        if left.isStreaming:
            raise SettingError("watermark", "is required for event-time windows on a stream (how late a record may "
                                            "arrive), e.g. watermark='10 seconds'", show_value=False)
        lateness = 0.0
    else:
        lateness = 0.0 if windows.kind == UNBOUNDED else windows.length / TICKS_PER_SECOND
    return JoinWindows(windows, "event" if s.time_col else "ingest", lateness)


@dataclass(frozen=True)
class JoinInputs:
    """A similarity join's inputs, its checked settings and what they decide together (module
    docstring); every path is built from it."""

    left: DataFrame
    right: DataFrame | None
    settings: SimilaritySettings
    streaming: bool
    #: the type both sides' ids are read as (:func:`driftjoin.spark.runtime.columns.common_id_type`)
    id_type: T.DataType
    #: None in the inputs of the dead-letter output (it joins nothing)
    windows: JoinWindows | None = None
    parallelism: int = 1
    partitions: int = 1
    #: where statistics go (a default one inside the checkpoint for a balanced stream: :meth:`prepared`)
    metrics_dir: str | None = None

    @classmethod
    def of(cls, left: DataFrame, right: DataFrame | None, settings: SimilaritySettings, *,
           joining: bool = True) -> JoinInputs:
        """Check the inputs against ``settings`` (before any job: a :class:`SettingError` naming the
        setting); ``joining=False`` for the dead-letter output, which needs no windows and no workers."""
        s = settings
        streaming = inputs_streaming(left, right)
        for df in (left, right):
            for name, what in ((s.ingest_col, "ingest_col"), (s.time_col, "time_col")):
                if df is not None and name is not None:
                    check_time_column(df, name, what)
        id_type = common_id_type(left, right, s.id_col)
        if not joining:
            return cls(left, right, s, streaming, id_type, metrics_dir=s.metrics_dir)
        if s.balance != "none" and not streaming:
            raise SettingError("balance", "applies to streaming joins; a static join runs once", show_value=False)
        windows = join_windows(left, right, s)
        parallelism, partitions = worker_placement(left.sparkSession, s.parallelism, s.partitions)
        return cls(left, right, s, streaming, id_type, windows, parallelism, partitions, s.metrics_dir)

    def prepared(self, *, need_metrics: bool = False) -> JoinInputs:
        """The inputs once the session is prepared for the join
        (:func:`~driftjoin.spark.runtime.session.prepare_session`; ``need_metrics``: a default
        ``metrics_dir`` when none is given)."""
        metrics_dir = prepare_session(self.left.sparkSession, self.settings.metrics_dir, need_metrics=need_metrics)
        return replace(self, metrics_dir=metrics_dir)

    @property
    def frames(self) -> list[DataFrame]:
        """The inputs (one for a self-join)."""
        return [df for df in (self.left, self.right) if df is not None]

    @property
    def self_join(self) -> bool:
        return self.right is None

    def rows(self, *, with_raw: bool = False, value: Callable[[DataFrame], Column] | None = None,
             float32: bool = False) -> DataFrame:
        """Both sides' rows as the routers read them (:func:`_normalise`), one DataFrame: the
        vectors of the compared column (``float32``: as ``array<float>``), or ``value(df)``."""
        s = self.settings

        def compared(df: DataFrame) -> tuple[str, Column]:
            if value is not None:
                return "value", value(df)
            return "vector", vector_column(df, s.column, float32, s.column_setting)

        frames = [_normalise(df, side, self, compared(df), with_raw) for side, df in enumerate(self.frames)]
        return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
