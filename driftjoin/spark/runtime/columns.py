"""Input columns read the same way by every operator: ids, and times as epoch seconds with a reason when not.

Ids (:func:`common_id_type`): integer id columns are read as ``long``, string ones as ``string`` (and
integers beside strings as strings), on both sides alike, so the two sides' ids compare and a
pair's ids share one type. Other types (double, decimal, timestamp...) are refused: read as
strings they would come out as text such as ``'0.0'`` or ``'2024-01-01 00:00:00'``.

A time column may be a timestamp, a date, a number of seconds or a string Spark can parse as a
timestamp. Every row gets its time as a double and, when it has none, the reason as a string:
missing (null), unparsable (a string such as ``"yesterday"``), or not a point in time (NaN,
infinite, or beyond year 300,000). Parsing uses ``try_cast``, so a bad value becomes a
dead-letter row instead of failing the query with ``CAST_INVALID_INPUT`` under ANSI mode, and
the join and its dead-letter output test the same column, so a row is always in exactly one of
them.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.spark.runtime.settings import ColumnTypeError, SettingError

#: Seconds beyond which a time is refused (about year 318,000; Spark's timestamps end near 294,000).
MAX_SECONDS = 1e13

_TIMESTAMPS = (T.TimestampType, T.TimestampNTZType, T.DateType)


def require_column(df: DataFrame, name: str, setting: str, side: str = "") -> None:
    """Fail before the start (:class:`SettingError` naming ``setting``) if ``df`` has no column ``name``."""
    if name not in df.columns:
        raise SettingError(setting, f"={name!r} is not a column of the {side + ' ' if side else ''}input; columns are "
                                    f"{df.columns}", show_value=False)


def check_time_column(df: DataFrame, name: str, what: str) -> None:
    """Fail before the start if ``name`` is missing or cannot hold times."""
    require_column(df, name, what)
    dtype = df.schema[name].dataType
    if not isinstance(dtype, (*_TIMESTAMPS, T.NumericType, T.StringType)):
        raise ColumnTypeError(what, f"={name!r} has type {dtype.simpleString()}; use a timestamp, date, number of "
                                    "seconds, or string timestamp column", show_value=False)


def time_seconds(df: DataFrame, name: str, what: str) -> tuple[Column, Column]:
    """``(seconds, reason)`` of column ``name``: seconds as a double, reason null when it is valid."""
    check_time_column(df, name, what)
    dtype = df.schema[name].dataType
    raw = F.col(name)
    if isinstance(dtype, T.NumericType):
        seconds = raw.cast("double")
    else:
        parsed = raw.try_cast("timestamp") if isinstance(dtype, T.StringType) else raw.cast("timestamp")
        seconds = F.unix_micros(parsed) / F.lit(1e6)
    reason = (F.when(raw.isNull(), F.lit(f"missing time ({name})"))
              .when(seconds.isNull(), F.concat(F.lit(f"unparsable time ({name}): "), raw.cast("string")))
              .when(F.isnan(seconds) | (F.abs(seconds) > F.lit(MAX_SECONDS)),
                    F.concat(F.lit(f"time ({name}) is not a point in time: "), raw.cast("string"))))
    return F.when(reason.isNull(), seconds), reason


def common_id_type(left: DataFrame, right: DataFrame | None, id_col: str) -> T.DataType:
    """The type both sides' ids are read as: ``long`` if every side's ``id_col`` is an integer
    column, else ``string``; fails before the start if a side lacks the column or its ids are
    neither integers nor strings."""
    types = []
    for df in (left, right):
        if df is None:
            continue
        require_column(df, id_col, "id_col")
        dtype = df.schema[id_col].dataType
        if not isinstance(dtype, (T.IntegralType, T.StringType)):
            raise ColumnTypeError("id_col", f"={id_col!r} has type {dtype.simpleString()}; ids must be integers or "
                                            f"strings (a {dtype.simpleString()} id would change its form): cast it "
                                            f"first, e.g. df.withColumn({id_col!r}, F.col({id_col!r}).cast('long'))",
                                  show_value=False)
        types.append(dtype)
    if all(isinstance(t, T.IntegralType) for t in types):
        return T.LongType()
    return T.StringType()
