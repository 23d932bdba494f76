"""Driver-side routing: Partition Creators, Merger and Assigner (Sections III, IV, VI-A).

A :class:`Partitioner` is fitted on a sample of documents (the Partition Creators run
on disjoint slices of it, the Merger consolidates), then routes each document to the
joiners whose partitions share a routing key with it.

Routing rule (exact by construction): a known key ``k`` maps to the set of partitions
holding it (one for AG and DS, possibly several for SC). A document goes to the union
of these sets over its keys. It goes to **all** joiners when one of its keys is unknown
(never seen in the sample and seen fewer than ``delta`` times since) or when a partial
expansion prefix matches no known synthetic key. Any two joinable documents share a
pair; if its key is known both reach every partition holding it, otherwise at least one
of them was broadcast - either way they meet at one joiner or more.

Incremental update (Section VI-A): the Assigner counts occurrences of unknown keys;
once a key has been seen ``delta`` times it joins the partition with the least load, and
later documents with it are routed normally. Keys are never moved or removed between
fits, so a pair's meeting point cannot be lost inside a window. The update also runs in
two halves for a control plane that decides apart from the routers: :meth:`route_unknown`
reports the unknown keys a routed document carried, :meth:`sightings` counts such reports
and assigns the keys that reached ``delta``, and :meth:`adopt` gives those assignments to
the routers' copies of the fit. Any router may lag behind the assignments (a document with
a key it does not know yet is broadcast), so the rule above stays exact.

Value partitioning (``"value"``, :mod:`~driftjoin.schemafree.valuepart`, an improvement on
the paper kept beside it): the fit chooses a set ``S`` of attributes from the sample and routes
a document carrying all of ``S`` to one joiner by a hash of its ``S``-values, any other to all
joiners; it has no keys, so no delta keys either. When the sample offers no ``S`` that divides
the work, the fit is the paper's association groups (:attr:`Partitioner.value` is then None).

Repartitioning: the fit records replication and maximal processing load of the sample
under the new partitions; when a window exceeds either by more than a factor
``1 + theta``, :meth:`Partitioner.needs_repartition` says so and the driver refits.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal

from driftjoin.schemafree.association import (
    AssociationGroup,
    Key,
    Partition,
    assign_groups,
    association_groups,
    merge_association_groups,
)
from driftjoin.schemafree.baselines import disjoint_set_partitions, set_cover_partitions
from driftjoin.schemafree.document import Document
from driftjoin.schemafree.expansion import AttributeExpansion, Prefix, plan_expansion
from driftjoin.schemafree.fptree import AttributeOrder
from driftjoin.schemafree.metrics import routing_quality
from driftjoin.schemafree.valuepart import ValuePartitioning, choose_value_partitioning

PartitionerName = Literal["ag", "sc", "ds", "value"]
PARTITIONER_NAMES: tuple[str, ...] = ("ag", "sc", "ds", "value")


def mask_targets(mask: int) -> list[int]:
    """Joiner ids of a bit mask, ascending."""
    targets = []
    while mask:
        low = mask & -mask
        targets.append(low.bit_length() - 1)
        mask ^= low
    return targets


class Partitioner:
    """Partitions for ``partitions`` joiners by association groups, a baseline or values.

    ``method``: ``"ag"`` (association groups), ``"sc"`` (set cover), ``"ds"`` (disjoint
    sets) or ``"value"`` (value partitioning, else AG). ``creators`` Partition Creators share the sample (AG only; the
    Merger combines their groups). ``expand`` enables attribute expansion.
    """

    #: The value partitioning of the current fit (``"value"`` only; None: keys route). A class
    #: attribute too, so fits pickled before value partitioning existed load unchanged.
    value: ValuePartitioning | None = None

    def __init__(
        self,
        partitions: int,
        method: PartitionerName = "ag",
        *,
        delta: int = 3,
        theta: float = 0.2,
        creators: int = 1,
        expand: bool = True,
    ) -> None:
        if partitions < 1:
            raise ValueError("at least one partition is needed")
        if method not in PARTITIONER_NAMES:
            raise ValueError(f"unknown partitioner {method!r}; use 'ag', 'sc', 'ds' or 'value'")
        if delta < 1 or creators < 1 or theta < 0:
            raise ValueError("delta and creators must be positive, theta non-negative")
        self.partitions = partitions
        self.method = method
        self.delta = delta
        self.theta = theta
        self.creators = creators
        self.expand = expand
        self.expansion = AttributeExpansion()
        self.attribute_order = AttributeOrder()
        self.fits = 0
        self.baseline_replication = 0.0
        self.baseline_max_load = 0.0
        self._all = (1 << partitions) - 1
        self._homes: dict[Key, int] = {}
        self._prefix_homes: list[dict[Prefix, int]] = []
        self._loads = [0.0] * partitions
        self._unseen: Counter[Key] = Counter()
        self.value = None

    @property
    def repartitions(self) -> int:
        """Number of fits after the first one."""
        return max(self.fits - 1, 0)

    @property
    def fitted(self) -> bool:
        """Whether partitions exist (before the first fit everything is broadcast)."""
        return self.fits > 0

    def fit(self, sample: Sequence[Document]) -> list[Partition]:
        """Compute partitions, attribute order and quality baseline from ``sample`` (a value
        fit has no partitions: the list is empty)."""
        avps = [doc.avps for doc in sample]
        self.value = choose_value_partitioning(avps, self.partitions) if self.method == "value" else None
        if self.value is not None:
            self.expansion = AttributeExpansion()
            partitions = []
        else:
            self.expansion = plan_expansion(avps, self.partitions) if self.expand else AttributeExpansion()
            keysets = []
            for doc_avps in avps:
                routing = self.expansion.routing_keys(doc_avps)
                keysets.append(routing.keys + routing.synthetic)
            partitions = self._partition(keysets)
        self._homes = {}
        for index, partition in enumerate(partitions):
            for key in partition.keys:
                self._homes[key] = self._homes.get(key, 0) | (1 << index)
        self._prefix_homes = [{} for _ in self.expansion.chains]
        for index, chain in enumerate(self.expansion.chains):
            for key, mask in self._homes.items():
                if isinstance(key, tuple) and key[0] == chain.name:
                    values = key[1]
                    for length in range(len(values)):
                        prefix = values[:length]
                        self._prefix_homes[index][prefix] = self._prefix_homes[index].get(prefix, 0) | mask
        self._loads = [p.load for p in partitions] if partitions else [0.0] * self.partitions
        self._unseen = Counter()
        self.attribute_order = AttributeOrder.from_sample(avps)
        self.fits += 1
        loads = [0] * self.partitions
        for doc in sample:
            for target in mask_targets(self.route_mask(doc)):
                loads[target] += 1
        self.baseline_replication, self.baseline_max_load, _ = routing_quality(loads, len(sample))
        return partitions

    @property
    def kind(self) -> str:
        """What routes the current fit: ``"value(a,b)"`` or the method of keys (``"ag"`` also for
        a value partitioner that fell back to association groups)."""
        if self.value is not None:
            return self.value.describe()
        return "ag" if self.method == "value" else self.method

    def _partition(self, keysets: list[tuple[Key, ...]]) -> list[Partition]:
        m = self.partitions
        if self.method == "sc":
            return set_cover_partitions(keysets, m)
        if self.method == "ds":
            return disjoint_set_partitions(keysets, m)
        # "ag", and "value" when no set of attributes divides the work
        if self.creators == 1:
            return assign_groups(association_groups(keysets), m)
        size = -(-len(keysets) // self.creators)
        local: list[list[AssociationGroup]] = [
            association_groups(keysets[start : start + size]) for start in range(0, len(keysets), size)
        ]
        return assign_groups(merge_association_groups(local), m)

    def route_mask(self, doc: Document) -> int:
        """Bit mask of the joiners ``doc`` must reach (pure: no state change)."""
        if not self.fitted:
            return self._all if doc.avps else 0
        if self.value is not None:
            return self.value.mask(doc.avps)
        routing = self.expansion.routing_keys(doc.avps)
        mask = 0
        for key in routing.keys + routing.synthetic:
            home = self._homes.get(key)
            if home is None:
                return self._all
            mask |= home
        for chain, prefix in routing.partial:
            home = self._prefix_homes[chain].get(prefix, 0)
            if not home:
                return self._all
            mask |= home
        return mask

    def route_unknown(self, doc: Document) -> tuple[int, tuple[Key, ...]]:
        """:meth:`route_mask` and the ordinary keys of ``doc`` that have no home (the
        sightings :meth:`sightings` counts; empty when the partitioner is not fitted)."""
        mask = self.route_mask(doc)
        if not self.fitted or mask != self._all or self.value is not None:
            return mask, ()
        unknown = tuple(key for key in self.expansion.routing_keys(doc.avps).keys if key not in self._homes)
        return mask, unknown

    def route(self, doc: Document) -> list[int]:
        """Joiner ids ``doc`` must reach, ascending (empty for an empty document)."""
        return mask_targets(self.route_mask(doc))

    def observe(self, docs: Iterable[Document]) -> None:
        """Assigner update: count unknown ordinary keys, add those seen ``delta`` times.

        A key joins the partition with the least estimated load (ties: lowest index).
        Synthetic keys are never added here (see :mod:`~driftjoin.schemafree.expansion`).
        """
        if not self.fitted or self.value is not None:
            return
        for doc in docs:
            for key in self.expansion.routing_keys(doc.avps).keys:
                if key not in self._homes:
                    self._sight(key, 1)

    def _sight(self, key: Key, count: int) -> int | None:
        """Count ``count`` more sightings of an unknown ``key``; its partition once assigned."""
        self._unseen[key] += count
        seen = self._unseen[key]
        if seen < self.delta:
            return None
        target = min(range(self.partitions), key=lambda p: (self._loads[p], p))
        self._homes[key] = 1 << target
        self._loads[target] += seen
        del self._unseen[key]
        return target

    def sightings(self, counts: Mapping[Key, int]) -> dict[Key, int]:
        """The control plane's half of :meth:`observe`: add counted sightings of unknown keys
        (keys in ascending ``repr`` order, so the result does not depend on hashing) and return
        the keys that reached ``delta`` with the partition each now belongs to."""
        assigned: dict[Key, int] = {}
        if not self.fitted or self.value is not None:
            return assigned
        for key in sorted(counts, key=repr):
            if key in self._homes or counts[key] <= 0:
                continue
            target = self._sight(key, int(counts[key]))
            if target is not None:
                assigned[key] = target
        return assigned

    def adopt(self, assigned: Mapping[Key, int]) -> None:
        """The routers' half: take assignments made by :meth:`sightings` on another copy of
        this fit (a key with a home already keeps it: homes never move within a fit)."""
        for key, target in assigned.items():
            if key not in self._homes:
                if not 0 <= target < self.partitions:
                    raise ValueError(f"partition {target} of key {key!r} is not one of {self.partitions}")
                self._homes[key] = 1 << target
                self._unseen.pop(key, None)

    def assign(self, doc: Document) -> int:
        """Assigner step for one document: :meth:`observe` it, then :meth:`route_mask`."""
        self.observe((doc,))
        return self.route_mask(doc)

    def needs_repartition(self, replication: float, max_load: float) -> bool:
        """Whether a window's replication or maximal load grew by more than ``theta``."""
        if not self.fitted:
            return True
        factor = 1.0 + self.theta
        return replication > self.baseline_replication * factor or max_load > self.baseline_max_load * factor
