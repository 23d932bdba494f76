"""The ``driftjoin`` Spark data source: generated vector streams, streaming or static.

Usage::

    driftjoin.spark.sources.generator.register(spark)
    left = (spark.readStream.format("driftjoin")
            .option("rate", 4000).option("dim", 2).option("dist", "uniform")
            .option("stream", 0).option("seed", 1).load())

Options: ``rate`` (records/s), ``dim``, ``dist`` (uniform, gaussian, skewed, pareto, drift),
``seed``, ``stream`` (0, 1, ... : independent streams, e.g. left and right), ``total``
(stop after this many records; default unbounded), ``pace`` (true: records become available
at ``rate`` in real time and ``ts`` is their generation time; false: all ``total`` records at
once with synthetic times ``start + index/rate``), ``max_records_per_batch``, ``partitions``,
``clusters``, ``drift_period`` (seconds per turn of the drifting clusters), ``schedule`` (a
varying input rate instead of ``rate``: one of the thesis's workload shapes, e.g.
``"cosine:low=100,high=2000,duration=600"``; see :mod:`driftjoin.generators.rates`).

Record ``index`` k has id k, time ``start + time_of(k)`` (``k / rate`` at a constant rate)
and a vector that depends only on ``(seed, stream, k)``'s chunk, so a replayed offset range
gives identical rows (exactly-once). The stream reports its latest offset (what the source
offers now, and the schedule) in the query progress, so a driver can tell its lag.
Columns: ``id long, vector array<double>, ts timestamp, stream int``.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Iterator

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.types import StructType

from driftjoin.generators.rates import RateSchedule
from driftjoin.generators.vectors import DISTRIBUTIONS, generate_vectors

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from driftjoin.deferred import pyarrow as pa

SCHEMA = "id long, vector array<double>, ts timestamp, stream int"
CHUNK = 1024


@dataclass(frozen=True)
class GeneratorOptions:
    rate: float
    dim: int
    dist: str
    seed: int
    stream: int
    total: int | None
    pace: bool
    max_per_batch: int | None
    partitions: int
    clusters: int
    drift_period: float
    start: float | None
    schedule: RateSchedule

    @staticmethod
    def parse(options: dict[str, str]) -> "GeneratorOptions":
        def num(name: str, default: str) -> float:
            raw = options.get(name, default)
            try:
                return float(raw)
            except ValueError:
                raise ValueError(f"driftjoin source option {name}={raw!r} must be a number") from None

        dist = options.get("dist", "uniform")
        if dist not in DISTRIBUTIONS:
            raise ValueError(f"driftjoin source option dist={dist!r}: choose one of {', '.join(DISTRIBUTIONS)}")
        rate, dim = num("rate", "1000"), int(num("dim", "2"))
        if rate <= 0 or dim < 1:
            raise ValueError("driftjoin source options rate and dim must be positive")
        total = options.get("total")
        mpb = options.get("max_records_per_batch")
        return GeneratorOptions(
            rate=rate, dim=dim, dist=dist, seed=int(num("seed", "0")), stream=int(num("stream", "0")),
            total=None if total is None else int(float(total)),
            pace=options.get("pace", "true").lower() != "false",
            max_per_batch=None if mpb is None else int(float(mpb)),
            partitions=max(1, int(num("partitions", "1"))), clusters=int(num("clusters", "8")),
            drift_period=num("drift_period", "120"),
            start=float(options["start"]) if "start" in options else None,
            schedule=schedule_option(options, rate, "driftjoin"),
        )


def schedule_option(options: dict[str, str], rate: float, source: str) -> RateSchedule:
    """The ``schedule`` option (a :class:`RateSchedule` spec), else a constant ``rate``."""
    spec = options.get("schedule")
    if spec is None:
        return RateSchedule("constant", high=rate)
    try:
        return RateSchedule.parse(spec)
    except ValueError as e:
        raise ValueError(f"{source} source option schedule: {e}") from None


@dataclass(frozen=True)
class RangePartition(InputPartition):
    first: int
    last: int
    start: float


def read_range(opts: GeneratorOptions, first: int, last: int, start: float) -> Iterator[pa.RecordBatch]:
    """Rows ``first <= index < last``, generated chunk by chunk (aligned to CHUNK)."""
    k = first
    while k < last:
        chunk = (k // CHUNK) * CHUNK
        end = min(last, chunk + CHUNK)
        times = start + opts.schedule.time_of(np.arange(chunk, chunk + CHUNK))
        vec = generate_vectors(opts.dist, seed=opts.seed, stream=opts.stream, start=chunk, count=CHUNK, dim=opts.dim,
                               times=times - start, clusters=opts.clusters, drift_period=opts.drift_period)
        lo, hi = k - chunk, end - chunk
        ids = np.arange(k, end, dtype=np.int64)
        flat = pa.array(vec[lo:hi].ravel())
        offsets = pa.array(np.arange(0, (hi - lo) * opts.dim + 1, opts.dim, dtype=np.int32))
        yield pa.RecordBatch.from_arrays(
            [pa.array(ids), pa.ListArray.from_arrays(offsets, flat),
             pa.array((times[lo:hi] * 1e6).astype(np.int64), pa.timestamp("us", tz="UTC")),
             pa.array(np.full(hi - lo, opts.stream, dtype=np.int32))],
            names=["id", "vector", "ts", "stream"],
        )
        k = end


def _split(first: int, last: int, parts: int, start: float) -> list[RangePartition]:
    bounds = np.linspace(first, last, parts + 1).astype(np.int64)
    return [RangePartition(int(a), int(b), start) for a, b in zip(bounds, bounds[1:]) if b > a]


class RangeStreamReader(DataSourceStreamReader):
    """A stream of generated rows addressed by index: offsets are ``{"index", "start"}``.

    ``read_fn(opts, first, last, start)`` yields the rows ``first <= index < last``; ``opts``
    carries ``start``, ``total``, ``schedule`` (the input rate over time), ``pace``,
    ``max_per_batch`` and ``partitions``.
    Shared by the vector generator and the document generator (:mod:`driftjoin.spark.sources.documents`).
    """

    def __init__(self, opts, read_fn: Callable[..., Iterator[pa.RecordBatch]]) -> None:
        self.opts = opts
        self.read_fn = read_fn
        self._start: float | None = None

    def initialOffset(self) -> dict:
        start = self.opts.start if self.opts.start is not None else time.time()
        return {"index": 0, "start": float(start)}

    def latestOffset(self, start: dict | None = None, limit: object = None) -> dict:
        from pyspark.sql.streaming.datasource import ReadMaxRows

        o = self.opts
        begin = start or self.initialOffset()
        self._start = begin["start"]
        index = self._offered(begin["start"])
        # availableNow asks with ReadAllAvailable for its end offset: then no per-batch cap
        cap = limit.max_rows if isinstance(limit, ReadMaxRows) else (o.max_per_batch if limit is None else None)
        if cap:
            index = min(index, begin["index"] + int(cap))
        return {"index": max(index, begin["index"]), "start": begin["start"]}

    def _offered(self, start: float) -> int:
        """Records the source offers now: all of them unpaced, else what the schedule made."""
        o = self.opts
        target = o.total if o.total is not None else math.inf
        if o.pace:
            target = min(target, math.floor(float(o.schedule.count(time.time() - start)) + 1e-9))
        return int(min(target, 2**62))

    def reportLatestOffset(self) -> dict | None:
        """What is offered now (``index``) and the schedule: the query progress's latestOffset."""
        if self._start is None:
            return None
        report = {"index": self._offered(self._start), "start": self._start}
        if self.opts.pace:
            report["schedule"] = self.opts.schedule.spec()
            if self.opts.total is not None:
                report["total"] = self.opts.total
        return report

    def getDefaultReadLimit(self) -> object:
        from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

        return ReadMaxRows(self.opts.max_per_batch) if self.opts.max_per_batch else ReadAllAvailable()

    def partitions(self, start: dict, end: dict) -> list[RangePartition]:
        return _split(start["index"], end["index"], self.opts.partitions, end["start"])

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return self.read_fn(self.opts, partition.first, partition.last, partition.start)

    def commit(self, end: dict) -> None:
        pass


class RangeBatchReader(DataSourceReader):
    """The static read of a :class:`RangeStreamReader` source: rows ``0 <= index < total``."""

    def __init__(self, opts, read_fn: Callable[..., Iterator[pa.RecordBatch]], source: str, unit: str) -> None:
        if opts.total is None:
            raise ValueError(f"a static read of the {source} source needs option total (number of {unit})")
        self.opts = opts
        self.read_fn = read_fn

    def partitions(self) -> list[RangePartition]:
        return _split(0, self.opts.total or 0, self.opts.partitions, self.opts.start or 0.0)

    def read(self, partition: RangePartition) -> Iterator[pa.RecordBatch]:
        return self.read_fn(self.opts, partition.first, partition.last, partition.start)


class DriftjoinSource(DataSource):
    """Generated vector streams (see the module docstring for the options)."""

    @classmethod
    def name(cls) -> str:
        return "driftjoin"

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RangeBatchReader(GeneratorOptions.parse(self.options), read_range, "driftjoin", "records")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RangeStreamReader(GeneratorOptions.parse(self.options), read_range)


def register(spark: SparkSession) -> None:
    """Make ``format("driftjoin")`` available on this session."""
    spark.dataSource.register(DriftjoinSource)
