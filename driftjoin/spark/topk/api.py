"""``topk_set_join``: SWOOP's continuous top-k set-similarity join on Spark.

``parallelism=1`` runs SWOOP on one stateful key; ``parallelism=p`` on p worker keys that each
index a share of the sets and find a share of the pairs, and one key that merges their top-k
change streams into the global one, exactly (:mod:`driftjoin.spark.topk.operators` has both
pipelines and why the second is exact; bench/swoop_partitioned.py measures it).

Output: the change stream of the top-k (``kind`` = ``"enter"`` / ``"leave"``, the pair, its
similarity, the time of the change, and ``seq``, the change's position in the stream), plus a
row for every set the join itself refuses: kind ``"late"`` for a set whose timestamp is older
than the index time when it arrives (it cannot be joined without reordering the past) and
``"duplicate"`` for a set whose id equals that of a set of the same side still in the window;
both are reported, never silently lost. :func:`current_topk` replays a change stream (e.g. the
Parquet sink read back) into the current top-k. Rows that cannot be sets at all (a missing,
unparsable or non-finite time, a missing id, no tokens, a null token) go to
:func:`invalid_sets` with a reason; both functions test rows with the same code, so a row is
in exactly one of the two outputs. The plan (k, similarity, within, self or two-stream, the
parallelism) is stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`). The change
stream is the same, change by change, for every parallelism.
"""

from __future__ import annotations

import warnings

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.spark.runtime.columns import common_id_type, require_column, time_seconds
from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.session import prepare_session
from driftjoin.spark.runtime.settings import ColumnTypeError, SettingError
from driftjoin.spark.runtime.stages import inputs_streaming, stateful_stage
from driftjoin.spark.topk.operators import (
    MergeProcessor,
    SwoopProcessor,
    TopKPlan,
    WorkerProcessor,
    dead_sets,
    route_sets,
    valid_sets,
)
from driftjoin.spark.topk.settings import TopKSettings


def _inputs(left: DataFrame, right: DataFrame | None, s: TopKSettings, with_raw: bool) -> DataFrame:
    """Both sides' rows as the operators read them (``key, side, id, tokens, ts, time_reason[, raw]``),
    after the checks of the columns (a :class:`SettingError` before any job)."""
    id_type = common_id_type(left, right, s.id_col)
    data = _input(left, 0, s, id_type, with_raw)
    return data if right is None else data.unionByName(_input(right, 1, s, id_type, with_raw))


def _input(df: DataFrame, side: int, s: TopKSettings, id_type: T.DataType, with_raw: bool) -> DataFrame:
    for setting in ("id_col", "tokens_col", "time_col"):
        require_column(df, getattr(s, setting), setting)
    dtype = df.schema[s.tokens_col].dataType
    if not isinstance(dtype, T.ArrayType) or not isinstance(dtype.elementType, (T.StringType, T.IntegralType)):
        raise ColumnTypeError("tokens_col", f"={s.tokens_col!r} has type {dtype.simpleString()}; use array<string> or "
                                            "array<int/long>", show_value=False)
    ts, time_reason = time_seconds(df, s.time_col, "time_col")
    cols = [F.lit(0).alias("key"), F.lit(side).cast("byte").alias("side"), F.col(s.id_col).cast(id_type).alias("id"),
            F.array_distinct(F.col(s.tokens_col).cast("array<string>")).alias("tokens"),
            ts.alias("ts"), time_reason.alias("time_reason")]
    if with_raw:
        cols.append(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("raw"))
    return df.select(*cols)


def topk_set_join(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    k: int,
    similarity: str = "jaccard",
    tokens_col: str = "tokens",
    id_col: str = "id",
    time_col: str = "ts",
    within: str | float | None = None,
    window: str | float | None = None,
    metrics_dir: str | None = None,
    parallelism: int = 1,
    share_bound: bool = False,
    design: str = "owner",
) -> DataFrame:
    """The continuous top-k most similar pairs of sets in a sliding window (SWOOP), as a change stream.

    A pair is valid while both sets are in the window: from the later set's time until the
    earlier set's time plus ``within``, so the pairs that ever compete are those whose times
    differ by at most ``within``, as in every driftjoin operator that takes ``within=`` (the
    README's table of windows).
    The result is the stream of changes to the top-k, the same change by change for every
    ``parallelism``; :func:`current_topk` replays it into the top-k. Rows that cannot be sets go
    to :func:`invalid_sets`; sets the join refuses (a late set, a duplicate id of a set still in
    the window) come out as change rows of kind ``late`` and ``duplicate``.

    Parameters
    ----------
    left, right:
        Inputs with an id, a token array and a time, both streaming or both static.
        ``right=None``: the pairs of ``left`` with itself; otherwise pairs of one ``left`` (R)
        and one ``right`` (S) set.
    k:
        How many pairs the top-k holds.
    similarity:
        ``"jaccard"``, ``"cosine"``, ``"dice"``, ``"overlap"`` or ``"hamming"``.
    tokens_col, id_col, time_col:
        The columns: ``array<string>`` or ``array<int/long>`` tokens (compared as strings;
        duplicates in a set are dropped), an integer or string id, the set's time.
    within:
        The time band of a pair, e.g. ``"10 minutes"`` (the default).
    window:
        The old spelling of ``within`` (deprecated; it keeps its meaning: times that differ by
        less than ``window``).
    metrics_dir:
        Where the operators write per-batch statistics (needed by ``share_bound``).
    parallelism:
        Workers (Spark tasks) that find the pairs; one more task merges their top-k's.
    share_bound:
        A stream with ``parallelism > 1`` and ``metrics_dir``: the driver combines the workers'
        stocks after every micro-batch into a bound that every worker prunes with
        (:class:`driftjoin.spark.topk.control.SharedBoundController`); the result is the same.
    design:
        With ``parallelism > 1``: ``"owner"`` (each worker indexes about ``1 / p`` of the window
        and joins every set with it) or ``"probe"`` (every worker indexes the whole window and
        joins ``1 / p`` of the sets: less work per worker, ``p`` times the memory;
        :mod:`driftjoin.swoop.partitioned`).

    Returns
    -------
    pyspark.sql.DataFrame
        ``kind`` (``enter``, ``leave``, ``late``, ``duplicate``), ``left_id`` (the later set of a
        self-join pair, or the R set), ``right_id``, ``similarity``, ``change_time``, ``seq`` (the
        change's position).

    Examples
    --------
    >>> from driftjoin import local_session, topk_set_join
    >>> spark = local_session(2)
    >>> sets = spark.createDataFrame([(1, ["a", "b"], 0.0), (2, ["a", "b", "c"], 1.0), (3, ["x"], 2.0)],
    ...                              "id long, tokens array<string>, ts double")
    >>> [(r.kind, r.left_id, r.right_id) for r in topk_set_join(sets, k=1, within="1 minute").collect()]
    [('enter', 2, 1)]
    """
    s = TopKSettings.check({n: v for n, v in locals().items() if n not in ("left", "right")})
    streaming = inputs_streaming(left, right)
    if s.share_bound and not streaming:
        raise SettingError("share_bound", "=True applies to streams (the bound is published between micro-batches); "
                                          "a static join runs in one batch", show_value=False)
    if s.window is not None:
        warnings.warn(f"topk_set_join(window={window!r}) is the time band of a pair, which every driftjoin operator "
                      f"now calls within=: write within={window!r} (pairs whose times differ by at most that much; "
                      "window= keeps its old meaning, less than that much, until it is removed)", DeprecationWarning,
                      stacklevel=2)
    data = _inputs(left, right, s, False)
    prepare_session(left.sparkSession, s.metrics_dir)
    plan = TopKPlan.of(s, two_stream=right is not None)
    if s.share_bound:
        from driftjoin.spark.topk.control import SharedBoundController, attach

        attach(left.sparkSession, SharedBoundController(s.metrics_dir, s.k, s.parallelism))
    id_type = data.schema["id"].dataType
    set_schema = T.StructType([T.StructField("key", T.IntegerType()), T.StructField("side", T.ByteType()),
                               T.StructField("id", id_type), T.StructField("tokens", T.ArrayType(T.StringType())),
                               T.StructField("ts", T.DoubleType())])
    out_schema = T.StructType([T.StructField("kind", T.StringType()), T.StructField("left_id", id_type),
                               T.StructField("right_id", id_type), T.StructField("similarity", T.DoubleType()),
                               T.StructField("change_time", T.LongType()), T.StructField("seq", T.LongType())])
    sets = data.mapInArrow(valid_sets, set_schema)
    if plan.parallelism == 1:
        raw = stateful_stage(sets, "key", lambda: SwoopProcessor(plan), out_schema, partitions=1)
        return remember(raw.withColumn("change_time", F.timestamp_micros("change_time")), plan)
    routed_schema = T.StructType([*set_schema.fields, T.StructField("owner", T.IntegerType())])
    worker_schema = T.StructType([
        T.StructField("mkey", T.IntegerType()), T.StructField("op", T.LongType()), T.StructField("time", T.DoubleType()),
        T.StructField("phase", T.ByteType()), T.StructField("kind", T.StringType()), T.StructField("sim", T.DoubleType()),
        T.StructField("end", T.DoubleType()), T.StructField("i", T.LongType()), T.StructField("j", T.LongType()),
        T.StructField("left_id", id_type), T.StructField("right_id", id_type)])
    routed = sets.mapInArrow(lambda batches: route_sets(plan, batches), routed_schema)
    changes = stateful_stage(routed, "key", lambda: WorkerProcessor(plan), worker_schema, partitions=plan.parallelism)
    raw = stateful_stage(changes, "mkey", lambda: MergeProcessor(plan), out_schema, partitions=plan.parallelism)
    return remember(raw.withColumn("change_time", F.timestamp_micros("change_time")), plan)


def invalid_sets(left: DataFrame, right: DataFrame | None = None, *, tokens_col: str = "tokens", id_col: str = "id",
                 time_col: str = "ts") -> DataFrame:
    """The dead-letter output of :func:`topk_set_join`: every row that cannot be a set, with why.

    A missing, unparsable or non-finite time, a missing id, missing tokens, an empty set, a
    null token. The join tests rows with the same code, so a row is in exactly one of the two
    outputs. Sets the join refuses because of the window (late, duplicate id) are rows of its
    change stream instead (kinds ``late`` and ``duplicate``), since only the join knows its
    window. Stateless: it can run as its own streaming query.

    Parameters
    ----------
    left, right:
        The join's inputs.
    tokens_col, id_col, time_col:
        The columns, as given to the join.

    Returns
    -------
    pyspark.sql.DataFrame
        ``side`` (0 left, 1 right), ``id``, ``raw`` (the row as JSON) and ``reason``.

    Examples
    --------
    >>> from driftjoin import invalid_sets, local_session
    >>> spark = local_session(2)
    >>> sets = spark.createDataFrame([(1, ["a"], 0.0), (2, [], 1.0), (3, ["b"], None)], "id long, tokens array<string>, ts double")
    >>> sorted((r.id, r.reason) for r in invalid_sets(sets).collect())
    [(2, 'empty set'), (3, 'missing time (ts)')]
    """
    s = TopKSettings.check({"tokens_col": tokens_col, "id_col": id_col, "time_col": time_col}, dead_letters=True)
    inputs_streaming(left, right)
    data = _inputs(left, right, s, True)
    prepare_session(left.sparkSession)
    schema = T.StructType([T.StructField("side", T.ByteType()), T.StructField("id", data.schema["id"].dataType),
                           T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType())])
    return data.mapInArrow(dead_sets, schema)


def current_topk(changes: DataFrame) -> DataFrame:
    """The top-k after the last change of a change stream: the pairs whose last change is ``enter``.

    Parameters
    ----------
    changes:
        A static DataFrame of :func:`topk_set_join`'s changes (e.g. its Parquet sink read back).

    Returns
    -------
    pyspark.sql.DataFrame
        ``left_id, right_id, similarity, change_time``, most similar first.

    Examples
    --------
    >>> from driftjoin import current_topk, local_session, topk_set_join
    >>> spark = local_session(2)
    >>> sets = spark.createDataFrame([(1, ["a", "b"], 0.0), (2, ["a", "b", "c"], 1.0), (3, ["a", "c"], 2.0)],
    ...                              "id long, tokens array<string>, ts double")
    >>> [(r.left_id, r.right_id) for r in current_topk(topk_set_join(sets, k=2, within="1 minute")).collect()]
    [(2, 1), (3, 2)]
    """
    from pyspark.sql.window import Window

    pairs = changes.where(F.col("kind").isin("enter", "leave"))
    last = Window.partitionBy("left_id", "right_id").orderBy(F.col("seq").desc())
    return (pairs.withColumn("_r", F.row_number().over(last)).where((F.col("_r") == 1) & (F.col("kind") == "enter"))
            .select("left_id", "right_id", "similarity", "change_time").orderBy(F.col("similarity").desc()))
