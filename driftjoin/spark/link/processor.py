"""The stateful stage of ``link``: one key per logical worker (``transformWithStateInPandas``).

Per micro-batch and key: the plan check (:class:`~driftjoin.spark.runtime.processor.OperatorProcessor`),
the window clock from the heartbeats (every key derives the same frontier,
:mod:`driftjoin.clock`), late copies refused whole at every key, the copies sorted into one
deterministic order and joined by :meth:`driftjoin.linkage.worker.LinkWorker.add` (each matching
pair once, under its first rule, explained), then the windows below the first open one dropped.

State (:class:`~driftjoin.spark.runtime.state.ChunkedState` ``link_worker``): one chunk per run a
batch added to the worker's stores, under the run's part id, grouped by window, holding
``(lane, run)`` (:attr:`driftjoin.metric.store.RunStore.added`); runs merge in memory only, so a
batch writes what it added and a stale cached worker keeps its runs whose parts are all still
listed and reads only the newer chunks; a closed window is dropped by group, so state is bounded
by the watermark. The clock is in the meta
fields. Static inputs run the same processor once per key (``applyInArrow``, in-memory state).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql.streaming.stateful_processor import StatefulProcessorHandle

from driftjoin.clock import WindowClock, tick_of
from driftjoin.linkage.records import LinkPairs
from driftjoin.linkage.worker import LinkStats, LinkWorker
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.store import Run
from driftjoin.linkage.split import Binding
from driftjoin.spark.link.control import publish_binding, split_name
from driftjoin.spark.link.plan import OUTPUT_CHUNK, LinkPlan, frame_fields
from driftjoin.spark.link.router import load_tables
from driftjoin.spark.runtime import decisions
from driftjoin.spark.runtime.heartbeats import split_heartbeats
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.queries import task_query
from driftjoin.spark.runtime.state import BlobState, ChunkedState, Chunks, Meta
from driftjoin.spark.runtime.stats import latency_histogram, write_stats

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd


@dataclass
class _Worker:
    """A worker's join, its clock and the bytes of each of its chunks."""

    core: LinkWorker
    clock: WindowClock
    sizes: dict[int, int] = field(default_factory=dict)

    def nbytes(self) -> int:
        return int(sum(self.sizes.values()))


class LinkProcessor(OperatorProcessor):
    """The join of one link worker (key = the worker's slot key; module docstring); the plan key
    binds hot-key decisions to windows (:mod:`driftjoin.spark.link.control`)."""

    runs_plan_key = True

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "link_worker")
        self.binding = BlobState(handle, "link_binding")

    def _bind(self, top: float) -> None:
        """The plan key's batch: bind a newer decision to the windows no copy has reached yet, and
        write the binding of the next batch."""
        plan: LinkPlan = self.plan
        q = task_query()
        if not plan.metrics_dir or q.query_id is None or q.batch_id is None:
            return
        saved, _ = self.binding.resume()
        binding = Binding.from_dict(saved["binding"]) if saved else Binding()
        reached = saved["reached"] if saved else None
        t = tick_of(top)
        if t is not None:
            last = int(plan.windows.copies(np.array([t])).window.max())
            reached = last if reached is None else max(reached, last)
        versions = decisions.versions(plan.metrics_dir, split_name(q.query_id))
        if versions and versions[-1] > binding.newest and reached is not None:
            binding = binding.extend(reached + 1, versions[-1])
        publish_binding(plan.metrics_dir, q.query_id, q.batch_id + 1, binding)
        self.binding.save({"seq": (saved or {"seq": -1})["seq"] + 1, "binding": binding.as_dict(), "reached": reached})

    def _new(self, slot: int) -> _Worker:
        plan: LinkPlan = self.plan
        core = LinkWorker(plan.core, slot)
        for store in core.stores:
            store.keep_added = True
        return _Worker(core, WindowClock(plan.windows, tick_of(plan.lateness)))

    def _rebuild(self, slot: int, meta: Meta, chunks: Chunks, stale: _Worker | None) -> _Worker:
        """The worker from its chunks; a stale cached worker's runs whose parts are all still listed
        are kept (chunks never change), and only the other chunks are read."""
        w = self._new(slot)
        w.clock.seen = meta.fields["clock"]
        w.sizes = dict(meta.fields["sizes"])
        for g in chunks.groups():
            runs = [] if stale is None else [(lane, r) for lane, s in enumerate(stale.core.stores) for r in s.windows.get(g, ())]
            kept, new = chunks.keep_stale(g, runs, lambda item: item[1].parts)
            for lane, run in kept:
                w.core.stores[lane].windows.setdefault(g, []).append(run)
            for c, (lane, arrays) in new:
                w.core.stores[lane].put(g, Run.from_arrays(arrays, (c,)))
        return w

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        plan: LinkPlan = self.plan
        t0 = time.perf_counter()
        pdf, top = split_heartbeats(pdf)
        if key == PLAN_KEY:
            self._bind(top)
            return
        slot = plan.slot_of(key)
        loaded = self.state.load(key, lambda meta, chunks, stale: self._rebuild(slot, meta, chunks, stale),
                                 lambda: self._new(slot))
        w: _Worker = loaded.value
        worker, clock, chunks = w.core, w.clock, loaded.chunks
        t1 = time.perf_counter()
        pdf = pdf.sort_values(["time", "side", "id", "window"], kind="stable").reset_index(drop=True)
        times = pdf["time"].to_numpy(dtype=np.int64)
        late = clock.late(times)
        home = pdf["home"].to_numpy(dtype=bool)
        late_rows = [{"side": int(s), "id": i.item() if hasattr(i, "item") else i, "time": int(t)}
                     for s, i, t in zip(pdf["side"][late & home], pdf["id"][late & home], times[late & home])]
        nulls = self._null_counts(pdf[~late & home])
        pdf = pdf[~late].reset_index(drop=True)
        rec = MetricRecords(pdf["id"].to_numpy(), pdf["side"].to_numpy(dtype=np.int8), frame_fields(plan, pdf),
                            pdf["time"].to_numpy(dtype=np.int64), pdf["window"].to_numpy(dtype=np.int64),
                            pdf["ghost"].to_numpy(dtype=bool))
        load_tables(plan, rec.value.version, worker.core)
        worker.stats = LinkStats()
        pairs = worker.add(rec) if len(rec) else LinkPairs.empty(len(plan.measures), rec.id.dtype)
        t2 = time.perf_counter()
        clock.advance(tick_of(top))
        first = clock.first_open()
        if first is not None:
            worker.expire_before(first)
            chunks.drop_groups(lambda g: g >= first)
        self._persist(w, chunks)
        t3 = time.perf_counter()
        self.state.save(key, loaded, w.nbytes(), {"clock": clock.seen, "sizes": w.sizes})
        emit = time.time()
        if plan.metrics_dir and (len(rec) or late_rows):
            s = worker.stats
            stats = {
                "worker": slot, "seq": loaded.seq, "time": emit, "candidates": s.candidates, "comparisons": s.comparisons,
                "pairs": len(pairs), "records": int(pdf["home"].sum()), "memberships": len(rec), "entries": s.entries,
                "pairs_per_rule": np.bincount(pairs.rule, minlength=len(plan.core.ruleset.rules)).tolist(),
                "nulls_per_rule": nulls, "groups": [[r, g, n] for (r, g), n in s.groups.items()],
                "square_sum": s.square_sum, "state_bytes": w.nbytes(),
                "latency_hist": latency_histogram(emit - pairs.ingest), "late": len(late_rows), "late_rows": late_rows,
                "timings": {"state_read": t1 - t0, "work": t2 - t1, "state_write": t3 - t2},
                "state": {"source": loaded.source, "chunks_read": chunks.read_count, "bytes_written": chunks.written_bytes},
            }
            if plan.choice:
                stats["choice"] = plan.choice
            write_stats(plan.metrics_dir, "link", slot, loaded.seq, stats)
        yield from pair_frames(pairs, emit)

    def _null_counts(self, home: pd.DataFrame) -> list[int]:
        """Per rule, the records of this batch (counted at their home row) that take no part in it
        because a field it reads is null (or unusable)."""
        if not len(home):
            return [0] * len(self.plan.core.ruleset.rules)
        rec = MetricRecords(home["id"].to_numpy(), home["side"].to_numpy(dtype=np.int8), frame_fields(self.plan, home),
                            home["time"].to_numpy(dtype=np.int64), home["window"].to_numpy(dtype=np.int64),
                            home["ghost"].to_numpy(dtype=bool))
        return [int((~self.plan.core.takes_part(rec, r)).sum()) for r in range(len(self.plan.core.ruleset.rules))]

    @staticmethod
    def _persist(w: _Worker, chunks: Chunks) -> None:
        """Write the runs the batch added (module docstring)."""
        for lane, store in enumerate(w.core.stores):
            w.sizes.update(chunks.add_runs(store, lambda run, lane=lane: (lane, run.arrays())))
        w.sizes = chunks.listed(w.sizes)


def pair_frames(pairs: LinkPairs, emit: float) -> Iterator[pd.DataFrame]:
    """Pairs as output frames of plain numbers (the JVM builds the documented columns)."""
    emit_us = int(round(emit * 1e6))
    ingest_us = np.round(pairs.ingest * 1e6).astype(np.int64)
    for lo in range(0, len(pairs), OUTPUT_CHUNK):
        part = slice(lo, lo + OUTPUT_CHUNK)
        frame = {"left_id": pairs.left_id[part], "right_id": pairs.right_id[part],
                 "rule": pairs.rule[part].astype(np.int32), "rules_mask": pairs.rules[part]}
        for j in range(pairs.distances.shape[1]):
            frame[f"d{j}"] = pairs.distances[part, j]
        frame.update({"window": pairs.window[part], "ingest_us": ingest_us[part],
                      "emit_us": np.full(len(frame["left_id"]), emit_us, np.int64)})
        yield pd.DataFrame(frame, copy=False)
