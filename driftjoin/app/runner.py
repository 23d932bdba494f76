"""``driftjoin run``: a similarity-join job described by a TOML file.

Example (the README lists every key)::

    [source]
    kind = "files"              # "generator", "files" or "kafka"
    format = "json"             # JSON lines, or "parquet"
    left = "data/left"          # relative paths are relative to this file's folder
    right = "data/right"
    schema = "id long, vector array<double>, ts timestamp"

    [join]
    threshold = 0.001
    metric = "angular"
    time_col = "ts"             # event time: the same pairs on every run
    watermark = "10 seconds"
    window = "1 minute"         # or window + slide = "20 seconds" (sliding), or within = "30 seconds"
    parallelism = 2

    [sink]
    kind = "parquet"            # or "console"
    path = "out/pairs"
    checkpoint = "out/checkpoint"
    trigger = "available-now"   # read what is there, then end

:meth:`JobConfig.load` checks every key before Spark starts (the ``[join]`` table through
:class:`~driftjoin.spark.similarity.settings.SimilaritySettings`, as ``similarity_join`` does), so
a mistake costs no session start and names the key as written (``[join] parallelism``).

Windows of a files source: without ``time_col`` a record's window would be decided by the wall
clock when its micro-batch runs, so replaying the same files gives other pairs. A files job
without ``time_col`` is therefore one window over its input unless ``processing_time = true`` in
``[join]`` asks for windows of processing time.

JSON lines (files) and Kafka values are read as text and parsed by :mod:`driftjoin.app.jsonlines`,
so a line that is not valid JSON, or whose values do not have the JSON types of the schema's
columns, is a dead letter with its original text and the reason (``not valid JSON``, ``name is not
a string: got an integer``), not a row of nulls nor a number read as text. Files and Kafka jobs
always run the dead-letter query (into ``dead_letters``, default ``<checkpoint>/dead-letters``),
so the summary can count them.

The ``[join]`` columns are checked against the columns the source declares before Spark starts
(:mod:`driftjoin.app.schema`).
"""

from __future__ import annotations

import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from driftjoin.app.jsonlines import parse_json_lines
from driftjoin.app.schema import check_columns
from driftjoin.generators.vectors import DISTRIBUTIONS
from driftjoin.metric_names import VECTOR, kind_of
from driftjoin.spark.runtime.settings import (
    SettingError,
    choice,
    duration,
    flag,
    integer,
    number,
    text,
)
from driftjoin.spark.similarity.settings import SimilaritySettings

Check = Callable[[str, Any], Any]

_SOURCE: dict[str, dict[str, Check]] = {
    "generator": {
        "rate": lambda n, v: number(n, v, low=0, low_open=True, what="records per second per stream"),
        "dim": lambda n, v: integer(n, v, what="the vectors' dimension"),
        "dist": lambda n, v: choice(n, v, DISTRIBUTIONS),
        "seed": lambda n, v: integer(n, v, low=0),
        "total": lambda n, v: integer(n, v, what="records per stream, then the source ends"),
        "pace": flag,
        "two_streams": flag,
        "clusters": lambda n, v: integer(n, v),
        "drift_period": lambda n, v: duration(n, v),
        "max_records_per_batch": lambda n, v: integer(n, v),
        "partitions": lambda n, v: integer(n, v, what="input partitions"),
    },
    "files": {
        "format": lambda n, v: choice(n, v, ("json", "parquet"), what="'json': JSON lines"),
        "left": lambda n, v: text(n, v, what="a directory of files, read as a stream"),
        "right": lambda n, v: text(n, v, what="a directory of files; omit it for a self-join"),
        "schema": lambda n, v: text(n, v, what="e.g. \"id long, vector array<double>, ts timestamp\""),
        "max_files_per_trigger": lambda n, v: integer(n, v),
    },
    "kafka": {
        "bootstrap_servers": lambda n, v: text(n, v),
        "left_topic": lambda n, v: text(n, v),
        "right_topic": lambda n, v: text(n, v),
        "schema": lambda n, v: text(n, v, what="of the JSON values"),
        "starting_offsets": lambda n, v: text(n, v),
    },
}
_REQUIRED = {"generator": (), "files": ("left", "schema"), "kafka": ("bootstrap_servers", "left_topic", "schema")}
#: Keys of ``[join]`` that are the job's, not ``similarity_join``'s.
_JOB_KEYS = {"processing_time": flag}
_SINK: dict[str, Check] = {
    "kind": lambda n, v: choice(n, v, ("parquet", "console")),
    "path": lambda n, v: text(n, v, what="a directory for the pairs"),
    "checkpoint": lambda n, v: text(n, v, what="a directory for the query's checkpoint"),
    "dead_letters": lambda n, v: text(n, v, what="a directory for the rows that cannot be joined"),
    "trigger": lambda n, v: v if v == "available-now" else duration(n, v),
    "timeout": lambda n, v: number(n, v, low=0, what="seconds; 0: no limit"),
}
#: Keys whose values are paths, resolved against the job file's folder.
_PATHS = {"source": ("left", "right"), "join": ("metrics_dir",), "sink": ("path", "checkpoint", "dead_letters")}


def _check_table(section: str, table: Mapping[str, Any], checks: Mapping[str, Check], what: str) -> None:
    for key, value in table.items():
        if key not in checks:
            raise SettingError(f"[{section}] {key}", f"is not a key of {what}; keys: {', '.join(sorted(checks))}",
                               show_value=False)
        checks[key](f"[{section}] {key}", value)


def _resolve(value: str, base: Path) -> str:
    """``value`` against ``base`` unless it is absolute or a URI (``s3://...``)."""
    if "://" in value or Path(value).is_absolute():
        return value
    return str(base / value)


@dataclass
class JobConfig:
    """A checked job file: its sections with paths resolved, and the join's keyword arguments."""

    source: dict[str, Any]
    join: dict[str, Any]
    sink: dict[str, Any]
    #: windows of processing time on a files source (``[join] processing_time = true``)
    processing_time: bool = False

    @staticmethod
    def load(path: str | Path) -> JobConfig:
        """Read and check a job file; relative paths in it are relative to its folder."""
        path = Path(path)
        try:
            raw = tomllib.loads(path.read_text())
        except FileNotFoundError:
            raise SettingError("config file", f"{path} does not exist", show_value=False) from None
        except tomllib.TOMLDecodeError as e:
            raise SettingError("config file", f"{path} is not valid TOML: {e}", show_value=False) from None
        return JobConfig.from_dict(raw, base=path.resolve().parent)

    @staticmethod
    def from_dict(raw: dict[str, Any], base: Path | None = None) -> JobConfig:
        """Check a job given as a dict (the TOML's tables); ``base``: the folder relative paths start from."""
        base = base or Path.cwd()
        for section in ("source", "join", "sink"):
            if not isinstance(raw.get(section), dict):
                raise SettingError(f"[{section}]", "is missing: a job file has [source], [join] and [sink] tables",
                                   show_value=False)
        unknown = sorted(set(raw) - {"source", "join", "sink"})
        if unknown:
            raise SettingError(f"[{unknown[0]}]", "is not a table of a job file (they are [source], [join], [sink])",
                               show_value=False)
        source = {"kind": "generator", **raw["source"]}
        kind = choice("[source] kind", source["kind"], tuple(_SOURCE))
        _check_table("source", {k: v for k, v in source.items() if k != "kind"}, _SOURCE[kind], f"a {kind} source")
        for key in _REQUIRED[kind]:
            if key not in source:
                raise SettingError(f"[source] {key}", f"is required for a {kind} source", show_value=False)
        sink = {"kind": "parquet", "trigger": "1 second", **raw["sink"]}
        _check_table("sink", sink, _SINK, "[sink]")
        if sink["kind"] == "parquet":
            for key in ("path", "checkpoint"):
                if key not in sink:
                    raise SettingError(f"[sink] {key}", "is required for a parquet sink (the checkpoint makes the "
                                                        "output exactly-once)", show_value=False)
        for section, table in (("source", source), ("sink", sink)):
            for key in _PATHS[section]:
                if key in table:
                    table[key] = _resolve(table[key], base)
        if kind == "files":
            for key in ("left", "right"):
                if key in source and "://" not in source[key] and not Path(source[key]).is_dir():
                    raise SettingError(f"[source] {key}", f"{source[key]} is not a directory (relative paths start at "
                                                          f"the job file's folder, {base})", show_value=False)
        join = dict(raw["join"])
        job = {k: _JOB_KEYS[k](f"[join] {k}", join.pop(k)) for k in list(join) if k in _JOB_KEYS}
        join = _join_settings(join, source, base)
        check_columns(source, join)
        if kind == "files" and join.get("time_col") is None and join.get("ingest_col") is None:
            if "window" in raw["join"] and join["window"] is not None and not job.get("processing_time", False):
                raise SettingError(
                    "[join] window", "without time_col would window a files source by the wall clock when each "
                    "micro-batch runs, so the same files give other pairs on every run: set time_col (and watermark) "
                    "for event-time windows, drop window for one window over the input, or set processing_time = true "
                    "to window by processing time", raw["join"]["window"])
            if not job.get("processing_time", False):
                join["window"] = None
        return JobConfig(source, join, sink, bool(job.get("processing_time", False)))

    @property
    def checkpoint(self) -> Path | None:
        return Path(self.sink["checkpoint"]) if "checkpoint" in self.sink else None

    @property
    def parallelism(self) -> int:
        """The workers, which also size the local session (2 unless ``[join] parallelism`` says)."""
        return int(self.join.get("parallelism") or 2)

    @property
    def available_now(self) -> bool:
        return self.sink["trigger"] == "available-now"

    @property
    def expected_records(self) -> int | None:
        """Records the source will deliver in all, if it is bounded (a generator with ``total``)."""
        src = self.source
        if src["kind"] == "generator" and "total" in src:
            return int(src["total"]) * (2 if src.get("two_streams", True) else 1)
        return None


def _join_settings(join: dict[str, Any], source: dict[str, Any], base: Path) -> dict[str, Any]:
    """The ``[join]`` table as ``similarity_join``'s keyword arguments, checked."""
    if isinstance(join.get("window"), str) and join["window"].strip().lower() == "none":
        join["window"] = None  # TOML has no None: one unbounded window
    if isinstance(join.get("bounds"), list):
        join["bounds"] = tuple(join["bounds"])
    if "metrics_dir" in join and isinstance(join["metrics_dir"], str):
        join["metrics_dir"] = _resolve(join["metrics_dir"], base)
    if source["kind"] == "generator" and kind_of(join.get("metric", "angular")) in (VECTOR, None):
        # the generator's vectors (a metric join of strings or sets compares none: dim is refused there)
        dim = source.get("dim", 2)
        if join.setdefault("dim", dim) != dim:
            raise SettingError("[join] dim", f"does not match the generator's vectors ([source] dim = {dim}): every "
                                             f"record would be a dead letter; drop [join] dim or make them equal",
                               join["dim"])
    if source["kind"] == "generator":
        join.setdefault("ingest_col", "ts")
    try:
        SimilaritySettings.check(join)
    except SettingError as e:
        raise e.spelled(f"[join] {e.name}") from None
    return join


def _generator(spark: Any, src: dict[str, Any], stream: int) -> Any:
    reader = spark.readStream.format("driftjoin").option("stream", stream)
    for key in ("rate", "dim", "dist", "seed", "total", "pace", "clusters", "drift_period", "max_records_per_batch", "partitions"):
        if key in src:
            reader = reader.option(key, str(src[key]).lower() if isinstance(src[key], bool) else src[key])
    return reader.load()


def _text(spark: Any, src: dict[str, Any], where: str) -> Any:
    if src["kind"] == "files":
        return spark.readStream.option("maxFilesPerTrigger", src.get("max_files_per_trigger", 1)).text(where)
    from pyspark.sql import functions as F

    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", src["bootstrap_servers"])
           .option("subscribe", where).option("startingOffsets", src.get("starting_offsets", "latest")).load())
    return raw.select(F.col("value").cast("string").alias("value"))


@dataclass
class Inputs:
    """The job's input streams: what the join reads, and the lines that could not be read (JSON
    lines and Kafka values; None for a generator or Parquet files)."""

    left: Any
    right: Any
    unreadable: Any


def read_schema(schema: str) -> Any:
    """``[source] schema`` as Spark's ``StructType`` (Spark parses DDL in the session's JVM); a
    schema Spark cannot read is a setting to change, named as the job file names it."""
    from pyspark.sql import types as T

    try:
        return T.StructType.fromDDL(schema)
    except Exception as e:
        if type(e).__name__ not in ("ParseException", "AnalysisException"):
            raise
        first = str(e).strip().splitlines()[0]
        raise SettingError("[source] schema", f"is not a schema Spark reads: {first}", schema) from None


def build_sources(spark: Any, src: dict[str, Any]) -> Inputs:
    if src["kind"] == "generator":
        return Inputs(_generator(spark, src, 0), _generator(spark, src, 1) if src.get("two_streams", True) else None, None)
    read_schema(src["schema"])
    if src["kind"] == "files" and src.get("format", "json") == "parquet":
        def read(where: str) -> Any:
            return (spark.readStream.schema(src["schema"]).option("maxFilesPerTrigger", src.get("max_files_per_trigger", 1))
                    .parquet(where))
        return Inputs(read(src["left"]), read(src["right"]) if "right" in src else None, None)
    from pyspark.sql import functions as F

    keys = ("left", "right") if src["kind"] == "files" else ("left_topic", "right_topic")
    sides = [parse_json_lines(_text(spark, src, src[k]), src["schema"]) for k in keys if k in src]
    clean = [s.where(F.col("_reason").isNull()).drop("_raw", "_reason") for s in sides]
    bad = [s.where(F.col("_reason").isNotNull()).select(F.lit(i).cast("byte").alias("side"), "_raw", "_reason")
           for i, s in enumerate(sides)]
    unreadable = bad[0] if len(bad) == 1 else bad[0].unionByName(bad[1])
    return Inputs(clean[0], clean[1] if len(clean) > 1 else None, unreadable)


@dataclass
class Job:
    """A started job: its queries (the join first), where its statistics and outputs go."""

    queries: list
    metrics_dir: str | None
    pairs_path: str | None
    dead_letters_path: str | None
    available_now: bool
    trigger_seconds: float | None


def dead_letters(inputs: Inputs, join: dict[str, Any]) -> Any:
    """The rows the join cannot use: ``invalid_records`` of what it reads (given every setting of
    the join, as its documentation asks, so both decide alike), and the lines that could not be
    read, with their text as ``raw``."""
    from pyspark.sql import functions as F

    from driftjoin.spark.similarity.api import invalid_records

    dead = invalid_records(inputs.left, inputs.right, **join)
    if inputs.unreadable is None:
        return dead
    id_type = dead.schema["id"].dataType
    lines = inputs.unreadable.select("side", F.lit(None).cast(id_type).alias("id"), F.col("_raw").alias("raw"),
                                     F.col("_reason").alias("reason"))
    return dead.unionByName(lines)


def start_job(spark: Any, cfg: JobConfig, *, available_now: bool = False, scratch: Path | None = None) -> Job:
    """Start the join query, and for files and Kafka sources the dead-letter query.

    Both queries are built before either starts, so a setting that only the input can refute
    fails with no query started and no checkpoint written. ``available_now`` (or ``trigger =
    "available-now"``) reads what the source has when the job starts and then ends, instead of
    running until stopped. ``scratch``: a folder for the checkpoints and statistics of a console
    sink (which has none of its own).
    """
    from driftjoin.spark.similarity.api import similarity_join

    inputs = build_sources(spark, cfg.source)
    join = dict(cfg.join)
    sink = cfg.sink
    checkpoint = Path(sink["checkpoint"]) if sink["kind"] == "parquet" else (scratch or Path(".")) / "checkpoint"
    join.setdefault("metrics_dir", str(checkpoint / "driftjoin-metrics"))
    pairs = similarity_join(inputs.left, inputs.right, **join)
    dead = dead_letters(inputs, join) if "dead_letters" in sink or cfg.source["kind"] != "generator" else None
    available_now = available_now or cfg.available_now
    seconds = None if available_now else duration("[sink] trigger", sink["trigger"])
    trig = {"availableNow": True} if available_now else {"processingTime": f"{seconds} seconds"}
    queries = []
    pairs_path = dead_path = None
    if sink["kind"] == "console":
        queries.append(pairs.writeStream.format("console").option("truncate", False)
                       .option("checkpointLocation", str(checkpoint / "pairs")).trigger(**trig).start())
    else:
        pairs_path = sink["path"]
        queries.append(pairs.writeStream.format("parquet").option("path", pairs_path)
                       .option("checkpointLocation", str(checkpoint / "pairs")).trigger(**trig).start())
    if dead is not None:
        dead_path = sink.get("dead_letters") or str(checkpoint / "dead-letters")
        queries.append(dead.writeStream.format("parquet").option("path", dead_path)
                       .option("checkpointLocation", str(checkpoint / "dead_letters")).trigger(**trig).start())
    return Job(queries, join["metrics_dir"], pairs_path, dead_path, available_now, seconds)
