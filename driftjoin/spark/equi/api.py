"""``equi_join``: a skew-resilient exact equi-join of two Spark DataFrames, streaming or static.

Algorithms (``algorithm=``): ``"shc"`` Streaming HyperCube (Qiu, Papadias, Yi; EDBT 2019),
``"phj"`` the parallel hash join, ``"biclique"`` Join-Biclique (Lin et al., SIGMOD 2015). All
three report every pair of a left row and a right row with equal join keys exactly once, and
with ``within=W`` only pairs whose event times differ by at most W. Rows are routed by stateless
parallel tasks from the routing tables of the driver-side control plane
(:mod:`driftjoin.spark.equi.operators`, :mod:`driftjoin.spark.equi.control`), or with
``routing="dispatcher"`` by the paper's single dispatcher (:mod:`driftjoin.spark.equi.dispatch`).
See docs/equi_join.md.

Output columns: the join key column(s) named as in ``on`` (values and types of the left side),
then every other left column as ``<left prefix><name>`` and every other right column as
``<right prefix><name>`` (prefixes default to ``"left_"`` and ``"right_"``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.durations import parse_duration
from driftjoin.hypercube import BatchSummary, Side
from driftjoin.hypercube.planner import RoutingPlanner
from driftjoin.hypercube.simulator import ALGORITHMS, make_dispatcher
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
from driftjoin.spark.runtime.columns import time_seconds
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.session import (
    prepare_for_stateful,
    prepare_session,
    worker_placement,
)
from driftjoin.spark.runtime.static import run_static

#: ``routing=``: stateless parallel routers fed by the driver's control plane, or the paper's one dispatcher
ROUTINGS = ("parallel", "dispatcher")

_INTEGRAL = (T.ByteType, T.ShortType, T.IntegerType, T.LongType)
_TIME_TYPES = (T.TimestampType, T.TimestampNTZType, T.DateType, T.NumericType)

REASON_NULL_KEY = "null join key {col!r}"


@dataclass(frozen=True)
class _Spec:
    """A validated join: column names, how keys and times are read, and the operator plan."""

    on: tuple[str, ...]
    key_type: str
    time_cols: tuple[str | None, str | None]
    prefixes: tuple[str, str]
    plan: EquiPlan


def _as_names(on: Any) -> tuple[str, ...]:
    names = (on,) if isinstance(on, str) else tuple(on) if isinstance(on, Sequence) else ()
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise ValueError(f"on={on!r}: give the join key column name, or a list of distinct names (composite key)")
    return names


def _check_columns(df: DataFrame, names: Sequence[str], what: str, side: str) -> None:
    for n in names:
        if n not in df.columns:
            raise ValueError(f"{what}={n!r} is not a column of the {side} input; its columns are {df.columns}")


def _key_type(left: DataFrame, right: DataFrame, on: tuple[str, ...]) -> str:
    """How the key travels: one integral or string or binary column as itself, anything else as JSON."""
    lt = [left.schema[c].dataType for c in on]
    rt = [right.schema[c].dataType for c in on]
    for c, a, b in zip(on, lt, rt):
        if isinstance(a, T.MapType) or isinstance(b, T.MapType):
            raise TypeError(f"join key {c!r} is a map; Spark cannot compare maps for equality, join on other columns")
        if not (a == b or (isinstance(a, _INTEGRAL) and isinstance(b, _INTEGRAL))):
            raise TypeError(
                f"join key {c!r} is {a.simpleString()} on the left and {b.simpleString()} on the right; "
                f"cast one side so both have the same type")
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


def _normalise(df: DataFrame, side: int, spec: _Spec) -> DataFrame:
    """``side, key, ts, l, r`` of the valid rows, the row's columns in its side's struct
    (:mod:`driftjoin.spark.equi.payload`; invalid rows: :func:`invalid_equi_records`)."""
    return df.where(_reason(df, spec.on, spec.time_cols[side]).isNull()).select(
        F.lit(side).cast("byte").alias("side"),
        _key_column(df, spec.on, spec.key_type).alias("key"),
        _time_column(df, spec.time_cols[side]).alias("ts"),
        *spec.plan.layout.struct(df, side),
    )


def _seconds(value: Any, what: str, *, zero_ok: bool) -> float:
    if zero_ok and isinstance(value, (int, float)) and value == 0:
        return 0.0
    if isinstance(value, (int, float)) and not math.isfinite(value):
        raise ValueError(f"{what} must be a finite number of seconds or a duration like '30 seconds', got {value!r}")
    return parse_duration(value, what)


def _spec(left: DataFrame, right: DataFrame, *, on: Any, algorithm: str, parallelism: Any, within: Any,
          groups: Any, time_col: Any, lateness: Any, prefixes: Any, options: Mapping[str, Any] | None,
          metrics_dir: str | None, output: str, routing: str = "parallel", partitions: Any = None) -> _Spec:
    if not isinstance(left, DataFrame) or not isinstance(right, DataFrame):
        raise TypeError("equi_join(left, right, on=...) needs two DataFrames")
    if left.isStreaming != right.isStreaming:
        raise ValueError("left and right must both be streaming or both static")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"algorithm={algorithm!r} is unknown; use one of {sorted(ALGORITHMS)}")
    if routing not in ROUTINGS:
        raise ValueError(f"routing={routing!r} is unknown; use 'parallel' (stateless routers, the default) or "
                         "'dispatcher' (the paper's single dispatcher task)")
    parallelism, partitions = worker_placement(left.sparkSession, parallelism, partitions)
    opts = dict(options or {})
    if algorithm == "biclique" and parallelism < 2:
        raise ValueError("Join-Biclique needs parallelism >= 2 (half the workers store each side)")
    if groups is not None:
        if algorithm != "biclique":
            raise ValueError(f"groups= is a Join-Biclique setting; drop it or use algorithm='biclique' (got algorithm={algorithm!r})")
        if isinstance(groups, bool) or not isinstance(groups, int) or not 1 <= groups <= parallelism // 2:
            raise ValueError(f"groups must be an integer in [1, parallelism // 2] = [1, {parallelism // 2}], got {groups!r}")
        opts["groups"] = groups
    names = _as_names(on)
    _check_columns(left, names, "on", "left")
    _check_columns(right, names, "on", "right")
    key_type = _key_type(left, right, names)
    if within is None:
        if time_col is not None:
            raise ValueError("time_col= is only used by interval joins; also pass within= (e.g. within='10 seconds') or drop time_col")
        if lateness not in (0, 0.0, None):
            raise ValueError("lateness= is only used by interval joins; also pass within= or drop lateness")
        window_s, lateness_s, times = None, 0.0, (None, None)
    else:
        window_s = _seconds(within, "within", zero_ok=True)
        if time_col is None:
            raise ValueError("within= needs time_col= (the event-time column of both sides, or a (left, right) pair of names)")
        times = (time_col, time_col) if isinstance(time_col, str) else tuple(time_col)
        if len(times) != 2 or not all(isinstance(t, str) for t in times):
            raise ValueError(f"time_col={time_col!r}: give one column name, or a (left, right) pair of names")
        for df, t, side in ((left, times[0], "left"), (right, times[1], "right")):
            _check_columns(df, [t], "time_col", side)
            if not isinstance(df.schema[t].dataType, _TIME_TYPES):
                raise TypeError(f"time_col={t!r} of the {side} input is {df.schema[t].dataType.simpleString()}; "
                                f"use a timestamp, date or numeric (seconds) column")
        lateness_s = _seconds(lateness if lateness is not None else 0, "lateness", zero_ok=True)
    if output not in ("rows", "count"):
        raise ValueError(f"output={output!r}: use 'rows' (the joined rows) or 'count' (pairs per worker and batch)")
    if (not isinstance(prefixes, (tuple, list)) or len(prefixes) != 2
            or not all(isinstance(p, str) for p in prefixes) or prefixes[0] == prefixes[1]):
        raise ValueError(f"prefixes={prefixes!r}: give two different strings for the left and right columns, e.g. ('l_', 'r_')")
    prefixes = (prefixes[0], prefixes[1])
    layout = PayloadLayout.of(left, right, _output_names(left, right, names, prefixes) if output == "rows" else ())
    plan = EquiPlan(algorithm, parallelism, key_type, window_s, lateness_s, tuple(sorted(opts.items())), metrics_dir, output,
                    left.isStreaming, routing=routing, layout=layout, partitions=partitions)
    try:
        make_dispatcher(algorithm, parallelism, window=window_s, lateness=lateness_s, **opts)
    except (TypeError, ValueError) as e:
        raise ValueError(f"invalid settings for algorithm={algorithm!r}: {e}") from None
    if plan.controlled and not metrics_dir:
        raise ValueError("equi_join(algorithm='shc') on streams needs metrics_dir=: the driver publishes SHC's routing "
                         "tables there between micro-batches and workers move state through it (a directory the driver "
                         "and the executors share, the same on every restart of the query); or use routing='dispatcher' "
                         "or algorithm='phj'")
    return _Spec(names, key_type, times, prefixes, plan)


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
        raise ValueError(f"output columns {clash} would appear twice; choose other prefixes= (now {prefixes!r})")
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
) -> DataFrame:
    """Exact equi-join of ``left`` and ``right`` on ``on``: every pair with equal keys, once.

    Skew-resilient (Streaming HyperCube): heavy keys are spread over a grid of workers that the
    driver adapts between micro-batches. Rows with a null key (or, for interval joins, a missing,
    NaN or infinite time) are skipped here and reported by :func:`invalid_equi_records`. Bad
    settings raise ``ValueError``/``TypeError`` before any job runs.

    Parameters
    ----------
    left, right:
        Both streaming or both static.
    on:
        The key column(s), present on both sides (integral widths may differ; other types must
        match).
    algorithm:
        ``"shc"`` (Streaming HyperCube), ``"phj"`` (partitioned hash join) or ``"biclique"``
        (Join-Biclique).
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
    prepare_session(left.sparkSession, metrics_dir)
    if window is not None:
        if within is not None:
            raise ValueError("equi_join takes within= (pairs whose times differ by at most that much); window= is its "
                             "old spelling: give within= only")
        warnings.warn(f"equi_join(window={window!r}) joins pairs whose times differ by at most that much, which every "
                      f"driftjoin operator now calls within=: write within={window!r} (window= means tumbling windows "
                      "in similarity_join and natural_join)", DeprecationWarning, stacklevel=2)
        within = window
    spec = _spec(left, right, on=on, algorithm=algorithm, parallelism=parallelism, within=within, groups=groups,
                 time_col=time_col, lateness=lateness, prefixes=prefixes, options=options,
                 metrics_dir=metrics_dir, output=output, routing=routing, partitions=partitions)
    plan = spec.plan
    spark = left.sparkSession
    data = _normalise(left, 0, spec).unionByName(_normalise(right, 1, spec))
    if data.isStreaming:
        prepare_for_stateful(spark, plan.spark_partitions)
    else:
        spark.conf.set("spark.sql.shuffle.partitions", str(plan.spark_partitions))
    pairs = _dispatched(data, plan) if plan.routing == "dispatcher" else _routed(data, plan)
    return remember(pairs if plan.output == "count" else plan.layout.unpack(pairs), plan)


def _routed(data: DataFrame, plan: EquiPlan) -> DataFrame:
    """Stateless parallel routers, then the ``p`` workers (:mod:`driftjoin.spark.equi.operators`);
    SHC's control plane runs on the driver (streams) or decides once before the run (static)."""
    out_schema = plan.layout.output_schema() if plan.output == "rows" else COUNT_SCHEMA
    if plan.controlled:
        from driftjoin.spark.equi.control import EquiRoutingController, attach

        attach(data.sparkSession, EquiRoutingController(plan))
    elif plan.algorithm == "shc" and not data.isStreaming:
        plan = replace(plan, static_table=_static_table(data, plan))
    routed = data.mapInArrow(lambda batches: route_rows(plan, batches), routed_schema())
    if data.isStreaming:
        return routed.groupBy("wkey").transformWithStateInPandas(WorkerProcessor(plan), out_schema, "Append", "None")
    return routed.groupBy("wkey").applyInPandas(lambda k, pdf: run_static(WorkerProcessor(plan), k, pdf), out_schema)


def _dispatched(data: DataFrame, plan: EquiPlan) -> DataFrame:
    """The paper's single dispatcher task, then the ``p`` workers (:mod:`driftjoin.spark.equi.dispatch`)."""
    out_schema = plan.layout.output_schema() if plan.output == "rows" else COUNT_SCHEMA
    data = data.mapInArrow(encode_payloads, encoded_schema(plan.key_type)).withColumn("dkey", F.lit(PLAN_KEY))
    schema = dispatched_schema(plan.key_type)
    if data.isStreaming:
        tasks = data.groupBy("dkey").transformWithStateInPandas(DispatcherProcessor(plan), schema, "Append", "None")
        return tasks.groupBy("wkey").transformWithStateInPandas(DispatchedWorkerProcessor(plan), out_schema, "Append",
                                                                "None")
    tasks = data.groupBy("dkey").applyInPandas(lambda k, pdf: run_static(DispatcherProcessor(plan), k, pdf), schema)
    return tasks.groupBy("wkey").applyInPandas(lambda k, pdf: run_static(DispatchedWorkerProcessor(plan), k, pdf),
                                               out_schema)


def _static_table(data: DataFrame, plan: EquiPlan) -> RoutingTable:
    """SHC's table for a static input, decided on the driver before routing: the input is one
    batch, so the control plane folds its exact counts first (only values that can be heavy,
    ``N(b) > (1/p - epsilon/2) N``, are collected)."""
    planner = RoutingPlanner(plan.parallelism, window=plan.window, lateness=plan.lateness, **plan.shc_options())
    totals = {int(r["side"]): int(r["count"]) for r in data.groupBy("side").count().collect()}
    n = sum(totals.values())
    tracker = planner.shc.tracker
    floor = max((1.0 / plan.parallelism - tracker.epsilon / 2) * n - 1, tracker.min_heavy - 1, 0)
    per_key = data.groupBy("key").agg(F.sum((F.col("side") == 0).cast("long")).alias("r"),
                                      F.sum((F.col("side") == 1).cast("long")).alias("s"))
    counts = {}
    for row in per_key.where(F.col("r") + F.col("s") > F.lit(floor)).collect():
        key = bytes(row["key"]) if plan.key_type == "binary" else row["key"]
        for side, m in ((Side.R, row["r"]), (Side.S, row["s"])):
            if m:
                counts[(side, key, 0)] = int(m)
    planner.fold(0, BatchSummary(counts, None, None, {(Side(s), 0): m for s, m in totals.items()}))
    return planner.table


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
    prepare_session(left.sparkSession)
    names = _as_names(on)
    _check_columns(left, names, "on", "left")
    _check_columns(right, names, "on", "right")
    times = (None, None) if time_col is None else (time_col, time_col) if isinstance(time_col, str) else tuple(time_col)
    out = []
    for side, df in ((0, left), (1, right)):
        t = times[side]
        if t is not None:
            _check_columns(df, [t], "time_col", "left" if side == 0 else "right")
        reason = _reason(df, names, t)
        out.append(df.select(
            F.lit(side).cast("byte").alias("side"),
            F.to_json(F.struct(*[F.col(c) for c in df.columns]), JSON_OPTIONS).alias("raw"),
            reason.alias("reason"),
        ).where(F.col("reason").isNotNull()))
    return out[0].unionByName(out[1])
