"""The ``driftjoin-persons`` Spark data source: person records with known duplicates, streaming or static.

Usage::

    people = (spark.readStream.format("driftjoin-persons")
              .option("rate", 1000).option("seed", 1).option("stream", 0).load())
    pairs = link(people, rules=[...], id_col="id", within="1 minute")

Records come from :mod:`driftjoin.generators.persons` (typos, swapped and missing fields, skewed
postcodes and surnames; ``entity`` is the ground truth). Options: ``rate`` (records/s),
``seed``, ``stream`` (0, 1, ...: streams whose duplicates refer to each other's entities, for a
two-sided link; ids are unique across streams), ``total`` (stop after this many records;
required for a static read), ``pace`` (true: records become available at ``rate`` in real time;
false: all at once with times ``start + k / rate``), ``max_records_per_batch``, ``partitions``
(read partitions per batch), ``start`` (epoch seconds of record 0), ``schedule`` (a varying
rate: :mod:`driftjoin.generators.rates`), and the generator's ``dup_rate``, ``spread``,
``max_errors``, ``zipf`` (postcodes), ``name_zipf``, ``postcodes``, ``surnames``,
``given_names``, ``streets``, ``streams``.

Record ``k`` has time ``start + time_of(k)`` and values that depend only on the options and
``k``'s chunk, so a replayed offset range gives identical rows (exactly-once). Columns:
``id long, entity long, given_name string, surname string, dob date, address string, postcode
string, ts timestamp, stream int``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Iterator

import numpy as np
from pyspark.sql import SparkSession
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from driftjoin.generators.persons import PersonOptions, person_records
from driftjoin.generators.rates import RateSchedule
from driftjoin.spark.sources.generator import RangeBatchReader, RangeStreamReader, schedule_option

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from driftjoin.deferred import pyarrow as pa

NAME = "driftjoin-persons"
SCHEMA = ("id long, entity long, given_name string, surname string, dob date, address string, postcode string, "
          "ts timestamp, stream int")
_INTS = ("spread", "max_errors", "postcodes", "surnames", "given_names", "streets", "streams")
_FLOATS = ("dup_rate", "zipf", "name_zipf")


@dataclass(frozen=True)
class PersonSourceOptions:
    """The source's options, checked (the module docstring)."""

    rate: float
    seed: int
    stream: int
    total: int | None
    pace: bool
    max_per_batch: int | None
    partitions: int
    start: float | None
    schedule: RateSchedule
    persons: PersonOptions

    @staticmethod
    def parse(options: dict[str, str]) -> "PersonSourceOptions":
        def num(name: str, default: str) -> float:
            raw = options.get(name, default)
            try:
                value = float(raw)
            except ValueError:
                raise ValueError(f"{NAME} source option {name}={raw!r} must be a number") from None
            if not math.isfinite(value):
                raise ValueError(f"{NAME} source option {name}={raw!r} must be finite")
            return value

        known = {"rate", "seed", "stream", "total", "pace", "max_records_per_batch", "partitions", "start", "schedule",
                 *_INTS, *_FLOATS}
        unknown = sorted(k for k in options if k.lower() not in known and k != "path")
        if unknown:
            raise ValueError(f"{NAME} source has no option {unknown[0]!r}; options: {', '.join(sorted(known))}")
        rate = num("rate", "1000")
        if rate <= 0:
            raise ValueError(f"{NAME} source option rate must be positive (records per second)")
        pace = options.get("pace", "true").lower()
        if pace not in ("true", "false"):
            raise ValueError(f"{NAME} source option pace={pace!r}: use true or false")
        defaults = PersonOptions()
        given = {f.name: (int if f.name in _INTS else float)(num(f.name, str(getattr(defaults, f.name))))
                 for f in fields(PersonOptions)}
        try:
            persons = PersonOptions(**given)
        except ValueError as e:
            raise ValueError(f"{NAME} source option {e}") from None
        total = None if "total" not in options else int(num("total", "0"))
        mpb = None if "max_records_per_batch" not in options else int(num("max_records_per_batch", "1"))
        stream = int(num("stream", "0"))
        if (total is not None and total < 0) or (mpb is not None and mpb < 1) or not 0 <= stream < persons.streams:
            raise ValueError(f"{NAME} source options: total must be >= 0, max_records_per_batch >= 1 and stream in "
                             f"[0, streams) = [0, {persons.streams})")
        return PersonSourceOptions(rate=rate, seed=int(num("seed", "0")), stream=stream, total=total,
                                   pace=pace == "true", max_per_batch=mpb,
                                   partitions=max(1, int(num("partitions", "1"))),
                                   start=num("start", "0") if "start" in options else None,
                                   schedule=schedule_option(options, rate, NAME), persons=persons)


def read_range(opts: PersonSourceOptions, first: int, last: int, start: float) -> Iterator[pa.RecordBatch]:
    """Records ``first <= index < last`` as Arrow batches of at most 8192 rows."""
    step = 8192
    for lo in range(first, last, step):
        hi = min(last, lo + step)
        r = person_records(opts.seed, opts.stream, lo, hi - lo, opts.persons)
        index = np.arange(lo, hi, dtype=np.int64)
        micros = np.round((start + opts.schedule.time_of(index)) * 1e6).astype(np.int64)
        yield pa.RecordBatch.from_arrays(
            [pa.array(r["id"]), pa.array(r["entity"]), pa.array(r["given_name"], pa.string()),
             pa.array(r["surname"], pa.string()), pa.array(r["dob"], pa.date32()),
             pa.array(r["address"], pa.string()), pa.array(r["postcode"], pa.string()),
             pa.array(micros, pa.timestamp("us", tz="UTC")), pa.array(np.full(hi - lo, opts.stream, np.int32))],
            names=["id", "entity", "given_name", "surname", "dob", "address", "postcode", "ts", "stream"])


class PersonsSource(DataSource):
    """Generated person records (the module docstring lists the options)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return RangeBatchReader(PersonSourceOptions.parse(self.options), read_range, NAME, "records")

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return RangeStreamReader(PersonSourceOptions.parse(self.options), read_range)


def register(spark: SparkSession) -> None:
    """Make ``format("driftjoin-persons")`` available on this session."""
    spark.dataSource.register(PersonsSource)
