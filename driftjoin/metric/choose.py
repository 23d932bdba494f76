"""Building a metric strategy by name, and ``algorithm="auto"``: the cheaper one on a sample.

Strategies by space: every space has ``"s3j"`` (:mod:`driftjoin.metric.s3j`, the paper's space
partitioning) and ``"pivots"`` (:mod:`driftjoin.metric.pivots`, pivot filtering); edit distance
also ``"passjoin"`` (:mod:`driftjoin.metric.passjoin`), Jaccard also ``"prefix"``
(:mod:`driftjoin.metric.prefix`).

A user metric (a Python callable or :func:`driftjoin.metric.spaces.user_metric`) is judged by its
calls: ``auto`` runs pivot filtering, which never computes more distances than the brute force
(its plan chooses the pivots and cells from the metric's measured cost), without estimating S3J
first (running S3J on the sample would itself cost more calls than the brute force of the sample).
For the built-in metrics ``auto`` counts work as below.

The choice counts work instead of timing it, so it is deterministic for a sample and a seed: each
candidate runs on the sample (one batch, one window) and reports the entries it stored (keys,
memberships: work linear in the records), the candidate pairs it filtered and the distances it
computed (record pairs and, for S3J, record-to-centroid distances: work quadratic in the records
at a fixed density). With ``f = expected / len(sample)`` the estimate is::

    work = ENTRY * entries * f + (CANDIDATE * candidates + DISTANCE * distances) * f^2

The weights are the rough relative costs of one unit in the cores (a distance through rapidfuzz or
a sparse product is the unit). The strategy with the least work wins; ties go to S3J.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from driftjoin.metric.base import Strategy
from driftjoin.metric.engine import MetricEngine
from driftjoin.metric.passjoin import PassJoinStrategy
from driftjoin.metric.pivots import Measured, PivotStrategy, plan_pivots
from driftjoin.metric.prefix import PrefixStrategy
from driftjoin.metric.records import MetricRecords, Values
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import CallableSpace, JaccardSpace, LevenshteinSpace, PairwiseSpace, Space
from driftjoin.windows import Windowing

ENTRY = 0.2
CANDIDATE = 0.05
DISTANCE = 1.0

#: What ``algorithm="auto"`` runs for a user metric (module docstring).
USER_METRIC_AUTO = "pivots"
USER_METRIC_REASON = ("a user metric: pivot filtering, which never computes more distances than the brute force "
                      "(algorithm='s3j' runs the paper's space partitioning)")


def strategies_for(space: Space) -> tuple[str, ...]:
    """The strategies that can join in ``space``."""
    if isinstance(space, LevenshteinSpace):
        return ("s3j", "passjoin", "pivots")
    if isinstance(space, JaccardSpace):
        return ("s3j", "prefix", "pivots")
    return ("s3j", "pivots")


def sample_free(space: Space) -> str | None:
    """The strategy of ``space`` that needs no sample (a stream without ``sample=``), if any."""
    if isinstance(space, LevenshteinSpace):
        return "passjoin"
    if isinstance(space, JaccardSpace):
        return "prefix"
    return None


def is_user_metric(space: Space) -> bool:
    return isinstance(space, (CallableSpace, PairwiseSpace))


def build_strategy(name: str, space: Space, threshold: float, n_workers: int, *, self_join: bool, windows: Windowing,
                   sample: Values | None = None, seed: int = 0, expected: int | None = None,
                   measured: Measured | None = None, reproducible: bool = False) -> Strategy:
    """The strategy ``name`` for ``space``; S3J draws its centroids from ``sample`` (prepared values),
    pivot filtering its plan (for ``expected`` records per window, default the sample's size,
    reusing the distances ``measured`` on sample values if given; ``reproducible``: a stream's plan,
    decided on counts only, see :func:`driftjoin.metric.pivots.plan_pivots`).

    Example::

        >>> sp = LevenshteinSpace()
        >>> build_strategy("passjoin", sp, 1, 4, self_join=True, windows=Windowing.unbounded()).name
        'passjoin'
    """
    allowed = strategies_for(space)
    if name not in allowed:
        raise ValueError(f"algorithm={name!r} does not apply to metric={space.name!r}; choose one of "
                         f"{', '.join(allowed)} or 'auto'")
    if name == "passjoin":
        return PassJoinStrategy(int(threshold), n_workers, self_join=self_join, windows=windows)
    if name == "prefix":
        return PrefixStrategy(threshold, n_workers, self_join=self_join, windows=windows)
    if sample is None or len(sample) == 0:
        raise ValueError(f"{'pivot filtering' if name == 'pivots' else 'S3J'} needs a sample of the values to draw "
                         f"its {'pivots' if name == 'pivots' else 'centroids'} from")
    if name == "pivots":
        plan = plan_pivots(space, threshold, sample, n_workers=n_workers, expected=expected, self_join=self_join, seed=seed,
                           measured=measured, reproducible=reproducible)
        return PivotStrategy(space, threshold, plan, self_join=self_join, windows=windows)
    return S3JStrategy(space, threshold, choose_centroids(space, sample, n_workers, seed), self_join=self_join,
                       windows=windows)


@dataclass(frozen=True)
class Estimate:
    """What a strategy did on the sample and the work it is estimated to need."""

    strategy: str
    entries: int
    candidates: int
    distances: int
    work: float


def estimate(name: str, space: Space, threshold: float, sample: Values, *, n_workers: int, expected: int | None = None,
             seed: int = 0) -> Estimate:
    """Run strategy ``name`` on ``sample`` (a self-join in one window) and count its work."""
    n = len(sample)
    strategy = build_strategy(name, space, threshold, n_workers, self_join=True, windows=Windowing.unbounded(),
                              sample=sample, seed=seed)
    eng = MetricEngine(strategy)
    eng.process(MetricRecords.of(np.arange(n), sample))
    workers = eng.workers.values()
    entries = sum(len(w.store) for w in workers)
    candidates = sum(w.stats.candidates for w in workers)
    distances = sum(w.stats.comparisons + getattr(w, "centroid_comparisons", 0) for w in workers)
    f = (expected or n) / max(n, 1)
    return Estimate(name, entries, candidates, distances, ENTRY * entries * f + (CANDIDATE * candidates + DISTANCE * distances) * f * f)


def choose(space: Space, threshold: float, sample: Values, *, n_workers: int, expected: int | None = None,
           seed: int = 0) -> tuple[str, list[Estimate]]:
    """``algorithm="auto"``: the strategy with the least estimated work on ``sample``, or for a user
    metric :data:`USER_METRIC_AUTO` with no estimate (module docstring).

    Parameters
    ----------
    space, threshold : the join's metric and threshold.
    sample : prepared values (a few thousand records of the input).
    n_workers : workers of the join.
    expected : records per window the estimate is scaled to (default: the sample's size).
    seed : S3J's centroid draw.

    Example::

        >>> import random
        >>> r, sp = random.Random(0), LevenshteinSpace()
        >>> words = sp.prepare(["".join(r.choices("abcdefghijklmnopqrstuvwxyz", k=r.randint(4, 10))) for _ in range(300)])
        >>> choose(sp, 1, words, n_workers=2)[0]
        'passjoin'
    """
    if is_user_metric(space):
        return USER_METRIC_AUTO, []
    estimates = [estimate(name, space, threshold, sample, n_workers=n_workers, expected=expected, seed=seed)
                 for name in strategies_for(space) if name != "pivots"]
    best = min(estimates, key=lambda e: e.work)  # the first (S3J) wins ties
    return best.strategy, estimates
