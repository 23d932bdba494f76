"""``algorithm="auto"``: S3J or the grid, estimated on a sample, fixed for the query's life.

S3J prunes: a record is compared only with the members of the worksets it joins, but it is
copied to every workset whose ball of radius ``2t`` reaches it (its duplication). The grid
does not prune across workers: every record is copied to about ``sqrt(p)`` workers and every
pair of a window is screened by matrix products. Which is cheaper depends on the data, so
:func:`estimate` runs both on a sample, in one process, and measures what decides it:

- S3J's duplication (workset memberships per record: space partitioning and workset
  formulation together) and the fraction of all pairs it compares. The duplication is measured
  on the first half of the sample and on the whole sample: its outer part (memberships beyond a
  record's own workset) grows with the number of worksets, so it is extrapolated to the
  expected window size ``n`` as ``outer(n) = outer(s) * (n / s) ** beta`` with the growth
  exponent ``beta`` (0 to 1) measured between the two (in 2-D the worksets soon cover the space
  and ``beta`` is near 0; when distances concentrate it is near 1). Static inputs give ``n``
  (their row count); streams give it through the size of ``sample=`` (pass about one window);
- the record-to-centroid distances of S3J's formulation (a linear scan's count; they cost
  only above 16 dimensions, where no k-d tree serves the search);
- the grid's copies per record (from its layout) and the fraction of all pairs its block
  kernel screens (its pivot band prunes in low dimension).

S3J first runs on a probe of :data:`PROBE_ROWS` rows: duplication only grows with more rows, so
if the probe already exceeds the duplication rule the grid is chosen at once (at 32-D this
takes 0.1 s where the full estimate took 3 s).

Rule (:func:`decide`): the grid when S3J copies a record more than :data:`DUPLICATION_FACTOR`
times as often as the grid does, or (above :data:`LOW_DIM` dimensions) when S3J's compared
pairs, each costing ``row_cost(d) / block_cost(d)`` times a screened pair of the block kernel
and its centroid distances (constants measured on the 2-core machine, below), cost more than
the grid's screened pairs;
S3J otherwise. Up to :data:`LOW_DIM` dimensions (the paper's setting) only the duplication rule
can pick the grid: there S3J's copies stay near 2 and, at high selectivities where the cost
rule would favour the grid's products, most of S3J's pairs are inner x inner pairs it emits
without a comparison. Counts,
not timings, decide, and the sample is drawn deterministically, so the same inputs and
settings give the same choice on every run, replay and restart.

Streams decide when the query is built, from ``sample=`` (vectors like the stream's) if the
user gives one, else from the dimension alone (:data:`STREAM_S3J_MAX_DIM`). The choice and its
estimate are logged and written to the statistics (:func:`driftjoin.spark.similarity.choice.write_choice`), and the stateful
operators keep the plan in their state: a restart with settings that choose otherwise is
refused by the state check rather than mixing two partitionings.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np

from driftjoin.blockjoin import BlockJoin
from driftjoin.distance import Metric
from driftjoin.grid.layout import choose_layout
from driftjoin.s3j.engine import S3JEngine
from driftjoin.s3j.centroids import TREE_MAX_DIM
from driftjoin.s3j.records import Records
from driftjoin.distance import MAX_MAGNITUDE

#: Rows of the sample the estimate runs on (fewer in high dimension, see :func:`sample_rows`).
SAMPLE_ROWS = 2000
#: Rows of the first, small S3J run: if S3J already copies a record too often there (copies only
#: grow with more rows), the grid is chosen without the larger runs.
PROBE_ROWS = 300
#: The grid is chosen when S3J's duplication exceeds the grid's copies per record by this factor.
DUPLICATION_FACTOR = 4.0
#: Up to this dimension only S3J's duplication can make ``auto`` pick the grid.
LOW_DIM = 3
#: Streams without a sample: S3J up to this dimension, the grid above it.
STREAM_S3J_MAX_DIM = 8


def sample_rows(dim: int) -> int:
    """Rows the estimate uses: 2,000 up to 32 dimensions, fewer above (S3J's formulation on a
    sample of high-dimensional vectors is the slow part of the estimate), at least 300."""
    return max(300, min(SAMPLE_ROWS, SAMPLE_ROWS * 32 // max(1, dim)))


def row_cost(dim: int) -> float:
    """Nanoseconds per pair compared pair by pair (S3J's computation: gathers, difference, norm)."""
    return 40.0 + 4.0 * dim


def centroid_cost(dim: int) -> float:
    """Nanoseconds per record-to-centroid distance of S3J's workset formulation, counted as a
    linear scan would: a k-d tree finds the centroids up to ``TREE_MAX_DIM`` dimensions (cost
    ignored); above, records more than ``t/2`` from every centroid go through a sequential search
    in blocks (a 20,000 x 32-D text sample spent 76 of its 78 s there)."""
    return 0.0 if dim <= TREE_MAX_DIM else 50.0 + 4.0 * dim


def block_cost(dim: int) -> float:
    """Nanoseconds per pair screened by the block kernel (a float64 matrix product and a compare)."""
    return 2.0 + 0.1 * dim


@dataclass(frozen=True)
class Choice:
    """The algorithm ``auto`` picked and the estimate it picked it on."""

    algorithm: str
    reason: str
    dim: int
    parallelism: int
    sample_rows: int = 0
    window_rows: int = 0
    duplication_growth: float | None = None
    s3j_duplication: float | None = None
    grid_copies: float | None = None
    s3j_compared_fraction: float | None = None
    grid_screened_fraction: float | None = None
    s3j_pair_cost: float | None = None
    grid_pair_cost: float | None = None

    def as_dict(self) -> dict:
        return {k: (round(v, 6) if isinstance(v, float) else v) for k, v in asdict(self).items()}


def _s3j_on(vec: np.ndarray, metric: Metric, threshold: float, centroids: np.ndarray):
    n, dim = vec.shape
    engine = S3JEngine(centroids, metric, threshold, self_join=True, dim=dim)
    _, stats = engine.process(Records(np.arange(n), np.zeros(n, np.int8), vec, np.zeros(n), np.zeros(n, np.int64)))
    return stats


def estimate(sample: np.ndarray, metric: Metric, threshold: float, *, parallelism: int, self_join: bool,
             centroids: np.ndarray, seed: int = 0, rows: int | None = None) -> Choice:
    """Run S3J and the grid kernel over ``sample`` (raw vectors) and decide with :func:`decide`.

    ``rows``: the records a window is expected to hold (default: the sample's size).
    """
    raw = np.asarray(sample, dtype=np.float64)
    if raw.ndim != 2:
        raise ValueError(f"sample must be a 2-D array of vectors (rows x dim), got shape {raw.shape}")
    usable = np.isfinite(raw).all(axis=1)  # the rows the join would not dead-letter (vectors.validate)
    if metric.bounded:
        usable &= np.abs(raw).max(axis=1, initial=0.0) <= MAX_MAGNITUDE
    if metric.needs_nonzero:
        usable &= np.any(raw != 0.0, axis=1)
    raw = raw[usable]
    if len(raw) > sample_rows(raw.shape[1]):
        pick = np.random.default_rng(seed).choice(len(raw), sample_rows(raw.shape[1]), replace=False)
        raw = raw[np.sort(pick)]
    n, dim = raw.shape
    vec = metric.prepare(raw)
    layout = choose_layout(parallelism, self_join)
    if n < 2:
        return Choice("s3j", "sample too small to estimate: S3J", dim, parallelism, n, grid_copies=layout.copies_per_record())
    probe = min(n, PROBE_ROWS)
    probe_duplication = _s3j_on(vec[:probe], metric, threshold, centroids).memberships / probe
    if probe_duplication > DUPLICATION_FACTOR * layout.copies_per_record():
        copies = layout.copies_per_record()
        return Choice("grid", f"S3J copies each record {probe_duplication:.1f} times on the first {probe} rows "
                              f"already, the grid {copies:.1f}", dim, parallelism, probe, max(n, rows or n),
                      s3j_duplication=probe_duplication, grid_copies=copies)
    stats = _s3j_on(vec, metric, threshold, centroids)
    outer_full = stats.memberships / n - 1.0
    outer_half = _s3j_on(vec[: n // 2], metric, threshold, centroids).memberships / (n // 2) - 1.0 if n >= 4 else outer_full
    if outer_full <= 0:
        beta = 0.0
    elif outer_half <= 0:
        beta = 1.0
    else:
        beta = min(1.0, max(0.0, math.log(outer_full / outer_half) / math.log(n / (n // 2))))
    window = max(n, rows or n)
    duplication = 1.0 + max(0.0, outer_full) * (window / n) ** beta
    all_pairs = n * (n - 1) / 2
    screened = BlockJoin(metric, threshold).join(vec).stats.screened
    return decide(dim, parallelism, n, duplication, layout.copies_per_record(),
                  stats.comparisons / all_pairs, screened / all_pairs, window_rows=window, growth=beta,
                  centroid_fraction=stats.centroid_comparisons / all_pairs)


def decide(dim: int, parallelism: int, sample_rows: int, s3j_duplication: float, grid_copies: float,
           s3j_compared: float, grid_screened: float, *, window_rows: int = 0, growth: float = 0.0,
           centroid_fraction: float = 0.0) -> Choice:
    """The rule of the module docstring, on measured counts (duplication extrapolated to ``window_rows``)."""
    s3j_cost = s3j_compared * row_cost(dim) + centroid_fraction * centroid_cost(dim)
    grid_cost = grid_screened * block_cost(dim)
    common = dict(dim=dim, parallelism=parallelism, sample_rows=sample_rows, window_rows=window_rows,
                  duplication_growth=growth, s3j_duplication=s3j_duplication,
                  grid_copies=grid_copies, s3j_compared_fraction=s3j_compared, grid_screened_fraction=grid_screened,
                  s3j_pair_cost=s3j_cost, grid_pair_cost=grid_cost)
    if s3j_duplication > DUPLICATION_FACTOR * grid_copies:
        measured = "" if window_rows <= sample_rows else f" (measured on {sample_rows:,} rows)"
        return Choice("grid", f"S3J copies each record {s3j_duplication:.1f} times{measured}, the grid {grid_copies:.1f}", **common)
    if s3j_cost > grid_cost and dim > LOW_DIM:
        return Choice("grid", f"S3J's comparisons cost {s3j_cost:.3g} ns per record pair, the grid's products {grid_cost:.3g}", **common)
    return Choice("s3j", f"S3J copies each record {s3j_duplication:.1f} times and its comparisons cost "
                         f"{s3j_cost:.3g} ns per record pair (grid: {grid_copies:.1f} copies, {grid_cost:.3g} ns)", **common)


def by_dimension(dim: int, parallelism: int) -> Choice:
    """A stream without a sample: decided by the dimension alone."""
    if dim <= STREAM_S3J_MAX_DIM:
        return Choice("s3j", f"stream of dimension {dim} <= {STREAM_S3J_MAX_DIM} and no sample= given", dim, parallelism)
    return Choice("grid", f"stream of dimension {dim} > {STREAM_S3J_MAX_DIM} and no sample= given", dim, parallelism)


def forced(algorithm: str, dim: int, parallelism: int) -> Choice:
    return Choice(algorithm, f"algorithm={algorithm!r} given", dim, parallelism)


