"""The ``driftjoin-docs`` Spark data source: generated JSON document streams, streaming or static.

Usage::

    driftjoin.spark.sources.documents.register(spark)
    docs = (spark.readStream.format("driftjoin-docs")
            .option("kind", "serverlog").option("rate", 2000).option("seed", 1).load())
    pairs = natural_join(docs, window="10 seconds", time_col="ts", partitions=8)

Options: ``kind`` (``nobench``: NoBench-style objects; ``serverlog``: logins and file accesses,
see :mod:`driftjoin.schemafree.generator`), ``rate`` (documents/s), ``seed``, ``total`` (stop
after this many documents; default unbounded), ``pace`` (true: documents become available at
``rate`` in real time; false: all ``total`` at once), ``max_docs_per_batch`` (default and
processing-time triggers; ``availableNow`` reads everything available at once), ``partitions``
(read partitions per batch), ``start`` (epoch seconds of document 0; default: when the stream
starts), ``schedule`` (a varying rate, one of the thesis's workload shapes, as for the vector
source: :mod:`driftjoin.generators.rates`).

Document ``k`` has id ``k``, time ``start + k / rate`` (``start + time_of(k)`` under a
schedule) and a body that depends only on
``(kind, seed, k)``: documents are drawn in chunks of :data:`CHUNK` with a seed derived from
``(seed, chunk)``, so a replayed offset range gives identical rows (exactly-once). The value
pools of the generators (users' IPs, departments, files, ...) are drawn per chunk, so every
8192 documents the stream drifts a little. Columns:
``id long, doc string (JSON), ts timestamp``.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Iterator

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from driftjoin.generators.rates import RateSchedule
from driftjoin.schemafree.generator import nobench_documents, server_log_documents
from driftjoin.spark.sources.generator import (
    RangeBatchReader,
    RangeStreamReader,
    schedule_option,
)

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from driftjoin.deferred import pyarrow as pa

NAME = "driftjoin-docs"
SCHEMA = "id long, doc string, ts timestamp"
KINDS = ("nobench", "serverlog")
CHUNK = 8192


@dataclass(frozen=True)
class DocsOptions:
    kind: str
    rate: float
    seed: int
    total: int | None
    pace: bool
    max_per_batch: int | None
    partitions: int
    start: float | None
    schedule: RateSchedule

    @staticmethod
    def parse(options: dict[str, str]) -> "DocsOptions":
        def num(name: str, default: str) -> float:
            raw = options.get(name, default)
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{NAME} source option {name}={raw!r} must be a number") from None
            if not math.isfinite(value):
                raise ValueError(f"{NAME} source option {name}={raw!r} must be finite")
            return value

        kind = options.get("kind", "nobench")
        if kind not in KINDS:
            raise ValueError(f"{NAME} source option kind={kind!r}: choose one of {', '.join(KINDS)}")
        rate = num("rate", "1000")
        if rate <= 0:
            raise ValueError(f"{NAME} source option rate must be positive (documents per second)")
        total = options.get("total")
        mpb = options.get("max_docs_per_batch")
        pace = options.get("pace", "true").lower()
        if pace not in ("true", "false"):
            raise ValueError(f"{NAME} source option pace={pace!r}: use true or false")
        parsed = DocsOptions(
            kind=kind, rate=rate, seed=int(num("seed", "0")),
            total=None if total is None else int(num("total", "0")),
            pace=pace == "true",
            max_per_batch=None if mpb is None else int(num("max_docs_per_batch", "1")),
            partitions=max(1, int(num("partitions", "1"))),
            start=num("start", "0") if "start" in options else None,
            schedule=schedule_option(options, rate, NAME),
        )
        if parsed.total is not None and parsed.total < 0:
            raise ValueError(f"{NAME} source option total must be >= 0")
        if parsed.max_per_batch is not None and parsed.max_per_batch < 1:
            raise ValueError(f"{NAME} source option max_docs_per_batch must be >= 1")
        return parsed


@lru_cache(maxsize=8)
def _chunk(kind: str, seed: int, chunk: int) -> tuple[str, ...]:
    """The JSON text of the documents of one chunk (cached: partitions share chunks)."""
    chunk_seed = seed * 1_000_003 + chunk
    if kind == "nobench":
        docs = nobench_documents(CHUNK, seed=chunk_seed)
    else:
        docs = server_log_documents(CHUNK, seed=chunk_seed, timestamp=False)
    return tuple(json.dumps(d, separators=(",", ":")) for d in docs)


def read_range(opts: DocsOptions, first: int, last: int, start: float) -> Iterator[pa.RecordBatch]:
    """Documents ``first <= index < last``, chunk by chunk."""
    k = first
    while k < last:
        chunk = k // CHUNK
        end = min(last, (chunk + 1) * CHUNK)
        texts = _chunk(opts.kind, opts.seed, chunk)[k - chunk * CHUNK : end - chunk * CHUNK]
        ids = np.arange(k, end, dtype=np.int64)
        micros = np.round((start + opts.schedule.time_of(ids)) * 1e6).astype(np.int64)
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids), pa.array(list(texts), pa.string()), pa.array(micros, pa.timestamp("us", tz="UTC"))],
            names=["id", "doc", "ts"],
        )
        k = end


class DocsSource(DataSource):
    """Generated JSON document streams (see the module docstring for the options)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RangeBatchReader(DocsOptions.parse(self.options), read_range, NAME, "documents")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RangeStreamReader(DocsOptions.parse(self.options), read_range)


def register(spark: SparkSession) -> None:
    """Make ``format("driftjoin-docs")`` available on this session."""
    spark.dataSource.register(DocsSource)
