"""Metric spaces: how values are prepared and how their distances are computed, in batches.

S3J's bounds (inner set ``<= t/2``, outer set ``<= 2t``, Criterion 1) hold in any metric space, so
a :class:`Space` is all the generic core needs: ``prepare`` values into a container, ``pairwise``
distances of two lists (dense), ``distances`` of given index pairs, and ``within`` (the pairs of
two lists within a radius, sparse; each space prunes there with what it knows). A pair joins when
its distance is at most the threshold (:meth:`Space.le`), decided as the oracle decides it.

Two kinds of spaces. In an *exact* space (``exact = True``) a distance is an exact number, an
integer or a ratio of integers, and every comparison with a threshold or a bound is exact, with the
threshold taken as the number the user wrote (:mod:`driftjoin.metric.exact`: ``0.3`` is ``3/10``).
In the other spaces a distance *is* a float computation (vectors, user metrics): the documented
definition is that float compared with the float threshold, and inclusion bounds get a relative
slack (:data:`driftjoin.distance.BOUND_SLACK`) so that rounding never drops a pair.

- :class:`LevenshteinSpace` (``"levenshtein"``, exact): edit distance on strings (unicode code
  points), computed by rapidfuzz in C (``process.cdist`` / ``cpdist`` with ``score_cutoff``, one
  thread); integers, so a radius ``r`` means ``floor(r)`` edits. ``within`` meets only strings whose
  lengths differ by at most that many (the length filter: ``|len(a) - len(b)| <= ed(a, b)``).
- :class:`JaccardSpace` (``"jaccard"``, exact): ``1 - |A & B| / |A | B|`` on token sets, a true
  metric. Overlaps come from sparse products of exact token incidences (tokens numbered per call
  with ``pandas.factorize``); the distance is reported as the float nearest to the exact ratio and
  compared exactly (:func:`driftjoin.metric.exact.jaccard_le`). ``within`` with a radius below 1
  visits only pairs that share a token.
- :class:`VectorSpace`: the vector metrics of :mod:`driftjoin.distance` that are true metrics.
- user metrics: :class:`CallableSpace` for ``f(a, b) -> float`` and :class:`PairwiseSpace`
  (:func:`user_metric`) for ``f(A, B) -> matrix``. The user declares them metrics;
  :func:`check_triangle` checks symmetry and the triangle inequality on a sample and refuses,
  naming the violating triple.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from itertools import chain
from numbers import Integral, Real
from typing import Any

import numpy as np

from driftjoin.distance import BOUND_SLACK, Metric, check_threshold as check_vector_threshold, get_metric
from driftjoin.metric.exact import Threshold, exact_value, jaccard_distance, jaccard_le, jaccard_le_sum
from driftjoin.metric.records import Values, object_array, take_values
from driftjoin.metric.tokens import TokenOrder, TokenSets
from driftjoin.metric_names import SET, STRING, lookup
from driftjoin.swoop.records import InvalidSetError, validate_tokens

#: Largest number of distances computed by one dense call (bounds memory).
BLOCK = 1 << 22


class Space(ABC):
    """Values and their distances (module docstring)."""

    name: str = ""
    #: the kind of value the space compares: "string", "set", "vector" or "any"
    value_type: str = "any"
    #: distances are exact numbers compared exactly (module docstring), not float computations
    exact: bool = False

    @abstractmethod
    def prepare(self, values: Sequence[Any]) -> Values:
        """The values container of valid values (see :meth:`reason`)."""

    @abstractmethod
    def pairwise(self, a: Values, b: Values) -> np.ndarray:
        """Distance matrix (float64) of every value of ``a`` with every value of ``b``."""

    def distances(self, a: Values, ia: np.ndarray, b: Values, ib: np.ndarray, cutoff: float | None = None) -> np.ndarray:
        """Distance of ``a[ia[k]]`` and ``b[ib[k]]`` for every k. With ``cutoff``, a distance above
        it may be returned as any value above it (the spaces that can stop early do)."""
        return self.rowwise(take_values(a, ia), take_values(b, ib))

    @abstractmethod
    def rowwise(self, a: Values, b: Values) -> np.ndarray:
        """Distance of ``a[k]`` and ``b[k]`` for every k."""

    def within(self, a: Values, b: Values, radius: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """All ``(i, j, d)`` with ``d = dist(a[i], b[j]) <= radius``, ordered by i then j."""
        na, nb = _len(a), _len(b)
        if na == 0 or nb == 0:
            return _no_pairs()
        out = []
        step = max(1, BLOCK // nb)
        for lo in range(0, na, step):
            d = self.pairwise(take_values(a, np.arange(lo, min(na, lo + step))), b)
            i, j = np.nonzero(self.le(d, radius))
            out.append((i + lo, j, d[i, j]))
        return _concat_pairs(out)

    def le(self, d: np.ndarray, radius: Any) -> np.ndarray:
        """Whether the distances this space computed as ``d`` are at most ``radius`` (a
        :meth:`radius`): the join's test, as the oracle decides it."""
        return np.asarray(d) <= radius

    def reaches(self, d: np.ndarray, base: np.ndarray, radius: Any) -> np.ndarray:
        """Whether distances ``d`` may be within ``base + radius`` (``base`` broadcast; S3J's
        Criterion 1): exact in an exact space, with the relative slack of an inclusion bound in a
        float space (it may include a few more, never fewer)."""
        return np.asarray(d) <= (np.asarray(base) + radius) * (1.0 + BOUND_SLACK)

    def radius(self, threshold: Any) -> Any:
        """``threshold`` as this space compares with it: the exact number it stands for in an
        exact space (:func:`driftjoin.metric.exact.exact_value`), a float in a float space."""
        return exact_value(threshold) if self.exact else float(threshold)

    def inclusion(self, radius: Any) -> Any:
        """The radius of an inclusion bound (S3J's outer sets): ``radius`` in an exact space,
        widened by the relative slack in a float space."""
        return radius if self.exact else radius * (1.0 + BOUND_SLACK)

    def reason(self, value: Any) -> str | None:
        """Why a value cannot be joined (a dead-letter reason), or None when it can."""
        return "null value" if value is None else None

    def check_threshold(self, threshold: Any) -> float:
        """The threshold as the join uses it, or a ValueError that says what to change."""
        t = _real(threshold)
        if not math.isfinite(t) or t < 0:
            raise ValueError(f"threshold must be a finite distance >= 0, got {threshold!r}")
        return t

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class LevenshteinSpace(Space):
    """Edit distance (insertions, deletions, substitutions of code points) between strings."""

    name = "levenshtein"
    value_type = "string"
    exact = True

    def le(self, d: np.ndarray, radius: Any) -> np.ndarray:
        return np.asarray(d) <= math.floor(radius)

    def reaches(self, d: np.ndarray, base: np.ndarray, radius: Any) -> np.ndarray:
        return np.asarray(d) <= np.asarray(base) + math.floor(radius)

    def reason(self, value: Any) -> str | None:
        if value is None:
            return "null string"
        if not isinstance(value, str):
            return f"not a string: {type(value).__name__} {_short(value)}"
        return None

    def check_threshold(self, threshold: Any) -> int:
        if isinstance(threshold, bool) or not isinstance(threshold, Real):
            raise ValueError(f"threshold must be a whole number of edits for metric='levenshtein', got {threshold!r}")
        if not math.isfinite(threshold) or threshold != int(threshold):
            raise ValueError(f"threshold={threshold!r}: edit distance counts whole edits; use a whole number "
                             f"such as {max(0, math.floor(threshold)) if math.isfinite(threshold) else 1}")
        if threshold < 0:
            raise ValueError(f"threshold={threshold!r}: an edit distance threshold must be >= 0")
        return int(threshold)

    def prepare(self, values: Sequence[Any]) -> np.ndarray:
        return object_array(values)

    def pairwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if len(a) == 0 or len(b) == 0:
            return np.zeros((len(a), len(b)))
        return _cdist(a, b, None).astype(np.float64)

    def rowwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self._rowwise(a, b, None)

    def distances(self, a: np.ndarray, ia: np.ndarray, b: np.ndarray, ib: np.ndarray, cutoff: float | None = None) -> np.ndarray:
        return self._rowwise(a[ia], b[ib], cutoff)

    def _rowwise(self, a: np.ndarray, b: np.ndarray, cutoff: float | None) -> np.ndarray:
        if len(a) == 0:
            return np.zeros(0)
        from rapidfuzz import process
        from rapidfuzz.distance import Levenshtein

        kw = {} if cutoff is None else {"score_cutoff": int(math.floor(cutoff))}
        return process.cpdist(a.tolist(), b.tolist(), scorer=Levenshtein.distance, dtype=np.int32, workers=1, **kw).astype(np.float64)

    def within(self, a: np.ndarray, b: np.ndarray, radius: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if len(a) == 0 or len(b) == 0 or radius < 0:
            return _no_pairs()
        r = int(math.floor(radius))
        la = np.fromiter(map(len, a), np.int64, len(a))
        lb = np.fromiter(map(len, b), np.int64, len(b))
        order_a, order_b = np.argsort(la, kind="stable"), np.argsort(lb, kind="stable")
        sa, sb = la[order_a], lb[order_b]
        out = []
        lengths, starts = np.unique(sa, return_index=True)
        ends = np.append(starts[1:], len(sa))
        for length, s0, s1 in zip(lengths.tolist(), starts.tolist(), ends.tolist()):
            j0, j1 = np.searchsorted(sb, [length - r, length + r + 1])
            if j0 == j1:
                continue
            cols = order_b[j0:j1]
            step = max(1, BLOCK // len(cols))
            for lo in range(s0, s1, step):
                rows = order_a[lo : min(s1, lo + step)]
                d = _cdist(a[rows], b[cols], r)
                i, j = np.nonzero(d <= r)
                out.append((rows[i], cols[j], d[i, j].astype(np.float64)))
        ia, ib, d = _concat_pairs(out)
        order = np.lexsort((ib, ia))
        return ia[order], ib[order], d[order]


def _cdist(a: np.ndarray, b: np.ndarray, cutoff: int | None) -> np.ndarray:
    from rapidfuzz import process
    from rapidfuzz.distance import Levenshtein

    kw = {} if cutoff is None else {"score_cutoff": cutoff}
    return process.cdist(a.tolist(), b.tolist(), scorer=Levenshtein.distance, dtype=np.int32, workers=1, **kw)


class JaccardSpace(Space):
    """Jaccard distance ``1 - |A & B| / |A | B|`` between token sets (``str`` or ``int`` tokens).

    ``order`` is the global token order of prefix filtering (:class:`TokenOrder`, fitted on a
    sample); distances do not depend on it.
    """

    name = "jaccard"
    value_type = "set"
    exact = True

    def __init__(self, order: TokenOrder | None = None) -> None:
        self.order = order if order is not None else TokenOrder()

    def reason(self, value: Any) -> str | None:
        if value is None:
            return "null token set"
        try:
            validate_tokens("", value)
        except InvalidSetError as exc:
            text = str(exc).split(": ", 1)[-1]
            if "empty set" in text:
                return "empty token set: Jaccard distance needs at least one token"
            return text
        return None

    def check_threshold(self, threshold: Any) -> Threshold:
        """The threshold as a :class:`~driftjoin.metric.exact.Threshold`: a float that keeps the exact
        number it stands for (``0.3`` is ``3/10``; a ``Fraction`` or ``Decimal`` is taken as it is)."""
        try:
            t = exact_value(threshold)
        except ValueError:
            raise ValueError(f"threshold must be a number (a Jaccard distance), got {threshold!r}") from None
        if not (0 <= t < 1):
            raise ValueError(f"threshold={threshold!r}: a Jaccard distance threshold must be in [0, 1) "
                             "(at 1 every pair of sets would join); for a similarity s use threshold=1 - s")
        return Threshold(t)

    def le(self, d: np.ndarray, radius: Any) -> np.ndarray:
        return jaccard_le(d, radius)

    def reaches(self, d: np.ndarray, base: np.ndarray, radius: Any) -> np.ndarray:
        return jaccard_le_sum(d, base, radius)

    def prepare(self, values: Sequence[Any]) -> TokenSets:
        return TokenSets.build(values, self.order)

    def pairwise(self, a: TokenSets, b: TokenSets) -> np.ndarray:
        if len(a) == 0 or len(b) == 0:
            return np.zeros((len(a), len(b)))
        ma, mb = _incidence(a, b)
        o = (ma @ mb.T).toarray()
        return jaccard_distance(a.sizes[:, None], b.sizes[None, :], o)

    def rowwise(self, a: TokenSets, b: TokenSets) -> np.ndarray:
        if len(a) == 0:
            return np.zeros(0)
        ma, mb = _incidence(a, b)
        o = np.asarray(ma.multiply(mb).sum(axis=1)).ravel()
        return jaccard_distance(a.sizes, b.sizes, o)

    def within(self, a: TokenSets, b: TokenSets, radius: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if radius >= 1.0:
            return super().within(a, b, radius)
        if len(a) == 0 or len(b) == 0 or radius < 0:
            return _no_pairs()
        ma, mb = _incidence(a, b)
        o = (ma @ mb.T).tocoo()
        i, j = o.row.astype(np.int64), o.col.astype(np.int64)
        d = jaccard_distance(a.sizes[i], b.sizes[j], o.data.astype(np.int64))
        keep = self.le(d, radius)
        i, j, d = i[keep], j[keep], d[keep]
        order = np.lexsort((j, i))
        return i[order], j[order], d[order]


def _incidence(a: TokenSets, b: TokenSets):
    """Exact 0/1 token incidence matrices of ``a`` and ``b`` over their joint vocabulary."""
    import pandas as pd
    from scipy.sparse import csr_matrix

    flat = object_array(list(chain.from_iterable(chain(a.tokens, b.tokens))))
    codes, vocab = pd.factorize(flat)
    sa, sb = a.sizes, b.sizes
    na = int(sa.sum())

    def matrix(sizes: np.ndarray, col: np.ndarray):
        indptr = np.concatenate([[0], np.cumsum(sizes)])
        return csr_matrix((np.ones(len(col), np.int64), col, indptr), shape=(len(sizes), max(1, len(vocab))))

    return matrix(sa, codes[:na]), matrix(sb, codes[na:])


class VectorSpace(Space):
    """A vector metric of :mod:`driftjoin.distance` (a true metric: not cosine) on float vectors."""

    value_type = "vector"

    def __init__(self, metric: str | Metric = "euclidean") -> None:
        self.metric = metric if isinstance(metric, Metric) else get_metric(metric)
        if self.metric.partition_name != self.metric.name:
            raise ValueError(f"metric={self.metric.name!r} is not a metric (no triangle inequality); "
                             f"use {self.metric.partition_name!r} with the vector join")
        self.name = self.metric.name

    def reason(self, value: Any) -> str | None:
        if value is None:
            return "null vector"
        try:
            v = np.asarray(value, dtype=np.float64)
        except (TypeError, ValueError):
            return f"not a numeric vector: {_short(value)}"
        if v.ndim != 1 or len(v) == 0:
            return f"not a non-empty 1-D vector: {_short(value)}"
        if not np.isfinite(v).all():
            return "vector has a NaN or infinite element"
        if self.metric.needs_nonzero and not v.any():
            return f"zero vector has no direction for metric={self.name!r}"
        return None

    def check_threshold(self, threshold: Any) -> float:
        return check_vector_threshold(self.metric, threshold)

    def prepare(self, values: Sequence[Any]) -> np.ndarray:
        v = np.asarray(values, dtype=np.float64)
        return self.metric.prepare(v.reshape(len(values), -1) if len(values) else v.reshape(0, 1))

    def pairwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.metric.pairwise(a, b)

    def rowwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        return self.metric.rowwise(a, b) if len(a) else np.zeros(0)


class CallableSpace(Space):
    """A user metric ``f(a, b) -> float`` on two values (called once per pair, in Python)."""

    def __init__(self, fn: Callable[[Any, Any], float], name: str | None = None) -> None:
        self.fn = fn
        self.name = name or getattr(fn, "__name__", "user metric")

    def prepare(self, values: Sequence[Any]) -> np.ndarray:
        return object_array(values)

    def pairwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        f = self.fn
        return np.array([[float(f(x, y)) for y in b] for x in a], dtype=np.float64).reshape(len(a), len(b))

    def rowwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        f = self.fn
        return np.fromiter((float(f(x, y)) for x, y in zip(a, b)), np.float64, len(a))


class PairwiseSpace(Space):
    """A user metric given in vectorised form: ``pairwise(A, B)`` returns the ``(len(A), len(B))``
    distance matrix of two batches of values (see :func:`user_metric`).

    Values that are equal-length numeric sequences reach ``pairwise`` as a 2-D float array, any
    other values as a 1-D object array. ``rowwise(A, B)`` (optional) returns the distances of
    aligned rows; without it, index pairs are evaluated one ``pairwise`` call per distinct left value.
    """

    def __init__(self, pairwise: Callable[[Any, Any], Any], rowwise: Callable[[Any, Any], Any] | None = None,
                 name: str | None = None) -> None:
        self.fn = pairwise
        self.row_fn = rowwise
        self.name = name or getattr(pairwise, "__name__", "user metric")

    def prepare(self, values: Sequence[Any]) -> np.ndarray:
        try:
            v = np.asarray(values, dtype=np.float64)
            if v.ndim == 2 and len(v):
                return v
        except (TypeError, ValueError):
            pass
        return object_array(values)

    def pairwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if len(a) == 0 or len(b) == 0:
            return np.zeros((len(a), len(b)))
        d = np.asarray(self.fn(a, b), dtype=np.float64)
        if d.shape != (len(a), len(b)):
            raise ValueError(f"user metric {self.name!r}: pairwise(A, B) returned shape {d.shape} for "
                             f"{len(a)} x {len(b)} values; it must return the ({len(a)}, {len(b)}) distance matrix")
        return d

    def rowwise(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        if len(a) == 0:
            return np.zeros(0)
        if self.row_fn is not None:
            return np.asarray(self.row_fn(a, b), dtype=np.float64).reshape(len(a))
        return np.array([self.pairwise(a[k : k + 1], b[k : k + 1])[0, 0] for k in range(len(a))])

    def distances(self, a: np.ndarray, ia: np.ndarray, b: np.ndarray, ib: np.ndarray, cutoff: float | None = None) -> np.ndarray:
        if self.row_fn is not None or len(ia) == 0:
            return super().distances(a, ia, b, ib, cutoff)
        out = np.empty(len(ia))
        order = np.argsort(ia, kind="stable")
        firsts, starts = np.unique(ia[order], return_index=True)
        ends = np.append(starts[1:], len(order))
        for i, s0, s1 in zip(firsts.tolist(), starts.tolist(), ends.tolist()):
            k = order[s0:s1]
            out[k] = self.pairwise(a[i : i + 1], b[ib[k]])[0]
        return out


def user_metric(pairwise: Callable[[Any, Any], Any], *, rowwise: Callable[[Any, Any], Any] | None = None,
                name: str | None = None) -> PairwiseSpace:
    """A user metric in vectorised form, for ``similarity_join(metric=...)``.

    Parameters
    ----------
    pairwise : ``f(A, B)`` -> the ``(len(A), len(B))`` matrix of distances of two batches of values
        (2-D float arrays for vector columns, 1-D object arrays otherwise). It must be a metric:
        the join checks symmetry and the triangle inequality on a sample before it starts.
    rowwise : optional ``g(A, B)`` -> the distances of aligned rows ``A[k], B[k]``.
    name : how messages name the metric.

    Examples
    --------
    >>> import numpy as np
    >>> from driftjoin import user_metric
    >>> m = user_metric(lambda A, B: np.abs(A[:, None, 0] - B[None, :, 0]), name="first coordinate")
    >>> m.pairwise(m.prepare([[0.0], [3.0]]), m.prepare([[1.0]])).tolist()
    [[1.0], [2.0]]
    """
    return PairwiseSpace(pairwise, rowwise, name)


def get_space(metric: str | Space | Callable[[Any, Any], float], order: TokenOrder | None = None) -> Space:
    """The space of a ``metric=`` setting: a name, a :class:`Space` (e.g. :func:`user_metric`),
    or a Python callable ``f(a, b) -> float``."""
    if isinstance(metric, Space):
        return metric
    if callable(metric):
        return CallableSpace(metric)
    if not isinstance(metric, str):
        raise ValueError(f"metric must be a name, a callable f(a, b) -> float or driftjoin.user_metric(...), got {metric!r}")
    entry = lookup(metric)  # the one registry of names (driftjoin.metric_names)
    if entry.kind == STRING:
        return LevenshteinSpace()
    if entry.kind == SET:
        return JaccardSpace(order)
    return VectorSpace(entry.name)


def check_triangle(space: Space, values: Values, *, slack: float = 1e-9) -> None:
    """Refuse a user metric that is not one on a sample: a negative or asymmetric distance, or
    ``d(a, c) > d(a, b) + d(b, c)`` beyond a rounding slack (relative to the largest distance).
    The message names the violating values. About ``n^3`` additions for ``n`` sample values."""
    n = _len(values)
    if n == 0:
        return
    d = space.pairwise(values, values)
    tol = slack * max(1.0, float(np.nanmax(np.abs(d))) if d.size else 1.0)

    def show(i: int) -> str:
        return _short(_value_at(values, i))

    if not np.isfinite(d).all():
        i, j = np.argwhere(~np.isfinite(d))[0]
        raise ValueError(f"metric {space.name!r} is not a metric: d({show(i)}, {show(j)}) = {d[i, j]} is not finite")
    if (d < -tol).any():
        i, j = np.argwhere(d < -tol)[0]
        raise ValueError(f"metric {space.name!r} is not a metric: d({show(i)}, {show(j)}) = {d[i, j]} < 0")
    asym = np.abs(d - d.T) > tol
    if asym.any():
        i, j = np.argwhere(asym)[0]
        raise ValueError(f"metric {space.name!r} is not a metric: d(a, b) = {d[i, j]} but d(b, a) = {d[j, i]} "
                         f"for a={show(i)}, b={show(j)}")
    for j in range(n):
        bad = d > d[:, j : j + 1] + d[j : j + 1, :] + tol
        if bad.any():
            i, k = np.argwhere(bad)[0]
            raise ValueError(
                f"metric {space.name!r} violates the triangle inequality: d(a, c) = {d[i, k]} > "
                f"d(a, b) + d(b, c) = {d[i, j]} + {d[j, k]} for a={show(i)}, b={show(j)}, c={show(k)}; "
                "S3J's partitioning is exact only for a metric")


def _value_at(values: Values, i: int) -> Any:
    if isinstance(values, TokenSets):
        return set(values.tokens[i])
    return values[i]


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value.tolist() if isinstance(value, np.ndarray) else value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _real(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (Real, Integral)):
        raise ValueError(f"threshold must be a number (a distance), got {value!r}")
    return float(value)


def _len(values: Values) -> int:
    return len(values)


def _no_pairs() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0)


def _concat_pairs(parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if not parts:
        return _no_pairs()
    return (np.concatenate([p[0] for p in parts]).astype(np.int64), np.concatenate([p[1] for p in parts]).astype(np.int64),
            np.concatenate([p[2] for p in parts]).astype(np.float64))
