"""Attribute expansion for low value variety (Section VI-B).

An attribute that appears in *all* sample documents but has fewer distinct values than
the ``m`` partitions (e.g. a Boolean) caps scalability: each of its attribute-value
pairs is one routing key carrying a large share of the documents. Such a *disabling
attribute* is concatenated with *combining attributes* - the next attribute in most
documents with the fewest distinct values, repeatedly, skipping one that adds no new
value combination - until the synthetic attribute
has at least ``m`` distinct values. An :class:`ExpansionChain` records that choice.

Routing with a chain (this is what keeps the join exact):

* the attribute-value pairs of the chain's *disabled* attributes are not routing keys;
  instead a document holding one of them is routed by the chain;
* a document with all chain attributes gets the synthetic key
  ``(chain.name, (v1, ..., vk))``, an ordinary routing key;
* a document missing a chain attribute has only a *prefix* ``(v1, ..., vi)`` (values up
  to the first missing attribute) and goes to every joiner holding a known synthetic key
  extending it - or to all joiners if there is none. (The paper sends every such
  document to all joiners; the prefix rule is a refinement with the same guarantee.)

Why exact: two joinable documents that share only disabled pairs agree on every chain
attribute they both have, so the shorter prefix is a prefix of the longer one and every
known key extending the longer also extends the shorter; their target sets intersect.
This needs the set of known synthetic keys to stay fixed between two fits, so synthetic
keys are never added by the incremental (delta) update.

Disabled attributes are the disabling attribute plus every combining attribute that is
itself ubiquitous with fewer than ``m`` values; each attribute is disabled in at most one
chain.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from driftjoin.schemafree.association import Key
from driftjoin.schemafree.document import Attribute, Value

Prefix = tuple[Value, ...]

MAX_CHAIN = 4
"""At most this many attributes are concatenated; longer chains leave too few documents
with a complete synthetic value."""


@dataclass(frozen=True, slots=True)
class ExpansionChain:
    """Disabling attribute followed by its combining attributes."""

    attributes: tuple[Attribute, ...]
    disabled: frozenset[Attribute]

    @property
    def name(self) -> str:
        """Synthetic attribute name; the NUL prefix never occurs in a document."""
        return "\x00" + "+".join(self.attributes)

    def prefix(self, avps: Mapping[Attribute, Value]) -> Prefix:
        """Values of the chain attributes up to the first one ``avps`` lacks."""
        values: list[Value] = []
        for attr in self.attributes:
            value = avps.get(attr)
            if value is None:
                break
            values.append(value)
        return tuple(values)

    def key(self, values: Prefix) -> Key:
        """Synthetic routing key of a complete value tuple."""
        return (self.name, values)


@dataclass(frozen=True, slots=True)
class RoutingKeys:
    """How one document is routed: ordinary keys plus partial chain prefixes."""

    keys: tuple[Key, ...]
    synthetic: tuple[Key, ...]
    partial: tuple[tuple[int, Prefix], ...]


@dataclass(frozen=True, slots=True)
class AttributeExpansion:
    """The chains in force; an empty expansion routes by plain attribute-value pairs."""

    chains: tuple[ExpansionChain, ...] = ()
    _chain_of: Mapping[Attribute, int] = field(default_factory=dict)

    @classmethod
    def of(cls, chains: Sequence[ExpansionChain]) -> AttributeExpansion:
        """Expansion with the given chains (their disabled sets must be disjoint)."""
        chain_of: dict[Attribute, int] = {}
        for index, chain in enumerate(chains):
            for attr in chain.disabled:
                if attr in chain_of:
                    raise ValueError(f"attribute {attr!r} is disabled in two chains")
                chain_of[attr] = index
        return cls(tuple(chains), chain_of)

    def routing_keys(self, avps: Mapping[Attribute, Value]) -> RoutingKeys:
        """Split a document's pairs into ordinary keys, synthetic keys and prefixes."""
        keys: list[Key] = []
        touched: set[int] = set()
        for attr, value in avps.items():
            chain = self._chain_of.get(attr)
            if chain is None:
                keys.append((attr, value))
            else:
                touched.add(chain)
        synthetic: list[Key] = []
        partial: list[tuple[int, Prefix]] = []
        for index in sorted(touched):
            chain = self.chains[index]
            prefix = chain.prefix(avps)
            if len(prefix) == len(chain.attributes):
                synthetic.append(chain.key(prefix))
            else:
                partial.append((index, prefix))
        return RoutingKeys(tuple(keys), tuple(synthetic), tuple(partial))


def plan_expansion(sample: Sequence[Mapping[Attribute, Value]], m: int) -> AttributeExpansion:
    """Choose disabling and combining attributes from a sample for ``m`` partitions."""
    if not sample:
        return AttributeExpansion()
    doc_count: Counter[Attribute] = Counter()
    values: dict[Attribute, set[Value]] = {}
    for avps in sample:
        for attr, value in avps.items():
            doc_count[attr] += 1
            values.setdefault(attr, set()).add(value)
    n = len(sample)

    def low_variety(attr: Attribute) -> bool:
        return doc_count[attr] == n and len(values[attr]) < m

    disabling = sorted((a for a in doc_count if low_variety(a)), key=lambda a: (len(values[a]), a))
    combining_order = sorted(doc_count, key=lambda a: (-doc_count[a], len(values[a]), a))
    disabled_somewhere: set[Attribute] = set()
    chains: list[ExpansionChain] = []
    for attr in disabling:
        if attr in disabled_somewhere:
            continue
        chain = [attr]
        variety = len(values[attr])
        for candidate in combining_order:
            if variety >= m or len(chain) == MAX_CHAIN:
                break
            if candidate in chain or candidate in disabled_somewhere:
                continue
            grown = _variety(sample, [*chain, candidate])
            if grown > variety:
                chain.append(candidate)
                variety = grown
        if len(chain) == 1:
            continue
        disabled = frozenset(a for a in chain if a == attr or low_variety(a))
        disabled_somewhere |= disabled
        chains.append(ExpansionChain(tuple(chain), disabled))
    return AttributeExpansion.of(chains)


def _variety(sample: Sequence[Mapping[Attribute, Value]], chain: list[Attribute]) -> int:
    """Distinct value tuples of ``chain`` among sample documents having all of it."""
    tuples = {tuple(avps[a] for a in chain) for avps in sample if all(a in avps for a in chain)}
    return len(tuples)
