"""The control plane of ``natural_join``: partitionings fitted on the driver, published as routing tables.

The paper's Partition Creators, Merger and the Assigner's decisions (Sections III, IV, VI-A)
run here, on the driver, after every micro-batch (a ``StreamingQueryListener``,
:func:`attach_natural`); stateless routers in every input task apply what it publishes
(:mod:`driftjoin.spark.natural.table`). Statistics in, decisions out:

* **In**: the joiners' statistics of each *committed* batch (``metrics_dir/natural_joiner``:
  a batch's records are used once Spark reports that batch done): per window the documents
  each joiner kept, how many went to every joiner, the window table every joiner derived
  alike (joiner 0 reports it), the delta keys broadcast documents carried
  (:meth:`~driftjoin.schemafree.partitioner.Partitioner.route_unknown`), and at a window's
  *decision point* (a newer window opened, or it closed) each joiner's part of the window's
  bottom-k sample (documents of smallest number; every document is counted by one joiner).
* **Delta** (Section VI-A): sightings of unknown attribute-value pairs are added per fit
  (:meth:`~driftjoin.schemafree.partitioner.Partitioner.sightings`); a pair seen ``delta``
  times joins the least-loaded partition and is published as an *addition* of that fit.
  Routers that have not read it yet broadcast the documents carrying it, as before it was
  assigned, so the join stays exact whenever the addition lands.
* **Theta** (Section VI-A): at a window's decision point its replication and maximal load
  (over the documents its fit routed: documents routed by no fit, before the window had one or
  by a task that saw none, went to every joiner and say nothing about the fit) are compared
  with its fit's baseline; beyond ``theta`` (or when the window had no fit) a
  new fit is made on the window's sample (Algorithm 1 and the Merger, or SC/DS, or with
  ``partitioner="value"`` the attributes whose values send each document to one joiner,
  :mod:`~driftjoin.schemafree.valuepart`, AG when none divide the work:
  :meth:`~driftjoin.schemafree.partitioner.Partitioner.fit`; the log's ``kind`` says which).
  Windows opened after it is published use it; windows already open keep theirs. When
  several refits are due in one step only the newest is computed (the others are logged as
  superseded).
* **Bootstrap**: without ``sample=`` the first windows open with no fit (every document to
  every joiner, which is exact) and joiner 0 reports their sample every batch; the first fit
  is made on it and the broadcast windows take it for their later documents. On Spark it is
  made *ahead of the commit* (:meth:`NaturalPartitionController.early_fit`, polled by
  :meth:`~NaturalPartitionController.watch`): as soon as joiner 0 has written the first
  batch's record, not when the listener hears of the commit, which comes after the next batch's
  routers have read the table (so windows of one batch get it from window 1, not 2).
* **Out**: a :class:`~driftjoin.spark.natural.table.Decision` per step that changed anything:
  the newest fit, the floor (the newest fit every task of the last committed batch had seen),
  the listing of the open windows' fits, the additions, the frontier. Fits are files named by
  lineage and version; decisions are versioned JSON files (the newest 50 are kept).

Restarts: each built query has a new lineage. Its routers broadcast until this controller's
first decision, which lists the windows still open from before the restart; a window whose fit
(and its additions) can be read from ``metrics_dir`` keeps it, else (another directory) it is
broadcast until it closes. ``docs/natural_join.md`` has the exactness argument.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from pyarrow import fs as pafs

from driftjoin.schemafree.document import Document
from driftjoin.schemafree.metrics import routing_quality
from driftjoin.schemafree.partitioner import Partitioner
from driftjoin.spark.natural.plan import NaturalPlan
from driftjoin.spark.natural.table import (
    BROADCAST,
    RECORDS,
    UNKNOWN,
    Decision,
    decisions_name,
    fit_key,
    fit_path,
    fit_version,
    read_fit,
    read_record,
    write_fit,
)
from driftjoin.spark.runtime.decisions import (
    delete_blob,
    newest,
    publish,
    publish_blob,
    retire,
)
from driftjoin.spark.runtime.hub import register
from driftjoin.spark.runtime.queries import metrics_filesystem

log = logging.getLogger("driftjoin.natural")

#: The controller of each running natural join, by its control directory.
CONTROLLERS: dict[str, "NaturalPartitionController"] = {}
_LOG = "natural_log"


@dataclass
class _Quality:
    """A window's routing by its fit so far: the documents a fit routed and the copies of them
    each joiner kept. Documents routed by no fit (the window had none yet, or the task that
    routed them saw none) went to every joiner and say nothing about the fit: left out."""

    documents: int = 0
    loads: dict[int, int] = field(default_factory=dict)

    def measures(self, partitions: int) -> tuple[float, float]:
        replication, max_load, _ = routing_quality([self.loads.get(j, 0) for j in range(partitions)], self.documents)
        return replication, max_load


def _sample(records: list[dict[str, Any]], window: int, size: int) -> list[Document]:
    """The window's bottom-k sample: the ``size`` smallest numbers over the joiners' parts."""
    parts = [(seq, text) for rec in records for seq, text in rec.get("samples", {}).get(str(window), [])]
    return [Document(seq, json.loads(text)) for seq, text in sorted(parts)[:size]]


class NaturalPartitionController:
    """Fits, delta keys and routing tables of one natural join (module docstring)."""

    def __init__(self, plan: NaturalPlan, keep: int = 50) -> None:
        if plan.control is None:
            raise ValueError("the natural join controller needs the plan's control directory")
        self.plan = plan
        self.root: str = plan.control
        self.lineage = plan.lineage
        self.keep = keep
        self.lock = threading.RLock()
        self.newest = 0
        self.version = 0
        self.fits: dict[str, Partitioner] = {}
        self.additions: dict[str, list[list[Any]]] = {}
        self.unavailable: set[str] = set()
        self.quality: dict[int, _Quality] = {}
        self.query: str | None = None
        self.running: set[str] = set()  # queries of the session started and not yet terminated
        self.watcher: threading.Thread | None = None
        self.committed = -1
        self.processed = -1
        self.terminated = False
        self.last: Decision | None = None
        self.decisions: list[dict[str, Any]] = []
        self._zero: dict[int, tuple[int, dict[str, Any]]] = {}  # joiner 0's records: seq -> (mtime, record)
        self._named: deque[set[str]] = deque(maxlen=keep)
        self._pending: list[tuple[int, int, bool, list[Document]]] = []
        if plan.initial is not None:
            import pickle

            key = fit_key(self.lineage, 1)
            self.fits[key] = pickle.loads(plan.initial)
            self.additions[key] = []
            self.newest = 1
            write_fit(self.root, key, self.fits[key])
        CONTROLLERS[self.root] = self

    # -- statistics --------------------------------------------------------------------------

    def _scan(self) -> list[dict[str, Any]]:
        """Joiner 0's records of this lineage, by batch (each file read once, again if rewritten)."""
        fs, base = metrics_filesystem(self.root)
        folder = f"{base.rstrip('/')}/control/{RECORDS}/0"
        for info in fs.get_file_info(pafs.FileSelector(folder, allow_not_found=True)):
            if not info.base_name.endswith(".json") or info.base_name.startswith("."):
                continue
            seq = int(info.base_name[:-5])
            if seq in self._zero and self._zero[seq][0] == info.mtime_ns:
                continue
            rec = read_record(self.root, 0, seq)
            if rec is not None:
                self._zero[seq] = (info.mtime_ns, rec)
        ours = [rec for _, rec in self._zero.values() if rec.get("lineage") == self.lineage]
        return sorted(ours, key=lambda r: r["batch"])

    def on_progress(self, query: str, batch: int) -> None:
        """A micro-batch of some query finished: if it is this join's, decide on what it wrote."""
        try:
            with self.lock:
                if self.query is None:
                    ours = self._scan()
                    self.query = ours[-1].get("query") if ours else None
                if query != self.query:
                    return
                self.terminated = False  # a run of this query (restarted in this driver) is going on
                self.committed = max(self.committed, batch)
                self.step()
        except Exception:  # the join stays exact without decisions; it only routes worse
            log.exception("natural_join control step failed")

    def on_started(self, query: str) -> None:
        """A query of the session started: it may be this join's, so without a fit yet
        :meth:`watch` for the first one (a join that is built but never started never polls)."""
        with self.lock:
            self.running.add(query)
            if self.newest == 0 and (self.watcher is None or not self.watcher.is_alive()):
                self.watcher = self.watch()

    def on_terminated(self, query: str) -> None:
        """A query terminated: if it is this join's, :meth:`settle` stops waiting for batches
        (the events of a later run of the same query, restarted in this driver, come after)."""
        self.running.discard(query)
        if query == self.query:
            self.terminated = True

    def step(self, committed: int | None = None) -> Decision | None:
        """Take the committed batches not yet taken, then decide and publish (also used without
        Spark: ``committed`` is then the newest batch to take)."""
        with self.lock:
            if committed is not None:
                self.committed = max(self.committed, committed)
            last = None
            for rec0 in self._scan():
                if rec0["batch"] <= self.processed:
                    continue
                if rec0["batch"] > self.committed:
                    break
                records = [rec0]
                for j in range(1, self.plan.partitions):
                    rec = read_record(self.root, j, rec0["seq"])
                    if rec is None or rec.get("lineage") != self.lineage or rec["batch"] != rec0["batch"]:
                        break
                    records.append(rec)
                if len(records) < self.plan.partitions:
                    break  # a committed batch's records are all there: this one is still being written
                self._take(records)
                self.processed = rec0["batch"]
                last = rec0
            return None if last is None else self._publish(last)

    def _take(self, records: list[dict[str, Any]]) -> None:
        """One committed batch: window quality, delta sightings, decision points."""
        rec0 = records[0]
        for rec in records:
            for w, (received, _owned, _to_all, _dropped, *unfitted) in rec["windows"].items():
                q = self.quality.setdefault(int(w), _Quality())
                q.loads[rec["joiner"]] = q.loads.get(rec["joiner"], 0) + received - sum(unfitted)
        for w, n in rec0["documents"].items():  # a document routed by no fit is at joiner 0 (at every joiner)
            unfitted = rec0["windows"].get(w, [0] * 5)[4:]
            self.quality.setdefault(int(w), _Quality()).documents += n - sum(unfitted)
        for key, counts in rec0["unseen"].items():
            part = self._fit(key)
            if part is not None:
                assigned = part.sightings({tuple(json.loads(k)): n for k, n in counts.items()})
                self.additions[key].extend([[a, v, p] for (a, v), p in assigned.items()])
        fitted = self.newest > 0 or bool(self._pending)
        for w, key in sorted(rec0["decide"].items(), key=lambda item: int(item[0])):
            w = int(w)
            part = self._fit(key)
            quality = self.quality.get(w, _Quality())
            replication, max_load = quality.measures(self.plan.partitions)
            # a window with no fit says nothing of a fit this lineage made since (its batch's routers had not read it yet)
            if (part is None and not fitted) or (part is not None and quality.documents > 0
                                                 and part.needs_repartition(replication, max_load)):
                sample = _sample(records, w, self.plan.sample_size)
                if sample:
                    self._pending.append((w, rec0["batch"], not fitted, sample))
                    fitted = True
        if not fitted:  # bootstrap: the newest window without a fit, on its sample so far
            self._bootstrap(records, {int(w) for w, k in rec0["table"].items() if k == BROADCAST})
        for w in rec0["closed"]:
            self.quality.pop(int(w), None)

    def _bootstrap(self, records: list[dict[str, Any]], broadcast: set[int]) -> None:
        """Queue the first fit on the sample of the newest broadcast window that has one."""
        for w in sorted(broadcast, reverse=True):
            sample = _sample(records, w, self.plan.sample_size)
            if sample:
                self._pending.append((w, records[0]["batch"], True, sample))
                return

    # -- fits --------------------------------------------------------------------------------

    def _fit(self, key: str) -> Partitioner | None:
        """The fit ``key`` with its additions: this lineage's, or one continued from an earlier
        lineage whose files are in the control directory (None: no fit, or it cannot be read)."""
        if key in self.fits:
            return self.fits[key]
        if key in (BROADCAST, UNKNOWN) or key in self.unavailable or "." not in key:
            return None
        part = read_fit(self.root, key)
        if part is None:
            self.unavailable.add(key)
            return None
        earlier = newest(self.root, decisions_name(key.rsplit(".", 1)[0]))
        additions = list(earlier["additions"].get(key, [])) if earlier else []
        part.adopt({(a, v): p for a, v, p in additions})
        self.fits[key], self.additions[key] = part, additions
        return part

    def _listed(self, key: str) -> str:
        if key == BROADCAST:
            return BROADCAST
        return key if self._fit(key) is not None else UNKNOWN

    def _refit(self, early: bool = False) -> None:
        """Compute the newest refit that is due; log every trigger (``early``: made by
        :meth:`early_fit`, on a batch that may not have committed)."""
        if not self._pending:
            return
        window, batch, first, sample = self._pending[-1]
        part = self.plan.new_partitioner()
        part.fit(sample)
        self.newest += 1
        key = fit_key(self.lineage, self.newest)
        write_fit(self.root, key, part)
        self.fits[key], self.additions[key] = part, []
        for i, (w, b, was_first, _) in enumerate(self._pending):
            entry = {"window": w, "batch": b, "first": was_first, "superseded": i < len(self._pending) - 1,
                     "fit": key if i == len(self._pending) - 1 else None, "time": time.time(),
                     "kind": part.kind if i == len(self._pending) - 1 else None, "early": early}
            self.decisions.append(entry)
            publish_blob(self.root, f"{_LOG}/{self.lineage}/{len(self.decisions):06d}.json", json.dumps(entry).encode())
        self._pending = []

    # -- publication -------------------------------------------------------------------------

    def _publish(self, rec0: dict[str, Any]) -> Decision | None:
        self._refit()
        listing = {int(w): self._listed(k) for w, k in rec0["table"].items()}
        count = self.plan.window_kind == "count"
        decision = Decision(
            self.version + 1, self.lineage, self.newest, min(rec0["seen_newest"], self.newest), listing,
            {}, rec0["frontier"], rec0["count"] // self.plan.size if count else None)  # type: ignore[operator]
        named = decision.fits()
        decision = Decision(decision.version, decision.lineage, decision.newest, decision.floor, decision.windows,
                            {k: list(self.additions[k]) for k in sorted(named) if self.additions.get(k)},
                            decision.frontier, decision.low)
        if self.last is not None and decision.to_json() == self.last.to_json():
            return None
        self._announce(decision, named)
        retire(self.root, decisions_name(self.lineage), keep=self.keep)
        self._prune_fits()
        return decision

    def _announce(self, decision: Decision, named: set[str]) -> None:
        """Publish ``decision`` (naming the fits ``named``) as this controller's newest."""
        publish(self.root, decisions_name(self.lineage), decision.version, decision.to_json())
        self.version, self.last = decision.version, decision
        self._named.append(named)

    def _prune_fits(self) -> None:
        """Remove this lineage's fit files no kept decision names (and older ones: versions only grow)."""
        if len(self._named) < self.keep:
            return
        kept = set().union(*self._named)
        own = [fit_version(k) for k in kept if k.startswith(f"{self.lineage}.")]
        if not own:
            return
        for key in [k for k in self.fits if k.startswith(f"{self.lineage}.") and fit_version(k) < min(own)]:
            delete_blob(self.root, fit_path(key))
            del self.fits[key]
            self.additions.pop(key, None)

    # -- bootstrap ahead of the commit --------------------------------------------------------

    def early_fit(self) -> Decision | None:
        """Make and publish the first fit from the sample joiner 0 wrote in a batch that may not
        have committed yet (None: there is a fit already, or no sample to fit on).

        On Spark the next micro-batch starts as soon as one commits and its routers read the
        routing table in their first moments, while the listener hears of the commit a few
        tenths of a second later: a fit made on commit reaches the batch after the next, so with
        windows of one batch the first two windows were broadcast. Joiner 0 writes its record
        before the batch commits, and the sample of a broadcast window is all there (every
        document is at joiner 0), so the first fit can be made then. Only the fit is taken from
        the uncommitted record; the published decision lists what the last committed batch did
        (nothing before the first), so it is a decision like any other that lands while a batch
        runs: any fit is exact, and a retry of the batch reads it as it would a later one. Not in
        a restarted query before its first committed batch: windows opened by the earlier
        lineage may be open with their fits, which only a committed batch's table lists (a task
        with a fit routes an unlisted window by this lineage's fits only), so the first fit
        waits for the commit there.
        """
        with self.lock:
            if self.newest > 0 or self._pending:
                return None
            ahead = [r for r in self._scan() if r["batch"] > self.processed]
            if not ahead or (self.last is None and ahead[0]["batch"] > 0):
                return None  # a restarted query: windows of the earlier lineage may be open, unlisted
            rec = ahead[-1]  # a window it opened, or one it decided on (a count window may close in its batch)
            self._bootstrap([rec], {int(w) for part in (rec["table"], rec["decide"]) for w, k in part.items()
                                    if k == BROADCAST})
            if not self._pending:
                return None
            self._refit(early=True)
            last = self.last
            decision = Decision(self.version + 1, self.lineage, self.newest, 0 if last is None else last.floor,
                                {} if last is None else last.windows, {} if last is None else last.additions,
                                None if last is None else last.frontier, None if last is None else last.low)
            self._announce(decision, decision.fits())
            return decision

    def _watching(self) -> bool:
        """Whether :meth:`watch` should go on: no committed batch taken yet (from then on fits
        are made on commit), still the controller of its directory, and a query that may be
        this join's is running (its own once its records name it)."""
        if self.terminated or self.processed >= 0 or CONTROLLERS.get(self.root) is not self:
            return False
        return self.query in self.running if self.query is not None else bool(self.running)

    def watch(self, interval: float = 0.05, patience: float = 600.0) -> threading.Thread:
        """Poll for :meth:`early_fit` on a daemon thread until there is a fit, or
        :meth:`_watching` says stop (the query ended, or this controller was replaced or has taken
        a committed batch), or ``patience`` seconds passed. Started by :meth:`on_started`."""
        def run() -> None:
            deadline = time.monotonic() + patience
            while time.monotonic() < deadline and self._watching():
                try:
                    if self.newest > 0 or self.early_fit() is not None:
                        return
                except Exception:  # the join stays exact without it; the fit comes on commit
                    log.exception("natural_join early fit failed")
                    return
                time.sleep(interval)

        thread = threading.Thread(target=run, name=f"natural-early-fit:{self.lineage}", daemon=True)
        thread.start()
        return thread

    # -- waiting -----------------------------------------------------------------------------

    def settle(self, timeout: float = 30.0) -> None:
        """Wait until every batch written so far has been decided on (the listener runs
        asynchronously), or the query ended, or ``timeout`` seconds passed."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self.lock:
                if all(r["batch"] <= self.processed for r in self._scan()):
                    return
                if self.terminated:  # its last progress came before the end: the rest never committed
                    self.step()
                    return
            time.sleep(0.05)


def read_log(root: str) -> list[dict[str, Any]]:
    """Every refit the controllers of a join triggered (all lineages), in no particular order."""
    fs, base = metrics_filesystem(root)
    selector = pafs.FileSelector(f"{base.rstrip('/')}/control/{_LOG}", recursive=True, allow_not_found=True)
    out = []
    for info in fs.get_file_info(selector):
        if info.type == pafs.FileType.File and info.base_name.endswith(".json") and not info.base_name.startswith("."):
            with fs.open_input_stream(info.path) as f:
                out.append(json.loads(f.read()))
    return out


def attach_natural(spark: Any, controller: NaturalPartitionController) -> None:
    """Run the controller on the driver after every micro-batch (it keeps to its own query); it
    replaces the controller of an earlier join on the same directory. Without ``sample=`` it
    also watches for the first fit ahead of the commit while a query runs
    (:meth:`NaturalPartitionController.on_started`, :meth:`~NaturalPartitionController.watch`)."""
    register(spark, f"natural:{controller.root}", lambda p: controller.on_progress(p.query, p.batch),
             controller.on_terminated, controller.on_started)
