"""``similarity_join``: the S3J similarity join of Spark DataFrames, streaming or static."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.distance import check_threshold, get_metric
from driftjoin.s3j.space import random_centroids
from driftjoin.spark.runtime.columns import check_time_column, common_id_type
from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.session import prepare_session, worker_placement
from driftjoin.spark.runtime.stages import inputs_streaming, stateful_stage
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
from driftjoin.spark.similarity.metric_api import is_metric_join, metric_dead_letters, metric_pairs
from driftjoin.spark.similarity.plan import S3JPlan, member_schema, window_bounds_us
from driftjoin.spark.similarity.s3j import (
    ComputationProcessor,
    FormulationProcessor,
    FusedProcessor,
    dead_letter_batches,
    route_batches,
    route_members,
)
from driftjoin.spark.similarity.settings import SimilaritySettings
from driftjoin.windows import Windowing

log = logging.getLogger(__name__)

#: Output shapes of :func:`similarity_join` (see its docstring).
#: ``output=`` values and the transport each uses (:data:`~driftjoin.spark.similarity.s3j.TRANSPORTS`).
OUTPUTS = {"pairs": "flat", "pairs-lean": "lean", "grouped": "grouped", "pairs-grouped": "grouped"}


def _plan(left: DataFrame, right: DataFrame | None, *, threshold: float, metric: str, dim: int | None,
          windows: JoinWindows, parallelism: int | None, centroids: object, bounds: tuple[float, float], seed: int,
          vector_col: str, metrics_dir: str | None, algorithm: str = "s3j", virtual_partitions: int = 500,
          partitions: int | None = None, balanced: bool = False, transport: str = "grouped") -> S3JPlan:
    m = get_metric(metric)
    t = check_threshold(m, threshold)
    parallelism, partitions = worker_placement(left.sparkSession, parallelism, partitions)
    n_centroids = virtual_partitions if algorithm == "clusterjoin" else parallelism
    if not isinstance(centroids, str):
        c = np.asarray(centroids, dtype=np.float64)
        if len(c) != n_centroids:
            raise ValueError(f"centroids must have shape ({n_centroids}, dim) (one per {'virtual partition' if algorithm == 'clusterjoin' else 'worker'}), got {c.shape}")
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
    metric: Any = "angular",
    id_col: str = "id",
    vector_col: str = "vector",
    value_col: str | None = None,
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
    """Exact similarity join: every pair of records of the same window with ``distance <= threshold``.

    Streams and static DataFrames alike; exact for every setting below (the settings change
    only the cost). Bad settings fail before anything runs with a
    :class:`~driftjoin.spark.runtime.settings.SettingError` naming the setting; rows that
    cannot be joined are skipped and reported by :func:`invalid_records`. A stream's plan is
    stored with its checkpoint: a restart with other settings is refused when the query starts
    (``PlanChangedError``), since the state could not be read under them.

    What is compared (``value_col=``, the column; ``vector_col=`` is its older name for vectors):

    ==============================  ====================================  ===========================
    ``metric=``                     column type                           threshold
    ==============================  ====================================  ===========================
    ``"angular"`` (default),        ``array<double>``, ``array<float>``,  a distance (angular: radians
    ``"cosine"``, ``"euclidean"``,  MLlib ``Vector``                      / pi, in [0, 1])
    ``"manhattan"``, ``"chebyshev"``
    ``"levenshtein"`` (or           ``string``                            whole edits (0, 1, 2, ...)
    ``"edit"``, ``"edit_distance"``)
    ``"jaccard"``                   ``array<string>``, ``array<int>``,    in [0, 1): ``1 - |A & B| /
                                    ``array<long>`` (a set of tokens)     |A | B|``
    a callable ``f(a, b)``,         any of the above (values as Python    the user's distance
    :func:`driftjoin.user_metric`   str, list, or float64 arrays)
    ==============================  ====================================  ===========================

    Strings, token sets and user metrics run the metric strategies of :mod:`driftjoin.metric`
    (:mod:`driftjoin.spark.similarity.metric`): ``algorithm="auto"`` chooses by their counted
    work on a sample, or name one: ``"s3j"`` (S3J's space partitioning in the metric space:
    centroids are records), ``"passjoin"`` (edit distance: PassJoin's segment pigeonhole) or
    ``"prefix"`` (Jaccard: prefix filtering with a global token order). The sample is a static
    input's first rows, or ``sample=`` for a stream (a static DataFrame with the column, or a list
    of values): S3J draws its centroids from it, prefix filtering its token order, and a user
    metric is checked there to be a metric (symmetry, triangle inequality) before the start. A
    stream without ``sample=`` runs PassJoin or prefix filtering (token order by hash); a static
    input takes ``sample=`` too when given.
    ``balance=`` and ``output="grouped"`` are for vectors only; ``workset`` is -1 in the pairs.

    Windows (:mod:`driftjoin.windows`; the table in the README): ``window="1 minute"`` (the
    default) joins the records of each tumbling window; with ``slide="20 seconds"`` the windows
    slide (Spark's ``window()`` convention: one starts every ``slide``) and a pair comes out once
    for each window that holds both records, with that window's ``window_start`` /
    ``window_end``. ``within="30 seconds"`` (instead of ``window``) is an interval join: every
    pair whose times differ by at most 30 seconds, exactly once, wherever the records fall
    against any boundary; ``window_start`` / ``window_end`` are then null. It is the right
    choice for deduplication, where a tumbling window misses the duplicates of records one
    second apart on either side of a boundary.

    Parameters
    ----------
    left, right:
        Inputs with an id column and a value column (a vector, a string or a token set), both
        streaming or both static.
        ``right=None`` joins ``left`` with itself: each unordered pair once, ``left_id <
        right_id``, never a record with itself (nor two records with the same id). Ids are
        integers or strings; in a two-sided join ids should be unique per side (two records with
        the same id both join, and give rows with the same ids).
    threshold:
        The largest distance of a joined pair (``choose_threshold`` picks one for a selectivity).
    metric:
        ``"angular"`` (angle / pi, in [0, 1]), ``"cosine"`` (1 - cos), ``"euclidean"``,
        ``"manhattan"`` or ``"chebyshev"`` on vectors; ``"levenshtein"`` (also ``"edit"``,
        ``"edit_distance"``) on strings, ``"jaccard"`` on token sets; a callable ``f(a, b) ->
        float`` or :func:`driftjoin.user_metric` on any of them (the table above). The names are
        those of :mod:`driftjoin.metric_names`; a name it does not know is refused with every
        name listed and the closest one suggested.
    id_col, vector_col, value_col:
        The columns: an integer or string id; the compared values (``value_col``;
        ``vector_col`` is its older name for vectors): ``array<double>``, ``array<float>`` or an
        MLlib ``Vector``, a ``string``, an ``array<string>`` / ``array<int>`` of tokens.
    window, slide, within:
        ``window``: tumbling window (``"1 minute"``), sliding with ``slide`` (at most ``window``);
        ``within`` instead of ``window``: an interval join (pairs whose times differ by at most
        that much, each once). By event time with ``time_col``, else by ingestion time
        (``ingest_col``, else the micro-batch time, so the pairs depend on when batches run).
        ``window=None``: one unbounded window (its state grows without bound on a stream). A
        static input without ``time_col`` is one window.
    parallelism:
        Logical workers (space partitions or grid cells); default ``spark.sql.shuffle.partitions``.
    partitions:
        Spark state partitions the workers are placed on, 1 to ``parallelism`` (default: the
        smaller of ``parallelism`` and the cores): each stateful task costs about 100 ms per
        micro-batch whatever it does, so workers sharing tasks lower a batch's fixed cost. S3J
        only: the grid has one state partition per worker.
    time_col, watermark:
        Event-time windows: the time column (timestamp, date, seconds or timestamp string) and
        how late a record may arrive (required on a stream unless the input has its own
        ``withWatermark`` on the column). A record whose window has closed is *late*: not
        joined, counted in the statistics (``late_rows``).
    ingest_col:
        The ingestion time column (default: the micro-batch time); it is also what latency is
        measured from.
    dim:
        The vector dimension; required for a stream (centroids are drawn before any record
        arrives), inferred from a static input (the most common length).
    centroids, bounds, seed:
        S3J's space partitioning: ``"random"`` (the paper: uniform over ``bounds`` per
        dimension, from ``seed``), ``"sample"`` (static input) or an array of shape
        ``(parallelism, dim)``. Any choice is exact; it changes the balance only.
    metrics_dir:
        Where the operators write per-batch statistics (read by :mod:`driftjoin.app.report`);
        on a cluster a location the driver and executors share. With ``balance`` in local mode
        it defaults to ``<checkpoint>/driftjoin-metrics`` of the query.
    algorithm:
        ``"auto"`` (S3J or the grid, estimated on a sample: :mod:`driftjoin.grid.choice`),
        ``"s3j"`` (space partitioning and worksets), ``"grid"`` (1-Bucket-Theta with
        matrix-product blocks: embeddings of tens to hundreds of dimensions), ``"clusterjoin"``
        (the paper's baseline, ``virtual_partitions`` partitions) or ``"bruteforce"``; on the
        metric path ``"auto"``, ``"s3j"``, ``"passjoin"`` (edit distance) or ``"prefix"``
        (Jaccard).
    virtual_partitions:
        ClusterJoin's partitions.
    balance, balance_options:
        Live workset balancing of a stream (S3J): ``"none"``, ``"s3j"`` (the paper's Algorithm 1)
        or ``"greedy"``; its settings ``monitoring_window``, ``di_threshold``,
        ``latency_spread``, ``migration_factor``, ``split``, ``at``, ``load``
        (:class:`driftjoin.spark.similarity.control.BalanceController`).
    output:
        ``"pairs"`` (one row per pair), ``"pairs-lean"`` (one row per pair, ids, distance and
        window only: half the columns for Spark to move), ``"grouped"`` (one row per left record
        and micro-batch with arrays of partners) or ``"pairs-grouped"``.
    sample:
        Vectors like a stream's (an array or a static DataFrame) for ``algorithm="auto"`` to
        decide on; without it a stream is decided by ``dim``. On the metric path: values of the
        column (a list, or a static DataFrame with the column) for S3J's centroids, the token
        order, ``auto`` and a user metric's triangle check.
    block_bytes:
        Memory of one matrix-product block of the grid (default 32 MB).

    Returns
    -------
    pyspark.sql.DataFrame
        ``left_id, right_id, distance, window_start, window_end, ingest_time`` (the later
        ingestion time of the two records), ``emit_time``, ``worker``, ``workset``; fewer or
        other columns for the other ``output`` shapes.

    Examples
    --------
    >>> from driftjoin import local_session, similarity_join
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(1, [0.0, 0.0]), (2, [0.0, 0.5]), (3, [3.0, 4.0])], "id long, vector array<double>")
    >>> [(r.left_id, r.right_id) for r in similarity_join(df, threshold=1.0, metric="euclidean").collect()]
    [(1, 2)]
    >>> names = spark.createDataFrame([(1, "kitten"), (2, "sitten"), (3, "dog")], "id long, name string")
    >>> pairs = similarity_join(names, threshold=1, metric="levenshtein", value_col="name")
    >>> [(r.left_id, r.right_id, r.distance) for r in pairs.collect()]
    [(1, 2, 1.0)]
    """
    SimilaritySettings.check({n: v for n, v in locals().items() if n in SimilaritySettings.names()})
    column = _column(value_col, vector_col)
    if is_metric_join(left, metric, column):
        metrics_dir = prepare_session(left.sparkSession, metrics_dir)
        raw, plan = metric_pairs(left, right, threshold=threshold, metric=metric, id_col=id_col, value_col=column,
                                 window=window, slide=slide, within=within, parallelism=parallelism,
                                 partitions=partitions, time_col=time_col, watermark=watermark, ingest_col=ingest_col,
                                 seed=seed, metrics_dir=metrics_dir, algorithm=algorithm, output=output, sample=sample,
                                 balance=balance, vector_settings={"dim": dim, "centroids": centroids, "bounds": bounds,
                                                                   "virtual_partitions": virtual_partitions,
                                                                   "balance_options": balance_options,
                                                                   "block_bytes": block_bytes})
        return remember(_pair_columns(raw, plan, output), plan)
    vector_col = column
    metrics_dir = prepare_session(left.sparkSession, metrics_dir,
                                  need_metrics=balance != "none" and left.isStreaming and algorithm in ("s3j", "auto"))
    inputs_streaming(left, right)
    for df in (left, right):
        for name, what in ((ingest_col, "ingest_col"), (time_col, "time_col")):
            if df is not None and name is not None:
                check_time_column(df, name, what)
    windows = join_windows(left, right, window=window, slide=slide, within=within, time_col=time_col,
                           ingest_col=ingest_col, watermark=watermark)
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
        return remember(_pair_columns(grid_pairs(data, grid, id_type=id_type, pair_schema=pair_schema), plan, output), grid)
    if plan.algorithm == "s3j":
        routed_arrow = arrow_schema(routed_schema)
        routed = data.mapInArrow(lambda it: route_batches(plan, it, routed_arrow), routed_schema)
        if plan.fused:
            pairs = stateful_stage(routed, "key", lambda: FusedProcessor(plan), pair_schema, partitions=plan.partitions)
            return remember(_pair_columns(pairs, plan, output), plan)
        members = stateful_stage(routed, "key", lambda: FormulationProcessor(plan), members_schema,
                                 partitions=plan.partitions)
    else:
        member_arrow = arrow_schema(members_schema)
        members = data.mapInArrow(lambda it: route_members(plan, it, member_arrow), members_schema)
    pairs = stateful_stage(members, "wkey", lambda: ComputationProcessor(plan), pair_schema, partitions=plan.partitions)
    return remember(_pair_columns(pairs, plan, output), plan)


def _column(value_col: str | None, vector_col: str) -> str:
    """The compared column: ``value_col``, or ``vector_col`` (its older name, for vectors)."""
    if value_col is None:
        return vector_col
    if vector_col != "vector" and vector_col != value_col:
        raise ValueError(f"value_col={value_col!r} and vector_col={vector_col!r} name two columns: give value_col= only "
                         "(vector_col= is its older name)")
    return value_col


def _pair_columns(raw: DataFrame, plan: Any, output: str) -> DataFrame:
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


def invalid_records(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    metric: Any = "angular",
    dim: int | None = None,
    id_col: str = "id",
    vector_col: str = "vector",
    value_col: str | None = None,
    time_col: str | None = None,
    ingest_col: str | None = None,
    **join_settings: object,
) -> DataFrame:
    """The dead-letter output of :func:`similarity_join`: every input row it cannot join, with why.

    A row is either joined or here, never both: both use one test (a missing id, a missing,
    empty or null-element vector, the wrong dimension, a NaN or infinite element, a zero vector
    for angular and cosine, an element above 1e150 for the other metrics, a missing or
    unparsable time; on the metric path a null string, a null or empty token set, a null token,
    a null value of a user metric). Stateless, so it runs as its own streaming query next to the join.
    Records that arrive after their window closed are refused by the join itself and listed in
    its statistics (``late_rows``), since only the join knows its windows.

    Parameters
    ----------
    left, right:
        The join's inputs.
    metric, dim, id_col, vector_col, value_col, time_col, ingest_col:
        As given to the join: they decide which rows are valid.
    **join_settings:
        The join's other settings, accepted (and checked) so the same keyword arguments can be
        passed to both; they do not change which rows are valid.

    Returns
    -------
    pyspark.sql.DataFrame
        ``side`` (0 left, 1 right), ``id``, ``raw`` (the row as JSON) and ``reason``.

    Examples
    --------
    >>> from driftjoin import invalid_records, local_session
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(1, [1.0, 0.0]), (2, [0.0, 0.0]), (None, [0.5, 0.5])], "id long, vector array<double>")
    >>> [(r.id, r.reason) for r in invalid_records(df, dim=2).collect()]
    [(2, 'zero vector has no direction (angular/cosine)'), (None, 'missing id')]
    """
    join_settings.pop("sample", None)
    SimilaritySettings.check({"metric": metric, "dim": dim, "id_col": id_col, "vector_col": vector_col,
                              "value_col": value_col, "time_col": time_col, "ingest_col": ingest_col, **join_settings},
                             dead_letters=True)
    prepare_session(left.sparkSession)
    column = _column(value_col, vector_col)
    if is_metric_join(left, metric, column):
        return metric_dead_letters(left, right, metric=metric, id_col=id_col, value_col=column, time_col=time_col,
                                   ingest_col=ingest_col)
    vector_col = column
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
