"""Heartbeat rows: every key of a stateful stage runs on every micro-batch that has data.

Spark calls a stateful processor only for the keys that received rows in a batch. The operators
need every key to run on every batch with data, whatever the data: each key stores and checks the
plan (:mod:`driftjoin.spark.runtime.plan_guard`) and closes windows by the same frontier (the
largest time of earlier batches, :mod:`driftjoin.clock`), so that a late record is refused the
same way at every key it reaches. So every routing task sends one heartbeat row to every key of
the next stateful stage (and to :data:`~driftjoin.spark.runtime.plan_guard.PLAN_KEY`), carrying
what the keys must learn from it (the largest window time it saw; natural_join adds its routing
view). A heartbeat is a row of the stage's own schema with a marker value in one column; its
other columns hold fillers that are never read.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from driftjoin.clock import batch_max

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa

#: The marker of a heartbeat row in the operators that mark them in a ``side`` column.
HEARTBEAT = -1


def filler(dtype: pa.DataType) -> object:
    """A non-null placeholder of an Arrow type (a null would turn an int column into floats in pandas)."""
    if pa.types.is_binary(dtype):
        return b""
    if pa.types.is_string(dtype):
        return ""
    if pa.types.is_boolean(dtype):
        return False
    return 0


def heartbeat_batch(schema: pa.Schema, keys: Sequence[int], values: Mapping[str, Any]) -> pa.RecordBatch:
    """One heartbeat row per key of ``keys`` (the schema's first column) with ``values`` in the
    columns they name and fillers elsewhere.

    Parameters
    ----------
    schema:
        The rows' schema; its first field is the grouping key of the next stateful stage.
    keys:
        The keys to reach (every worker key, usually with ``PLAN_KEY``).
    values:
        Column name -> the value every heartbeat row carries there (``None`` for a null).

    Example
    -------
    >>> import pyarrow as pa
    >>> schema = pa.schema([("key", pa.int32()), ("side", pa.int8()), ("ingest", pa.float64()), ("id", pa.string())])
    >>> heartbeat_batch(schema, [3, 7], {"side": HEARTBEAT, "ingest": 12.5}).to_pydict()
    {'key': [3, 7], 'side': [-1, -1], 'ingest': [12.5, 12.5], 'id': ['', '']}
    """
    n = len(keys)
    cols = [pa.array(list(keys), schema.field(0).type)]
    for f in list(schema)[1:]:
        value = values[f.name] if f.name in values else filler(f.type)
        cols.append(pa.array([value] * n, f.type))
    return pa.RecordBatch.from_arrays(cols, schema=schema)


def heartbeat_frame(schema: pa.Schema, keys: Sequence[int], values: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`heartbeat_batch` as the pandas frame a stateful processor yields."""
    return heartbeat_batch(schema, keys, values).to_pandas()


def split_heartbeats(pdf: pd.DataFrame, marker: str = "side", time: str = "ingest") -> tuple[pd.DataFrame, float]:
    """The records of a key's batch (rows whose ``marker`` is not :data:`HEARTBEAT`) and the
    batch's largest window time (the largest ``time`` of its heartbeats)."""
    beat = pdf[marker].to_numpy() == HEARTBEAT
    top = batch_max(pdf[time].to_numpy(dtype=np.float64)[beat])
    return pdf[~beat].reset_index(drop=True), top
