"""The input columns of ``link``: what kind each rule column is, the rows the operators read, the windows.

:func:`column_kinds` reads the kinds of :mod:`driftjoin.linkage.rules` from the Spark types (a
string, an array of strings or integers, a vector, a number, a date, a timestamp, anything else),
so the rules are checked against the input before the start. :func:`normalise` brings each side
to ``side, id, <rule columns>, ingest, time, time_reason[, raw]``: numbers as doubles, dates as
days since 1970 (``unix_date``), timestamps as microseconds (``unix_micros``), vectors as
``array<double>``, token arrays as they are, other atomic values as strings.
:func:`link_windows` turns the window settings into the link's :class:`~driftjoin.windows.Windowing`,
what time decides a record's window and how late a record may arrive (the conventions of
``similarity_join``).
"""

from __future__ import annotations

from dataclasses import dataclass

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.spark.runtime.columns import time_seconds
from driftjoin.spark.runtime.settings import SettingError
from driftjoin.windows import TICKS_PER_SECOND, UNBOUNDED, Windowing


def spark_kind(dtype: T.DataType) -> str:
    """The rule kind of a Spark column type (:data:`driftjoin.linkage.rules.KINDS`)."""
    if isinstance(dtype, T.StringType):
        return "string"
    if isinstance(dtype, T.UserDefinedType) and dtype.simpleString() == "vector":
        return "vector"
    if isinstance(dtype, T.ArrayType):
        e = dtype.elementType
        if isinstance(e, T.StringType):
            return "set"
        if isinstance(e, T.IntegralType):
            return "ints"
        if isinstance(e, T.NumericType):
            return "vector"
        return "other-array"
    if isinstance(dtype, T.NumericType):
        return "number"
    if isinstance(dtype, T.DateType):
        return "date"
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType)):
        return "timestamp"
    return "other"


def column_kinds(left: DataFrame, right: DataFrame | None, columns: list[str]) -> dict[str, str]:
    """The kind of every column, the same on both sides, or a :class:`SettingError`."""
    out: dict[str, str] = {}
    for name, df in (("left", left), ("right", right)):
        if df is None:
            continue
        for c in columns:
            if c not in df.columns:
                continue
            kind = spark_kind(df.schema[c].dataType)
            if kind == "other-array":
                raise SettingError(f"column {c!r}", f"has type {df.schema[c].dataType.simpleString()}: rules compare "
                                                   "arrays of strings or numbers, not arrays of other values",
                                   show_value=False)
            if c in out and out[c] != kind:
                raise SettingError(f"column {c!r}", f"has another type on the {name} input "
                                                   f"({df.schema[c].dataType.simpleString()}): give both inputs the same "
                                                   "column types", show_value=False)
            out[c] = kind
    if right is not None:
        for c in columns:
            if (c in left.columns) != (c in right.columns):
                side = "right" if c in left.columns else "left"
                raise SettingError(f"column {c!r}", f"is missing from the {side} input: both inputs need every column "
                                                   "the rules read", show_value=False)
    return out


def _value(df: DataFrame, name: str, kind: str) -> Column:
    col = F.col(name)
    if kind == "number":
        return col.cast("double")
    if kind == "date":
        return F.unix_date(col).cast("long")
    if kind == "timestamp":
        return F.unix_micros(col.cast("timestamp"))
    if kind == "vector":
        dtype = df.schema[name].dataType
        if isinstance(dtype, T.UserDefinedType):
            from pyspark.ml.functions import vector_to_array

            return F.when(col.isNotNull(), vector_to_array(col, "float64"))
        return col.cast("array<double>")
    if kind == "ints":
        return col.cast("array<long>")
    if kind == "other":
        return col.cast("string")
    return col


def normalise(df: DataFrame, side: int, id_col: str, id_type: T.DataType, kinds: dict[str, str],
              ingest_col: str | None, time_col: str | None, with_raw: bool) -> DataFrame:
    """``side, id, <columns>, ingest, time, time_reason[, raw]`` (module docstring); ``ingest``
    and ``time`` in epoch seconds, ``time_reason`` why a row has no usable time."""
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
    cols = [F.lit(side).cast("byte").alias("side"), F.col(id_col).cast(id_type).alias("id"),
            *[_value(df, c, k).alias(c) for c, k in kinds.items()],
            ingest.alias("ingest"), basis.alias("time"),
            (F.coalesce(*reasons) if reasons else F.lit(None)).cast("string").alias("time_reason")]
    if with_raw:
        cols.append(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("raw"))
    return df.select(*cols)


@dataclass(frozen=True)
class LinkWindows:
    """The windows of a link, what time decides them (``"event"``, ``"ingest"``, ``"batch"``)
    and how far behind the largest time of earlier micro-batches a window still takes records."""

    windows: Windowing
    time_basis: str
    lateness: float


def link_windows(left: DataFrame, right: DataFrame | None, windows: Windowing, *, time_col: str | None,
                 ingest_col: str | None, watermark: float | None) -> LinkWindows:
    """The windows of a link from its checked settings (``watermark`` in seconds), with the
    conventions of ``similarity_join``: a static input without ``time_col`` is one window; event
    time on a stream needs a watermark unless the input declares one (``withWatermark``);
    ``ingest_col`` allows one window of lateness by default."""
    if not left.isStreaming and time_col is None:
        windows = Windowing.unbounded()
    column = time_col or ingest_col
    if column is None:
        return LinkWindows(windows, "batch", 0.0)
    inputs = [d for d in (left, right) if d is not None]
    delays = {df.schema[column].metadata.get("spark.watermarkDelayMs") for df in inputs if column in df.columns}
    delays.discard(None)
    if len(delays) > 1:
        raise SettingError("watermark", f"the inputs carry different watermarks on {column!r}: give both the same delay",
                           show_value=False)
    declared = delays.pop() / 1000.0 if delays else None
    if watermark is not None:
        if declared is not None and declared != watermark:
            raise SettingError("watermark", f"differs from the input's own watermark of {declared:g} seconds on "
                                            f"{column!r} (withWatermark): drop watermark= or give the same delay", watermark)
        lateness = watermark
    elif declared is not None:
        lateness = declared
    elif time_col is not None:
        if left.isStreaming:
            raise SettingError("watermark", "is required for event-time windows on a stream (how late a record may "
                                            "arrive), e.g. watermark='10 seconds'", show_value=False)
        lateness = 0.0
    else:
        lateness = 0.0 if windows.kind == UNBOUNDED else windows.length / TICKS_PER_SECOND
    return LinkWindows(windows, "event" if time_col else "ingest", lateness)
