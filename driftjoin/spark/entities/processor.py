"""The stateful stage of ``entities``: one key holds the entity graph of every link.

Connected components cross every key a link could be routed by (a chain of links can join any
two records), so the graph lives under one grouping key (:data:`~driftjoin.spark.entities.plan.KEY`)
in one stateful task, fed by every input partition. That is exact by construction: one
:class:`~driftjoin.entitygraph.graph.EntityGraph` sees every link, in the order the core defines, and
its state commits with the batch's output. What it costs: one Python process holds the linked
records (not the singletons) and does O(links + changed records) per batch; its state is written
per batch only for what changed (the facts of :mod:`driftjoin.entitygraph.facts`, one chunk per run of
the state layer's :class:`~driftjoin.spark.runtime.state.ChunkedState`).

Per micro-batch: plan check (:class:`~driftjoin.spark.runtime.processor.OperatorProcessor`), the
graph from the process cache or rebuilt from its runs (after a restart, a replay, or when the key's
previous batch ran in another Python process), :meth:`~driftjoin.entitygraph.graph.EntityGraph.apply`
with the batch number of the state (the same on a replay), the runs the batch created written and
the runs it merged removed, the meta value saved (clock, next entity number, run sizes), then the
rows: one per record whose entity id changed and one per refused link.

Exactly once: Spark commits the key's state with the batch's output; a replayed batch starts from
the state of the last commit and applies the same links (their order is a function of the set:
:mod:`driftjoin.entitygraph.links`), so it gives the same ids and rows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from driftjoin.entitygraph import EntityGraph, LinkBatch
from driftjoin.entitygraph.graph import Changes
from driftjoin.spark.entities.plan import EntitiesPlan
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.state import ChunkedState, Chunks, Meta, dumps
from driftjoin.spark.runtime.stats import latency_histogram, write_stats

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd

#: The chunk group of the runs.
RUNS = 0


def _ids(parts: list[np.ndarray | None], sizes: list[int], long_ids: bool) -> Any:
    """One id column from parts (an id array, an object array with None, or None: all null), as
    pandas' nullable Int64 for integer ids or an object array of strings and None."""
    total = sum(sizes)
    if long_ids:
        values, mask = np.zeros(total, np.int64), np.ones(total, bool)
    else:
        values = np.full(total, None, dtype=object)
    at = 0
    for part, size in zip(parts, sizes):
        if part is not None and size:
            present = part != None if part.dtype == object else np.ones(size, bool)  # noqa: E711
            where = np.nonzero(present)[0] + at
            if long_ids:
                values[where] = part[present].astype(np.int64)
                mask[where] = False
            else:
                values[where] = part[present]
        at += size
    return pd.arrays.IntegerArray(values, mask) if long_ids else values


def change_frame(c: Changes, emit_us: int, two_sided: bool, long_ids: bool) -> pd.DataFrame:
    """The record rows and the refused links of one batch in the output's columns."""
    n, r = len(c.record), len(c.refused_left)
    sizes = [n, r]
    masked = np.r_[np.zeros(n, bool), np.ones(r, bool)]
    other = np.r_[np.ones(n, bool), np.zeros(r, bool)]
    columns = {
        "record_id": _ids([c.record, c.refused_left], sizes, long_ids),
        "side": np.r_[c.side.astype(np.int8), np.zeros(r, np.int8)],
        "entity_id": _ids([c.entity, c.refused_entities[0]], sizes, long_ids),
        "previous_id": _ids([c.previous, None], sizes, long_ids),
        "kind": np.r_[c.kind.astype(object), np.full(r, "refused", dtype=object)],
        "entity_size": pd.arrays.IntegerArray(np.r_[c.size.astype(np.int64), np.zeros(r, np.int64)], masked),
        "seq": np.full(n + r, c.seq, np.int64),
        "other_id": _ids([None, c.refused_right], sizes, long_ids),
        "other_side": pd.arrays.IntegerArray(np.full(n + r, 1 if two_sided else 0, np.int8), other),
        "other_entity_id": _ids([None, c.refused_entities[1]], sizes, long_ids),
        "reason": np.r_[np.full(n, None, dtype=object), c.refused_reason.astype(object)],
        "emit_us": np.full(n + r, emit_us, np.int64),
    }
    # each column as a Series of its own type: a frame built from bare object arrays is consolidated
    # and type-inferred column by column (2.3 s for 670,000 rows; this way 1 ms)
    return pd.DataFrame({k: pd.Series(v, dtype=v.dtype, copy=False) for k, v in columns.items()}, copy=False)


class EntityProcessor(OperatorProcessor):
    """The entity graph of every link (module docstring); ``static``: one batch, nothing persisted."""

    runs_plan_key = False

    def __init__(self, plan: EntitiesPlan, static: bool = False) -> None:
        super().__init__(plan)
        self.static = static

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "entities")

    def _rebuild(self, meta: Meta, chunks: Chunks, stale: EntityGraph | None) -> EntityGraph:
        f = meta.fields
        return EntityGraph.restore(self.plan.rules, chunks.read(RUNS), seq=meta.seq, clock=f["clock"],
                                   next_eid=f["next_eid"], run_cap=self.plan.run_cap)

    def _empty(self) -> EntityGraph:
        return EntityGraph(self.plan.rules, persist=not self.static, run_cap=self.plan.run_cap)

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        plan = self.plan
        t0 = time.perf_counter()
        loaded = self.state.load(key, self._rebuild, self._empty)
        graph: EntityGraph = loaded.value
        chunks = loaded.chunks
        t1 = time.perf_counter()
        times = pdf["time"].to_numpy(dtype=np.float64) if plan.timed else None
        batch = LinkBatch(pdf["left"].to_numpy(), pdf["right"].to_numpy(), times,
                          pdf["lsrc"].to_numpy(dtype=object) if plan.sourced else None,
                          pdf["rsrc"].to_numpy(dtype=object) if plan.sourced else None)
        changes = graph.apply(batch, seq=loaded.seq)
        t2 = time.perf_counter()
        sizes = dict(loaded.meta.fields.get("sizes", {}))
        if not self.static:
            for label in graph.facts.take_dropped():
                chunks.remove(RUNS, label)
                sizes.pop(label, None)
            for rid, payload in graph.facts.unwritten():
                blob = dumps(payload)
                label = chunks.add_pickled(RUNS, blob)
                graph.facts.written(rid, label)
                sizes[label] = len(blob)
        state_bytes = int(sum(sizes.values()))
        self.state.save(key, loaded, state_bytes, {"clock": graph.clock, "next_eid": graph.next_eid, "sizes": sizes})
        t3 = time.perf_counter()
        emit = time.time()
        if plan.metrics_dir:
            self._stats(loaded, graph, changes, pdf, emit, state_bytes, (t1 - t0, t2 - t1, t3 - t2))
        if len(changes.record) or len(changes.refused_left):
            yield change_frame(changes, int(emit * 1e6), plan.rules.two_sided, plan.id_type == "long")

    def _stats(self, loaded: Any, graph: EntityGraph, c: Changes, pdf: pd.DataFrame, emit: float, state_bytes: int,
               timings: tuple[float, float, float]) -> None:
        ingest = pdf["ingest"].to_numpy(dtype=np.float64)
        ingest = ingest[np.isfinite(ingest)]
        stats = {
            "seq": loaded.seq, "time": emit, **c.counts, "rows": len(c.record), "refused": len(c.refused_left),
            "refused_links": [{"left": a, "right": b, "reason": why} for a, b, why in
                              zip(c.refused_left[:100].tolist(), c.refused_right[:100].tolist(),
                                  c.refused_reason[:100].tolist())],
            "entities": graph.entity_count, "records": graph.record_count, "largest": graph.largest(),
            "state_bytes": state_bytes, "latency_hist": latency_histogram(emit - ingest),
            "timings": {"state_read": timings[0], "work": timings[1], "state_write": timings[2]},
            "state": {"source": loaded.source, "chunks_read": loaded.chunks.read_count,
                      "bytes_written": loaded.chunks.written_bytes, **graph.facts.summary()},
        }
        write_stats(self.plan.metrics_dir, "entities", 0, loaded.seq, stats)
