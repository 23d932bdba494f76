"""The two stateful operators of the S3J pipeline on Spark, and the stateless router before them.

Data path (one micro-batch)::

    input rows --mapInArrow(route)--> (partition key, outer?, record)       [space partitioning]
      --groupBy(partition key).transformWithStateInPandas(Formulation)-->
      (worker key, workset, role, record)                                   [workset formulation]
      --groupBy(worker key).transformWithStateInPandas(Computation)--> pairs [similarity computation]

Keys are one int per space partition / worker, chosen so each lands in its own shuffle
partition (:mod:`driftjoin.spark.keys`); each key's state is read and written once per batch as
one binary value (a pickled dict of numpy arrays), so the per-key socket cost is paid once.
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

from driftjoin.distance import get_metric
from driftjoin.s3j.baselines import BruteForceRouter, ClusterJoinRouter
from driftjoin.s3j.compute import SimilarityWorker, WorksetCounters, restore_worker, worker_state
from driftjoin.s3j.ids import global_workset
from driftjoin.s3j.routing import WorksetRouter
from driftjoin.s3j.records import Records
from driftjoin.s3j.space import SpacePartitioner
from driftjoin.s3j.workset import WorksetFormulation, formulation_state, restore_formulation
from driftjoin.spark.keys import slot_keys
from driftjoin.spark.metrics_sink import latency_histogram, read_assignment, write_stats
from driftjoin.spark.vectors import binary_rows, from_binary, to_binary, validate

_BLOB = StructType([StructField("blob", BinaryType(), False)])
#: Pairs per output DataFrame: bounds the Arrow buffers between the Python worker and the JVM.
OUTPUT_CHUNK = 200_000
#: Workset memberships per output DataFrame of the formulation (with a 128-D vector each, ~100 MB).
MEMBER_CHUNK = 100_000


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

    @property
    def keys(self) -> tuple[int, ...]:
        return slot_keys(self.parallelism)

    def slot_of(self, key: int) -> int:
        return self.keys.index(int(key))


def _window_of(plan: S3JPlan, ingest: np.ndarray, event: np.ndarray | None) -> np.ndarray:
    if plan.window_seconds is None:
        return np.zeros(len(ingest), dtype=np.int64)
    basis = ingest if event is None else event
    return np.floor(basis / plan.window_seconds).astype(np.int64)


def _prepared(plan: S3JPlan, batch: pa.RecordBatch, has_event: bool) -> tuple[np.ndarray, Records] | None:
    """Validate a batch; the valid rows' indices and their records (vectors prepared)."""
    metric = get_metric(plan.metric)
    valid, _, mat = validate(batch.column("id"), batch.column("vector"), plan.dim, metric.needs_nonzero)
    if not valid.any():
        return None
    idx = np.nonzero(valid)[0]
    ingest = batch.column("ingest").to_numpy(zero_copy_only=False)[idx].astype(np.float64)
    event = batch.column("event").to_numpy(zero_copy_only=False)[idx].astype(np.float64) if has_event else None
    side = batch.column("side").to_numpy(zero_copy_only=False)[idx].astype(np.int8)
    return idx, Records(idx, side, metric.prepare(mat), ingest, _window_of(plan, ingest, event))


def route_members(plan: S3JPlan, batches: Iterator[pa.RecordBatch], *, has_event: bool) -> Iterator[pa.RecordBatch]:
    """ClusterJoin / brute force (stateless routing): member rows straight for the workers."""
    metric = get_metric(plan.metric)
    router = (ClusterJoinRouter(plan.centroids, metric, plan.threshold, plan.parallelism)
              if plan.algorithm == "clusterjoin" else BruteForceRouter())
    keys = np.asarray(plan.keys, dtype=np.int32)
    for batch in batches:
        prepared = _prepared(plan, batch, has_event)
        if prepared is None:
            continue
        _, rec = prepared
        m, owner = router.route(rec)
        r = rec.take(m.row)
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys[owner], pa.int32()), pa.array(m.workset, pa.int64()), pa.array(m.role, pa.int8()),
             pa.array(r.side, pa.int8()), batch.column("id").take(pa.array(r.id)), to_binary(r.vec),
             pa.array(r.ingest), pa.array(r.window), pa.array(np.ones(len(r), dtype=bool))],
            names=["wkey", "workset", "role", "side", "id", "vec", "ingest", "window", "store"],
        )


def route_batches(plan: S3JPlan, batches: Iterator[pa.RecordBatch], *, has_event: bool) -> Iterator[pa.RecordBatch]:
    """Space partitioning (stateless): validate, prepare, and copy each record to its partitions."""
    metric = get_metric(plan.metric)
    space = SpacePartitioner(plan.centroids, metric, metric.partition_threshold(plan.threshold))
    keys = np.asarray(plan.keys, dtype=np.int32)
    for batch in batches:
        prepared = _prepared(plan, batch, has_event)
        if prepared is None:
            continue
        idx, rec = prepared
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
            names=["key", "outer", "side", "id", "vec", "ingest", "window"],
        )


def dead_letter_batches(plan: S3JPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows :func:`route_batches` drops, with the reason (the dead-letter output)."""
    metric = get_metric(plan.metric)
    for batch in batches:
        valid, reason, _ = validate(batch.column("id"), batch.column("vector"), plan.dim, metric.needs_nonzero)
        bad = np.nonzero(~valid)[0]
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


class FormulationProcessor(StatefulProcessor):
    """Workset formulation for one space partition (key = that partition's slot key)."""

    def __init__(self, plan: S3JPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = _BlobState(handle, "formulation")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        plan = self.plan
        pdf = pd.concat(list(rows), ignore_index=True)
        if pdf.empty:
            return
        pdf = pdf.sort_values("ingest", kind="stable")
        partition = plan.slot_of(key[0])
        metric = get_metric(plan.metric)
        core = WorksetFormulation(metric, plan.threshold, plan.dim)
        router = WorksetRouter(partition)
        saved, seq = self.state.resume()
        if saved is not None:
            restore_formulation(core, saved["core"])
            router = saved["router"]
        if plan.metrics_dir:
            latest = read_assignment(plan.metrics_dir, newer_than=router.version)
            if latest is not None:
                router.update(*latest)
        batch = _records(pdf, plan.dim)
        core.expire_before(int(batch.window.min()))
        router.expire_before(int(batch.window.min()))
        k_before = core.n_worksets
        m = core.formulate(batch, pdf["outer"].to_numpy(dtype=bool))
        rec = m.records.take(m.row)
        # new worksets stay on the worker that created them (7.5) until the balancer moves them
        routed = router.route(global_workset(partition, m.workset), m.role, rec.window, rec.id)
        self.state.save({"core": formulation_state(core), "router": router, "seq": seq})
        rec = rec.take(routed.row)
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "formulation", partition, seq, {
                "partition": partition, "seq": seq, "time": time.time(),
                "records": int((~pdf["outer"]).sum()), "outer_copies": int(pdf["outer"].sum()),
                "worksets": core.n_worksets, "new_worksets": core.n_worksets - k_before,
                "memberships": len(m), "windows": sorted(set(batch.window.tolist())),
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

    def close(self) -> None:
        pass


class ComputationProcessor(StatefulProcessor):
    """Similarity computation for the worksets assigned to one worker (key = its slot key)."""

    def __init__(self, plan: S3JPlan) -> None:
        self.plan = plan

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = _BlobState(handle, "worker")

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        plan = self.plan
        pdf = pd.concat(list(rows), ignore_index=True)
        if pdf.empty:
            return
        worker = plan.slot_of(key[0])
        metric = get_metric(plan.metric)
        core = SimilarityWorker(metric, plan.threshold, plan.self_join)
        saved, seq = self.state.resume()
        if saved is not None:
            restore_worker(core, saved["core"])
        rec = _records(pdf, plan.dim)
        core.expire_before(int(rec.window.min()))
        counters = WorksetCounters()
        pairs = core.add(rec, pdf["workset"].to_numpy(dtype=np.int64), pdf["role"].to_numpy(dtype=np.int8), counters,
                         store=pdf["store"].to_numpy(dtype=bool))
        self.state.save({"core": worker_state(core), "seq": seq})
        emit = time.time()
        if plan.metrics_dir:
            write_stats(plan.metrics_dir, "computation", worker, seq, _worker_stats(worker, seq, emit, core, counters, pairs))
        emit_us = int(round(emit * 1e6))
        ingest_us = np.round(pairs.ingest * 1e6).astype(np.int64)
        for lo in range(0, max(len(pairs), 1), OUTPUT_CHUNK):
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
