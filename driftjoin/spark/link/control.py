"""The control plane of ``link``: hot blocking keys found in the workers' statistics, split by decision.

The common shape (docs/architecture.md): workers write statistics; a driver-side controller
decides and publishes versioned decisions; the routers and workers read them.

- **Statistics.** Every worker reports, per batch, the entry counts of its largest ordinary
  groups per rule (``groups``: ``[rule, group, entries]``) and the sum of the squares of all
  (``square_sum``), :mod:`driftjoin.spark.link.processor`.
- **Decision.** :class:`SplitController` (a listener of the session, :mod:`driftjoin.spark.runtime.hub`)
  folds each committed batch's groups into counts over the last :data:`HORIZON` batches, and
  :func:`driftjoin.linkage.split.decide` picks the heavy ones; when the heavy set changes it
  publishes a new :class:`~driftjoin.linkage.split.SplitTable` as version ``v`` of
  ``link/<query>/split`` (:mod:`driftjoin.spark.runtime.decisions`). Version 0 is the plan's
  (the sample's) and is never published.
- **Binding.** Windows must keep one decision: the plan key (:data:`PLAN_KEY`, which every
  router's heartbeat reaches) keeps a :class:`~driftjoin.linkage.split.Binding` in its state.
  During batch ``b`` it learns the batch's largest time from the heartbeats, so the largest
  window ``M_b`` any copy of batches ``<= b`` can have; if a newer decision version exists it
  binds it to the windows after ``M_b``, and it writes the binding for batch ``b + 1`` as version
  ``b + 1`` of ``link/<query>/binding``. Batch ``b + 1`` starts only after batch ``b`` committed,
  so all of its tasks (and its replays) read the same binding (the newest version at most
  ``b + 1``), and a window that has records keeps its version forever: the windows of the new
  interval had no copy before. A replay of batch ``b`` may bind a newer version than its first
  attempt did: nothing of batch ``b + 1`` ran yet. Routers place each copy under its window's
  version, workers recompute entries under the version each row carries
  (:func:`table_for`), so every pair of a window meets under one table and
  :mod:`driftjoin.linkage.split`'s argument holds.

Without ``metrics_dir`` (or on a static input) only version 0 exists.
"""

from __future__ import annotations

import logging
from collections import deque
from typing import Any

from driftjoin.linkage.split import MIN_RECORDS, Binding, SplitTable, decide
from driftjoin.spark.runtime import decisions, hub
from driftjoin.spark.runtime.stats import STAMP, read_stats

log = logging.getLogger("driftjoin")

#: Committed batches whose group counts a decision is taken on.
HORIZON = 10

_TABLES: dict[tuple[str, str, int], SplitTable] = {}


def split_name(query: str) -> str:
    return f"link/{query}/split"


def binding_name(query: str) -> str:
    return f"link/{query}/binding"


def table_for(root: str, query: str, version: int, plan_table: SplitTable) -> SplitTable:
    """Decision ``version`` of ``query`` (version 0: the plan's), cached in this process."""
    if version == 0:
        return plan_table
    key = (root, query, int(version))
    table = _TABLES.get(key)
    if table is None:
        doc = decisions.read_version(root, split_name(query), int(version))
        if doc is None:
            raise RuntimeError(f"link: hot-key decision version {version} of query {query} is missing from "
                               f"{root}/control: the metrics directory lost files the query's state refers to")
        table = _TABLES[key] = SplitTable.from_dict(doc)
    return table


def binding_for(root: str, query: str, batch: int) -> Binding:
    """The binding batch ``batch`` routes with (the newest written for a batch at most ``batch``)."""
    doc = decisions.newest(root, binding_name(query), at_most=batch)
    return Binding() if doc is None else Binding.from_dict(doc)


def publish_binding(root: str, query: str, batch: int, binding: Binding) -> None:
    decisions.publish(root, binding_name(query), batch, binding.as_dict())


class SplitController:
    """Decides the heavy groups of a streaming link from its workers' statistics (module docstring)."""

    def __init__(self, metrics_dir: str, workers: int, *, min_heavy: int = MIN_RECORDS, horizon: int = HORIZON) -> None:
        self.root = metrics_dir
        self.workers = workers
        self.min_heavy = min_heavy
        self.horizon = horizon
        self.recent: dict[str, deque] = {}
        self.published: dict[str, dict] = {}

    def on_progress(self, progress: hub.Progress) -> None:
        """Fold the committed batch's statistics; publish a new table if the heavy set changed."""
        batch_groups: dict[tuple[int, int], int] = {}
        square = 0.0
        seen = False
        for s in read_stats(self.root, "link", query_id=progress.query):
            if s[STAMP]["batch"] != progress.batch:
                continue
            seen = True
            square += float(s.get("square_sum", 0.0))
            for r, g, n in s.get("groups", ()):
                batch_groups[(int(r), int(g))] = batch_groups.get((int(r), int(g)), 0) + int(n)
        if not seen:
            return
        recent = self.recent.setdefault(progress.query, deque(maxlen=self.horizon))
        recent.append((batch_groups, square))
        counts: dict[tuple[int, int], int] = {}
        for groups, _ in recent:
            for k, n in groups.items():
                counts[k] = counts.get(k, 0) + n
        total = float(sum(n * n for n in counts.values())) + sum(sq for _, sq in recent)
        table = decide(counts, self.workers, min_records=self.min_heavy, total_work=total)
        heavy = {r: dict(t) for r, t in table.heavy.items()}
        last = self.published.get(progress.query)
        if last is None:
            versions = decisions.versions(self.root, split_name(progress.query))
            newest = decisions.read_version(self.root, split_name(progress.query), versions[-1]) if versions else None
            last = self.published[progress.query] = (SplitTable.from_dict(newest) if newest else SplitTable()).as_dict()
        if SplitTable(0, heavy).as_dict()["heavy"] == last["heavy"] or (not heavy and not last["heavy"]):
            return
        version = int(last["version"]) + 1
        doc = SplitTable(version, heavy).as_dict()
        decisions.publish(self.root, split_name(progress.query), version, doc)
        self.published[progress.query] = doc
        log.info("link: hot-key decision %d: %d heavy groups", version, sum(len(t) for t in heavy.values()))


def attach(spark: Any, controller: SplitController) -> None:
    """Register ``controller`` with the session's listener (one per metrics directory)."""
    hub.register(spark, f"link-split:{controller.root}", controller.on_progress)
