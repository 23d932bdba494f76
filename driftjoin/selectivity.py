"""Pick the distance threshold that gives a target join selectivity on a sample.

The paper states its experiments in selectivity (10%, 5%, 1%, 0.5%, 0.1%): the fraction of
candidate pairs that join, ``pairs / (|L| * |R|)`` for two streams and
``pairs / (n (n - 1) / 2)`` for a self-join. The threshold is the selectivity-quantile of the
pairwise distances of a sample.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from driftjoin.distance import get_metric


def _as_matrix(data: Any, vector_col: str, sample: int, seed: int) -> np.ndarray:
    if hasattr(data, "sparkSession"):
        from driftjoin.spark.similarity import _vector_column

        rows = data.select(_vector_column(data, vector_col).alias("v")).where("v is not null").limit(sample * 4).collect()
        data = [r["v"] for r in rows]
    mat = np.asarray(data, dtype=np.float64)
    if mat.ndim != 2 or len(mat) < 2:
        raise ValueError("choose_threshold needs at least two vectors (a 2-D array or a DataFrame)")
    if len(mat) > sample:
        mat = mat[np.random.default_rng(seed).choice(len(mat), sample, replace=False)]
    return mat


def choose_threshold(
    left: Any,
    right: Any = None,
    *,
    selectivity: float,
    metric: str = "angular",
    vector_col: str = "vector",
    sample: int = 2000,
    seed: int = 0,
) -> float:
    """The smallest threshold whose join selectivity on the sample reaches ``selectivity``.

    ``left``/``right`` are 2-D arrays of vectors or DataFrames (a sample is collected).
    """
    if not 0 < selectivity <= 1:
        raise ValueError(f"selectivity must be in (0, 1], e.g. 0.001 for 0.1%, got {selectivity}")
    m = get_metric(metric)
    a = m.prepare(_as_matrix(left, vector_col, sample, seed))
    if right is None:
        d = m.pairwise(a, a)[np.triu_indices(len(a), k=1)]
    else:
        b = m.prepare(_as_matrix(right, vector_col, sample, seed + 1))
        d = m.pairwise(a, b).ravel()
    t = float(np.quantile(d, selectivity, method="inverted_cdf"))
    return t if t > 0 else float(np.min(d[d > 0])) if np.any(d > 0) else 1e-12
