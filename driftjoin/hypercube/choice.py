"""The start-time choice of ``equi_join(algorithm="auto")``: Spark's own join while no key is heavy, SHC otherwise.

Streaming HyperCube (Qiu, Papadias, Yi; EDBT 2019, section 3.2) treats a join key ``b`` apart
only when it is *heavy*: ``N(b) = |R(b)| + |S(b)|`` above ``(1/p - epsilon/2) N`` (the promotion
rule of :class:`~driftjoin.hypercube.heavy.HeavyHitterTracker`, at the join's ``p`` workers and
``epsilon``, with ``min_heavy``). A light key goes to the one worker its hash names, so with no
heavy key SHC splits the work as a partitioned hash join does, which is what Spark's own
shuffle join does in the JVM, without a Python routing stage and a Python stateful stage per
micro-batch (docs/equi_join.md measures both). The choice counts the keys of a sample (of a
static input: the input itself), applies SHC's promotion rule to the exact counts (the tracker
applies it to estimates that are at most ``epsilon N / 2`` low), and picks Spark's own join when
no key is heavy, SHC when one is.

The choice is made once, before the query starts, and kept with its checkpoint: a stream whose
keys become skewed later stays on Spark's join (exact, only slower), since Spark's join state
cannot be carried into SHC's. An empty sample says nothing about skew: SHC, which is never
badly off, is chosen.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from fractions import Fraction

from driftjoin.hypercube.model import Side

#: The two engines ``algorithm="auto"`` chooses between.
SPARK = "spark"
SHC = "shc"


@dataclass(frozen=True)
class EngineChoice:
    """What ``algorithm="auto"`` chose, and on what: the heavy keys found (largest first) among
    ``tuples`` counted tuples."""

    algorithm: str
    heavy: tuple[Hashable, ...]
    tuples: int

    def reason(self) -> str:
        """One line for the log: what was chosen and why."""
        if self.tuples == 0:
            return "SHC: the sample is empty, so its skew is unknown"
        if self.algorithm == SHC:
            return f"SHC: {len(self.heavy)} of the keys are heavy in {self.tuples:,} tuples"
        return f"Spark's own join: no key is heavy in {self.tuples:,} tuples"


def choose_engine(counts: Mapping[tuple[Side, Hashable], int], totals: Mapping[Side, int], p: int, *,
                  epsilon: float | None = None, min_heavy: int = 1) -> EngineChoice:
    """Spark's own join or SHC for a join at ``p`` workers, from the counted keys of a sample.

    Parameters
    ----------
    counts:
        ``(side, key) -> tuples`` of the sample, for every key that may be heavy (keys of at most
        :func:`~driftjoin.hypercube.heavy.promotion_threshold` tuples may be left out).
        Compared in exact arithmetic (``epsilon`` as the float it is).
    totals:
        ``side -> tuples`` of the whole sample.
    p, epsilon, min_heavy:
        The join's workers and SHC's settings (:class:`~driftjoin.hypercube.heavy.HeavyHitterTracker`;
        ``epsilon`` defaults to ``1/(2p)``).

    Returns
    -------
    EngineChoice
        ``"spark"`` when no key is heavy, else ``"shc"`` with the heavy keys.

    Examples
    --------
    >>> choose_engine({(Side.R, 1): 5, (Side.S, 1): 5}, {Side.R: 50, Side.S: 50}, 4).algorithm
    'spark'
    >>> choose_engine({(Side.R, 1): 30, (Side.S, 1): 5}, {Side.R: 50, Side.S: 50}, 4).heavy
    (1,)
    """
    n = sum(totals.values())
    if n == 0:
        return EngineChoice(SHC, (), 0)
    per_key: dict[Hashable, int] = {}
    for (_, key), m in counts.items():
        per_key[key] = per_key.get(key, 0) + m
    eps = Fraction(1, 2 * p) if epsilon is None else Fraction(epsilon)
    floor = (Fraction(1, p) - eps / 2) * n  # exact: a key on the line is light here as in the paper
    heavy = sorted((k for k, m in per_key.items() if m > floor and m >= min_heavy), key=lambda k: (-per_key[k], repr(k)))
    return EngineChoice(SHC if heavy else SPARK, tuple(heavy), n)
