"""The grid path of ``similarity_join`` on vectors: a stateless router and one stateful operator
keyed by worker (the 1-Bucket-Theta grid with matrix-product blocks), in the shape every
similarity path shares (:mod:`driftjoin.spark.similarity.shape`).

Data path (one micro-batch)::

    input rows --mapInArrow(route_grid)--> (worker key, bucket, record)   [1-Bucket-Theta routing]
      --groupBy(worker key).transformWithStateInPandas(GridProcessor)--> pairs   [block joins]

The router validates each row with the S3J router's test (:func:`~driftjoin.spark.similarity.shape.classify_vectors`:
invalid rows are skipped here and reported by ``invalid_records``), computes the window, hashes
the id to its bucket and copies the record once to every worker that holds a cell of its row
(or column). Like the S3J routers it sends one heartbeat row per task to every worker key and to
the plan key, so every key runs on every batch with data, stores and checks the plan
(:mod:`driftjoin.spark.runtime.plan_guard`: a restart whose settings, or whose ``auto`` choice, differ is
refused) and closes windows by the same frontier (:mod:`driftjoin.clock`); records whose earliest
window has closed are late, listed in the statistics (``late_rows``) by the worker that counts
them. Records are routed as window copies (:func:`~driftjoin.spark.similarity.shape.window_copies`:
a copy per window, with its time in ticks and ghost flag), all copies of a record to the same
workers (the bucket is a hash of the id). Vectors travel as the
user gave them: ``array<float>`` input stays float32 through Arrow, the shuffle and the state
(half the bytes of float64); the worker prepares them for the metric in float64.

The worker key's state is one pickled value per batch (the worker's tables of open windows,
the grid they were routed with, a batch sequence number), as in the S3J operators. Statistics
go to ``metrics_dir/computation/<worker>/<seq>.json`` with the S3J computation operator's
fields, so ``driftjoin.app.report`` reads both: a cell is reported as a workset (id ``i * cols +
j``), its new records as inner members, its screened pairs as comparisons.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle,
)

from driftjoin.clock import WindowClock, tick_of
from driftjoin.grid.layout import GridLayout
from driftjoin.grid.worker import (
    GRID_STATE_FORMAT,
    CellCounters,
    GridWorker,
    layout_fingerprint,
)
from driftjoin.s3j.records import Records
from driftjoin.spark.runtime.heartbeats import split_heartbeats
from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.stages import stateful_stage
from driftjoin.spark.runtime.state import ChunkedState, Chunks, Meta
from driftjoin.spark.runtime.stats import latency_histogram, write_stats
from driftjoin.spark.runtime.vectors import from_binary, to_binary
from driftjoin.spark.similarity.inputs import JoinInputs
from driftjoin.spark.similarity.shape import (
    VectorPlan,
    classify_vectors,
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


@dataclass(frozen=True, kw_only=True)
class GridPlan(VectorPlan):
    """Everything the grid operators need, fixed when the query is built (shipped by pickling)."""

    layout: GridLayout
    #: ``array<float>`` input, kept float32 through Arrow, the shuffle and the state
    float32: bool = False
    block_bytes: int | None = None
    #: what ``algorithm="auto"`` decided on (statistics)
    choice: dict = field(default_factory=dict)

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        return {**self.shared_settings(), "state_format": GRID_STATE_FORMAT, "algorithm": "grid", "metric": self.metric,
                "dim": self.dim, "grid": list(layout_fingerprint(self.layout)), "float32": self.float32}

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float32 if self.float32 else np.float64)


def route_grid(plan: GridPlan, batches: Iterator[pa.RecordBatch], schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Validate, give window copies and copy each to the workers of its grid row (or column); heartbeats last."""
    keys = np.asarray(plan.keys, dtype=np.int32)

    def route(batch: pa.RecordBatch) -> tuple[pa.RecordBatch, float] | None:
        reason, mat = classify_vectors(plan.distance, plan.dim, batch)
        rows = open_rows(batch, reason)
        if rows is None:
            return None
        # ids: the rows' indices in the batch; vectors as given (the workers prepare them)
        rec = window_copies(plan, Records(rows.idx, rows.side, mat, rows.ingest, np.zeros(len(rows.idx), np.int64)),
                            rows.basis)
        ids = batch.column("id").take(pa.array(rec.id))
        row, worker, bucket = plan.layout.route(ids.to_numpy(zero_copy_only=False), rec.side)
        take = pa.array(row)
        return pa.RecordBatch.from_arrays(
            [pa.array(keys[worker], pa.int32()), pa.array(bucket, pa.int32()), pa.array(rec.side[row], pa.int8()),
             ids.take(take), to_binary(rec.vec[row], plan.dtype), pa.array(rec.ingest[row]),
             pa.array(rec.window[row]), pa.array(rec.time[row]), pa.array(rec.ghost[row])],
            schema=schema,
        ), rows.top

    return routed(plan, batches, schema, route)


class GridProcessor(OperatorProcessor):
    """The block joins of the cells one worker holds (key = the worker's slot key)."""

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "grid_worker")
        self.keep_old_states(handle, "grid")

    def _new(self, worker: int) -> tuple[GridWorker, WindowClock]:
        plan = self.plan
        return (GridWorker(plan.layout, worker, plan.distance, plan.threshold, block_bytes=plan.block_bytes,
                           windows=plan.windows),
                window_clock(plan))

    def _rebuild(self, worker: int, meta: Meta, chunks: Chunks, stale: tuple | None) -> tuple[GridWorker, WindowClock]:
        """The worker from its chunks (one per window and batch); a stale cached table whose chunks
        are a prefix of the current ones only loads the newer chunks."""
        core, clock = self._new(worker)
        for w in chunks.groups():
            ids = chunks.ids(w)
            old = stale[0].windows.get(w) if stale is not None else None
            reuse = old is not None and ids[:len(old.chunks)] == old.chunks
            if reuse:
                core.windows[w] = old
            known = {c: None for c in old.chunks} if reuse else {}
            for chunk, stored in chunks.read(w, known):
                if chunk not in known:
                    rec, bucket = stored
                    core.load(w, Records(*rec), bucket).chunks.append(chunk)
        clock.seen = meta.fields["clock"]
        return core, clock

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        plan = self.plan
        pdf, top = split_heartbeats(pdf)
        worker = plan.slot_of(key)
        loaded = self.state.load(key, lambda meta, chunks, stale: self._rebuild(worker, meta, chunks, stale),
                                 lambda: self._new(worker))
        self.refuse_old_state(loaded.source == "new")
        core, clock = loaded.value
        seq = loaded.seq
        first = clock.first_open()
        if first is not None:
            core.expire_before(first)
            loaded.chunks.drop_groups(lambda g: g >= first)
        rec = Records(
            id=pdf["id"].to_numpy(),
            side=pdf["side"].to_numpy(dtype=np.int8),
            vec=from_binary(pdf["vec"].to_numpy(), plan.dim, plan.dtype),
            ingest=pdf["ingest"].to_numpy(dtype=np.float64),
            window=pdf["window"].to_numpy(dtype=np.int64),
            time=pdf["time"].to_numpy(dtype=np.int64),
            ghost=pdf["ghost"].to_numpy(dtype=bool),
        )
        bucket = pdf["bucket"].to_numpy(dtype=np.int32)
        home = _home(plan.layout, rec.side, bucket) == worker
        late = clock.late(rec.time)
        late_rows = late_records(rec, late & home & first_copies(plan, rec))
        on_time = np.nonzero(~late)[0]
        rec, bucket, home = rec.take(on_time), bucket[on_time], home[on_time]
        counters = CellCounters()
        pairs = core.add(rec, bucket, counters)
        for w, new, b in core.added:  # one chunk per window and batch: what the batch stored
            core.windows[w].chunks.append(loaded.chunks.add(w, (new.arrays(), b)))
        core.added.clear()
        clock.advance(tick_of(top))
        self.state.save(key, loaded, core.state_bytes(), {"clock": clock.seen})
        emit = time.time()
        if plan.metrics_dir and (len(rec) or late_rows):
            stats = _stats(plan, worker, seq, emit, core, counters, rec, int(home.sum()), pairs)
            write_stats(plan.metrics_dir, "computation", worker, seq, {**stats, "late": len(late_rows), "late_rows": late_rows})
        yield from pair_frames(pairs, worker, emit, lean=plan.lean)

    def close(self) -> None:
        pass


def _home(layout: GridLayout, side: np.ndarray, bucket: np.ndarray) -> np.ndarray:
    """The worker that counts a record as an input (the first cell of its row or column)."""
    cells = layout.cells
    if layout.self_join:
        table = np.array([cells[(b, b)] for b in range(layout.rows)])
        return table[bucket]
    rows = np.array([cells[(b, 0)] for b in range(layout.rows)])
    cols = np.array([cells[(0, b)] for b in range(layout.cols)])
    return np.where(side == 0, rows[np.minimum(bucket, layout.rows - 1)], cols[np.minimum(bucket, layout.cols - 1)])


def _stats(plan: GridPlan, worker: int, seq: int, emit: float, core: GridWorker, c: CellCounters,
           rec: Records, records: int, pairs: Any) -> dict:
    cells = sorted(set(c.records) | set(c.comparisons))
    stats = {
        "worker": worker, "seq": seq, "time": emit, "algorithm": "grid",
        "comparisons": int(sum(c.comparisons.values())), "candidates": int(sum(c.candidates.values())),
        "pairs": len(pairs), "records": records,
        "memberships": len(rec), "state_bytes": core.state_bytes(),
        "latency_hist": latency_histogram(emit - pairs.ingest),
        "windows": sorted(int(w) for w in core.windows),
        "worksets": {str(g): [c.records.get(g, 0), 0, 0, c.comparisons.get(g, 0), c.pairs.get(g, 0)] for g in cells},
    }
    if plan.choice:
        stats["choice"] = plan.choice
    return stats


def grid_pairs(join: JoinInputs, plan: GridPlan) -> DataFrame:
    """The raw pair DataFrame of the grid path (the columns of the S3J computation operator)."""
    routed_schema = T.StructType([
        T.StructField("wkey", T.IntegerType()), T.StructField("bucket", T.IntegerType()), T.StructField("side", T.ByteType()),
        T.StructField("id", join.id_type), T.StructField("vec", T.BinaryType()), T.StructField("ingest", T.DoubleType()),
        T.StructField("window", T.LongType()), T.StructField("time", T.LongType()), T.StructField("ghost", T.BooleanType()),
    ])
    routed_arrow = arrow_schema(routed_schema)
    rows = join.rows(float32=plan.float32).mapInArrow(lambda it: route_grid(plan, it, routed_arrow), routed_schema)
    return stateful_stage(rows, "wkey", lambda: GridProcessor(plan), pair_schema(join.id_type, plan.transport),
                          partitions=plan.partitions or plan.parallelism)
