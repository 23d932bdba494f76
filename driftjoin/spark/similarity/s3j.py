"""The S3J path of ``similarity_join`` on vectors: its plan, the stateless routers, the stateful
operators and the pipeline that joins them (:func:`s3j_pairs`), in the shape every similarity
path shares (:mod:`driftjoin.spark.similarity.shape`).

Data path (one micro-batch)::

    input rows --mapInArrow(route)--> (partition key, outer?, record)       [space partitioning]
      --groupBy(partition key).transformWithStateInPandas(Formulation)-->
      (worker key, workset, role, record)                                   [workset formulation]
      --groupBy(worker key).transformWithStateInPandas(Computation)--> pairs [similarity computation]

Keys are one int per space partition / worker, chosen so each lands in its own shuffle
partition (:mod:`driftjoin.spark.runtime.keys`); each key's state is read and written once per batch as
one binary value (a pickled dict of numpy arrays), so the per-key socket cost is paid once.

Besides the records, every routing task sends one *heartbeat* row to every key of the next
stateful stage and to :data:`~driftjoin.spark.runtime.plan_guard.PLAN_KEY`, carrying the largest window
time of its rows; each formulation key forwards the batch's largest time to every worker key
the same way. So every key runs on every batch that has data, stores and checks the plan
(:mod:`driftjoin.spark.runtime.plan_guard`) and closes windows by the same frontier
(:mod:`driftjoin.clock`). Records whose earliest window has closed are *late*: rejected (every
copy), counted and listed in the statistics (``late_rows``) once, never joined with part of
their windows.

``clusterjoin`` and ``bruteforce`` (the paper's baselines) route memberships statelessly
(:func:`route_members`) straight to the computation. Without live balancing formulation and
computation run in one stage (:class:`FusedProcessor`).

Windows (:mod:`driftjoin.windows`): the routers give each record its window copies before
space partitioning (a sliding window's copy per window holding it, an interval join's home and
ghost copies), and every row after them is a copy with its window, time in ticks and ghost
flag. Each window is an independent S3J join of its copies; an interval join's workers accept
only the pairs its windowing accepts (:mod:`driftjoin.s3j.compute`).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle,
)

from driftjoin.clock import WindowClock, tick_of
from driftjoin.s3j.baselines import BruteForceRouter, ClusterJoinRouter
from driftjoin.s3j.compute import (
    SimilarityWorker,
    WorksetCounters,
    run_arrays,
    run_from_arrays,
)
from driftjoin.s3j.ids import global_workset
from driftjoin.s3j.records import Records
from driftjoin.s3j.routing import WorksetRouter
from driftjoin.s3j.space import SpacePartitioner, random_centroids
from driftjoin.s3j.workset import OUTER, WorksetFormulation, restore_formulation
from driftjoin.s3j.workset import STATE_FORMAT as FORMULATION_FORMAT

from driftjoin.spark.runtime.heartbeats import HEARTBEAT, heartbeat_frame, split_heartbeats
from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.plan_guard import digest
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.settings import SettingError
from driftjoin.spark.runtime.stages import stateful_stage
from driftjoin.spark.runtime.state import ChunkedState, Chunks, Loaded, Meta
from driftjoin.spark.runtime.queries import task_query
from driftjoin.spark.runtime.stats import latency_histogram, write_stats
from driftjoin.spark.runtime.vectors import binary_rows, from_binary, to_binary
from driftjoin.spark.similarity.assignment import bind_assignment, read_assignment
from driftjoin.spark.similarity.inputs import JoinInputs, infer_dim, vector_column
from driftjoin.spark.similarity.settings import check_centroids
from driftjoin.spark.similarity.shape import (
    VectorPlan,
    classify_vectors,
    dead_letters,
    first_copies,
    late_records,
    open_rows,
    pair_frames,
    pair_schema,
    routed,
    window_clock,
    window_copies,
)

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa

#: Left records per output DataFrame of the grouped transport.
GROUPED_CHUNK = 20_000
#: Workset memberships per output DataFrame of the formulation (with a 128-D vector each, ~100 MB).
MEMBER_CHUNK = 100_000
#: Version of the operators' state (stored with the plan: a checkpoint written with another is refused).
STATE_FORMAT = 4


@dataclass(frozen=True, kw_only=True)
class S3JPlan(VectorPlan):
    """Everything the S3J operators need, fixed when the query is built (shipped by pickling)."""

    #: one per worker (``clusterjoin``: per virtual partition)
    centroids: np.ndarray
    #: ``"s3j"``, or the paper's baselines ``"clusterjoin"`` and ``"bruteforce"``
    algorithm: str = "s3j"
    #: worksets may move between workers (live balancing): formulation and computation then
    #: run as two stateful stages; otherwise every workset stays on the worker of the space
    #: partition that created it and both run in one stage (:class:`FusedProcessor`)
    balanced: bool = False

    @property
    def fused(self) -> bool:
        return self.algorithm == "s3j" and not self.balanced

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        return {**self.shared_settings(), "state_format": STATE_FORMAT, "algorithm": self.algorithm,
                "metric": self.metric, "dim": self.dim, "stages": 1 if self.fused else 2, "transport": self.transport,
                "centroids": digest(self.centroids)}


def s3j_plan(join: JoinInputs, algorithm: str) -> S3JPlan:
    """The S3J plan of a join (``algorithm``: ``"s3j"``, ``"clusterjoin"`` or ``"bruteforce"``):
    the dimension (given, from the centroids, or the most common of a static input) and the
    centroids (drawn from ``seed`` over ``bounds``, sampled from a static input, or given)."""
    s, left = join.settings, join.left
    clusterjoin = algorithm == "clusterjoin"
    n = s.virtual_partitions if clusterjoin else join.parallelism
    per = "virtual partition" if clusterjoin else "worker"
    given = s.centroids if isinstance(s.centroids, np.ndarray) else None
    if given is not None:
        check_centroids(given, n, s.dim, per)
    dim = s.dim or (given.shape[1] if given is not None else None)
    if dim is None:
        if join.streaming:
            raise SettingError("dim", "is required for streaming inputs (the vector dimension, e.g. dim=2): the space "
                                      "partition centroids are drawn before the first record arrives", show_value=False)
        dim = infer_dim(join.frames, s.column)
    if given is not None:
        centroids = given
    elif s.centroids == "sample":
        if join.streaming:
            raise SettingError("centroids", "='sample' needs a static input; for streams use 'random' (the paper's "
                                            "choice) or pass an array", show_value=False)
        rows = left.select(vector_column(left, s.column).alias("v")).where(F.size("v") == dim).limit(50 * n).collect()
        pool = np.array([r["v"] for r in rows], dtype=np.float64)
        if len(pool) < n:
            raise SettingError("centroids", "='sample' needs more rows than the input has to sample centroids from; use "
                                            "centroids='random'", show_value=False)
        centroids = pool[np.random.default_rng(s.seed).choice(len(pool), n, replace=False)]
    else:
        centroids = random_centroids(n, dim, s.seed, *s.bounds)
    w = join.windows
    return S3JPlan(metric=s.distance.name, threshold=s.threshold, dim=dim, parallelism=join.parallelism,
                   centroids=centroids, self_join=join.self_join, windows=w.windows, metrics_dir=join.metrics_dir,
                   algorithm=algorithm, time_basis=w.time_basis, lateness=w.lateness, partitions=join.partitions,
                   balanced=s.balance != "none" and join.streaming, transport=s.transport)


def s3j_pairs(join: JoinInputs, plan: S3JPlan) -> DataFrame:
    """The raw pair DataFrame of the S3J path (:func:`driftjoin.spark.similarity.api.pair_columns`
    makes the user's columns of it)."""
    data = join.rows()
    pairs = pair_schema(join.id_type, plan.transport)
    members = member_schema(join.id_type)
    if plan.algorithm == "s3j":
        routed_schema = _routed_schema(join.id_type)
        routed_arrow = arrow_schema(routed_schema)
        routed_rows = data.mapInArrow(lambda it: route_batches(plan, it, routed_arrow), routed_schema)
        if plan.fused:
            return stateful_stage(routed_rows, "key", lambda: FusedProcessor(plan), pairs, partitions=plan.partitions)
        members_rows = stateful_stage(routed_rows, "key", lambda: FormulationProcessor(plan), members,
                                      partitions=plan.partitions)
    else:
        member_arrow = arrow_schema(members)
        members_rows = data.mapInArrow(lambda it: route_members(plan, it, member_arrow), members)
    return stateful_stage(members_rows, "wkey", lambda: ComputationProcessor(plan), pairs, partitions=plan.partitions)


def dead_letters_of_vectors(join: JoinInputs) -> DataFrame:
    """The dead-letter output of the vector paths (S3J and the grid share the test of a row)."""
    s = join.settings
    dim = s.dim
    if dim is None:
        if join.streaming:
            raise SettingError("dim", "is required for streaming inputs (the vector dimension, e.g. dim=2)",
                               show_value=False)
        dim = infer_dim(join.frames, s.column)
    metric = s.distance
    return dead_letters(join.rows(with_raw=True), lambda batch: classify_vectors(metric, dim, batch)[0])


def _routed_schema(id_type: T.DataType) -> T.StructType:
    """The rows from the space partitioning to the formulation: a window copy of a record each."""
    return T.StructType([
        T.StructField("key", T.IntegerType()), T.StructField("outer", T.BooleanType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("vec", T.BinaryType()),
        T.StructField("ingest", T.DoubleType()), T.StructField("window", T.LongType()),
        T.StructField("time", T.LongType()), T.StructField("ghost", T.BooleanType()),
    ])


def member_schema(id_type: T.DataType) -> T.StructType:
    """The rows from the formulation to the computation (and from the stateless ClusterJoin and
    brute-force routers): one workset membership of a window copy each. ``time`` (ticks) and
    ``ghost`` hold the copy's time and ghost flag where the computation reads them (an interval
    join's pairs, the late test after a stateless router), else 0 and false."""
    return T.StructType([
        T.StructField("wkey", T.IntegerType()), T.StructField("workset", T.LongType()), T.StructField("role", T.ByteType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("vec", T.BinaryType()),
        T.StructField("ingest", T.DoubleType()), T.StructField("window", T.LongType()),
        T.StructField("time", T.LongType()), T.StructField("ghost", T.BooleanType()),
        T.StructField("store", T.BooleanType()),
    ])


def _prepared(plan: S3JPlan, batch: pa.RecordBatch) -> tuple[Records, float] | None:
    """The valid rows' window copies (ids: the rows' indices in the batch; vectors prepared) and
    the largest window-deciding time of the rows (seconds)."""
    reason, mat = classify_vectors(plan.distance, plan.dim, batch)
    rows = open_rows(batch, reason)
    if rows is None:
        return None
    rec = Records(rows.idx, rows.side, plan.distance.prepare(mat), rows.ingest, np.zeros(len(rows.idx), np.int64))
    return window_copies(plan, rec, rows.basis), rows.top


def route_members(plan: S3JPlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """ClusterJoin / brute force (stateless routing): member rows straight for the workers."""
    router = (ClusterJoinRouter(plan.centroids, plan.distance, plan.threshold, plan.parallelism)
              if plan.algorithm == "clusterjoin" else BruteForceRouter())
    keys = np.asarray(plan.keys, dtype=np.int32)
    names = ["wkey", "workset", "role", "side", "id", "vec", "ingest", "window", "time", "ghost", "store"]

    def route(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, float] | None:
        prepared = _prepared(plan, batch)
        if prepared is None:
            return None
        rec, top = prepared
        m, owner = router.route(rec)
        r = rec.take(m.row)
        return pa.RecordBatch.from_arrays(
            [pa.array(keys[owner], pa.int32()), pa.array(m.workset, pa.int64()), pa.array(m.role, pa.int8()),
             pa.array(r.side, pa.int8()), batch.column("id").take(pa.array(r.id)), to_binary(r.vec),
             pa.array(r.ingest), pa.array(r.window), pa.array(r.time), pa.array(r.ghost),
             pa.array(np.ones(len(r), dtype=bool))],
            names=names,
        ), top

    return routed(plan, batches, schema, route)


def route_batches(plan: S3JPlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Space partitioning (stateless): validate, prepare, and copy each record to its partitions."""
    metric = plan.distance
    space = SpacePartitioner(plan.centroids, metric, metric.partition_threshold(plan.threshold))
    keys = np.asarray(plan.keys, dtype=np.int32)
    names = ["key", "outer", "side", "id", "vec", "ingest", "window", "time", "ghost"]

    def route(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, float] | None:
        prepared = _prepared(plan, batch)
        if prepared is None:
            return None
        rec, top = prepared
        routing = space.route(rec.vec)
        copy = routing.row
        take = pa.array(rec.id[copy])
        return pa.RecordBatch.from_arrays(
            [
                pa.array(keys[routing.partition], pa.int32()),
                pa.array(routing.outer),
                batch.column("side").take(take).cast(pa.int8()),
                batch.column("id").take(take),
                to_binary(rec.vec[copy]),
                pa.array(rec.ingest[copy]),
                pa.array(rec.window[copy]),
                pa.array(rec.time[copy]),
                pa.array(rec.ghost[copy]),
            ],
            names=names,
        ), top

    return routed(plan, batches, schema, route)


def _records(pdf: pd.DataFrame, dim: int) -> Records:
    return Records(
        id=pdf["id"].to_numpy(),
        side=pdf["side"].to_numpy(dtype=np.int8),
        vec=from_binary(pdf["vec"].to_numpy(), dim),
        ingest=pdf["ingest"].to_numpy(dtype=np.float64),
        window=pdf["window"].to_numpy(dtype=np.int64),
        time=pdf["time"].to_numpy(dtype=np.int64),
        ghost=pdf["ghost"].to_numpy(dtype=bool),
    )


#: Chunk group of the workset centroids (windows are the other groups; centroids never expire).
CENTROIDS = -(2**62)


@dataclass
class _Formulation:
    """Workset formulation of one space partition for one batch (state in, memberships out).

    State (:class:`~driftjoin.spark.runtime.state.ChunkedState` ``formulation``): chunks of the
    centroids each batch created (group :data:`CENTROIDS`) and of the outer-partition records
    each batch buffered (group = their window); the router and the clock in the meta fields.
    """

    plan: S3JPlan
    partition: int
    core: WorksetFormulation
    router: WorksetRouter
    clock: WindowClock
    #: decoded chunks by group and id (a stale cached step lends them to the next rebuild)
    pieces: dict[int, dict[int, Any]] = field(default_factory=dict)

    @staticmethod
    def empty(plan: S3JPlan, partition: int) -> "_Formulation":
        return _Formulation(plan, partition, WorksetFormulation(plan.distance, plan.threshold, plan.dim, plan.windows),
                            WorksetRouter(partition), window_clock(plan))

    @staticmethod
    def rebuild(plan: S3JPlan, partition: int, meta: Meta, chunks: Chunks, stale: "_Formulation | None") -> "_Formulation":
        step = _Formulation.empty(plan, partition)
        known = {} if stale is None else stale.pieces
        step.pieces = {g: dict(chunks.read(g, known.get(g))) for g in chunks.groups()}
        step.router, step.clock.seen = meta.fields["router"], meta.fields["clock"]
        step.restore_core()
        return step

    def restore_core(self) -> None:
        """The core's centroids and outer buffer from the decoded chunks."""
        centroids = list(self.pieces.get(CENTROIDS, {}).values())
        buffered = [Records(*a) for g, parts in sorted(self.pieces.items()) if g != CENTROIDS for a in parts.values()]
        empty = self.core.outer_buffer
        restore_formulation(self.core, {"format": FORMULATION_FORMAT,
                                        "centroids": np.vstack(centroids) if centroids else self.core.centroids,
                                        "buffer": (Records.concat(buffered) if buffered else empty).arrays()})

    def run(self, pdf: pd.DataFrame, top: float, seq: int, chunks: Chunks) -> tuple[Records, Any, dict[str, Any]]:
        """Formulate the batch's records: (members' records, routed memberships, statistics).

        Writes to ``chunks`` what the batch added and removes what expired.
        """
        plan = self.plan
        if plan.metrics_dir:
            task = task_query()
            latest = read_assignment(plan.metrics_dir, newer_than=self.router.version, batch=task.batch_id,
                                     query=task.query_id)
            if latest is not None:
                self.router.update(*latest)
        first = self.clock.first_open()
        if first is not None:
            self.core.expire_before(first)
            self.router.expire_before(first)
            for g in chunks.drop_groups(lambda g: g == CENTROIDS or g >= first):
                self.pieces.pop(g, None)
        pdf = pdf.sort_values("ingest", kind="stable").reset_index(drop=True)
        batch, outer = _records(pdf, plan.dim), pdf["outer"].to_numpy(dtype=bool)
        late = self.clock.late(batch.time)
        late_rows = late_records(batch, late & ~outer & first_copies(plan, batch))
        on_time = np.nonzero(~late)[0]
        batch, outer = batch.take(on_time), outer[on_time]
        if not self.core.keep_times:  # only an interval join's pairs need them after the late test
            batch = batch.without_times()
        k_before = self.core.n_worksets
        m = self.core.formulate(batch, outer)
        if self.core.n_worksets > k_before:
            self._add(chunks, CENTROIDS, self.core.centroids[k_before:])
        buffered = batch.take(np.nonzero(outer)[0])
        for w in np.unique(buffered.window).tolist():
            self._add(chunks, int(w), buffered.take(np.nonzero(buffered.window == w)[0]).arrays())
        rec = m.records.take(m.row)
        # new worksets stay on the worker that created them (7.5) until the balancer moves them
        members = self.router.route(global_workset(self.partition, m.workset), m.role, rec.window, rec.id)
        self.clock.advance(tick_of(top))
        stats = {
            "partition": self.partition, "seq": seq, "time": time.time(),
            "records": int((~outer).sum()), "outer_copies": int(outer.sum()),
            "worksets": self.core.n_worksets, "new_worksets": self.core.n_worksets - k_before,
            "memberships": len(m), "windows": sorted(set(batch.window.tolist())),
            "late": len(late_rows), "late_rows": late_rows,
        }
        return rec.take(members.row), members, stats

    def _add(self, chunks: Chunks, group: int, value: Any) -> None:
        self.pieces.setdefault(group, {})[chunks.add(group, value)] = value

    def fields(self) -> dict[str, Any]:
        return {"router": self.router, "clock": self.clock.seen}

    def nbytes(self) -> int:
        return int(self.core.centroids.nbytes + self.core.outer_buffer.nbytes())


@dataclass
class _Computation:
    """Similarity computation of one worker for one batch (members in, pairs out).

    State (:class:`~driftjoin.spark.runtime.state.ChunkedState` ``worker``): one chunk per run of
    members a batch added, under its part id, grouped by window (runs merge in memory only:
    :mod:`driftjoin.s3j.compute`); the clock in the meta fields.
    """

    plan: S3JPlan
    worker: int
    core: SimilarityWorker
    clock: WindowClock

    @staticmethod
    def empty(plan: S3JPlan, worker: int) -> "_Computation":
        return _Computation(plan, worker, SimilarityWorker(plan.distance, plan.threshold, plan.self_join, plan.windows,
                                                           keep_added=True), window_clock(plan))

    @staticmethod
    def rebuild(plan: S3JPlan, worker: int, meta: Meta, chunks: Chunks, stale: "_Computation | None") -> "_Computation":
        step = _Computation.empty(plan, worker)
        for g in chunks.groups():
            kept, new = chunks.keep_stale(g, () if stale is None else stale.core.windows.get(g, ()), lambda r: r.parts)
            step.core.windows[g] = kept
            for c, arrays in new:
                step.core.put(g, run_from_arrays(arrays, (c,)))
        step.clock.seen = meta.fields["clock"]
        return step

    def run(self, rec: Records, workset: np.ndarray, role: np.ndarray, store: np.ndarray, top: float,
            seq: int, chunks: Chunks) -> tuple[Any, float, dict[str, Any] | None]:
        """Pair the batch's members: (pairs, emit time, statistics or None when nothing happened).

        Writes the runs the batch added to ``chunks`` and removes the expired ones.
        """
        first = self.clock.first_open()
        if first is not None:
            self.core.expire_before(first)
            chunks.drop_groups(lambda g: g >= first)
        # only a stateless router (ClusterJoin, brute force) sends late records this far (with
        # their times); the formulation has rejected them already otherwise
        late_rows: list[dict[str, Any]] = []
        if self.plan.algorithm != "s3j":
            late = self.clock.late(rec.time)
            late_rows = late_records(rec, late & ((role & 3) != OUTER) & first_copies(self.plan, rec))
            on_time = np.nonzero(~late)[0]
            rec, workset, role, store = rec.take(on_time), workset[on_time], role[on_time], store[on_time]
        counters = WorksetCounters()
        pairs = self.core.add(rec, workset, role, counters, store=store)
        written = sum(chunks.add_runs(self.core, run_arrays).values())
        self.clock.advance(tick_of(top))
        emit = time.time()
        stats = None
        if len(rec) or late_rows:
            stats = _worker_stats(self.worker, seq, emit, self.core, counters, pairs)
            stats.update(late=len(late_rows), late_rows=late_rows, state_written=written,
                         runs=sum(len(r) for r in self.core.windows.values()))
        return pairs, emit, stats

    def fields(self) -> dict[str, Any]:
        return {"clock": self.clock.seen}

    def nbytes(self) -> int:
        return self.core.state_bytes()

    def emit(self, pairs: Any, emit: float) -> Iterator[pd.DataFrame]:
        """The pairs as output frames (see :data:`TRANSPORTS`)."""
        if self.plan.transport == "grouped":
            return self._emit_grouped(pairs, emit)
        return self._emit_flat(pairs, emit)

    def _emit_grouped(self, pairs: Any, emit: float) -> Iterator[pd.DataFrame]:
        """One row per left record and window: its partners' ids, distances, ingestion times,
        worksets as arrays (a record of a sliding window has a row per window it pairs in). The
        arrays are Arrow list arrays inside the pandas frame (``pd.ArrowDtype``), so they reach
        the JVM without a per-element conversion."""
        if not len(pairs):
            return
        order = np.argsort(pairs.window, kind="stable")
        order = order[np.argsort(pairs.left_id[order], kind="stable")]  # by left id, then window
        left, window = pairs.left_id[order], pairs.window[order]
        starts = np.flatnonzero(np.r_[True, (left[1:] != left[:-1]) | (window[1:] != window[:-1])])
        emit_us = int(round(emit * 1e6))
        columns = {"right_ids": pairs.right_id[order], "distances": pairs.distance[order],
                   "ingest_us": np.round(pairs.ingest[order] * 1e6).astype(np.int64), "worksets": pairs.workset[order]}
        bounds = np.r_[starts, len(left)]
        for lo in range(0, len(starts), GROUPED_CHUNK):
            hi = min(lo + GROUPED_CHUNK, len(starts))
            rows = starts[lo:hi]
            offsets = pa.array((bounds[lo:hi + 1] - bounds[lo]).astype(np.int32))
            part = slice(bounds[lo], bounds[hi])
            frame = {"left_id": left[rows], "window": window[rows],
                     "emit_us": np.full(len(rows), emit_us, dtype=np.int64),
                     "worker": np.full(len(rows), self.worker, dtype=np.int32)}
            for name, values in columns.items():
                lists = pa.ListArray.from_arrays(offsets, pa.array(values[part]))
                frame[name] = pd.Series(pd.arrays.ArrowExtensionArray(lists))
            yield pd.DataFrame(frame)

    def _emit_flat(self, pairs: Any, emit: float) -> Iterator[pd.DataFrame]:
        """One row per pair."""
        return pair_frames(pairs, self.worker, emit, lean=self.plan.transport == "lean")


class _S3JProcessor(OperatorProcessor):
    """What the three S3J processors share: heartbeats, the state layer, timings and statistics."""

    parts: tuple[str, ...] = ()

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.states = {name: ChunkedState(handle, name) for name in self.parts}
        self.keep_old_states(handle, "formulation", "worker")

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        clock = time.perf_counter
        t0 = clock()
        pdf, top = split_heartbeats(pdf)
        slot = self.plan.slot_of(key)
        loaded = {name: self.states[name].load(key, *self._builders(name, slot)) for name in self.parts}
        self.refuse_old_state(any(part.meta.token is None for part in loaded.values()))
        seq = next(iter(loaded.values())).seq
        t1 = clock()
        frames, stats = self.process(slot, pdf, top, loaded, seq)
        t2 = clock()
        build = spark = 0.0
        while True:  # time building the output frames apart from Spark converting and sending them
            b0 = clock()
            frame = next(frames, None)
            build += clock() - b0
            if frame is None:
                break
            s0 = clock()
            yield frame
            spark += clock() - s0
        t3 = clock()
        for name, part in loaded.items():
            self.states[name].save(key, part, part.value.nbytes(), part.value.fields())
        t4 = clock()
        if self.plan.metrics_dir:
            timings = {"state_read": t1 - t0, "work": t2 - t1, "output_build": build, "output_spark": spark,
                       "state_write": t4 - t3}
            state = {name: {"source": part.source, "chunks_read": part.chunks.read_count,
                            "bytes_written": part.chunks.written_bytes, "calls": part.chunks.calls}
                     for name, part in loaded.items()}
            for operator, st in stats.items():
                if st is not None:
                    write_stats(self.plan.metrics_dir, operator, slot, seq, {**st, "timings": timings, "state": state})

    def _builders(self, name: str, slot: int) -> tuple:
        plan = self.plan
        step = _Formulation if name == "formulation" else _Computation
        return (lambda meta, chunks, stale: step.rebuild(plan, slot, meta, chunks, stale)), (lambda: step.empty(plan, slot))

    def process(self, slot: int, pdf: pd.DataFrame, top: float, loaded: dict[str, Loaded],
                seq: int) -> tuple[Iterator[pd.DataFrame], dict[str, dict[str, Any] | None]]:
        """Run the batch: (output frames, made lazily; statistics per operator, None: nothing to report)."""
        raise NotImplementedError


def _reported(stats: dict[str, Any]) -> dict[str, Any] | None:
    """Formulation statistics worth a file (a batch of heartbeats only has none)."""
    return stats if stats["records"] or stats["outer_copies"] or stats["late"] else None


def _member_frames(plan: S3JPlan, rec: Records, members: Any) -> Iterator[pd.DataFrame]:
    wkey = np.asarray(plan.keys, dtype=np.int32)[members.worker]
    time = rec.time if rec.timed else np.zeros(len(rec), np.int64)
    ghost = rec.ghost if rec.timed else np.zeros(len(rec), bool)
    for lo in range(0, len(members.row), MEMBER_CHUNK):  # bounded Arrow arrays (2 GB each at most)
        sl = slice(lo, lo + MEMBER_CHUNK)
        yield pd.DataFrame({
            "wkey": wkey[sl], "workset": members.gid[sl], "role": members.role[sl], "side": rec.side[sl],
            "id": rec.id[sl], "vec": binary_rows(rec.vec[sl]), "ingest": rec.ingest[sl],
            "window": rec.window[sl], "time": time[sl], "ghost": ghost[sl], "store": members.store[sl],
        }, copy=False)


class FormulationProcessor(_S3JProcessor):
    """Workset formulation for one space partition (key = that partition's slot key)."""

    parts = ("formulation",)

    def bind_decisions(self, batch: int) -> None:
        """Bind the newest workset assignment to batch ``batch`` (:mod:`~driftjoin.spark.similarity.assignment`)."""
        if self.plan.metrics_dir:
            bind_assignment(self.plan.metrics_dir, batch)

    def process(self, slot, pdf, top, loaded, seq):
        part = loaded["formulation"]
        rec, members, stats = part.value.run(pdf, top, seq, part.chunks)
        id_type = T.StringType() if pdf["id"].dtype == object else T.LongType()
        beat = heartbeat_frame(arrow_schema(member_schema(id_type)), self.plan.keys, {"side": HEARTBEAT, "ingest": top})
        return itertools.chain(_member_frames(self.plan, rec, members), [beat]), {"formulation": _reported(stats)}


class ComputationProcessor(_S3JProcessor):
    """Similarity computation for the worksets assigned to one worker (key = its slot key)."""

    parts = ("worker",)

    def process(self, slot, pdf, top, loaded, seq):
        part = loaded["worker"]
        step: _Computation = part.value
        pairs, emit, stats = step.run(_records(pdf, self.plan.dim), pdf["workset"].to_numpy(dtype=np.int64),
                                      pdf["role"].to_numpy(dtype=np.int8), pdf["store"].to_numpy(dtype=bool), top, seq,
                                      part.chunks)
        return step.emit(pairs, emit), {"computation": stats}


class FusedProcessor(_S3JProcessor):
    """Formulation and computation of one space partition and its worker in one stateful stage.

    Without live balancing every workset stays on the worker of the space partition that
    created it (section 7.5), so the memberships a partition's formulation produces are all for
    its own worker: both steps run under the partition's key, one after the other, and the
    query has one stateful stage instead of two (each stateful stage costs about 100 ms per
    task and batch whatever it does).
    """

    parts = ("formulation", "worker")

    def process(self, slot, pdf, top, loaded, seq):
        f, c = loaded["formulation"], loaded["worker"]
        started = time.perf_counter()
        rec, members, f_stats = f.value.run(pdf, top, seq, f.chunks)
        formulated = time.perf_counter()
        pairs, emit, c_stats = c.value.run(rec, members.gid, members.role, members.store, top, seq, c.chunks)
        if c_stats is not None:
            c_stats["steps"] = {"formulation": formulated - started, "computation": time.perf_counter() - formulated}
        return c.value.emit(pairs, emit), {"formulation": _reported(f_stats), "computation": c_stats}


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
