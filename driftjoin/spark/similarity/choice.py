"""Which vector path a similarity join runs (S3J or the grid), decided before the start.

``algorithm="auto"`` estimates both on a sample; the estimate itself is the core's
(:func:`driftjoin.grid.choice.estimate`: S3J's copies and compared pairs against the grid's
screened pairs on a sample, counts not timings, so the same input and settings give the same
choice on every run). This module gets the sample from Spark (the first rows of a static input,
or ``sample=``), logs the choice, records it beside the statistics
(``metrics_dir/plan/algorithm.json``, :func:`read_choice`; the metric-space path records its own
the same way) and builds the plan of the chosen path (:func:`vector_plan`).
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.grid.choice import Choice, by_dimension, estimate, forced, sample_rows
from driftjoin.grid.layout import choose_layout
from driftjoin.spark.runtime.files import filesystem, write_whole
from driftjoin.spark.runtime.queries import AUTO
from driftjoin.spark.runtime.settings import SettingError
from driftjoin.spark.similarity.grid import GridPlan
from driftjoin.spark.similarity.inputs import JoinInputs, vector_column
from driftjoin.spark.similarity.s3j import S3JPlan, s3j_plan
from driftjoin.spark.similarity.settings import grouped_on_the_grid

if TYPE_CHECKING:
    from pyarrow import fs as pafs
else:
    from driftjoin.deferred import pyarrow_fs as pafs

log = logging.getLogger("driftjoin")

def check_sample(sample: Any, vector_col: str, dim: int | None) -> None:
    """``sample=`` of a vector join, checked before any job: a static DataFrame with the vector
    column, or an array of vectors (of dimension ``dim`` when it is known)."""
    if isinstance(sample, DataFrame):
        if sample.isStreaming:
            raise SettingError("sample", "= must be a static DataFrame or an array of vectors, not a stream",
                               show_value=False)
        if vector_col not in sample.columns:
            raise SettingError("sample", f"= has no column {vector_col!r} (the vector column); columns are "
                                         f"{sample.columns}", show_value=False)
        vector_column(sample, vector_col)  # its type
        return
    try:
        mat = np.asarray(sample, dtype=np.float64)
    except (TypeError, ValueError):
        raise SettingError("sample", "= must be a static DataFrame with the vector column or an array of vectors "
                                     "(rows x dim)", show_value=False) from None
    if mat.ndim != 2 or (dim is not None and mat.shape[1] != dim):
        raise SettingError("sample", f"= must hold vectors of dimension {dim or 'dim'} (rows x {dim or 'dim'}), got "
                                     f"shape {mat.shape}", show_value=False)


def sample_matrix(sample: Any, vector_col: str, dim: int) -> np.ndarray:
    """``sample=`` as a matrix (checked first: :func:`check_sample`): an array of vectors or a
    static DataFrame (its first rows)."""
    check_sample(sample, vector_col, dim)
    if isinstance(sample, DataFrame):
        sample = collect_vectors(sample, vector_col, dim)
    return np.asarray(sample, dtype=np.float64)


def collect_vectors(df: Any, vector_col: str, dim: int) -> np.ndarray:
    rows = df.select(vector_column(df, vector_col).alias("v")).where(F.size("v") == dim).limit(sample_rows(dim)).collect()
    return np.array([[np.nan if x is None else x for x in r["v"]] for r in rows], dtype=np.float64).reshape(-1, dim)


def choose_vector_algorithm(join: JoinInputs, plan: S3JPlan, algorithm: str, sample: Any) -> Choice:
    """Resolve ``algorithm`` (``auto``, ``grid`` or ``s3j``) into a logged, recorded :class:`Choice`
    (``plan``: the S3J plan the estimate measures S3J with)."""
    s = join.settings
    if algorithm != "auto":
        choice = forced(algorithm, plan.dim, plan.parallelism)
    elif sample is not None or not join.streaming:
        if sample is not None:
            mat = sample_matrix(sample, s.column, plan.dim)
            rows = sample.count() if isinstance(sample, DataFrame) else len(mat)
        else:
            mat = np.vstack([collect_vectors(df, s.column, plan.dim) for df in join.frames])
            rows = sum(df.count() for df in join.frames)  # the one window of a static input
        choice = estimate(mat, plan.distance, plan.threshold, parallelism=plan.parallelism, self_join=plan.self_join,
                          centroids=plan.centroids, seed=s.seed, rows=rows)
    else:
        choice = by_dimension(plan.dim, plan.parallelism)
    log.info("similarity_join algorithm=%s: %s", choice.algorithm, choice.reason)
    if plan.metrics_dir and not plan.metrics_dir.startswith(AUTO):  # a default directory exists only once the query runs
        write_choice(plan.metrics_dir, choice)
    return choice


def is_float32(df: Any, vector_col: str) -> bool:
    dtype = df.schema[vector_col].dataType
    return isinstance(dtype, T.ArrayType) and isinstance(dtype.elementType, T.FloatType)


def vector_plan(join: JoinInputs, sample: Any) -> S3JPlan | GridPlan:
    """The plan of the vector path the join runs: S3J (or a baseline the settings name), or the
    grid when ``algorithm`` is ``"grid"``, or ``"auto"`` and the estimate prefers it."""
    s = join.settings
    if sample is not None:
        check_sample(sample, s.column, s.dim)
    flexible = s.algorithm in ("auto", "grid")
    plan = s3j_plan(join, "s3j" if flexible else s.algorithm)
    if not flexible:
        return plan
    choice = choose_vector_algorithm(join, plan, s.algorithm if s.balance == "none" else "s3j", sample)
    if choice.algorithm != "grid":
        return plan
    if s.transport == "grouped":
        raise grouped_on_the_grid(s.output)
    return GridPlan(metric=plan.metric, threshold=plan.threshold, dim=plan.dim, parallelism=plan.parallelism,
                    self_join=plan.self_join, windows=plan.windows, metrics_dir=plan.metrics_dir,
                    layout=choose_layout(plan.parallelism, plan.self_join),
                    float32=all(is_float32(df, s.column) for df in join.frames), block_bytes=s.block_bytes,
                    choice=choice.as_dict(), time_basis=plan.time_basis, lateness=plan.lateness,
                    partitions=plan.partitions, transport=plan.transport)


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
