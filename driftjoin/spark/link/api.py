"""``link``: exact multi-field match rules over Spark DataFrames, streaming or static, with explained pairs."""

from __future__ import annotations

import logging
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import types as T

from driftjoin.linkage.choose import build_core, estimates_as_dicts
from driftjoin.linkage.plan import LinkCore
from driftjoin.linkage.records import Fields
from driftjoin.linkage.rules import RuleError, check_rules
from driftjoin.metric.validate import check_user_metric
from driftjoin.linkage.drivers import S3JDriver
from driftjoin.spark.link.control import SplitController, attach
from driftjoin.spark.link.inputs import column_kinds, link_windows, normalise
from driftjoin.spark.link.plan import LinkPlan, arrow_fields, pair_schema, routed_schema, window_bounds_us
from driftjoin.spark.link.processor import LinkProcessor
from driftjoin.spark.link.router import dead_letter_batches, route_links
from driftjoin.spark.link.settings import DEFAULT_WINDOW, LinkSettings, rule_error
from driftjoin.spark.runtime.background import in_background
from driftjoin.spark.runtime.columns import check_time_column, common_id_type
from driftjoin.spark.runtime.plan_store import remember
from driftjoin.spark.runtime.jvm import arrow_schema
from driftjoin.spark.runtime.session import prepare_session, worker_placement
from driftjoin.spark.runtime.settings import SettingError
from driftjoin.spark.runtime.stages import inputs_streaming, stateful_stage
from driftjoin.windows import Windowing

log = logging.getLogger("driftjoin")

#: Rows of each static input (or of ``sample=``) the drivers, token orders, centroids and hot keys are drawn from.
SAMPLE_ROWS = 5000


def _columns(ruleset) -> list[str]:
    return list(ruleset.columns)


def _sample_fields(frames: list[DataFrame], kinds: dict[str, str], rows: int) -> Fields | None:
    """Fields of the first ``rows`` rows of each normalised frame (static)."""
    parts = []
    for df in frames:
        table = df.select(*kinds).limit(rows).toArrow()
        if table.num_rows:
            batch = table.combine_chunks().to_batches()[0]
            n = batch.num_rows
            parts.append(arrow_fields(kinds, batch, np.arange(n), np.zeros(n), np.zeros(n, np.int64)))
    return Fields.concat(parts) if parts else None


def _given_sample(sample: Any, kinds: dict[str, str]) -> Fields | None:
    if sample is None:
        return None
    if isinstance(sample, DataFrame):
        if sample.isStreaming:
            raise SettingError("sample", "must be a static DataFrame (or a list of dicts), not a stream", show_value=False)
        missing = [c for c in kinds if c not in sample.columns]
        if missing:
            raise SettingError("sample", f"lacks column(s) {', '.join(missing)} that the rules read", show_value=False)
        frame = normalise(sample, 0, sample.columns[0], T.StringType(), kinds, None, None, False)
        return _sample_fields([frame], kinds, 10 * SAMPLE_ROWS)
    rows = list(sample)
    if not rows or not all(isinstance(r, dict) for r in rows):
        raise SettingError("sample", "must be a static DataFrame or a non-empty list of dicts (column -> value)",
                           show_value=False)
    arrays = {c: pa.array([r.get(c) for r in rows]) for c in kinds}
    batch = pa.RecordBatch.from_pydict(arrays)
    n = batch.num_rows
    return arrow_fields(kinds, batch, np.arange(n), np.zeros(n), np.zeros(n, np.int64))


def _inputs(left: DataFrame, right: DataFrame | None, s: LinkSettings, id_col: str, time_col: str | None,
            ingest_col: str | None, with_raw: bool) -> tuple:
    """The rules checked against the input's columns, the columns' kinds, the id type, the inputs
    and their normalised frames (the link and its dead letters read the same rows)."""
    kinds = column_kinds(left, right, list(s.ruleset.columns))
    try:
        ruleset = check_rules(s.rules, kinds)
    except RuleError as e:
        raise rule_error(e) from None
    kinds = {c: kinds[c] for c in ruleset.columns}
    id_type = common_id_type(left, right, id_col)
    inputs = [df for df in (left, right) if df is not None]
    frames = [normalise(df, side, id_col, id_type, kinds, ingest_col, time_col, with_raw) for side, df in enumerate(inputs)]
    return ruleset, kinds, id_type, inputs, frames


def _sql_name(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


def _pair_columns(raw: DataFrame, plan: LinkPlan) -> DataFrame:
    """The documented columns (LINK_CONTRACT / docs/link.md), built in the JVM from plain numbers
    (one SQL projection: a round trip to the JVM per expression instead of one per column call)."""
    bounds = window_bounds_us(plan.windows)
    if bounds is None:
        start = end = "CAST(NULL AS TIMESTAMP)"
    else:
        step, offset = bounds
        first = f"window * {int(step)} + ({int(offset)})"
        start, end = f"timestamp_micros({first})", f"timestamp_micros({first} + {int(plan.windows.length)})"
    n_rules = len(plan.core.ruleset.rules)
    dist = ", ".join(f"nanvl(d{j}, CAST(NULL AS DOUBLE)) AS {_sql_name(m.field)}" for j, m in enumerate(plan.measures))
    return raw.selectExpr("left_id", "right_id", "rule",
                          f"filter(sequence(0, {n_rules - 1}), i -> ((rules_mask >> i) & 1) = 1) AS rules",
                          f"struct({dist}) AS distances", f"{start} AS window_start", f"{end} AS window_end",
                          "timestamp_micros(ingest_us) AS ingest_time", "timestamp_micros(emit_us) AS emit_time")


def link(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    rules: Any,
    id_col: str = "id",
    window: str | float | None = DEFAULT_WINDOW,
    slide: str | float | None = None,
    within: str | float | None = None,
    time_col: str | None = None,
    watermark: str | float | None = None,
    ingest_col: str | None = None,
    parallelism: int | None = None,
    partitions: int | None = None,
    metrics_dir: str | None = None,
    sample: Any = None,
    drive: list | None = None,
    seed: int = 0,
    min_heavy: int = 64,
) -> DataFrame:
    """Exact entity-resolution links: every pair of records of a window that satisfies at least one rule.

    A rule is a dict from column to condition; a pair satisfies the rule when every condition
    holds (``docs/link.md`` has the table of conditions):

    .. code-block:: python

        rules = [
            {"dob": "equal", "surname": ("levenshtein", 2)},
            {"postcode": "equal", "address": ("jaccard", 0.4, "words")},
            {"full_name": ("levenshtein", 1)},
            {"dob": ("within", "2 days"), "surname": "equal"},
        ]

    Conditions: ``"equal"``; ``("levenshtein", k)`` on strings; ``("jaccard", t)`` on arrays of
    tokens, or ``("jaccard", t, "words" | "qgrams" | "qgrams:q")`` on a string; a vector metric
    (``"euclidean"``, ``"angular"``, ...) on vectors; ``(f, t)`` with a callable or
    :func:`driftjoin.user_metric`; ``("within", d)`` on numbers, dates (``"2 days"``) and
    timestamps (``"10 minutes"``). A condition on a null is false (SQL): the record can still
    match through another rule. The result is exact: the pairs that evaluating every rule on
    every pair of the window would give, each once, whatever the micro-batches, the workers,
    restarts and crashes.

    Each rule runs as a join partitioned by its equal fields, driven by one of its other
    conditions (PassJoin, prefix filtering, sorted buckets, S3J; chosen on a sample by counted
    work, or ``drive=``), the other conditions verified on the candidates; a pair is emitted only
    by the first rule it satisfies, so no state is kept across rules. Groups of a hot blocking
    value (a postcode holding a large share of the records) are split over a grid of workers.

    Parameters
    ----------
    left, right:
        Inputs with an id column and the columns the rules read, both streaming or both static.
        ``right=None`` links ``left`` with itself (each unordered pair once, ``left_id <
        right_id``); with ``right`` only left x right pairs.
    rules:
        The rule list (above); checked against the input's columns and types before the start.
    id_col:
        Integer or string ids, unique per side.
    window, slide, within:
        As ``similarity_join``: tumbling ``window`` (default one minute), sliding with ``slide``,
        or ``within`` instead (pairs whose times differ by at most that much, each once). A
        static input without ``time_col`` is one window.
    time_col, watermark, ingest_col:
        Event time and how late a record may arrive; or an ingestion-time column (default:
        the micro-batch time).
    parallelism, partitions:
        Logical workers, and the Spark state partitions they share.
    metrics_dir:
        Per-batch statistics (pairs per rule, nulls per rule, candidates, latency, hot groups).
    sample:
        A static DataFrame or a list of dicts like the input's rows, for a stream: the drivers,
        a Jaccard condition's token order, S3J's centroids and the hot keys are drawn from it
        (a static input uses its first rows).
    drive:
        Per rule, ``None`` (choose), ``"block"`` or the column whose condition drives the rule.
    seed:
        S3J's centroid draw.
    min_heavy:
        The fewest records of a group that the hot-key split spreads.

    Returns
    -------
    pyspark.sql.DataFrame
        ``left_id, right_id, rule`` (the first rule satisfied, 0-based), ``rules`` (every rule
        satisfied), ``distances`` (a struct with one field per measure: the column's name, or
        ``<column>_<metric>`` when a column has several), ``window_start, window_end,
        ingest_time, emit_time``.

    Examples
    --------
    >>> from driftjoin import local_session, link
    >>> spark = local_session(2)
    >>> people = spark.createDataFrame([(1, "anna", "1990-01-02"), (2, "ana", "1990-01-02"), (3, "bob", "1980-05-05")],
    ...                                "id long, name string, dob string").selectExpr("id", "name", "to_date(dob) as dob")
    >>> [(r.left_id, r.right_id, r.rule, r.rules, r.distances.name) for r in link(people, rules=[
    ...     {"dob": "equal", "name": ("levenshtein", 1)}, {"name": ("levenshtein", 2)}]).collect()]
    [(1, 2, 0, [0, 1], 1.0)]
    """
    s = LinkSettings.check({n: v for n, v in locals().items() if n in LinkSettings.names()})
    streaming = inputs_streaming(left, right)
    spark = left.sparkSession
    metrics_dir = prepare_session(spark, metrics_dir)
    for df in (left, right):
        for name, what in ((ingest_col, "ingest_col"), (time_col, "time_col")):
            if df is not None and name is not None:
                check_time_column(df, name, what)
    ruleset, kinds, id_type, inputs, frames = _inputs(left, right, s, id_col, time_col, ingest_col, False)
    windows = link_windows(left, right, s.windows, time_col=time_col, ingest_col=ingest_col, watermark=s.lateness)
    parallelism, partitions = worker_placement(spark, parallelism, partitions)
    if left.isStreaming:
        sample_fields, expected = _given_sample(sample, kinds), None
    else:  # the count runs while the sample is read and its work counted (it scales the estimates)
        given = _given_sample(sample, kinds)  # a bad sample= is refused before any job on the input
        expected = in_background(lambda: sum(df.count() for df in inputs))
        sample_fields = given if sample is not None else _sample_fields(frames, kinds, SAMPLE_ROWS)
    try:
        core, estimates = build_core(ruleset, n_workers=parallelism, self_join=right is None, windows=windows.windows,
                                     sample=sample_fields, expected=expected, drive=drive, seed=seed, min_heavy=min_heavy)
    except RuleError as e:
        raise rule_error(e) from None
    for d in core.drivers:
        if isinstance(d, S3JDriver) and sample_fields is not None:
            v = sample_fields.cols[d.condition.column]
            check_user_metric(d.condition.measure.space, list(v[d.condition.measure.usable(v)]))
    choice = {"drivers": [d.settings() for d in core.drivers], "estimates": estimates_as_dicts(estimates),
              "hot_groups": core.tables[0].size(), "sample_rows": 0 if sample_fields is None else len(sample_fields)}
    log.info("link: drivers %s; %d hot groups split", [d.name for d in core.drivers], core.tables[0].size())
    plan = LinkPlan(core, kinds, parallelism, partitions, metrics_dir, windows.time_basis, windows.lateness, choice)
    data = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    rschema = routed_schema(plan, id_type)
    pschema = pair_schema(plan, id_type)
    rarrow = arrow_schema(rschema)
    routed = data.mapInArrow(lambda it: route_links(plan, it, rarrow), rschema)
    if streaming and metrics_dir:
        attach(spark, SplitController(metrics_dir, parallelism, min_heavy=min_heavy))
    raw = stateful_stage(routed, "key", lambda: LinkProcessor(plan), pschema, partitions=partitions)
    return remember(_pair_columns(raw, plan), plan)


def invalid_links(
    left: DataFrame,
    right: DataFrame | None = None,
    *,
    rules: Any,
    id_col: str = "id",
    time_col: str | None = None,
    ingest_col: str | None = None,
    **link_settings: Any,
) -> DataFrame:
    """The dead-letter output of :func:`link`: every input row it cannot use, with why.

    A row is linked or here, never both (one test): a missing id, a missing or unparsable time, a
    value no condition can use (a token array with a null element, a vector with a NaN). A null
    field is *not* a dead letter: the conditions on it are false and the record can match
    through another rule. Stateless, so it runs as its own streaming query beside the link.

    Parameters
    ----------
    left, right, rules, id_col, time_col, ingest_col:
        As given to :func:`link`: they decide which rows are valid.
    **link_settings:
        The link's other settings, accepted (and checked) so the same keyword arguments can be
        passed to both.

    Returns
    -------
    pyspark.sql.DataFrame
        ``side`` (0 left, 1 right), ``id``, ``raw`` (the row as JSON) and ``reason``.

    Examples
    --------
    >>> from driftjoin import invalid_links, local_session
    >>> spark = local_session(2)
    >>> df = spark.createDataFrame([(1, ["a"]), (None, ["b"]), (3, ["c", None])], "id long, tags array<string>")
    >>> [(r.id, r.reason) for r in invalid_links(df, rules=[{"tags": ("jaccard", 0.5)}]).orderBy("reason").collect()]
    [(None, 'missing id'), (3, 'tags: a token set with a null element')]
    """
    link_settings.pop("sample", None)
    s = LinkSettings.check({"rules": rules, "id_col": id_col, "time_col": time_col, "ingest_col": ingest_col,
                            **link_settings})
    inputs_streaming(left, right)
    prepare_session(left.sparkSession)
    ruleset, kinds, id_type, _, frames = _inputs(left, right, s, id_col, time_col, ingest_col, True)
    data = frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])
    plan = LinkPlan(LinkCore(ruleset, (), 1, right is None, Windowing.unbounded()), kinds, 1, 1, None)
    schema = T.StructType([T.StructField("side", T.ByteType()), T.StructField("id", id_type),
                           T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType())])
    return data.mapInArrow(lambda it: dead_letter_batches(plan, it), schema)
