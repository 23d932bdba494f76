"""The plan of ``entities`` (stored with the checkpoint) and the one test of its input rows.

Links are read into one shape (:func:`normalise`): ``key`` (the one stateful key), ``left`` and
``right`` (the ids, ``long`` when both columns are integers, else ``string``), ``time`` (seconds,
null without ``time_col``), ``lsrc`` / ``rsrc`` (the records' sources as strings, for
``one_per_source``), ``ingest`` (seconds, for latency) and ``reason``: why the row cannot be a
link (null when it can). The operator keeps the rows whose reason is null and
:func:`~driftjoin.spark.entities.api.invalid_entity_links` returns the others, so a row is always
in exactly one of the two.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.entitygraph import EntityRules
from driftjoin.entitygraph.facts import STATE_FORMAT
from driftjoin.spark.runtime.columns import time_seconds
from driftjoin.spark.runtime.plan_guard import OperatorPlan
from driftjoin.spark.runtime.settings import SettingError
from driftjoin.spark.entities.settings import EntitiesSettings

#: The one grouping key of the stateful stage (it never depends on the settings, so it is also
#: the key that stores and checks the plan).
KEY = 0


@dataclass(frozen=True)
class EntitiesPlan(OperatorPlan):
    """Everything the stateful stage needs, fixed when the query is built (shipped by pickling).
    A restart may change ``metrics_dir`` only (the default of
    :class:`~driftjoin.spark.runtime.plan_guard.OperatorPlan`)."""

    operator = "entities"
    #: one logical worker: the key :data:`KEY` holds the whole graph
    parallelism = 1

    rules: EntityRules
    #: "long" or "string"
    id_type: str
    timed: bool
    sourced: bool
    metrics_dir: str | None
    #: the facts' compaction bound (live facts per run)
    run_cap: int = 1 << 16

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        r = self.rules
        return {"operator": "entities", "state_format": f"entities-{STATE_FORMAT}", "two_sided": r.two_sided,
                "max_size": r.max_size, "one_per_source": r.one_per_source, "expire_after": r.expire_after,
                "id_type": self.id_type, "time_col": self.timed, "source_cols": self.sourced,
                "run_cap": self.run_cap, "metrics_dir": self.metrics_dir}

    @classmethod
    def of(cls, settings: EntitiesSettings, id_type: T.DataType, metrics_dir: str | None) -> EntitiesPlan:
        """The plan of ``entities`` with ``settings`` (checked) over ids of ``id_type``."""
        s = settings
        rules = EntityRules(s.two_sided, s.max_size, s.one_per_source, s.expire_seconds())
        return cls(rules, "long" if isinstance(id_type, T.LongType) else "string", s.time_col is not None,
                   s.source_cols is not None, metrics_dir)


def id_type(links: DataFrame, s: EntitiesSettings) -> T.DataType:
    """``long`` if both id columns are integers, ``string`` if they are strings (or one of each);
    any other type is refused before the start."""
    types = []
    for name, col in (("left_col", s.left_col), ("right_col", s.right_col)):
        if col not in links.columns:
            raise SettingError(name, f"is not a column of the links; columns are {links.columns}", col)
        dtype = links.schema[col].dataType
        if not isinstance(dtype, (T.IntegralType, T.StringType)):
            raise SettingError(name, f"has type {dtype.simpleString()}; record ids must be integers or strings (cast "
                                     "the column first)", col)
        types.append(dtype)
    return T.LongType() if all(isinstance(t, T.IntegralType) for t in types) else T.StringType()


def _optional_time(links: DataFrame, name: str | None, what: str) -> tuple[Column, Column]:
    if name is None:
        return F.lit(None).cast("double"), F.lit(None).cast("string")
    if name not in links.columns:
        raise SettingError(what, f"is not a column of the links; columns are {links.columns}", name)
    try:
        return time_seconds(links, name, what)
    except (TypeError, ValueError) as e:
        raise SettingError(what, f"cannot hold times: {e}", name) from None


def ingest_column(links: DataFrame, s: EntitiesSettings, given: bool) -> str | None:
    """The ingestion time column latency is measured from: ``ingest_col`` if the links have it
    (the default ``ingest_time`` of the pairs is skipped when absent; a column given and absent is refused)."""
    if s.ingest_col is not None and s.ingest_col not in links.columns:
        if given:
            raise SettingError("ingest_col", f"is not a column of the links; columns are {links.columns}", s.ingest_col)
        return None
    return s.ingest_col


def normalise(links: DataFrame, s: EntitiesSettings, kind: T.DataType, ingest: str | None) -> DataFrame:
    """The links in the operator's shape with each row's reason (module docstring)."""
    for col in s.source_cols or ():
        if col not in links.columns:
            raise SettingError("source_cols", f"names {col!r}, which is not a column of the links; columns are "
                                              f"{links.columns}", show_value=False)
    left, right = F.col(s.left_col).cast(kind), F.col(s.right_col).cast(kind)
    seconds, time_reason = _optional_time(links, s.time_col, "time_col")
    ingest_seconds, _ = _optional_time(links, ingest, "ingest_col")
    reason = (F.when(left.isNull(), F.lit(f"missing left id ({s.left_col})"))
              .when(right.isNull(), F.lit(f"missing right id ({s.right_col})")))
    if not s.two_sided:
        reason = reason.when(left == right, F.lit("links a record to itself"))
    reason = F.coalesce(reason, time_reason)
    src = [F.col(c).cast("string") for c in s.source_cols] if s.source_cols else [F.lit(None).cast("string")] * 2
    return links.select(
        F.lit(KEY).cast("int").alias("key"), left.alias("left"), right.alias("right"), seconds.alias("time"),
        src[0].alias("lsrc"), src[1].alias("rsrc"), ingest_seconds.alias("ingest"), reason.alias("reason"),
        F.to_json(F.struct(*[F.col(c) for c in links.columns])).alias("raw"))


def output_schema(kind: T.DataType) -> T.StructType:
    """The rows the stateful stage emits (``emit_us`` becomes ``emit_time`` in the JVM)."""
    return T.StructType([
        T.StructField("record_id", kind), T.StructField("side", T.ByteType()), T.StructField("entity_id", kind),
        T.StructField("previous_id", kind), T.StructField("kind", T.StringType()),
        T.StructField("entity_size", T.LongType()), T.StructField("seq", T.LongType()),
        T.StructField("other_id", kind), T.StructField("other_side", T.ByteType()),
        T.StructField("other_entity_id", kind), T.StructField("reason", T.StringType()),
        T.StructField("emit_us", T.LongType()),
    ])
