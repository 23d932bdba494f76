"""Compiled scan of pivot filtering (numba): the candidate pairs of two runs of a pivot worker
whose distances to every pivot are within the threshold (:mod:`driftjoin.metric.pivots`).
Imported by the pivot worker only (a router never pays numba's import)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def pivot_scan(vec_a: np.ndarray, cls_a: np.ndarray, lo: np.ndarray, hi: np.ndarray, tail: int, vec_b: np.ndarray,
               cls_b: np.ndarray, same: bool, self_join: bool, t: float, slack: float):
    """Pairs ``(i, j)`` of entries ``i`` of run a and ``j`` of run b that may join: ``j`` in
    ``[lo[i], hi[i])`` or in ``[tail, len(b))`` (b's entries whose first coordinate is not finite),
    ``j > i`` when the runs are the same (``same``), never two outer entries (class bit 0), in a
    two-stream join different sides (class bit 1), and no pivot ``p`` with
    ``|vec_a[i, p] - vec_b[j, p]| > t + slack * (1 + t + vec_a[i, p] + vec_b[j, p])`` (the pivot
    bound; a NaN difference never prunes). Returns ``(ia, ib, scanned)``, ``scanned`` the pairs
    whose bounds were checked."""
    na, k = vec_a.shape
    nb = vec_b.shape[0]
    out_a = np.empty(1024, np.int64)
    out_b = np.empty(1024, np.int64)
    n = 0
    scanned = 0
    for i in range(na):
        ca = cls_a[i]
        first = i + 1 if same else 0
        s0 = max(lo[i], first)
        s1 = hi[i]
        t0 = max(tail, s1, first)
        for span in range(2):
            j0 = s0 if span == 0 else t0
            j1 = s1 if span == 0 else nb
            for j in range(j0, j1):
                cb = cls_b[j]
                if (ca & 1) == 1 and (cb & 1) == 1:
                    continue
                if not self_join and (ca >> 1) == (cb >> 1):
                    continue
                scanned += 1
                keep = True
                for p in range(k):
                    x = vec_a[i, p]
                    y = vec_b[j, p]
                    if abs(x - y) > t + slack * (1.0 + t + x + y):
                        keep = False
                        break
                if keep:
                    if n == out_a.shape[0]:
                        grown_a = np.empty(2 * n, np.int64)
                        grown_b = np.empty(2 * n, np.int64)
                        grown_a[:n] = out_a
                        grown_b[:n] = out_b
                        out_a = grown_a
                        out_b = grown_b
                    out_a[n] = i
                    out_b[n] = j
                    n += 1
    return out_a[:n], out_b[:n], scanned
