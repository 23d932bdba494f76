"""Pick the distance threshold that gives a target join selectivity on a sample.

The paper states its experiments in selectivity (10%, 5%, 1%, 0.5%, 0.1%): the fraction of
candidate pairs that join, ``pairs / (|L| * |R|)`` for two streams and
``pairs / (n (n - 1) / 2)`` for a self-join. The threshold is the ``k``-th smallest of the ``N``
pairwise distances of a sample, ``k = ceil(s N)`` computed exactly with ``s`` the number the user
wrote (:func:`driftjoin.metric.exact.exact_value`: ``0.07`` is ``7/100``, so 7 of 100 pairs, where
``0.07 * 100`` is ``7.000000000000001`` in floats and a float quantile takes the 8th). The distances
are the metric's own float function, the one the join compares with the threshold, so at that
threshold at least ``k`` sampled pairs join and at any smaller one fewer do. A ``k``-th distance of
0 (duplicates) is not a valid threshold; half the smallest positive distance joins the same pairs.

A streaming DataFrame cannot be collected; its sample is the first records the stream delivers:
a short-lived query (into a memory sink, its own temporary checkpoint) reads until
it has enough vectors, the source has nothing more, or ``timeout`` seconds pass. For a source
that starts at its end (Kafka with ``startingOffsets=latest``) that means waiting for new
records; a static DataFrame of the same data, or an array, avoids it.
"""

from __future__ import annotations

import math
import shutil
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from driftjoin.distance import get_metric
from driftjoin.metric.exact import exact_value


def _stream_sample(vectors: Any, n: int, timeout: float) -> list:
    """The first ``n`` non-null vectors of a streaming DataFrame of one column ``v``.

    The sample goes to a memory sink, which lives with the driver and is read back as a table:
    that works on a classic session and on Spark Connect alike (a ``foreachBatch`` function runs
    on the Connect server, where it could not hand rows to this process). The stream's own
    ``limit`` keeps the table at ``n`` rows however large its first batches are."""
    spark = vectors.sparkSession
    name = f"driftjoin_sample_{uuid.uuid4().hex}"
    checkpoint = tempfile.mkdtemp(prefix="driftjoin-sample-")
    query = (vectors.limit(n).writeStream.format("memory").queryName(name).option("checkpointLocation", checkpoint)
             .trigger(processingTime="200 milliseconds").start())
    try:
        deadline, idle, have = time.time() + timeout, 0, 0
        while have < n and time.time() < deadline and query.isActive and idle < 3:
            time.sleep(0.2)
            last = query.lastProgress
            have = spark.table(name).count()
            # three empty batches after the first data: a bounded source (files) has no more
            idle = idle + 1 if have and last and last["numInputRows"] == 0 else 0
        if query.exception() is not None:
            raise query.exception()
        query.stop()
        return [r["v"] for r in spark.table(name).limit(n).collect()]
    finally:
        query.stop()
        spark.catalog.dropTempView(name)
        shutil.rmtree(checkpoint, ignore_errors=True)


def _as_matrix(data: Any, vector_col: str, sample: int, seed: int, timeout: float) -> np.ndarray:
    if hasattr(data, "sparkSession"):
        from driftjoin.spark.similarity.inputs import vector_column

        vectors = data.select(vector_column(data, vector_col).alias("v")).where("v is not null")
        if data.isStreaming:
            data = _stream_sample(vectors, sample * 4, timeout)
            if len(data) < 2:
                raise ValueError(f"the stream delivered {len(data)} vector(s) in {timeout:g} s, too few for a sample: raise "
                                 "timeout=, or pass a static DataFrame (spark.read instead of spark.readStream) or an array")
        else:
            data = [r["v"] for r in vectors.limit(sample * 4).collect()]
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
    timeout: float = 60.0,
) -> float:
    """The smallest threshold whose join selectivity on a sample reaches ``selectivity``.

    The selectivity of a join is the fraction of all pairs it returns; a threshold is easier to
    choose as "0.1% of pairs" than as a distance, which depends on the data and the metric.

    Parameters
    ----------
    left, right:
        2-D arrays of vectors, or DataFrames: static (a sample is collected) or streaming (the
        first ``4 x sample`` records are read by a short query, for at most ``timeout``
        seconds; a source that starts at its end, such as Kafka with ``latest``, needs new
        records). ``right=None``: the pairs of ``left`` with itself.
    selectivity:
        The fraction of pairs that should join, in (0, 1], e.g. 0.001 for 0.1%.
    metric:
        The distance, as given to ``similarity_join``.
    vector_col:
        The vector column of DataFrame inputs.
    sample:
        Vectors per side the threshold is estimated on.
    seed:
        The seed of the sample.
    timeout:
        Seconds a streaming input is read for at most.

    Returns
    -------
    float
        The threshold (a distance) to pass to ``similarity_join``.

    Examples
    --------
    >>> import numpy as np
    >>> from driftjoin import choose_threshold
    >>> rng = np.random.default_rng(0)
    >>> t = choose_threshold(rng.normal(size=(500, 2)), rng.normal(size=(500, 2)), selectivity=0.01, metric="euclidean")
    >>> 0 < t < 1
    True
    """
    if not 0 < selectivity <= 1:
        raise ValueError(f"selectivity must be in (0, 1], e.g. 0.001 for 0.1%, got {selectivity}")
    m = get_metric(metric)
    a = m.prepare(_as_matrix(left, vector_col, sample, seed, timeout))
    if right is None:
        d = m.pairwise(a, a)[np.triu_indices(len(a), k=1)]
    else:
        b = m.prepare(_as_matrix(right, vector_col, sample, seed + 1, timeout))
        d = m.pairwise(a, b).ravel()
    k = max(1, math.ceil(exact_value(selectivity) * len(d)))  # pairs that must join
    t = float(np.partition(d, k - 1)[k - 1])
    if t > 0:
        return t
    return float(np.min(d[d > 0])) / 2 if np.any(d > 0) else 1e-12
