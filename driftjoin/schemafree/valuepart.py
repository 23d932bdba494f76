"""Exact value partitioning: a document goes to one joiner by the values of a set of attributes.

The paper's partitioners (association groups, set cover, disjoint sets) route by *keys*: a
document reaches every joiner holding one of its attribute-value pairs. When most documents
carry pairs of several partitions (a ubiquitous ``Success: true`` next to a user and a server)
nearly every document reaches nearly every joiner, and adding joiners adds no throughput. This
module routes by *values* instead, an improvement on the paper kept beside it
(``partitioner="value"``; the paper's AG stays the fallback and the other choices).

**The rule.** For a set ``S`` of attributes (flattened paths, :mod:`~driftjoin.schemafree.
document`), a document that carries every attribute of ``S`` (*full*) goes to the one joiner
``hash(its S-values) mod p``; a document missing one (*partial*; null is absent) goes to every
joiner; an empty document goes nowhere (it joins nothing).

**Why it is exact.** Two documents join when they share an attribute and agree on every
attribute they share. Two joinable full documents share all of ``S``, so they agree on it, so
they hash alike and meet at one joiner; a partial document meets a full one at the full one's
joiner, and two partial documents meet at every joiner. The joiners' reporting rule (the pair
belongs to the lowest joiner both were sent to, :func:`~driftjoin.schemafree.joiner.owner`)
then reports full-full and partial-full pairs where they meet and partial-partial pairs at
joiner 0 only, from the masks alone, so no duplicate and no joiner change is needed. Nothing
depends on the values being scalars: after flattening every value is atomic (a scalar or an
array as canonical JSON, compared as text), and an attribute that is a nested object in some
document is simply absent there (that document is partial). The hash (BLAKE2b of the canonical
values) is the same in every process; a collision only costs balance, never a pair.

**Choosing S** (:func:`choose_value_partitioning`, at fit time on the control plane's sample):
the candidates are the attributes present in at least ``presence`` of the sample's documents.
Greedily, the candidate whose addition gives the smallest *expected* maximal processing load
(the paper's measure: the largest share of documents one joiner receives, broadcast documents
counted at every joiner) is added, while it lowers it by more than 1 % and ``S`` has fewer than
``max_attributes``. The expectation is over the hash, so that it does not reward a lucky split
of a few values: with ``q`` the share of partial documents and ``s_i`` the shares of the
``S``-value combinations, a joiner expects ``q + (1 - q) / p`` and deviates by about
``sqrt(sum s_i^2 (1/p)(1 - 1/p))`` (the load is a sum of independent placements); the estimate
is the mean plus two such deviations. Fewer partial documents and more, smaller combinations
both lower it. ``S`` is taken when the sample's actual maximal load under it is at most
``slack / p``; otherwise there is no such ``S`` and the caller falls back to the paper's
partitioning.
"""

from __future__ import annotations

import hashlib
import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from driftjoin.schemafree.document import Attribute, Value

#: Attributes present in at least this share of the sample may be in ``S``.
PRESENCE = 0.95
#: At most this many attributes in ``S``.
MAX_ATTRIBUTES = 4
#: ``S`` is taken when the sample's maximal processing load under it is at most ``SLACK / p``.
SLACK = 1.5
#: An attribute joins ``S`` only if it lowers the expected maximal load by more than this factor.
GAIN = 0.99


def value_hash(values: Sequence[Value]) -> int:
    """Stable hash of canonical values: 64 bits of BLAKE2b (CRC-32 spread similar values badly
    over a power of two of joiners). NUL cannot occur in canonical JSON text."""
    return int.from_bytes(hashlib.blake2b("\x00".join(values).encode("utf-8"), digest_size=8).digest(), "little")


@dataclass(frozen=True, slots=True)
class ValuePartitioning:
    """Route by the values of ``attributes`` (``S``, sorted) over ``partitions`` joiners."""

    attributes: tuple[Attribute, ...]
    partitions: int

    def home(self, avps: Mapping[Attribute, Value]) -> int | None:
        """The one joiner of a document carrying all of ``S``; None for a partial document."""
        values = []
        for attr in self.attributes:
            value = avps.get(attr)
            if value is None:
                return None
            values.append(value)
        return value_hash(values) % self.partitions

    def mask(self, avps: Mapping[Attribute, Value]) -> int:
        """Bit mask of the joiners a document goes to: its home, every joiner, or none (empty)."""
        if not avps:
            return 0
        home = self.home(avps)
        return (1 << self.partitions) - 1 if home is None else 1 << home

    def max_load(self, sample: Sequence[Mapping[Attribute, Value]]) -> float:
        """Largest share of ``sample``'s non-empty documents one joiner receives."""
        return _max_load([self.home(d) for d in sample if d], self.partitions)

    def expected_max_load(self, sample: Sequence[Mapping[Attribute, Value]]) -> float:
        """The maximal load a random hash would give ``sample``'s non-empty documents: mean
        plus two standard deviations of one joiner's load (module docstring)."""
        docs = [d for d in sample if d]
        if not docs:
            return 0.0
        combos: Counter[tuple[Value, ...]] = Counter()
        partial = 0
        for doc in docs:
            values = tuple(doc.get(a) for a in self.attributes)
            if None in values:
                partial += 1
            else:
                combos[values] += 1  # type: ignore[index]
        n, p = len(docs), self.partitions
        q = partial / n
        squares = sum((c / n) ** 2 for c in combos.values())
        return q + (1 - q) / p + 2 * math.sqrt(squares * (1 / p) * (1 - 1 / p))

    def describe(self) -> str:
        return "value(" + ",".join(self.attributes) + ")"


def _max_load(homes: Sequence[int | None], partitions: int) -> float:
    if not homes:
        return 0.0
    loads = [0] * partitions
    partial = 0
    for home in homes:
        if home is None:
            partial += 1
        else:
            loads[home] += 1
    return (partial + max(loads)) / len(homes)


def choose_value_partitioning(
    sample: Sequence[Mapping[Attribute, Value]],
    partitions: int,
    *,
    presence: float = PRESENCE,
    max_attributes: int = MAX_ATTRIBUTES,
    slack: float = SLACK,
) -> ValuePartitioning | None:
    """``S`` for ``partitions`` joiners from a sample (module docstring), or None if none fits."""
    if partitions < 1:
        raise ValueError("at least one partition is needed")
    docs = [d for d in sample if d]
    if not docs:
        return None
    counts: dict[Attribute, int] = {}
    for doc in docs:
        for attr in doc:
            counts[attr] = counts.get(attr, 0) + 1
    candidates = sorted(a for a, c in counts.items() if c >= presence * len(docs))
    best = ValuePartitioning((), partitions)
    expected = best.expected_max_load(docs)
    while len(best.attributes) < max_attributes:
        trials = [ValuePartitioning(tuple(sorted([*best.attributes, a])), partitions)
                  for a in candidates if a not in best.attributes]
        if not trials:
            break
        trial_expected, _, trial = min((t.expected_max_load(docs), t.attributes, t) for t in trials)
        if not trial_expected < expected * GAIN:
            break
        best, expected = trial, trial_expected
    return best if best.max_load(docs) <= slack / partitions else None
