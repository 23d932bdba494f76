"""The stateful operators of ``topk_set_join`` (SWOOP) and the stateless steps around them.

``parallelism=1``: SWOOP is sequential, every insert reads and updates one index and one stock,
so the whole join runs as one ``transformWithStateInPandas`` key (:class:`SwoopProcessor`), in
a total order of the sets within each micro-batch; the rows before it (validation) run in
parallel. Its state is a snapshot and a log of changes (State, below).

``parallelism=p > 1``: the ``"owner"`` design of :mod:`driftjoin.swoop.partitioned`, in the
shape every driftjoin operator has (stateless parallel routing, stateful workers)::

    valid sets --mapInArrow(route_sets)--> p copies of each set, key = worker w's slot key,
                                            owner = owner_of(id, side, p)        [stateless]
      --groupBy(key).transformWithStateInPandas(WorkerProcessor)-->             [p workers]
          worker w, design "owner": OwnerWorker (indexes the sets it owns, joins every set
          with its index); design "probe": ProbeWorker (indexes every set, joins the sets it
          owns); either way SWOOP's stock and top-k over its own pairs; emits its top-k
          changes with the pair keys (similarity, end, arrival numbers) and the operation
          number
      --groupBy(mkey).transformWithStateInPandas(MergeProcessor)-->             [one key]
          TopKMerger: the union of the workers' top-k's -> the global change stream, numbered

Why it is exact: every pair of sets is found by exactly one worker, the owner of its earlier
set ("owner") or of its later set ("probe"), and the global top-k is the top k of the union of the workers' top-k's (the module
docstring of :mod:`driftjoin.swoop.partitioned`). Every worker receives every set of a batch
and inserts them in the same total order (:func:`insert_order`), so all workers number the
sets, move the index time and refuse late or duplicate sets alike; the operation number (sets
inserted or refused since the start, kept in each worker's state) is therefore the same at
every worker and lets the merger put the workers' changes back into one sequence: per
operation, steps by time and phase (expiries before the insert's own step), as a single join
reports them. Only the owner reports a refused set (kind ``late``, ``duplicate``), once.

Shared bound (``share_bound=True``, streams with ``metrics_dir``): each worker also writes its
stock's similarities and end times with its statistics,
:class:`~driftjoin.spark.topk.control.SharedBoundController` on the driver combines them after every
micro-batch into a lower bound of the global skyband bound and publishes it as a versioned
decision; worker 0 binds the newest version to the next batch and each worker adopts the
version bound to its batch (:func:`adopted_bound`: a bound that holds pairs of the running batch
is not safe for that batch's earlier sets) and prunes with the larger of its own bound and the
shared one (exact: :mod:`driftjoin.swoop.bound`).

State, in the shared state layer (:mod:`driftjoin.spark.runtime.state`): the single join and each
worker keep a snapshot plus a log with one entry per batch, so a batch writes what it changed,
not the whole index and window; the merge key holds the union of the top-k's (at most ``p k``
pairs) and the change count as one value. All commit with the batch (exactly-once). A log
entry is the batch's :class:`~driftjoin.swoop.delta.JoinDelta` (the sets the join indexed, with
their token numbers, the sets it only saw, the tokens it numbered, its stock and counters after
the batch) plus the change or operation count and, for a worker, the shared bound it adopted.
The per-process cache serves the decoded join when the key's previous batch ran in the same
Python worker; it mostly does not (measured: 8 of 10 batches found it stale), and a
stale or missing join is rebuilt by applying the entries written since: window and index
appends and expiries without probing, the stock replaced, no candidate search. Checkpoints of
another state format are refused on restart (the plan's ``state_format``).
Key 0 is a
worker key for every p (:func:`driftjoin.spark.runtime.keys.slot_keys` picks the smallest int per
partition) and the single operator's key, so the plan stored there
(:mod:`driftjoin.spark.runtime.plan_guard`), which names the parallelism when it is above 1, refuses a
restart with another parallelism.
"""

from __future__ import annotations

import gc
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle,
)

from driftjoin.spark.runtime.decisions import bind, read_bound
from driftjoin.spark.runtime.plan_guard import OperatorPlan
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.queries import task_query
from driftjoin.spark.runtime.state import BlobState, LoggedState
from driftjoin.spark.runtime.stats import write_stats
from driftjoin.spark.topk.settings import TopKSettings
from driftjoin.swoop import DuplicateSetError, InvalidSetError, LateSetError, Swoop
from driftjoin.swoop.bound import Staircase
from driftjoin.swoop.pairs import SimilarPair
from driftjoin.swoop.partitioned import (
    WORKERS,
    KeyedChange,
    RoutedWorker,
    TopKMerger,
    owner_of,
    owners_of_ints,
)
from driftjoin.windows import TICKS_PER_SECOND

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa, pyarrow_compute as pc

#: Version of the operator's state; a checkpoint written with another is refused.
STATE_FORMAT = 4

#: The merge stage's one key (also worker 0's slot key; the stages have separate state).
MERGE_KEY = 0
#: The decision name of the shared bound under ``<metrics_dir>/control/``.
SHARED_BOUND = "swoop_bound"

#: Worker output columns: merge key, operation, step (time, phase), change, pair key, ids.
WORKER_COLUMNS = ("mkey", "op", "time", "phase", "kind", "sim", "end", "i", "j", "left_id", "right_id")

CHANGE_COLUMNS = ("kind", "left_id", "right_id", "similarity", "change_time", "seq")


@dataclass(frozen=True)
class TopKPlan(OperatorPlan):
    operator = "topk_set_join"
    #: settings a restart may change: where statistics go, and whether the bound is shared (exact either way)
    ADOPTABLE = frozenset({"metrics_dir", "share_bound"})

    k: int
    similarity: str
    #: the band of the deprecated ``window=``: a pair is valid while its later set's time is less
    #: than ``window_seconds`` after its earlier set's (None with ``within_seconds``)
    window_seconds: float | None
    two_stream: bool
    metrics_dir: str | None
    parallelism: int = 1
    share_bound: bool = False
    design: str = "owner"
    #: ``within=``: a pair is valid while its sets' times differ by at most this much
    within_seconds: float | None = None

    @classmethod
    def of(cls, settings: TopKSettings, two_stream: bool) -> TopKPlan:
        """The plan of a join with ``settings`` (checked) of one input, or two (``two_stream``)."""
        s = settings
        return cls(s.k, s.similarity, s.window_seconds, two_stream, s.metrics_dir, s.parallelism, s.share_bound,
                   s.design if s.parallelism > 1 else "owner", s.within_seconds)

    @property
    def band(self) -> float:
        """SWOOP's window ``w`` (a pair is valid while ``t_later < t_earlier + w``): ``within``
        plus half a tick, so that times at Spark's resolution (whole ticks) differ by at most
        ``within`` exactly when they pass SWOOP's strict test, with half a tick of margin for the
        rounding of times in seconds."""
        if self.within_seconds is None:
            return self.window_seconds
        return self.within_seconds + 0.5 / TICKS_PER_SECOND

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`); the
        parallelism and the shared bound only when used, so checkpoints of the single operator
        keep their plan."""
        settings = {"operator": "topk_set_join", "state_format": STATE_FORMAT, "k": self.k,
                    "similarity": self.similarity, "window_seconds": self.window_seconds,
                    "two_stream": self.two_stream, "metrics_dir": self.metrics_dir}
        if self.within_seconds is not None:  # (so a checkpoint of window= keeps its plan)
            settings["within_seconds"] = self.within_seconds
        if self.parallelism > 1:
            settings["parallelism"] = self.parallelism
        if self.share_bound:
            settings["share_bound"] = True
        if self.design != "owner":  # (so a checkpoint of the owner design keeps its plan)
            settings["design"] = self.design
        return settings


def refusal_kind(error: InvalidSetError) -> str:
    """The change-stream kind of a set the join refuses."""
    if isinstance(error, LateSetError):
        return "late"
    return "duplicate" if isinstance(error, DuplicateSetError) else "invalid"


def insert_order(pdf: pd.DataFrame) -> pd.DataFrame:
    """A batch's sets in a total order (time, side, id, tokens): the same at every worker and in
    every replay of the batch, whatever order the rows arrive in. The tokens are joined into a
    sort key only when (time, side, id) leave a tie (a repeated id at one time): building that
    key costs more than the rest of the sort."""
    ordered = pdf.sort_values(["ts", "side", "id"], kind="stable")
    if not ordered.duplicated(["ts", "side", "id"]).any():
        return ordered
    return (pdf.assign(_tokens=pdf["tokens"].map("\x1f".join))
            .sort_values(["ts", "side", "id", "_tokens"], kind="stable").drop(columns="_tokens"))


def batch_sets(pdf: pd.DataFrame, *extra: str) -> list[tuple]:
    """The ordered batch's sets as ``(id, side, tokens, ts, *extra columns)``: plain Python
    values, the tokens as they come (an array per set, validated and numbered by the join's
    batch insert)."""
    return list(zip(pdf["id"].tolist(), pdf["side"].tolist(), pdf["tokens"], pdf["ts"].tolist(),
                    *(pdf[name].tolist() for name in extra)))


@contextmanager
def collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector off while a batch's sets are inserted (as it was after).

    A join holds every valid set as objects (window records, id maps), and the collector's full
    passes walk all of them: about a fifth of the single join's time at |W| = 10^5 (one process,
    200,000 sets in batches of 50,000: 11.95 s with it, 9.24 s without; an owner worker of 2:
    7.99 s and 6.12 s). Every worker of a partitioned join holds a record of every valid set, so
    that cost divides poorly by p. Records, pair keys
    and change rows are freed by reference counting as before; the few reference cycles a batch
    makes (a refused set's error and its traceback) wait for the collector's next pass after
    the batch."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def change_frames(out: dict[str, list]) -> Iterator[pd.DataFrame]:
    """The change rows of a batch, with the change time in microseconds (none if there are none:
    an empty frame would have float columns, which Arrow refuses for string ids)."""
    if not out["kind"]:
        return
    frame = pd.DataFrame(out)
    frame["change_time"] = (frame["change_time"].to_numpy(dtype=np.float64) * 1e6).round().astype(np.int64)
    yield frame


def _reasons(batch: pa.RecordBatch) -> np.ndarray:
    """Why each row cannot be a set (None where it can): the test of both the join and :func:`invalid_sets`."""
    n = batch.num_rows
    reason = batch.column("time_reason").to_numpy(zero_copy_only=False).astype(object)
    tokens = batch.column("tokens")
    if isinstance(tokens, pa.ChunkedArray):
        tokens = tokens.combine_chunks()
    reason[tokens.is_null().to_numpy(zero_copy_only=False) & (reason == None)] = "missing tokens"  # noqa: E711
    lengths = pc.list_value_length(tokens).fill_null(-1).to_numpy(zero_copy_only=False)
    reason[(lengths == 0) & (reason == None)] = "empty set"  # noqa: E711
    if n and tokens.null_count < n:
        # rows whose list holds a null element: count the nulls of the flattened values per row
        nulls = pc.is_null(pc.list_flatten(tokens)).to_numpy(zero_copy_only=False)
        owner = pc.list_parent_indices(tokens).to_numpy(zero_copy_only=False)
        has_null = np.bincount(owner[nulls], minlength=n) > 0
        reason[has_null & (reason == None)] = "null token"  # noqa: E711
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


class _Processor(OperatorProcessor):
    """What the three processors share: the single join's value state before the state layer
    (a checkpoint that holds it is refused)."""

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.keep_old_states(handle, "swoop")


@dataclass
class _Single:
    """The single join and the number of change rows emitted so far (the next change's ``seq``)."""

    join: Swoop
    changes: int = 0

    def insert_all(self, sets: list[tuple], two_stream: bool, out: dict[str, list]) -> tuple[dict[str, int], dict]:
        """Insert sets ``(id, side, tokens, ts)`` in order; change rows go to ``out``. Returns
        the refused sets by kind and the batch's log entry (what it changed, :meth:`apply`)."""
        self.join.start_delta()
        refused = {"late": 0, "duplicate": 0, "invalid": 0}
        results = self.join.insert_many(
            [(sid, tokens, ts, ("R" if side == 0 else "S") if two_stream else None) for sid, side, tokens, ts in sets])
        for (sid, _, _, ts), changes in zip(sets, results):
            if isinstance(changes, InvalidSetError):
                kind = refusal_kind(changes)
                refused[kind] += 1
                for col, v in zip(out, (kind, sid, None, math.nan, ts, self.changes)):
                    out[col].append(v)
                self.changes += 1
                continue
            for n, c in enumerate(changes):
                for col, v in zip(out, (c.kind, c.pair.first, c.pair.second, c.pair.sim, c.time, self.changes + n)):
                    out[col].append(v)
            self.changes += len(changes)
        return refused, {"delta": self.join.take_delta(), "changes": self.changes}

    def apply(self, logged: dict) -> None:
        """Apply a batch's log entry: the join's changes without probing (:mod:`driftjoin.swoop.delta`)."""
        self.join.apply_delta(logged["delta"])
        self.changes = logged["changes"]


class SwoopProcessor(_Processor):
    """The whole SWOOP join (one key, ``parallelism=1``): inserts a batch's sets in order."""

    def open(self, handle: StatefulProcessorHandle) -> None:
        super().open(handle)
        self.state = LoggedState(handle, "swoop_log")

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        plan = self.plan
        t0 = time.perf_counter()
        loaded = self.state.load(
            key, lambda: _Single(Swoop(plan.k, plan.similarity, plan.band, two_stream=plan.two_stream)),
            lambda snap: snap, lambda value, logged: value.apply(logged))
        self.refuse_old_state(loaded.source == "new")
        single: _Single = loaded.value.value
        t1 = time.perf_counter()
        pdf = insert_order(pdf)
        sets = batch_sets(pdf)
        out: dict[str, list] = {name: [] for name in CHANGE_COLUMNS}
        started = time.perf_counter()
        with collector_paused():
            refused, logged = single.insert_all(sets, plan.two_stream, out)
        elapsed = time.perf_counter() - started
        snapshot = self.state.save(key, loaded, logged, lambda: single, single.join.window_size * 200)
        t3 = time.perf_counter()
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "swoop", 0, loaded.seq, {
                "seq": loaded.seq, "time": time.time(), "sets": len(pdf), **refused, "changes": len(out["kind"]),
                "seconds": elapsed, "state_source": loaded.source, "snapshot": snapshot,
                "timings": {"state_read": t1 - t0, "order": started - t1, "join": elapsed,
                            "state_write": t3 - started - elapsed}})
        yield from change_frames(out)


def route_sets(plan: TopKPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stateless routing: each valid set to every worker key, with its owner."""
    keys = plan.keys
    for batch in batches:
        if not batch.num_rows:
            continue
        ids = batch.column("id")
        sides = batch.column("side").to_numpy(zero_copy_only=False)
        if pa.types.is_integer(ids.type):
            owners = owners_of_ints(ids.to_numpy(zero_copy_only=False), sides, plan.parallelism)
        else:
            owners = np.array([owner_of(i, "S" if s else None, plan.parallelism)
                               for i, s in zip(ids.to_pylist(), sides.tolist())], np.int64)
        owner = pa.array(owners.astype(np.int32))
        cols = [batch.column(name) for name in ("side", "id", "tokens", "ts")]
        for key in keys:
            yield pa.RecordBatch.from_arrays([pa.array(np.full(batch.num_rows, key, np.int32)), *cols, owner],
                                             names=["key", "side", "id", "tokens", "ts", "owner"])


@dataclass
class _Worker:
    """One worker of the partitioned join: its worker (:class:`~driftjoin.swoop.partitioned.OwnerWorker`
    or ``ProbeWorker``), operation count, bound version."""

    worker: RoutedWorker
    ops: int = 0
    bound_version: int = 0

    def run(self, change: dict[str, Any], sets: list[tuple], two_stream: bool, w: int,
            out: dict[str, list]) -> dict[str, int]:
        """Adopt the change's shared bound, then insert the batch's sets (``out``: the worker's
        rows); the change gets the batch's log entry (what it changed, :meth:`apply`). Returns
        the sets it refused (and owns) by kind."""
        self._adopt(change)
        self.worker.start_delta()
        refused = {"late": 0, "duplicate": 0, "invalid": 0}
        results = self.worker.insert_routed_many(
            [(sid, tokens, ts, ("R" if side == 0 else "S") if two_stream else None, owner)
             for sid, side, tokens, ts, owner in sets])
        for (sid, _, _, ts, owner), result in zip(sets, results):
            if isinstance(result, InvalidSetError):
                if owner == w:
                    kind = refusal_kind(result)
                    refused[kind] += 1
                    _append(out, self.ops, ts, 1, kind, (math.nan, math.nan, -1, -1), sid, None)
                self.ops += 1
                continue
            changes, mark = result
            for x, c in enumerate(changes):
                _append(out, self.ops, c.time, int(x >= mark), c.kind, c.key, c.pair.first, c.pair.second)
            self.ops += 1
        change.update(delta=self.worker.take_delta(), ops=self.ops)
        return refused

    def apply(self, change: dict[str, Any]) -> None:
        """Apply a batch's log entry: the bound it adopted and the worker's changes, without
        probing (:mod:`driftjoin.swoop.delta`)."""
        self._adopt(change)
        self.worker.apply_delta(change["delta"])
        self.ops = change["ops"]

    def _adopt(self, change: dict[str, Any]) -> None:
        if change["bound"] is not None:
            ends, sims = change["bound"]
            self.worker.set_bound(Staircase(np.array(ends), np.array(sims)))
            self.bound_version = change["bound_version"]


class WorkerProcessor(_Processor):
    """Worker w (its key is ``slot_keys(p)[w]``): SWOOP over its own pairs (module docstring)."""

    def open(self, handle: StatefulProcessorHandle) -> None:
        super().open(handle)
        self.state = LoggedState(handle, "swoop_worker_log")

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        plan = self.plan
        t0 = time.perf_counter()
        w = plan.slot_of(key)
        loaded = self.state.load(
            key, lambda: _Worker(WORKERS[plan.design](plan.k, plan.similarity, plan.band, w,
                                                         plan.parallelism, two_stream=plan.two_stream)),
            lambda snap: snap, lambda value, change: value.apply(change))
        self.refuse_old_state(loaded.source == "new")
        state: _Worker = loaded.value.value
        worker = state.worker
        change: dict[str, Any] = {"bound": None, "bound_version": state.bound_version}
        if plan.share_bound:  # the control plane's bound (SharedBoundController), as bound to this batch
            doc = adopted_bound(plan.metrics_dir, w, state.bound_version)
            if doc is not None:
                change.update(bound=(doc["ends"], doc["sims"]), bound_version=int(doc["version"]))
        t1 = time.perf_counter()
        pdf = insert_order(pdf)
        sets = batch_sets(pdf, "owner")
        pre, cand = worker.generator.pre_candidates, worker.generator.candidates
        out: dict[str, list] = {name: [] for name in WORKER_COLUMNS}
        started = time.perf_counter()
        with collector_paused():
            refused = state.run(change, sets, plan.two_stream, w, out)
        elapsed = time.perf_counter() - started
        self.state.save(key, loaded, change, lambda: state, worker.indexed_sets * 200)
        t3 = time.perf_counter()
        if plan.metrics_dir:
            stats = {"seq": loaded.seq, "time": time.time(), "worker": w, "sets": len(pdf),
                     "owned": int((pdf["owner"] == w).sum()), **refused, "changes": len(out["op"]), "seconds": elapsed,
                     "timings": {"state_read": t1 - t0, "order": started - t1, "join": elapsed,
                                 "state_write": t3 - started - elapsed},
                     "pre_candidates": worker.generator.pre_candidates - pre,
                     "candidates": worker.generator.candidates - cand, "stock": len(worker.stock),
                     "indexed_sets": worker.indexed_sets, "bound_version": state.bound_version,
                     "state_source": loaded.source}
            if plan.share_bound:  # the control plane combines the stocks into the shared bound
                sims, ends = worker.stock.pair_arrays()
                stats.update(stock_sims=sims.tolist(), stock_ends=ends.tolist())
            write_stats(plan.metrics_dir, "swoop_worker", w, loaded.seq, stats)
        if out["op"]:  # (an empty frame would have float columns, which Arrow refuses for ids)
            yield pd.DataFrame(out)


def adopted_bound(metrics_dir: str, worker: int, adopted: int) -> dict[str, Any] | None:
    """The shared bound a worker adopts at the start of its batch: the version bound to the batch
    (:func:`driftjoin.spark.runtime.decisions.bind`) if newer than the one it ``adopted``, else
    None. Worker 0, which every batch with data reaches, binds the newest version to the next
    batch.

    Why bound and not the newest: the controller may combine stocks while a batch runs (after
    another query's batch, or late after this query's previous one), taking in the pairs other
    workers found in the running batch. Those pairs are born after some of the batch's sets, so
    a worker that pruned that batch's earlier sets with them would drop pairs that are in the
    top-k for a while (the bound is safe only for pairs born before the sets it prunes). A
    version bound during batch ``b - 1`` holds pairs of batches up to ``b - 1`` only, and every
    set batch ``b`` accepts is at or after their times (late sets are refused). It also keeps a
    re-run of a worker's task on the version its first attempt read.

    Parameters
    ----------
    metrics_dir:
        The query's metrics directory (the decisions' root).
    worker:
        The worker's number, 0 to p - 1.
    adopted:
        The version the worker's state holds (0: none yet).
    """
    task = task_query()
    if worker == 0 and task.batch_id is not None:
        bind(metrics_dir, SHARED_BOUND, task.batch_id + 1)
    return read_bound(metrics_dir, SHARED_BOUND, task.batch_id, newer_than=adopted, query=task.query_id)


def _append(out: dict[str, list], op: int, when: float, phase: int, kind: str, key: tuple, left: Any, right: Any) -> None:
    for name, value in zip(WORKER_COLUMNS, (MERGE_KEY, op, when, phase, kind, -key[0], -key[1], key[2], key[3], left, right)):
        out[name].append(value)


class MergeProcessor(_Processor):
    """The global change stream from the workers' changes (one key, :class:`TopKMerger`; its
    state, at most ``p k`` pairs, is one value read and written whole)."""

    def open(self, handle: StatefulProcessorHandle) -> None:
        super().open(handle)
        self.state = BlobState(handle, "swoop_merge")

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        plan = self.plan
        t0 = time.perf_counter()
        saved, seq = self.state.resume(STATE_FORMAT, plan.operator)
        merger = saved["merger"] if saved else TopKMerger(plan.k)
        change_no = saved["changes"] if saved else 0
        started = time.perf_counter()
        out: dict[str, list] = {name: [] for name in CHANGE_COLUMNS}
        pdf = pdf.sort_values(["op", "time", "phase"], kind="stable")
        for (_, when, _), step in pdf.groupby(["op", "time", "phase"], sort=False):
            kinds = step["kind"].to_numpy()
            refused = (kinds != "enter") & (kinds != "leave")
            for kind, sid in zip(kinds[refused], step["left_id"].to_numpy()[refused]):
                for col, v in zip(out, (kind, sid, None, math.nan, when, change_no)):
                    out[col].append(v)
                change_no += 1
            if refused.all():
                continue
            changes = [KeyedChange(when, kind, (-s, -e, int(i), int(j)), SimilarPair(s, first, second, e))
                       for kind, s, e, i, j, first, second in zip(
                           kinds, step["sim"], step["end"], step["i"], step["j"], step["left_id"], step["right_id"])
                       if kind in ("enter", "leave")]
            for c in merger.step(when, [c for c in changes if c.kind == "leave"],
                                 [c for c in changes if c.kind == "enter"]):
                for col, v in zip(out, (c.kind, c.pair.first, c.pair.second, c.pair.sim, c.time, change_no)):
                    out[col].append(v)
                change_no += 1
        t2 = time.perf_counter()
        self.state.save({"format": STATE_FORMAT, "merger": merger, "changes": change_no, "seq": seq})
        t3 = time.perf_counter()
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "swoop_merge", 0, seq, {
                "seq": seq, "time": time.time(), "worker_changes": len(pdf), "changes": len(out["kind"]),
                "union": len(merger), "seconds": t2 - started,
                "timings": {"state_read": started - t0, "join": t2 - started, "state_write": t3 - t2}})
        yield from change_frames(out)
