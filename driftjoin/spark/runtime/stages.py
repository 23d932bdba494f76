"""Running an operator's stages on a stream or on a static DataFrame, one way for every operator.

Every operator is stateless routing (``mapInArrow``, the same on streams and static data) and
one or two stateful stages. On a stream a stateful stage is ``transformWithStateInPandas``; on a
static DataFrame the same processor runs once per group with in-memory state (the one static
adapter, :func:`driftjoin.spark.runtime.static.static_arrow_udf`, under ``applyInArrow``), which
is exact because a static input is a single batch. :func:`stateful_stage` is the one place that
choice is made. :func:`inputs_streaming` is the one check that a join's inputs are DataFrames,
both streams or both static.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import types as T

from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.session import prepare_for_stateful
from driftjoin.spark.runtime.settings import InputTypeError, SettingError
from driftjoin.spark.runtime.static import static_arrow_udf


def inputs_streaming(first: DataFrame, second: DataFrame | None, names: tuple[str, str] = ("left", "right"), *,
                     pair: bool = False) -> bool:
    """Whether a join of ``first`` and ``second`` (None: a self-join, unless ``pair``: the operator
    joins two inputs) runs on streams. Refused with a :class:`SettingError` naming the argument:
    an input that is not a DataFrame (:class:`InputTypeError`), a stream beside a static DataFrame.

    >>> inputs_streaming(spark.range(1), spark.range(1))  # doctest: +SKIP
    False
    """
    for df, name in ((first, names[0]), (second, names[1])):
        if df is None and (name == names[0] or pair):
            raise InputTypeError(name, "is required: a DataFrame (spark.read... or spark.readStream...)",
                                 show_value=False)
        if df is not None and not isinstance(df, DataFrame):
            raise InputTypeError(name, f"must be a pyspark.sql.DataFrame (spark.read... or spark.readStream...), got "
                                       f"{type(df).__name__!r}", show_value=False)
    streaming = first.isStreaming
    if second is not None and second.isStreaming != streaming:
        raise SettingError(names[1], f"must be a stream like {names[0]}, or both static: {names[0]} and {names[1]} must "
                                     "both be streaming or both static (read both with spark.readStream, or both with "
                                     "spark.read)", show_value=False)
    return streaming


def use_partitions(data: DataFrame, partitions: int) -> None:
    """Run the stateful stages of ``data``'s query on ``partitions`` Spark partitions: a stream's
    state partitions (:func:`~driftjoin.spark.runtime.session.prepare_for_stateful`; a restarted
    query keeps its checkpoint's), a static DataFrame's shuffle partitions."""
    if data.isStreaming:
        prepare_for_stateful(data.sparkSession, partitions)
    else:
        data.sparkSession.conf.set("spark.sql.shuffle.partitions", str(partitions))


def stateful_stage(data: DataFrame, key: str, make_processor: Callable[[], Any], schema: T.StructType, *,
                   partitions: int) -> DataFrame:
    """``data`` grouped by ``key`` through a stateful processor, whose output rows have ``schema``.

    A stream: ``transformWithStateInPandas`` (append mode, no timers); static data:
    ``applyInArrow``, a fresh processor per group; on ``partitions`` partitions
    (:func:`use_partitions`). ``make_processor`` builds the processor (called once on a stream).
    """
    use_partitions(data, partitions)
    if data.isStreaming:
        return data.groupBy(key).transformWithStateInPandas(make_processor(), schema, "Append", "None")
    return data.groupBy(key).applyInArrow(static_arrow_udf(make_processor, arrow_schema(schema)), schema)
