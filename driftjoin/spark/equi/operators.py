"""The operators of ``equi_join`` on Spark: stateless parallel routers and ``p`` stateful workers.

Data path (one micro-batch)::

    left, right rows --select--> (side, key, ts, l | r = the row's columns)           [stateless, JVM]
      --mapInArrow(route_rows)--> copies tagged with their worker's slot key, each row's
                                  values pickled into its payload, and one heartbeat
                                  per router task for every key                          [routers, parallel]
      --groupBy(wkey).transformWithStateInPandas(WorkerProcessor)-->
      the joined rows' columns, typed (:mod:`driftjoin.spark.equi.payload`)            [p workers + plan key]

**Routers** are stateless ``mapInArrow`` tasks, as many as the input has partitions. SHC routes
by the :class:`~driftjoin.hypercube.table.Binding` of the micro-batch, read from the control
directory (``metrics_dir``): the binding whose first batch is the largest not above the batch id
(the task's local property ``streaming.sql.batchId``). The parallel hash join and Join-Biclique
route by fixed hashes. A tuple's id is the batch id and its position in the router's partition,
so no two tuples share one and no router needs a counter.

**Workers** (keys ``slot_keys(p)``) hold the tasks placed on them and run
:class:`~driftjoin.hypercube.migration.WorkerState` per batch: installs and drops of the state
moved at the previous batch, eviction, exports of the values that move in this batch (through
:class:`FileChannel`), then the batch's copies in the batch order. Each writes its share of the
batch's key counts (Misra-Gries counters, for the control plane) and its statistics.

**The plan key** (:data:`~driftjoin.spark.runtime.plan_guard.PLAN_KEY`) gets only heartbeats. It stores
and checks the plan, and for SHC streams it chooses the binding of the next batch: the newest
table the control plane (:class:`driftjoin.spark.equi.control.EquiRoutingController`) has published,
with this batch's table as ``prev``. Why every task of a batch uses the same binding, and a
replay the same one: a binding is written once, by the plan key during the batch before the
batches it serves, and Spark starts a batch only after the previous one committed; routers and
workers pick the binding by their own batch id, so a publication that lands while a batch runs
reaches only a later binding, and a replayed batch finds the binding its first attempt used (a
replay of the batch that wrote it may rewrite it, but nothing has used it yet). The plan key
also checks that the routers used the binding it wrote (a lost or edited control directory
fails the batch instead of losing pairs).

State per worker: a snapshot plus a log of each batch's changes
(:class:`~driftjoin.spark.runtime.state.LoggedState`); the plan key keeps its binding in a
:class:`~driftjoin.spark.runtime.state.BlobState`.
"""

from __future__ import annotations

import base64
import json
import pickle
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from pyarrow import fs as pafs
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle,
)

from driftjoin.hypercube import (
    BatchSummary,
    Dispatcher,
    Role,
    Side,
    StreamTuple,
    Task,
    make_dispatcher,
)
from driftjoin.hypercube.heavy import HeavyHitterTracker, reduce_counts
from driftjoin.hypercube.migration import BindingMismatchError, Moved, WorkerState
from driftjoin.hypercube.planner import batch_counts
from driftjoin.hypercube.table import (
    BatchRouting,
    BicliqueRouting,
    Binding,
    HashRouting,
    RoutingTable,
    ShcRouting,
    batch_order,
)
from driftjoin.spark.equi.payload import PayloadLayout, decode, encode_rows, pairs_frame
from driftjoin.spark.equi.settings import EquiSettings
from driftjoin.spark.runtime.decisions import newest, publish
from driftjoin.spark.runtime.files import filesystem, write_whole
from driftjoin.spark.runtime.heartbeats import heartbeat_batch
from driftjoin.spark.runtime.plan_guard import PLAN_KEY, OperatorPlan
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.queries import task_query
from driftjoin.spark.runtime.state import BlobState, LoggedState
from driftjoin.spark.runtime.stats import write_stats

KEY_TYPES = {"long": T.LongType(), "string": T.StringType(), "binary": T.BinaryType()}
KEY_FILLER = {"long": 0, "string": "", "binary": b""}
#: Version of the operators' state; a checkpoint written with another is refused (plan guard).
#: 4: a stored tuple's payload is the row's values (:mod:`driftjoin.spark.equi.payload`), not its JSON text.
STATE_FORMAT = 4
#: Row kinds: a heartbeat (one per router task and key) and a routed copy.
BEAT, COPY = 0, 1
#: Names of the control plane's files under ``<metrics_dir>/control/``.
TABLES, BINDINGS, MOVES, COUNTS = "equi_table", "equi_binding", "equi_moves", "equi_counts"
#: Late rows listed per worker and batch in the statistics (all are counted).
LATE_ROWS_LISTED = 1000
_MASK64 = (1 << 64) - 1


def key_codec(key_type: str) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """``(encode, decode)`` between join values and JSON values (binary keys as base64)."""
    if key_type == "binary":
        return (lambda k: base64.b64encode(k).decode()), (lambda v: base64.b64decode(v))
    if key_type == "long":
        return int, int
    return str, str


@dataclass(frozen=True)
class EquiPlan(OperatorPlan):
    """Everything the operators need, fixed when the query is built (shipped by pickling).

    ``key_type``: how the join key travels ("long", "string" or "binary"); ``window``: seconds
    (None: full-stream join); ``options``: ``groups`` for Join-Biclique, ``epsilon``, ``panes``,
    ``min_heavy``, ``cap`` for SHC; ``output``: "rows" or "count"; ``streaming``: a stream (SHC
    then routes by the bindings in ``metrics_dir``) or a static run (SHC routes by
    ``static_table``, decided on the driver before the run); ``routing``: "parallel" (this
    module) or "dispatcher" (the paper's single dispatcher, :mod:`driftjoin.spark.equi.dispatch`);
    ``layout``: the columns of both sides and of the output (always given; None only for tests that
    build other parts of a plan); ``partitions``: the Spark state partitions the ``parallelism``
    workers are placed on round-robin (None: one per worker; :func:`driftjoin.spark.runtime.keys.slot_keys`).
    """

    operator = "equi_join"

    algorithm: str
    parallelism: int
    key_type: str = "long"
    window: float | None = None
    lateness: float = 0.0
    options: tuple[tuple[str, Any], ...] = ()
    metrics_dir: str | None = None
    output: str = "rows"
    streaming: bool = True
    static_table: RoutingTable | None = None
    routing: str = "parallel"
    layout: PayloadLayout | None = None
    partitions: int | None = None

    @classmethod
    def of(cls, settings: EquiSettings, *, parallelism: int, partitions: int, key_type: str, streaming: bool,
           layout: PayloadLayout) -> EquiPlan:
        """The plan of a join with ``settings`` (checked) on ``parallelism`` workers placed on
        ``partitions`` Spark partitions, whose key travels as ``key_type``."""
        s = settings
        return cls(s.algorithm, parallelism, key_type, s.within_seconds, s.lateness_seconds,
                   tuple(sorted(s.dispatcher_options().items())), s.metrics_dir, s.output, streaming, routing=s.routing,
                   layout=layout, partitions=partitions)

    @property
    def spark_partitions(self) -> int:
        """Spark's shuffle (and state) partitions of the workers' stage."""
        return self.partitions or self.parallelism

    @property
    def controlled(self) -> bool:
        """SHC on a stream, routed in parallel: routing tables come from the control plane
        through ``metrics_dir``."""
        return self.algorithm == "shc" and self.streaming and self.routing == "parallel"

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        return {"operator": "equi_join", "state_format": STATE_FORMAT, "algorithm": self.algorithm,
                "parallelism": self.parallelism, "partitions": self.spark_partitions, "key_type": self.key_type, "window": self.window,
                "lateness": self.lateness, "options": [list(o) for o in self.options], "output": self.output,
                "metrics_dir": self.metrics_dir, "routing": self.routing,
                "columns": self.layout.settings() if self.layout is not None else None}

    def defaults(self) -> dict[str, Any]:
        """Settings a checkpoint written before they existed implies (:class:`PlanGuard`): a query
        of state format 4 without ``partitions`` had one Spark partition per worker."""
        return {"partitions": self.parallelism}

    def adoptable(self) -> frozenset[str]:
        """Settings a restart may change: ``metrics_dir`` unless it holds SHC's tables and moves."""
        return frozenset() if self.controlled else self.ADOPTABLE

    def new_dispatcher(self) -> Dispatcher:
        """The in-process dispatcher of ``routing="dispatcher"``."""
        return make_dispatcher(self.algorithm, self.parallelism, window=self.window, lateness=self.lateness,
                               **dict(self.options))

    @property
    def keeps_copy(self) -> bool:
        """Only SHC moves state, so only its single dispatcher keeps a copy of the stream."""
        return self.algorithm == "shc"

    def shc_options(self) -> dict[str, Any]:
        return {k: v for k, v in self.options if k != "groups"}

    def fixed_routing(self) -> BatchRouting | None:
        if self.algorithm == "phj":
            return HashRouting(self.parallelism)
        if self.algorithm == "biclique":
            return BicliqueRouting(self.parallelism, dict(self.options).get("groups", 1))
        return None

    def static_binding(self) -> Binding | None:
        if self.algorithm != "shc" or self.streaming:
            return None
        # one batch from empty workers: the table is both ``prev`` and ``cur`` (nothing moves), at
        # the version a new worker starts from
        table = replace(self.static_table or RoutingTable(self.parallelism), version=0)
        return Binding(table, table, 0)


def routed_schema(key_type: str) -> T.StructType:
    """Rows from the routers to the workers (heartbeats leave the tuple fields at fillers)."""
    return T.StructType([
        T.StructField("wkey", T.IntegerType(), False),
        T.StructField("kind", T.ByteType(), False),
        T.StructField("task", T.LongType(), False),
        T.StructField("role", T.ByteType(), False),
        T.StructField("primary", T.BooleanType(), False),
        T.StructField("side", T.ByteType(), False),
        T.StructField("key", KEY_TYPES[key_type], False),
        T.StructField("tb", T.LongType(), False),
        T.StructField("tl", T.LongType(), False),
        T.StructField("ts", T.DoubleType(), False),
        T.StructField("payload", T.BinaryType(), True),
        T.StructField("bind", T.LongType(), False),
    ])


COUNT_SCHEMA = T.StructType([
    T.StructField("batch", T.LongType()), T.StructField("worker", T.IntegerType()), T.StructField("pairs", T.LongType()),
])


# ---- control files -------------------------------------------------------------------------

_BINDINGS: OrderedDict[tuple[str, str | None, int], Binding] = OrderedDict()


def read_binding(plan: EquiPlan, batch: int, query: str | None) -> Binding:
    """The binding of ``batch`` of query ``query``: the published one with the largest first
    batch not above it (the initial binding when there is none; from batch 1 on it is the one
    the plan key wrote during the previous batch). Cached per process by query and file (a
    binding file is never changed once a batch it serves has run)."""
    fs, base = filesystem(plan.metrics_dir)
    folder = f"{base}/control/{BINDINGS}"
    infos = fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
    starts = [int(i.base_name[:-5]) for i in infos if i.base_name.endswith(".json") and not i.base_name.startswith(".")]
    starts = [s for s in starts if s <= batch]
    if not starts:
        return Binding.initial(plan.parallelism)
    start = max(starts)
    cached = _BINDINGS.get((plan.metrics_dir, query, start))
    if cached is None:
        with fs.open_input_stream(f"{folder}/{start:012d}.json") as f:
            doc = json.loads(f.read())
        if doc.get("query") != query:
            raise BindingMismatchError(
                f"the routing of batch {batch} in metrics_dir={plan.metrics_dir!r} was written by query "
                f"{doc.get('query')}, not by this query ({query}): two queries share the directory; give each "
                "equi_join query its own metrics_dir")
        cached = Binding.from_doc(doc["binding"], key_codec(plan.key_type)[1])
        _BINDINGS[(plan.metrics_dir, query, start)] = cached
        while len(_BINDINGS) > 64:
            _BINDINGS.popitem(last=False)
    return cached


def write_binding(plan: EquiPlan, binding: Binding, query: str | None) -> None:
    publish(plan.metrics_dir, BINDINGS, binding.start,
            {"query": query, "binding": binding.to_doc(key_codec(plan.key_type)[0])})


class FileChannel:
    """State moved between workers: ``<metrics_dir>/control/equi_moves/<batch>/<src>-<dst>.pkl``.

    A file is written whole by one worker in one batch (:func:`~driftjoin.spark.runtime.files.write_whole`); a
    replayed batch rewrites it with the same content, since it exports from the same rolled-back
    state by the same binding. It is read at the next executed batch, after its batch committed,
    and deleted by the control plane once the reading batch committed.
    """

    def __init__(self, root: str) -> None:
        self.fs, self.base = filesystem(root)

    def _path(self, batch: int, src: int, dst: int) -> str:
        return f"{self.base}/control/{MOVES}/{batch:012d}/{src}-{dst}.pkl"

    def put(self, batch: int, src: int, dst: int, rows: list[Moved]) -> None:
        write_whole(self.fs, self._path(batch, src, dst), pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))

    def get(self, batch: int, src: int, dst: int) -> list[Moved]:
        try:
            with self.fs.open_input_stream(self._path(batch, src, dst)) as f:
                return pickle.loads(f.read())
        except FileNotFoundError:
            raise BindingMismatchError(
                f"the state worker {src} moved to worker {dst} at batch {batch} is missing from "
                f"{self._path(batch, src, dst)}: the control directory lost files; its pairs cannot be recovered") from None


def write_counts(plan: EquiPlan, batch: int, worker: int, summary: BatchSummary, query: str | None) -> None:
    """One worker's counts of one batch for the control plane (overwritten by a replay)."""
    encode = key_codec(plan.key_type)[0]
    fs, base = filesystem(plan.metrics_dir)
    folder = f"{base}/control/{COUNTS}/{batch:012d}"
    doc = {"batch": batch, "worker": worker, "query": query, "min_ts": summary.min_ts, "max_ts": summary.max_ts,
           "counts": [[int(s), encode(k), q, m] for (s, k, q), m in summary.counts.items()],
           "totals": [[int(s), q, n] for (s, q), n in (summary.totals or {}).items()]}
    write_whole(fs, f"{folder}/{worker}.json", json.dumps(doc).encode())


def read_counts(doc: dict[str, Any], key_type: str) -> BatchSummary:
    decode = key_codec(key_type)[1]
    return BatchSummary({(Side(s), decode(k), q): m for s, k, q, m in doc["counts"]}, doc["min_ts"], doc["max_ts"],
                        {(Side(s), q): n for s, q, n in doc["totals"]})


# ---- routers ---------------------------------------------------------------------------------


def route_rows(plan: EquiPlan, batches: Iterator[pa.RecordBatch], batch_id: int | None = None,
               partition: int | None = None) -> Iterator[pa.RecordBatch]:
    """A router task (``mapInArrow``): every valid row's copies, then one heartbeat per key.

    ``batches`` hold ``side, key, ts`` and the row's columns in ``l`` or ``r``
    (:meth:`~driftjoin.spark.equi.payload.PayloadLayout.struct`); copies carry them pickled.

    ``batch_id`` and ``partition`` default to the running Spark task's (tests pass them).
    """
    task = task_query()
    ctx_batch, ctx_part, query = task.batch_id, task.partition, task.query_id
    b = (ctx_batch if ctx_batch is not None else 0) if batch_id is None else batch_id
    part = ctx_part if partition is None else partition
    binding = read_binding(plan, b, query) if plan.controlled else plan.static_binding()
    routing = plan.fixed_routing() or ShcRouting(binding)
    bind = binding.start if binding is not None else -1
    wkeys = np.asarray(plan.keys, dtype=np.int32)
    schema = routed_schema(plan.key_type)
    arrow_schema = pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in schema.fields])
    top, offset = -np.inf, 0
    for batch in batches:
        n = batch.num_rows
        if not n:
            continue
        side = batch.column("side").to_numpy(zero_copy_only=False).astype(np.int8)
        ts = batch.column("ts").to_numpy(zero_copy_only=False).astype(np.float64)
        keys = batch.column("key")
        codes, uniques = pd.factorize(keys.to_pandas(), sort=False)
        uniques = _plain_keys(uniques, plan.key_type)
        tl = (np.int64(part) << np.int64(32)) + offset + np.arange(n, dtype=np.int64)
        offset += n
        top = max(top, float(ts.max()))
        r = routing.route_batch(side, codes.astype(np.int64), uniques, tl.astype(np.uint64))
        take = pa.array(r.row, pa.int64())
        m = len(r.row)
        yield pa.RecordBatch.from_arrays([
            pa.array(wkeys[r.worker], pa.int32()), pa.array(np.full(m, COPY, np.int8)), pa.array(r.task, pa.int64()),
            pa.array(r.role, pa.int8()), pa.array(r.primary, pa.bool_()), pa.array(side[r.row], pa.int8()),
            keys.take(take).cast(arrow_schema.field("key").type), pa.array(np.full(m, b, np.int64)),
            pa.array(tl[r.row], pa.int64()), pa.array(ts[r.row], pa.float64()), encode_rows(batch, side).take(take),
            pa.array(np.full(m, bind, np.int64)),
        ], schema=arrow_schema)
    yield heartbeat_batch(arrow_schema, [*plan.keys, PLAN_KEY], {"kind": BEAT, "tb": b, "ts": top, "payload": None, "bind": bind})


def _arrow_type(dtype: T.DataType) -> pa.DataType:
    return {T.IntegerType: pa.int32(), T.ByteType: pa.int8(), T.LongType: pa.int64(), T.BooleanType: pa.bool_(),
            T.DoubleType: pa.float64(), T.StringType: pa.string(), T.BinaryType: pa.binary()}[type(dtype)]


def _plain_keys(uniques: Any, key_type: str) -> list:
    """Join values as plain Python values (``key_hash`` hashes numpy ints unlike ints)."""
    if key_type == "long":
        return np.asarray(uniques, dtype=np.int64).tolist()
    if key_type == "binary":
        return [bytes(k) for k in uniques]
    return [str(k) for k in uniques]


# ---- workers and the plan key ----------------------------------------------------------------

def keys_list(series: pd.Series, key_type: str) -> list:
    """Join keys as plain Python values (``key_hash`` treats numpy ints unlike ints)."""
    if key_type == "long":
        return series.to_numpy(dtype=np.int64).tolist()
    if key_type == "binary":
        return [bytes(k) for k in series.tolist()]
    return series.tolist()


class WorkerProcessor(OperatorProcessor):
    """The ``p`` worker keys (tasks, moves, local joins) and the plan key (module docstring)."""

    #: the plan key writes the binding of the next batch
    runs_plan_key = True

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = LoggedState(handle, "equi_worker")
        self.bound = BlobState(handle, "equi_binding")

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        beats = pdf["kind"].to_numpy() == BEAT
        batch = int(pdf["tb"].to_numpy()[beats][0]) if beats.any() else int(pdf["tb"].iloc[0])
        binds = set(pdf["bind"].to_numpy()[beats].tolist())
        if len(binds) > 1:
            raise BindingMismatchError(f"the routers of batch {batch} used different bindings {sorted(binds)}")
        bind = binds.pop() if binds else -1
        if key == PLAN_KEY:
            if self.plan.controlled:
                self.bind_next(batch, bind)
            return
        tops = pdf["ts"].to_numpy(dtype=np.float64)[beats]
        tops = tops[np.isfinite(tops)]
        top = float(tops.max()) if len(tops) else None
        out = self.run_batch(self.plan.slot_of(key), batch, bind, pdf[~beats].reset_index(drop=True), top)
        if len(out):
            yield out

    # -- the plan key: the binding of the next batch

    def bind_next(self, batch: int, used: int) -> Binding:
        """Choose and write the binding of batch ``batch + 1`` (the newest published table)."""
        plan = self.plan
        saved = self.bound.load()
        decode = key_codec(plan.key_type)[1]
        if saved is not None and saved["start"] != used:
            raise BindingMismatchError(
                f"batch {batch} was routed by the binding of batch {used}, but the plan key wrote the binding of batch "
                f"{saved['start']}: the control directory {plan.metrics_dir!r} lost or changed files")
        prev = RoutingTable.from_doc(saved["cur"], decode) if saved is not None else RoutingTable(plan.parallelism)
        query = task_query().query_id
        doc = newest(plan.metrics_dir, TABLES, newer_than=prev.version)
        if doc is not None and doc.get("query") not in (None, query):
            doc = None  # a table of another query that used this directory before (a new checkpoint)
        cur = RoutingTable.from_doc(doc["table"], decode) if doc is not None else prev
        binding = Binding(cur, prev, batch + 1)
        write_binding(plan, binding, query)
        self.bound.save({"start": batch + 1, "cur": cur.to_doc(key_codec(plan.key_type)[0])})
        return binding

    # -- a worker

    def run_batch(self, worker: int, batch: int, bind: int, pdf: pd.DataFrame, top: float | None) -> pd.DataFrame:
        """One micro-batch at one worker (module docstring); returns its output rows."""
        clock = time.perf_counter
        t0 = clock()
        plan = self.plan
        loaded = self.state.load(worker, lambda: WorkerState(worker, plan.window, plan.lateness),
                                 lambda snap: WorkerState.restore(worker, plan.window, plan.lateness, snap),
                                 lambda value, change: value.redo(change))
        state: WorkerState = loaded.value.value
        t1 = clock()
        binding = (read_binding(plan, batch, task_query().query_id) if plan.controlled else plan.static_binding())
        if binding is not None and binding.start != bind:
            raise BindingMismatchError(f"worker {worker}: the routers of batch {batch} used the binding of batch {bind}, "
                                       f"this worker finds the binding of batch {binding.start}")
        channel = FileChannel(plan.metrics_dir) if plan.controlled else None
        log: dict[str, Any] = {}
        moves = state.begin(batch, binding, channel, log)
        t2 = clock()
        pdf = pdf.iloc[batch_order(pdf["side"].to_numpy(dtype=np.int8), pdf["ts"].to_numpy(dtype=np.float64),
                                   pdf["tl"].to_numpy(dtype=np.int64).astype(np.uint64))].reset_index(drop=True)
        late = state.late(pdf["ts"].to_numpy(dtype=np.float64))
        primary = pdf["primary"].to_numpy(dtype=bool)
        late_rows = [plan.layout.render(s, v) for s, v in zip(pdf["side"][late & primary].tolist(),
                                                        decode(pdf["payload"][late & primary].tolist()))]
        on_time = pdf[~late].reset_index(drop=True)
        sides = on_time["side"].to_numpy(dtype=np.int8).tolist()
        keys = keys_list(on_time["key"], plan.key_type)
        tids = [(b << 64) | (low & _MASK64) for b, low in zip(on_time["tb"].tolist(), on_time["tl"].tolist())]
        tss = on_time["ts"].to_numpy(dtype=np.float64).tolist()
        payloads = decode(on_time["payload"].tolist())
        copies = ((t, StreamTuple(Side(s), k, i, x, p), Role(r)) for t, s, k, i, x, p, r in zip(
            on_time["task"].tolist(), sides, keys, tids, tss, payloads, on_time["role"].tolist()))
        lefts: list[tuple] = []
        rights: list[tuple] = []

        def emit(task: Task, tup: StreamTuple, pairs: list) -> None:
            other, left = tup.side.other, tup.side == Side.R
            for r, s in pairs:
                partner = task.lookup(other, tup.key, s if left else r).payload
                lefts.append(tup.payload if left else partner)
                rights.append(partner if left else tup.payload)

        produced = state.process(copies, emit if plan.output == "rows" else None, log)
        t3 = clock()
        mine = on_time["primary"].to_numpy(dtype=bool)
        counted = on_time[mine]
        summary = None
        if plan.controlled:
            summary = self._summary(counted)
            write_counts(plan, batch, worker, summary, task_query().query_id)
        state.end(top, int(len(late_rows)))
        log["scalars"] = state.scalars()
        self.state.save(worker, loaded, log, state.snapshot, state.stored() * 100)
        t4 = clock()
        if plan.output == "count":
            out = pd.DataFrame({"batch": [batch], "worker": np.int32([worker]), "pairs": [produced]})
        else:
            out = pairs_frame(plan.layout, lefts, rights)
        t5 = clock()
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "equi_worker", worker, loaded.seq, {
                "worker": worker, "seq": loaded.seq, "batch": batch, "time": time.time(), "binding": bind,
                "version": state.version, "received": len(on_time), "tuples": int(mine.sum()),
                "left": int((counted["side"] == 0).sum()), "right": int((counted["side"] == 1).sum()),
                "installed": moves.installed, "exported": moves.exported, "dropped": moves.dropped,
                "evicted": moves.evicted, "move_files": moves.files, "produced": produced,
                "stored": state.stored(), "tasks": len(state.tasks), "late": len(late_rows),
                "late_rows": late_rows[:LATE_ROWS_LISTED], "totals": dict(state.totals), "state_source": loaded.source,
                "timings": {"state_read": t1 - t0, "moves": t2 - t1, "join": t3 - t2, "state_write": t4 - t3,
                            "output": t5 - t4},
            })
        return out

    def _summary(self, rows: pd.DataFrame) -> BatchSummary:
        """This worker's share of the batch's key counts, reduced to the control plane's ``k``."""
        k, pane_width = counting(self.plan)
        ts = rows["ts"].to_numpy(dtype=np.float64)
        counts = batch_counts(rows["side"].to_numpy(dtype=np.int8), keys_list(rows["key"], self.plan.key_type), ts,
                              pane_width)
        reduced, totals = reduce_counts(counts, k)
        return BatchSummary(reduced, float(ts.min()) if len(ts) else None, float(ts.max()) if len(ts) else None, totals)


def counting(plan: EquiPlan) -> tuple[int, float | None]:
    """The control plane's counters per side and pane (``k``) and its pane width."""
    opts = plan.shc_options()
    tracker = HeavyHitterTracker(plan.parallelism, epsilon=opts.get("epsilon"), window=plan.window,
                                 panes=opts.get("panes", 4))
    return tracker.k, tracker.pane_width
