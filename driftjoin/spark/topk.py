"""``topk_set_join``: SWOOP's continuous top-k set-similarity join on Spark.

SWOOP is sequential: every insert reads and updates one global index and one stock. On Spark it
runs as one ``transformWithStateInPandas`` key (all sets of the query go to it), in timestamp
order within each micro-batch; the rows before it (validation) run in parallel. The whole join
state (index, stock, window) is one pickled value, read and written once per micro-batch.

Output: the change stream of the top-k (``kind`` = ``"enter"`` / ``"leave"``, the pair, its
similarity, the time of the change, and ``seq``, the change's position in the stream), plus a
row of kind ``"late"`` for every set whose timestamp is older than the index time when it
arrives (it cannot be joined without reordering the past; it is reported, not silently lost).
:func:`current_topk` replays a change stream (e.g. the Parquet sink read back) into the current
top-k. Rows that cannot be sets at all go to :func:`invalid_sets` with a reason.

Scaling out (docs/architecture.md): the top-k of a union is the top-k of the per-part top-k's
only if every pair falls into one part; partitioning the token space replicates each set to
the parts of its tokens and needs a global merge of k-lists per change, which a single Spark
stage cannot express without a second stateful stage. This operator keeps SWOOP on one task;
the throughput of that task is measured in bench/swoop_core.py.
"""

from __future__ import annotations

import math
import pickle
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from driftjoin.durations import parse_duration
from driftjoin.spark.metrics_sink import write_stats
from driftjoin.spark.s3j_operators import _BlobState
from driftjoin.spark.session import prepare_for_stateful, prepare_session
from driftjoin.spark.static import run_static
from driftjoin.swoop import SIMILARITIES, InvalidSetError, Swoop


@dataclass(frozen=True)
class TopKPlan:
    k: int
    similarity: str
    window_seconds: float
    two_stream: bool
    metrics_dir: str | None


def _reasons(batch: pa.RecordBatch) -> np.ndarray:
    """Why each row cannot be a set (None where it can)."""
    n = batch.num_rows
    reason = np.full(n, None, dtype=object)
    reason[batch.column("ts").is_null().to_numpy(zero_copy_only=False)] = "missing timestamp"
    tokens = batch.column("tokens")
    reason[tokens.is_null().to_numpy(zero_copy_only=False) & (reason == None)] = "missing tokens"  # noqa: E711
    lengths = pc.list_value_length(tokens).fill_null(-1).to_numpy(zero_copy_only=False)
    reason[(lengths == 0) & (reason == None)] = "empty set"  # noqa: E711
    reason[batch.column("id").is_null().to_numpy(zero_copy_only=False) & (reason == None)] = "missing id"  # noqa: E711
    return reason


def valid_sets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        ok = pa.array(_reasons(batch) == None)  # noqa: E711
        yield batch.filter(ok).select(["key", "side", "id", "tokens", "ts"])


def dead_sets(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    for batch in batches:
        reason = _reasons(batch)
        bad = np.nonzero(reason != None)[0]  # noqa: E711
        if len(bad):
            take = pa.array(bad)
            yield pa.RecordBatch.from_arrays(
                [batch.column("side").take(take), batch.column("id").take(take), batch.column("raw").take(take),
                 pa.array(reason[bad].tolist(), pa.string())], names=["side", "id", "raw", "reason"])


class SwoopProcessor(StatefulProcessor):
    """The whole SWOOP join (one key): inserts a batch's sets in timestamp order."""

    def __init__(self, plan: TopKPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = _BlobState(handle, "swoop")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        plan = self.plan
        pdf = pd.concat(list(rows), ignore_index=True)
        if pdf.empty:
            return
        saved, seq = self.state.resume()
        join = saved["join"] if saved else Swoop(plan.k, plan.similarity, plan.window_seconds, two_stream=plan.two_stream)
        change_no = saved["changes"] if saved else 0
        pdf = pdf.sort_values(["ts", "side"], kind="stable")
        out: dict[str, list] = {"kind": [], "left_id": [], "right_id": [], "similarity": [], "change_time": [], "seq": []}
        started = time.perf_counter()
        late = 0
        for sid, side, tokens, ts in zip(pdf["id"], pdf["side"], pdf["tokens"], pdf["ts"]):
            try:
                changes = join.insert(sid, list(tokens), float(ts), ("R" if side == 0 else "S") if plan.two_stream else None)
            except InvalidSetError:
                late += 1
                for col, v in zip(out, ("late", sid, None, math.nan, float(ts), change_no)):
                    out[col].append(v)
                change_no += 1
                continue
            for c in changes:
                for col, v in zip(out, (c.kind, c.pair.first, c.pair.second, c.pair.sim, c.time, change_no)):
                    out[col].append(v)
                change_no += 1
        elapsed = time.perf_counter() - started
        self.state.save({"join": join, "changes": change_no, "seq": seq})
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "swoop", 0, seq, {"seq": seq, "time": time.time(), "sets": len(pdf),
                                                              "late": late, "changes": len(out["kind"]), "seconds": elapsed})
        if not out["kind"]:  # no change: an empty frame of float columns fails PySpark's Arrow conversion
            return
        frame = pd.DataFrame(out)
        frame["change_time"] = (frame["change_time"].to_numpy(dtype=np.float64) * 1e6).round().astype(np.int64)
        yield frame

    def close(self) -> None:
        pass


def _input(df: DataFrame, side: int, id_col: str, tokens_col: str, time_col: str, id_type: T.DataType, with_raw: bool) -> DataFrame:
    for c in (id_col, tokens_col, time_col):
        if c not in df.columns:
            raise ValueError(f"column {c!r} is not in the input; columns are {df.columns}")
    dtype = df.schema[tokens_col].dataType
    if not isinstance(dtype, T.ArrayType) or not isinstance(dtype.elementType, (T.StringType, T.IntegralType)):
        raise TypeError(f"tokens_col={tokens_col!r} has type {dtype.simpleString()}; use array<string> or array<int/long>")
    cols = [F.lit(0).alias("key"), F.lit(side).cast("byte").alias("side"), F.col(id_col).cast(id_type).alias("id"),
            F.array_distinct(F.col(tokens_col).cast("array<string>")).alias("tokens"),
            F.col(time_col).cast("timestamp").cast("double").alias("ts")]
    if with_raw:
        cols.append(F.to_json(F.struct(*[F.col(c) for c in df.columns])).alias("raw"))
    return df.select(*cols)


def _id_type(left: DataFrame, right: DataFrame | None, id_col: str) -> T.DataType:
    types = [d.schema[id_col].dataType for d in (left, right) if d is not None and id_col in d.columns]
    return T.LongType() if types and all(isinstance(t, T.IntegralType) for t in types) else T.StringType()


def topk_set_join(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    k: int,
    similarity: str = "jaccard",
    tokens_col: str = "tokens",
    id_col: str = "id",
    time_col: str = "ts",
    window: str = "10 minutes",
    metrics_dir: str | None = None,
) -> DataFrame:
    """The continuous top-k most similar pairs of sets in a sliding window (SWOOP).

    ``right=None``: self-join of ``left``; otherwise pairs of one ``left`` (R) and one ``right``
    (S) set. A pair is valid while both sets are in the window (the earlier set's time plus
    ``window``). Tokens are compared as strings; duplicate tokens in a set are dropped.
    Returns the change stream: ``kind, left_id, right_id, similarity, change_time, seq``
    (``left_id`` is the later set of a self-join pair, or the R set).
    """
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be an integer >= 1, got {k!r}")
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity={similarity!r}: choose one of {', '.join(sorted(SIMILARITIES))}")
    if right is not None and right.isStreaming != left.isStreaming:
        raise ValueError("left and right must both be streaming or both static")
    prepare_session(left.sparkSession, metrics_dir)
    plan = TopKPlan(k, similarity, parse_duration(window, "window"), right is not None, metrics_dir)
    id_type = _id_type(left, right, id_col)
    data = _input(left, 0, id_col, tokens_col, time_col, id_type, False)
    if right is not None:
        data = data.unionByName(_input(right, 1, id_col, tokens_col, time_col, id_type, False))
    set_schema = T.StructType([T.StructField("key", T.IntegerType()), T.StructField("side", T.ByteType()),
                               T.StructField("id", id_type), T.StructField("tokens", T.ArrayType(T.StringType())),
                               T.StructField("ts", T.DoubleType())])
    out_schema = T.StructType([T.StructField("kind", T.StringType()), T.StructField("left_id", id_type),
                               T.StructField("right_id", id_type), T.StructField("similarity", T.DoubleType()),
                               T.StructField("change_time", T.LongType()), T.StructField("seq", T.LongType())])
    sets = data.mapInArrow(valid_sets, set_schema)
    if data.isStreaming:
        prepare_for_stateful(left.sparkSession, 1)
        raw = sets.groupBy("key").transformWithStateInPandas(SwoopProcessor(plan), out_schema, "Append", "None")
    else:
        raw = sets.groupBy("key").applyInPandas(lambda key, pdf: run_static(SwoopProcessor(plan), key, pdf), out_schema)
    return raw.withColumn("change_time", F.timestamp_micros("change_time"))


def invalid_sets(left: DataFrame, right: DataFrame | None = None, *, tokens_col: str = "tokens", id_col: str = "id",
                 time_col: str = "ts") -> DataFrame:
    """Rows that cannot be sets (missing id, tokens or timestamp; empty set), with the reason."""
    prepare_session(left.sparkSession)
    id_type = _id_type(left, right, id_col)
    data = _input(left, 0, id_col, tokens_col, time_col, id_type, True)
    if right is not None:
        data = data.unionByName(_input(right, 1, id_col, tokens_col, time_col, id_type, True))
    schema = T.StructType([T.StructField("side", T.ByteType()), T.StructField("id", id_type),
                           T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType())])
    return data.mapInArrow(dead_sets, schema)


def current_topk(changes: DataFrame) -> DataFrame:
    """The top-k after the last change of a (static) change stream: pairs whose last event is 'enter'."""
    from pyspark.sql.window import Window

    pairs = changes.where(F.col("kind") != "late")
    last = Window.partitionBy("left_id", "right_id").orderBy(F.col("seq").desc())
    return (pairs.withColumn("_r", F.row_number().over(last)).where((F.col("_r") == 1) & (F.col("kind") == "enter"))
            .select("left_id", "right_id", "similarity", "change_time").orderBy(F.col("similarity").desc()))
