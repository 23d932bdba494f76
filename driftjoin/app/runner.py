"""``driftjoin run``: a similarity-join job described by a TOML file.

Example (see README for every key)::

    [source]
    kind = "generator"          # or "files" or "kafka"
    rate = 2000                 # generator: records/s per stream
    dim = 2
    dist = "uniform"
    two_streams = true

    [join]
    threshold = 0.001
    metric = "angular"
    window = "1 minute"         # or window + slide = "20 seconds" (sliding), or within = "30 seconds"
    parallelism = 2
    balance = "s3j"             # optional: "none" (default), "s3j" or "greedy"
    balance_options = { monitoring_window = 30, at = "window" }

    [sink]
    kind = "parquet"            # or "console"
    path = "out/pairs"
    checkpoint = "out/checkpoint"
    dead_letters = "out/dead"   # optional
    trigger = "1 second"        # or "available-now": read what is there, then end
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from driftjoin.durations import parse_duration

_JOIN_KEYS = {"threshold", "metric", "window", "slide", "within", "parallelism", "dim", "id_col", "vector_col", "time_col",
              "watermark", "ingest_col", "centroids", "seed", "bounds", "metrics_dir", "algorithm", "virtual_partitions",
              "balance", "balance_options", "partitions", "output", "block_bytes"}
#: The settings of the workset balancer (driftjoin.spark.similarity.control.BalanceController).
_BALANCE_OPTIONS = {"monitoring_window", "di_threshold", "latency_spread", "migration_factor", "split", "at", "load"}
_SOURCE_KEYS = {"kind", "rate", "dim", "dist", "seed", "total", "pace", "two_streams", "clusters", "drift_period",
                "max_records_per_batch", "format", "left", "right", "schema", "max_files_per_trigger",
                "bootstrap_servers", "left_topic", "right_topic", "starting_offsets", "partitions"}
_SINK_KEYS = {"kind", "path", "checkpoint", "dead_letters", "trigger", "timeout"}


@dataclass
class JobConfig:
    source: dict[str, Any]
    join: dict[str, Any]
    sink: dict[str, Any]

    @staticmethod
    def load(path: str | Path) -> "JobConfig":
        try:
            raw = tomllib.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ValueError(f"config file {path} does not exist") from None
        except tomllib.TOMLDecodeError as e:
            raise ValueError(f"config file {path} is not valid TOML: {e}") from None
        return JobConfig.from_dict(raw)

    @staticmethod
    def from_dict(raw: dict[str, Any]) -> "JobConfig":
        for section, allowed in (("source", _SOURCE_KEYS), ("join", _JOIN_KEYS), ("sink", _SINK_KEYS)):
            if section not in raw:
                raise ValueError(f"config needs a [{section}] section")
            unknown = set(raw[section]) - allowed
            if unknown:
                raise ValueError(f"unknown key(s) in [{section}]: {', '.join(sorted(unknown))}; allowed: {', '.join(sorted(allowed))}")
        join = raw["join"]
        if "threshold" not in join:
            raise ValueError("[join] needs threshold (a distance: pairs with distance <= threshold join)")
        options = join.get("balance_options", {})
        if not isinstance(options, dict):
            raise ValueError("[join] balance_options must be a table, e.g. balance_options = { monitoring_window = 30 }")
        unknown = set(options) - _BALANCE_OPTIONS
        if unknown:
            raise ValueError(f"unknown key(s) in [join] balance_options: {', '.join(sorted(unknown))}; "
                             f"allowed: {', '.join(sorted(_BALANCE_OPTIONS))}")
        if options and join.get("balance", "none") == "none":
            raise ValueError("[join] balance_options needs balance = \"s3j\" or \"greedy\"")
        sink = raw["sink"]
        if sink.get("kind", "parquet") == "parquet" and not {"path", "checkpoint"} <= set(sink):
            raise ValueError("a parquet [sink] needs path and checkpoint (the checkpoint makes the output exactly-once)")
        if sink.get("kind", "parquet") not in ("parquet", "console"):
            raise ValueError(f"[sink] kind must be 'parquet' or 'console', got {sink.get('kind')!r}")
        trigger = sink.get("trigger", "1 second")
        if trigger != "available-now":
            parse_duration(trigger, "[sink] trigger")
        return JobConfig(raw["source"], join, sink)

    @property
    def checkpoint(self) -> Path | None:
        return Path(self.sink["checkpoint"]) if "checkpoint" in self.sink else None

    @property
    def expected_records(self) -> int | None:
        """Records the source will deliver in all, if it is bounded (a generator with ``total``)."""
        src = self.source
        if src.get("kind", "generator") == "generator" and "total" in src:
            return int(src["total"]) * (2 if src.get("two_streams", True) else 1)
        return None


def _generator(spark: SparkSession, src: dict[str, Any], stream: int) -> DataFrame:
    reader = spark.readStream.format("driftjoin").option("stream", stream)
    for key in ("rate", "dim", "dist", "seed", "total", "pace", "clusters", "drift_period", "max_records_per_batch", "partitions"):
        if key in src:
            reader = reader.option(key, str(src[key]).lower() if isinstance(src[key], bool) else src[key])
    return reader.load()


def _files(spark: SparkSession, src: dict[str, Any], path: str) -> DataFrame:
    fmt = src.get("format", "json")
    if fmt not in ("json", "parquet"):
        raise ValueError(f"[source] format must be 'json' (JSON lines) or 'parquet', got {fmt!r}")
    if "schema" not in src:
        raise ValueError("a files [source] needs schema, e.g. schema = \"id long, vector array<double>\"")
    reader = spark.readStream.schema(src["schema"]).option("maxFilesPerTrigger", src.get("max_files_per_trigger", 1))
    return reader.json(path) if fmt == "json" else reader.parquet(path)


def _kafka(spark: SparkSession, src: dict[str, Any], topic: str) -> DataFrame:
    """Kafka topic of JSON values (needs the spark-sql-kafka connector on the classpath)."""
    from pyspark.sql import functions as F

    if "schema" not in src or "bootstrap_servers" not in src:
        raise ValueError("a kafka [source] needs bootstrap_servers and schema (of the JSON values)")
    raw = (spark.readStream.format("kafka").option("kafka.bootstrap.servers", src["bootstrap_servers"])
           .option("subscribe", topic).option("startingOffsets", src.get("starting_offsets", "latest")).load())
    return raw.select(F.from_json(F.col("value").cast("string"), src["schema"]).alias("r")).select("r.*")


def build_sources(spark: SparkSession, src: dict[str, Any]) -> tuple[DataFrame, DataFrame | None]:
    kind = src.get("kind", "generator")
    if kind == "generator":
        left = _generator(spark, src, 0)
        right = _generator(spark, src, 1) if src.get("two_streams", True) else None
    elif kind == "files":
        if "left" not in src:
            raise ValueError("a files [source] needs left (a directory of JSON-lines or Parquet files)")
        left = _files(spark, src, src["left"])
        right = _files(spark, src, src["right"]) if "right" in src else None
    elif kind == "kafka":
        left = _kafka(spark, src, src["left_topic"])
        right = _kafka(spark, src, src["right_topic"]) if "right_topic" in src else None
    else:
        raise ValueError(f"[source] kind must be 'generator', 'files' or 'kafka', got {kind!r}")
    return left, right


@dataclass
class Job:
    """A started job: its queries (the join first), where its statistics and outputs go."""

    queries: list
    metrics_dir: str | None
    pairs_path: str | None
    dead_letters_path: str | None
    available_now: bool


def start_job(spark: SparkSession, cfg: JobConfig, *, available_now: bool = False) -> Job:
    """Start the join query (and the dead-letter query if configured).

    ``available_now`` (or ``trigger = "available-now"``) reads what the source has when the job
    starts and then ends, instead of running until stopped.
    """
    from driftjoin.spark.similarity.api import invalid_records, similarity_join

    left, right = build_sources(spark, cfg.source)
    join = dict(cfg.join)
    if cfg.source.get("kind", "generator") == "generator":
        join.setdefault("dim", int(cfg.source.get("dim", 2)))
        join.setdefault("ingest_col", "ts")
    if "bounds" in join:
        join["bounds"] = tuple(join["bounds"])
    sink = cfg.sink
    if sink.get("kind", "parquet") == "parquet":
        join.setdefault("metrics_dir", str(Path(sink["checkpoint"]) / "driftjoin-metrics"))
    pairs = similarity_join(left, right, **join)
    trigger = sink.get("trigger", "1 second")
    available_now = available_now or trigger == "available-now"
    trig = {"availableNow": True} if available_now else {"processingTime": f"{parse_duration(trigger, 'trigger')} seconds"}
    queries = []
    pairs_path = dead_path = None
    if sink.get("kind", "parquet") == "console":
        queries.append(pairs.writeStream.format("console").option("truncate", False).trigger(**trig).start())
    else:
        pairs_path = sink["path"]
        queries.append(pairs.writeStream.format("parquet").option("path", pairs_path)
                       .option("checkpointLocation", str(Path(sink["checkpoint"]) / "pairs")).trigger(**trig).start())
        if "dead_letters" in sink:
            dead_path = sink["dead_letters"]
            dead = invalid_records(left, right, metric=join.get("metric", "angular"), dim=join["dim"],
                                   id_col=join.get("id_col", "id"), vector_col=join.get("vector_col", "vector"))
            queries.append(dead.writeStream.format("parquet").option("path", dead_path)
                           .option("checkpointLocation", str(Path(sink["checkpoint"]) / "dead_letters")).trigger(**trig).start())
    return Job(queries, join.get("metrics_dir"), pairs_path, dead_path, available_now)
