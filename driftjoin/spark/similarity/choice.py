"""``algorithm="auto"``: which exact method a similarity join runs, decided before the start.

The estimate itself is the core's (:func:`driftjoin.grid.choice.estimate`: S3J's copies and
compared pairs against the grid's screened pairs on a sample, counts not timings, so the same
input and settings give the same choice on every run). This module gets the sample from Spark
(the first rows of a static input, or ``sample=``), logs the choice, records it beside the
statistics (``metrics_dir/plan/algorithm.json``, :func:`read_choice`) and builds the grid's plan
when the grid is chosen.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
from pyarrow import fs as pafs
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.distance import get_metric
from driftjoin.grid.choice import Choice, by_dimension, estimate, forced, sample_rows
from driftjoin.grid.layout import choose_layout
from driftjoin.spark.runtime.files import filesystem, write_whole
from driftjoin.spark.runtime.queries import AUTO
from driftjoin.spark.similarity.grid import GridPlan
from driftjoin.spark.similarity.inputs import vector_column

log = logging.getLogger("driftjoin")

def sample_matrix(sample: Any, vector_col: str, dim: int) -> np.ndarray:
    """``sample=`` as a matrix: an array of vectors or a static DataFrame (its first rows)."""
    if hasattr(sample, "sparkSession"):
        if sample.isStreaming:
            raise ValueError("sample= must be a static DataFrame or an array of vectors, not a stream")
        sample = collect_vectors(sample, vector_col, dim)
    mat = np.asarray(sample, dtype=np.float64)
    if mat.ndim != 2 or mat.shape[1] != dim:
        raise ValueError(f"sample= must hold vectors of dimension {dim} (rows x {dim}), got shape {mat.shape}")
    return mat


def collect_vectors(df: Any, vector_col: str, dim: int) -> np.ndarray:
    rows = df.select(vector_column(df, vector_col).alias("v")).where(F.size("v") == dim).limit(sample_rows(dim)).collect()
    return np.array([[np.nan if x is None else x for x in r["v"]] for r in rows], dtype=np.float64).reshape(-1, dim)


def choose(left: Any, right: Any, *, algorithm: str, metric: str, threshold: float, dim: int, parallelism: int,
           centroids: np.ndarray, vector_col: str, sample: Any, seed: int, metrics_dir: str | None) -> Choice:
    """Resolve ``algorithm`` (``auto``, ``grid`` or ``s3j``) into a logged, recorded :class:`Choice`."""
    if algorithm != "auto":
        choice = forced(algorithm, dim, parallelism)
    elif sample is not None or not left.isStreaming:
        if sample is not None:
            mat = sample_matrix(sample, vector_col, dim)
            rows = sample.count() if hasattr(sample, "sparkSession") else len(mat)
        else:
            inputs = [df for df in (left, right) if df is not None]
            mat = np.vstack([collect_vectors(df, vector_col, dim) for df in inputs])
            rows = sum(df.count() for df in inputs)  # the one window of a static input
        choice = estimate(mat, get_metric(metric), threshold, parallelism=parallelism, self_join=right is None,
                          centroids=centroids, seed=seed, rows=rows)
    else:
        choice = by_dimension(dim, parallelism)
    log.info("similarity_join algorithm=%s: %s", choice.algorithm, choice.reason)
    if metrics_dir and not metrics_dir.startswith(AUTO):  # a default directory exists only once the query runs
        write_choice(metrics_dir, choice)
    return choice


def is_float32(df: Any, vector_col: str) -> bool:
    dtype = df.schema[vector_col].dataType
    return isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.FloatType)


def grid_plan(left: Any, right: Any, plan: Any, *, algorithm: str, vector_col: str, sample: Any, seed: int,
              block_bytes: int | None) -> GridPlan | None:
    """The grid's plan if ``algorithm`` (``grid`` or ``auto``) resolves to the grid, else None (S3J).

    ``plan`` is the validated S3J plan (metric, threshold, dimension, workers, windows).
    """
    if block_bytes is not None and (not isinstance(block_bytes, int) or block_bytes < 1 << 16):
        raise ValueError(f"block_bytes must be an integer >= 65536 (bytes of one matrix-product block), got {block_bytes!r}")
    choice = choose(left, right, algorithm=algorithm, metric=plan.metric, threshold=plan.threshold, dim=plan.dim,
                    parallelism=plan.parallelism, centroids=plan.centroids, vector_col=vector_col, sample=sample,
                    seed=seed, metrics_dir=plan.metrics_dir)
    if choice.algorithm != "grid":
        return None
    f32 = all(is_float32(df, vector_col) for df in (left, right) if df is not None)
    return GridPlan(plan.metric, plan.threshold, plan.dim, plan.parallelism, plan.self_join, plan.windows,
                    plan.metrics_dir, choose_layout(plan.parallelism, plan.self_join), f32, block_bytes, choice.as_dict(),
                    plan.time_basis, plan.lateness, plan.partitions, plan.transport == "lean")


def write_choice(metrics_dir: str, choice: Choice) -> None:
    """Record the choice beside the statistics: ``metrics_dir/plan/algorithm.json``."""
    fs, base = filesystem(metrics_dir)
    write_whole(fs, f"{base.rstrip('/')}/plan/algorithm.json", json.dumps(choice.as_dict(), indent=1).encode())


def read_choice(metrics_dir: str) -> dict | None:
    """What :func:`write_choice` recorded (None if nothing was).

    Example
    -------
    >>> import tempfile
    >>> from driftjoin.grid.choice import Choice
    >>> folder = tempfile.mkdtemp()
    >>> write_choice(folder, Choice("grid", "algorithm='grid' given", 2, 4))
    >>> read_choice(folder)["algorithm"]
    'grid'
    """
    fs, base = filesystem(metrics_dir)
    path = f"{base.rstrip('/')}/plan/algorithm.json"
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as f:
        return json.loads(f.read())
