"""Competitor partitionings of Section VII-A: set cover (SC) and disjoint sets (DS).

Both come from Alvanaki and Michel's set-correlation tracking and work on the routing
keys of sample documents, like the association groups.

* **SC** treats the key set of each document as a set. It seeds ``m`` partitions with
  the sets that have the most uncovered (and fewest covered) keys, then assigns every
  remaining set - fewest covered and most uncovered keys first - to the partition with
  the least load and, among those, the most keys in common. Partitions may overlap, so a
  document goes to every partition sharing a key with it.
* **DS** unions all sets that share a key into connected components (disjoint sets)
  and assigns whole components to partitions with the same greedy rule as the
  association groups. Partitions never overlap.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Iterable, Sequence

from driftjoin.schemafree.association import (
    AssociationGroup,
    Key,
    Partition,
    sorted_keys,
    assign_groups,
)


def disjoint_sets(keysets: Sequence[Iterable[Key]]) -> list[AssociationGroup]:
    """Connected components of keys linked by co-occurrence in a document.

    The load of a component is the number of sample documents inside it.
    """
    parent: dict[Key, Key] = {}

    def find(key: Key) -> Key:
        root = key
        while parent[root] != root:
            root = parent[root]
        while parent[key] != root:
            parent[key], key = root, parent[key]
        return root

    docs = [list(dict.fromkeys(keys)) for keys in keysets]
    for keys in docs:
        for key in keys:
            parent.setdefault(key, key)
        for key in keys[1:]:
            a, b = find(keys[0]), find(key)
            if a != b:
                parent[b] = a
    members: dict[Key, list[Key]] = {}
    for key in parent:
        members.setdefault(find(key), []).append(key)
    load = Counter(find(keys[0]) for keys in docs if keys)
    return [AssociationGroup(sorted_keys(keys), load[root]) for root, keys in members.items()]


def disjoint_set_partitions(keysets: Sequence[Iterable[Key]], m: int) -> list[Partition]:
    """DS partitioning: disjoint sets assigned greedily by load."""
    return assign_groups(disjoint_sets(keysets), m)


def set_cover_partitions(keysets: Sequence[Iterable[Key]], m: int) -> list[Partition]:
    """SC partitioning (see the module docstring); ties broken by keys and index."""
    if m < 1:
        raise ValueError("at least one partition is needed")
    weight = Counter(sorted_keys(set(keys)) for keys in keysets)
    sets = sorted((s for s in weight if s), key=repr)
    covered: set[Key] = set()
    part_keys: list[set[Key]] = [set() for _ in range(m)]
    loads = [0.0] * m

    def counts(s: tuple[Key, ...]) -> tuple[int, int]:
        inside = sum(1 for key in s if key in covered)
        return inside, len(s) - inside

    remaining = list(range(len(sets)))
    for p in range(min(m, len(sets))):
        best = min(remaining, key=lambda i: (-counts(sets[i])[1], counts(sets[i])[0], i))
        remaining.remove(best)
        part_keys[p].update(sets[best])
        covered.update(sets[best])
        loads[p] += weight[sets[best]]
    heap = [(c, -u, i) for i in remaining for c, u in [counts(sets[i])]]
    heapq.heapify(heap)
    while heap:
        c, neg_u, i = heapq.heappop(heap)
        now_c, now_u = counts(sets[i])
        if (now_c, -now_u) != (c, neg_u):
            heapq.heappush(heap, (now_c, -now_u, i))
            continue
        chosen = min(range(m), key=lambda p: (loads[p], -len(part_keys[p].intersection(sets[i])), p))
        part_keys[chosen].update(sets[i])
        covered.update(sets[i])
        loads[chosen] += weight[sets[i]]
    return [Partition(frozenset(k), load) for k, load in zip(part_keys, loads, strict=True)]
