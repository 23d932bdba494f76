"""``similarity_join``: the exact similarity join of Spark DataFrames, streaming or static.

A short dispatch: the settings are checked once (:class:`~driftjoin.spark.similarity.settings.SimilaritySettings`),
the inputs checked against them (:class:`~driftjoin.spark.similarity.inputs.JoinInputs`), then one
of the three paths, each in the shape of :mod:`driftjoin.spark.similarity.shape`, builds its plan
and its pairs: the metric-space path (:mod:`~driftjoin.spark.similarity.spaces`: strings, token
sets, user metrics) or a vector path, S3J (:mod:`~driftjoin.spark.similarity.s3j`) or the grid
(:mod:`~driftjoin.spark.similarity.grid`), as :func:`~driftjoin.spark.similarity.choice.vector_plan`
chooses. :func:`pair_columns` gives every path's pairs the user's columns.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.session import prepare_session
from driftjoin.spark.similarity.choice import vector_plan
from driftjoin.spark.similarity.control import attach_balancer
from driftjoin.spark.similarity.grid import GridPlan, grid_pairs
from driftjoin.spark.similarity.inputs import JoinInputs
from driftjoin.spark.similarity.s3j import dead_letters_of_vectors, s3j_pairs
from driftjoin.spark.similarity.settings import DEFAULT_WINDOW, SimilaritySettings
from driftjoin.spark.similarity.shape import window_bounds_us
from driftjoin.spark.similarity.spaces import space_dead_letters, space_pairs, space_plan, takes_space_path


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
    (:mod:`driftjoin.spark.similarity.spaces`): ``algorithm="auto"`` chooses by their counted
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
    s = SimilaritySettings.check({n: v for n, v in locals().items() if n in SimilaritySettings.names()})
    join = JoinInputs.of(left, right, s)
    if takes_space_path(join):
        join = join.prepared()
        plan = space_plan(join, sample)
        return remember(pair_columns(space_pairs(join, plan), plan, s.output), plan)
    join = join.prepared(need_metrics=s.balance != "none" and join.streaming and s.algorithm in ("s3j", "auto"))
    plan = vector_plan(join, sample)
    if isinstance(plan, GridPlan):
        return remember(pair_columns(grid_pairs(join, plan), plan, s.output), plan)
    attach_balancer(join, plan)
    return remember(pair_columns(s3j_pairs(join, plan), plan, s.output), plan)


def pair_columns(raw: DataFrame, plan: Any, output: str) -> DataFrame:
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
    s = SimilaritySettings.check({"metric": metric, "dim": dim, "id_col": id_col, "vector_col": vector_col,
                                  "value_col": value_col, "time_col": time_col, "ingest_col": ingest_col,
                                  **join_settings}, dead_letters=True)
    join = JoinInputs.of(left, right, s, joining=False)
    prepare_session(left.sparkSession)
    return space_dead_letters(join) if takes_space_path(join) else dead_letters_of_vectors(join)
