"""natural_join's routing table: the decisions the control plane publishes and what a router sees.

The control plane (:class:`driftjoin.spark.natural.control.NaturalPartitionController`, on the driver)
fits partitionings (association groups, SC or DS: :class:`~driftjoin.schemafree.partitioner.
Partitioner`) and assigns delta keys; stateless router tasks route every document with them.
Publications land whenever the driver gets to them, also while a batch runs, so two tasks of
one batch may read different versions. This module holds the rule that keeps the join exact
anyway (argued in full in ``docs/natural_join.md``):

* A **fit** is named ``<lineage>.<version>`` (:func:`fit_key`; versions count up from 1 in one
  lineage, the life of one controller) and never changes; its delta keys (*additions*) only
  grow, and the homes of keys never move. Fit ``"0"`` (:data:`BROADCAST`) is no fit at all:
  every document to every joiner, which meets any other routing.
* A **decision** (:class:`Decision`, version ``D``) names the newest fit, a *floor* and the
  fit of every window that was open after the last committed batch the controller read (its
  *listing*). Every window opened later is opened by the joiners with a fit in
  ``[floor, newest]`` of some decision visible then: the joiners take the smallest newest fit
  any router task of the batch saw that saw a fit at all (:func:`opening_fit`), and every task
  of a later batch sees at least the decisions any task of an earlier batch saw, so it is at
  least the floor.
* A router that does not know a document's window fit routes it by **every candidate** fit
  (:meth:`RoutingView.candidates`): the listed fit if the window is listed, else every fit
  from the floor to the newest it sees; the document goes to the union of the candidates'
  masks and carries each candidate's mask. The joiners know the window's fit (they decide it,
  identically at every joiner, from the heartbeats) and use that candidate's mask; the other
  targets drop their copy. Candidates that route alike (value fits with the same ``S``) cost
  nothing: the union of equal masks is one of them.
* **Broadcast is never a candidate of a task that sees a fit.** A task that sees no fit sends
  every document to every joiner, which meets any other routing, so the joiners may open (or
  upgrade) a window with the fit of the tasks that saw one and ignore the others; a window
  opened with fit ``"0"`` (no task of its batch saw a fit) takes the opening fit of the first
  batch in which some task sees one. Hence a task with a fit routes an unlisted window, or a
  window listed with ``"0"``, by the fits ``max(floor, 1)`` to newest only: the broadcast
  copies to every joiner that the union with ``"0"`` would add are gone.

A decision published while a batch runs is therefore harmless: a task that read the older
decision includes the window's fit among its candidates all the same. Publication needs a
file system where a written and renamed file is seen by every later reader (local, HDFS, S3,
GCS).
"""

from __future__ import annotations

import hashlib
import json
import pickle
from dataclasses import dataclass, field
from typing import Any

from driftjoin.schemafree.document import Document
from driftjoin.schemafree.partitioner import Partitioner
from driftjoin.spark.runtime.decisions import (
    bind,
    publish_blob,
    read_blob,
    read_bound,
    read_version,
)

#: Where joiners leave the control plane their records (``control/<RECORDS>/<joiner>/<seq>.json``),
#: apart from the statistics a user reads (stamped per query and run: :mod:`driftjoin.spark.runtime.stats`).
RECORDS = "natural_records"


def record_path(joiner: int, seq: int) -> str:
    return f"{RECORDS}/{joiner}/{seq:012d}.json"


def write_record(root: str, joiner: int, seq: int, record: dict[str, Any]) -> None:
    """A joiner's record of its batch ``seq`` for the controller (a replay rewrites it whole)."""
    publish_blob(root, record_path(joiner, seq), json.dumps(record, separators=(",", ":")).encode())


def read_record(root: str, joiner: int, seq: int) -> dict[str, Any] | None:
    """Joiner ``joiner``'s record of batch ``seq`` (None if absent)."""
    data = read_blob(root, record_path(joiner, seq))
    return None if data is None else json.loads(data)


#: The fit key of "no fit": every non-empty document to every joiner.
BROADCAST = "0"
#: A listed window whose fit cannot be loaded (a checkpoint restarted with another
#: ``metrics_dir``): its documents are broadcast until it closes.
UNKNOWN = "*"
_FITS = "natural_fits"


def decisions_name(lineage: str) -> str:
    """The decision name (:func:`~driftjoin.spark.runtime.stats.publish`) of a lineage."""
    return f"natural/{lineage}"


def fit_key(lineage: str, version: int) -> str:
    return BROADCAST if version == 0 else f"{lineage}.{version}"


def fit_version(key: str) -> int:
    return 0 if key == BROADCAST else int(key.rsplit(".", 1)[1])


def fit_id(key: str) -> int:
    """A 63-bit number for a fit key, carried by routed rows (0 is :data:`BROADCAST`)."""
    if key == BROADCAST:
        return 0
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little") >> 1 or 1


def doc_seq(side: int, doc_id: Any, time: float | None, text: str) -> int:
    """The internal number of a document: a 63-bit hash of its side, id, time and flat pairs.

    Unique per distinct row (routers cannot number documents: they run in parallel); two
    identical rows get the same number and count once.
    """
    h = hashlib.blake2b(digest_size=8)
    h.update(f"{side}\x1f{doc_id!r}\x1f{time!r}\x1f".encode())
    h.update(text.encode())
    return int.from_bytes(h.digest(), "little") >> 1


def opening_fit(lineage: str, newest_seen: list[int]) -> str:
    """The fit a window opened in a batch gets: the smallest newest fit any router task of the
    batch saw, among the tasks that saw a fit (every such task has it among its candidates: it
    is at least each task's floor and at most each task's newest; a task that saw none
    broadcast its documents, which meet any fit); :data:`BROADCAST` if no task saw a fit."""
    return fit_key(lineage, min((n for n in newest_seen if n > 0), default=0))


def write_fit(root: str, key: str, partitioner: Partitioner) -> None:
    publish_blob(root, f"{_FITS}/{key}.pkl", pickle.dumps(partitioner, protocol=pickle.HIGHEST_PROTOCOL))


def read_fit(root: str, key: str) -> Partitioner | None:
    blob = read_blob(root, f"{_FITS}/{key}.pkl")
    return None if blob is None else pickle.loads(blob)


def fit_path(key: str) -> str:
    return f"{_FITS}/{key}.pkl"


def start_path(lineage: str) -> str:
    return f"natural_start/{lineage}.json"


def mark_start(root: str, lineage: str, batch: int) -> None:
    """Record the first batch a lineage ran (written once, by joiner 0)."""
    if read_blob(root, start_path(lineage)) is None:
        publish_blob(root, start_path(lineage), json.dumps({"first_batch": batch}).encode())


def fresh(root: str | None, lineage: str, batch: int) -> bool:
    """Whether this lineage started with the query's first batch (a new checkpoint): only then
    can no window be open from an earlier run, and the fit of ``sample=`` be used at once."""
    if batch == 0 or root is None:
        return batch == 0
    blob = read_blob(root, start_path(lineage))
    return blob is not None and json.loads(blob)["first_batch"] == 0


@dataclass(frozen=True)
class Decision:
    """One published version of the routing table (see the module docstring).

    ``additions``: per fit key, its delta keys in the order they were assigned
    (``[attribute, value, partition]``). ``frontier``: windows below it are closed (their
    documents are late). ``low``: the lowest window a document not yet counted can fall into
    (count windows). ``fresh_only``: the table of ``sample=``, valid only in a new checkpoint.
    """

    version: int
    lineage: str
    newest: int
    floor: int
    windows: dict[int, str] = field(default_factory=dict)
    additions: dict[str, list[list[Any]]] = field(default_factory=dict)
    frontier: int | None = None
    low: int | None = None
    fresh_only: bool = False

    def range_keys(self) -> tuple[str, ...]:
        """Fits a window opened after the listing (or listed with no fit) can have when a task
        reads this decision: versions ``max(floor, 1)`` to newest, or only :data:`BROADCAST`
        before the first fit (a window is never opened with no fit by a batch in which some task
        saw one: :func:`opening_fit`)."""
        return tuple(fit_key(self.lineage, v) for v in range(max(self.floor, 1) if self.newest else 0, self.newest + 1))

    def fits(self) -> set[str]:
        """Every fit this decision names (to load, and to keep when pruning)."""
        named = set(self.range_keys()) | set(self.windows.values())
        return {k for k in named if k not in (BROADCAST, UNKNOWN)}

    def to_json(self) -> dict[str, Any]:
        return {"lineage": self.lineage, "newest": self.newest, "floor": self.floor,
                "windows": {str(w): k for w, k in self.windows.items()}, "additions": self.additions,
                "frontier": self.frontier, "low": self.low, "fresh_only": self.fresh_only}

    @staticmethod
    def from_json(doc: dict[str, Any]) -> Decision:
        return Decision(int(doc["version"]), doc["lineage"], int(doc["newest"]), int(doc["floor"]),
                        {int(w): k for w, k in doc["windows"].items()}, doc["additions"], doc["frontier"],
                        doc["low"], bool(doc["fresh_only"]))


def initial_decision(lineage: str) -> Decision:
    """The table of a fit made on ``sample=`` before the start: fit 1 for every window."""
    return Decision(0, lineage, 1, 1, fresh_only=True)


class RoutingView:
    """What one router task routes with: a decision and the fits it names (with additions)."""

    def __init__(self, lineage: str, decision: Decision | None, fits: dict[str, Partitioner], partitions: int) -> None:
        self.lineage = lineage
        self.decision = decision
        self.fits = fits
        self.full = (1 << partitions) - 1
        self._range = decision.range_keys() if decision is not None else (BROADCAST,)

    @property
    def version(self) -> int:
        return -1 if self.decision is None else self.decision.version

    @property
    def newest(self) -> int:
        return 0 if self.decision is None else self.decision.newest

    @property
    def floor(self) -> int:
        return 0 if self.decision is None else self.decision.floor

    def _listed(self, key: str) -> tuple[str, ...]:
        if key == UNKNOWN:
            return (BROADCAST,)
        if key == BROADCAST:  # it takes the opening fit of this task's batch, at the latest
            return self._range
        return (key,)

    def candidates(self, window: int | None) -> tuple[str, ...]:
        """The fits a document of ``window`` (None: not known, count windows) may be joined
        under; empty for a window the table knows to be closed (the document is late)."""
        d = self.decision
        if d is None:
            return (BROADCAST,)
        if window is None:
            out = set(self._range)
            for w, key in d.windows.items():
                if d.low is None or w >= d.low:
                    out.update(self._listed(key))
            return tuple(sorted(out))
        if d.frontier is not None and window < d.frontier:
            return ()
        key = d.windows.get(window)
        return self._range if key is None else self._listed(key)

    def route(self, key: str, doc: Document) -> tuple[int, tuple]:
        """Mask of ``doc`` under fit ``key`` and its unknown ordinary keys (delta sightings)."""
        if key == BROADCAST:
            return (self.full if doc.avps else 0), ()
        return self.fits[key].route_unknown(doc)

    def orders(self) -> dict[str, list[str]]:
        """The attribute order of each fit a window may be opened with (for the joiners)."""
        return {k: list(self.fits[k].attribute_order.attributes) for k in self._range if k != BROADCAST}


#: Fits loaded in this process: (root, key) -> [partitioner with additions, additions applied].
_FIT_CACHE: dict[tuple[str | None, str], list[Any]] = {}


def _fit(root: str | None, key: str, initial: bytes | None, initial_key: str, additions: list[list[Any]]) -> Partitioner | None:
    entry = _FIT_CACHE.get((root, key))
    if entry is None:
        if key == initial_key and initial is not None:
            part = pickle.loads(initial)
        elif root is not None:
            part = read_fit(root, key)
        else:
            part = None
        if part is None:
            return None
        entry = _FIT_CACHE[(root, key)] = [part, 0]
        while len(_FIT_CACHE) > 64:
            _FIT_CACHE.pop(next(iter(_FIT_CACHE)))
    part, applied = entry
    if len(additions) > applied:
        part.adopt({(a, v): p for a, v, p in additions[applied:]})
        entry[1] = len(additions)
    return part


def bind_decision(root: str, lineage: str, batch: int) -> None:
    """Bind the newest decision of ``lineage`` to the batches from ``batch`` on (run by the
    joiners' plan key during the batch before: :func:`driftjoin.spark.runtime.decisions.bind`)."""
    bind(root, decisions_name(lineage), batch)


def load_view(root: str | None, lineage: str, partitions: int, initial: bytes | None, batch: int | None,
              version: int | None = None, query: str | None = None) -> RoutingView:
    """The view of one router task: the decision published under ``root`` and bound to batch
    ``batch`` (None: the newest; ``root`` None: no control directory, a static join), else the
    table of ``sample=`` in a new checkpoint. ``version`` reads that decision instead (the local
    pipeline's tests give tasks of one attempt different versions); ``query``, the streaming
    query's id, keeps the binding and the decision read for the process's next tasks of the batch
    (:func:`~driftjoin.spark.runtime.decisions.read_bound`)."""
    decision = None
    if root is not None:
        name = decisions_name(lineage)
        doc = read_bound(root, name, batch, query=query) if version is None else read_version(root, name, version)
        if doc is not None:
            decision = Decision.from_json(doc)
    if decision is None and initial is not None and fresh(root, lineage, batch):
        decision = initial_decision(lineage)
    if decision is None:
        return RoutingView(lineage, None, {}, partitions)
    fits = {}
    for key in decision.fits():
        part = _fit(root, key, initial, fit_key(lineage, 1), decision.additions.get(key, []))
        if part is None:
            raise RuntimeError(f"natural_join: fit {key} named by decision {decision.version} is missing under {root}")
        fits[key] = part
    return RoutingView(lineage, decision, fits, partitions)
