"""The operators of ``equi_join`` on Spark: stateless parallel routers and ``p`` stateful workers.

Data path (one micro-batch)::

    left, right rows --select--> (side, key, ts, l | r = the row's columns)           [stateless, JVM]
      --mapInArrow(route_rows)--> per input chunk, worker and side one row holding
                                  those copies as Arrow IPC (the row's columns as the
                                  JVM sent them), and one heartbeat per router task
                                  for every key                                          [routers, parallel]
      --groupBy(wkey).transformWithStateInPandas(WorkerProcessor)-->
      the joined rows' columns, typed (:mod:`driftjoin.spark.equi.payload`)            [p workers + plan key]

**Routers** are stateless ``mapInArrow`` tasks, as many as the input has partitions. SHC routes
by the :class:`~driftjoin.hypercube.table.Binding` of the micro-batch, read from the control
directory (``metrics_dir``): the binding whose first batch is the largest not above the batch id
(the task's local property ``streaming.sql.batchId``). The parallel hash join and Join-Biclique
route by fixed hashes. A tuple's id is the batch id and its position in the router's partition,
so no two tuples share one and no router needs a counter.

Why copies travel in bulk: PySpark 4.3 hands a ``transformWithStateInPandas`` key its rows through
``itertuples`` and a frame rebuilt from them, a Python object per row; a routed row per copy
made that, and pickling each row's values in the routers and unpickling them in the workers,
the per-row cost of this operator. A handful of IPC rows per worker and batch costs nothing
per copy, carries every type exactly, and is what the columnar kernel consumes.

**Workers** (keys ``slot_keys(p)``) hold the tasks placed on them and run
:class:`~driftjoin.hypercube.columnar_worker.ColumnarWorker` per batch: installs and drops of the
state moved at the previous batch, eviction, exports of the values that move in this batch
(through :class:`FileChannel`), then the batch's copies, joined at once in the batch order
(:func:`~driftjoin.hypercube.columnar.join_batch`). The joined rows' columns are taken from the
two rows' structs at the pairs' indexes and yielded in chunks. Each worker writes its share of
the batch's key counts (Misra-Gries counters, for the control plane) and its statistics.

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
(:class:`~driftjoin.spark.runtime.state.LoggedState`), both Arrow IPC of the rows stored,
installed and dropped (:data:`STATE_FORMAT` 5); the plan key keeps its binding in a
:class:`~driftjoin.spark.runtime.state.BlobState`.
"""

from __future__ import annotations

import base64
import json
import pickle
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle,
)

from driftjoin.hypercube import BatchSummary, Dispatcher, Side, make_dispatcher
from driftjoin.hypercube.columnar import KEY, PRIMARY, ROLE, TASK, TB, TL, TS, from_ipc, to_ipc
from driftjoin.hypercube.columnar_worker import ColumnarWorker, MovedTables
from driftjoin.hypercube.heavy import HeavyHitterTracker, reduce_counts
from driftjoin.hypercube.migration import BindingMismatchError
from driftjoin.hypercube.planner import RoutingPlanner
from driftjoin.hypercube.table import (
    BatchRouting,
    BicliqueRouting,
    Binding,
    HashRouting,
    RoutingTable,
    ShcRouting,
)
from driftjoin.spark.equi.payload import ROW, SIDE_STRUCTS, PayloadLayout, columns_frame, joined_columns
from driftjoin.spark.equi.settings import EquiSettings
from driftjoin.spark.runtime.decisions import newest, publish, read_version, version_at
from driftjoin.spark.runtime.files import filesystem, write_whole
from driftjoin.spark.runtime.heartbeats import heartbeat_batch
from driftjoin.spark.runtime.plan_guard import PLAN_KEY, OperatorPlan
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.queries import task_query
from driftjoin.spark.runtime.state import BlobState, LoggedState
from driftjoin.spark.runtime.stats import write_stats

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa

KEY_TYPES = {"long": T.LongType(), "string": T.StringType(), "binary": T.BinaryType()}
KEY_FILLER = {"long": 0, "string": "", "binary": b""}
#: Version of the operators' state; a checkpoint written with another is refused (plan guard).
#: 4: a stored tuple's payload is the row's values (:mod:`driftjoin.spark.equi.payload`), not its JSON text;
#: 5: a worker's stored tuples are Arrow tables (:class:`~driftjoin.hypercube.columnar_worker.ColumnarWorker`),
#: its log and its state moves Arrow IPC.
STATE_FORMAT = 5
#: The state of ``routing="dispatcher"`` (the paper's per-tuple tasks) did not change with format 5.
DISPATCHER_STATE_FORMAT = 4
#: Row kinds: a heartbeat (one per router task and key) and a routed copy.
BEAT, COPY = 0, 1
#: Names of the control plane's files under ``<metrics_dir>/control/``.
TABLES, BINDINGS, MOVES, COUNTS = "equi_table", "equi_binding", "equi_moves", "equi_counts"
#: Late rows listed per worker and batch in the statistics (all are counted).
LATE_ROWS_LISTED = 1000


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
    workers are placed on round-robin (None: one per worker; :func:`driftjoin.spark.runtime.keys.slot_keys`);
    ``seed``: the counts of ``sample=`` for SHC on a stream (:meth:`planner`, :attr:`start_table`).

    The seed is not stored with the checkpoint: it decides only the routing of the batches before
    the first committed one (the table the workers start from); from then on the bindings saved in
    the plan key's state and ``metrics_dir`` route, and the control plane resumes its saved planner,
    so a restart with another sample changes nothing that ran.
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
    seed: BatchSummary | None = None

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
        return {"operator": "equi_join", "algorithm": self.algorithm,
                "state_format": STATE_FORMAT if self.routing == "parallel" else DISPATCHER_STATE_FORMAT,
                "parallelism": self.parallelism, "partitions": self.spark_partitions, "key_type": self.key_type, "window": self.window,
                "lateness": self.lateness, "options": [list(o) for o in self.options], "output": self.output,
                "metrics_dir": self.metrics_dir, "routing": self.routing,
                "columns": self.layout.settings() if self.layout is not None else None}

    def defaults(self) -> dict[str, Any]:
        """Settings a checkpoint written before they existed implies (:class:`PlanGuard`): a query
        without ``partitions`` (state format 4) had one Spark partition per worker, so that a
        refusal names only what differs."""
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

    def planner(self) -> RoutingPlanner:
        """A new SHC control plane for this plan, seeded with :attr:`seed` when there is one."""
        planner = RoutingPlanner(self.parallelism, window=self.window, lateness=self.lateness, **self.shc_options())
        if self.seed is not None:
            planner.seed(self.seed)
        return planner

    @cached_property
    def start_table(self) -> RoutingTable:
        """The table a stream's workers start from (version 0): every value light, or the keys
        heavy in the seed on their grids."""
        return self.planner().table if self.seed is not None else RoutingTable(self.parallelism)

    def static_binding(self) -> Binding | None:
        if self.algorithm != "shc" or self.streaming:
            return None
        # one batch from empty workers: the table is both ``prev`` and ``cur`` (nothing moves), at
        # the version a new worker starts from
        table = replace(self.static_table or RoutingTable(self.parallelism), version=0)
        return Binding(table, table, 0)


def routed_schema() -> T.StructType:
    """Rows from the routers to the workers: per router task, input chunk, worker and side one
    row whose ``data`` holds that worker's copies as Arrow IPC (:func:`copies_table`), and one
    heartbeat (``kind`` :data:`BEAT`, ``data`` null) per worker key and the plan key."""
    return T.StructType([
        T.StructField("wkey", T.IntegerType(), False),
        T.StructField("kind", T.ByteType(), False),
        T.StructField("side", T.ByteType(), False),
        T.StructField("tb", T.LongType(), False),
        T.StructField("ts", T.DoubleType(), False),
        T.StructField("bind", T.LongType(), False),
        T.StructField("data", T.BinaryType(), True),
    ])


COUNT_SCHEMA = T.StructType([
    T.StructField("batch", T.LongType()), T.StructField("worker", T.IntegerType()), T.StructField("pairs", T.LongType()),
])


# ---- control files -------------------------------------------------------------------------

#: bindings parsed in this process: (metrics_dir, query, first batch) -> Binding
_BINDINGS: OrderedDict[tuple[str, str | None, int], Binding] = OrderedDict()


def read_binding(plan: EquiPlan, batch: int, query: str | None) -> Binding:
    """The binding of ``batch`` of query ``query``: the published one with the largest first
    batch not above it (the initial binding when there is none; from batch 1 on it is the one
    the plan key wrote during the previous batch). Cached per process by query and file (a
    binding file is never changed once a batch it serves has run)."""
    start = version_at(plan.metrics_dir, BINDINGS, batch, query)
    if start is None:
        return Binding(plan.start_table, plan.start_table)
    cached = _BINDINGS.get((plan.metrics_dir, query, start))
    if cached is None:
        doc = read_version(plan.metrics_dir, BINDINGS, start)
        if doc is None:
            raise BindingMismatchError(f"the routing of batch {batch} (the binding of batch {start}) is missing from "
                                       f"metrics_dir={plan.metrics_dir!r}: the directory lost files the query routes by")
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

    def put(self, batch: int, src: int, dst: int, rows: MovedTables) -> None:
        write_whole(self.fs, self._path(batch, src, dst), pickle.dumps(rows, protocol=pickle.HIGHEST_PROTOCOL))

    def get(self, batch: int, src: int, dst: int) -> MovedTables:
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
    (:meth:`~driftjoin.spark.equi.payload.PayloadLayout.struct`). The copies of each input chunk
    travel as one row per worker and side, the copies' columns as Arrow IPC (:func:`copies_table`):
    Spark's shuffle and PySpark's conversions then handle a few large values instead of a row
    per copy, and the row's values reach the worker as the JVM sent them.

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
    schema = routed_arrow_schema()
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
        out_keys, out_sides, blobs = [], [], []
        for s, name in enumerate(SIDE_STRUCTS):
            sel = np.flatnonzero(side[r.row] == s)
            if not len(sel):
                continue
            rows, workers = r.row[sel], r.worker[sel]
            order = np.argsort(workers, kind="stable")
            rows, workers, sel = rows[order], workers[order], sel[order]
            take = pa.array(rows, pa.int64())
            copies = pa.table({
                TASK: pa.array(r.task[sel], pa.int64()), ROLE: pa.array(r.role[sel], pa.int8()),
                PRIMARY: pa.array(r.primary[sel], pa.bool_()), KEY: keys.take(take),
                TB: pa.array(np.full(len(rows), b, np.int64)), TL: pa.array(tl[rows], pa.int64()),
                TS: pa.array(ts[rows], pa.float64()), ROW: batch.column(name).take(take),
            })
            cuts = np.flatnonzero(np.diff(workers)) + 1
            for lo, hi in zip([0, *cuts.tolist()], [*cuts.tolist(), len(rows)]):
                out_keys.append(int(wkeys[workers[lo]]))
                out_sides.append(s)
                blobs.append(to_ipc(copies.slice(lo, hi - lo)))
        m = len(blobs)
        yield pa.RecordBatch.from_arrays([
            pa.array(out_keys, pa.int32()), pa.array(np.full(m, COPY, np.int8)), pa.array(out_sides, pa.int8()),
            pa.array(np.full(m, b, np.int64)), pa.array(np.zeros(m)), pa.array(np.full(m, bind, np.int64)),
            pa.array(blobs, pa.binary()),
        ], schema=schema)
    yield heartbeat_batch(schema, [*plan.keys, PLAN_KEY], {"kind": BEAT, "tb": b, "ts": top, "data": None, "bind": bind})


def routed_arrow_schema() -> pa.Schema:
    return pa.schema([pa.field(f.name, _arrow_type(f.dataType), f.nullable) for f in routed_schema().fields])


def copies_table(blobs: Sequence[bytes]) -> pa.Table | None:
    """A worker's copies of one side from its routed rows: columns :data:`TASK`, :data:`ROLE`,
    :data:`PRIMARY`, :data:`KEY`, :data:`TB`, :data:`TL`, :data:`TS` (those of
    :func:`~driftjoin.hypercube.columnar.join_batch`) and :data:`ROW`, the input row's columns."""
    tables = [from_ipc(b) for b in blobs]
    return pa.concat_tables(tables).combine_chunks() if tables else None


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
        data = pdf[~beats]
        sides = data["side"].to_numpy()
        blobs = data["data"].tolist()
        copies = tuple(copies_table([b for b, x in zip(blobs, sides) if x == s]) for s in (0, 1))
        yield from self.run_batch(self.plan.slot_of(key), batch, bind, copies, top)

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
        prev = RoutingTable.from_doc(saved["cur"], decode) if saved is not None else plan.start_table
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

    def run_batch(self, worker: int, batch: int, bind: int, copies: tuple[pa.Table | None, pa.Table | None],
                  top: float | None) -> Iterator[pd.DataFrame]:
        """One micro-batch at one worker (module docstring): its output rows, in chunks."""
        clock = time.perf_counter
        t0 = clock()
        plan = self.plan
        loaded = self.state.load(worker, lambda: ColumnarWorker(worker, plan.window, plan.lateness),
                                 lambda snap: ColumnarWorker.restore(worker, plan.window, plan.lateness, snap),
                                 lambda value, change: value.redo(change))
        state: ColumnarWorker = loaded.value.value
        t1 = clock()
        binding = (read_binding(plan, batch, task_query().query_id) if plan.controlled else plan.static_binding())
        if binding is not None and binding.start != bind:
            raise BindingMismatchError(f"worker {worker}: the routers of batch {batch} used the binding of batch {bind}, "
                                       f"this worker finds the binding of batch {binding.start}")
        channel = FileChannel(plan.metrics_dir) if plan.controlled else None
        log: dict[str, Any] = {}
        moves = state.begin(batch, binding, channel, log)
        t2 = clock()
        late_rows: list[str] = []
        on_time: list[pa.Table | None] = []
        for s, table in enumerate(copies):
            if table is None:
                on_time.append(None)
                continue
            late = state.late(table[TS].to_numpy())
            if late.any():
                listed = np.flatnonzero(late & table[PRIMARY].to_numpy())
                late_rows += [plan.layout.render(s, tuple(row.values())) for row in table[ROW].take(listed).to_pylist()]
                table = table.filter(pa.array(~late))
            on_time.append(table if table.num_rows else None)
        joined = state.process((on_time[0], on_time[1]), log)
        produced = joined.count()
        t3 = clock()
        counted = [None if t is None else t.filter(t[PRIMARY]) for t in on_time]
        if plan.controlled:
            write_counts(plan, batch, worker, self._summary(counted), task_query().query_id)
        state.end(top, len(late_rows), produced)
        log["scalars"] = state.scalars()
        self.state.save(worker, loaded, log, state.snapshot, state.nbytes)
        t4 = clock()
        if plan.output == "count":
            yield pd.DataFrame({"batch": [batch], "worker": np.int32([worker]), "pairs": [produced]})
        else:
            chunks = (joined_columns(plan.layout, lt[ROW], li, rt[ROW], ri) for lt, li, rt, ri in joined.indexes())
            if plan.streaming:
                yield from map(columns_frame, chunks)
            else:  # one frame: a static run's frames are concatenated, and PySpark takes one Arrow chunk per column
                parts = list(chunks)
                if parts:
                    yield columns_frame([pa.concat_arrays(list(c)) for c in zip(*parts)])
        t5 = clock()
        if plan.metrics_dir:
            received = sum(0 if t is None else t.num_rows for t in on_time)
            tuples = [0 if t is None else t.num_rows for t in counted]
            write_stats(plan.metrics_dir, "equi_worker", worker, loaded.seq, {
                "worker": worker, "seq": loaded.seq, "batch": batch, "time": time.time(), "binding": bind,
                "version": state.version, "received": received, "tuples": sum(tuples),
                "left": tuples[0], "right": tuples[1],
                "installed": moves.installed, "exported": moves.exported, "dropped": moves.dropped,
                "evicted": moves.evicted, "move_files": moves.files, "produced": produced,
                "stored": state.stored(), "tasks": len(state.tasks()), "late": len(late_rows),
                "late_rows": late_rows[:LATE_ROWS_LISTED], "totals": dict(state.totals), "state_source": loaded.source,
                "timings": {"state_read": t1 - t0, "moves": t2 - t1, "join": t3 - t2, "state_write": t4 - t3,
                            "output": t5 - t4},
            })

    def _summary(self, counted: Sequence[pa.Table | None]) -> BatchSummary:
        """This worker's share of the batch's key counts (its primary copies), reduced to the
        control plane's ``k``."""
        k, pane_width = counting(self.plan)
        parts = [(s, t) for s, t in enumerate(counted) if t is not None and t.num_rows]
        counts: dict[tuple[Side, Any, int], int] = {}
        times = []
        for s, t in parts:
            ts = t[TS].to_numpy()
            times.append(ts)
            panes = np.zeros(len(ts), dtype=np.int64) if pane_width is None else np.floor(ts / pane_width).astype(np.int64)
            codes, uniques = pd.factorize(t[KEY].to_pandas(), sort=False)
            uniques = _plain_keys(uniques, self.plan.key_type)
            lo = int(panes.min())
            cells, n = np.unique(codes.astype(np.int64) * (int(panes.max()) - lo + 1) + (panes - lo), return_counts=True)
            width = int(panes.max()) - lo + 1
            for cell, m in zip(cells.tolist(), n.tolist()):
                counts[(Side(s), uniques[cell // width], cell % width + lo)] = m
        reduced, totals = reduce_counts(counts, k)
        ts = np.concatenate(times) if times else np.zeros(0)
        return BatchSummary(reduced, float(ts.min()) if len(ts) else None, float(ts.max()) if len(ts) else None, totals)


def counting(plan: EquiPlan) -> tuple[int, float | None]:
    """The control plane's counters per side and pane (``k``) and its pane width."""
    opts = plan.shc_options()
    tracker = HeavyHitterTracker(plan.parallelism, epsilon=opts.get("epsilon"), window=plan.window,
                                 panes=opts.get("panes", 4))
    return tracker.k, tracker.pane_width
