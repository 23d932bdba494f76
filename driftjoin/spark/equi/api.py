"""``equi_join``: a skew-resilient exact equi-join of two Spark DataFrames, streaming or static.

Algorithms (``algorithm=``): ``"shc"`` Streaming HyperCube (Qiu, Papadias, Yi; EDBT 2019),
``"phj"`` the parallel hash join, ``"biclique"`` Join-Biclique (Lin et al., SIGMOD 2015), and
``"spark"`` Spark's own join; ``"auto"`` chooses Spark's own join when a sample holds no heavy key
and SHC when it does (:mod:`driftjoin.hypercube.choice`). All report every pair of a left row and
a right row with equal join keys exactly once, and with ``within=W`` only pairs whose event
times differ by at most W. Rows are routed by stateless
parallel tasks from the routing tables of the driver-side control plane
(:mod:`driftjoin.spark.equi.operators`, :mod:`driftjoin.spark.equi.control`), or with
``routing="dispatcher"`` by the paper's single dispatcher (:mod:`driftjoin.spark.equi.dispatch`).
See docs/equi_join.md.

Output columns: the join key column(s) named as in ``on`` (values and types of the left side),
then every other left column as ``<left prefix><name>`` and every other right column as
``<right prefix><name>`` (prefixes default to ``"left_"`` and ``"right_"``).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.hypercube import BatchSummary, Side
from driftjoin.hypercube.choice import SPARK, EngineChoice, choose_engine
from driftjoin.hypercube.heavy import promotion_threshold
from driftjoin.hypercube.simulator import make_dispatcher
from driftjoin.hypercube.table import RoutingTable
from driftjoin.spark.equi.dispatch import (
    DispatchedWorkerProcessor,
    DispatcherProcessor,
    dispatched_schema,
    encode_payloads,
    encoded_schema,
)
from driftjoin.spark.equi.operators import (
    COUNT_SCHEMA,
    EquiPlan,
    WorkerProcessor,
    route_rows,
    routed_schema,
)
from driftjoin.spark.equi.payload import JSON_OPTIONS, PayloadLayout
from driftjoin.spark.equi.settings import ENGINES, EquiSettings
from driftjoin.spark.runtime.columns import require_column, time_seconds
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.session import prepare_session, worker_placement
from driftjoin.spark.runtime.settings import ColumnTypeError, SettingError
from driftjoin.spark.runtime.stages import inputs_streaming, stateful_stage, use_partitions

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_TIME_TYPES = (T.TimestampType, T.TimestampNTZType, T.DateType, T.NumericType)

REASON_NULL_KEY = "null join key {col!r}"

log = logging.getLogger("driftjoin")


def _check_columns(df: DataFrame, names: Sequence[str], what: str, side: str) -> None:
    for n in names:
        require_column(df, n, what, side)


def _key_type(left: DataFrame, right: DataFrame, on: tuple[str, ...]) -> str:
    """How the key travels: one integral or string or binary column as itself, anything else as JSON."""
    lt = [left.schema[c].dataType for c in on]
    rt = [right.schema[c].dataType for c in on]
    for c, a, b in zip(on, lt, rt):
        if isinstance(a, T.MapType) or isinstance(b, T.MapType):
            raise ColumnTypeError("on", f"={c!r}: join key {c!r} is a map; Spark cannot compare maps for equality, join "
                                        "on other columns", show_value=False)
        if not (a == b or (isinstance(a, _INTEGRAL) and isinstance(b, _INTEGRAL))):
            raise ColumnTypeError("on", f"={c!r}: join key {c!r} is {a.simpleString()} on the left and "
                                        f"{b.simpleString()} on the right; cast one side so both have the same type",
                                  show_value=False)
    if len(on) == 1:
        if isinstance(lt[0], _INTEGRAL):
            return "long"
        if isinstance(lt[0], T.StringType):
            return "string"
        if isinstance(lt[0], T.BinaryType):
            return "binary"
    return "string"


def _key_column(df: DataFrame, on: tuple[str, ...], key_type: str) -> Column:
    if len(on) == 1 and key_type == "long":
        return F.col(on[0]).cast("long")
    if len(on) == 1 and isinstance(df.schema[on[0]].dataType, (T.StringType, T.BinaryType)):
        return F.col(on[0])
    parts = []
    for c in on:
        dtype = df.schema[c].dataType
        col = F.col(c)
        if isinstance(dtype, _INTEGRAL):
            col = col.cast("long")
        elif isinstance(dtype, (T.FloatType, T.DoubleType)):
            col = F.when(col == 0, F.lit(0.0)).otherwise(col.cast("double"))  # -0.0 equals 0.0, like Spark's join
        parts.append(col.alias(f"k{len(parts)}"))
    return F.to_json(F.struct(*parts), JSON_OPTIONS)


def _time_column(df: DataFrame, name: str | None) -> Column:
    if name is None:
        return F.lit(0.0)
    return time_seconds(df, name, "time_col")[0]


def _reason(df: DataFrame, on: Sequence[str], time_col: str | None) -> Column:
    """Why a row cannot be joined (null when it can): the one test of the join and its dead letters.

    The first problem found: a null key column, or a missing or non-finite time (NaN, infinite:
    :func:`driftjoin.spark.runtime.columns.time_seconds`) when the join is windowed.
    """
    reason = time_seconds(df, time_col, "time_col")[1] if time_col is not None else F.lit(None).cast("string")
    for c in reversed(on):
        reason = F.when(F.col(c).isNull(), F.lit(REASON_NULL_KEY.format(col=c))).otherwise(reason)
    return reason


def _normalise(df: DataFrame, side: int, s: EquiSettings, plan: EquiPlan) -> DataFrame:
    """``side, key, ts, l, r`` of the valid rows, the row's columns in its side's struct
    (:mod:`driftjoin.spark.equi.payload`; invalid rows: :func:`invalid_equi_records`)."""
    return df.where(_reason(df, s.on, s.time_cols[side]).isNull()).select(
        F.lit(side).cast("byte").alias("side"),
        _key_column(df, s.on, plan.key_type).alias("key"),
        _time_column(df, s.time_cols[side]).alias("ts"),
        *plan.layout.struct(df, side),
    )


def _check_inputs(left: DataFrame, right: DataFrame, s: EquiSettings) -> str:
    """The checks of the inputs' columns against the settings; how the key travels (:func:`_key_type`)."""
    for df, side in ((left, "left"), (right, "right")):
        _check_columns(df, s.on, "on", side)
    key_type = _key_type(left, right, s.on)
    for df, t, side in ((left, s.time_cols[0], "left"), (right, s.time_cols[1], "right")):
        if t is None:
            continue
        _check_columns(df, [t], "time_col", side)
        if not isinstance(df.schema[t].dataType, _TIME_TYPES):
            raise ColumnTypeError("time_col", f"={t!r} of the {side} input is {df.schema[t].dataType.simpleString()}; "
                                              "use a timestamp, date or numeric (seconds) column", show_value=False)
    return key_type


def _plan(left: DataFrame, right: DataFrame, s: EquiSettings) -> EquiPlan:
    """The plan of the join: the settings, the workers the session gives, the inputs' columns; the
    rules that need the number of workers are checked here."""
    parallelism, partitions = worker_placement(left.sparkSession, s.parallelism, s.partitions)
    if s.algorithm == "biclique" and parallelism < 2:
        raise SettingError("parallelism", "must be >= 2 for algorithm='biclique': Join-Biclique needs parallelism >= 2 "
                                          "(half the workers store each side)", parallelism)
    if s.groups is not None:
        if isinstance(s.groups, bool) or not isinstance(s.groups, int) or not 1 <= s.groups <= parallelism // 2:
            raise SettingError("groups", f"must be an integer in [1, parallelism // 2] = [1, {parallelism // 2}]",
                               s.groups)
    key_type = _check_inputs(left, right, s)
    layout = PayloadLayout.of(left, right, _output_names(left, right, s.on, s.prefixes) if s.output == "rows" else ())
    streaming = left.isStreaming
    if s.algorithm == SPARK and streaming and s.within_seconds is not None:
        raise SettingError("algorithm", "='spark' joins whole streams: an interval join (within=) drops rows later than "
                                        "lateness= behind the stream, which Spark's own join does by its watermark "
                                        "instead; use algorithm='shc' (or 'auto', which chooses SHC for it)",
                           show_value=False)
    try:
        make_dispatcher("shc" if s.algorithm in ENGINES else s.algorithm, parallelism, window=s.within_seconds,
                        lateness=s.lateness_seconds, **s.dispatcher_options())
    except (TypeError, ValueError) as e:
        raise SettingError("options", f"are invalid settings for algorithm={s.algorithm!r}: {e}", show_value=False) from None
    plan = EquiPlan.of(s, parallelism=parallelism, partitions=partitions, key_type=key_type, streaming=streaming,
                       layout=layout)
    if s.algorithm == "auto" and streaming and not s.metrics_dir:
        raise SettingError("metrics_dir", "is required: equi_join(algorithm='auto') on streams may choose SHC, whose "
                                          "driver publishes its routing tables there (a directory the driver and the "
                                          "executors share, the same on every restart of the query); or use "
                                          "algorithm='spark'", show_value=False)
    if plan.controlled and not s.metrics_dir:
        raise SettingError("metrics_dir", "is required: equi_join(algorithm='shc') on streams needs metrics_dir=: the "
                                          "driver publishes SHC's routing tables there between micro-batches and "
                                          "workers move state through it (a directory the driver and the executors "
                                          "share, the same on every restart of the query); or use "
                                          "routing='dispatcher' or algorithm='phj'", show_value=False)
    return plan


def _output_names(left: DataFrame, right: DataFrame, on: tuple[str, ...],
                  prefixes: tuple[str, str]) -> list[tuple[str, str, str]]:
    """``(struct, field, output name)`` of every output column; fails on a name clash."""
    cols = [("l", c, c) for c in on]
    cols += [("l", c, prefixes[0] + c) for c in left.columns if c not in on]
    cols += [("r", c, prefixes[1] + c) for c in right.columns if c not in on]
    seen: dict[str, int] = {}
    for _, _, n in cols:
        seen[n] = seen.get(n, 0) + 1
    clash = sorted(n for n, k in seen.items() if k > 1)
    if clash:
        raise SettingError("prefixes", f"={prefixes!r}: output columns {clash} would appear twice; choose other "
                                       "prefixes=", show_value=False)
    return cols


def equi_join(
    left: DataFrame,
    right: DataFrame,
    *,
    on: str | Sequence[str],
    algorithm: str = "shc",
    parallelism: int | None = None,
    within: str | float | None = None,
    window: str | float | None = None,
    groups: int | None = None,
    time_col: str | tuple[str, str] | None = None,
    lateness: str | float = 0.0,
    prefixes: tuple[str, str] = ("left_", "right_"),
    options: Mapping[str, Any] | None = None,
    metrics_dir: str | None = None,
    output: str = "rows",
    routing: str = "parallel",
    partitions: int | None = None,
    sample: tuple[DataFrame, DataFrame] | None = None,
) -> DataFrame:
    """Exact equi-join of ``left`` and ``right`` on ``on``: every pair with equal keys, once.

    Skew-resilient (Streaming HyperCube): heavy keys are spread over a grid of workers that the
    driver adapts between micro-batches. Rows with a null key (or, for interval joins, a missing,
    NaN or infinite time) are skipped here and reported by :func:`invalid_equi_records`. Bad
    settings raise :class:`~driftjoin.spark.runtime.settings.SettingError` (a ``ValueError``;
    a column of the wrong type also a ``TypeError``) naming the setting, before any job runs.

    Parameters
    ----------
    left, right:
        Both streaming or both static.
    on:
        The key column(s), present on both sides (integral widths may differ; other types must
        match).
    algorithm:
        ``"shc"`` (Streaming HyperCube), ``"phj"`` (partitioned hash join), ``"biclique"``
        (Join-Biclique), ``"spark"`` (Spark's own join: the same rows, faster while no key is
        heavy; whole streams or static inputs) or ``"auto"``: Spark's own join when no key of
        ``sample`` (of a static input: the input itself) is heavy for SHC at ``parallelism``,
        SHC otherwise, decided once before the query starts and kept with its checkpoint
        (a stream without ``sample``, and an interval join on streams, get SHC).
    parallelism:
        Workers (default ``spark.sql.shuffle.partitions``).
    within:
        An interval join on event time ``time_col``: a pair joins iff its times differ by at
        most ``within`` (seconds or a duration like ``"10 seconds"``; the README's table of
        windows); ``None`` joins the whole streams.
    window:
        The old spelling of ``within`` (deprecated: ``window=`` means tumbling windows in the
        other operators).
    groups:
        Join-Biclique's subgroups (1 to ``parallelism // 2``, default 1).
    time_col:
        One name or a ``(left, right)`` pair; timestamp, date, or numeric seconds.
    lateness:
        How far behind the largest time of earlier micro-batches a row may be; later rows cannot
        be joined exactly and are dropped (counted as ``late`` in the workers' statistics).
    prefixes:
        Prefixes of the other left and right columns in the output.
    options:
        SHC settings ``epsilon``, ``min_heavy``, ``cap``, ``panes``
        (:class:`driftjoin.hypercube.StreamingHyperCube`).
    metrics_dir:
        Per-batch statistics of each worker and of the control plane; required for SHC on
        streams, whose control plane publishes its routing tables there (a directory the driver
        and the executors share, the same on every restart).
    output:
        ``"rows"`` (the joined rows) or ``"count"`` (``batch, worker, pairs``: one row per worker
        and micro-batch, for benchmarks).
    routing:
        ``"parallel"`` (stateless router tasks route from the tables the driver publishes) or
        ``"dispatcher"`` (the paper's single dispatcher task, kept for comparison).
    partitions:
        The Spark partitions the workers are placed on round-robin, 1 to ``parallelism``
        (default: the smaller of ``parallelism`` and the tasks Spark runs at once): workers that
        share a task lower a batch's fixed cost. Both are stored with the checkpoint.
    sample:
        A ``(left, right)`` pair of static DataFrames with the key columns (earlier data of each
        stream) whose keys are counted before the start: ``algorithm="auto"`` chooses its engine
        by them, and SHC on a whole-stream join (``"shc"``, or ``"auto"`` when it chooses SHC)
        starts with the keys heavy in them already on their grids, so a key heavy from the start
        is spread from the first micro-batch instead of after the control plane has seen two
        (the choice of work only: the pairs are the same with or without it).

    Returns
    -------
    pyspark.sql.DataFrame
        The key column(s) as named in ``on`` with the left side's values, then the other left
        columns prefixed with ``prefixes[0]``, then the other right columns prefixed with
        ``prefixes[1]`` (``output="rows"``).

    Examples
    --------
    >>> from driftjoin import equi_join, local_session
    >>> spark = local_session(2)
    >>> orders = spark.createDataFrame([(1, "a"), (2, "b"), (3, "a")], "id long, customer string")
    >>> people = spark.createDataFrame([("a", "Ada"), ("c", "Cy")], "customer string, name string")
    >>> sorted((r.customer, r.left_id, r.right_name) for r in equi_join(orders, people, on="customer", parallelism=2).collect())
    [('a', 1, 'Ada'), ('a', 3, 'Ada')]
    """
    if window is not None and within is None:
        warnings.warn(f"equi_join(window={window!r}) joins pairs whose times differ by at most that much, which every "
                      f"driftjoin operator now calls within=: write within={window!r} (window= means tumbling windows "
                      "in similarity_join and natural_join)", DeprecationWarning, stacklevel=2)
    s = EquiSettings.check({n: v for n, v in locals().items() if n in EquiSettings.names()})
    inputs_streaming(left, right, pair=True)
    plan = _plan(left, right, s)
    prepare_session(left.sparkSession, s.metrics_dir)
    data = _normalise(left, 0, s, plan).unionByName(_normalise(right, 1, s, plan))
    counted = None
    if plan.algorithm == "auto":
        plan, counted = _choose(data, plan, s)
    elif s.sample is not None and not plan.streaming:
        raise SettingError("sample", "= is for streams with algorithm='shc': a static input is counted whole; drop it",
                           show_value=False)
    elif s.sample is not None:
        counted = _key_counts(_sample_keys(s.sample, s, plan), plan, _heavy_rule(plan))
    use_partitions(data, plan.spark_partitions)
    if plan.algorithm == SPARK:
        return remember(_spark_join(left, right, s), plan)
    pairs = _dispatched(data, plan) if plan.routing == "dispatcher" else _routed(data, plan, counted)
    return remember(pairs if plan.output == "count" else plan.layout.unpack(pairs), plan)


Counted = tuple[dict[tuple[Side, Any], int], dict[Side, int]]


def _choose(data: DataFrame, plan: EquiPlan, s: EquiSettings) -> tuple[EquiPlan, Counted | None]:
    """``algorithm="auto"`` resolved before the query starts (:mod:`driftjoin.hypercube.choice`):
    the keys of ``sample=``, or of a static input itself, classified by SHC's rule; a stream
    without a sample, or an interval join on streams (which Spark's join cannot run as
    ``equi_join`` defines it), gets SHC. Returns the plan with the chosen algorithm and, when the
    input was counted (a static input or ``sample=``), its counts (SHC's table, or its seed, is
    built from them)."""
    keys = data if s.sample is None else _sample_keys(s.sample, s, plan)
    if plan.streaming and plan.window is not None:
        log.info("equi_join(algorithm='auto'): SHC (an interval join on streams)")
        return replace(plan, algorithm="shc"), None
    if s.sample is None and plan.streaming:
        log.info("equi_join(algorithm='auto'): SHC (a stream without sample=, so its skew is unknown)")
        return replace(plan, algorithm="shc"), None
    rule = _heavy_rule(plan)
    counted = _key_counts(keys, plan, rule)
    choice: EngineChoice = choose_engine(*counted, plan.parallelism, **rule)
    log.info("equi_join(algorithm='auto'): %s", choice.reason())
    # a static input with a sample is counted whole for SHC's table, as without one
    return replace(plan, algorithm=choice.algorithm), counted if plan.streaming or s.sample is None else None


def _sample_keys(sample: Any, s: EquiSettings, plan: EquiPlan) -> DataFrame:
    """``side, key`` of the rows of ``sample=`` (a (left, right) pair of static DataFrames) whose key has no null."""
    if (not isinstance(sample, (tuple, list)) or len(sample) != 2
            or not all(isinstance(df, DataFrame) and not df.isStreaming for df in sample)):
        raise SettingError("sample", "must be a (left, right) pair of static DataFrames holding the join key columns "
                                     "(e.g. spark.read of earlier data of each stream)", show_value=False)
    for df, side in zip(sample, ("left", "right")):
        _check_columns(df, s.on, "on", f"{side} sample")
    if _key_type(sample[0], sample[1], s.on) != plan.key_type:
        raise SettingError("sample", "has join key columns of other types than the inputs'; read it with the inputs' "
                                     "schema", show_value=False)
    parts = [df.where(_reason(df, s.on, None).isNull()).select(F.lit(side).cast("byte").alias("side"),
                                                               _key_column(df, s.on, plan.key_type).alias("key"))
             for side, df in enumerate(sample)]
    return parts[0].unionByName(parts[1])


def _heavy_rule(plan: EquiPlan) -> dict[str, Any]:
    """SHC's ``epsilon`` and ``min_heavy`` at the plan's workers, as its planner resolves them."""
    tracker = plan.planner().shc.tracker
    return {"epsilon": tracker.epsilon, "min_heavy": tracker.min_heavy}


def _key_counts(keys: DataFrame, plan: EquiPlan, rule: Mapping[str, Any]) -> Counted:
    """Tuples per side of every key of ``keys`` (``side``, ``key``) that can be heavy at the plan's
    workers under ``rule`` (:func:`_heavy_rule`: ``N(b) > (1/p - epsilon/2) N``), exactly, and the
    sides' totals: two small jobs."""
    totals = {Side(int(r["side"])): int(r["count"]) for r in keys.groupBy("side").count().collect()}
    n = sum(totals.values())
    floor = max(promotion_threshold(n, plan.parallelism, rule["epsilon"]) - 1, rule["min_heavy"] - 1, 0)
    per_key = keys.groupBy("key").agg(F.sum((F.col("side") == 0).cast("long")).alias("r"),
                                      F.sum((F.col("side") == 1).cast("long")).alias("s"))
    counts = {}
    for row in per_key.where(F.col("r") + F.col("s") > F.lit(floor)).collect():
        key = bytes(row["key"]) if plan.key_type == "binary" else row["key"]
        for side, m in ((Side.R, row["r"]), (Side.S, row["s"])):
            if m:
                counts[(side, key)] = int(m)
    return counts, totals


def _qualified(alias: str, name: str) -> Column:
    return F.col(f"{alias}.`{name.replace('`', '``')}`")


#: The event time in seconds of an interval join's rows in Spark's own join.
_TIME = "__driftjoin_time"


def _spark_join(left: DataFrame, right: DataFrame, s: EquiSettings) -> DataFrame:
    """Spark's own inner join of the rows ``equi_join`` can join (:func:`_reason`), its columns named
    and ordered as ``equi_join``'s; an interval join compares the times as :func:`_time_column`
    gives them (static inputs: a stream's interval join is SHC's)."""
    sides = []
    for side, df in enumerate((left, right)):
        valid = df.where(_reason(df, s.on, s.time_cols[side]).isNull())
        if s.within_seconds is not None:
            valid = valid.withColumn(_TIME, _time_column(df, s.time_cols[side]))
        sides.append(valid.alias("lr"[side]))
    cond = [_qualified("l", c) == _qualified("r", c) for c in s.on]
    if s.within_seconds is not None:
        cond.append(F.abs(_qualified("l", _TIME) - _qualified("r", _TIME)) <= F.lit(s.within_seconds))
    joined = sides[0].join(sides[1], cond, "inner")
    return joined.select(*[_qualified(struct, field).alias(name)
                           for struct, field, name in _output_names(left, right, s.on, s.prefixes)])


def _routed(data: DataFrame, plan: EquiPlan, counted: Counted | None = None) -> DataFrame:
    """Stateless parallel routers, then the ``p`` workers (:mod:`driftjoin.spark.equi.operators`);
    SHC's control plane runs on the driver (streams; seeded with ``counted``, the counts of
    ``sample=``, when given) or decides once before the run (static, from ``counted`` when
    ``algorithm="auto"`` has counted the input already)."""
    out_schema = plan.layout.output_schema() if plan.output == "rows" else COUNT_SCHEMA
    if plan.controlled:
        from driftjoin.spark.equi.control import EquiRoutingController, attach

        if counted is not None and plan.window is None:
            plan = replace(plan, seed=_summary(counted))
        attach(data.sparkSession, EquiRoutingController(plan))
    elif plan.algorithm == "shc" and not data.isStreaming:
        plan = replace(plan, static_table=_static_table(counted or _key_counts(data, plan, _heavy_rule(plan)), plan))
    routed = data.mapInArrow(lambda batches: route_rows(plan, batches), routed_schema())
    return stateful_stage(routed, "wkey", lambda: WorkerProcessor(plan), out_schema, partitions=plan.spark_partitions)


def _dispatched(data: DataFrame, plan: EquiPlan) -> DataFrame:
    """The paper's single dispatcher task, then the ``p`` workers (:mod:`driftjoin.spark.equi.dispatch`)."""
    out_schema = plan.layout.output_schema() if plan.output == "rows" else COUNT_SCHEMA
    data = data.mapInArrow(encode_payloads, encoded_schema(plan.key_type)).withColumn("dkey", F.lit(PLAN_KEY))
    tasks = stateful_stage(data, "dkey", lambda: DispatcherProcessor(plan), dispatched_schema(plan.key_type),
                           partitions=plan.spark_partitions)
    return stateful_stage(tasks, "wkey", lambda: DispatchedWorkerProcessor(plan), out_schema,
                          partitions=plan.spark_partitions)


def _static_table(counted: Counted, plan: EquiPlan) -> RoutingTable:
    """SHC's table for a static input, decided on the driver before routing: the input is one
    batch, so the control plane folds its exact counts (:func:`_key_counts`: only values that can
    be heavy are collected)."""
    planner = plan.planner()
    planner.fold(0, _summary(counted))
    return planner.table


def _summary(counted: Counted) -> BatchSummary:
    """Exact counts of keys as the counts of one batch (pane 0)."""
    counts, totals = counted
    return BatchSummary({(side, key, 0): m for (side, key), m in counts.items()}, None, None,
                        {(side, 0): m for side, m in totals.items()})


def invalid_equi_records(
    left: DataFrame,
    right: DataFrame,
    *,
    on: str | Sequence[str],
    time_col: str | tuple[str, str] | None = None,
) -> DataFrame:
    """The dead-letter output of :func:`equi_join`: every input row it cannot join, with why.

    The reason is the first problem found: a null key column, or a missing, NaN or infinite
    ``time_col`` when given. Stateless, so it runs as its own streaming query next to the join.
    Late rows of interval joins are reported in the join's statistics instead.

    Parameters
    ----------
    left, right:
        The join's inputs.
    on, time_col:
        As given to the join.

    Returns
    -------
    pyspark.sql.DataFrame
        ``side`` (0 left, 1 right), ``raw`` (the row as JSON) and ``reason``.

    Examples
    --------
    >>> from driftjoin import invalid_equi_records, local_session
    >>> spark = local_session(2)
    >>> left = spark.createDataFrame([(1, "a"), (2, None)], "id long, k string")
    >>> right = spark.createDataFrame([("a", 5)], "k string, v long")
    >>> [(r.side, r.reason) for r in invalid_equi_records(left, right, on="k").collect()]
    [(0, "null join key 'k'")]
    """
    s = EquiSettings.check({"on": on, "time_col": time_col}, dead_letters=True)
    inputs_streaming(left, right, pair=True)
    _check_inputs(left, right, s)
    prepare_session(left.sparkSession)
    out = []
    for side, df in ((0, left), (1, right)):
        reason = _reason(df, s.on, s.time_cols[side])
        out.append(df.select(
            F.lit(side).cast("byte").alias("side"),
            F.to_json(F.struct(*[F.col(c) for c in df.columns]), JSON_OPTIONS).alias("raw"),
            reason.alias("reason"),
        ).where(F.col("reason").isNotNull()))
    return out[0].unionByName(out[1])
