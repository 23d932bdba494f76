"""``similarity_join``: the S3J similarity join of Spark DataFrames, streaming or static."""

from __future__ import annotations

import logging

import numpy as np
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from driftjoin.distance import check_threshold, get_metric
from driftjoin.durations import parse_duration
from driftjoin.s3j.space import random_centroids
from driftjoin.spark.s3j_operators import (
    ComputationProcessor,
    FormulationProcessor,
    S3JPlan,
    dead_letter_batches,
    route_batches,
    route_members,
)
from driftjoin.s3j.baselines import ALGORITHMS
from driftjoin.spark.session import prepare_for_stateful, prepare_session
from driftjoin.spark.static import static_arrow_udf

log = logging.getLogger(__name__)

_ID_TYPES = (T.LongType, T.IntegerType, T.ShortType, T.StringType)


def _vector_column(df: DataFrame, name: str) -> Column:
    if name not in df.columns:
        raise ValueError(f"vector_col={name!r} is not a column of the input; columns are {df.columns}")
    dtype = df.schema[name].dataType
    if isinstance(dtype, T.UserDefinedType) and dtype.simpleString() == "vector":
        from pyspark.ml.functions import vector_to_array

        return vector_to_array(F.col(name), "float64")
    if isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.NumericType):
        return F.col(name).cast("array<double>")
    raise TypeError(f"vector_col={name!r} has type {dtype.simpleString()}; use array<double>, array<float> or an MLlib Vector")


def _id_type(left: DataFrame, right: DataFrame | None, id_col: str) -> T.DataType:
    types = []
    for df in (left, right):
        if df is None:
            continue
        if id_col not in df.columns:
            raise ValueError(f"id_col={id_col!r} is not a column of the input; columns are {df.columns}")
        types.append(df.schema[id_col].dataType)
    if all(isinstance(t, (T.LongType, T.IntegerType, T.ShortType)) for t in types):
        return T.LongType()
    return T.StringType()


def _normalise(df: DataFrame, side: int, id_col: str, vector_col: str, id_type: T.DataType,
               ingest_col: str | None, time_col: str | None, with_raw: bool) -> DataFrame:
    ingest = (F.col(ingest_col) if ingest_col else F.current_timestamp()).cast("timestamp").cast("double")
    cols = [
        F.lit(side).cast("byte").alias("side"),
        F.col(id_col).cast(id_type).alias("id"),
        _vector_column(df, vector_col).alias("vector"),
        ingest.alias("ingest"),
    ]
    if time_col:
        if time_col not in df.columns:
            raise ValueError(f"time_col={time_col!r} is not a column of the input; columns are {df.columns}")
        cols.append(F.col(time_col).cast("timestamp").cast("double").alias("event"))
    if with_raw:
        cols.append(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("raw"))
    return df.select(*cols)


def _plan(left: DataFrame, *, threshold: float, metric: str, dim: int | None, window: str | None,
          parallelism: int | None, centroids: object, bounds: tuple[float, float], seed: int,
          self_join: bool, vector_col: str, metrics_dir: str | None, algorithm: str = "s3j",
          virtual_partitions: int = 500) -> S3JPlan:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    if algorithm == "clusterjoin" and (not isinstance(virtual_partitions, int) or virtual_partitions < 1):
        raise ValueError(f"virtual_partitions must be an integer >= 1 (ClusterJoin's default is 500), got {virtual_partitions!r}")
    m = get_metric(metric)
    t = check_threshold(m, threshold)
    if parallelism is None:
        parallelism = int(left.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    if not isinstance(parallelism, int) or parallelism < 1:
        raise ValueError(f"parallelism must be an integer >= 1 (the number of workers), got {parallelism!r}")
    if isinstance(centroids, str) and centroids not in ("random", "sample"):
        raise ValueError(f"centroids={centroids!r}: use 'random', 'sample' (static input) or an array of shape (parallelism, dim)")
    n_centroids = virtual_partitions if algorithm == "clusterjoin" else parallelism
    if not isinstance(centroids, str):
        c = np.asarray(centroids, dtype=np.float64)
        if c.ndim != 2 or len(c) != n_centroids:
            raise ValueError(f"centroids must have shape ({n_centroids}, dim) (one per {'virtual partition' if algorithm == 'clusterjoin' else 'worker'}), got {c.shape}")
        dim = dim or c.shape[1]
    if dim is None:
        if left.isStreaming:
            raise ValueError("dim is required for streaming inputs (the vector dimension, e.g. dim=2): the space partition centroids are drawn before the first record arrives")
        first = left.select(_vector_column(left, vector_col).alias("v")).where(F.col("v").isNotNull()).first()
        if first is None:
            raise ValueError("cannot infer dim from an empty input; pass dim=")
        dim = len(first["v"])
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    if centroids == "sample":
        if left.isStreaming:
            raise ValueError("centroids='sample' needs a static input; for streams use 'random' (the paper's choice) or pass an array")
        rows = left.select(_vector_column(left, vector_col).alias("v")).where(F.size("v") == dim).limit(50 * n_centroids).collect()
        pool = np.array([r["v"] for r in rows], dtype=np.float64)
        if len(pool) < n_centroids:
            raise ValueError("not enough rows to sample centroids from; use centroids='random'")
        c = pool[np.random.default_rng(seed).choice(len(pool), n_centroids, replace=False)]
    elif centroids == "random":
        c = random_centroids(n_centroids, dim, seed, *bounds)
    window_seconds = None if window is None else parse_duration(window, "window")
    return S3JPlan(m.name, t, dim, parallelism, c, self_join, window_seconds, metrics_dir, algorithm)


def similarity_join(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    threshold: float,
    metric: str = "angular",
    id_col: str = "id",
    vector_col: str = "vector",
    window: str | None = "1 minute",
    parallelism: int | None = None,
    time_col: str | None = None,
    watermark: str | None = None,
    ingest_col: str | None = None,
    dim: int | None = None,
    centroids: object = "random",
    bounds: tuple[float, float] = (-1.0, 1.0),
    seed: int = 0,
    metrics_dir: str | None = None,
    algorithm: str = "s3j",
    virtual_partitions: int = 500,
    balance: str = "none",
    balance_options: dict | None = None,
) -> DataFrame:
    """Exact similarity join: every pair (same window) with ``distance <= threshold``.

    ``algorithm``: ``"s3j"`` (space partitioning + worksets, the default), ``"clusterjoin"``
    (the paper's baseline: ``virtual_partitions`` inner/outer partitions, section 9.4) or
    ``"bruteforce"`` (every pair compared on one worker: the oracle, for small data).

    ``balance``: ``"none"``, ``"s3j"`` (the paper's Algorithm 1) or ``"greedy"`` (LPT): a
    controller on the driver (:class:`driftjoin.control.BalanceController`) reads the statistics
    in ``metrics_dir`` (default in local mode: ``<checkpoint>/driftjoin-metrics`` of the query) and
    moves worksets between workers while the query runs, exactly.
    ``balance_options`` are its settings (``monitoring_window``, ``di_threshold``,
    ``latency_spread``, ``migration_factor``, ``split``, ``at``, ``load``). Streams only.

    ``right=None`` joins ``left`` with itself: each unordered pair once, ``left_id < right_id``.
    Streams are windowed by processing time (the ingestion time: ``ingest_col`` if given, else
    the micro-batch time) unless ``time_col`` names an event-time column, then by event time
    with ``watermark`` (late rows are dropped by Spark). A static input is one window (or one
    per window of ``time_col``); ``window=None`` makes a stream one unbounded window.

    Output columns: ``left_id, right_id, distance, window_start, window_end, ingest_time``
    (the later ingestion time of the two records), ``emit_time``, ``worker``, ``workset``.
    Rows that cannot be joined are skipped here and reported by :func:`invalid_records`.
    """
    self_join = right is None
    metrics_dir = prepare_session(left.sparkSession, metrics_dir, need_metrics=balance != "none" and left.isStreaming and algorithm == "s3j")
    if time_col is None and watermark is not None:
        raise ValueError("watermark= needs time_col= (an event-time column)")
    if time_col is not None and left.isStreaming and watermark is None:
        raise ValueError("event-time windows on a stream need watermark= (how late a record may arrive), e.g. watermark='10 seconds'")
    if not left.isStreaming and time_col is None:
        window = None
    if right is not None and right.isStreaming != left.isStreaming:
        raise ValueError("left and right must both be streaming or both static")
    plan = _plan(left, threshold=threshold, metric=metric, dim=dim, window=window, parallelism=parallelism,
                 centroids=centroids, bounds=bounds, seed=seed, self_join=self_join, vector_col=vector_col,
                 metrics_dir=metrics_dir, algorithm=algorithm, virtual_partitions=virtual_partitions)
    if balance != "none":
        from driftjoin.control import CONTROLLERS, BalanceController, attach

        if algorithm != "s3j":
            raise ValueError("balance= moves S3J worksets: it needs algorithm='s3j'")
        if not left.isStreaming:
            raise ValueError("balance= applies to streaming joins; a static join runs once")
        controller = BalanceController(metrics_dir, plan.parallelism, plan.dim, policy=balance, **(balance_options or {}))
        CONTROLLERS[metrics_dir] = controller
        attach(left.sparkSession, controller)
    id_type = _id_type(left, right, id_col)
    inputs = [_normalise(left, 0, id_col, vector_col, id_type, ingest_col, time_col, False)]
    if right is not None:
        inputs.append(_normalise(right, 1, id_col, vector_col, id_type, ingest_col, time_col, False))
    data = inputs[0] if len(inputs) == 1 else inputs[0].unionByName(inputs[1])
    has_event = time_col is not None
    if has_event and data.isStreaming:
        data = data.withColumn("event_ts", F.col("event").cast("timestamp")).withWatermark("event_ts", watermark).drop("event_ts")
    routed_schema = T.StructType([
        T.StructField("key", T.IntegerType()), T.StructField("outer", T.BooleanType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("vec", T.BinaryType()),
        T.StructField("ingest", T.DoubleType()), T.StructField("window", T.LongType()),
    ])
    member_schema = T.StructType([
        T.StructField("wkey", T.IntegerType()), T.StructField("workset", T.LongType()), T.StructField("role", T.ByteType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("vec", T.BinaryType()),
        T.StructField("ingest", T.DoubleType()), T.StructField("window", T.LongType()),
        T.StructField("store", T.BooleanType()),
    ])
    pair_schema = T.StructType([
        T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("distance", T.DoubleType()),
        T.StructField("window", T.LongType()), T.StructField("ingest_us", T.LongType()), T.StructField("emit_us", T.LongType()),
        T.StructField("worker", T.IntegerType()), T.StructField("workset", T.LongType()),
    ])
    if plan.algorithm == "s3j":
        routed = data.mapInArrow(lambda it: route_batches(plan, it, has_event=has_event), routed_schema)
    else:
        members = data.mapInArrow(lambda it: route_members(plan, it, has_event=has_event), member_schema)
    if data.isStreaming:
        prepare_for_stateful(left.sparkSession, plan.parallelism)
        if plan.algorithm == "s3j":
            members = routed.groupBy("key").transformWithStateInPandas(
                FormulationProcessor(plan), member_schema, "Append", "None")
        return _pair_columns(members.groupBy("wkey").transformWithStateInPandas(
            ComputationProcessor(plan), pair_schema, "Append", "None"), plan.window_seconds)
    left.sparkSession.conf.set("spark.sql.shuffle.partitions", str(plan.parallelism))
    member_arrow, pair_arrow = to_arrow_schema(member_schema), to_arrow_schema(pair_schema)
    if plan.algorithm == "s3j":
        members = routed.groupBy("key").applyInArrow(
            static_arrow_udf(lambda: FormulationProcessor(plan), member_arrow), member_schema)
    return _pair_columns(members.groupBy("wkey").applyInArrow(
        static_arrow_udf(lambda: ComputationProcessor(plan), pair_arrow), pair_schema), plan.window_seconds)


def _pair_columns(raw: DataFrame, window_seconds: float | None) -> DataFrame:
    """The user-facing pair columns, with timestamps built in the JVM from plain numbers."""
    if window_seconds is None:
        start = end = F.lit(None).cast("timestamp")
    else:
        us = int(round(window_seconds * 1e6))
        start = F.timestamp_micros(F.col("window") * F.lit(us))
        end = F.timestamp_micros((F.col("window") + 1) * F.lit(us))
    return raw.select(
        "left_id", "right_id", "distance", start.alias("window_start"), end.alias("window_end"),
        F.timestamp_micros("ingest_us").alias("ingest_time"), F.timestamp_micros("emit_us").alias("emit_time"),
        "worker", "workset",
    )


def invalid_records(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    metric: str = "angular",
    dim: int,
    id_col: str = "id",
    vector_col: str = "vector",
) -> DataFrame:
    """The dead-letter output: every input row :func:`similarity_join` cannot join, with why.

    Columns: ``side`` (0 left, 1 right), ``id``, ``raw`` (the row as JSON) and ``reason``.
    Stateless, so it can run as its own streaming query next to the join.
    """
    prepare_session(left.sparkSession)
    m = get_metric(metric)
    id_type = _id_type(left, right, id_col)
    inputs = [_normalise(left, 0, id_col, vector_col, id_type, None, None, True)]
    if right is not None:
        inputs.append(_normalise(right, 1, id_col, vector_col, id_type, None, None, True))
    data = inputs[0] if len(inputs) == 1 else inputs[0].unionByName(inputs[1])
    plan = S3JPlan(m.name, 1.0, dim, 1, np.zeros((1, dim)), right is None, None, None)
    schema = T.StructType([
        T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType()),
    ])
    return data.mapInArrow(lambda it: dead_letter_batches(plan, it), schema)
