"""Well-behaved set similarity functions (SWOOP Definition 4.1, Table 2).

A similarity ``set_sim(r, s)`` is *well-behaved* when it can be written as
``sim(l_r, l_s, o)`` of the two set sizes and their overlap ``o = |r & s|`` with

1. ``sim(l_r, l_s, 0) == 0``,
2. ``sim(l_r, l_s, o) == sim(l_s, l_r, o)``,
3. ``sim`` non-decreasing in ``o`` for fixed sizes,
4. ``sim`` non-decreasing in ``o = l_s`` (``s`` a subset of ``r``) for fixed ``l_r``,
5. a function ``overlap(l_r, l_s, tau)``: the minimum overlap with ``sim >= tau``.

SWOOP needs two bounds from it: the positional upper bound ``ub(l_r, rho)`` (Theorem 5.1,
section 5.2) and ``overlap`` to verify a pre-candidate against the skyband lower bound
(Algorithm 4, line 11).

Exact comparisons. SWOOP ranks pairs (stock order, ties broken by end time and arrival,
:mod:`~driftjoin.swoop.pairs`), prunes them against the k-th similarity (``lb``), crops lists
against the positional bound (``ub``) and verifies overlaps against ``overlap(l_r, l_s, lb)``; all
of it compares similarities as floats. These decisions are exactly those of the exact values:

* *Rounding is monotone.* Every ``sim`` is a chain of correctly rounded operations applied to an
  exact rational function of the integers ``(l_r, l_s, o)`` (Jaccard ``o / (l_r + l_s - o)`` and
  Dice ``2o / (l_r + l_s)`` one division of exact integers, Hamming ``1 / (1 + d)``, Overlap the
  integer itself, Cosine ``sqrt(o*o / (l_r*l_s))``: one division, then a square root), so exact
  ``x <= y`` gives float ``x <= y``, and equal exact values are the same float.
* *Rounding is injective on the values that occur.* A set has at most :attr:`~WellBehavedSimilarity.max_size`
  tokens. For Jaccard, Dice and Hamming two distinct values are fractions with denominators at
  most ``U = 2 * max_size + 1 <= 2^26`` (a union, a sum of sizes, ``1 + d``), so they differ by at
  least ``1 / U^2 > 2^-52``, while each float is within ``2^-53`` of its value (values in
  ``[0, 1]``): distinct exact values are distinct floats, in the same order. Overlap is an exact
  integer. Cosine: distinct squared values ``o^2 / (l_r l_s)`` differ by at least
  ``1 / max_size^4``, i.e. their square roots differ relatively by at least ``1 / (2 max_size^4)``,
  while the computed cosine errs relatively by at most ``1.5 * 2^-53`` (one rounding of the
  division, halved by the square root, one of the root); with ``max_size = 2^12`` the gap,
  ``2^-49``, exceeds the two errors, ``3 * 2^-53``, five times. Hence Cosine joins sets of at
  most 4096 tokens (``Cosine.max_size``), the others sets of at most
  :data:`~driftjoin.swoop.records.MAX_SET_SIZE` (``2^25``); a larger set is refused
  (:class:`~driftjoin.swoop.records.InvalidSetError`, a dead letter in the Spark operator).

So the float order *is* the exact order: ties are exact ties (then end time and arrival decide,
identically in SWOOP, Base and the partitioned merge), ``lb`` is the exact k-th similarity, and
``sim < lb``, ``lb > ub``, ``o >= overlap(...)`` hold of the floats exactly when they hold of the
exact values. ``overlap`` starts from the closed form of Table 2 and then steps to the true
minimum *of the float function*, so ``o >= overlap(...)`` holds exactly when
``sim(l_r, l_s, o) >= tau``. A user-defined similarity must give the same guarantees for the
sizes it accepts (its ``max_size``).

Vectorised twin. ``sim_array`` evaluates the same float operations on numpy arrays (IEEE 754
division and square root are correctly rounded in numpy as in Python), so it returns
bit-identical values; the candidate generation uses it when a new set has many pre-candidates.

Hamming. Table 2 lists the Hamming *distance* ``d = l_r + l_s - 2o``, which decreases with the
overlap and is not 0 for disjoint sets, so as printed it violates properties 1 and 3. We rank by
ascending distance among pairs that share at least one token (Definition 1, condition 4) via the
similarity ``1 / (1 + d)`` for ``o > 0`` and ``0`` for ``o == 0``. Its ``overlap`` is Table 2's
``(l_r + l_s - tau' + 1) / 2`` with the distance bound ``tau' = 1 / tau``.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable

import numpy as np

from driftjoin.swoop.records import MAX_SET_SIZE


def least_overlap(accepts: Callable[[int], bool], estimate: float, top: int) -> int:
    """The smallest overlap ``o`` in ``[0, top]`` that ``accepts`` (a predicate non-decreasing in
    ``o``), or ``top + 1`` when none does; a walk from a closed-form ``estimate`` to the boundary,
    so the answer is exact for the float predicate itself (shared with the metric join's Jaccard
    bounds, :mod:`driftjoin.metric.prefix`)."""
    o = top + 1 if estimate > top else max(0, math.ceil(estimate))
    while o > 0 and accepts(o - 1):
        o -= 1
    while o <= top and not accepts(o):
        o += 1
    return o


class WellBehavedSimilarity(ABC):
    """A well-behaved similarity (Definition 4.1): ``sim(l_r, l_s, o)`` plus ``overlap``."""

    name: str = ""
    #: largest set (distinct tokens) whose similarities the floats rank exactly (module docstring)
    max_size: int = MAX_SET_SIZE

    def __init__(self) -> None:
        self._ub_profiles: dict[int, tuple[float, ...]] = {}

    @abstractmethod
    def sim(self, l_r: int, l_s: int, o: int) -> float:
        """Similarity of two sets of sizes ``l_r``, ``l_s`` that share ``o`` tokens."""

    @abstractmethod
    def _overlap_estimate(self, l_r: int, l_s: int, tau: float) -> float:
        """Table 2's closed form for the required overlap (a real number, >= 0 for tau > 0)."""

    def overlap(self, l_r: int, l_s: int, tau: float) -> int:
        """Minimum overlap ``o`` with ``sim(l_r, l_s, o) >= tau`` (property 5).

        Returns ``min(l_r, l_s) + 1`` when no feasible overlap reaches ``tau`` and ``0`` when
        ``tau <= 0``. Exact with respect to the float ``sim``: the Table 2 estimate is only the
        starting point of a short walk to the boundary (``sim`` is monotone in ``o``).
        """
        if tau <= 0:
            return 0
        sim = self.sim
        return least_overlap(lambda o: sim(l_r, l_s, o) >= tau, self._overlap_estimate(l_r, l_s, tau), min(l_r, l_s))

    @abstractmethod
    def sim_array(self, l_r: int, l_s: np.ndarray, o: np.ndarray) -> np.ndarray:
        """``sim`` over int64 arrays of sizes and overlaps, bit-identical to the scalar one."""

    def set_sim(self, r: frozenset[object], s: frozenset[object]) -> float:
        """``set_sim(r, s)`` computed from the sets themselves."""
        return self.sim(len(r), len(s), len(r & s))

    def ub(self, l_r: int, rho: int) -> float:
        """Positional upper bound ``ub(l_r, rho) = sim(l_r, l_r - rho + 1, l_r - rho + 1)``.

        A set first met in the ``rho``-th inverted list of ``r`` (1-based) misses at least
        ``rho - 1`` tokens of ``r``, so its similarity to ``r`` is at most this (Theorem 5.1).
        """
        rest = l_r - rho + 1
        return self.sim(l_r, rest, rest)

    def ub_profile(self, l_r: int) -> tuple[float, ...]:
        """``(ub(l_r, 1), ..., ub(l_r, l_r))``, cached per set size (it is used per new set)."""
        profile = self._ub_profiles.get(l_r)
        if profile is None:
            profile = tuple(self.ub(l_r, rho) for rho in range(1, l_r + 1))
            self._ub_profiles[l_r] = profile
        return profile

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class Jaccard(WellBehavedSimilarity):
    """``|r & s| / |r | s|`` = ``o / (l_r + l_s - o)``."""

    name = "jaccard"

    def sim(self, l_r: int, l_s: int, o: int) -> float:
        return o / (l_r + l_s - o)

    def _overlap_estimate(self, l_r: int, l_s: int, tau: float) -> float:
        return tau / (1.0 + tau) * (l_r + l_s)

    def sim_array(self, l_r: int, l_s: np.ndarray, o: np.ndarray) -> np.ndarray:
        return o / (l_r + l_s - o)



class Cosine(WellBehavedSimilarity):
    """``|r & s| / sqrt(|r| * |s|)``, computed as ``sqrt(o*o / (l_r*l_s))`` (module docstring).
    Sets of at most 4096 tokens: beyond, float64 cannot tell every two distinct cosines apart."""

    name = "cosine"
    max_size = 1 << 12

    def sim(self, l_r: int, l_s: int, o: int) -> float:
        return math.sqrt(o * o / (l_r * l_s))

    def _overlap_estimate(self, l_r: int, l_s: int, tau: float) -> float:
        return tau * math.sqrt(l_r * l_s)

    def sim_array(self, l_r: int, l_s: np.ndarray, o: np.ndarray) -> np.ndarray:
        return np.sqrt(o * o / (l_r * l_s))



class Dice(WellBehavedSimilarity):
    """``2 |r & s| / (|r| + |s|)``."""

    name = "dice"

    def sim(self, l_r: int, l_s: int, o: int) -> float:
        return 2 * o / (l_r + l_s)

    def _overlap_estimate(self, l_r: int, l_s: int, tau: float) -> float:
        return tau * (l_r + l_s) / 2.0

    def sim_array(self, l_r: int, l_s: np.ndarray, o: np.ndarray) -> np.ndarray:
        return 2 * o / (l_r + l_s)



class Overlap(WellBehavedSimilarity):
    """``|r & s|`` (as a float, so all similarities share one type)."""

    name = "overlap"

    def sim(self, l_r: int, l_s: int, o: int) -> float:
        return float(o)

    def _overlap_estimate(self, l_r: int, l_s: int, tau: float) -> float:
        return tau

    def sim_array(self, l_r: int, l_s: np.ndarray, o: np.ndarray) -> np.ndarray:
        return o.astype(np.float64)



class Hamming(WellBehavedSimilarity):
    """Ascending Hamming distance ``d = l_r + l_s - 2o`` as the similarity ``1 / (1 + d)``.

    Zero for disjoint sets (see the module docstring for why Table 2's distance is wrapped).
    """

    name = "hamming"

    def sim(self, l_r: int, l_s: int, o: int) -> float:
        return 1.0 / (1 + l_r + l_s - 2 * o) if o else 0.0

    @staticmethod
    def distance(l_r: int, l_s: int, o: int) -> int:
        """The Hamming distance ``|(r | s) - (r & s)|`` itself."""
        return l_r + l_s - 2 * o

    def _overlap_estimate(self, l_r: int, l_s: int, tau: float) -> float:
        return max(1.0, (l_r + l_s - 1.0 / tau + 1.0) / 2.0)

    def sim_array(self, l_r: int, l_s: np.ndarray, o: np.ndarray) -> np.ndarray:
        return np.where(o > 0, 1.0 / (1 + l_r + l_s - 2 * o), 0.0)



JACCARD = Jaccard()
COSINE = Cosine()
DICE = Dice()
OVERLAP = Overlap()
HAMMING = Hamming()

SIMILARITIES: dict[str, WellBehavedSimilarity] = {
    f.name: f for f in (JACCARD, COSINE, DICE, OVERLAP, HAMMING)
}


def get_similarity(similarity: str | WellBehavedSimilarity) -> WellBehavedSimilarity:
    """Resolve a similarity given by name (``"jaccard"``, ...) or as an instance."""
    if isinstance(similarity, WellBehavedSimilarity):
        return similarity
    if isinstance(similarity, str) and similarity.lower() in SIMILARITIES:
        return SIMILARITIES[similarity.lower()]
    raise ValueError(
        f"unknown similarity {similarity!r}: expected one of {sorted(SIMILARITIES)} "
        "or a WellBehavedSimilarity instance"
    )
