"""Building a metric similarity join (strings, token sets, user metrics) from ``similarity_join``'s
settings: which joins take this path, the checks before the start, the sample, the strategy
(``algorithm="auto"``: the core's counted estimate) and the DataFrame pipeline of
:mod:`driftjoin.spark.similarity.metric`.

A join takes the metric path when its metric is not one of the vector metrics of
:mod:`driftjoin.distance` (``"levenshtein"``, ``"jaccard"``, a callable ``f(a, b)``,
:func:`driftjoin.user_metric`) or when its column holds no vectors (then the checks say which
metric fits the column). The vector metrics on vector columns keep their own S3J and grid.

The sample: ``sample=`` when given (a static DataFrame with the value column, or a list of
values), else a static input's first rows. It gives S3J its centroids, prefix filtering its global
token order, ``auto`` its estimate and a user metric its triangle check, all before the start.
Without one, a stream can still run PassJoin (edit distance) and prefix filtering (Jaccard,
with a token order by hash instead of frequency: exact, less pruning); S3J and user metrics
need it.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

import numpy as np

from driftjoin.metric.choose import build_strategy, choose, strategies_for
from driftjoin.metric.records import take_values
from driftjoin.metric.spaces import JaccardSpace, Space
from driftjoin.metric.tokens import TokenOrder
from driftjoin.metric.validate import check_settings, check_user_metric
from driftjoin.metric_names import SET, VECTOR, kind_of
from driftjoin.spark.runtime.columns import check_time_column, common_id_type
from driftjoin.spark.runtime.queries import AUTO
from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.session import worker_placement
from driftjoin.spark.runtime.stages import inputs_streaming, stateful_stage
from driftjoin.spark.similarity.choice import write_choice
from driftjoin.spark.similarity.inputs import join_windows, normalise, vector_column
from driftjoin.spark.similarity.metric import (
    MetricPlan,
    MetricProcessor,
    dead_letter_batches,
    python_values,
    route_metric,
)

log = logging.getLogger("driftjoin")

#: Rows of a static input (per side) that ``auto``, S3J's centroids and the token order are drawn from.
SAMPLE_ROWS = 2000

#: Values of the sample ``auto`` runs each strategy on: the estimate scales with the square of the
#: sample for S3J (every record against every centroid within 2t, and at Jaccard t >= 0.5 every
#: record is outer everywhere), and counted work extrapolates (``expected``), so a smaller sample
#: keeps the choice while the centroids and the token order still come from the whole sample.
ESTIMATE_ROWS = 1000

#: Settings of ``similarity_join`` that only the vector path reads, with their defaults.
VECTOR_ONLY = {"dim": None, "centroids": "random", "bounds": (-1.0, 1.0), "virtual_partitions": 500,
               "balance_options": None, "block_bytes": None}


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (isinstance(value, (str, int, float, tuple)) and value == default)


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


def is_metric_join(left: DataFrame, metric: Any, column: str) -> bool:
    """Whether ``similarity_join`` takes the metric path (module docstring)."""
    if kind_of(metric) != VECTOR:
        return True
    return column in left.columns and value_kind(left.schema[column].dataType, metric) != "vector"


def _value_column(df: DataFrame, name: str, kind: str) -> Column:
    if kind == "vector":
        return vector_column(df, name)
    if kind == "set" and isinstance(df.schema[name].dataType.elementType, T.IntegralType):
        return F.col(name).cast("array<long>")
    return F.col(name)


def _kind(left: DataFrame, right: DataFrame | None, column: str, metric: Any) -> str:
    kinds = set()
    for df in (left, right):
        if df is None:
            continue
        if column not in df.columns:
            raise ValueError(f"value_col={column!r} is not a column of the input; columns are {df.columns}")
        kinds.add(value_kind(df.schema[column].dataType, metric))
    if len(kinds) > 1:
        raise ValueError(f"value_col={column!r} holds {' and '.join(sorted(kinds))} values on the two sides: "
                         "give both sides the same column type")
    return kinds.pop()


def _sample_values(frames: list[DataFrame], column: str, kind: str, space: Space, rows: int) -> list[Any]:
    """The valid values of the first ``rows`` rows of each frame (the router's own test)."""
    out: list[Any] = []
    for df in frames:
        got = df.select(_value_column(df, column, kind).alias("v")).limit(rows).collect()
        values = python_values(kind, [r["v"] for r in got])
        out += [v for v, why in zip(values, (space.reason(v) for v in values)) if why is None]
    return out


def _stream_sample(sample: Any, column: str, kind: str, space: Space) -> list[Any] | None:
    if sample is None:
        return None
    if isinstance(sample, DataFrame):
        if sample.isStreaming:
            raise ValueError("sample= must be a static DataFrame or a list of values, not a stream")
        if column not in sample.columns:
            raise ValueError(f"sample= has no column {column!r} (value_col); columns are {sample.columns}")
        return _sample_values([sample], column, kind, space, 10 * SAMPLE_ROWS)
    values = python_values(kind, list(sample))
    return [v for v in values if space.reason(v) is None]


@dataclass(frozen=True)
class MetricChoice:
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


def metric_pairs(left: DataFrame, right: DataFrame | None, *, threshold: Any, metric: Any, id_col: str,
                 value_col: str, window: Any, slide: Any, within: Any, parallelism: int | None,
                 partitions: int | None, time_col: str | None, watermark: Any, ingest_col: str | None, seed: int,
                 metrics_dir: str | None, algorithm: str, output: str, sample: Any, balance: str,
                 vector_settings: dict[str, Any]) -> tuple[DataFrame, MetricPlan]:
    """The raw pair DataFrame of a metric join and its plan (``similarity_join`` adds the columns).

    Every check runs before Spark runs a job (settings, the column's type, the user metric's
    triangle test on the sample); see ``similarity_join`` for the settings.
    """
    if balance != "none":
        raise ValueError(f"balance={balance!r} moves S3J worksets between workers, which the vector path does; a metric "
                         "join runs S3J's formulation and computation fused per space partition: use balance='none'")
    given = [k for k, default in VECTOR_ONLY.items() if not _is_default(vector_settings.get(k, default), default)]
    if given:
        raise ValueError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to vector joins only; remove "
                         f"{'it' if len(given) == 1 else 'them'} for metric={getattr(metric, 'name', metric)!r}")
    if output not in ("pairs", "pairs-lean"):
        raise ValueError(f"output={output!r} is not available for a metric join (it emits one row per pair): "
                         "use output='pairs' or 'pairs-lean'")
    inputs_streaming(left, right)
    for df in (left, right):
        for name, what in ((ingest_col, "ingest_col"), (time_col, "time_col")):
            if df is not None and name is not None:
                check_time_column(df, name, what)
    kind = _kind(left, right, value_col, metric)
    settings = check_settings(metric, threshold, value_kind=kind, column=value_col, algorithm=algorithm)
    space, t = settings.space, settings.threshold
    windows = join_windows(left, right, window=window, slide=slide, within=within, time_col=time_col,
                           ingest_col=ingest_col, watermark=watermark)
    spark = left.sparkSession
    parallelism, partitions = worker_placement(spark, parallelism, partitions)
    inputs = [df for df in (left, right) if df is not None]
    if left.isStreaming:
        values = _stream_sample(sample, value_col, kind, space)
        rows = None if values is None else len(values)
    else:
        values = (_sample_values(inputs, value_col, kind, space, SAMPLE_ROWS) if sample is None
                  else _stream_sample(sample, value_col, kind, space))
        rows = sum(df.count() for df in inputs)
    if not values and strategies_for(space)[1:] == ():
        if values is None:
            raise ValueError(f"metric={space.name!r} on a stream needs sample= (a static DataFrame with column "
                             f"{value_col!r}, or a list of values): S3J draws its centroids from it and the triangle "
                             "inequality of a user metric is checked on it before the start")
        raise ValueError(f"no valid value in the first rows of the input to draw S3J's centroids from (column "
                         f"{value_col!r}); invalid_records() lists why each row cannot be joined")
    check_user_metric(space, values or [])
    if isinstance(space, JaccardSpace):
        space = JaccardSpace(TokenOrder.from_sample(values or []))
        if values is None:
            log.info("similarity_join: no sample= for metric='jaccard' on a stream: prefix filtering orders tokens "
                     "by hash (exact; a sample's frequencies would prune more)")
    prepared = space.prepare(values) if values else None  # an empty static input: no sample either
    name, estimates = _resolve(algorithm, space, t, prepared, parallelism, rows, seed)
    strategy = build_strategy(name, space, t, parallelism, self_join=right is None, windows=windows.windows,
                              sample=prepared, seed=seed)
    choice = MetricChoice(name, _reason(algorithm, name, estimates, prepared), space.name, strategy.n_workers,
                          0 if prepared is None else len(prepared), rows or 0, tuple(estimates))
    log.info("similarity_join algorithm=%s: %s", name, choice.reason)
    if metrics_dir and not metrics_dir.startswith(AUTO):
        write_choice(metrics_dir, choice)
    if strategy.n_workers < parallelism:  # S3J: fewer distinct sample values than workers
        partitions = min(partitions, strategy.n_workers)
    plan = MetricPlan(strategy, space, t, strategy.n_workers, right is None, windows.windows, kind, metrics_dir,
                      windows.time_basis, windows.lateness, partitions, "lean" if output == "pairs-lean" else "flat",
                      choice.as_dict())
    id_type = common_id_type(left, right, id_col)
    frames = [normalise(df, side, id_col, value_col, id_type, ingest_col, time_col, False,
                        value=_value_column(df, value_col, kind)) for side, df in enumerate(inputs)]
    data = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    value_type = data.schema["value"].dataType
    routed_schema = T.StructType([
        T.StructField("key", T.IntegerType()), T.StructField("role", T.ByteType()), T.StructField("side", T.ByteType()),
        T.StructField("id", id_type), T.StructField("value", value_type), T.StructField("ingest", T.DoubleType()),
        T.StructField("time", T.LongType()), T.StructField("window", T.LongType()), T.StructField("ghost", T.BooleanType()),
        T.StructField("home", T.BooleanType()),
    ])
    pair_schema = T.StructType([
        T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("distance", T.DoubleType()),
        T.StructField("window", T.LongType()),
        *([] if plan.transport == "lean" else [
            T.StructField("ingest_us", T.LongType()), T.StructField("emit_us", T.LongType()),
            T.StructField("worker", T.IntegerType()), T.StructField("workset", T.LongType())]),
    ])
    routed_arrow = arrow_schema(routed_schema)
    routed = data.mapInArrow(lambda it: route_metric(plan, it, routed_arrow), routed_schema)
    return stateful_stage(routed, "key", lambda: MetricProcessor(plan), pair_schema,
                          partitions=plan.partitions or plan.parallelism), plan


def _resolve(algorithm: str, space: Space, threshold: float, prepared: Any, parallelism: int, rows: int | None,
             seed: int) -> tuple[str, list]:
    """The strategy ``algorithm`` names (``auto``: the least counted work on the sample)."""
    if algorithm != "auto":
        if algorithm == "s3j" and prepared is None:
            raise ValueError("algorithm='s3j' on a stream needs sample= (S3J's centroids are records of a sample)")
        return algorithm, []
    if prepared is None:  # a stream without a sample: the strategy that needs none
        return strategies_for(space)[1], []
    n = min(ESTIMATE_ROWS, len(prepared))
    return choose(space, threshold, take_values(prepared, np.arange(n)), n_workers=parallelism,
                  expected=rows if rows is not None else len(prepared), seed=seed)


def _reason(algorithm: str, name: str, estimates: list, prepared: Any) -> str:
    if algorithm != "auto":
        return f"algorithm={algorithm!r} given"
    if not estimates:
        return f"no sample: {name} needs none"
    work = ", ".join(f"{e.strategy} {e.work:.3g}" for e in estimates)
    return f"least estimated work on {min(ESTIMATE_ROWS, len(prepared))} sample values ({work})"


def metric_dead_letters(left: DataFrame, right: DataFrame | None, *, metric: Any, id_col: str, value_col: str,
                        time_col: str | None, ingest_col: str | None) -> DataFrame:
    """The dead-letter rows of a metric join (``invalid_records`` on the metric path)."""
    kind = _kind(left, right, value_col, metric)
    space = check_settings(metric, 0, value_kind=kind, column=value_col).space
    id_type = common_id_type(left, right, id_col)
    frames = [normalise(df, side, id_col, value_col, id_type, ingest_col, time_col, True,
                        value=_value_column(df, value_col, kind)) for side, df in enumerate(d for d in (left, right) if d is not None)]
    data = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    schema = T.StructType([
        T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType()),
    ])
    return data.mapInArrow(lambda it: dead_letter_batches(space, kind, it), schema)

