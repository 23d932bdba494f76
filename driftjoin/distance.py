"""Distance functions for the similarity join, vectorised with numpy.

Each metric is a ``Metric``: how vectors are prepared (angular and cosine work on unit
vectors), the pairwise distance, and the metric used to *partition* the space. S3J's bounds
(inner set <= t/2, outer set <= 2t, Criterion 1) rely on the triangle inequality, so the
partitioning metric must be a true metric:

- ``euclidean``, ``manhattan``, ``chebyshev``: the usual L2, L1, L-infinity distances.
- ``angular``: the angle between two vectors divided by pi, in [0, 1]. A metric on directions.
  Computed as ``2 * arcsin(|a - b| / 2) / pi`` on unit vectors, which stays accurate for tiny
  angles where ``arccos`` of a dot product loses half its digits.
- ``cosine``: ``1 - cos(a, b)`` in [0, 2]. Not a metric (the triangle inequality fails), so the
  join partitions with ``angular`` and the threshold mapped exactly:
  ``1 - cos <= t  <=>  angle / pi <= arccos(1 - t) / pi = 2 arcsin(sqrt(t / 2)) / pi``.

Names are looked up in the one registry of metric names (:mod:`driftjoin.metric_names`), which
also refuses distances that are not metrics and have no exact metric equivalent (e.g. squared
Euclidean) with a message that says what to use instead.

**The definition is a float computation.** Unlike a Jaccard or an edit distance (exact numbers,
decided exactly: :mod:`driftjoin.metric.exact`), a vector distance is a float computed from float
coordinates; the join's definition is that computation, :meth:`Metric.pairwise`, compared with the
float threshold: a pair joins when ``pairwise(a, b) <= threshold`` (the oracle,
:mod:`driftjoin.s3j.oracle`). Every acceptance test evaluates that function on the pair:
:meth:`Metric.rowwise` computes it with the same numpy operations on the same contiguous layout, bit
for bit (tests/s3j/test_float_thresholds.py checks it); the compiled loop of the S3J computation
(:mod:`driftjoin.s3j.kernels`) decides only pairs farther than a billionth of the threshold from it
and hands the others to ``rowwise``; the block kernel (:mod:`driftjoin.blockjoin`) screens and then
tests with ``rowwise``. The filters are inclusion bounds, consistent with it by a margin:

- the triangle-inequality bounds of S3J (Criterion 1, outer sets within ``2t``) and of the block
  kernel's pivot band hold for the exact distances of the prepared vectors; each computed
  distance is within a relative ``(dim + 3) u`` of it (a difference, a sum of ``dim`` squares or
  absolute values, a square root, an ``arcsin``; ``u = 2^-53``), every error relative to the
  distance itself, and the bounds are widened by the relative :data:`BOUND_SLACK` (``1e-9``),
  which exceeds those errors up to millions of dimensions. So a pair whose computed distance is
  at most ``t`` meets its candidates: what a bound drops is farther than ``t`` by more than the
  rounding;
- the monotone transforms the bounds compare (:meth:`Metric.pairwise_key`: the chord
  ``2 sin(pi x / 2)`` of an angular distance ``x``; :meth:`Metric.partition_threshold`: the
  angular threshold of a cosine one) are computed by formulas accurate to a few ``u`` relative
  for every threshold (``2 arcsin(sqrt(t / 2))`` rather than ``arccos(1 - t)``, which is 0 for
  ``t`` below ``1e-16``), inside the same slack;
- the block kernel's screen bounds the rounding of its matrix product explicitly
  (:mod:`driftjoin.blockjoin`), plus ``SCREEN_SLACK``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from driftjoin.metric_names import KIND_WORDS, VECTOR, lookup

FloatArray = np.ndarray

#: Relative slack applied to every *inclusion* bound (Criterion 1, outer sets) so that
#: floating-point rounding can never drop a pair; final acceptance is always the exact test
#: ``distance <= threshold`` on the user's metric.
BOUND_SLACK = 1e-9
#: Largest element magnitude for metrics that square or sum raw coordinates: a squared distance
#: of two such vectors stays far below float64's maximum (1.8e308) in any practical dimension.
MAX_MAGNITUDE = 1e150

def _euclidean(a: FloatArray, b: FloatArray) -> FloatArray:
    diff = a[:, None, :] - b[None, :, :]
    return np.sqrt(np.einsum("ijk,ijk->ij", diff, diff))


def _manhattan(a: FloatArray, b: FloatArray) -> FloatArray:
    return np.abs(a[:, None, :] - b[None, :, :]).sum(axis=2)


def _chebyshev(a: FloatArray, b: FloatArray) -> FloatArray:
    return np.abs(a[:, None, :] - b[None, :, :]).max(axis=2)


def _angular(a: FloatArray, b: FloatArray) -> FloatArray:
    chord = _euclidean(a, b)
    return 2.0 * np.arcsin(np.minimum(chord * 0.5, 1.0)) / math.pi


def _cosine(a: FloatArray, b: FloatArray) -> FloatArray:
    chord = _euclidean(a, b)
    return 0.5 * chord * chord


def _unit(v: FloatArray) -> FloatArray:
    """Unit vectors; each row is first divided by its largest magnitude, so the norm can neither
    overflow ([1e200, 1e200]) nor underflow to zero ([1e-200, 1e-200]) for any finite non-zero row."""
    scale = np.abs(v).max(axis=1, keepdims=True) if v.size else np.ones((len(v), 1))
    scaled = v / scale
    return scaled / np.linalg.norm(scaled, axis=1, keepdims=True)


def _identity(v: FloatArray) -> FloatArray:
    return v


@dataclass(frozen=True)
class Metric:
    """A distance as the join uses it.

    ``prepare`` maps raw vectors to the representation distances are computed on;
    ``pairwise(a, b)`` returns the (len(a), len(b)) distance matrix; ``partition_name``
    names the true metric used for partitioning and ``partition_threshold`` maps the user's
    threshold onto it.
    """

    name: str
    pairwise_fn: Callable[[FloatArray, FloatArray], FloatArray]
    prepare: Callable[[FloatArray], FloatArray]
    needs_nonzero: bool
    max_threshold: float
    partition_name: str

    @property
    def bounded(self) -> bool:
        """Whether raw coordinates enter the distance (then huge elements would overflow it)."""
        return self.prepare is _identity

    def pairwise(self, a: FloatArray, b: FloatArray, block: int = 2048) -> FloatArray:
        """Distance matrix between the rows of ``a`` and ``b``, in row blocks to bound memory."""
        if len(a) == 0 or len(b) == 0:
            return np.zeros((len(a), len(b)))
        if len(a) * len(b) * a.shape[1] <= 4_000_000:
            return self.pairwise_fn(a, b)
        step = max(1, 4_000_000 // max(1, len(b) * a.shape[1]))
        return np.vstack([self.pairwise_fn(a[i : i + step], b) for i in range(0, len(a), step)])

    def rowwise(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """Distance between ``a[i]`` and ``b[i]`` for every i."""
        diff = a - b
        if self.name == "manhattan":
            return np.abs(diff).sum(axis=1)
        if self.name == "chebyshev":
            return np.abs(diff).max(axis=1)
        chord = np.sqrt(np.einsum("ij,ij->i", diff, diff))
        if self.name == "angular":
            return 2.0 * np.arcsin(np.minimum(chord * 0.5, 1.0)) / math.pi
        if self.name == "cosine":
            return 0.5 * chord * chord
        return chord

    def pairwise_key(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """A monotone transform of :meth:`pairwise` that is cheaper to compute.

        Comparing it with :meth:`key_threshold` of ``x`` is the same test as comparing the
        distance with ``x``; argmin is preserved. Angular distance uses the chord length
        ``|a - b|`` of the unit vectors (no arcsin).
        """
        if self.name == "angular":
            return METRICS["euclidean"].pairwise(a, b)
        return self.pairwise(a, b)

    def rowwise_key(self, a: FloatArray, b: FloatArray) -> FloatArray:
        """:meth:`pairwise_key` of ``a[i]`` and ``b[i]`` for every i."""
        if self.name == "angular":
            return METRICS["euclidean"].rowwise(a, b)
        return self.rowwise(a, b)

    @property
    def minkowski_p(self) -> float:
        """The Minkowski exponent of :meth:`pairwise_key` (k-d tree searches; partition metrics only)."""
        if self.name != self.partition_name:
            raise ValueError(f"{self.name} is not a partitioning metric; search with {self.partition_name}")
        return {"manhattan": 1.0, "chebyshev": math.inf}.get(self.name, 2.0)

    def key_threshold(self, x: float) -> float:
        """The value of :meth:`pairwise_key` at distance ``x``."""
        if self.name == "angular":
            return 2.0 * math.sin(min(x, 1.0) * math.pi / 2.0)
        return x

    @property
    def partition_metric(self) -> "Metric":
        return METRICS[self.partition_name]

    def partition_threshold(self, threshold: float) -> float:
        """The user's threshold expressed on the partitioning metric: for cosine the angular
        distance ``arccos(1 - t) / pi``, computed as ``2 arcsin(sqrt(t / 2)) / pi`` (the same
        number; accurate to a few ulps for every ``t``, where ``1 - t`` rounds to 1 below 1e-16).

        Example::

            >>> m = METRICS["cosine"]
            >>> round(m.partition_threshold(1.0), 12), m.partition_threshold(1e-18) > 0
            (0.5, True)
        """
        if self.name == "cosine":
            return 2.0 * math.asin(min(1.0, math.sqrt(threshold / 2.0))) / math.pi
        return threshold


METRICS: dict[str, Metric] = {
    "euclidean": Metric("euclidean", _euclidean, _identity, False, math.inf, "euclidean"),
    "manhattan": Metric("manhattan", _manhattan, _identity, False, math.inf, "manhattan"),
    "chebyshev": Metric("chebyshev", _chebyshev, _identity, False, math.inf, "chebyshev"),
    "angular": Metric("angular", _angular, _unit, True, 1.0, "angular"),
    "cosine": Metric("cosine", _cosine, _unit, True, 2.0, "angular"),
}


#: The column each kind of metric compares, for the message of a vector metric asked for another kind.
_COLUMNS = {"string": "a string column", "set": "an array<string> or array<int> column"}


def get_metric(name: str) -> Metric:
    """The vector metric ``name`` names (:func:`driftjoin.metric_names.lookup`), failing with a
    message that says what to change."""
    entry = lookup(name)
    if entry.kind != VECTOR:
        raise ValueError(f"metric={entry.name!r} compares {KIND_WORDS[entry.kind]}, not vectors: use it with "
                         f"value_col= naming {_COLUMNS[entry.kind]}")
    return METRICS[entry.name]


def check_threshold(metric: Metric, threshold: float) -> float:
    """Validate a distance threshold for ``metric`` and return it as a float."""
    if isinstance(threshold, bool):
        raise ValueError(f"threshold must be a number (a distance), got {threshold!r}")
    try:
        t = float(threshold)
    except (TypeError, ValueError):
        raise ValueError(f"threshold must be a number, got {threshold!r}") from None
    if not math.isfinite(t) or t <= 0:
        raise ValueError(
            f"threshold must be a finite distance > 0 (pairs with distance <= threshold join), got {threshold!r}"
        )
    if t > metric.max_threshold:
        raise ValueError(
            f"threshold {t} exceeds the largest {metric.name} distance ({metric.max_threshold}); "
            "every pair would join: use a smaller threshold"
        )
    return t
