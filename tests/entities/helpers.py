"""Running the entity core batch by batch with its facts written to a dict, as the Spark state layer
writes them to chunks (pickled, labelled, removed by label), and rebuilt from there."""

from __future__ import annotations

import pickle

from driftjoin.entitygraph import EntityGraph, EntityRules, LinkBatch


class Store:
    """Chunks in write order, as :class:`driftjoin.spark.runtime.state.Chunks` keeps them."""

    def __init__(self) -> None:
        self.chunks: dict[int, bytes] = {}
        self.order: list[int] = []
        self.next = 1
        self.written = 0

    def save(self, g: EntityGraph) -> None:
        for label in g.facts.take_dropped():
            self.order.remove(label)
            del self.chunks[label]
        for rid, payload in g.facts.unwritten():
            blob = pickle.dumps(payload)
            self.written += len(blob)
            label, self.next = self.next, self.next + 1
            self.chunks[label] = blob
            self.order.append(label)
            g.facts.written(rid, label)

    def restore(self, g: EntityGraph) -> EntityGraph:
        runs = [(label, pickle.loads(self.chunks[label])) for label in self.order]
        return EntityGraph.restore(g.rules, runs, seq=g.seq, clock=g.clock, next_eid=g.next_eid, run_cap=g.facts.cap)


def as_batch(links: list[tuple]) -> LinkBatch:
    """Oracle links ``(left, right, time, left_source, right_source)`` as the core's input."""
    with_src = any(link[3] is not None or link[4] is not None for link in links)
    return LinkBatch([x[0] for x in links], [x[1] for x in links], [float(x[2]) for x in links],
                     [x[3] for x in links] if with_src else None, [x[4] for x in links] if with_src else None)


def rows_of(changes) -> dict:
    """The core's record rows as {(side, id): (entity, previous, kind, size)}."""
    out = {}
    for s, r, e, p, k, n in zip(changes.side.tolist(), changes.record.tolist(), changes.entity.tolist(),
                                changes.previous.tolist(), changes.kind.tolist(), changes.size.tolist()):
        key = (s, r)
        assert key not in out, f"two rows for {key} in one batch"
        out[key] = (e, p, k, n)
    return out


def refused_of(changes, two_sided: bool) -> list:
    right = 1 if two_sided else 0
    return sorted(((0, a), (right, b), why) for a, b, why in zip(changes.refused_left.tolist(),
                                                                 changes.refused_right.tolist(),
                                                                 changes.refused_reason.tolist()))


def rules_of(oracle) -> EntityRules:
    return EntityRules(oracle.two_sided, oracle.max_size, oracle.one_per_source, oracle.expire_after)
