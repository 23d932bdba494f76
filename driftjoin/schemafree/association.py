"""Partitioning based on association groups (Section IV, Algorithm 1) and the Merger.

A *routing key* is an attribute-value pair (or a synthetic one made by attribute
expansion). Keys that occur in exactly the same set of sample documents form an
*equivalence group* (Definition 1). An equivalence group ``eg_i`` *implies* ``eg_j``
when every document holding ``eg_i`` also holds ``eg_j`` while ``eg_j`` also occurs
without ``eg_i`` (Definition 2), i.e. ``docs(eg_i)`` is a strict subset of
``docs(eg_j)``. Algorithm 1 folds implied equivalence groups into *association groups*:
non-overlapping key sets whose *load* is the number of sample documents that contain
any of their keys. Groups go to the ``m`` partitions greedily by load (heaviest group
to the lightest partition), which :func:`assign_groups` implements.

When several Partition Creators run Algorithm 1 on disjoint samples, the Merger
(:func:`merge_association_groups`) consolidates their groups: subsets are merged into
their supersets, then a key found in two groups stays only in the smaller one.
"""

from __future__ import annotations

import heapq
from collections.abc import Hashable, Iterable, Sequence
from dataclasses import dataclass

Key = Hashable


@dataclass(frozen=True, slots=True)
class EquivalenceGroup:
    """Keys that appear in exactly the same sample documents ``docs``."""

    keys: tuple[Key, ...]
    docs: frozenset[int]


@dataclass(frozen=True, slots=True)
class AssociationGroup:
    """Non-overlapping set of routing keys with its load (documents touching it)."""

    keys: tuple[Key, ...]
    load: float


@dataclass(frozen=True, slots=True)
class Partition:
    """Routing keys assigned to one joiner and the estimated load they bring."""

    keys: frozenset[Key]
    load: float


def sorted_keys(keys: Iterable[Key]) -> tuple[Key, ...]:
    """Keys in a hash-independent order (by their repr)."""
    return tuple(sorted(keys, key=repr))


def equivalence_groups(keysets: Sequence[Iterable[Key]]) -> list[EquivalenceGroup]:
    """Group keys by the set of documents they occur in (``avInD``, Alg. 1 line 1).

    The result is sorted ascending by the number of documents (Alg. 1 line 3), ties
    by keys, so the order never depends on hashing.
    """
    docs_of: dict[Key, list[int]] = {}
    for index, keys in enumerate(keysets):
        for key in set(keys):
            docs_of.setdefault(key, []).append(index)
    by_docs: dict[frozenset[int], list[Key]] = {}
    for key, docs in docs_of.items():
        by_docs.setdefault(frozenset(docs), []).append(key)
    groups = [EquivalenceGroup(sorted_keys(keys), docs) for docs, keys in by_docs.items()]
    groups.sort(key=lambda g: (len(g.docs), repr(g.keys)))
    return groups


def association_groups(keysets: Sequence[Iterable[Key]]) -> list[AssociationGroup]:
    """Algorithm 1: association groups of the sample documents ``keysets``.

    For each not yet absorbed equivalence group ``EG[i]`` (ascending by size), every
    later ``EG[j]`` that it implies is absorbed into ``ag_i`` and removed from ``EG``.
    Only groups sharing a document with ``EG[i]`` can be implied, so candidates come
    from one document of ``EG[i]`` instead of a scan over all groups.
    """
    groups = equivalence_groups(keysets)
    groups_of_doc: dict[int, list[int]] = {}
    for position, group in enumerate(groups):
        for doc in group.docs:
            groups_of_doc.setdefault(doc, []).append(position)
    removed = [False] * len(groups)
    result: list[AssociationGroup] = []
    for i, group in enumerate(groups):
        if removed[i]:
            continue
        keys = list(group.keys)
        covered = set(group.docs)
        pivot = min(group.docs, key=lambda d: (len(groups_of_doc[d]), d))
        for j in groups_of_doc[pivot]:  # ascending positions
            if j > i and not removed[j] and group.docs < groups[j].docs:
                keys.extend(groups[j].keys)
                covered |= groups[j].docs
                removed[j] = True
        result.append(AssociationGroup(sorted_keys(keys), len(covered)))
    return result


def merge_association_groups(
    local_groups: Sequence[Sequence[AssociationGroup]],
) -> list[AssociationGroup]:
    """The Merger: consolidate association groups from several Partition Creators.

    1. A group that is a subset of another group is merged into it (its load added;
       loads are estimates because creators saw disjoint samples).
    2. A key that is part of several groups is removed from all but the group with
       the fewest keys (ties: the group kept first).
    Empty groups are dropped. The result is non-overlapping, sorted by descending load.
    """
    pending = [g for groups in local_groups for g in groups]
    pending.sort(key=lambda g: (-len(g.keys), repr(g.keys)))
    kept_keys: list[set[Key]] = []
    kept_load: list[float] = []
    holders: dict[Key, list[int]] = {}
    for group in pending:
        keyset = set(group.keys)
        candidates = holders.get(group.keys[0], []) if group.keys else []
        target = next((h for h in candidates if keyset <= kept_keys[h]), None)
        if target is not None:
            kept_load[target] += group.load
            continue
        index = len(kept_keys)
        kept_keys.append(keyset)
        kept_load.append(group.load)
        for key in group.keys:
            holders.setdefault(key, []).append(index)
    sizes = [len(keys) for keys in kept_keys]
    for key, owners in holders.items():
        if len(owners) > 1:
            keep = min(owners, key=lambda h: (sizes[h], h))
            for h in owners:
                if h != keep:
                    kept_keys[h].discard(key)
    merged = [
        AssociationGroup(sorted_keys(keys), load)
        for keys, load in zip(kept_keys, kept_load, strict=True)
        if keys
    ]
    merged.sort(key=lambda g: (-g.load, repr(g.keys)))
    return merged


def assign_groups(groups: Sequence[AssociationGroup], m: int) -> list[Partition]:
    """Greedy assignment: the heaviest remaining group goes to the lightest partition.

    The first ``m`` groups therefore seed the ``m`` partitions. Ties are broken by the
    group's keys and the partition index, so the result is deterministic.
    """
    if m < 1:
        raise ValueError("at least one partition is needed")
    keys: list[set[Key]] = [set() for _ in range(m)]
    loads = [0.0] * m
    heap = [(0.0, p) for p in range(m)]
    for group in sorted(groups, key=lambda g: (-g.load, repr(g.keys))):
        load, p = heapq.heappop(heap)
        keys[p].update(group.keys)
        loads[p] = load + group.load
        heapq.heappush(heap, (loads[p], p))
    return [Partition(frozenset(k), load) for k, load in zip(keys, loads, strict=True)]
