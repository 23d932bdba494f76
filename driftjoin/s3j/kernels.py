"""Compiled candidate enumeration of the similarity computation (numba).

:meth:`driftjoin.s3j.compute.SimilarityWorker.add` meets, per workset, ranges of members of two
runs (``a`` and ``b``). Enumerating every candidate pair as index arrays, filtering them by role
and stream, then gathering their vectors cost about 70% of the core's time (profiled: 25 M
candidates in a 2-D one-minute window). :func:`cross_candidates` does the same in one compiled
pass without materialising the candidates: role, stream and split-part rules, the comparisons
count per workset, and the distance on the user's metric computed by the same formula as
:meth:`driftjoin.distance.Metric.rowwise`. A pair is *in* when its distance is below
``threshold * (1 - 1e-9)`` and *out* above ``threshold * (1 + 1e-9)``; a pair in between (a
distance within a billionth of the threshold, where a different summation order could round the
other way) is *unsure* and the caller decides it with the oracle's own function, so rounding
can never add or drop a pair. Inner x inner pairs are in without a comparison (the t/2 bound)
unless their distance rounds above the threshold, exactly as before.

Interval joins (``interval=True``): before anything else is counted or computed, a pair of
copies must be one the window accepts (:meth:`driftjoin.windows.Windowing.accept`): never two
ghost copies, and times (integer ticks) at most ``within`` apart. The test is exact integer
arithmetic and applies to every pair the loop meets, inner x inner bound pairs included.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

from driftjoin.s3j.workset import INNER, OUTER

#: Metrics the kernel computes (``Metric.rowwise`` formulas on prepared vectors).
EUCLIDEAN, MANHATTAN, CHEBYSHEV, ANGULAR, COSINE = 0, 1, 2, 3, 4
#: Relative margin around the threshold inside which the exact reference decides.
MARGIN = 1e-9


@njit(cache=True, inline="always")
def _distance(a: np.ndarray, i: int, b: np.ndarray, j: int, metric: int) -> float:
    acc = 0.0
    if metric == MANHATTAN:
        for k in range(a.shape[1]):
            acc += abs(a[i, k] - b[j, k])
        return acc
    if metric == CHEBYSHEV:
        for k in range(a.shape[1]):
            d = abs(a[i, k] - b[j, k])
            if d > acc:
                acc = d
        return acc
    for k in range(a.shape[1]):
        d = a[i, k] - b[j, k]
        acc += d * d
    chord = math.sqrt(acc)
    if metric == ANGULAR:
        return 2.0 * math.asin(min(chord * 0.5, 1.0)) / math.pi
    if metric == COSINE:
        return 0.5 * chord * chord
    return chord


@njit(cache=True)
def cross_candidates(a_vec: np.ndarray, a_role: np.ndarray, a_side: np.ndarray, a_time: np.ndarray, a_ghost: np.ndarray,
                     a_start: np.ndarray, a_cnt: np.ndarray, b_vec: np.ndarray, b_role: np.ndarray, b_side: np.ndarray,
                     b_time: np.ndarray, b_ghost: np.ndarray, b_start: np.ndarray, b_cnt: np.ndarray, cross: np.ndarray,
                     triangle: bool, a_store: np.ndarray, two_stream: bool, interval: bool, within: int, metric: int,
                     threshold: float, comparisons: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(i, j, group, distance, unsure)`` of ``a[i]`` and ``b[j]`` that join (or may: unsure).

    Group ``g`` pairs ``a[a_start[g] : a_start[g] + a_cnt[g]]`` with ``b[b_start[g] : ...]``.
    ``triangle``: ``a`` and ``b`` are the same rows (new members among themselves): only
    ``i < j`` with both ``a_store``. ``cross[g]``: a cross-part site of a split workset (only
    members of different parts pair). ``interval``: only pairs the interval window accepts
    (``a_time``/``b_time`` ticks, ``a_ghost``/``b_ghost``; unread otherwise, may be empty).
    ``comparisons[g]`` is incremented per compared pair (all but inner x inner).
    """
    lo = threshold * (1.0 - MARGIN)
    hi = threshold * (1.0 + MARGIN)
    total = 0
    for g in range(len(a_start)):
        total += a_cnt[g] * b_cnt[g]
    cap = max(1, min(total, 1 << 20))
    out_i = np.empty(cap, np.int64)
    out_j = np.empty(cap, np.int64)
    out_g = np.empty(cap, np.int64)
    out_d = np.empty(cap, np.float64)
    out_u = np.empty(cap, np.bool_)
    n = 0
    for g in range(len(a_start)):
        for i in range(a_start[g], a_start[g] + a_cnt[g]):
            ra = a_role[i] & 3
            pa = a_role[i] >> 2
            if triangle and not a_store[i]:
                continue
            for j in range(b_start[g], b_start[g] + b_cnt[g]):
                if triangle and (j <= i or not a_store[j]):
                    continue
                rb = b_role[j] & 3
                if ra == OUTER and rb == OUTER:
                    continue
                if two_stream and a_side[i] == b_side[j]:
                    continue
                if cross[g] and pa == (b_role[j] >> 2):
                    continue
                if interval:
                    if a_ghost[i] and b_ghost[j]:
                        continue
                    dt = a_time[i] - b_time[j]
                    if dt > within or dt < -within:
                        continue
                if not (ra == INNER and rb == INNER):
                    comparisons[g] += 1
                d = _distance(a_vec, i, b_vec, j, metric)
                if d > hi:
                    continue
                if n == cap:
                    cap *= 2
                    out_i, out_j, out_g = _grow(out_i, cap), _grow(out_j, cap), _grow(out_g, cap)
                    out_d, out_u = _grow(out_d, cap), _grow(out_u, cap)
                out_i[n] = i
                out_j[n] = j
                out_g[n] = g
                out_d[n] = d
                out_u[n] = d >= lo
                n += 1
    return out_i[:n], out_j[:n], out_g[:n], out_d[:n], out_u[:n]


@njit(cache=True)
def _grow(a: np.ndarray, size: int) -> np.ndarray:
    out = np.empty(size, a.dtype)
    out[: len(a)] = a
    return out


METRIC_CODES = {"euclidean": EUCLIDEAN, "manhattan": MANHATTAN, "chebyshev": CHEBYSHEV, "angular": ANGULAR, "cosine": COSINE}


def warm_up() -> None:
    """Compile the kernel into numba's on-disk cache (setup runs this once)."""
    z = np.zeros(1, np.int64)
    v = np.zeros((1, 1))
    r = np.zeros(1, np.int8)
    g = np.zeros(1, np.bool_)
    cross_candidates(v, r, r, z, g, z, z, v, r, r, z, g, z, z, g, False, np.ones(1, np.bool_), False, False, 0,
                     EUCLIDEAN, 1.0, z.copy())
