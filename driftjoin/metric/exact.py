"""Exact thresholds: the number a threshold stands for, and Jaccard distance decided in integers.

**The number a threshold stands for.** A Jaccard distance is a ratio of integers, so whether a pair
sits at or beyond a threshold is a question about exact numbers; asking it in binary floating point
loses pairs (``1 - 7/10`` is ``0.30000000000000004`` in float64 and fails ``<= 0.3``). The join
therefore compares exact values, with the threshold taken as the number the user wrote:

- a ``float`` (or a numpy float) stands for the *simplest fraction that rounds to it* (smallest
  denominator): ``0.3`` is ``3/10`` (not the binary ``0.29999999999999998889...``, which is below
  it), ``0.1`` is ``1/10`` (not ``0.10000000000000000555...``, above it), ``0.25`` is ``1/4`` and
  ``1/3`` is ``1/3`` (not the decimal ``0.3333333333333333`` it prints as). For a decimal of at
  most 8 digits after the point this is that decimal, however it reached the join (typed in
  Python, read from a TOML job file or from JSON);
- an ``int``, a :class:`fractions.Fraction` or a :class:`decimal.Decimal` is the exact number it
  is (``Decimal("0.3333")`` is 3333/10000).

For a float threshold this rule has a second, equivalent reading, which is how it is decided: *a
pair joins when its exact distance, rounded to the nearest float, is at most the threshold*. (At
most one Jaccard distance rounds to a given float, see below; when one does, it is the simplest
fraction rounding to that float, since any other fraction there would have to be at least
``2^-52`` away from it.) :class:`Threshold` carries the exact number through the code that
expects a float (arithmetic, messages, settings stored with a checkpoint see the nearest float;
the cores read ``exact``).

**Jaccard distance in integers.** For sets of sizes ``n``, ``m`` with overlap ``o`` the distance
is ``d = (u - o) / u`` with the union ``u = n + m - o``. With the exact radius ``r < 1`` and
``s = 1 - r = a / b`` (integers ``a > 0``, ``b``)::

    d <= r  <=>  o >= s u = s (n + m - o)  <=>  o (a + b) >= a (n + m)  <=>  o >= alpha(n + m),

``alpha(T) = ceil(a T / (a + b))``, the least joining overlap of two sets whose sizes add up to
``T`` (:func:`least_overlap`). A set of size ``n`` joins no partner with fewer than
``ceil(a n / b)`` shared tokens (:func:`least_partner_overlap`: the best partner is a subset,
``m = o``, and a larger one needs more). Both are integer arithmetic on Python ints, so every
filter bound built on them (prefix length, size and position filters,
:mod:`driftjoin.metric.prefix`) is the exact predicate's.

**Jaccard distances as floats.** A reported distance is ``(u - o) / u`` computed as one float64
division of two exactly represented integers: the float nearest to the exact value (IEEE 754
division is correctly rounded). Sets hold at most :data:`MAX_SET_SIZE` tokens
(:func:`driftjoin.swoop.records.validate_tokens`), so unions are at most ``2^26``; two distinct
distances then differ by at least ``2^-52`` (denominators at most ``2^26``) while a float is
within ``2^-54`` of its exact value, so the float determines the exact distance
(:func:`jaccard_of_float`: the closest fraction with such a denominator) and rounding keeps the
order. :func:`jaccard_le` decides ``d <= r`` from floats: a float below (above) the float of ``r``
is an exact distance below (above) ``r``, and the one float equal to it is decided exactly. The
S3J bounds over Jaccard (inner sets ``r/2``, outer sets ``2r``, Criterion 1) use it
(:class:`driftjoin.metric.spaces.JaccardSpace`).
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache
from numbers import Integral, Rational, Real
from typing import Any

import numpy as np

from driftjoin.swoop.records import MAX_SET_SIZE

#: Largest union of two valid sets (the denominator of a Jaccard distance).
MAX_UNION = 2 * MAX_SET_SIZE


def exact_value(value: Any) -> Fraction:
    """The exact number a threshold stands for (module docstring).

    Parameters
    ----------
    value : an ``int``, a ``float`` (the simplest fraction that rounds to it), a ``Fraction``, a
        ``Decimal``, a numpy number or a :class:`Threshold`.

    Example::

        >>> exact_value(0.3), exact_value(1e-3), exact_value(1 / 3), exact_value(Decimal("0.30"))
        (Fraction(3, 10), Fraction(1, 1000), Fraction(1, 3), Fraction(3, 10))
    """
    if isinstance(value, Threshold):
        return value.exact
    if isinstance(value, bool) or not isinstance(value, (Real, Decimal)):
        raise ValueError(f"threshold must be a number, got {value!r}")
    if isinstance(value, Fraction):
        return value
    if isinstance(value, Integral):
        return Fraction(int(value))
    if isinstance(value, Rational):
        return Fraction(int(value.numerator), int(value.denominator))
    if isinstance(value, Decimal):
        if not value.is_finite():
            raise ValueError(f"threshold must be finite, got {value!r}")
        return Fraction(value)
    if isinstance(value, np.floating) and value.dtype.itemsize < 8:
        return _simplest_rounding_to(float(value), float(np.nextafter(value, -np.inf)),
                                     float(np.nextafter(value, np.inf)))
    value = float(value)
    if not math.isfinite(value):
        raise ValueError(f"threshold must be finite, got {value!r}")
    return _simplest_rounding_to(value, math.nextafter(value, -math.inf), math.nextafter(value, math.inf))


@lru_cache(maxsize=256)
def _simplest_rounding_to(value: float, below: float, above: float) -> Fraction:
    """The fraction of smallest denominator among the reals that round to ``value`` (whose float
    neighbours are ``below`` and ``above``): the closed interval between the two midpoints. Its
    ends have a larger denominator than ``value`` itself, so whether rounding keeps them does not
    matter."""
    if value < 0:
        return -_simplest_rounding_to(-value, -above, -below)
    x = Fraction(value)
    lo = (Fraction(below) + x) / 2 if below >= 0 else Fraction(0)
    hi = (x + Fraction(above)) / 2 if math.isfinite(above) else x
    return _simplest_between(lo, hi)


def _simplest_between(lo: Fraction, hi: Fraction) -> Fraction:
    """The fraction of smallest denominator (the smallest such) in ``[lo, hi]``, ``0 <= lo <= hi``:
    the shallowest node of the Stern-Brocot tree there, by continued fractions."""
    whole = math.floor(lo)
    if whole == lo:
        return Fraction(whole)
    if whole + 1 <= hi:
        return Fraction(whole + 1)
    return whole + 1 / _simplest_between(1 / (hi - whole), 1 / (lo - whole))


class Threshold(float):
    """A threshold: the float nearest to the exact number it stands for (what arithmetic, messages
    and stored settings see), keeping that number in ``exact`` (module docstring).

    Example::

        >>> t = Threshold(0.3)
        >>> t == 0.3, t.exact, Threshold(1 / 3).exact, Threshold(Decimal("0.3000000000000000001"))
        (True, Fraction(3, 10), Fraction(1, 3), Threshold(3000000000000000001/10000000000000000000))
    """

    exact: Fraction

    def __new__(cls, value: Any) -> "Threshold":
        exact = exact_value(value)
        self = super().__new__(cls, float(exact))  # float(Fraction) rounds to nearest
        self.exact = exact
        return self

    def __reduce__(self) -> tuple:
        return Threshold, (self.exact,)

    def __repr__(self) -> str:
        return f"Threshold({float.__repr__(self) if exact_value(float(self)) == self.exact else self.exact})"


def _ratio(radius: Any) -> tuple[int, int]:
    """``(a, b)`` with ``1 - r = a / b``, ``a <= 0`` when every pair joins (``r >= 1``)."""
    s = 1 - exact_value(radius)
    return s.numerator, s.denominator


def least_overlap(radius: Any, total: Any) -> Any:
    """The least overlap with which two sets whose sizes add up to ``total`` (an int or an array of
    them) are within Jaccard distance ``radius``: ``ceil(a T / (a + b))`` (module docstring); 0
    when every pair joins.

    Example::

        >>> least_overlap(0.3, 17), least_overlap(0.3, 20), least_overlap(0.5, np.array([8, 9])).tolist()
        (7, 9, [3, 3])
    """
    a, b = _ratio(radius)
    return _ceil_scaled(total, a, a + b)


def least_partner_overlap(radius: Any, n: Any) -> Any:
    """The least overlap any partner needs with a set of size ``n`` (an int or an array of them) to
    be within ``radius``: ``ceil(a n / b)`` (its best partner is a subset of it).

    Example::

        >>> least_partner_overlap(0.3, 10), least_partner_overlap(0.3, np.array([11, 20])).tolist()
        (7, [8, 14])
    """
    a, b = _ratio(radius)
    return _ceil_scaled(n, a, b)


def _ceil_scaled(x: Any, a: int, b: int) -> Any:
    """``ceil(a x / b)`` in exact integer arithmetic (``a``, ``b`` may exceed 64 bits), 0 for ``a <= 0``."""
    if a <= 0:
        return np.zeros(np.shape(x), np.int64) if np.ndim(x) else 0
    if np.ndim(x):
        return np.array([-(-a * v // b) for v in np.asarray(x).tolist()], np.int64).reshape(np.shape(x))
    return -(-a * int(x) // b)


def jaccard_distance(size_a: np.ndarray, size_b: np.ndarray, overlap: np.ndarray) -> np.ndarray:
    """``(u - o) / u``, ``u = |A| + |B| - o``: the float64 nearest to the exact distance (one
    division of exact integers).

    Example::

        >>> jaccard_distance(np.array([10]), np.array([10]), np.array([7])).tolist()  # 6 / 13
        [0.46153846153846156]
    """
    n, m, o = (np.asarray(x, np.int64) for x in (size_a, size_b, overlap))
    union = n + m - o
    return (union - o) / union


def jaccard_of_float(d: float) -> Fraction:
    """The exact Jaccard distance whose float is ``d`` (module docstring).

    Example::

        >>> jaccard_of_float(3 / 10), jaccard_of_float(4 / 11)
        (Fraction(3, 10), Fraction(4, 11))
    """
    return Fraction(d).limit_denominator(MAX_UNION)


def jaccard_le(d: np.ndarray, radius: Any) -> np.ndarray:
    """Whether the exact Jaccard distances whose floats (:func:`jaccard_distance`) are ``d`` are at
    most ``radius`` (module docstring).

    Example::

        >>> d = jaccard_distance(np.array([7, 8, 9]), np.array([10, 9, 9]), np.array([7, 7, 7]))  # 3/10, 3/10, 4/11
        >>> jaccard_le(d, 0.3).tolist(), jaccard_le(d, Fraction(29, 100)).tolist()
        ([True, True, False], [False, False, False])
    """
    d = np.asarray(d, np.float64)
    r = exact_value(radius)
    f = float(r)
    out = d < f
    for k in np.flatnonzero(d == f).tolist():
        out.flat[k] = jaccard_of_float(float(d.flat[k])) <= r
    return out


#: Rows of :func:`jaccard_le_sum` whose float test is this close to the bound are decided exactly
#: (the float test errs by a few 2^-53 at most: three values of magnitude <= 2, two subtractions).
_SUM_NEAR = 1e-12


def jaccard_le_sum(d: np.ndarray, base: np.ndarray, radius: Any) -> np.ndarray:
    """Whether exact Jaccard distances are at most ``base + radius`` (both distances given as
    floats of :func:`jaccard_distance`, ``base`` broadcast against ``d``): S3J's Criterion 1.

    Example::

        >>> jaccard_le_sum(np.array([0.7, 0.71]), np.array([0.1, 0.1]), 0.6).tolist()
        [True, False]
    """
    d, base = np.broadcast_arrays(np.asarray(d, np.float64), np.asarray(base, np.float64))
    r = exact_value(radius)
    gap = d - base - float(r)
    out = gap < 0
    for k in zip(*np.nonzero(np.abs(gap) <= _SUM_NEAR)):
        out[k] = jaccard_of_float(float(d[k])) <= jaccard_of_float(float(base[k])) + r
    return out
