"""``equi_join(routing="dispatcher")``: the paper's single dispatcher and ``p`` task workers.

Kept beside the parallel routers of :mod:`driftjoin.spark.equi.operators` so the two can be
measured against each other (``bench/hypercube_spark.py``). Data path (one micro-batch)::

    left, right rows --select--> (side, key, ts, l | r = the row's columns)     [stateless, JVM]
      --mapInArrow(encode_payloads)--> (side, key, ts, payload = the row's values pickled)
      --groupBy(PLAN_KEY).transformWithStateInPandas(DispatcherProcessor)-->
      control rows + routed copies, each tagged with its worker's slot key     [dispatcher]
      --groupBy(worker key).transformWithStateInPandas(DispatchedWorkerProcessor)-->
      the joined rows' columns, typed (:mod:`driftjoin.spark.equi.payload`)   [task workers]

The dispatcher is a :class:`~driftjoin.hypercube.Dispatcher` (SHC, PHJ or Join-Biclique). Per
batch it sorts the new rows into a deterministic order, gives each a per-side tuple id, calls
``begin_batch`` and turns the :class:`~driftjoin.hypercube.Reconfiguration` into control rows
for the workers, then routes every new tuple. A worker holds the :class:`~driftjoin.hypercube.Task`
states of the tasks placed on it and applies, per batch and in this order: the eviction threshold
(a TICK row every worker gets every batch), INSTALL rows (state transfers), DROP rows, RELEASE
rows, then the ROUTE rows in batch order (``seq``).

Transfers. A task's stored tuples live in another Spark task's state, so a worker cannot read
them. Like the paper's implementation (section 4.1), SHC's dispatcher keeps its own copy of the
live stream: one chunk per batch in a map state (appended once per batch, removed once the whole
chunk is older than the eviction threshold, read only in batches that move state). Invariant (I)
of :mod:`driftjoin.hypercube.shc` says which tuples a source task holds (those whose old row /
column contains it), so each :class:`~driftjoin.hypercube.Transfer` becomes the INSTALL rows of
exactly the tuples ``Task.export`` would return, sent to the destination's worker with role STORE.

The dispatcher's grouping key is :data:`~driftjoin.spark.runtime.plan_guard.PLAN_KEY`, the key the
parallel routing's plan lives under too, so a checkpoint of either routing restarted with the
other is refused by the plan guard. The dispatcher's state is one pickled value
(:class:`~driftjoin.spark.runtime.state.BlobState`) plus its stream copy; each worker's a snapshot plus
a log of its changes (:class:`~driftjoin.spark.runtime.state.LoggedState`).
"""

from __future__ import annotations

import pickle
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle,
)

from driftjoin.hypercube import (
    BatchSummary,
    Dispatcher,
    Drop,
    Grid,
    Residue,
    Role,
    Side,
    StreamingHyperCube,
    StreamTuple,
    Task,
)
from driftjoin.spark.equi.operators import KEY_FILLER, KEY_TYPES, keys_list
from driftjoin.spark.equi.payload import PayloadLayout, decode, encode_rows, pairs_frame
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.state import BlobState, LoggedState
from driftjoin.spark.runtime.stats import write_stats

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa

# Row kinds, in the order a worker applies them within a batch.
TICK, INSTALL, DROP, RELEASE, ROUTE = 0, 1, 2, 3, 4
SIDES = (Side.R, Side.S)
ROLES = {i: Role(i) for i in (1, 2, 3)}
_BLOB = T.StructType([T.StructField("blob", T.BinaryType(), False)])
_CHUNK_KEY = T.StructType([T.StructField("chunk", T.LongType(), False)])


def dispatched_schema(key_type: str) -> T.StructType:
    """The rows from the dispatcher to the workers (control rows leave unused fields at defaults)."""
    return T.StructType([
        T.StructField("batch", T.LongType(), False),
        T.StructField("wkey", T.IntegerType(), False),
        T.StructField("kind", T.ByteType(), False),
        T.StructField("seq", T.LongType(), False),
        T.StructField("task", T.LongType(), False),
        T.StructField("role", T.ByteType(), False),
        T.StructField("side", T.ByteType(), False),
        T.StructField("key", KEY_TYPES[key_type], False),
        T.StructField("tid", T.LongType(), False),
        T.StructField("ts", T.DoubleType(), False),
        T.StructField("payload", T.BinaryType(), True),
        T.StructField("evict", T.DoubleType(), True),
        T.StructField("modulus", T.IntegerType(), False),
        T.StructField("residue", T.IntegerType(), False),
    ])


def encoded_schema(key_type: str) -> T.StructType:
    """The rows into the dispatcher: the row's columns pickled (:func:`encode_payloads`)."""
    return T.StructType([T.StructField("side", T.ByteType(), False), T.StructField("key", KEY_TYPES[key_type], False),
                         T.StructField("ts", T.DoubleType(), False), T.StructField("payload", T.BinaryType(), False)])


def encode_payloads(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """``side, key, ts, l, r`` to ``side, key, ts, payload`` (a stateless ``mapInArrow``)."""
    for batch in batches:
        side = batch.column("side").to_numpy(zero_copy_only=False).astype(np.int8)
        yield pa.RecordBatch.from_arrays([batch.column("side"), batch.column("key"), batch.column("ts"),
                                          encode_rows(batch, side)], names=["side", "key", "ts", "payload"])


class _Rows:
    """Column lists of the dispatcher's output, turned into one DataFrame at the end."""

    NAMES = ("wkey", "kind", "seq", "task", "role", "side", "key", "tid", "ts", "payload", "evict", "modulus", "residue")

    def __init__(self, key_type: str) -> None:
        self.key_type = key_type
        self.cols: dict[str, list] = {n: [] for n in self.NAMES}

    def add(self, wkey: int, kind: int, *, seq: int = 0, task: int = -1, role: int = 0, side: int = 0,
            key: Any = None, tid: int = -1, ts: float = 0.0, payload: bytes | None = None,
            evict: float | None = None, modulus: int = -1, residue: int = -1) -> None:
        c = self.cols
        c["wkey"].append(wkey)
        c["kind"].append(kind)
        c["seq"].append(seq)
        c["task"].append(task)
        c["role"].append(role)
        c["side"].append(side)
        c["key"].append(KEY_FILLER[self.key_type] if key is None else key)
        c["tid"].append(tid)
        c["ts"].append(ts)
        c["payload"].append(payload)
        c["evict"].append(np.nan if evict is None else evict)
        c["modulus"].append(modulus)
        c["residue"].append(residue)

    def frame(self) -> pd.DataFrame:
        return _typed_frame(self.cols, self.key_type)


def _typed_frame(cols: dict[str, Any], key_type: str) -> pd.DataFrame:
    return pd.DataFrame({
        "wkey": np.asarray(cols["wkey"], dtype=np.int32),
        "kind": np.asarray(cols["kind"], dtype=np.int8),
        "seq": np.asarray(cols["seq"], dtype=np.int64),
        "task": np.asarray(cols["task"], dtype=np.int64),
        "role": np.asarray(cols["role"], dtype=np.int8),
        "side": np.asarray(cols["side"], dtype=np.int8),
        "key": np.asarray(cols["key"], dtype=np.int64) if key_type == "long" else pd.Series(list(cols["key"]), dtype=object),
        "tid": np.asarray(cols["tid"], dtype=np.int64),
        "ts": np.asarray(cols["ts"], dtype=np.float64),
        "payload": pd.Series(list(cols["payload"]), dtype=object),
        "evict": np.asarray(cols["evict"], dtype=np.float64),
        "modulus": np.asarray(cols["modulus"], dtype=np.int32),
        "residue": np.asarray(cols["residue"], dtype=np.int32),
    })


class DispatcherProcessor(OperatorProcessor):
    """The single dispatcher (key = :data:`~driftjoin.spark.runtime.plan_guard.PLAN_KEY`, a constant, so every batch with data checks
    the stored plan): statistics, grids, routing, state transfers."""

    runs_plan_key = True

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = BlobState(handle, "dispatcher")
        self.copy = handle.getMapState("stream_copy", _CHUNK_KEY, _BLOB) if self.plan.keeps_copy else None

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        yield self.dispatch(pdf)

    def dispatch(self, pdf: pd.DataFrame) -> pd.DataFrame:
        """One micro-batch: returns the control rows and routed copies for all workers."""
        start = time.perf_counter()
        plan = self.plan
        saved = self.state.load()
        if saved is None:
            saved = {"batch": -1, "dispatcher": plan.new_dispatcher(), "next_tid": [0, 0], "chunks": [], "moved": 0}
        batch = saved["batch"] + 1
        d: Dispatcher = saved["dispatcher"]
        # A deterministic batch order (a replayed batch gets the same ids, routes and output): by
        # time, then by a fixed-key hash of the row, which interleaves the sides without bias
        # (Join-Biclique reports a same-batch pair where the earlier row is stored).
        pdf = pdf.assign(_order=pd.util.hash_pandas_object(pdf["payload"], index=False).to_numpy())
        pdf = pdf.sort_values(["ts", "_order", "side", "payload"], kind="stable", ignore_index=True)
        late = pd.DataFrame()
        if d.window is not None and d.clock.max_ts is not None:
            is_late = pdf["ts"].to_numpy(dtype=np.float64) < d.clock.max_ts - d.clock.lateness
            if is_late.any():
                late, pdf = pdf[is_late], pdf[~is_late].reset_index(drop=True)
        side = pdf["side"].to_numpy(dtype=np.int8)
        tid = np.empty(len(pdf), dtype=np.int64)
        next_tid = saved["next_tid"]
        for s in (0, 1):
            at = np.flatnonzero(side == s)
            tid[at] = next_tid[s] + np.arange(len(at))
            next_tid[s] += len(at)
        keys = keys_list(pdf["key"], plan.key_type)
        ts = pdf["ts"].to_numpy(dtype=np.float64)
        payload = pdf["payload"].to_numpy(dtype=object)
        tuples = [StreamTuple(SIDES[s], k, i, x) for s, k, i, x in zip(side.tolist(), keys, tid.tolist(), ts.tolist())]

        old_grids, old_workers = self._placement(d)
        reconf = d.begin_batch(BatchSummary.of(tuples, d.pane_width))
        evict = reconf.evict_before
        out = _Rows(plan.key_type)
        wkeys = plan.keys
        for w in range(plan.parallelism):
            out.add(wkeys[w], TICK, evict=evict)
        worker_of = _WorkerMap(d, old_workers)
        installs = 0
        if reconf.moves.transfers:
            installs = self._installs(d, old_grids, reconf.moves.transfers, evict, out, worker_of, wkeys)
        for drop in reconf.moves.drops:
            keep = drop.keep
            out.add(wkeys[worker_of(drop.task)], DROP, task=drop.task, side=int(drop.side), key=drop.key,
                    modulus=-1 if keep is None else keep.modulus, residue=-1 if keep is None else keep.residue)
        for task in reconf.released:
            out.add(wkeys[old_workers[task]], RELEASE, task=task)
        control = out.frame()

        router = d.router
        idx, r_task, r_role, r_wkey = [], [], [], []
        for i, t in enumerate(tuples):
            for task, role in router.route(t):
                idx.append(i)
                r_task.append(task)
                r_role.append(int(role))
                r_wkey.append(wkeys[worker_of(task)])
        at = np.asarray(idx, dtype=np.int64)
        routes = _typed_frame({
            "wkey": r_wkey, "kind": np.full(len(at), ROUTE), "seq": at, "task": r_task, "role": r_role,
            "side": side[at], "key": [keys[i] for i in idx],
            "tid": tid[at], "ts": ts[at], "payload": payload[at].tolist(), "evict": np.full(len(at), np.nan),
            "modulus": np.full(len(at), -1), "residue": np.full(len(at), -1),
        }, plan.key_type)

        copy_size = self._update_copy(saved, batch, side, keys, tid, ts, payload, evict)
        saved["batch"] = batch
        saved["moved"] += installs
        self.state.save(saved)
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "equi_dispatcher", 0, batch,
                        self._stats(d, plan.layout, batch, side, late, reconf, installs, len(at), copy_size, start))
        result = pd.concat([control, routes], ignore_index=True)
        result.insert(0, "batch", np.full(len(result), batch, dtype=np.int64))
        return result

    @staticmethod
    def _placement(d: Dispatcher) -> tuple[dict, dict[int, int]]:
        """SHC's grids and the worker of every live task, before ``begin_batch`` changes them."""
        if not isinstance(d, StreamingHyperCube):
            return {}, {}
        grids = dict(d.grids)
        tasks = [*d.light.tasks, *(t for g in grids.values() for t in g.cells)]
        return grids, {t: d.worker_of(t) for t in tasks}

    def _installs(self, d: Dispatcher, old_grids: dict, transfers: tuple, evict: float | None, out: _Rows,
                  worker_of: _WorkerMap, wkeys: tuple[int, ...]) -> int:
        """INSTALL rows for every transfer: what ``Task.export`` at the source would return."""
        copy = self._read_copy({tr.key for tr in transfers}, evict)
        holders: dict[tuple, list[tuple]] = {}
        n = 0
        for tr in transfers:
            cached = holders.get((tr.key, tr.side))
            if cached is None:
                grid = old_grids.get(tr.key) or Grid.light(d.light.task_of(tr.key))
                cached = holders[(tr.key, tr.side)] = [
                    (row, grid.holders(tr.side, row[0])) for row in copy.get((tr.key, int(tr.side)), ())
                ]
            wkey = wkeys[worker_of(tr.dst)]
            sel = tr.select
            for (i, x, p), at in cached:
                if tr.src in at and (sel is None or sel.contains(tr.side, i)):
                    out.add(wkey, INSTALL, task=tr.dst, role=int(Role.STORE), side=int(tr.side), key=tr.key,
                            tid=i, ts=x, payload=p)
                    n += 1
        return n

    def _read_copy(self, wanted: set, evict: float | None) -> dict[tuple, list[tuple]]:
        """The live stored tuples of the ``wanted`` keys: ``(key, side) -> [(tid, ts, payload)]``."""
        found: dict[tuple, list[tuple]] = defaultdict(list)
        if self.copy is None or not self.copy.exists():
            return found
        for (blob,) in self.copy.values():
            chunk = pickle.loads(blob)
            for s, k, i, x, p in zip(chunk["side"], chunk["key"], chunk["tid"], chunk["ts"], chunk["payload"]):
                if k in wanted and (evict is None or x >= evict):
                    found[(k, s)].append((i, x, p))
        return found

    def _update_copy(self, saved: dict, batch: int, side: np.ndarray, keys: list, tid: np.ndarray,
                     ts: np.ndarray, payload: np.ndarray, evict: float | None) -> int:
        """Append this batch's tuples to the stream copy and forget chunks wholly evicted."""
        if self.copy is None:
            return 0
        chunks = saved["chunks"]
        if evict is not None:
            for c in [c for c in chunks if c[1] < evict]:
                self.copy.removeKey((c[0],))
                chunks.remove(c)
        if len(side):
            blob = {"side": side.tolist(), "key": keys, "tid": tid.tolist(), "ts": ts.tolist(), "payload": payload.tolist()}
            self.copy.updateValue((batch,), (pickle.dumps(blob, protocol=pickle.HIGHEST_PROTOCOL),))
            chunks.append((batch, float(ts.max()), len(side)))
        return sum(c[2] for c in chunks)

    @staticmethod
    def _stats(d: Dispatcher, layout: PayloadLayout, batch: int, side: np.ndarray, late: pd.DataFrame, reconf: Any, installs: int,
               copies: int, copy_size: int, start: float) -> dict:
        stats = {
            "batch": batch, "time": time.time(), "algorithm": d.name, "tuples": len(side),
            "left": int((side == 0).sum()), "right": int((side == 1).sum()), "late": len(late),
            "late_rows": [layout.render(s, v) for s, v in zip(late["side"].tolist(), decode(late["payload"].tolist()))]
            if len(late) else [],
            "copies": copies, "installs": installs, "drops": len(reconf.moves.drops),
            "created": len(reconf.created), "released": len(reconf.released),
            "evict_before": reconf.evict_before, "stream_copy": copy_size,
            **{k: getattr(d.stats, k) for k in ("promotions", "demotions", "doublings", "halvings", "tasks_created")},
        }
        if isinstance(d, StreamingHyperCube):
            stats["grids"] = {repr(k): [g.p_r, g.p_s] for k, g in d.grids.items()}
        stats["seconds"] = time.perf_counter() - start
        return stats


class _WorkerMap:
    """The worker of a task: live tasks from the dispatcher, released ones from before the batch."""

    def __init__(self, d: Dispatcher, old: dict[int, int]) -> None:
        self.d, self.old, self.cache = d, old, {}

    def __call__(self, task: int) -> int:
        w = self.cache.get(task)
        if w is None:
            w = self.old.get(task)
            if w is None:
                w = self.d.worker_of(task)
            self.cache[task] = w
        return w


@dataclass
class _WorkerTasks:
    """The tasks of one worker and its running totals (the cached value of its state)."""

    window: float | None
    tasks: dict[int, Task] = field(default_factory=dict)
    totals: dict[str, int] = field(default_factory=lambda: {"received": 0, "installed": 0, "produced": 0, "peak_stored": 0})

    def task_of(self, t: int) -> Task:
        task = self.tasks.get(t)
        if task is None:
            task = self.tasks[t] = Task(t, self.window)
        return task

    def apply(self, change: dict[str, Any]) -> None:
        """Redo one batch's changes (the log of :class:`~driftjoin.spark.runtime.state.LoggedState`) in
        the order :meth:`WorkerProcessor.work` made them; probing is not redone."""
        if change["evict"] is not None:
            for task in self.tasks.values():
                task.evict(change["evict"])
        for t, rows in change["installs"]:
            self.task_of(t).install(StreamTuple(SIDES[s], k, i, x, p) for s, k, i, x, p in rows)
        for t, key, side, modulus, residue in change["drops"]:
            task = self.tasks.get(t)
            if task is not None:
                task.drop(Drop(t, key, SIDES[side], None if modulus < 0 else Residue(modulus, residue)))
        for t in change["releases"]:
            self.tasks.pop(t, None)
        for t, (s, k, i, x, p) in change["stores"]:
            self.task_of(t).process(StreamTuple(SIDES[s], k, i, x, p), Role.STORE, None)
        self.totals = dict(change["totals"])

    def snapshot(self) -> dict[str, Any]:
        return {"tasks": {t: [(int(u.side), u.key, u.tid, u.ts, u.payload) for u in task.stored_tuples()]
                          for t, task in self.tasks.items()}, "totals": dict(self.totals)}

    @staticmethod
    def restore(window: float | None, snap: dict[str, Any]) -> "_WorkerTasks":
        tasks = {t: Task.from_tuples(t, window, (StreamTuple(SIDES[s], k, i, x, p) for s, k, i, x, p in rows))
                 for t, rows in snap["tasks"].items()}
        return _WorkerTasks(window, tasks, dict(snap["totals"]))

    def stored(self) -> int:
        return sum(task.stored for task in self.tasks.values())


class DispatchedWorkerProcessor(OperatorProcessor):
    """The tasks placed on one worker (key = its slot key): local symmetric hash joins.

    Its state is a snapshot plus a log of each batch's changes in the shared state layer
    (:class:`~driftjoin.spark.runtime.state.LoggedState`): a batch writes what it changed, not every
    stored tuple, and a cached worker does not rebuild its tasks.
    """

    #: the dispatcher checks the plan for the whole query
    checks_plan = False

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = LoggedState(handle, "worker_tasks")

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        window = self.plan.window
        loaded = self.state.load(key, lambda: _WorkerTasks(window), lambda snap: _WorkerTasks.restore(window, snap),
                                 lambda value, change: value.apply(change))
        tasks = loaded.value.value
        out, change = self.work(self.plan.slot_of(key), pdf, tasks, loaded.source)
        self.state.save(key, loaded, change, tasks.snapshot, tasks.stored() * 100)
        if len(out):
            yield out

    def work(self, worker: int, pdf: pd.DataFrame, state: _WorkerTasks, source: str = "new") -> tuple[pd.DataFrame, dict]:
        """Apply one batch's control rows, then its routed copies in batch order; returns the
        output and the batch's changes (what :meth:`_WorkerTasks.apply` redoes)."""
        start = time.perf_counter()
        plan = self.plan
        tasks = state.tasks
        pdf = pdf.sort_values(["kind", "seq"], kind="stable", ignore_index=True)
        batch = int(pdf["batch"].iloc[0])
        kind = pdf["kind"].to_numpy()
        task_ids = pdf["task"].to_numpy().tolist()
        sides = pdf["side"].to_numpy().tolist()
        keys = keys_list(pdf["key"], plan.key_type)
        tids = pdf["tid"].to_numpy().tolist()
        tss = pdf["ts"].to_numpy().tolist()
        payloads = decode(pdf["payload"].tolist())
        change: dict[str, Any] = {"evict": None, "installs": [], "drops": [], "releases": [], "stores": []}
        evicted = 0
        evict = pdf["evict"].to_numpy()[kind == TICK]
        evict = evict[~np.isnan(evict)]
        if len(evict):
            change["evict"] = before = float(evict.max())
            evicted = sum(task.evict(before) for task in tasks.values())
        bounds = np.searchsorted(kind, np.arange(ROUTE + 2))
        installs: dict[int, list[tuple]] = defaultdict(list)
        for j in range(bounds[INSTALL], bounds[INSTALL + 1]):
            installs[task_ids[j]].append((sides[j], keys[j], tids[j], tss[j], payloads[j]))
        for t, rows in installs.items():
            state.task_of(t).install(StreamTuple(SIDES[s], k, i, x, p) for s, k, i, x, p in rows)
            change["installs"].append((t, rows))
        modulus, residue = pdf["modulus"].to_numpy().tolist(), pdf["residue"].to_numpy().tolist()
        for j in range(bounds[DROP], bounds[DROP + 1]):
            task = tasks.get(task_ids[j])
            if task is not None:
                keep = None if modulus[j] < 0 else Residue(modulus[j], residue[j])
                task.drop(Drop(task_ids[j], keys[j], SIDES[sides[j]], keep))
                change["drops"].append((task_ids[j], keys[j], sides[j], modulus[j], residue[j]))
        for j in range(bounds[RELEASE], bounds[RELEASE + 1]):
            task = tasks.pop(task_ids[j], None)
            if task is not None and task.stored:
                raise RuntimeError(f"worker {worker}: released task {task_ids[j]} still holds {task.stored} tuples")
            change["releases"].append(task_ids[j])
        roles = pdf["role"].to_numpy().tolist()
        sink: list | None = [] if plan.output == "rows" else None
        lefts: list[tuple] = []
        rights: list[tuple] = []
        produced = 0
        for j in range(bounds[ROUTE], bounds[ROUTE + 1]):
            tup = StreamTuple(SIDES[sides[j]], keys[j], tids[j], tss[j], payloads[j])
            role = ROLES[roles[j]]
            task = state.task_of(task_ids[j])
            first = len(sink) if sink is not None else 0
            produced += task.process(tup, role, sink)
            if sink is not None and len(sink) > first:
                # the pairs of this probe: its own payload and each stored partner's
                other, left = SIDES[1 - sides[j]], sides[j] == 0
                for r, s in sink[first:]:
                    partner = task.lookup(other, keys[j], s if left else r).payload
                    lefts.append(payloads[j] if left else partner)
                    rights.append(partner if left else payloads[j])
            if role & Role.STORE:
                change["stores"].append((task_ids[j], (sides[j], keys[j], tids[j], tss[j], payloads[j])))
        received = int(bounds[ROUTE + 1] - bounds[ROUTE])
        n_installed = int(bounds[INSTALL + 1] - bounds[INSTALL])
        stored_now = state.stored()
        totals = state.totals
        totals["received"] += received
        totals["installed"] += n_installed
        totals["produced"] += produced
        totals["peak_stored"] = max(totals["peak_stored"], stored_now)
        change["totals"] = dict(totals)
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "equi_worker", worker, batch, {
                "worker": worker, "batch": batch, "time": time.time(), "received": received,
                "installed": n_installed, "produced": produced, "stored": stored_now, "tasks": len(tasks),
                "evicted": evicted, "totals": dict(totals), "seconds": time.perf_counter() - start,
                "state_source": source,
            })
        if plan.output == "count":
            return pd.DataFrame({"batch": [batch], "worker": np.int32([worker]), "pairs": [produced]}), change
        return pairs_frame(plan.layout, lefts, rights), change
