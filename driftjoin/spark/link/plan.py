"""The plan of a ``link`` query: the core it runs, its settings as stored with the checkpoint, and the
columns of its routed rows and raw pairs.

The plan is fixed when the query is built and shipped to the tasks by pickling: the rule set,
each rule's driver (with a prefix filter's token order and S3J's centroids, drawn from the
sample), the workers, the windows and the hot-key decision of the sample (version 0). Its
:meth:`LinkPlan.settings` is what :mod:`driftjoin.spark.runtime.plan_guard` stores and compares
on a restart: every setting that decides where state lives or what it means (rules, drivers,
workers, windows, the first decision) is refused if changed; ``metrics_dir`` is adopted.
"""

from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np
from pyspark.sql import types as T

from driftjoin.linkage.drivers import PrefixDriver, S3JDriver
from driftjoin.linkage.plan import LinkCore
from driftjoin.linkage.records import Fields
from driftjoin.linkage.rules import NULL_TIME
from driftjoin.linkage.worker import STATE_FORMAT
from driftjoin.spark.runtime.plan_guard import OperatorPlan
from driftjoin.windows import INTERVAL, UNBOUNDED, Windowing

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa, pyarrow_compute as pc

#: Pairs per output frame (bounds the Arrow buffers between the Python worker and the JVM).
OUTPUT_CHUNK = 200_000


def _fingerprint(value: Any) -> str:
    return hashlib.sha256(pickle.dumps(value, protocol=4)).hexdigest()[:16]


@dataclass(frozen=True)
class LinkPlan(OperatorPlan):
    """Everything the link operators need (module docstring); its guard is
    :class:`~driftjoin.spark.runtime.plan_guard.OperatorPlan`'s (``metrics_dir`` may change on a
    restart, nothing else)."""

    operator: ClassVar[str] = "link"

    core: LinkCore
    #: column -> kind of every column the rules read
    kinds: dict[str, str]
    parallelism: int
    partitions: int
    metrics_dir: str | None
    time_basis: str = "batch"
    lateness: float = 0.0
    #: what the drivers were chosen on (statistics and the stored plan)
    choice: dict = field(default_factory=dict)

    @property
    def windows(self) -> Windowing:
        return self.core.windows

    @property
    def self_join(self) -> bool:
        return self.core.self_join

    @property
    def measures(self) -> tuple:
        return self.core.ruleset.measures

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        drivers = []
        for d in self.core.drivers:
            s = d.settings()
            if isinstance(d, PrefixDriver):
                s["token_order"] = f"{len(d.order)}:{_fingerprint(d.order.tokens.tolist())}"
            if isinstance(d, S3JDriver):
                s["centroids"] = _fingerprint(d.strategy.centroids)
            drivers.append(s)
        return {"operator": "link", "state_format": f"link-{STATE_FORMAT}", "rules": self.core.ruleset.settings(),
                "columns": self.kinds, "drivers": drivers, "hot_keys": self.core.tables[0].as_dict(),
                "parallelism": self.parallelism, "partitions": self.partitions, "self_join": self.self_join,
                **self.windows.settings(), "time_basis": self.time_basis, "lateness": self.lateness,
                "metrics_dir": self.metrics_dir}


def column_type(kind: str) -> T.DataType:
    """The Spark type of a rule column in the routed rows (:mod:`driftjoin.spark.link.inputs`)."""
    return {"number": T.DoubleType(), "date": T.LongType(), "timestamp": T.LongType(), "string": T.StringType(),
            "other": T.StringType(), "set": T.ArrayType(T.StringType()), "ints": T.ArrayType(T.LongType()),
            "vector": T.ArrayType(T.DoubleType())}[kind]


def routed_schema(plan: LinkPlan, id_type: T.DataType) -> T.StructType:
    """Rows from the router to the workers: a record copy and the worker it goes to."""
    return T.StructType([
        T.StructField("key", T.IntegerType()), T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        *[T.StructField(c, column_type(k)) for c, k in plan.kinds.items()],
        T.StructField("ingest", T.DoubleType()), T.StructField("time", T.LongType()), T.StructField("window", T.LongType()),
        T.StructField("ghost", T.BooleanType()), T.StructField("home", T.BooleanType()),
        T.StructField("version", T.LongType()),
    ])


def pair_schema(plan: LinkPlan, id_type: T.DataType) -> T.StructType:
    """Raw pairs from the workers (the API turns them into the documented columns in the JVM)."""
    return T.StructType([
        T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("rule", T.IntegerType()),
        T.StructField("rules_mask", T.LongType()),
        *[T.StructField(f"d{j}", T.DoubleType()) for j in range(len(plan.measures))],
        T.StructField("window", T.LongType()), T.StructField("ingest_us", T.LongType()),
        T.StructField("emit_us", T.LongType()),
    ])


def arrow_fields(kinds: dict[str, str], batch: pa.RecordBatch, idx: np.ndarray, ingest: np.ndarray,
                 version: np.ndarray) -> Fields:
    """The fields of rows ``idx`` of an Arrow batch of normalised (or routed) rows."""
    take = pa.array(idx)
    cols: dict[str, np.ndarray] = {}
    for c, kind in kinds.items():
        col = batch.column(c).take(take)
        if kind == "number":
            cols[c] = col.to_numpy(zero_copy_only=False).astype(np.float64)
        elif kind in ("date", "timestamp"):
            cols[c] = pc.fill_null(col, NULL_TIME).to_numpy(zero_copy_only=False).astype(np.int64)
        else:
            out = np.empty(len(col), dtype=object)
            out[:] = col.to_pylist()
            cols[c] = out
    return Fields(cols, ingest, version)


def frame_fields(plan: LinkPlan, pdf: pd.DataFrame) -> Fields:
    """The fields of a worker's routed rows (pandas, from Spark)."""
    cols: dict[str, np.ndarray] = {}
    for c, kind in plan.kinds.items():
        v = pdf[c]
        if kind == "number":
            cols[c] = v.to_numpy(dtype=np.float64, na_value=np.nan)
        elif kind in ("date", "timestamp"):
            cols[c] = v.to_numpy(dtype=np.int64)
        else:
            out = np.empty(len(v), dtype=object)
            out[:] = [None if x is None or (isinstance(x, float) and np.isnan(x)) else x for x in v.tolist()]
            cols[c] = out
    return Fields(cols, pdf["ingest"].to_numpy(dtype=np.float64), pdf["version"].to_numpy(dtype=np.int64))


def window_bounds_us(windows: Windowing) -> tuple[int, int] | None:
    """``(step, offset)``: window ``k`` starts at ``k * step + offset`` microseconds; None when pairs
    report no window (an unbounded link, or an interval join's buckets)."""
    if windows.kind in (UNBOUNDED, INTERVAL):
        return None
    return windows.slide, windows.offset
