"""The two stateful operators of the S3J pipeline on Spark, and the stateless router before them.

Data path (one micro-batch)::

    input rows --mapInArrow(route)--> (partition key, outer?, record)       [space partitioning]
      --groupBy(partition key).transformWithStateInPandas(Formulation)-->
      (worker key, workset, role, record)                                   [workset formulation]
      --groupBy(worker key).transformWithStateInPandas(Computation)--> pairs [similarity computation]

Keys are one int per space partition / worker, chosen so each lands in its own shuffle
partition (:mod:`driftjoin.spark.keys`); each key's state is read and written once per batch as
one binary value (a pickled dict of numpy arrays), so the per-key socket cost is paid once.

Besides the records, every routing task sends one *heartbeat* row to every key of the next
stateful stage and to :data:`~driftjoin.spark.plan_guard.PLAN_KEY`, carrying the largest window
time of its rows; each formulation key forwards the batch's largest time to every worker key
the same way. So every key runs on every batch that has data, stores and checks the plan
(:mod:`driftjoin.spark.plan_guard`) and closes windows by the same frontier
(:mod:`driftjoin.clock`). Records of closed windows are *late*: rejected, counted and listed in
the statistics (``late_rows``), never joined with part of their window.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

from driftjoin.clock import WindowClock, batch_max
from driftjoin.distance import get_metric
from driftjoin.s3j.baselines import BruteForceRouter, ClusterJoinRouter
from driftjoin.s3j.compute import SimilarityWorker, WorksetCounters, restore_worker, worker_state
from driftjoin.s3j.ids import global_workset
from driftjoin.s3j.routing import WorksetRouter
from driftjoin.s3j.records import Records
from driftjoin.s3j.space import SpacePartitioner
from driftjoin.s3j.workset import OUTER, WorksetFormulation, formulation_state, restore_formulation
from driftjoin.spark.keys import slot_keys
from driftjoin.spark.metrics_sink import latency_histogram, read_assignment, write_stats
from driftjoin.spark.plan_guard import PLAN_KEY, PlanGuard, digest
from driftjoin.spark.vectors import binary_rows, from_binary, to_binary, validate

_BLOB = StructType([StructField("blob", BinaryType(), False)])
#: Pairs per output DataFrame: bounds the Arrow buffers between the Python worker and the JVM.
OUTPUT_CHUNK = 200_000
#: Workset memberships per output DataFrame of the formulation (with a 128-D vector each, ~100 MB).
MEMBER_CHUNK = 100_000
#: ``side`` of a heartbeat row (its ``ingest`` is the largest window time its sender saw).
HEARTBEAT = -1
#: Version of the operators' state; a checkpoint written with another is refused.
STATE_FORMAT = 2
#: Plan settings a restarted query may change (they do not touch state).
ADOPTABLE = frozenset({"metrics_dir"})


@dataclass(frozen=True)
class S3JPlan:
    """Everything the operators need, fixed when the query is built (shipped by pickling)."""

    metric: str
    threshold: float
    dim: int
    parallelism: int
    centroids: np.ndarray
    self_join: bool
    window_seconds: float | None
    metrics_dir: str | None
    algorithm: str = "s3j"
    #: what defines a record's window: "event" (time_col), "ingest" (ingest_col) or "batch"
    time_basis: str = "batch"
    #: how far behind the largest time of earlier batches a window may still take records
    lateness: float = 0.0

    @property
    def keys(self) -> tuple[int, ...]:
        return slot_keys(self.parallelism)

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.plan_guard`)."""
        return {"operator": "similarity_join", "state_format": STATE_FORMAT, "algorithm": self.algorithm,
                "metric": self.metric, "threshold": self.threshold, "dim": self.dim,
                "parallelism": self.parallelism, "centroids": digest(self.centroids), "self_join": self.self_join,
                "window_seconds": self.window_seconds, "time_basis": self.time_basis, "lateness": self.lateness,
                "metrics_dir": self.metrics_dir}

    def guard(self, handle: StatefulProcessorHandle) -> PlanGuard:
        return PlanGuard(handle, "similarity_join", self.settings(), ADOPTABLE)

    def slot_of(self, key: int) -> int:
        return self.keys.index(int(key))


def _window_of(plan: S3JPlan, basis: np.ndarray) -> np.ndarray:
    if plan.window_seconds is None:
        return np.zeros(len(basis), dtype=np.int64)
    return np.floor(basis / plan.window_seconds).astype(np.int64)


def classify(plan: S3JPlan, batch: pa.RecordBatch) -> tuple[np.ndarray, np.ndarray]:
    """Why each input row cannot be joined (None where it can) and the valid rows' vectors.

    The one test shared by the join (which keeps the valid rows) and :func:`dead_letter_batches`
    (which reports the others), so a row is always exactly one of the two. ``time_reason`` comes
    from the JVM side (:func:`driftjoin.spark.columns.time_seconds`: a missing, unparsable or
    non-finite time); the id and the vector are checked here.
    """
    metric = get_metric(plan.metric)
    _, reason, mat = validate(batch.column("id"), batch.column("vector"), plan.dim, metric.needs_nonzero, metric.bounded)
    time_reason = batch.column("time_reason").to_numpy(zero_copy_only=False)
    vector_ok = reason == None  # noqa: E711
    reason = np.where(vector_ok & (time_reason != None), time_reason, reason)  # noqa: E711
    return reason, mat[(reason == None)[vector_ok]]  # noqa: E711


def _prepared(plan: S3JPlan, batch: pa.RecordBatch) -> tuple[np.ndarray, Records, float] | None:
    """Valid rows' indices, their records (vectors prepared) and their largest window time."""
    reason, mat = classify(plan, batch)
    idx = np.nonzero(reason == None)[0]  # noqa: E711
    if not len(idx):
        return None
    metric = get_metric(plan.metric)
    ingest = batch.column("ingest").to_numpy(zero_copy_only=False)[idx].astype(np.float64)
    basis = batch.column("time").to_numpy(zero_copy_only=False)[idx].astype(np.float64)
    side = batch.column("side").to_numpy(zero_copy_only=False)[idx].astype(np.int8)
    return idx, Records(idx, side, metric.prepare(mat), ingest, _window_of(plan, basis)), batch_max(basis)


def _filler(dtype: pa.DataType) -> object:
    """A non-null placeholder of an Arrow type (a null would turn an int column into floats in pandas)."""
    if pa.types.is_binary(dtype):
        return b""
    if pa.types.is_string(dtype):
        return ""
    if pa.types.is_boolean(dtype):
        return False
    return 0


def _heartbeats(keys: list[int], time: float, schema: pa.Schema) -> pa.RecordBatch:
    """One heartbeat row per key: ``side`` = :data:`HEARTBEAT`, ``ingest`` = ``time``."""
    n = len(keys)
    cols = []
    for field in schema:
        if field.name in ("key", "wkey"):
            cols.append(pa.array(keys, field.type))
        elif field.name == "side":
            cols.append(pa.array(np.full(n, HEARTBEAT, np.int8), field.type))
        elif field.name == "ingest":
            cols.append(pa.array(np.full(n, time), field.type))
        else:
            cols.append(pa.array([_filler(field.type)] * n, field.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def route_members(plan: S3JPlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """ClusterJoin / brute force (stateless routing): member rows straight for the workers."""
    metric = get_metric(plan.metric)
    router = (ClusterJoinRouter(plan.centroids, metric, plan.threshold, plan.parallelism)
              if plan.algorithm == "clusterjoin" else BruteForceRouter())
    keys = np.asarray(plan.keys, dtype=np.int32)
    names = ["wkey", "workset", "role", "side", "id", "vec", "ingest", "window", "store"]
    seen = -np.inf
    for batch in batches:
        prepared = _prepared(plan, batch)
        if prepared is None:
            continue
        _, rec, top = prepared
        seen = max(seen, top)
        m, owner = router.route(rec)
        r = rec.take(m.row)
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys[owner], pa.int32()), pa.array(m.workset, pa.int64()), pa.array(m.role, pa.int8()),
             pa.array(r.side, pa.int8()), batch.column("id").take(pa.array(r.id)), to_binary(r.vec),
             pa.array(r.ingest), pa.array(r.window), pa.array(np.ones(len(r), dtype=bool))],
            names=names,
        )
    yield _heartbeats([*plan.keys, PLAN_KEY], seen, schema)


def route_batches(plan: S3JPlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Space partitioning (stateless): validate, prepare, and copy each record to its partitions."""
    metric = get_metric(plan.metric)
    space = SpacePartitioner(plan.centroids, metric, metric.partition_threshold(plan.threshold))
    keys = np.asarray(plan.keys, dtype=np.int32)
    names = ["key", "outer", "side", "id", "vec", "ingest", "window"]
    seen = -np.inf
    for batch in batches:
        prepared = _prepared(plan, batch)
        if prepared is None:
            continue
        idx, rec, top = prepared
        seen = max(seen, top)
        vec, ingest, window = rec.vec, rec.ingest, rec.window
        routing = space.route(vec)
        rows = idx[routing.row]
        take = pa.array(rows)
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(keys[routing.partition], pa.int32()),
                pa.array(routing.outer),
                batch.column("side").take(take).cast(pa.int8()),
                batch.column("id").take(take),
                to_binary(vec[routing.row]),
                pa.array(ingest[routing.row]),
                pa.array(window[routing.row]),
            ],
            names=names,
        )
    yield _heartbeats([*plan.keys, PLAN_KEY], seen, schema)


def dead_letter_batches(plan: S3JPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows :func:`route_batches` drops, with the reason (the dead-letter output)."""
    for batch in batches:
        reason, _ = classify(plan, batch)
        bad = np.nonzero(reason != None)[0]  # noqa: E711
        if len(bad) == 0:
            continue
        take = pa.array(bad)
        yield pa.RecordBatch.from_arrays(
            [batch.column("side").take(take).cast(pa.int8()), batch.column("id").take(take), batch.column("raw").take(take), pa.array(reason[bad].tolist(), pa.string())],
            names=["side", "id", "raw", "reason"],
        )


def _records(pdf: pd.DataFrame, dim: int) -> Records:
    return Records(
        id=pdf["id"].to_numpy(),
        side=pdf["side"].to_numpy(dtype=np.int8),
        vec=from_binary(pdf["vec"].to_numpy(), dim),
        ingest=pdf["ingest"].to_numpy(dtype=np.float64),
        window=pdf["window"].to_numpy(dtype=np.int64),
    )


class _BlobState:
    """One binary value per key: the whole core state, read and written in bulk."""

    def __init__(self, handle: StatefulProcessorHandle, name: str) -> None:
        self.value = handle.getValueState(name, _BLOB)

    def load(self) -> dict[str, Any] | None:
        if not self.value.exists():
            return None
        return pickle.loads(self.value.get()[0])

    def save(self, state: dict[str, Any]) -> None:
        self.value.update((pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL),))

    def resume(self) -> tuple[dict[str, Any] | None, int]:
        """The saved state (None on the first batch) and this batch's sequence number."""
        saved = self.load()
        return saved, 0 if saved is None else saved["seq"] + 1


def check_format(saved: dict[str, Any] | None) -> None:
    """Refuse state written by another version of these operators (a checkpoint of an older release)."""
    if saved is not None and saved.get("format") != STATE_FORMAT:
        raise RuntimeError(
            f"this checkpoint holds similarity_join operator state format {saved.get('format')}, but driftjoin "
            f"{__import__('driftjoin').__version__} reads format {STATE_FORMAT}: restart the query with a new "
            "checkpoint location (or run the driftjoin version that wrote it)")


def _split_heartbeats(pdf: pd.DataFrame) -> tuple[pd.DataFrame, float]:
    """The records of a key's batch, and the batch's largest window time (from the heartbeats)."""
    beat = pdf["side"].to_numpy() == HEARTBEAT
    top = batch_max(pdf["ingest"].to_numpy(dtype=np.float64)[beat])
    return pdf[~beat].reset_index(drop=True), top


def _forward_heartbeats(plan: S3JPlan, top: float, id_filler: object) -> pd.DataFrame:
    """Heartbeat rows for every worker key (the computation's clock gets the same batch time)."""
    n = plan.parallelism
    zeros = np.zeros(n, dtype=np.int64)
    return pd.DataFrame({
        "wkey": np.asarray(plan.keys, dtype=np.int32), "workset": zeros, "role": zeros.astype(np.int8),
        "side": np.full(n, HEARTBEAT, dtype=np.int8), "id": [id_filler] * n, "vec": [b""] * n,
        "ingest": np.full(n, top), "window": zeros, "store": np.zeros(n, dtype=bool),
    })


def _late_rows(rec: Records, late: np.ndarray) -> list[dict[str, Any]]:
    """The late records as the statistics list them (each record once: its own copy)."""
    return [{"side": int(s), "id": i.item() if hasattr(i, "item") else i, "window": int(w), "ingest": float(t)}
            for s, i, w, t in zip(rec.side[late], rec.id[late], rec.window[late], rec.ingest[late])]


class FormulationProcessor(StatefulProcessor):
    """Workset formulation for one space partition (key = that partition's slot key)."""

    def __init__(self, plan: S3JPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = _BlobState(handle, "formulation")
        self.guard = self.plan.guard(handle)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        plan = self.plan
        pdf = pd.concat(list(rows), ignore_index=True)
        if pdf.empty:
            return
        self.guard.check()
        if key[0] == PLAN_KEY:
            return
        pdf, top = _split_heartbeats(pdf)
        pdf = pdf.sort_values("ingest", kind="stable").reset_index(drop=True)
        partition = plan.slot_of(key[0])
        metric = get_metric(plan.metric)
        core = WorksetFormulation(metric, plan.threshold, plan.dim)
        router = WorksetRouter(partition)
        clock = WindowClock(plan.window_seconds, plan.lateness)
        saved, seq = self.state.resume()
        check_format(saved)
        if saved is not None:
            restore_formulation(core, saved["core"])
            router, clock.seen = saved["router"], saved["clock"]
        if plan.metrics_dir:
            latest = read_assignment(plan.metrics_dir, newer_than=router.version)
            if latest is not None:
                router.update(*latest)
        first = clock.first_open()
        if first is not None:
            core.expire_before(first)
            router.expire_before(first)
        batch = _records(pdf, plan.dim)
        outer = pdf["outer"].to_numpy(dtype=bool)
        late = clock.late(batch.window)
        late_rows = _late_rows(batch, late & ~outer)
        on_time = np.nonzero(~late)[0]
        batch, outer = batch.take(on_time), outer[on_time]
        k_before = core.n_worksets
        m = core.formulate(batch, outer)
        rec = m.records.take(m.row)
        # new worksets stay on the worker that created them (7.5) until the balancer moves them
        routed = router.route(global_workset(partition, m.workset), m.role, rec.window, rec.id)
        clock.advance(top)
        self.state.save({"format": STATE_FORMAT, "core": formulation_state(core), "router": router, "seq": seq,
                         "clock": clock.seen})
        rec = rec.take(routed.row)
        if plan.metrics_dir and (len(batch) or late_rows):
            write_stats(plan.metrics_dir, "formulation", partition, seq, {
                "partition": partition, "seq": seq, "time": time.time(),
                "records": int((~outer).sum()), "outer_copies": int(outer.sum()),
                "worksets": core.n_worksets, "new_worksets": core.n_worksets - k_before,
                "memberships": len(m), "windows": sorted(set(batch.window.tolist())),
                "late": len(late_rows), "late_rows": late_rows,
            })
        wkey = np.asarray(plan.keys, dtype=np.int32)[routed.worker]
        for lo in range(0, len(routed.row), MEMBER_CHUNK):  # bounded Arrow arrays (2 GB each at most)
            sl = slice(lo, lo + MEMBER_CHUNK)
            yield pd.DataFrame({
                "wkey": wkey[sl],
                "workset": routed.gid[sl],
                "role": routed.role[sl],
                "side": rec.side[sl],
                "id": rec.id[sl],
                "vec": binary_rows(rec.vec[sl]),
                "ingest": rec.ingest[sl],
                "window": rec.window[sl],
                "store": routed.store[sl],
            })
        yield _forward_heartbeats(plan, top, "" if pdf["id"].dtype == object else 0)

    def close(self) -> None:
        pass


class ComputationProcessor(StatefulProcessor):
    """Similarity computation for the worksets assigned to one worker (key = its slot key)."""

    def __init__(self, plan: S3JPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = _BlobState(handle, "worker")
        self.guard = self.plan.guard(handle)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        plan = self.plan
        pdf = pd.concat(list(rows), ignore_index=True)
        if pdf.empty:
            return
        self.guard.check()
        if key[0] == PLAN_KEY:
            return
        pdf, top = _split_heartbeats(pdf)
        worker = plan.slot_of(key[0])
        metric = get_metric(plan.metric)
        core = SimilarityWorker(metric, plan.threshold, plan.self_join)
        clock = WindowClock(plan.window_seconds, plan.lateness)
        saved, seq = self.state.resume()
        check_format(saved)
        if saved is not None:
            restore_worker(core, saved["core"])
            clock.seen = saved["clock"]
        first = clock.first_open()
        if first is not None:
            core.expire_before(first)
        rec = _records(pdf, plan.dim)
        role = pdf["role"].to_numpy(dtype=np.int8)
        # only a stateless router (ClusterJoin, brute force) sends late records this far; the
        # formulation has rejected them already otherwise
        late = clock.late(rec.window)
        late_rows = _late_rows(rec, late & ((role & 3) != OUTER))
        on_time = np.nonzero(~late)[0]
        rec, role = rec.take(on_time), role[on_time]
        counters = WorksetCounters()
        pairs = core.add(rec, pdf["workset"].to_numpy(dtype=np.int64)[on_time], role, counters,
                         store=pdf["store"].to_numpy(dtype=bool)[on_time])
        clock.advance(top)
        self.state.save({"format": STATE_FORMAT, "core": worker_state(core), "seq": seq, "clock": clock.seen})
        emit = time.time()
        if plan.metrics_dir and (len(rec) or late_rows):
            stats = _worker_stats(worker, seq, emit, core, counters, pairs)
            stats.update(late=len(late_rows), late_rows=late_rows)
            write_stats(plan.metrics_dir, "computation", worker, seq, stats)
        emit_us = int(round(emit * 1e6))
        ingest_us = np.round(pairs.ingest * 1e6).astype(np.int64)
        for lo in range(0, len(pairs), OUTPUT_CHUNK):
            part = slice(lo, lo + OUTPUT_CHUNK)
            n = len(pairs.left_id[part])
            # plain numbers only: timestamps are derived in the JVM (see similarity_join), which
            # moves millions of pairs per batch far faster than converting them in pandas
            yield pd.DataFrame({
                "left_id": pairs.left_id[part],
                "right_id": pairs.right_id[part],
                "distance": pairs.distance[part],
                "window": pairs.window[part],
                "ingest_us": ingest_us[part],
                "emit_us": np.full(n, emit_us, dtype=np.int64),
                "worker": np.full(n, worker, dtype=np.int32),
                "workset": pairs.workset[part],
            })

    def close(self) -> None:
        pass


def _worker_stats(worker: int, seq: int, emit: float, core: SimilarityWorker, c: WorksetCounters, pairs: Any) -> dict:
    worksets = sorted(set(c.inner) | set(c.outlier) | set(c.outer) | set(c.comparisons))
    return {
        "worker": worker, "seq": seq, "time": emit,
        "comparisons": int(sum(c.comparisons.values())), "pairs": len(pairs),
        "records": int(sum(c.inner.values()) + sum(c.outlier.values())),
        "memberships": int(sum(c.inner.values()) + sum(c.outlier.values()) + sum(c.outer.values())),
        "state_bytes": core.state_bytes(),
        "latency_hist": latency_histogram(emit - pairs.ingest),
        "windows": sorted(int(w) for w in core.windows),
        "worksets": {
            str(g): [c.inner.get(g, 0), c.outlier.get(g, 0), c.outer.get(g, 0), c.comparisons.get(g, 0), c.pairs.get(g, 0)]
            for g in worksets
        },
    }
