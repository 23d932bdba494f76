"""Compiled merge of sorted code lists for prefix filtering (numba): imported by the prefix worker
only (a router never pays numba's import)."""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def prefix_candidates(ip_a: np.ndarray, codes_a: np.ndarray, ip_b: np.ndarray, codes_b: np.ndarray,
                      ra: np.ndarray, rb: np.ndarray, pa: np.ndarray, pb: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """For candidate k, set ``ra[k]`` of a met at its position ``pa[k]`` and set ``rb[k]`` of b at
    ``pb[k]``, with sizes ``n``, ``m`` and ``need = alpha[n + m]`` (the least joining overlap):
    whether the codes at the two positions are equal, ``min(n - pa, m - pb) >= need`` (size and
    position filter), the sets share no code before those positions (the meeting code is their
    first common prefix code) and share at least ``need`` codes in all (counted with
    multiplicity). Code lists are sorted ascending."""
    out = np.zeros(len(ra), dtype=np.bool_)
    for k in range(len(ra)):
        n = ip_a[ra[k] + 1] - ip_a[ra[k]]
        m = ip_b[rb[k] + 1] - ip_b[rb[k]]
        need = alpha[n + m]
        if min(n - pa[k], m - pb[k]) < need or codes_a[ip_a[ra[k]] + pa[k]] != codes_b[ip_b[rb[k]] + pb[k]]:
            continue
        i, i_end = ip_a[ra[k]], ip_a[ra[k]] + pa[k]
        j, j_end = ip_b[rb[k]], ip_b[rb[k]] + pb[k]
        common = False
        while i < i_end and j < j_end:
            x, y = codes_a[i], codes_b[j]
            if x == y:
                common = True
                break
            if x < y:
                i += 1
            else:
                j += 1
        if common:
            continue
        i, i_end = i_end, ip_a[ra[k] + 1]
        j, j_end = j_end, ip_b[rb[k] + 1]
        o = 0
        while i < i_end and j < j_end:
            if o + min(i_end - i, j_end - j) < need:
                break
            x, y = codes_a[i], codes_b[j]
            if x == y:
                o += 1
                i += 1
                j += 1
            elif x < y:
                i += 1
            else:
                j += 1
        out[k] = o >= need
    return out
