"""Exact block joins with matrix products: all pairs of two blocks of vectors within a threshold.

Used inside a grid cell (:mod:`driftjoin.grid`) and inside large S3J worksets
(:mod:`driftjoin.s3j.compute`). Comparing two blocks pair by pair costs a gather and a
subtraction per pair; a matrix product (numpy's BLAS) computes all dot products of two blocks at
a rate of several GFLOP/s per core. The product only *screens*: the accept test is always the
exact distance of :mod:`driftjoin.distance` (``Metric.rowwise``, which equals the oracle's
``Metric.pairwise`` bit for bit) on the candidate pairs, so rounding in the product can add
candidates but never lose a pair.

How one call works (``A`` x ``B``, vectors already *prepared* for the metric, float64):

1. **Pivot band** (triangle inequality): every vector gets its distance ``r`` to a pivot (the
   centre of ``B``) on the screening metric; ``|r_a - r_b| <= d(a, b)``, so after sorting by
   ``r`` a block of rows of ``A`` only meets the contiguous band of ``B`` with
   ``r_b`` in ``[min r_a - T, max r_a + T]``.
2. **Screen** (BLAS): the vectors are centred on the pivot and cast to the screening precision;
   one matrix product of augmented vectors ``[a, |a|^2, 1] . [-2b, 1, |b|^2]`` gives the squared
   Euclidean distance ``S`` of every pair of the block. A pair is a candidate if
   ``S <= (T' + kappa * (|a|_max + |b|_max))^2`` where ``T'`` is the threshold on the chord /
   L2 distance with a relative slack of 1e-9 and ``kappa = sqrt(e) + 3u`` bounds the rounding
   of the product (``e = (2d + 6) u / (1 - (2d + 6) u)``, ``u`` the unit roundoff of the
   screening precision; the bound of a dot product computed in any order, with or without FMA,
   is ``gamma_d |a| . |b|``, Higham, *Accuracy and Stability*, section 3.1) plus the rounding
   of centring and casting (``3u`` per unit of norm). The bound holds whatever summation order
   BLAS picks, so the screen is safe in float32 as well as in float64.
3. **Exact test**: ``Metric.rowwise`` on the candidates; ``dist <= threshold`` keeps a pair.

Screening distances by metric: Euclidean, angular and cosine are all monotone functions of
the Euclidean distance of the prepared (unit) vectors, so the screen is exact up to rounding.
Manhattan and Chebyshev have no such product; the screen uses the norm equivalences
``L2 <= L1`` and ``L2 <= sqrt(d) Linf`` (a necessary condition) and their own triangle
inequality for the pivot band; the exact test does the rest (a fallback that stays exact but
prunes less).

Memory: a product block holds at most ``block_bytes`` bytes (rows x columns x itemsize);
candidates are exact-tested in chunks of about ``block_bytes`` as well.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from driftjoin.distance import Metric

#: Default memory bound of one product block (bytes).
BLOCK_BYTES = 32 << 20
#: Relative slack on the screening threshold: covers the float64 rounding of the exact
#: distance and of the threshold conversion (both far below 1e-9 up to 10^6 dimensions).
SCREEN_SLACK = 1e-9
#: ``screen="auto"`` uses float32 (twice the BLAS rate, half the memory) only when its wider
#: rounding margin is expected to add few candidates: ``(1 + margin / T) ** dim <= this``
#: (the number of neighbours within a radius grows at most like radius ** dim).
FLOAT32_MAX_INFLATION = 2.0

#: Largest vector norm (after centring) screened in float32: squares stay far below its overflow.
FLOAT32_MAX_NORM = 1e15
_UNIT = {np.dtype(np.float32): 2.0**-24, np.dtype(np.float64): 2.0**-53}


@dataclass
class BlockStats:
    """What a block join did: products computed (pairs screened), candidates exact-tested, pairs."""

    screened: int = 0
    candidates: int = 0
    pairs: int = 0

    def add(self, other: "BlockStats") -> None:
        self.screened += other.screened
        self.candidates += other.candidates
        self.pairs += other.pairs


@dataclass
class BlockResult:
    """Pairs ``(ia[k], ib[k])`` (indices into A and B) with exact distance ``dist[k] <= threshold``."""

    ia: np.ndarray
    ib: np.ndarray
    dist: np.ndarray
    stats: BlockStats = field(default_factory=BlockStats)

    def __len__(self) -> int:
        return len(self.ia)


def _empty() -> BlockResult:
    z = np.zeros(0, dtype=np.int64)
    return BlockResult(z, z.copy(), np.zeros(0))


@dataclass(frozen=True)
class BlockJoin:
    """The exact block join of one metric and threshold.

    ``screen``: ``"auto"`` (float32 where its margin adds few candidates, see
    :data:`FLOAT32_MAX_INFLATION`; else float64),
    ``"float32"`` or ``"float64"``: the precision of the matrix product only; results are the
    same in every mode. ``block_bytes`` bounds the memory of one product block.
    """

    metric: Metric
    threshold: float
    block_bytes: int = BLOCK_BYTES
    screen: str = "auto"

    def __post_init__(self) -> None:
        if self.screen not in ("auto", "float32", "float64"):
            raise ValueError(f"screen={self.screen!r}: use 'auto', 'float32' or 'float64'")
        if not isinstance(self.block_bytes, int) or self.block_bytes < 1 << 16:
            raise ValueError(f"block_bytes must be an integer >= 65536, got {self.block_bytes!r}")

    @property
    def chord_threshold(self) -> float:
        """The threshold on the L2 distance of prepared vectors that the screen uses (before slack)."""
        name, t = self.metric.name, self.threshold
        if name == "angular":
            return 2.0 * math.sin(min(t, 1.0) * math.pi / 2.0)
        if name == "cosine":
            return math.sqrt(2.0 * t)
        return t  # euclidean; manhattan (L2 <= L1); chebyshev handled in _screen_threshold

    def _screen_dtype(self, dim: int, norm_sum: float) -> np.dtype:
        if self.screen != "auto":
            return np.dtype(self.screen)
        margin = _kappa(dim, _UNIT[np.dtype(np.float32)]) * norm_sum
        t = self._screen_threshold(dim)
        cheap = t > 0 and dim * math.log1p(margin / t) <= math.log(FLOAT32_MAX_INFLATION)
        return np.dtype(np.float32 if cheap else np.float64)

    def _screen_threshold(self, dim: int) -> float:
        t = self.chord_threshold
        if self.metric.name == "chebyshev":
            t = self.threshold * math.sqrt(dim)
        return t * (1.0 + SCREEN_SLACK)

    def _band_threshold(self) -> float:
        """The threshold on the pivot metric (the band of step 1)."""
        if self.metric.name in ("manhattan", "chebyshev"):
            return self.threshold * (1.0 + SCREEN_SLACK)
        return self.chord_threshold * (1.0 + SCREEN_SLACK)

    def _pivot_distance(self, x: np.ndarray, pivot: np.ndarray) -> np.ndarray:
        diff = x - pivot
        if self.metric.name == "manhattan":
            return np.abs(diff).sum(axis=1)
        if self.metric.name == "chebyshev":
            return np.abs(diff).max(axis=1) if x.shape[1] else np.zeros(len(x))
        return np.sqrt(np.einsum("ij,ij->i", diff, diff))

    def join(self, a: np.ndarray, b: np.ndarray | None = None) -> BlockResult:
        """All pairs of ``a`` x ``b`` within the threshold; ``b=None``: pairs ``i < j`` of ``a`` with itself.

        ``a`` and ``b`` hold prepared float64 vectors (what ``Metric.prepare`` returns).
        """
        upper = b is None
        if upper:
            b = a
        n, m = len(a), len(b)
        if n == 0 or m == 0 or (upper and n < 2):
            return _empty()
        dim = a.shape[1]
        stats = BlockStats()
        pivot = b.mean(axis=0)
        ra, rb = self._pivot_distance(a, pivot), self._pivot_distance(b, pivot)
        oa = np.argsort(ra, kind="stable")
        ob = oa if upper else np.argsort(rb, kind="stable")
        ra, rb = ra[oa], rb[ob]
        band = self._band_threshold() + 1e-9 * float(max(ra[-1], rb[-1]))
        # centred, augmented, screening-precision copies: S = [a, |a|^2, 1] . [-2b, 1, |b|^2]
        ca = a[oa] - pivot
        cb = ca if upper else b[ob] - pivot
        na = np.sqrt(np.einsum("ij,ij->i", ca, ca))
        nb = na if upper else np.sqrt(np.einsum("ij,ij->i", cb, cb))
        dtype = self._screen_dtype(dim, float(np.median(na) + np.median(nb)))
        if dtype == np.float32 and max(float(na.max()), float(nb.max())) >= FLOAT32_MAX_NORM:
            dtype = np.dtype(np.float64)
        kappa = _kappa(dim, _UNIT[dtype])
        fa = _augment(ca, dtype, left=True)
        fb = _augment(cb, dtype, left=False)
        t_screen = self._screen_threshold(dim)
        cols = max(1, min(m, 4096))
        rows = max(1, self.block_bytes // (cols * dtype.itemsize))
        out_a: list[np.ndarray] = []
        out_b: list[np.ndarray] = []
        for i0 in range(0, n, rows):
            i1 = min(n, i0 + rows)
            lo = int(np.searchsorted(rb, ra[i0] - band, side="left"))
            hi = int(np.searchsorted(rb, ra[i1 - 1] + band, side="right"))
            if upper:
                lo = max(lo, i0)
            na_max = float(na[i0:i1].max()) * (1.0 + 1e-6)
            for j0 in range(lo, hi, cols):
                j1 = min(hi, j0 + cols)
                s_max = na_max + float(nb[j0:j1].max()) * (1.0 + 1e-6)
                limit = (t_screen + kappa * s_max) ** 2
                prod = fa[i0:i1] @ fb[j0:j1].T
                hit_i, hit_j = np.nonzero(~(prod > limit))  # NaN (overflow) is a candidate
                stats.screened += (i1 - i0) * (j1 - j0)
                if upper and j0 < i1:  # a diagonal block: keep j > i only
                    keep = hit_j + j0 > hit_i + i0
                    hit_i, hit_j = hit_i[keep], hit_j[keep]
                    jm = min(j1, i1)  # entries with j <= i: for each j, the rows i in [j, i1)
                    stats.screened -= (jm - j0) * i1 - (j0 + jm - 1) * (jm - j0) // 2
                if len(hit_i):
                    out_a.append(hit_i + i0)
                    out_b.append(hit_j + j0)
        if not out_a:
            res = _empty()
            res.stats = stats
            return res
        ia_sorted, ib_sorted = np.concatenate(out_a), np.concatenate(out_b)
        ia, ib = oa[ia_sorted], ob[ib_sorted]
        if upper:  # report each unordered pair with its smaller index first
            ia, ib = np.minimum(ia, ib), np.maximum(ia, ib)
        stats.candidates = len(ia)
        dist = np.empty(len(ia))
        chunk = max(1024, self.block_bytes // (24 * dim))  # two gathered rows and their difference
        for k in range(0, len(ia), chunk):
            sl = slice(k, k + chunk)
            dist[sl] = self.metric.rowwise(a[ia[sl]], b[ib[sl]])
        hit = dist <= self.threshold
        res = BlockResult(ia[hit], ib[hit], dist[hit], stats)
        stats.pairs = len(res)
        return res


def _kappa(dim: int, u: float) -> float:
    """Rounding of the screened L2 distance per unit of ``|a| + |b|`` (module docstring)."""
    g = (2 * dim + 6) * u
    return math.sqrt(g / (1.0 - g)) + 3.0 * u


def _augment(x: np.ndarray, dtype: np.dtype, *, left: bool) -> np.ndarray:
    """``[x, |x|^2, 1]`` (left) or ``[-2x, 1, |x|^2]`` (right) in the screening precision."""
    n, d = x.shape
    out = np.empty((n, d + 2), dtype=dtype)
    xs = x.astype(dtype, copy=False)
    sq = np.einsum("ij,ij->i", xs, xs)
    if left:
        out[:, :d] = xs
        out[:, d] = sq
        out[:, d + 1] = 1.0
    else:
        np.multiply(xs, -2.0, out=out[:, :d])
        out[:, d] = 1.0
        out[:, d + 1] = sq
    return out
