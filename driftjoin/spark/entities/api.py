"""``entities``: the connected components of a stream (or DataFrame) of links, kept current with stable ids."""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T

from driftjoin.spark.entities.plan import EntitiesPlan, id_type, ingest_column, normalise, output_schema
from driftjoin.spark.entities.processor import EntityProcessor
from driftjoin.spark.entities.settings import EntitiesSettings
from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.session import prepare_session
from driftjoin.spark.runtime.settings import SettingError
from driftjoin.spark.runtime.stages import stateful_stage

#: ``kind`` of the output rows.
KINDS = ("new", "joined", "merged", "refused")


def _prepare(links: DataFrame, given: dict[str, Any]) -> tuple[EntitiesSettings, T.DataType, str | None]:
    s = EntitiesSettings.check(given)
    kind = id_type(links, s)
    ingest = ingest_column(links, s, given="ingest_col" in given)
    return s, kind, ingest


def entities(
    links: DataFrame,
    *,
    left_col: str = "left_id",
    right_col: str = "right_id",
    two_sided: bool = False,
    time_col: str | None = None,
    ingest_col: str | None = "ingest_time",
    source_cols: tuple[str, str] | None = None,
    max_size: int | None = None,
    one_per_source: bool = False,
    expire_after: str | float | None = None,
    metrics_dir: str | None = None,
) -> DataFrame:
    """The entities of a stream of links: connected components kept current, with stable ids.

    Each link (a pair of ``link`` or ``similarity_join``) says two records are the same entity;
    an entity is a connected component of the links (at least two records; a record in no link
    is no entity and costs nothing). Its id is the id of its *founder*, its smallest record when
    it was created; it keeps that id while it grows, and when entities merge the oldest one
    (created in the earliest micro-batch, then the smaller founder) keeps its id and the others'
    are retired. Every micro-batch emits one row per record whose entity id changed, so a reader
    that keeps each record's row with the highest ``seq`` has every record's current entity
    (:func:`current_entities`). On a static DataFrame: one row per linked record (each entity
    named by its smallest record), the grouping of the links' connected components.

    Exact and exactly-once: one stateful key holds the whole graph (components cross every key),
    its state commits with the output, and a replayed batch gives the same ids and rows. The state
    holds the linked records and is written per batch only for what changed
    (:mod:`driftjoin.entitygraph.facts`); docs/entities.md says what bounds it. Bad settings fail
    before the start with a :class:`~driftjoin.spark.runtime.settings.SettingError`; link rows
    without both ids (or linking a record to itself, or with an unusable time) are skipped and
    listed by :func:`invalid_entity_links`; a restart with other settings is refused
    (``PlanChangedError``).

    Parameters
    ----------
    links:
        A streaming or static DataFrame of links, e.g. the pairs of ``link`` or ``similarity_join``.
    left_col, right_col:
        The columns of the two records' ids (integers or strings).
    two_sided:
        ``False`` (a self-linkage, ``right=None`` upstream): both columns name records of one
        input. ``True``: the left id is a record of the left input, the right id one of the right
        input (left 7 and right 7 are two records; entities are named by a left record).
    time_col:
        The links' time (timestamp or seconds; the pairs' ``ingest_time`` or the later record's
        event time): it orders a batch's links for the guards and dates entities for
        ``expire_after``. Without it a batch's links are ordered by their ids.
    ingest_col:
        The links' ingestion time, which the statistics measure the update latency from (used when
        the links have the column).
    source_cols:
        With ``one_per_source``: the columns naming each record's source (left record, right record).
    max_size:
        Guard (off by default): a link that would make an entity of more than ``max_size`` records
        is refused (a ``refused`` row says which and why) and not applied.
    one_per_source:
        Guard (off by default): a link that would put two records of one source into one entity is
        refused; a two-sided linkage without ``source_cols`` uses the side (each entity at most one
        left and one right record).
    expire_after:
        A stream's entities whose latest link is more than this behind the newest link leave the
        state (``"10 minutes"``; needs ``time_col``). Exact when no later link can reach them: with
        links of a ``within=D`` join under watermark ``W``, ``expire_after >= D + W`` (docs/entities.md).
    metrics_dir:
        Where per-batch statistics go (entities, merges, the largest entity, refused links, state,
        latency), read by ``driftjoin run``'s summary.

    Returns
    -------
    pyspark.sql.DataFrame
        ``record_id``, ``side`` (0, or 1 for a right record of a two-sided linkage), ``entity_id``,
        ``previous_id`` (the retired id of a ``merged`` row), ``kind`` (``new``: a record of a new
        entity, ``joined``: a record new to an existing entity, ``merged``: a record whose entity
        was merged into an older one, ``refused``: a link a guard refused), ``entity_size`` (its
        records after the batch), ``seq`` (the operator's micro-batch number, the same on a
        replay), ``other_id`` / ``other_side`` / ``other_entity_id`` and ``reason`` (refused links:
        ``record_id`` is the left record, ``other_id`` the right one), ``emit_time``.

    Examples
    --------
    >>> from driftjoin import entities, local_session
    >>> spark = local_session(2)
    >>> links = spark.createDataFrame([(1, 2), (2, 3), (7, 8)], "left_id long, right_id long")
    >>> sorted((r.record_id, r.entity_id) for r in entities(links).collect())
    [(1, 1), (2, 1), (3, 1), (7, 7), (8, 7)]
    >>> guarded = entities(links, max_size=2, time_col="left_id")
    >>> sorted((r.kind, r.record_id, r.other_id, r.reason) for r in guarded.collect() if r.kind == "refused")
    [('refused', 2, 3, 'max_size')]
    """
    given = {n: v for n, v in locals().items() if n in EntitiesSettings.names() and n != "ingest_col"}
    if ingest_col != "ingest_time":
        given["ingest_col"] = ingest_col
    s, kind, ingest = _prepare(links, given)
    spark = links.sparkSession
    if s.expire_after is not None and not links.isStreaming:
        raise SettingError("expire_after", "applies to streams (a static DataFrame is resolved whole): drop it",
                           show_value=False)
    metrics_dir = prepare_session(spark, s.metrics_dir)
    plan = EntitiesPlan.of(s, kind, metrics_dir)
    data = normalise(links, s, kind, ingest).where(F.col("reason").isNull()).drop("reason", "raw")
    schema = output_schema(kind)
    # one key (one stateful task does the work); the stage keeps the session's number of state
    # partitions (or those of the join before it in the same query, which a checkpoint fixes)
    partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
    static = not links.isStreaming
    raw = stateful_stage(data, "key", lambda: EntityProcessor(plan, static=static), schema, partitions=partitions)
    return remember(_columns(raw), plan)


def _columns(raw: DataFrame) -> DataFrame:
    return raw.select("record_id", "side", "entity_id", "previous_id", "kind", "entity_size", "seq", "other_id",
                      "other_side", "other_entity_id", "reason", F.timestamp_micros("emit_us").alias("emit_time"))


def invalid_entity_links(links: DataFrame, **settings: Any) -> DataFrame:
    """The dead-letter output of :func:`entities`: every link row it skips, with why.

    A row is a link of :func:`entities` or here, never both (one test): a missing left or right
    id, a self-linkage row linking a record to itself, a missing or unusable ``time_col`` value.
    Stateless, so it runs as its own query next to the entities.

    Parameters
    ----------
    links:
        The links given to :func:`entities`.
    **settings:
        The settings given to :func:`entities` (the columns and ``two_sided`` decide which rows
        are valid; the others are checked and accepted so the same keyword arguments fit both).

    Returns
    -------
    pyspark.sql.DataFrame
        ``left_id``, ``right_id`` (as read), ``raw`` (the row as JSON) and ``reason``.

    Examples
    --------
    >>> from driftjoin import invalid_entity_links, local_session
    >>> spark = local_session(2)
    >>> links = spark.createDataFrame([(1, 2), (3, None), (4, 4)], "left_id long, right_id long")
    >>> [(r.left_id, r.reason) for r in invalid_entity_links(links).collect()]
    [(3, 'missing right id (right_id)'), (4, 'links a record to itself')]
    """
    s, kind, ingest = _prepare(links, settings)
    prepare_session(links.sparkSession)
    rows = normalise(links, s, kind, ingest)
    return rows.where(F.col("reason").isNotNull()).select(
        F.col("left").alias("left_id"), F.col("right").alias("right_id"), "raw", "reason")


def current_entities(changes: DataFrame) -> DataFrame:
    """Every linked record's current entity, from the rows :func:`entities` emitted.

    Each record's row with the highest ``seq`` holds its entity id now (``refused`` rows aside);
    ``entity_size`` is counted over the result (a record's own row may predate later growth).

    Parameters
    ----------
    changes:
        A static DataFrame of :func:`entities`' rows (e.g. its Parquet sink read back).

    Returns
    -------
    pyspark.sql.DataFrame
        ``side``, ``record_id``, ``entity_id``, ``entity_size``, ``seq`` (of the record's last change).

    Examples
    --------
    >>> from driftjoin import current_entities, entities, local_session
    >>> spark = local_session(2)
    >>> links = spark.createDataFrame([(1, 2), (2, 3)], "left_id long, right_id long")
    >>> sorted((r.record_id, r.entity_id, r.entity_size) for r in current_entities(entities(links)).collect())
    [(1, 1, 3), (2, 1, 3), (3, 1, 3)]
    """
    from pyspark.sql.window import Window

    rows = changes.where(F.col("kind") != "refused")
    last = Window.partitionBy("side", "record_id").orderBy(F.col("seq").desc())
    latest = rows.withColumn("_r", F.row_number().over(last)).where(F.col("_r") == 1)
    size = Window.partitionBy("entity_id")
    return latest.select("side", "record_id", "entity_id", F.count(F.lit(1)).over(size).alias("entity_size"), "seq")
