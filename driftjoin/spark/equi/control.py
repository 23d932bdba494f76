"""The control plane of ``equi_join(algorithm="shc")`` on streams: heavy hitters and grids.

:class:`EquiRoutingController` runs on the driver. After every committed micro-batch of its query
(a ``StreamingQueryListener`` progress event) it reads the key counts each worker wrote for that
batch (``<metrics_dir>/control/equi_counts/<batch>/<worker>.json``: Misra-Gries counters of the
tuples whose primary copy the worker got, with their true totals), merges them, folds them in
batch order into its :class:`~driftjoin.hypercube.planner.RoutingPlanner` (the paper's heavy-hitter
tracking, promotion and demotion, doubling and halving, task-to-worker assignment) and publishes
a new routing table version (``control/equi_table``) when the grids change. The plan key of the
running query binds the newest version to the next batch
(:mod:`driftjoin.spark.equi.operators`), so a table takes effect one or two batches after the
counts it reflects; exactness never depends on when.

Only committed batches are folded (a failed attempt's counts are overwritten by its replay
before the batch commits), each once and in order. After each round the controller saves its
planner (``control/equi_controller.pkl``), so a restarted driver resumes where it stopped, and
deletes what no batch can need again: the counts it folded, moved state read by committed
batches, bindings of committed batches and table versions older than the newest three.

Its query is the one whose id the workers write with their counts (Spark keeps a query's id
across restarts from its checkpoint). A saved planner of another query (the directory reused
with a new checkpoint) is set aside for a new one whose versions continue above the old
tables, and every table carries its query's id, so the plan key never binds another query's
table.
"""

from __future__ import annotations

import json
import logging
import pickle
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from pyarrow import fs as pafs

from driftjoin.hypercube import BatchSummary
from driftjoin.hypercube.planner import RoutingPlanner
from driftjoin.spark.equi.operators import (
    BINDINGS,
    COUNTS,
    MOVES,
    TABLES,
    EquiPlan,
    key_codec,
    read_counts,
)
from driftjoin.spark.runtime.decisions import newest, publish, retire
from driftjoin.spark.runtime.files import filesystem, write_whole
from driftjoin.spark.runtime.hub import Progress, register
from driftjoin.spark.runtime.stats import write_stats

log = logging.getLogger("driftjoin")

@dataclass
class EquiRoutingController:
    """Folds committed batches' counts into SHC decisions and publishes routing tables."""

    plan: EquiPlan
    planner: RoutingPlanner = field(init=False)
    query: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if not self.plan.metrics_dir:
            raise ValueError("the equi_join control plane needs metrics_dir")
        self.fs, self.base = filesystem(self.plan.metrics_dir)
        #: the query of the saved planner (None: none saved); ``query`` is learnt from the counts
        self.saved_query: str | None = None
        self.planner = self._resume() or self._new_planner()

    def _new_planner(self) -> RoutingPlanner:
        """A planner whose first table version is above every table in the directory."""
        planner = self.plan.planner()
        doc = newest(self.plan.metrics_dir, TABLES)
        if doc is not None:
            planner.table = replace(planner.table, version=int(doc["table"]["version"]))
        return planner

    @property
    def _snapshot(self) -> str:
        return f"{self.base}/control/equi_controller.pkl"

    def _resume(self) -> RoutingPlanner | None:
        try:
            with self.fs.open_input_stream(self._snapshot) as f:
                saved = pickle.loads(f.read())
        except FileNotFoundError:
            return None
        if saved.get("settings") != self.plan.settings():
            return None  # another plan: the query's plan guard refuses it; start over
        self.saved_query = saved.get("query")
        return saved["planner"]

    def _adopt(self, query: str) -> None:
        """The running query is ``query``: keep the saved planner if it is that query's."""
        self.query = query
        if self.saved_query is not None and self.saved_query != query:
            log.info("equi_join control plane: %s held the planner of query %s; query %s starts a new one",
                     self.plan.metrics_dir, self.saved_query, query)
            self.planner = self._new_planner()
        self.saved_query = query

    def step(self, committed: int, query: str | None = None) -> int:
        """Fold every committed batch up to ``committed`` not folded yet; returns how many.

        ``query``: the id of the query that committed it; progress of other queries is ignored
        once the controller knows its own query (from the workers' count files)."""
        with self._lock:
            if query is not None and self.query is not None and query != self.query:
                return 0
            if self.query is None and not self._identify(committed, query):
                return 0
            folded = []
            for batch in self._pending(committed):
                summary = self._read(batch)
                if summary is None:
                    break
                changed = self.planner.fold(batch, summary)
                if changed:
                    table = self.planner.table
                    publish(self.plan.metrics_dir, TABLES, table.version,
                            {"query": self.query, "table": table.to_doc(key_codec(self.plan.key_type)[0]),
                             "through": batch})
                self._stats(batch, summary, changed)
                folded.append(batch)
            if folded:
                self._save()
                for batch in folded:
                    self._delete_dir(f"{self.base}/control/{COUNTS}/{batch:012d}")
            self._collect(committed)
            return len(folded)

    def _pending(self, committed: int) -> list[int]:
        folder = f"{self.base}/control/{COUNTS}"
        infos = self.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True))
        batches = sorted(int(i.base_name) for i in infos if i.type == pafs.FileType.Directory and i.base_name.isdigit())
        return [b for b in batches if self.planner.through < b <= committed]

    def _identify(self, committed: int, query: str | None) -> bool:
        """Learn the running query from the counts of the batch it just committed (every worker
        writes them every batch); ``query``: the id of the committing query, when known."""
        try:
            with self.fs.open_input_stream(f"{self.base}/control/{COUNTS}/{committed:012d}/0.json") as f:
                found = json.loads(f.read()).get("query")
        except FileNotFoundError:
            return False
        if found is None or (query is not None and found != query):
            return found is None  # no ids (outside Spark): nothing to tell queries apart by
        self._adopt(found)
        return True

    def _read(self, batch: int) -> BatchSummary | None:
        """The merged counts of a batch, or None while a worker's file is missing."""
        folder = f"{self.base}/control/{COUNTS}/{batch:012d}"
        parts = []
        for w in range(self.plan.parallelism):
            try:
                with self.fs.open_input_stream(f"{folder}/{w}.json") as f:
                    doc = json.loads(f.read())
            except FileNotFoundError:
                return None
            if doc.get("query") != self.query:
                return None  # left by another query: this one has not written this batch yet
            parts.append(read_counts(doc, self.plan.key_type))
        return BatchSummary.merge(parts)

    def _stats(self, batch: int, summary: BatchSummary, changed: bool) -> None:
        stats = self.planner.shc.stats
        table = self.planner.table
        write_stats(self.plan.metrics_dir, "equi_control", 0, batch, {
            "batch": batch, "time": time.time(), "version": table.version, "published": changed,
            "tuples": sum((summary.totals or {}).values()), "heavy": len(table.grids),
            "grids": {repr(k): [g.p_r, g.p_s] for k, g in table.grids.items()},
            **{k: getattr(stats, k) for k in ("promotions", "demotions", "doublings", "halvings", "tasks_created")},
        })

    def _save(self) -> None:
        write_whole(self.fs, self._snapshot,
                    pickle.dumps({"settings": self.plan.settings(), "query": self.query, "planner": self.planner}))

    def _collect(self, committed: int) -> None:
        """Delete moved state and bindings no batch after ``committed`` can read, old tables."""
        folder = f"{self.base}/control/{MOVES}"
        for info in self.fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
            if info.base_name.isdigit() and int(info.base_name) < committed:
                self._delete_dir(info.path)
        retire(self.plan.metrics_dir, BINDINGS, committed)
        retire(self.plan.metrics_dir, TABLES, self.planner.table.version, keep=2)

    def _delete_dir(self, path: str) -> None:
        try:
            self.fs.delete_dir(path)
        except FileNotFoundError:
            pass


def attach(spark: Any, controller: EquiRoutingController) -> None:
    """Run the controller on the driver after every micro-batch with input of its query (it
    ignores other queries); it replaces the controller of an earlier join on its directory."""
    def on_progress(p: Progress) -> None:
        if p.rows:
            controller.step(p.batch, p.query)

    register(spark, f"equi:{controller.plan.metrics_dir}", on_progress)
