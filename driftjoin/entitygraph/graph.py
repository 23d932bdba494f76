"""Entities: the connected components of a stream of links, kept current batch by batch, with stable ids.

Definitions (a batch is the links of one micro-batch, numbered ``seq = 0, 1, ...``):

* The links *applied* so far form a graph over records (:mod:`driftjoin.entitygraph.links` says what a
  record is). An **entity** is a connected component of it with at least two records; a record in
  no applied link is a singleton, which is no entity and costs nothing.
* A new entity's **founder** is its smallest record ``(side, id)`` when it is created, and its
  **id** is the founder's id (in a two-sided linkage every link has a left record, so a founder
  is always a left record and ids never clash between sides). It was **created** in batch ``seq``.
* Entity ``A`` is **older** than ``B`` when ``(created, founder)`` of ``A`` is smaller: created in
  an earlier batch, or in the same batch with the smaller founder. The order is total.

What a batch does. Entities never split (links are never removed), so each component ``C`` after
batch ``b`` is the union of some entities of before ``b`` and some records new in ``b``. If ``C``
holds entities of before ``b``, it takes the id of the oldest of them (the **survivor**) and the
others are **retired**; otherwise it is a new entity, created in ``b``. So an entity keeps its id
while it grows, and a merge keeps the older id. The batch emits one row per record whose entity
id changed, and only those: ``new`` (a record of a new entity), ``joined`` (a record new to an
existing entity), ``merged`` (a record of a retired entity, with the retired id as ``previous``);
records of a survivor keep their id and get no row. By induction over the batches, a reader that
keeps each record's row of the highest ``seq`` holds every linked record's current entity id.

Why the result does not depend on how a batch's rows are ordered or split (and so a replayed
batch gives the same ids and rows): without guards, the components, the survivors (the smallest
``(created, founder)``) and the founders (the smallest record) are functions of the set of the
batch's links and the state before it. With guards, links are applied one by one in
:func:`~driftjoin.entitygraph.links.link_order` (by time, then records: a function of the set again):

* ``max_size``: a link that would join two entities (or records) into one of more than
  ``max_size`` records is **refused**: reported with the reason, not applied;
* ``one_per_source``: a link that would put two records of one source into one entity is refused
  (a record's source is that of its first link; two-sided linkages without source columns use the
  side, which makes every entity at most one left and one right record).

A refused link changes nothing; the components are those of the applied links and take their ids
by the rule above. Across batches the guards see links in batch order, so a split of the stream
into other batches can refuse other links when the stream is not in time order.

Expiry (``expire_after``, off by default). An entity is dated by ``last``: the latest time of the
links that added its records or merged it. After a batch, with ``clock`` the latest link time seen
so far, every entity whose ``last`` is before ``clock - expire_after`` leaves the state: its
records become unknown again (no row is emitted; a reader keeps their last ids). It is exact when
no later link can reach such an entity. Links of a ``within=D`` join with watermark ``W`` pair
records at most ``D`` apart, and a record later than the watermark: a future link ``(x, r)`` has
``t_x >= clock - W`` and ``t_r >= t_x - D``, while every record ``r`` of the entity has ``t_r <=
last`` (a link's time is never earlier than its records'). So ``expire_after >= W + D`` expires
only entities no later link can touch, and the state then holds the entities of the last
``W + D`` of event time. A shorter horizon still bounds state, but a link to a record that left
starts a new entity (it may reuse that record's id as its id).

Persistence (:mod:`driftjoin.entitygraph.facts`): the state is a set of immutable *facts* in a few
*runs*; a batch writes one run with what it added (its new records, entities and merges), so it
writes what changed and never the whole state; :mod:`driftjoin.entitygraph.facts` has the layout,
the compaction and why a state rebuilt from the runs equals the one kept in memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from driftjoin.entitygraph.facts import FactStore, Restored
from driftjoin.entitygraph.index import RecordIndex
from driftjoin.entitygraph.links import LinkBatch, canonical
from driftjoin.entitygraph.table import SlotTable

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd

NEW, JOINED, MERGED = "new", "joined", "merged"
#: Reasons of refused links.
MAX_SIZE, ONE_PER_SOURCE = "max_size", "one_per_source"


@dataclass(frozen=True)
class EntityRules:
    """What an entity is allowed to become (module docstring), fixed for a state's lifetime.

    ``expire_after`` is in the links' time unit (seconds on Spark)."""

    two_sided: bool = False
    max_size: int | None = None
    one_per_source: bool = False
    expire_after: float | None = None

    def __post_init__(self) -> None:
        if self.max_size is not None and (isinstance(self.max_size, bool) or int(self.max_size) < 2):
            raise ValueError(f"max_size must be an integer >= 2 (an entity has at least two records), "
                             f"got {self.max_size!r}")
        if self.expire_after is not None and not (float(self.expire_after) >= 0):
            raise ValueError(f"expire_after must be a duration >= 0, got {self.expire_after!r}")

    @property
    def guarded(self) -> bool:
        return self.max_size is not None or self.one_per_source


@dataclass
class Changes:
    """What one batch changed: one row per record whose entity id changed, and the refused links.

    Record rows: ``side``, ``record``, ``entity`` (its id now), ``previous`` (the retired id of a
    ``merged`` row, else None), ``kind``, ``size`` (the entity's records now). Refused links:
    ``refused_left`` / ``refused_right`` (ids), ``refused_entities`` (each end's entity id after the
    batch, None for a singleton), ``refused_reason``.
    """

    seq: int
    side: np.ndarray
    record: np.ndarray
    entity: np.ndarray
    previous: np.ndarray
    kind: np.ndarray
    size: np.ndarray
    refused_left: np.ndarray
    refused_right: np.ndarray
    refused_entities: tuple[np.ndarray, np.ndarray]
    refused_reason: np.ndarray
    counts: dict[str, int] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.record)



@dataclass
class _BatchGraph:
    """One batch's graph: nodes ``0..k-1`` are the old entities its links touch (``olds``: their
    slots), ``k..k+m-1`` its new records (``new_side``, ``new_id``); link ``i`` joins ``u[i]`` and
    ``v[i]``. The steps of :meth:`EntityGraph.apply` fill in the rest."""

    olds: np.ndarray
    new_side: np.ndarray
    new_id: np.ndarray
    u: np.ndarray
    v: np.ndarray
    size: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    sources: list | None = None
    new_src: np.ndarray | None = None
    labels: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    applied: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    n_labels: int = 0
    changed: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    time: np.ndarray = field(default_factory=lambda: np.zeros(0))
    node_side: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int8))
    node_id: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rep: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    #: each component's entity slot (its survivor's, or the new entity's)
    slot: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    fresh: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    retired: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))

    @property
    def k(self) -> int:
        return len(self.olds)

    @property
    def m(self) -> int:
        return len(self.new_id)

    @property
    def total(self) -> int:
        return self.k + self.m


def _py(value: object) -> object:
    """A numpy scalar as the Python value (ids in dicts and rows are plain ints and strs)."""
    return value.item() if isinstance(value, np.generic) else value


def _empty_ids(kind: np.dtype) -> np.ndarray:
    return np.zeros(0, dtype=kind)


class EntityGraph:
    """The entities of every link applied so far (module docstring), batch by batch.

    ``persist=False`` (a static input: one batch, nothing to save) skips the facts.
    ``run_cap``: the most live facts a compacted run holds (:mod:`driftjoin.entitygraph.facts`).

    Example
    -------
    >>> g = EntityGraph(EntityRules())
    >>> c = g.apply(LinkBatch([1, 3], [2, 4]))
    >>> sorted(zip(c.record.tolist(), c.entity.tolist(), c.kind.tolist()))
    [(1, 1, 'new'), (2, 1, 'new'), (3, 3, 'new'), (4, 3, 'new')]
    >>> c = g.apply(LinkBatch([2], [4]))
    >>> sorted(zip(c.record.tolist(), c.entity.tolist(), c.previous.tolist(), c.kind.tolist()))
    [(3, 1, 3, 'merged'), (4, 1, 3, 'merged')]
    """

    def __init__(self, rules: EntityRules, *, persist: bool = True, run_cap: int = 1 << 16) -> None:
        self.rules = rules
        self.persist = persist
        self.seq = -1
        self.clock = -np.inf
        self.next_eid = 0
        self.id_kind: np.dtype | None = None
        self.index: tuple[RecordIndex, RecordIndex] = (RecordIndex(np.int64), RecordIndex(np.int64))
        self.rec: SlotTable | None = None
        self.ent: SlotTable | None = None
        #: per live entity slot: the eids merged into it, its records' sources (one_per_source)
        self.tree: dict[int, list[int]] = {}
        self.sources: dict[int, set] = {}
        #: live entity eid -> slot
        self.eid_slot: dict[int, int] = {}
        self.facts = FactStore(self, run_cap)

    # ------------------------------------------------------------------ tables

    def _ensure(self, kind: np.dtype) -> None:
        kind = np.dtype(np.int64) if kind.kind in "iu" else np.dtype(object)
        if self.id_kind is None:
            self.id_kind = kind
            self.index = (RecordIndex(kind), RecordIndex(kind))
            self.rec = SlotTable({"side": np.int8, "id": kind, "ent": np.int64, "home": np.int64, "time": np.float64,
                                  "src": object, "run": np.int64})
            self.ent = SlotTable({"eid": np.int64, "created": np.int64, "fside": np.int8, "fid": kind,
                                  "size": np.int64, "last": np.float64, "erun": np.int64})
        elif kind != self.id_kind:
            held = "integer" if self.id_kind.kind == "i" else "string"
            raise TypeError(f"record ids changed type: the state holds {held} ids")

    @property
    def entity_count(self) -> int:
        return len(self.eid_slot)

    @property
    def record_count(self) -> int:
        return len(self.index[0]) + len(self.index[1])

    def largest(self) -> int:
        """The size of the largest entity (0 when there is none)."""
        if not self.eid_slot:
            return 0
        return int(self.ent["size"][np.fromiter(self.eid_slot.values(), np.int64, len(self.eid_slot))].max())

    def entity_of(self, side: int, record: object) -> object | None:
        """The entity id of a record now (None: a singleton)."""
        slot = self.index[side].get(record)
        return None if slot is None else _py(self.ent["fid"][self.rec["ent"][slot]])

    def entity_ids(self) -> dict[tuple[int, object], object]:
        """Every linked record ``(side, id)`` and its entity id."""
        out = {}
        for side in (0, 1):
            for rid, slot in self.index[side].items():
                out[(side, rid)] = _py(self.ent["fid"][self.rec["ent"][slot]])
        return out

    # ------------------------------------------------------------------ one batch

    def apply(self, batch: LinkBatch, seq: int | None = None) -> Changes:
        """Apply one batch of links; returns what changed (module docstring)."""
        seq = self.seq + 1 if seq is None else int(seq)
        links, self_links = canonical(batch, self.rules.two_sided)
        if len(links):
            self._ensure(links.left.dtype)
        if self.persist:
            self.facts.open_run()
        counts = {"links": int(len(batch)), "self_links": self_links, "internal": 0, "applied": 0, MAX_SIZE: 0,
                  ONE_PER_SOURCE: 0, "new_entities": 0, "merges": 0, "records_added": 0, "expired_entities": 0,
                  "expired_records": 0}
        kind = self.id_kind or np.dtype(np.int64)
        if not len(links):
            changes = self._no_rows(seq, kind, counts)
            self._after(seq, links, changes)
            return changes
        g = self._batch_graph(links)
        refused = self._components(g, links)
        counts["internal"] = int((g.u == g.v).sum())
        counts["applied"] = int(g.applied.sum())
        for _, reason in refused:
            counts[reason] += 1
        self._name(g, links.times())
        fresh = self._create(g, seq)
        rec_slots, joined = self._add_records(g)
        self._date_and_size(g)
        merged, previous = self._retire(g)
        counts.update(new_entities=len(fresh), records_added=len(rec_slots), merges=len(g.retired))
        changes = self._rows(seq, kind, rec_slots, joined, merged, previous, counts)
        if refused:
            self._refused_rows(changes, links, refused)
        self._sort_rows(changes)
        self._after(seq, links, changes)
        return changes

    def _batch_graph(self, links: LinkBatch) -> _BatchGraph:
        """The batch's graph: one node per entity a link touches and per new record, one edge per link."""
        n = len(links)
        two = self.rules.two_sided
        kind = self.id_kind
        right_side = 1 if two else 0
        end_side = np.concatenate([np.zeros(n, np.int8), np.full(n, right_side, np.int8)])
        end_id = np.concatenate([links.left, links.right])
        end_rec = np.concatenate([self.index[0].lookup(links.left), self.index[right_side].lookup(links.right)])
        old = end_rec >= 0
        end_ent = self.rec["ent"][end_rec[old]]
        olds = np.unique(end_ent)
        k = len(olds)
        node = np.empty(2 * n, np.int64)
        node[old] = np.searchsorted(olds, end_ent)
        new_side, new_id = [np.zeros(0, np.int8)], [_empty_ids(kind)]
        m = 0
        for s in ((0, 1) if two else (0,)):
            sel = ~old & (end_side == s)
            if sel.any():
                codes, uniq = pd.factorize(end_id[sel])
                node[sel] = k + m + codes
                new_side.append(np.full(len(uniq), s, np.int8))
                new_id.append(np.asarray(uniq, dtype=kind))
                m += len(uniq)
        g = _BatchGraph(olds, np.concatenate(new_side), np.concatenate(new_id), node[:n], node[n:])
        ent = self.ent
        g.size = np.concatenate([ent["size"][olds], np.ones(m, np.int64)])
        if self.rules.one_per_source:
            g.sources, g.new_src = self._node_sources(links, g)
        return g

    def _components(self, g: _BatchGraph, links: LinkBatch) -> list[tuple[int, str]]:
        """Labels of the batch graph's components after its links (guards: one by one in order)."""
        if self.rules.guarded:
            g.labels, g.applied, refused = self._union_guarded(g.u, g.v, g.size, g.sources, g.total)
            return refused
        g.labels, g.applied = self._union(g.u, g.v, g.total)
        return []

    def _name(self, g: _BatchGraph, times: np.ndarray) -> None:
        """Each component's time (its links', module docstring) and representative: its oldest
        entity (created, founder side, founder id), else its smallest new record."""
        ent, k, m, labels = self.ent, g.k, g.m, g.labels
        g.n_labels = int(labels.max()) + 1
        g.changed = np.bincount(labels, minlength=g.n_labels) >= 2
        g.time = np.full(g.n_labels, -np.inf)
        np.maximum.at(g.time, labels[g.u[g.applied]], times[g.applied])
        node_kind = np.concatenate([np.zeros(k, np.int8), np.ones(m, np.int8)])
        node_created = np.concatenate([ent["created"][g.olds], np.zeros(m, np.int64)])
        g.node_side = np.concatenate([ent["fside"][g.olds], g.new_side])
        g.node_id = np.concatenate([ent["fid"][g.olds], g.new_id])
        order = np.lexsort((g.node_id, g.node_side, node_created, node_kind, labels))
        first = np.ones(g.total, dtype=bool)
        first[1:] = labels[order][1:] != labels[order][:-1]
        g.rep = np.full(g.n_labels, -1, np.int64)
        g.rep[labels[order[first]]] = order[first]
        g.slot = np.full(g.n_labels, -1, np.int64)
        old_rep = g.changed & (g.rep >= 0) & (g.rep < k)
        g.slot[old_rep] = g.olds[g.rep[old_rep]]

    def _create(self, g: _BatchGraph, seq: int) -> np.ndarray:
        """New entities for the changed components without an old one, numbered in founder order."""
        fresh = np.nonzero(g.changed & (g.rep >= g.k))[0]
        fresh = fresh[np.lexsort((g.node_id[g.rep[fresh]], g.node_side[g.rep[fresh]]))]
        g.fresh = fresh
        if not len(fresh):
            return fresh
        ent = self.ent
        slots = ent.alloc(len(fresh))
        g.slot[fresh] = slots
        founders = g.rep[fresh] - g.k
        eids = np.arange(self.next_eid, self.next_eid + len(slots), dtype=np.int64)
        self.next_eid += len(slots)
        ent["eid"][slots] = eids
        ent["created"][slots] = seq
        ent["fside"][slots] = g.new_side[founders]
        ent["fid"][slots] = g.new_id[founders]
        ent["erun"][slots] = -1
        self.eid_slot.update(zip(eids.tolist(), slots.tolist()))
        if self.rules.one_per_source:
            self.sources.update((s, set()) for s in slots.tolist())
        if self.persist:
            self.facts.add_entities(slots)
        return fresh

    def _add_records(self, g: _BatchGraph) -> tuple[np.ndarray, np.ndarray]:
        """The new records of changed components join their entity: their slots, and which joined
        an entity that existed before (the others are in a new one)."""
        new_nodes = np.arange(g.k, g.total)
        joining = new_nodes[g.changed[g.labels[new_nodes]]]
        if not len(joining):
            return np.zeros(0, np.int64), np.zeros(0, bool)
        rec, ent = self.rec, self.ent
        slots = rec.alloc(len(joining))
        j = joining - g.k
        lab = g.labels[joining]
        target = g.slot[lab]
        rec["side"][slots] = g.new_side[j]
        rec["id"][slots] = g.new_id[j]
        rec["ent"][slots] = target
        rec["home"][slots] = ent["eid"][target]
        rec["time"][slots] = g.time[lab]
        rec["src"][slots] = None if g.new_src is None else g.new_src[j]
        for s in ((0, 1) if self.rules.two_sided else (0,)):
            on = g.new_side[j] == s
            self.index[s].insert(g.new_id[j][on], slots[on])
        if self.rules.one_per_source:
            for t_slot, src in zip(target.tolist(), rec["src"][slots].tolist()):
                if src is not None:
                    self.sources[t_slot].add(src)
        if self.persist:
            self.facts.add_records(slots)
        return slots, np.isin(lab, g.fresh, invert=True)

    def _date_and_size(self, g: _BatchGraph) -> None:
        """Size and date of every changed entity (before retiring: the old entities' values are read)."""
        ent = self.ent
        node_last = np.concatenate([ent["last"][g.olds], np.full(g.m, -np.inf)])
        last = g.time.copy()
        np.maximum.at(last, g.labels, node_last)
        lab = np.nonzero(g.changed)[0]
        size = np.bincount(g.labels, weights=g.size, minlength=g.n_labels)
        ent["size"][g.slot[lab]] = size[lab].astype(np.int64)
        ent["last"][g.slot[lab]] = last[lab]

    def _retire(self, g: _BatchGraph) -> tuple[np.ndarray, np.ndarray]:
        """Every old entity of a changed component but its oldest is retired into it; returns the
        records that moved and the ids they had."""
        ent, rec = self.ent, self.rec
        nodes = np.arange(g.k)
        g.retired = nodes[g.changed[g.labels[nodes]] & (g.rep[g.labels[nodes]] != nodes)]
        if not len(g.retired):
            return np.zeros(0, np.int64), np.zeros(0, object)
        retired_slots = g.olds[g.retired]
        moved = np.nonzero(np.isin(rec["ent"][: rec.high], retired_slots))[0]  # one scan of the records
        was = rec["ent"][moved]
        previous = ent["fid"][was].astype(object)
        into = np.empty(ent.high, np.int64)
        into[retired_slots] = g.slot[g.labels[g.retired]]
        rec["ent"][moved] = into[was]
        for x in g.retired[np.argsort(g.labels[g.retired], kind="stable")].tolist():
            survivor, xs = int(g.slot[g.labels[x]]), int(g.olds[x])
            x_eid = int(ent["eid"][xs])
            self.tree.setdefault(survivor, []).extend([x_eid, *self.tree.pop(xs, ())])
            if self.rules.one_per_source:
                self.sources[survivor] |= self.sources.pop(xs)
            del self.eid_slot[x_eid]
            if self.persist:
                self.facts.merge(xs, survivor, float(g.time[g.labels[x]]))
            ent["erun"][xs] = -1
            ent.release([xs])
        return moved, previous

    def _rows(self, seq: int, kind: np.dtype, added: np.ndarray, joined: np.ndarray, merged: np.ndarray,
              previous: np.ndarray, counts: dict[str, int]) -> Changes:
        rec, ent = self.rec, self.ent
        slots = np.concatenate([added, merged])
        nothing = np.zeros(0, object)
        return Changes(
            seq=seq, side=rec["side"][slots], record=rec["id"][slots], entity=ent["fid"][rec["ent"][slots]],
            previous=np.concatenate([np.full(len(added), None, dtype=object), previous]),
            kind=np.concatenate([np.where(joined, JOINED, NEW).astype(object), np.full(len(merged), MERGED, dtype=object)]),
            size=ent["size"][rec["ent"][slots]], refused_left=_empty_ids(kind), refused_right=_empty_ids(kind),
            refused_entities=(nothing, nothing), refused_reason=nothing, counts=counts)

    def _refused_rows(self, changes: Changes, links: LinkBatch, refused: list[tuple[int, str]]) -> None:
        idx = np.asarray([i for i, _ in refused], np.int64)
        right_side = 1 if self.rules.two_sided else 0
        changes.refused_left = links.left[idx]
        changes.refused_right = links.right[idx]
        changes.refused_reason = np.asarray([r for _, r in refused], dtype=object)
        changes.refused_entities = (
            np.asarray([self.entity_of(0, x) for x in links.left[idx].tolist()], dtype=object),
            np.asarray([self.entity_of(right_side, x) for x in links.right[idx].tolist()], dtype=object))

    def _no_rows(self, seq: int, kind: np.dtype, counts: dict[str, int]) -> Changes:
        e = _empty_ids(kind)
        return Changes(seq, np.zeros(0, np.int8), e, e.copy(), np.zeros(0, object), np.zeros(0, object),
                       np.zeros(0, np.int64), e.copy(), e.copy(), (np.zeros(0, object), np.zeros(0, object)),
                       np.zeros(0, object), counts)

    @staticmethod
    def _sort_rows(c: Changes) -> None:
        if len(c.record) > 1:
            order = np.lexsort((c.record, c.side))
            for name in ("side", "record", "entity", "previous", "kind", "size"):
                setattr(c, name, getattr(c, name)[order])

    def _after(self, seq: int, links: LinkBatch, changes: Changes) -> None:
        """Clock, expiry and the facts' housekeeping that close a batch."""
        self.seq = seq
        if links.time is not None and len(links):
            self.clock = max(self.clock, float(np.max(links.time)))
        if self.rules.expire_after is not None and np.isfinite(self.clock) and self.eid_slot:
            frontier = self.clock - self.rules.expire_after
            slots = np.fromiter(self.eid_slot.values(), np.int64, len(self.eid_slot))
            gone = slots[self.ent["last"][slots] < frontier]
            if len(gone):
                changes.counts["expired_records"] = self._expire(gone)
            changes.counts["expired_entities"] = int(len(gone))
        if self.persist:
            self.facts.settle()

    def _expire(self, slots: np.ndarray) -> int:
        """Drop entities and their records from the state; returns their number of records."""
        ent, rec = self.ent, self.rec
        mem = np.nonzero(np.isin(rec["ent"][: rec.high], slots))[0]
        owner = rec["ent"][mem]
        order = np.argsort(owner, kind="stable")
        sorted_owner = owner[order]
        bounds = np.flatnonzero(np.r_[True, sorted_owner[1:] != sorted_owner[:-1], True]).tolist()
        grouped = mem[order].tolist()
        members = {t: grouped[a:b] for a, b, t in zip(bounds[:-1], bounds[1:], sorted_owner[bounds[:-1]].tolist())}
        for slot in sorted(slots.tolist(), key=lambda x: int(ent["eid"][x])):
            tree = self.tree.pop(slot, [])
            self.sources.pop(slot, None)
            if self.persist:
                self.facts.expire(slot, members.get(slot, []), tree)
            del self.eid_slot[int(ent["eid"][slot])]
        sides = rec["side"][mem]
        for s in (0, 1):
            self.index[s].remove(rec["id"][mem][sides == s])
        rec["src"][mem] = None
        rec["run"][mem] = -1
        rec["ent"][mem] = -1
        rec.release(mem)
        ent["erun"][slots] = -1
        ent.release(slots)
        return len(mem)

    # ------------------------------------------------------------------ union

    @staticmethod
    def _union(u: np.ndarray, v: np.ndarray, total: int) -> tuple[np.ndarray, np.ndarray]:
        from scipy.sparse import coo_matrix
        from scipy.sparse.csgraph import connected_components

        applied = u != v
        graph = coo_matrix((np.ones(int(applied.sum()), np.int8), (u[applied], v[applied])), shape=(total, total))
        _, labels = connected_components(graph.tocsr(), directed=False)
        return labels.astype(np.int64), applied

    def _union_guarded(self, u: np.ndarray, v: np.ndarray, size: np.ndarray, src: list | None,
                       total: int) -> tuple[np.ndarray, np.ndarray, list[tuple[int, str]]]:
        """Links one by one in order; a link that breaks a guard is refused (module docstring)."""
        parent = list(range(total))
        sizes = size.tolist()
        sets = None if src is None else [set() if s is None else set(s) for s in src]
        cap = self.rules.max_size

        def find(x: int) -> int:
            root = x
            while parent[root] != root:
                root = parent[root]
            while parent[x] != root:
                parent[x], x = root, parent[x]
            return root

        applied = u != v
        refused: list[tuple[int, str]] = []
        for i, (a, b) in enumerate(zip(u.tolist(), v.tolist())):
            ra, rb = find(a), find(b)
            if ra == rb:
                continue
            if cap is not None and sizes[ra] + sizes[rb] > cap:
                refused.append((i, MAX_SIZE))
                applied[i] = False
                continue
            if sets is not None and not sets[ra].isdisjoint(sets[rb]):
                refused.append((i, ONE_PER_SOURCE))
                applied[i] = False
                continue
            if sizes[ra] < sizes[rb]:
                ra, rb = rb, ra
            parent[rb] = ra
            sizes[ra] += sizes[rb]
            if sets is not None:
                sets[ra] |= sets[rb]
                sets[rb] = set()
        roots = np.fromiter((find(x) for x in range(total)), np.int64, total)
        return np.unique(roots, return_inverse=True)[1].reshape(-1).astype(np.int64), applied, refused

    def _node_sources(self, links: LinkBatch, g: _BatchGraph) -> tuple[list, np.ndarray]:
        """The sources of each node (an old entity's set, a new record's source as a set) and each
        new record's source: that of its first link in order, or without source columns its side in
        a two-sided linkage (None: no source, which never clashes)."""
        out: list = [self.sources[int(s)] for s in g.olds.tolist()]
        raw = np.empty(g.m, dtype=object)
        if links.left_source is None or links.right_source is None:
            if self.rules.two_sided:
                raw[:] = g.new_side.tolist()
        else:
            ends = np.column_stack([g.u, g.v]).ravel()
            srcs = np.column_stack([links.left_source, links.right_source]).ravel()
            nodes, first = np.unique(ends, return_index=True)
            chosen = dict(zip(nodes.tolist(), srcs[first].tolist()))
            raw[:] = [chosen[x] for x in range(g.k, g.total)]
        return out + [set() if x is None else {x} for x in raw.tolist()], raw

    # ------------------------------------------------------------------ restore

    @staticmethod
    def restore(rules: EntityRules, runs: list[tuple[int, dict]], *, seq: int, clock: float, next_eid: int,
                run_cap: int = 1 << 16) -> EntityGraph:
        """The graph whose state the facts of ``runs`` (``(label, payload)`` in write order) hold."""
        g = EntityGraph(rules, run_cap=run_cap)
        g.seq, g.clock, g.next_eid = seq, clock, next_eid
        state: Restored = g.facts.restore(runs)
        if state.kind is None:
            return g
        g._ensure(state.kind)
        ent, rec = g.ent, g.rec
        n_e = len(state.ent_eid)
        slots = ent.alloc(n_e)
        ent["eid"][slots] = state.ent_eid
        ent["created"][slots] = state.ent_created
        ent["fside"][slots] = state.ent_fside
        ent["fid"][slots] = state.ent_fid
        ent["erun"][slots] = state.ent_run
        ent["size"][slots] = 0
        ent["last"][slots] = -np.inf
        g.eid_slot = dict(zip(state.ent_eid.tolist(), slots.tolist()))
        n_r = len(state.rec_id)
        rslots = rec.alloc(n_r)
        by_eid = np.argsort(state.ent_eid)
        target = slots[by_eid[np.searchsorted(state.ent_eid[by_eid], state.rec_root)]] if n_r else np.zeros(0, np.int64)
        rec["side"][rslots] = state.rec_side
        rec["id"][rslots] = state.rec_id
        rec["ent"][rslots] = target
        rec["home"][rslots] = state.rec_home
        rec["time"][rslots] = state.rec_time
        rec["src"][rslots] = state.rec_src
        rec["run"][rslots] = state.rec_run
        g.index = tuple(RecordIndex(state.kind, state.rec_id[state.rec_side == s], rslots[state.rec_side == s])
                        for s in (0, 1))
        if rules.one_per_source:
            g.sources = {t: set() for t in slots.tolist()}
            for t_slot, src in zip(target.tolist(), state.rec_src.tolist()):
                if src is not None:
                    g.sources[t_slot].add(src)
        if n_r:
            np.add.at(ent["size"], target, 1)
            np.maximum.at(ent["last"], target, state.rec_time)
        if len(state.merged_eid):
            m_slot = slots[by_eid[np.searchsorted(state.ent_eid[by_eid], state.merged_root)]]
            np.maximum.at(ent["last"], m_slot, state.merged_time)
            order = np.argsort(m_slot, kind="stable")
            sorted_slot = m_slot[order]
            bounds = np.flatnonzero(np.r_[True, sorted_slot[1:] != sorted_slot[:-1], True]).tolist()
            merged = state.merged_eid[order].tolist()
            for a, b, t_slot in zip(bounds[:-1], bounds[1:], sorted_slot[bounds[:-1]].tolist()):
                g.tree[t_slot] = merged[a:b]
        g.facts.attach(rslots)
        return g
