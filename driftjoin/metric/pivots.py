"""Pivot filtering: an exact metric join that never computes more distances than the brute force.

Made for metrics whose every distance is expensive (a user's Python function): S3J
(:mod:`driftjoin.metric.s3j`) measures each record against every centroid and every workset
centroid, which for short strings at a small threshold costs more calls than comparing all pairs.
Here the unit of cost is the distance call, and every call the join makes is the distance of a
pair of records it would otherwise have to compare.

**Pivots** (LAESA: Micó, Oncina and Vidal 1994). For any value ``p`` of a metric space, the
triangle inequality gives ``|d(x, p) - d(y, p)| <= d(x, y)``: with each record's distances to
``k`` pivots, a pair whose distances to some pivot differ by more than ``t`` cannot join, and is
excluded without calling the metric. The lower bound is the Chebyshev distance of the two records'
pivot vectors, so the candidates are the pairs of vectors within ``t`` of each other, found by a
compiled scan (:mod:`driftjoin.metric.pivotscan`) over runs kept sorted by the first coordinate.
A pair passes when no pivot's difference exceeds ``t + BOUND_SLACK * (1 + t + d(x, p) + d(y, p))``
(rounding never drops a pair); acceptance is always the space's own test ``d(x, y) <= t``
(:meth:`driftjoin.metric.spaces.Space.le`, as the oracle decides it).

**Exact spaces** (edit distance, Jaccard: :attr:`~driftjoin.metric.spaces.Space.exact`). There the
threshold is the number the user wrote (``0.3`` is ``3/10``, :mod:`driftjoin.metric.exact`) and a
pair joins when its exact distance is at most it; acceptance is that exact test. The pivot bound
is decided on floats and stays a sound filter for it: every distance reaches the bound as the
float nearest its exact value (an integer, or one correctly rounded division), so a computed
difference ``|d(x, p) - d(y, p)|`` of distances at most 1 (Jaccard) is within ``3 * 2^-53`` of the
exact one, the float of the threshold within ``2^-53`` of the number written, and the slack
(``1e-9``) exceeds both: a pair within the exact threshold is never excluded (the triangle
inequality holds exactly for the exact distances). Edit distances are integers, exact as floats.
A pair whose exact difference exceeds the threshold by less than the slack is let through and
verified exactly, like every candidate; so the join's pairs are the exact definition's.

**Plan** (:func:`plan_pivots`, once before the start, from a sample of the input). ``m`` distinct
sample values (at most :data:`SAMPLE_MAX`, and few enough that their ``m(m-1)/2`` distances stay
under :data:`PLAN_SHARE` of the expected pairs; all the values of a user metric's triangle check,
whose distances are already measured) and their distance matrix, timed: the metric's measured
cost per call. Pivots are chosen greedily among the sample values, each the one that
excludes the most of the sample's pairs not yet excluded (counted at ``t`` and, with less weight,
at ``2t`` and ``4t``, so that the choice generalises beyond the sample); two-fold
cross-validation over the sample values estimates the share of candidates ``rate(k)`` that ``k``
pivots leave. The plan keeps the ``k`` that minimises the expected
work ``n k + rate(k) P`` for ``n`` records and ``P`` pairs (plus the scan's cost at the measured
cost per call): ``k = 0`` is the brute force, the fallback when pivots would not pay. The plan
splits the space into *cells* (S3J's space partitions, one worker each) on the first pivots'
coordinates, at sample quantiles weighted by the candidate pairs, as many as the workers (one
when the expected verification time is below :data:`SPLIT_SECONDS`). Cells cost no distance
call (a record's cell follows from its pivot vector), so an expensive metric pays nothing for
them; S3J measures every record against every centroid. A stream's plan decides on counts only
(``reproducible``), so that a restart rebuilds the plan its state was made with.

**Router** (:meth:`PivotStrategy.route`, stateless given the plan). A record's pivot vector is
computed once per distinct value in the batch: from the plan's matrix when the value is a sample
value (no call), else ``k`` calls. A record is *inner* in the cell of its coordinates and *outer*
in every cell with a smaller index that meets the box ``[c - t, c + t]`` around its coordinates
(the parity of S3J's worksets: only to those with a smaller id); a coordinate that is not finite
makes it inner in the last cell and outer everywhere. Each routed row carries ``[sample index,
pivot vector]`` as its payload (:attr:`driftjoin.metric.base.Routing.payload`).

**Worker** (:class:`PivotWorker`, one per cell). Entries per window in sorted runs
(:mod:`driftjoin.metric.store`), keyed by the quantised first coordinate; a new run is scanned
against itself and every stored run of its window, never outer x outer, and the pairs that pass
the bounds are verified. A distance already known is not computed again: a pair with a record
whose value *is* a pivot reads the other record's vector (``d(x, y) = d(x, p)`` when ``y``'s value
is ``p``), a pair of two sample values reads the plan's matrix.

**Exactly once.** Let ``d(x, y) <= t``. On every pivot the coordinates differ by at most ``t``, so
each record lies in the other's box; with ``x`` in the smaller cell, ``y`` is an outer member
there, ``x`` never reaches ``y``'s cell (outer copies go to smaller cells only), and outer x outer
is never paired: the pair meets in one cell, as inner x inner or inner x outer. In the worker,
each new entry meets each stored entry of its window once and each other new entry once, and
the first-coordinate ranges hold every entry that can pass the bound. Windows and sides are
checked as in every strategy (:func:`driftjoin.metric.base.candidate_filter`).

**Never more calls than the brute force** (a self-join in one window, the sample drawn from the
input, as a static join's is). Every distance computed is that of two records with different
values or two different records, and each such pair is computed once: the plan's matrix holds
pairs of distinct sample values (and, from a triangle check, of two records of one value); the router computes ``d(x, p)`` only for records ``x`` whose value
is not a sample value, standing for the pair of ``x`` with a record whose value is ``p``; the
workers compute only the pairs whose distance neither of those gave (and a pair is verified in
one place, by the argument above). So the calls, planning included, are at most ``n(n - 1) / 2``.
The triangle check of a user metric before the start (:func:`driftjoin.metric.spaces.check_triangle`)
measures each pair of its sample once and the plan reads all of them, so check and join together
make at most ``n(n - 1) / 2`` calls plus the check's symmetry probe (the reverse order and
``d(a, a)`` of :data:`~driftjoin.metric.spaces.SYMMETRY_PROBE` values: 136 calls). In a two-stream join, a record's distance to a
pivot drawn from its own side is an extra call, and on a stream the pivots are sample values, not
records: there the plan's estimate, not a proof, keeps the count below the brute force.
"""

from __future__ import annotations

import math
import pickle
import time
from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from driftjoin.distance import BOUND_SLACK
from driftjoin.metric.base import Routing, RunJoin, Strategy, candidate_filter
from driftjoin.metric.records import MetricPairs, MetricRecords, Values, take_values
from driftjoin.metric.spaces import Space
from driftjoin.metric.store import Run
from driftjoin.metric.tokens import TokenSets
from driftjoin.s3j.workset import INNER, OUTER
from driftjoin.windows import Windowing

#: Most sample values the plan measures (their ``m(m-1)/2`` distances).
SAMPLE_MAX = 200
#: Planning distances stay under this share of the expected pairs.
PLAN_SHARE = 0.05
#: Most pivots (each one a float in every routed row).
PIVOTS_MAX = 32
#: Most pivots whose coordinates define the cells.
GRID_DIMS_MAX = 3
#: Seconds of one pivot-bound check in the compiled scan (the plan weighs it against a call).
SCAN_SECONDS = 3e-9
#: Below this expected verification time (seconds) the plan keeps one cell.
SPLIT_SECONDS = 0.2
#: Quantised first coordinates are below this group; a coordinate that is not finite gets it.
GROUP_CAP = 1 << 40


def value_keys(values: Values) -> list[Hashable | None]:
    """One key per value, equal only for values the metric cannot tell apart (the same string, the
    same token set, the same vector bytes, the same pickle); None for a value without one."""
    if isinstance(values, TokenSets):
        return list(values.tokens)
    if isinstance(values, np.ndarray) and values.ndim == 2:
        return [row.tobytes() for row in values]
    return [_key(v) for v in values]


def _key(value: Any) -> Hashable | None:
    if type(value) is str:
        return value
    try:
        return pickle.dumps(value, protocol=4)
    except Exception:  # an unpicklable value is never taken for another one
        return None


def _reach(x: np.ndarray, t: float) -> tuple[np.ndarray, np.ndarray]:
    """``[L, U]``: every ``y`` with ``|x - y| <= t + BOUND_SLACK * (1 + t + x + y)`` (the scan's pass
    test) lies in it, widened by the slack again against rounding."""
    s = BOUND_SLACK
    hi = (x * (1 + s) + t + s * (1 + t)) / (1 - s)
    lo = (x * (1 - s) - t - s * (1 + t)) / (1 + s)
    return lo - s * (1 + np.abs(lo)), hi + s * (1 + np.abs(hi))


@dataclass(frozen=True)
class Measured:
    """Distances already computed on sample values (a user metric's triangle check before the
    start): ``matrix[i, j] = d(values[i], values[j])``, in ``seconds`` and ``calls`` of the metric."""

    values: Values
    matrix: np.ndarray
    seconds: float
    calls: int


@dataclass(frozen=True)
class PivotPlan:
    """What every router and worker of a pivot join shares (module docstring), fixed before the start."""

    #: the threshold as a float: the pivot bounds' (module docstring)
    threshold: float
    #: the threshold as the space compares a distance with it (:meth:`Space.radius`: in an exact
    #: space the number written, a Fraction)
    radius: Any
    #: distinct sample values and their keys (:func:`value_keys`) -> index
    sample: Values
    keys: dict
    #: distances of the sample values (NaN on the diagonal: never computed)
    matrix: np.ndarray
    #: sample indices of the pivots, in the order chosen
    pivots: np.ndarray
    #: per cell dimension (the first pivots), the sorted boundaries of its ranges
    bounds: tuple
    #: width of a group of first coordinates in the workers' runs
    quantum: float
    #: what the plan measured and expects (statistics, the choice's reason)
    summary: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        return len(self.pivots)

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(len(b) + 1 for b in self.bounds) or (1,)

    @property
    def cells(self) -> int:
        return int(np.prod(self.shape))

    def sample_vectors(self, sid: np.ndarray) -> np.ndarray:
        """Pivot vectors of sample values ``sid`` from the matrix (a pivot's own coordinate is 0)."""
        v = self.matrix[np.ix_(np.asarray(sid, np.int64), self.pivots)]
        own = np.asarray(sid, np.int64)[:, None] == self.pivots[None, :]
        return np.where(own, 0.0, v)

    def pivot_of(self, sid: np.ndarray) -> np.ndarray:
        """The pivot index of each sample index (-1: not a pivot, or no sample value)."""
        table = np.full(len(self.matrix) + 1, -1, np.int64)
        table[self.pivots] = np.arange(self.k)
        return table[np.where(sid >= 0, sid, len(self.matrix))]

    def group(self, x: np.ndarray) -> np.ndarray:
        """The run group of first coordinates ``x`` (monotone; not finite: :data:`GROUP_CAP`)."""
        finite = np.isfinite(x)
        g = np.floor(np.where(finite, x, 0.0) / self.quantum)
        return np.where(finite, np.clip(g, 0, GROUP_CAP - 1), GROUP_CAP).astype(np.int64)

    def route_cells(self, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per pivot vector, its inner cell and the (n x cells) mask of the cells it is outer in."""
        return _route_cells(self.bounds, self.threshold, vec)

    def signature(self) -> tuple:
        """What a restart must find unchanged: the stored runs hold vectors to these pivots and
        indices into this sample."""
        keys = [tuple(sorted(key, key=lambda tok: (type(tok).__name__, tok))) if isinstance(key, frozenset) else key
                for key in value_keys(self.sample)]  # a token set's order would follow the process's hash seed
        return (self.threshold, self.radius, keys, self.matrix.tobytes(), self.pivots.tolist(),
                [b.tolist() for b in self.bounds], self.quantum)


def _route_cells(bounds: tuple, t: float, vec: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Inner cells and outer-cell masks of pivot vectors ``vec`` for cells cut at ``bounds``."""
    n = len(vec)
    if not bounds:
        return np.zeros(n, np.int64), np.zeros((n, 1), bool)
    shape = tuple(len(b) + 1 for b in bounds)
    cells = int(np.prod(shape))
    coords = vec[:, : len(bounds)]
    wild = ~np.isfinite(coords).all(axis=1)
    safe = np.where(np.isfinite(coords), coords, 0.0)
    own = np.zeros((n, len(bounds)), np.int64)
    box_lo, box_hi = own.copy(), own.copy()
    for j, b in enumerate(bounds):
        lo, hi = _reach(safe[:, j], t)
        own[:, j] = np.searchsorted(b, safe[:, j], side="right")
        box_lo[:, j] = np.searchsorted(b, lo, side="right")
        box_hi[:, j] = np.searchsorted(b, hi, side="right")
    inner = np.ravel_multi_index(tuple(own.T), shape)
    inner[wild] = cells - 1
    index = np.stack(np.unravel_index(np.arange(cells), shape), axis=1)  # cells x dims
    in_box = ((index[None, :, :] >= box_lo[:, None, :]) & (index[None, :, :] <= box_hi[:, None, :])).all(axis=2)
    in_box[wild] = True
    return inner, in_box & (np.arange(cells)[None, :] < inner[:, None])


def plan_pivots(space: Space, threshold: Any, sample: Values, *, n_workers: int, expected: int | None = None,
                self_join: bool = True, seed: int = 0, measured: Measured | None = None,
                reproducible: bool = False) -> PivotPlan:
    """The pivots, cells and run groups of a pivot join, chosen on ``sample`` (module docstring).

    Parameters
    ----------
    space, threshold : the join's metric and threshold.
    sample : prepared values of the input (a static join's first rows, or ``sample=``).
    n_workers : the most cells (workers) to split into.
    expected : records per window the plan is made for (default: the sample's size).
    self_join : whether the join pairs one input with itself (``P = n(n-1)/2``; else ``(n/2)^2``).
    seed : the draw of sample values and of the two halves of their pairs.
    measured : distances already computed on sample values (the triangle check's): the plan
        takes all those values (up to :data:`SAMPLE_MAX`) instead, without calling the metric.
    reproducible : decide on counts only, not on the measured time, so that the same sample gives
        the same plan again (a stream's restart must find the plan its state was built with):
        no scan cost in the choice of ``k``, and as many cells as workers whenever pivots pay.

    Example::

        >>> from driftjoin.metric.spaces import CallableSpace
        >>> words = ["kitten", "sitting", "mitten", "bitten", "smitten", "written", "kitchen", "sitter"] * 3
        >>> space = CallableSpace(lambda a, b: abs(len(a) - len(b)) + sum(x != y for x, y in zip(a, b)))
        >>> plan = plan_pivots(space, 1, space.prepare(words), n_workers=2, expected=10_000)
        >>> plan.k > 0, len(plan.matrix)  # eight distinct values measured
        (True, 8)
    """
    t = float(threshold)
    n = max(int(expected if expected is not None else len(sample)), 1)
    pairs = n * (n - 1) / 2 if self_join else (n / 2) ** 2
    source = measured.values if measured is not None and len(measured.values) else sample
    keys = value_keys(source)
    first: dict = {}
    for i, key in enumerate(keys):
        if key is not None and key not in first:
            first[key] = i
    distinct = np.fromiter(first.values(), np.int64, len(first))
    # distances already measured cost nothing more: all of them serve (and spare the join their calls)
    budget = int((1 + math.sqrt(1 + 8 * PLAN_SHARE * pairs)) // 2) if source is sample else len(distinct)
    m = min(SAMPLE_MAX, len(distinct), budget)
    rng = np.random.default_rng(seed)
    chosen = np.sort(rng.choice(distinct, size=m, replace=False)) if m < len(distinct) else distinct
    values = take_values(source, chosen)
    matrix = np.full((m, m), np.nan)
    iu, ju = np.triu_indices(m, 1)
    if source is not sample:
        d = measured.matrix[chosen[iu], chosen[ju]]
        cost, calls = measured.seconds / max(measured.calls, 1), 0
    else:
        start = time.perf_counter()
        d = space.distances(values, iu, values, ju) if len(iu) else np.zeros(0)
        cost, calls = (time.perf_counter() - start) / max(len(iu), 1), len(iu)
    matrix[iu, ju] = d
    matrix[ju, iu] = d
    if source is not sample:  # two measured records with the same value: their distance too
        twins = {key: i for i, key in enumerate(keys) if key is not None and first[key] != i}
        at = {key: c for c, key in enumerate(value_keys(values)) if key in twins}
        for key, c in at.items():
            matrix[c, c] = measured.matrix[first[key], twins[key]]
    own_keys = {key: i for i, key in enumerate(value_keys(values)) if key is not None}
    coords = np.where(np.eye(m, dtype=bool), 0.0, matrix)
    pivots, rates = _greedy(coords, t, min(PIVOTS_MAX, m), rng)
    scan = 0.0 if reproducible else SCAN_SECONDS / max(cost, 1e-12)  # a bound check in calls
    work = [pairs * (1 + scan)] + [n * (j + 1) + rates[j] * pairs + scan * rates[0] * pairs for j in range(len(pivots))]
    k = int(np.argmin(work))
    pivots = pivots[:k]
    target = n_workers if k and (reproducible or cost * rates[k - 1] * pairs >= SPLIT_SECONDS) else 1
    bounds = _cells(coords[:, pivots], t, target)
    positive = coords[np.isfinite(coords) & (coords > 0)]
    quantum = t if t > 0 else (float(np.median(positive)) / 1024 if len(positive) else 1.0)
    share = float(rates[k - 1]) if k else 1.0
    summary = {"sample_values": m, "planning_calls": int(calls), "seconds_per_call": cost, "pivots": k,
               "records": n, "pairs": pairs, "expected_calls": n * k + share * pairs, "candidate_share": share}
    plan = PivotPlan(t, space.radius(threshold), values, own_keys, matrix, pivots.astype(np.int64), bounds, quantum, summary)
    summary["cells"] = plan.cells
    return plan


def _greedy(coords: np.ndarray, t: float, k_max: int, rng: np.random.Generator) -> tuple[np.ndarray, list[float]]:
    """Pivots in the order :func:`_select` picks them on all the sample's pairs, and ``rates[j]``:
    the share of pairs that ``j + 1`` pivots leave, estimated by two-fold cross-validation (pivots
    picked on the pairs of one half of the values leave this share of the other half's pairs;
    one pair's worth is added, so no estimate is zero). A pivot set picked on half the pairs
    excludes less than one picked on all of them: the estimate errs on the side of more calls."""
    m = len(coords)
    if m < 4 or k_max == 0:
        return np.zeros(0, np.int64), []
    levels = _levels(coords, t)
    pivots = _select(coords, *np.triu_indices(m, 1), levels, k_max)
    perm = rng.permutation(m)
    kept = np.zeros(len(pivots))
    tested = 0
    for train, test in ((perm[: m // 2], perm[m // 2 :]), (perm[m // 2 :], perm[: m // 2])):
        a, b = np.triu_indices(len(train), 1)
        order = _select(coords, train[a], train[b], levels, len(pivots))
        a, b = np.triu_indices(len(test), 1)
        lb = np.zeros(len(a))
        for j in range(len(pivots)):
            if j < len(order):
                with np.errstate(invalid="ignore"):
                    lb = np.fmax(lb, np.abs(coords[test[a], order[j]] - coords[test[b], order[j]]))
            kept[j] += int((lb <= t).sum())
        tested += len(a)
    return pivots, ((kept + 1) / (tested + 1)).tolist()


#: Weights of the exclusions counted at the thresholds of :func:`_levels`.
LEVEL_WEIGHTS = (1.0, 0.3, 0.09)


def _levels(coords: np.ndarray, t: float) -> tuple[float, ...]:
    """The threshold and two wider ones (``2t``, ``4t``; at ``t = 0`` the smallest positive sample
    distance and its double): a pivot that separates pairs beyond ``t`` keeps excluding pairs that
    the sample does not hold, so the choice does not stop once the sample's pairs are all excluded."""
    if t > 0:
        return (t, 2 * t, 4 * t)
    positive = coords[np.isfinite(coords) & (coords > 0)]
    q = float(positive.min()) if len(positive) else 1.0
    return (0.0, q, 2 * q)


def _select(coords: np.ndarray, pa: np.ndarray, pb: np.ndarray, levels: tuple[float, ...], k_max: int) -> np.ndarray:
    """Pivots picked one at a time among the sample values, each the one whose differences exclude
    the most of the pairs ``(pa, pb)`` not yet excluded, counted at each level with
    :data:`LEVEL_WEIGHTS` (ties: the first value); stops when no pair is left at any level."""
    m = len(coords)
    lb = np.zeros(len(pa))
    pivots: list[int] = []
    for _ in range(k_max):
        live = np.nonzero(lb <= levels[-1])[0]
        if len(live) == 0:
            break
        with np.errstate(invalid="ignore"):
            diff = np.abs(coords[pa[live]] - coords[pb[live]])  # live pairs x candidate pivots
        score = np.zeros(m)
        for level, weight in zip(levels, LEVEL_WEIGHTS):
            score += weight * ((diff > level) & (lb[live] <= level)[:, None]).sum(axis=0)
        score[pivots] = -1
        best = int(np.argmax(score))
        if score[best] <= 0:
            break
        pivots.append(best)
        lb[live] = np.fmax(lb[live], diff[:, best])
    return np.array(pivots, np.int64)


def _excluded(x: np.ndarray, y: np.ndarray, t: float) -> np.ndarray:
    """Whether the pivot bound excludes the pair (the scan's test; NaN never excludes)."""
    with np.errstate(invalid="ignore"):
        return np.abs(x - y) > t + BOUND_SLACK * (1.0 + t + x + y)


def _cells(coords: np.ndarray, t: float, target: int) -> tuple:
    """Boundaries of the ranges of the first 1 to :data:`GRID_DIMS_MAX` pivot coordinates into at
    most ``target`` cells, balanced on the calls the cells will make: the sample's pairs left by as
    many pivots as leave at least :data:`BALANCE_PAIRS` of them, each counted in the cell where it
    would meet (the smaller inner cell of its two values), plus one per value. Ranges are cut at
    weighted quantiles (a value weighs the pairs in which it has the smaller coordinate); the
    option whose busiest cell carries the least wins (ties: fewer cells)."""
    if target <= 1 or coords.shape[1] == 0:
        return ()
    m = len(coords)
    a, b = np.triu_indices(m, 1)
    lb = np.zeros(len(a))
    for j in range(coords.shape[1]):
        with np.errstate(invalid="ignore"):
            tighter = np.fmax(lb, np.abs(coords[a, j] - coords[b, j]))
        if (tighter <= t).sum() < BALANCE_PAIRS:
            break
        lb = tighter
    left = lb <= t
    pa, pb = a[left], b[left]
    best, best_load = (), math.inf
    for dims in range(1, min(GRID_DIMS_MAX, coords.shape[1]) + 1):
        per = int(math.floor(target ** (1 / dims) + 1e-9))
        if per < 2:
            break
        bounds = []
        for j in range(dims):
            lower = np.where(coords[pa, j] <= coords[pb, j], pa, pb)
            bounds.append(_weighted_bounds(coords[:, j], per, 1.0 + np.bincount(lower, minlength=m)))
        if all(len(x) == 0 for x in bounds):
            continue
        inner, outer = _route_cells(tuple(bounds), t, coords)
        load = (np.bincount(np.minimum(inner[pa], inner[pb]), minlength=outer.shape[1])
                + np.bincount(inner, minlength=outer.shape[1]))
        if load.max() < best_load * (1 - 1e-9):
            best, best_load = tuple(bounds), float(load.max())
    return best


#: Least number of sample pairs that the cells are balanced on (see :func:`_cells`).
BALANCE_PAIRS = 400


def _weighted_bounds(x: np.ndarray, parts: int, weight: np.ndarray) -> np.ndarray:
    """Up to ``parts - 1`` boundaries splitting the finite ``x`` into ranges of about equal weight
    (a boundary value opens the range above it)."""
    finite = np.isfinite(x)
    order = np.argsort(x[finite], kind="stable")
    v, w = x[finite][order], weight[finite][order]
    if len(v) == 0:
        return np.zeros(0)
    cum = np.cumsum(w)
    at = np.minimum(np.searchsorted(cum, cum[-1] * np.arange(1, parts) / parts, side="right"), len(v) - 1)
    b = np.unique(v[at])
    return b[b > v[0]]


class PivotStrategy(Strategy):
    """Pivot filtering's router over a :class:`PivotPlan`; one worker per cell (module docstring).

    Example::

        >>> from driftjoin.metric.spaces import CallableSpace
        >>> from driftjoin.metric.engine import MetricEngine
        >>> space = CallableSpace(lambda a, b: abs(a - b))
        >>> values = space.prepare([0.0, 0.5, 3.0, 3.2, 9.0, 20.0])
        >>> s = PivotStrategy(space, 1.0, plan_pivots(space, 1.0, values, n_workers=2), self_join=True,
        ...                   windows=Windowing.unbounded())
        >>> sorted(MetricEngine(s).process(MetricRecords.of([1, 2, 3, 4, 5, 6], values)).tuples())
        [(1, 2, 0), (3, 4, 0)]
    """

    name = "pivots"

    def __init__(self, space: Space, threshold: Any, plan: PivotPlan, *, self_join: bool, windows: Windowing) -> None:
        self.space = space
        self.threshold = threshold
        self.plan = plan
        self.self_join = self_join
        self.windows = windows
        self.n_workers = plan.cells

    def vectors(self, values: Values) -> tuple[np.ndarray, np.ndarray]:
        """Per value, its sample index (-1: none) and its pivot vector; each distinct value that is
        not a sample value is measured against the pivots once."""
        plan = self.plan
        n, keys = len(values), value_keys(values)
        sid = np.fromiter((plan.keys.get(key, -1) if key is not None else -1 for key in keys), np.int64, n)
        vec = np.zeros((n, plan.k))
        known = sid >= 0
        vec[known] = plan.sample_vectors(sid[known])
        todo = np.nonzero(~known)[0]
        if plan.k and len(todo):
            slot: dict = {}
            reps: list[int] = []
            rep = np.empty(len(todo), np.int64)
            for pos, i in enumerate(todo.tolist()):
                key = keys[i]
                s = slot.get(key) if key is not None else None
                if s is None:
                    s = len(reps)
                    reps.append(i)
                    if key is not None:
                        slot[key] = s
                rep[pos] = s
            measured = self.space.pairwise(take_values(values, np.array(reps, np.int64)),
                                           take_values(plan.sample, plan.pivots))
            vec[todo] = measured[rep]
        return sid, vec

    def route(self, batch: MetricRecords) -> Routing:
        n = len(batch)
        if n == 0:
            z = np.zeros(0, np.int64)
            return Routing(z, z, np.zeros(0, np.int8), np.zeros((0, self.plan.k + 1)), z)
        before = self.space.calls
        sid, vec = self.vectors(batch.value)
        inner, outer = self.plan.route_cells(vec)
        out_rows, out_cells = np.nonzero(outer)
        row = np.concatenate([np.arange(n), out_rows])
        worker = np.concatenate([inner, out_cells])
        role = np.concatenate([np.full(n, INNER, np.int8), np.full(len(out_rows), OUTER, np.int8)])
        order = np.argsort(row, kind="stable")
        row, worker, role = row[order], worker[order].astype(np.int64), role[order]
        payload = np.concatenate([sid[:, None].astype(np.float64), vec], axis=1)[row]
        calls = np.zeros(len(row), np.int64)
        calls[0] = self.space.calls - before
        return Routing(row, worker, role, payload, calls)

    def worker(self, index: int) -> "PivotWorker":
        return PivotWorker(self.space, self.plan, self.self_join, self.windows)

    def describe(self) -> str:
        p = self.plan.summary
        measured = f"{p['sample_values']} sample values measured at {p['seconds_per_call'] * 1e6:.3g} us per call"
        if not self.plan.k:
            return f"no pivot pays on {measured}: the brute force in one cell ({p['pairs']:,.0f} pairs expected)"
        return (f"{self.plan.k} pivots of {measured}, {self.plan.cells} cell{'s' if self.plan.cells > 1 else ''}; "
                f"about {p['expected_calls']:,.0f} distance calls expected against {p['pairs']:,.0f} pairs")


class PivotWorker(RunJoin):
    """The join of one cell: the pivot scan over its runs and the verification (module docstring)."""

    def __init__(self, space: Space, plan: PivotPlan, self_join: bool, windows: Windowing) -> None:
        super().__init__(self_join, windows, [(0, 0), (0, 1)])
        self.space = space
        self.plan = plan
        self.t = plan.threshold
        self.radius = plan.radius

    def add(self, batch: MetricRecords, role: np.ndarray) -> MetricPairs:
        raise ValueError("a pivot worker joins routed rows with their pivot vectors: call add_routed(batch, role, "
                         "payload) with the payload of PivotStrategy.route")

    def add_routed(self, batch: MetricRecords, role: np.ndarray, payload: np.ndarray | None) -> MetricPairs:
        if payload is None or payload.shape != (len(batch), self.plan.k + 1):
            raise ValueError(f"pivot worker: expected a payload of {len(batch)} rows of 1 + {self.plan.k} values "
                             f"(the router's sample indices and pivot vectors), got "
                             f"{None if payload is None else payload.shape}")
        before = self.space.calls
        sid = payload[:, 0].astype(np.int64)
        vec = np.ascontiguousarray(payload[:, 1:], dtype=np.float64)
        group = self.plan.group(vec[:, 0]) if self.plan.k else np.zeros(len(batch), np.int64)
        cls = (np.asarray(role) == OUTER).astype(np.int64) | (batch.side.astype(np.int64) << 1)
        rows = np.arange(len(batch))
        pairs = self.join_runs(batch, batch.window, lambda sel: Run.build(
            batch, group[sel], cls[sel], rows[sel], {"vec": vec[sel], "sid": sid[sel]}))
        self.stats.calls += self.space.calls - before
        return pairs

    def join_runs(self, batch: MetricRecords, window: np.ndarray, build) -> MetricPairs:
        """The new run of each window scanned against itself and the window's stored runs, then stored."""
        out: list[MetricPairs] = []
        for w in np.unique(window).tolist():
            run = build(window == w)
            for other in [*self.store.windows.get(w, ()), run]:
                ia, ib = self._scan(run, other)
                if len(ia):
                    out.append(self.verify(run, ia, other, ib))
            self.store.add(w, run)
        pairs = MetricPairs.concat(out, batch.id.dtype)
        self.stats.pairs += len(pairs)
        return pairs

    def _scan(self, a: Run, b: Run) -> tuple[np.ndarray, np.ndarray]:
        from driftjoin.metric.pivotscan import pivot_scan

        va, vb = a.cols["vec"], b.cols["vec"]
        nb = len(b)
        tail = int(np.searchsorted(b.key, GROUP_CAP << 2, side="left"))
        if self.plan.k:
            x = va[:, 0]
            lo_x, hi_x = _reach(np.where(np.isfinite(x), x, 0.0), self.t)
            lo = np.searchsorted(b.key, self.plan.group(lo_x) << 2, side="left")
            hi = np.searchsorted(b.key, (self.plan.group(hi_x) + 1) << 2, side="left")
            wild = ~np.isfinite(x)
            lo[wild], hi[wild] = 0, nb
        else:
            lo, hi = np.zeros(len(a), np.int64), np.full(len(a), nb, np.int64)
        ia, ib, scanned = pivot_scan(np.ascontiguousarray(va), a.cls, lo.astype(np.int64), hi.astype(np.int64), tail,
                                     np.ascontiguousarray(vb), b.cls, a is b, self.self_join, self.t, BOUND_SLACK)
        self.stats.candidates += int(scanned)
        return ia, ib

    def verify(self, a: Run, ia: np.ndarray, b: Run, ib: np.ndarray) -> MetricPairs:
        A, B = a.records, b.records
        ra, rb = a.rec[ia], b.rec[ib]
        ok = candidate_filter(self, A, ra, B, rb)
        ia, ib, ra, rb = ia[ok], ib[ok], ra[ok], rb[ok]
        known, d = self.known(a.cols["sid"][ia], b.cols["sid"][ib], a.cols["vec"][ia], b.cols["vec"][ib])
        need = ~known
        if need.any():
            d[need] = self.space.distances(A.value, ra[need], B.value, rb[need], cutoff=self.radius)
        self.stats.comparisons += len(d)
        hit = self.space.le(d, self.radius)
        return MetricPairs.oriented(A, ra[hit], B, rb[hit], d[hit], self.self_join)

    def known(self, sa: np.ndarray, sb: np.ndarray, va: np.ndarray, vb: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Which pair distances are known without a call, and those distances: two sample values
        (the plan's matrix; two records of the same sample value where the triangle check measured
        two such records), or a record whose value is a pivot and a record with another value (the
        other record's vector)."""
        plan = self.plan
        d = np.full(len(sa), np.nan)
        differ = sa != sb
        both = (sa >= 0) & (sb >= 0)
        d[both] = plan.matrix[sa[both], sb[both]]
        both &= ~np.isnan(d)  # the same value: known when measured
        pa, pb = plan.pivot_of(sa), plan.pivot_of(sb)
        rows = np.arange(len(sa))
        via_b = differ & ~both & (pb >= 0)
        d[via_b] = va[rows[via_b], pb[via_b]]
        via_a = differ & ~both & ~via_b & (pa >= 0)
        d[via_a] = vb[rows[via_a], pa[via_a]]
        return both | via_b | via_a, d
