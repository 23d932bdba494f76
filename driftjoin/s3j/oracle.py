"""Brute-force oracle: every pair of the same window with distance <= threshold."""

from __future__ import annotations

import numpy as np

from driftjoin.distance import Metric


def oracle_pairs(
    ids: np.ndarray,
    side: np.ndarray,
    vec: np.ndarray,
    window: np.ndarray,
    metric: Metric,
    threshold: float,
    self_join: bool,
) -> set[tuple]:
    """The exact join result as a set of ``(left_id, right_id, window)``.

    ``vec`` must already be prepared for the metric. A self-join gives each unordered pair
    once with ``left_id < right_id``; a two-stream join gives (left=side 0, right=side 1).
    """
    out: set[tuple] = set()
    for w in np.unique(window):
        sel = np.nonzero(window == w)[0]
        if self_join:
            a = b = sel
        else:
            a, b = sel[side[sel] == 0], sel[side[sel] == 1]
        if len(a) == 0 or len(b) == 0:
            continue
        dist = metric.pairwise(vec[a], vec[b])
        ia, ib = np.nonzero(dist <= threshold)
        for i, j in zip(a[ia].tolist(), b[ib].tolist()):
            if self_join:
                if i == j or ids[i] == ids[j]:
                    continue
                lo, hi = (ids[i], ids[j]) if ids[i] < ids[j] else (ids[j], ids[i])
                out.add((lo, hi, int(w)))
            else:
                out.add((ids[i], ids[j], int(w)))
    return out
