"""Compiled candidate enumeration of the similarity computation (numba).

:meth:`driftjoin.s3j.compute.SimilarityWorker.add` meets, per workset, ranges of members of two
runs (``a`` and ``b``). Enumerating every candidate pair as index arrays, filtering them by role
and stream, then gathering their vectors cost about 70% of the core's time (profiled: 25 M
candidates in a 2-D one-minute window). :func:`cross_candidates` does the same in one compiled
pass without materialising the candidates: role, stream and split-part rules, the comparisons
count per workset, and a distance test in the metric's *key space* (squared chord length for
angular and cosine, squared Euclidean, Manhattan, Chebyshev) against a bound with a relative
slack of 1e-9, so rounding can only keep a pair, never drop one. It returns the pairs that pass;
the exact test ``distance <= threshold`` on the user's metric (the oracle's function) is taken
afterwards on those, as before. Inner x inner pairs are always passed on (the t/2 bound makes
them pairs; the exact test only catches rounding).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from driftjoin.s3j.workset import INNER, OUTER

#: Distance kinds of the key space: squared L2, L1, L-infinity.
L2, L1, LINF = 0, 1, 2


@njit(cache=True)
def _key(a: np.ndarray, b: np.ndarray, kind: int) -> float:
    acc = 0.0
    if kind == L2:
        for k in range(a.shape[0]):
            d = a[k] - b[k]
            acc += d * d
    elif kind == L1:
        for k in range(a.shape[0]):
            acc += abs(a[k] - b[k])
    else:
        for k in range(a.shape[0]):
            d = abs(a[k] - b[k])
            if d > acc:
                acc = d
    return acc


@njit(cache=True)
def cross_candidates(a_vec: np.ndarray, a_role: np.ndarray, a_side: np.ndarray, a_start: np.ndarray, a_cnt: np.ndarray,
                     b_vec: np.ndarray, b_role: np.ndarray, b_side: np.ndarray, b_start: np.ndarray, b_cnt: np.ndarray,
                     cross: np.ndarray, triangle: bool, a_store: np.ndarray, two_stream: bool, kind: int,
                     limit: float, comparisons: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Pairs ``(i, j, group)`` of ``a[i]`` and ``b[j]`` in the same group range that may join.

    Group ``g`` pairs ``a[a_start[g] : a_start[g] + a_cnt[g]]`` with ``b[b_start[g] : ...]``.
    ``triangle``: ``a`` and ``b`` are the same rows (new members among themselves): only
    ``i < j`` with both ``a_store``. ``cross[g]``: a cross-part site of a split workset (only
    members of different parts pair). ``comparisons[g]`` is incremented per compared pair (all
    but inner x inner). ``limit``: the bound in the key space of ``kind``, slack included.
    """
    total = 0
    for g in range(len(a_start)):
        total += a_cnt[g] * b_cnt[g]
    cap = min(total, 1 << 20) if total > 0 else 1
    out_i = np.empty(cap, np.int64)
    out_j = np.empty(cap, np.int64)
    out_g = np.empty(cap, np.int64)
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
                inner = ra == INNER and rb == INNER
                if not inner:
                    comparisons[g] += 1
                    if _key(a_vec[i], b_vec[j], kind) > limit:
                        continue
                if n == cap:
                    cap *= 2
                    out_i = _grow(out_i, cap)
                    out_j = _grow(out_j, cap)
                    out_g = _grow(out_g, cap)
                out_i[n] = i
                out_j[n] = j
                out_g[n] = g
                n += 1
    return out_i[:n], out_j[:n], out_g[:n]


@njit(cache=True)
def _grow(a: np.ndarray, size: int) -> np.ndarray:
    out = np.empty(size, a.dtype)
    out[: len(a)] = a
    return out


def key_kind(metric_name: str) -> int:
    """The key-space distance of a metric (angular and cosine: squared chord of unit vectors)."""
    return {"manhattan": L1, "chebyshev": LINF}.get(metric_name, L2)


def key_limit(metric, threshold: float) -> float:
    """The key-space bound of ``threshold`` with a relative slack of 1e-9 (never drops a pair)."""
    from driftjoin.distance import BOUND_SLACK

    partition = metric.partition_metric
    bound = partition.key_threshold(metric.partition_threshold(threshold)) * (1.0 + BOUND_SLACK)
    return bound * bound if key_kind(metric.name) == L2 else bound


def warm_up() -> None:
    """Compile the kernel into numba's on-disk cache (setup runs this once)."""
    z = np.zeros(1, np.int64)
    v = np.zeros((1, 1))
    r = np.zeros(1, np.int8)
    cross_candidates(v, r, r, z, z, v, r, r, z, z, np.zeros(1, np.bool_), False, np.ones(1, np.bool_), False, L2, 1.0, z.copy())
