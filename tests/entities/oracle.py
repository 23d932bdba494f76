"""An oracle of the entity rules written apart from driftjoin.entitygraph: every batch recomputes the
components of all links kept so far with scipy.sparse.csgraph, and names them by the rules of the
issue in plain Python (dicts and sorted(), no incremental union-find, no facts, no numpy ranks).

Records are ``(side, id)``; a batch is a list of links ``(left, right, time, left_source,
right_source)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components


def components(records: list, links: list[tuple]) -> list[set]:
    """Connected components (with at least two records) of ``links`` over ``records``."""
    pos = {r: i for i, r in enumerate(records)}
    if not links:
        return []
    a = [pos[x] for x, _ in links]
    b = [pos[y] for _, y in links]
    g = coo_matrix((np.ones(len(a)), (a, b)), shape=(len(records), len(records)))
    _, labels = connected_components(g, directed=False)
    groups: dict[int, set] = {}
    for r, lab in zip(records, labels):
        groups.setdefault(int(lab), set()).add(r)
    return [c for c in groups.values() if len(c) >= 2]


@dataclass
class Entity:
    id: object
    created: int
    founder: tuple
    last: float


@dataclass
class Oracle:
    two_sided: bool = False
    max_size: int | None = None
    one_per_source: bool = False
    expire_after: float | None = None
    links: list[tuple] = field(default_factory=list)       # applied links, as record pairs
    entity: dict = field(default_factory=dict)             # record -> Entity
    source: dict = field(default_factory=dict)             # linked record -> its source
    clock: float = float("-inf")

    def record_pair(self, link: tuple) -> tuple[tuple, tuple]:
        left, right = link[0], link[1]
        if self.two_sided:
            return (0, left), (1, right)
        a, b = sorted([left, right])
        return (0, a), (0, b)

    def ordered(self, batch: list[tuple]) -> list[tuple]:
        """Links of the batch in (time, left, right) order, each self-link of one record dropped."""
        out = []
        for link in batch:
            x, y = self.record_pair(link)
            if x == y:
                continue
            ls, rs = link[3], link[4]
            if not self.two_sided and link[0] > link[1]:
                ls, rs = rs, ls
            out.append((link[2], x[1], y[1], x, y, ls, rs))
        out.sort(key=lambda t: (t[0], t[1], t[2]))
        return out

    def _comp_of(self, links: list[tuple]) -> dict:
        records = sorted({r for pair in links for r in pair})
        out = {}
        for c in components(records, links):
            for r in c:
                out[r] = c
        return out

    def batch(self, seq: int, batch: list[tuple]) -> dict:
        """Apply one batch: returns {rows: {record: (entity, previous, kind)}, refused: [(x, y, reason)]}."""
        before = dict(self.entity)
        ordered = self.ordered(batch)
        applied_now: list[tuple] = []
        refused = []
        counted: list[tuple] = []  # (record, time) of links that are not refused and not inside one entity
        src_now: dict = {}
        with_sources = any(link[3] is not None or link[4] is not None for link in batch)
        for t, _, _, x, y, ls, rs in ordered:
            for r, s in ((x, ls), (y, rs)):
                if r not in self.source and r not in src_now:
                    src_now[r] = s if with_sources or not self.two_sided else r[0]
            if x in before and y in before and before[x] is before[y]:
                continue  # inside one entity already
            guarded = self.max_size is not None or self.one_per_source
            comp = self._comp_of(self.links + applied_now) if guarded else {}
            cx, cy = comp.get(x, {x}), comp.get(y, {y})
            if guarded and x not in cy:
                if self.max_size is not None and len(cx) + len(cy) > self.max_size:
                    refused.append((x, y, "max_size"))
                    continue
                if self.one_per_source:
                    a = {self.source.get(r, src_now.get(r)) for r in cx} - {None}
                    b = {self.source.get(r, src_now.get(r)) for r in cy} - {None}
                    if a & b:
                        refused.append((x, y, "one_per_source"))
                        continue
            applied_now.append((x, y))
            counted.append((x, t))
        self.links += applied_now
        comp = self._comp_of(self.links)
        rows = {}
        seen = set()
        for r, c in comp.items():
            if id(c) in seen:
                continue
            seen.add(id(c))
            olds = {id(before[q]): before[q] for q in c if q in before}
            times = [t for x, t in counted if x in c]
            if olds:
                survivor = min(olds.values(), key=lambda e: (e.created, e.founder))
                ent = Entity(survivor.id, survivor.created, survivor.founder,
                             max([e.last for e in olds.values()] + times))
            else:
                founder = min(c)
                ent = Entity(founder[1], seq, founder, max(times))
            for q in c:
                old = before.get(q)
                if old is None:
                    rows[q] = (ent.id, None, "joined" if olds else "new", len(c))
                    self.source.setdefault(q, src_now.get(q))
                elif old.id != ent.id:
                    rows[q] = (ent.id, old.id, "merged", len(c))
                self.entity[q] = ent
        # every record of a component shares one Entity object
        if self.expire_after is not None:
            ts = [link[0] for link in ordered]
            if ts:
                self.clock = max(self.clock, max(ts))
            frontier = self.clock - self.expire_after
            gone = {r for r, e in self.entity.items() if e.last < frontier}
            if gone:
                self.links = [(x, y) for x, y in self.links if x not in gone]
                for r in gone:
                    del self.entity[r]
                    self.source.pop(r, None)
        return {"rows": rows, "refused": refused}

    def ids(self) -> dict:
        return {r: e.id for r, e in self.entity.items()}
