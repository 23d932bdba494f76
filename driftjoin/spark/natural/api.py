"""``natural_join``: the schema-free natural join of JSON document streams on Spark.

Data path (one micro-batch, ``routing="parallel"``, the default)::

    docs (id, JSON text | struct)  side 0 ─┐
    other                          side 1 ─┴ select side, id, doc, time; unionByName
      │ mapInArrow(route_documents)   in every input task, statelessly: parse + flatten, window,
      │                               the document's candidate fits (the newest routing table
      │                               the control plane published) and its mask under each;
      │                               one row per joiner in the union of the masks, and one
      │                               heartbeat per joiner (the task's view, window counts,
      │                               largest time, count-window sort keys)
      ▼ (jkey, kind, seq, side, id, window, time, route, avps, unknown)
    groupBy(jkey).transformWithStateInPandas(JoinerProcessor)        [m joiners + the plan key]
      │ every joiner derives the same window table from the heartbeats (which windows open,
      │ with which fit; count-window numbers; the window clock), keeps each document under the
      │ mask of its window's fit, joins it (FP-tree, hash, nested loop) and reports a pair only
      │ if it is the lowest joiner both documents were sent to
      ▼ (left_id, right_id, window[, merged])
    statistics (per joiner and batch) → NaturalPartitionController on the driver
      (driftjoin/spark/natural/control.py): window quality, theta refits on the joiners' samples,
      delta keys from the sightings → a new routing table (driftjoin/spark/natural/table.py)

Only the joiners hold state. The control plane decides between batches and its tables may
reach some tasks of a batch and not others: :mod:`driftjoin.spark.natural.table` has the rule
that keeps every window routed by one fit anyway, ``docs/natural_join.md`` the whole argument.
``routing="assigner"`` keeps the paper's single Assigner (:mod:`driftjoin.spark.natural.assigner`)
in front of the same joiners. A static DataFrame is fitted on a sample on the driver and routed
in one pass by the same routers, then joined by the same joiners through ``applyInPandas``.
"""

from __future__ import annotations

import json
import pickle
import tempfile
from collections import Counter
from dataclasses import replace
from typing import Any, Iterator

import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.schemafree.document import Document
from driftjoin.schemafree.metrics import gini
from driftjoin.spark.natural.assigner import AssignerProcessor
from driftjoin.spark.natural.joiners import JoinerProcessor
from driftjoin.spark.natural.plan import (
    ASSIGNER_OP,
    JOINER_OP,
    InvalidDocument,
    NaturalPlan,
    check_rows,
    dead_letter_batches,
    parse_batches,
    parse_document,
)
from driftjoin.spark.natural.routers import route_documents
from driftjoin.spark.natural.settings import NaturalSettings
from driftjoin.spark.natural.table import (
    doc_seq,
)
from driftjoin.spark.runtime.columns import common_id_type, require_column
from driftjoin.spark.runtime.connect import master, shares_files
from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.session import default_workers, prepare_session
from driftjoin.spark.runtime.settings import ColumnTypeError, SettingError
from driftjoin.spark.runtime.stages import inputs_streaming, stateful_stage
from driftjoin.spark.runtime.stats import read_stats

# --------------------------------------------------------------------------------------------
# The operator
# --------------------------------------------------------------------------------------------


def _doc_column(df: DataFrame, name: str) -> Column:
    require_column(df, name, "doc_col")
    dtype = df.schema[name].dataType
    if isinstance(dtype, T.StringType):
        return F.col(name)
    if isinstance(dtype, (T.StructType, T.MapType)):
        return F.to_json(F.col(name))
    if isinstance(dtype, T.BinaryType):
        return F.col(name).cast("string")
    raise ColumnTypeError("doc_col", f"={name!r} has type {dtype.simpleString()}; use a string of JSON text, a struct "
                                     "or a map", show_value=False)


def _time_column(df: DataFrame, s: NaturalSettings) -> Column:
    if s.time_col is None:
        if s.window_kind == "time":
            return F.current_timestamp().cast("double")  # the micro-batch time
        return F.lit(None).cast("double")
    require_column(df, s.time_col, "time_col")
    dtype = df.schema[s.time_col].dataType
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        return F.col(s.time_col).cast("timestamp").cast("double")
    if isinstance(dtype, T.NumericType):
        return F.col(s.time_col).cast("double")
    raise ColumnTypeError("time_col", f"={s.time_col!r} has type {dtype.simpleString()}; use a timestamp or a number "
                                      "of seconds", show_value=False)


def _inputs(docs: DataFrame, other: DataFrame | None, s: NaturalSettings, with_raw: bool) -> DataFrame:
    """Both inputs' rows as the routers read them (``side, id, doc, time[, raw]``), after the
    checks of their columns (a :class:`SettingError` before any job)."""
    id_type = common_id_type(docs, other, s.id_col)
    frames = [_normalise(df, side, s, id_type, with_raw) for side, df in enumerate((docs, other)) if df is not None]
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


def _normalise(df: DataFrame, side: int, s: NaturalSettings, id_type: T.DataType, with_raw: bool) -> DataFrame:
    cols = [
        F.lit(side).cast("byte").alias("side"),
        F.col(s.id_col).cast(id_type).alias("id"),
        _doc_column(df, s.doc_col).alias("doc"),
        _time_column(df, s).alias("time"),
    ]
    if with_raw:
        row = F.struct(*[F.col(c) for c in df.columns])
        cols.append(F.to_json(row, {"ignoreNullFields": "false"}).alias("raw"))
    return df.select(*cols)


def _sample_documents(sample: object, s: NaturalSettings) -> list[Document]:
    if isinstance(sample, DataFrame):
        if sample.isStreaming:
            raise SettingError("sample", "= must be a static DataFrame or a list of documents, not a stream",
                               show_value=False)
        if s.doc_col not in sample.columns:
            raise SettingError("sample", f"= has no column {s.doc_col!r} (doc_col); columns are {sample.columns}",
                               show_value=False)
        texts = [r[0] for r in sample.select(_doc_column(sample, s.doc_col)).limit(s.sample_size).collect()]
    elif isinstance(sample, (list, tuple)):
        texts = [d if isinstance(d, (str, bytes)) or d is None else json.dumps(d) for d in sample]
    else:
        raise SettingError("sample", "= must be a list of documents (dicts or JSON text) or a static DataFrame with "
                                     "doc_col", show_value=False)
    docs = []
    for i, text in enumerate(texts):
        try:
            avps, stamp = parse_document(text, s.time_attribute)
        except InvalidDocument:
            continue
        docs.append(Document(i, avps, stamp))
    if not docs:
        raise SettingError("sample", "= holds no valid JSON object; pass documents to fit the partitions on, or "
                                     "sample=None to fit on the first window", show_value=False)
    return docs


def _schemas(plan: NaturalPlan, id_type: T.DataType) -> tuple[T.StructType, T.StructType, T.StructType, T.StructType]:
    parsed = T.StructType([
        T.StructField("akey", T.IntegerType()), T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        T.StructField("time", T.DoubleType()), T.StructField("avps", T.StringType()),
    ])
    routed = T.StructType([
        T.StructField("jkey", T.IntegerType()), T.StructField("kind", T.ByteType()), T.StructField("seq", T.LongType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("window", T.LongType()),
        T.StructField("time", T.DoubleType()), T.StructField("route", T.StringType()),
        T.StructField("avps", T.StringType()), T.StructField("unknown", T.StringType()),
    ])
    keyed = T.StructType([T.StructField("seq", T.LongType()), T.StructField("avps", T.StringType())])
    fields = [T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("window", T.LongType())]
    if plan.merged:
        fields.append(T.StructField("merged", T.StringType()))
    return parsed, routed, keyed, T.StructType(fields)


def sample_rows(plan: NaturalPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Valid documents as (number, flat pairs as JSON): the driver's sample of a static input is
    the ``sample_size`` of smallest number (a uniform sample, the same on every run)."""
    for batch in batches:
        _, texts, _, times = check_rows(plan, batch)
        sides, ids = batch.column("side").to_pylist(), batch.column("id").to_pylist()
        keep = [i for i, t in enumerate(texts) if t is not None]
        if keep:
            yield pa.RecordBatch.from_arrays(
                [pa.array([doc_seq(sides[i], ids[i], times[i], texts[i]) for i in keep], pa.int64()),  # type: ignore[arg-type]
                 pa.array([texts[i] for i in keep], pa.string())], names=["seq", "avps"])


def _control_dir(spark: Any, metrics_dir: str | None) -> str:
    """Where a stream's decisions and statistics go: ``metrics_dir``, else (local mode only) a
    new temporary directory."""
    if metrics_dir:
        return metrics_dir
    if not shares_files(spark):
        raise SettingError("metrics_dir", f"is required for natural_join on a cluster ({master(spark)}), or on a Spark "
                                          "Connect server on another machine (a directory this process, the driver and "
                                          "the executors share, e.g. on HDFS or S3): the control plane publishes its "
                                          "partitionings there", show_value=False)
    return tempfile.mkdtemp(prefix="driftjoin-natural-")


def natural_join(
    docs: DataFrame,
    other: DataFrame | None = None,
    *,
    window: object = "1 minute",
    slide: object = None,
    within: object = None,
    partitions: int | None = None,
    partitioner: str = "value",
    local_join: str = "fptree",
    id_col: str = "id",
    doc_col: str = "doc",
    time_col: str | None = None,
    watermark: str | None = None,
    merged: bool = False,
    sample: object = None,
    delta: int = 3,
    theta: float = 0.2,
    creators: int = 1,
    expand: bool = True,
    sample_size: int = 2000,
    seed: int = 0,
    metrics_dir: str | None = None,
    routing: str = "parallel",
) -> DataFrame:
    """Exact natural join of schema-free JSON documents per tumbling window, streaming or static.

    Two documents join when they share at least one attribute and agree on every attribute they
    share (nested objects are flattened to dotted paths, arrays are atomic values, nulls are
    absent; :mod:`driftjoin.schemafree.document`). Rows that cannot be joined are skipped;
    :func:`invalid_documents` lists them. Per-window metrics go to ``metrics_dir``
    (:func:`natural_join_metrics`).

    Parameters
    ----------
    docs, other:
        Inputs with an id column (integer or string, unique) and a document column, both
        streaming or both static. ``other=None`` joins ``docs`` with itself: each unordered pair
        once, ``left_id < right_id``; with ``other`` only pairs across the two inputs.
    window:
        A document count (``1000`` or ``CountWindow(1000)``; a micro-batch's documents in order
        of ``time_col`` if given, then id), a duration (``"1 minute"``) over ``time_col`` (event
        time) or, without it, over the micro-batch time, or ``TimeWindow(length, attribute)``
        with the time in a JSON attribute. A static input with a duration and no ``time_col`` is
        one window. Windows are tumbling only: ``slide=`` (sliding windows) and ``within=`` (an
        interval join), which ``similarity_join`` takes (the README's table of windows), are
        refused.
    partitions:
        Joiners (default ``spark.sql.shuffle.partitions``).
    partitioner:
        ``"value"`` (each document to one joiner by the values of attributes almost every
        document carries, the others to all joiners; association groups where no such
        attributes divide the work), or the paper's ``"ag"`` (association groups), ``"sc"``
        (set cover), ``"ds"`` (disjoint sets).
    local_join:
        ``"fptree"``, ``"hash"`` or ``"nested"`` (all exact).
    id_col, doc_col, time_col:
        The columns: id, document (JSON text, or a struct/map converted with ``to_json``), and
        the optional event time of duration windows.
    watermark:
        How late a document may arrive in event-time windows (default 0).
    merged:
        Also output the union of both documents as flat JSON.
    sample:
        Documents (a list or a static DataFrame like the stream) to fit the first partitioning
        on before the start; without it a stream's first windows go to every joiner until the
        first fit.
    delta, theta, creators, expand:
        The partitioner's refits: updated by ``delta`` and refitted between windows when
        replication or maximal load grows by more than ``theta``.
    sample_size, seed:
        The documents drawn from a static input to fit on, and their seed.
    metrics_dir:
        Statistics and the published partitionings (a new temporary directory in local mode when
        none is given; on a cluster a directory the driver and executors share).
    routing:
        ``"parallel"`` (every input task routes by the partitionings a controller on the driver
        publishes) or ``"assigner"`` (the paper's single Assigner task).

    Returns
    -------
    pyspark.sql.DataFrame
        ``left_id, right_id, window`` (the window's index: ``floor(time / length)`` or
        ``position // size``), with a duration window also ``window_start, window_end``
        (timestamps, as ``similarity_join`` gives them), and ``merged`` when ``merged=True``.

    Examples
    --------
    >>> from driftjoin import local_session, natural_join
    >>> spark = local_session(2)
    >>> docs = spark.createDataFrame([(1, '{"city": "Graz", "zip": 8010}'), (2, '{"city": "Graz"}'),
    ...                               (3, '{"city": "Wien", "zip": 1010}')], "id long, doc string")
    >>> [(r.left_id, r.right_id) for r in natural_join(docs, window=100, partitions=2).collect()]
    [(1, 2)]
    """
    s = NaturalSettings.check({n: v for n, v in locals().items() if n in NaturalSettings.names()})
    streaming = inputs_streaming(docs, other, ("docs", "other"))
    data = _inputs(docs, other, s, False)
    spark = docs.sparkSession
    prepare_session(spark, s.metrics_dir)
    partitions = s.partitions or default_workers(spark)
    plan = NaturalPlan.of(s, partitions=partitions, two_streams=other is not None)
    id_is_str = isinstance(data.schema["id"].dataType, T.StringType)
    fit_docs = _sample_documents(sample, s) if sample is not None else None
    parsed_schema, routed_schema, keyed_schema, pair_schema = _schemas(plan, data.schema["id"].dataType)
    if s.routing == "parallel" and not streaming and fit_docs is None:
        drawn = data.mapInArrow(lambda it: sample_rows(plan, it), keyed_schema).orderBy("seq").limit(plan.sample_size)
        fit_docs = [Document(r.seq, json.loads(r.avps)) for r in drawn.collect()]
    if fit_docs:
        fitted = plan.new_partitioner()
        fitted.fit(fit_docs)
        plan = replace(plan, initial=pickle.dumps(fitted, protocol=pickle.HIGHEST_PROTOCOL))
    final = not streaming  # a static input is one batch: every window closes at its end
    if s.routing == "assigner":
        parsed = data.mapInArrow(lambda it: parse_batches(plan, it), parsed_schema)
        routed = stateful_stage(parsed, "akey", lambda: AssignerProcessor(plan, id_is_str, final=final), routed_schema,
                                partitions=plan.partitions)
    else:
        if streaming:
            from driftjoin.spark.natural.control import (
                NaturalPartitionController,
                attach_natural,
            )

            plan = replace(plan, control=_control_dir(spark, s.metrics_dir))
            attach_natural(spark, NaturalPartitionController(plan))
        routed_arrow = arrow_schema(routed_schema)
        routed = data.mapInArrow(lambda it: route_documents(plan, id_is_str, routed_arrow, it), routed_schema)
    return _output(stateful_stage(routed, "jkey", lambda: JoinerProcessor(plan, id_is_str, final=final), pair_schema,
                                  partitions=plan.partitions), plan)


def _output(pairs: DataFrame, plan: NaturalPlan) -> DataFrame:
    """The user's columns: a duration window also as ``window_start`` and ``window_end``
    timestamps (like ``similarity_join``'s), and the plan kept for the start check of a stream."""
    if plan.window_kind == "time":
        us = int(round(plan.length * 1e6))  # type: ignore[operator]
        start = F.timestamp_micros(F.col("window") * F.lit(us)).alias("window_start")
        end = F.timestamp_micros((F.col("window") + 1) * F.lit(us)).alias("window_end")
        pairs = pairs.select("left_id", "right_id", "window", start, end, *(["merged"] if plan.merged else []))
    return remember(pairs, plan)


def invalid_documents(
    docs: DataFrame,
    other: DataFrame | None = None,
    *,
    id_col: str = "id",
    doc_col: str = "doc",
    time_col: str | None = None,
    window: object = None,
) -> DataFrame:
    """The dead-letter output of :func:`natural_join`: every input row it skips, with the reason.

    Reasons: ``missing id``, ``missing document``, ``unparsable JSON: ...``, ``not a JSON
    object (got ...)``, ``missing time`` (null ``time_col``), ``missing time attribute ...`` or
    ``time attribute ... is not a number`` (with ``window=TimeWindow(...)``). Stateless: it can
    run as its own streaming query.

    Parameters
    ----------
    docs, other:
        The join's inputs.
    id_col, doc_col, time_col, window:
        As given to the join (they decide which rows are valid).

    Returns
    -------
    pyspark.sql.DataFrame
        ``side`` (0 ``docs``, 1 ``other``), ``id``, ``raw`` (the whole row as JSON) and ``reason``.

    Examples
    --------
    >>> from driftjoin import invalid_documents, local_session
    >>> spark = local_session(2)
    >>> docs = spark.createDataFrame([(1, '{"a": 1}'), (2, '[1, 2]'), (3, None)], "id long, doc string")
    >>> sorted((r.id, r.reason) for r in invalid_documents(docs).collect())
    [(2, 'not a JSON object (got array)'), (3, 'missing document')]
    """
    s = NaturalSettings.check({"id_col": id_col, "doc_col": doc_col, "time_col": time_col, "window": window},
                              dead_letters=True)
    inputs_streaming(docs, other, ("docs", "other"))
    data = _inputs(docs, other, s, True)
    prepare_session(docs.sparkSession)
    plan = NaturalPlan.of_rows(s, two_streams=other is not None)
    schema = T.StructType([
        T.StructField("side", T.ByteType()), T.StructField("id", data.schema["id"].dataType),
        T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType()),
    ])
    return data.mapInArrow(lambda it: dead_letter_batches(plan, it), schema)


# --------------------------------------------------------------------------------------------
# Metrics reader
# --------------------------------------------------------------------------------------------

_METRIC_COLUMNS = ["window", "documents", "replication", "max_load", "gini", "loads", "to_all", "pairs",
                   "repartitioned", "repartitions", "late", "closed"]


def natural_join_metrics(metrics_dir: str) -> pd.DataFrame:
    """Per-window metrics of a natural join run, one row per window, ascending.

    Columns: ``window, documents, replication, max_load, gini, loads, to_all, pairs,
    repartitioned, repartitions, late, closed``. ``loads[j]``: documents joiner ``j`` kept;
    ``replication`` their sum over the window's documents, ``max_load`` the largest share at
    one joiner; ``pairs`` sums the joiners' reports and ``late`` the documents dropped because
    their window had closed. ``repartitioned``: the window's quality made the control plane (or
    the single Assigner) refit; ``repartitions``: such refits up to this window. While a
    controller of this directory runs in this process, its decisions on the batches written so
    far are awaited first (at most 30 s).
    """
    from driftjoin.spark.natural.control import CONTROLLERS, read_log

    controller = CONTROLLERS.get(metrics_dir)
    if controller is not None:
        controller.settle()
    pairs: Counter[int] = Counter()
    loads: dict[int, dict[int, int]] = {}
    to_all: Counter[int] = Counter()
    documents: Counter[int] = Counter()
    late: Counter[int] = Counter()
    closed: set[int] = set()
    joiners = 0
    for rec in read_stats(metrics_dir, JOINER_OP):
        joiners = max(joiners, rec["joiner"] + 1)
        for w, n in rec.get("pairs_by_window", {}).items():
            pairs[int(w)] += n
        for w, (received, _, everywhere, *_) in rec.get("windows", {}).items():
            per = loads.setdefault(int(w), {})
            per[rec["joiner"]] = per.get(rec["joiner"], 0) + received
            to_all[int(w)] += everywhere
        for w, n in rec.get("documents", {}).items():
            documents[int(w)] += n
        for w, n in rec.get("late", {}).items():
            late[int(w)] += n
        closed.update(rec.get("closed", []))
    assigner: dict[int, tuple[int, dict[str, Any]]] = {}
    for rec in read_stats(metrics_dir, ASSIGNER_OP):  # routing="assigner": its own record of each window
        for w in rec.get("windows", []):
            if w["window"] not in assigner or assigner[w["window"]][0] < rec["seq"]:
                assigner[w["window"]] = (rec["seq"], w)
        for k, v in rec.get("late", {}).items():
            late[int(k)] += v
    refits = {int(e["window"]) for e in read_log(metrics_dir) if not e["first"]}
    rows, done = [], 0
    for w in sorted(set(pairs) | set(loads) | set(documents) | set(late) | set(assigner)):
        if w in assigner:
            base = assigner[w][1]
            rows.append({"window": w, **{k: base[k] for k in ("documents", "replication", "max_load", "gini", "loads",
                                                              "to_all", "repartitioned", "repartitions", "closed")},
                         "pairs": pairs.get(w, 0), "late": late.get(w, 0)})
            continue
        n = documents.get(w, 0)
        per = loads.get(w, {})
        vector = [per.get(j, 0) for j in range(joiners)]
        done += w in refits
        rows.append({
            "window": w, "documents": n, "replication": sum(vector) / n if n else 0.0,
            "max_load": max(vector, default=0) / n if n else 0.0, "gini": gini(vector), "loads": vector,
            "to_all": to_all.get(w, 0), "pairs": pairs.get(w, 0), "repartitioned": w in refits, "repartitions": done,
            "late": late.get(w, 0), "closed": w in closed,
        })
    return pd.DataFrame(rows, columns=_METRIC_COLUMNS)
