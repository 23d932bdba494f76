"""``similarity_join``: the S3J similarity join of Spark DataFrames, streaming or static."""

from __future__ import annotations

import logging

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.pandas.types import to_arrow_schema

from driftjoin.distance import check_threshold, get_metric
from driftjoin.s3j.baselines import ALGORITHMS
from driftjoin.s3j.space import random_centroids
from driftjoin.spark.runtime.columns import check_time_column, common_id_type
from driftjoin.spark.runtime.session import (
    prepare_for_stateful,
    prepare_session,
    worker_placement,
)
from driftjoin.spark.runtime.static import static_arrow_udf
from driftjoin.spark.similarity.choice import grid_plan
from driftjoin.spark.similarity.grid import grid_pairs
from driftjoin.spark.similarity.inputs import (
    DEFAULT_WINDOW,
    JoinWindows,
    infer_dim,
    join_windows,
    normalise,
    vector_column,
)
from driftjoin.spark.similarity.plan import S3JPlan, member_schema, window_bounds_us
from driftjoin.spark.similarity.s3j import (
    ComputationProcessor,
    FormulationProcessor,
    FusedProcessor,
    dead_letter_batches,
    route_batches,
    route_members,
)
from driftjoin.windows import Windowing

log = logging.getLogger(__name__)

#: Output shapes of :func:`similarity_join` (see its docstring).
#: ``output=`` values and the transport each uses (:data:`~driftjoin.spark.similarity.s3j.TRANSPORTS`).
OUTPUTS = {"pairs": "flat", "pairs-lean": "lean", "grouped": "grouped", "pairs-grouped": "grouped"}


def _plan(left: DataFrame, right: DataFrame | None, *, threshold: float, metric: str, dim: int | None,
          windows: JoinWindows, parallelism: int | None, centroids: object, bounds: tuple[float, float], seed: int,
          vector_col: str, metrics_dir: str | None, algorithm: str = "s3j", virtual_partitions: int = 500,
          partitions: int | None = None, balanced: bool = False, transport: str = "grouped") -> S3JPlan:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r}: choose one of {', '.join(ALGORITHMS)}")
    if algorithm == "clusterjoin" and (not isinstance(virtual_partitions, int) or virtual_partitions < 1):
        raise ValueError(f"virtual_partitions must be an integer >= 1 (ClusterJoin's default is 500), got {virtual_partitions!r}")
    m = get_metric(metric)
    t = check_threshold(m, threshold)
    parallelism, partitions = worker_placement(left.sparkSession, parallelism, partitions)
    if isinstance(centroids, str) and centroids not in ("random", "sample"):
        raise ValueError(f"centroids={centroids!r}: use 'random', 'sample' (static input) or an array of shape (parallelism, dim)")
    n_centroids = virtual_partitions if algorithm == "clusterjoin" else parallelism
    if not isinstance(centroids, str):
        c = np.asarray(centroids, dtype=np.float64)
        if c.ndim != 2 or len(c) != n_centroids:
            raise ValueError(f"centroids must have shape ({n_centroids}, dim) (one per {'virtual partition' if algorithm == 'clusterjoin' else 'worker'}), got {c.shape}")
        if not np.isfinite(c).all():
            raise ValueError("centroids must be finite numbers")
        dim = dim or c.shape[1]
    if dim is None:
        if left.isStreaming:
            raise ValueError("dim is required for streaming inputs (the vector dimension, e.g. dim=2): the space partition centroids are drawn before the first record arrives")
        dim = infer_dim([d for d in (left, right) if d is not None], vector_col)
    if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
        raise ValueError(f"dim must be an integer >= 1, got {dim!r}")
    if isinstance(centroids, str) and centroids == "sample":
        if left.isStreaming:
            raise ValueError("centroids='sample' needs a static input; for streams use 'random' (the paper's choice) or pass an array")
        rows = left.select(vector_column(left, vector_col).alias("v")).where(F.size("v") == dim).limit(50 * n_centroids).collect()
        pool = np.array([r["v"] for r in rows], dtype=np.float64)
        if len(pool) < n_centroids:
            raise ValueError("not enough rows to sample centroids from; use centroids='random'")
        c = pool[np.random.default_rng(seed).choice(len(pool), n_centroids, replace=False)]
    elif isinstance(centroids, str):
        c = random_centroids(n_centroids, dim, seed, *bounds)
    elif c.shape[1] != dim:
        raise ValueError(f"centroids have {c.shape[1]} dimensions but dim={dim}")
    return S3JPlan(m.name, t, dim, parallelism, c, right is None, windows.windows, metrics_dir, algorithm,
                   windows.time_basis, windows.lateness, partitions, balanced, transport)


def similarity_join(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    threshold: float,
    metric: str = "angular",
    id_col: str = "id",
    vector_col: str = "vector",
    window: str | None = DEFAULT_WINDOW,
    slide: str | None = None,
    within: str | None = None,
    parallelism: int | None = None,
    partitions: int | None = None,
    time_col: str | None = None,
    watermark: str | None = None,
    ingest_col: str | None = None,
    dim: int | None = None,
    centroids: object = "random",
    bounds: tuple[float, float] = (-1.0, 1.0),
    seed: int = 0,
    metrics_dir: str | None = None,
    algorithm: str = "auto",
    virtual_partitions: int = 500,
    balance: str = "none",
    balance_options: dict | None = None,
    output: str = "pairs",
    sample: object = None,
    block_bytes: int | None = None,
) -> DataFrame:
    """Exact similarity join: every pair (same window) with ``distance <= threshold``.

    Windows (:mod:`driftjoin.windows`; the table in the README): ``window="1 minute"`` (the
    default) joins the records of each tumbling window; with ``slide="20 seconds"`` the windows
    slide (Spark's ``window()`` convention: one starts every ``slide``) and a pair comes out once
    for each window that holds both records, with that window's ``window_start`` /
    ``window_end``. ``within="30 seconds"`` (instead of ``window``) is an interval join: every
    pair whose times differ by at most 30 seconds, exactly once, wherever the records fall
    against any boundary; ``window_start`` / ``window_end`` are then null. It is the right
    choice for deduplication, where a tumbling window misses the duplicates of records one
    second apart on either side of a boundary.

    ``algorithm``: ``"auto"`` (the default: S3J or the grid, estimated on a sample, see
    :mod:`driftjoin.grid.choice`), ``"s3j"`` (space partitioning + worksets), ``"grid"``
    (1-Bucket-Theta grid with matrix-product block joins: embeddings of tens to hundreds of
    dimensions), ``"clusterjoin"`` (the paper's baseline: ``virtual_partitions`` inner/outer
    partitions, section 9.4) or ``"bruteforce"`` (every pair compared on one worker: the
    oracle, for small data). ``sample``: vectors like a stream's (an array or a static
    DataFrame) for ``auto`` to decide on; without it a stream is decided by ``dim``.
    ``block_bytes``: memory bound of one matrix-product block of the grid (default 32 MB).

    ``balance``: ``"none"``, ``"s3j"`` (the paper's Algorithm 1) or ``"greedy"`` (LPT): a
    controller on the driver (:class:`driftjoin.spark.similarity.control.BalanceController`) reads the statistics
    in ``metrics_dir`` (default in local mode: ``<checkpoint>/driftjoin-metrics`` of the query) and
    moves worksets between workers while the query runs, exactly.
    ``balance_options`` are its settings (``monitoring_window``, ``di_threshold``,
    ``latency_spread``, ``migration_factor``, ``split``, ``at``, ``load``). Streams only.

    ``parallelism`` is the number of logical workers (space partitions); ``partitions`` the Spark
    state partitions they are placed on round-robin (default: the smaller of ``parallelism`` and
    the cluster's cores). Each stateful task costs about 100 ms per micro-batch whatever it
    does, so sharing partitions lowers a batch's fixed cost; both are stored with the checkpoint.
    Without balancing, workset formulation and similarity computation run in one stateful stage.
    The grid runs one stateful stage with one Spark state partition per worker (``partitions``
    applies to S3J only).

    ``right=None`` joins ``left`` with itself: each unordered pair once, ``left_id < right_id``.
    Streams are windowed by processing time (the ingestion time: ``ingest_col`` if given, else
    the micro-batch time) unless ``time_col`` names an event-time column, then by event time.
    A window stays open until the largest time of earlier micro-batches is ``watermark`` past
    its end (event time: required on a stream, or taken from the input's own ``withWatermark``;
    ``ingest_col``: one window, or one ``within``, unless given); a record whose earliest window
    has closed is *late*: not joined, counted and listed (``late_rows``) in the statistics of
    ``metrics_dir``. A static input is one window (or, with ``time_col``, its windows);
    ``window=None`` makes a stream one unbounded window.

    Output columns (``output="pairs"``): ``left_id, right_id, distance, window_start,
    window_end, ingest_time`` (the later ingestion time of the two records), ``emit_time``,
    ``worker``, ``workset``. ``output="grouped"``: one row per left record, window, worker and
    micro-batch: ``left_id, right_ids, distances, window_start, window_end, ingest_times,
    emit_time, worker`` (arrays in the same order), for users who need no row per pair.
    ``output="pairs-lean"``: one row per pair with ``left_id, right_id, distance, window_start,
    window_end`` only, for users who need no provenance: half the columns for Spark to take from
    the Python workers, which is what bounds the throughput at low selectivity (the statistics
    in ``metrics_dir`` keep the latencies either way). ``output="pairs-grouped"`` gives the pairs through the grouped transport exploded in the
    JVM (measured slower than one row per pair on PySpark 4.3: kept to measure against).
    Rows that cannot be joined are skipped here and reported by :func:`invalid_records`.
    """
    metrics_dir = prepare_session(left.sparkSession, metrics_dir,
                                  need_metrics=balance != "none" and left.isStreaming and algorithm in ("s3j", "auto"))
    if right is not None and right.isStreaming != left.isStreaming:
        raise ValueError("left and right must both be streaming or both static")
    for df in (left, right):
        for name, what in ((ingest_col, "ingest_col"), (time_col, "time_col")):
            if df is not None and name is not None:
                check_time_column(df, name, what)
    if output not in OUTPUTS:
        raise ValueError(f"output={output!r}: use 'pairs' (one row per pair), 'pairs-lean' (one row per pair without "
                         "the provenance columns), 'grouped' (one row per record with arrays of partners) or "
                         "'pairs-grouped'")
    windows = join_windows(left, right, window=window, slide=slide, within=within, time_col=time_col,
                           ingest_col=ingest_col, watermark=watermark)
    if algorithm not in (*ALGORITHMS, "grid", "auto"):
        raise ValueError(f"algorithm={algorithm!r}: choose one of auto, grid, {', '.join(ALGORITHMS)}")
    if algorithm == "grid" and balance != "none":
        raise ValueError("balance= moves S3J worksets: it needs algorithm='s3j' (or 'auto', which then uses S3J)")
    flexible = algorithm in ("auto", "grid") and balance == "none"
    plan = _plan(left, right, threshold=threshold, metric=metric, dim=dim, windows=windows, parallelism=parallelism,
                 centroids=centroids, bounds=bounds, seed=seed, vector_col=vector_col, metrics_dir=metrics_dir,
                 algorithm="s3j" if algorithm in ("auto", "grid") else algorithm,
                 virtual_partitions=virtual_partitions,
                 partitions=partitions, balanced=balance != "none" and left.isStreaming,
                 transport=OUTPUTS[output])
    grid = grid_plan(left, right, plan, algorithm=algorithm if flexible else "s3j", vector_col=vector_col,
                     sample=sample, seed=seed, block_bytes=block_bytes) if algorithm in ("auto", "grid") else None
    if grid is not None and OUTPUTS[output] == "grouped":
        raise ValueError(f"output={output!r} is not available when the grid algorithm joins (it emits one row per pair): "
                         "use output='pairs' or 'pairs-lean', or algorithm='s3j'")
    if balance != "none":
        from driftjoin.spark.similarity.control import (
            CONTROLLERS,
            BalanceController,
            attach,
        )

        if plan.algorithm != "s3j":
            raise ValueError("balance= moves S3J worksets: it needs algorithm='s3j'")
        if not left.isStreaming:
            raise ValueError("balance= applies to streaming joins; a static join runs once")
        controller = BalanceController(metrics_dir, plan.parallelism, plan.dim, policy=balance, **(balance_options or {}))
        CONTROLLERS[metrics_dir] = controller
        attach(left.sparkSession, controller)
    id_type = common_id_type(left, right, id_col)
    f32 = grid is not None and grid.float32
    inputs = [normalise(left, 0, id_col, vector_col, id_type, ingest_col, time_col, False, f32)]
    if right is not None:
        inputs.append(normalise(right, 1, id_col, vector_col, id_type, ingest_col, time_col, False, f32))
    data = inputs[0] if len(inputs) == 1 else inputs[0].unionByName(inputs[1])
    routed_schema = T.StructType([
        T.StructField("key", T.IntegerType()), T.StructField("outer", T.BooleanType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("vec", T.BinaryType()),
        T.StructField("ingest", T.DoubleType()), T.StructField("window", T.LongType()),
        T.StructField("time", T.LongType()), T.StructField("ghost", T.BooleanType()),
    ])
    members_schema = member_schema(id_type)
    pair_schema = (T.StructType([
        T.StructField("left_id", id_type), T.StructField("window", T.LongType()), T.StructField("emit_us", T.LongType()),
        T.StructField("worker", T.IntegerType()), T.StructField("right_ids", T.ArrayType(id_type)),
        T.StructField("distances", T.ArrayType(T.DoubleType())), T.StructField("ingest_us", T.ArrayType(T.LongType())),
        T.StructField("worksets", T.ArrayType(T.LongType())),
    ]) if plan.transport == "grouped" else T.StructType([
        T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("distance", T.DoubleType()),
        T.StructField("window", T.LongType()),
        *([] if plan.transport == "lean" else [
            T.StructField("ingest_us", T.LongType()), T.StructField("emit_us", T.LongType()),
            T.StructField("worker", T.IntegerType()), T.StructField("workset", T.LongType())]),
    ]))
    if grid is not None:  # one row per pair (checked above)
        return _pair_columns(grid_pairs(data, grid, id_type=id_type, pair_schema=pair_schema), plan, output)
    if plan.algorithm == "s3j":
        routed_arrow = to_arrow_schema(routed_schema)
        routed = data.mapInArrow(lambda it: route_batches(plan, it, routed_arrow), routed_schema)
    else:
        member_arrow = to_arrow_schema(members_schema)
        members = data.mapInArrow(lambda it: route_members(plan, it, member_arrow), members_schema)
    if data.isStreaming:
        prepare_for_stateful(left.sparkSession, plan.partitions)
        if plan.fused:
            return _pair_columns(routed.groupBy("key").transformWithStateInPandas(
                FusedProcessor(plan), pair_schema, "Append", "None"), plan, output)
        if plan.algorithm == "s3j":
            members = routed.groupBy("key").transformWithStateInPandas(
                FormulationProcessor(plan), members_schema, "Append", "None")
        return _pair_columns(members.groupBy("wkey").transformWithStateInPandas(
            ComputationProcessor(plan), pair_schema, "Append", "None"), plan, output)
    left.sparkSession.conf.set("spark.sql.shuffle.partitions", str(plan.partitions))
    pair_arrow = to_arrow_schema(pair_schema)
    if plan.fused:
        return _pair_columns(routed.groupBy("key").applyInArrow(
            static_arrow_udf(lambda: FusedProcessor(plan), pair_arrow), pair_schema), plan, output)
    return _pair_columns(members.groupBy("wkey").applyInArrow(
        static_arrow_udf(lambda: ComputationProcessor(plan), pair_arrow), pair_schema), plan, output)


def _pair_columns(raw: DataFrame, plan: S3JPlan, output: str) -> DataFrame:
    """The user-facing columns, with timestamps built in the JVM from plain numbers.

    ``output="pairs"``: one row per pair (grouped rows are exploded here, in the JVM);
    ``"grouped"``: one row per left record and micro-batch with its partners in arrays.
    """
    bounds = window_bounds_us(plan.windows)
    if bounds is None:
        start = end = F.lit(None).cast("timestamp")
    else:
        step, offset = bounds
        first = F.col("window") * F.lit(step) + F.lit(offset)
        start = F.timestamp_micros(first)
        end = F.timestamp_micros(first + F.lit(plan.windows.length))
    if output == "grouped":
        return raw.select(
            "left_id", F.col("right_ids"), F.col("distances"), start.alias("window_start"), end.alias("window_end"),
            F.transform("ingest_us", lambda x: F.timestamp_micros(x)).alias("ingest_times"),
            F.timestamp_micros("emit_us").alias("emit_time"), "worker")
    if plan.transport == "grouped":
        raw = raw.select("left_id", "window", "emit_us", "worker",
                         F.explode(F.arrays_zip("right_ids", "distances", "ingest_us", "worksets")).alias("p")).select(
            "left_id", F.col("p.right_ids").alias("right_id"), F.col("p.distances").alias("distance"), "window",
            F.col("p.ingest_us").alias("ingest_us"), "emit_us", "worker", F.col("p.worksets").alias("workset"))
    if output == "pairs-lean":
        return raw.select("left_id", "right_id", "distance", start.alias("window_start"), end.alias("window_end"))
    return raw.select(
        "left_id", "right_id", "distance", start.alias("window_start"), end.alias("window_end"),
        F.timestamp_micros("ingest_us").alias("ingest_time"), F.timestamp_micros("emit_us").alias("emit_time"),
        "worker", "workset",
    )


#: Settings of :func:`similarity_join` that do not change which rows are valid.
_JOIN_ONLY = frozenset({"threshold", "window", "slide", "within", "parallelism", "partitions", "watermark", "centroids", "bounds", "seed",
                        "metrics_dir", "algorithm", "virtual_partitions", "balance", "balance_options", "output",
                        "sample", "block_bytes"})


def invalid_records(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    metric: str = "angular",
    dim: int | None = None,
    id_col: str = "id",
    vector_col: str = "vector",
    time_col: str | None = None,
    ingest_col: str | None = None,
    **join_settings: object,
) -> DataFrame:
    """The dead-letter output: every input row :func:`similarity_join` cannot join, with why.

    Takes the same keyword arguments as :func:`similarity_join` (pass the same ones: the rows
    refused depend on ``metric``, ``dim``, ``id_col``, ``vector_col``, ``time_col`` and
    ``ingest_col``; the others are accepted and ignored), so a row is always either joined or
    here, never both. Columns: ``side`` (0 left, 1 right), ``id``, ``raw`` (the row as JSON)
    and ``reason``. Stateless, so it can run as its own streaming query next to the join.
    Records that arrive after their window closed are refused by the join itself and listed in
    its statistics (``late_rows``), since only the join knows its windows.
    """
    unknown = set(join_settings) - _JOIN_ONLY
    if unknown:
        raise TypeError(f"invalid_records() got unexpected keyword argument(s) {sorted(unknown)}")
    prepare_session(left.sparkSession)
    m = get_metric(metric)
    if dim is None:
        if left.isStreaming:
            raise ValueError("dim is required for streaming inputs (the vector dimension, e.g. dim=2)")
        dim = infer_dim([d for d in (left, right) if d is not None], vector_col)
    id_type = common_id_type(left, right, id_col)
    inputs = [normalise(left, 0, id_col, vector_col, id_type, ingest_col, time_col, True)]
    if right is not None:
        inputs.append(normalise(right, 1, id_col, vector_col, id_type, ingest_col, time_col, True))
    data = inputs[0] if len(inputs) == 1 else inputs[0].unionByName(inputs[1])
    plan = S3JPlan(m.name, 1.0, dim, 1, np.zeros((1, dim)), right is None, Windowing.unbounded(), None)
    schema = T.StructType([
        T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType()),
    ])
    return data.mapInArrow(lambda it: dead_letter_batches(plan, it), schema)
