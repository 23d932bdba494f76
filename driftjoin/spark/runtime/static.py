"""Running a streaming state processor once over a static group, with in-memory state.

Static DataFrames go through the same ``StatefulProcessor`` classes as streams, called from
``groupBy(...).applyInArrow`` (:func:`driftjoin.spark.runtime.stages.stateful_stage` chooses):
:func:`static_arrow_udf` hands a fresh processor a :class:`MemoryHandle` whose value and map
states live in memory for the one call, which is exact because a static input is one batch.
Tests use the handle to drive processors across several batches without Spark (state survives
between calls on the same processor).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
else:
    from driftjoin.deferred import pyarrow as pa



class MemoryValue:
    """An in-memory stand-in for a ``ValueState``."""

    def __init__(self) -> None:
        self._value: tuple | None = None

    def exists(self) -> bool:
        return self._value is not None

    def get(self) -> tuple | None:
        return self._value

    def update(self, value: tuple) -> None:
        self._value = value


class MemoryMap:
    """An in-memory stand-in for a ``MapState``."""

    def __init__(self) -> None:
        self._items: dict[tuple, tuple] = {}

    def exists(self) -> bool:
        return bool(self._items)

    def updateValue(self, key: tuple, value: tuple) -> None:
        self._items[key] = value

    def getValue(self, key: tuple) -> tuple | None:
        return self._items.get(key)

    def containsKey(self, key: tuple) -> bool:
        return key in self._items

    def removeKey(self, key: tuple) -> None:
        self._items.pop(key, None)

    def values(self) -> Iterator[tuple]:
        return iter(list(self._items.values()))


class MemoryHandle:
    """An in-process state handle: state survives between calls on the same processor."""

    def getValueState(self, name: str, schema: object) -> MemoryValue:
        return MemoryValue()

    def getMapState(self, name: str, key_schema: object, value_schema: object) -> MemoryMap:
        return MemoryMap()


def static_arrow_udf(make_processor: Callable[[], object], schema: pa.Schema):
    """The one static adapter: the function for ``groupBy(...).applyInArrow`` that runs a fresh
    processor over each group of a static DataFrame, all of its rows as one batch, with
    in-memory state (:class:`MemoryHandle`). Each frame the processor yields becomes its own Arrow
    batch(es), so an output larger than Arrow's 2 GB per array (S3J's memberships of a large
    high-dimensional input) never has to be one array.

    Its type hints tell PySpark to use the iterator form (batches in, batches out). PySpark 4.0
    has only the table form (a table in, one table out), so there the batches are returned as
    one table.
    """

    def run(key: tuple[pa.Scalar, ...], batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        processor = make_processor()
        processor.init(MemoryHandle())
        pdf = pa.Table.from_batches(list(batches)).to_pandas()
        plain_key = tuple(k.as_py() if isinstance(k, pa.Scalar) else k for k in key)
        for frame in processor.handleInputRows(plain_key, iter([pdf]), None):
            if len(frame):
                yield from pa.Table.from_pandas(frame, schema=schema, preserve_index=False).to_batches()

    def run_table(key: tuple[pa.Scalar, ...], table: pa.Table) -> pa.Table:
        return pa.Table.from_batches(list(run(key, iter(table.to_batches()))), schema=schema)

    return run if _arrow_iterator_form() else run_table


def _arrow_iterator_form() -> bool:
    """Whether this PySpark's ``applyInArrow`` takes the iterator form (4.1 and later)."""
    import pyspark

    return tuple(int(part) for part in pyspark.__version__.split(".")[:2]) >= (4, 1)
