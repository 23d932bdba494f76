"""equi_join's payloads without Spark: a row's values, carried as the parallel routing carries them
(the side's struct through Arrow IPC, taken at the pairs' rows) or as the dispatcher does
(pickled by the router, kept by a worker), and emitted as a joined row's columns, come out of
PySpark's own pandas-to-Arrow conversion (the one that hands a worker's output to the JVM)
exactly as they went in, for drawn values of every type that travels typed, nulls, NaN and -0.0
included."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql import types as T
from pyspark.sql.conversion import PandasToArrowConversion

from driftjoin.hypercube.columnar import from_ipc, to_ipc
from driftjoin.spark.equi.payload import (
    Field,
    PayloadLayout,
    columns_frame,
    decode,
    encode_rows,
    joined_columns,
    pairs_frame,
)

UTC = dt.timezone.utc
TYPES = {
    "b": (T.ByteType(), st.integers(-128, 127)),
    "i": (T.IntegerType(), st.integers(-2**31, 2**31 - 1)),
    "l": (T.LongType(), st.integers(-2**63, 2**63 - 1)),
    "f": (T.FloatType(), st.floats(width=32, allow_nan=True, allow_infinity=True)),
    "d": (T.DoubleType(), st.floats(allow_nan=True, allow_infinity=True)),
    "z": (T.BooleanType(), st.booleans()),
    "s": (T.StringType(), st.text(max_size=5)),
    "y": (T.BinaryType(), st.binary(max_size=5)),
    "day": (T.DateType(), st.dates()),
    "dec": (T.DecimalType(20, 4), st.decimals(min_value=Decimal("-1e15"), max_value=Decimal("1e15"), places=4,
                                               allow_nan=False, allow_infinity=False)),
    "at": (T.TimestampType(), st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30),
                                           timezones=st.just(UTC))),
    "ntz": (T.TimestampNTZType(), st.datetimes(min_value=dt.datetime(1, 1, 2), max_value=dt.datetime(9999, 12, 30))),
}
NAMES = sorted(TYPES)
FIELDS = tuple(Field(n, TYPES[n][0].json(), True) for n in NAMES)
# the output: every left column, then every right column
LAYOUT = PayloadLayout((FIELDS, FIELDS), tuple((s, j, f"{'lr'[s]}_{n}") for s in (0, 1) for j, n in enumerate(NAMES)))
ROWS = st.lists(st.tuples(*[st.none() | TYPES[n][1] for n in NAMES]), min_size=0, max_size=12)


def _batch(rows: list[tuple], side: int) -> pa.RecordBatch:
    """Rows of one side as the router gets them (the other side's struct null)."""
    struct = LAYOUT.struct_type(side)
    from pyspark.sql.pandas.types import to_arrow_type

    arrow = to_arrow_type(struct, timezone="UTC")
    values = pa.array([dict(zip(NAMES, r)) for r in rows], arrow)
    empty = pa.nulls(len(rows), arrow)
    return pa.RecordBatch.from_arrays([pa.array([side] * len(rows), pa.int8()),
                                       *((values, empty) if side == 0 else (empty, values))], names=["side", "l", "r"])


def _same(a: object, b: object) -> bool:
    if isinstance(a, float) and isinstance(b, float):
        return (np.isnan(a) and np.isnan(b)) or (a == b and np.copysign(1, a) == np.copysign(1, b))
    return type(a) is type(b) and a == b


@settings(max_examples=60, deadline=None)
@given(left=ROWS, right=ROWS, parallel=st.booleans(), rnd=st.randoms(use_true_random=False))
def test_values_come_out_of_pysparks_conversion_as_they_went_in(left, right, parallel, rnd) -> None:
    n = min(len(left), len(right))
    if parallel:  # the side's struct through Arrow IPC (as routed and stored), taken at shuffled pair rows
        order = list(range(n))
        rnd.shuffle(order)
        rows = [from_ipc(to_ipc(pa.table({"row": _batch(r, s).column("lr"[s])})))["row"] for s, r in ((0, left), (1, right))]
        frame = columns_frame(joined_columns(LAYOUT, rows[0], np.array(order, dtype=np.int64), rows[1],
                                             np.array(order, dtype=np.int64)))
        left, right = [left[i] for i in order], [right[i] for i in order]
    else:
        kept = [decode(encode_rows(_batch(rows, s), np.full(len(rows), s, np.int8)).to_pylist())
                for s, rows in ((0, left), (1, right))]
        frame = pairs_frame(LAYOUT, kept[0][:n], kept[1][:n])
    out = PandasToArrowConversion.convert(frame, LAYOUT.output_schema(), timezone="UTC")
    want = [list(r) for r in left[:n]]
    for i, r in enumerate(right[:n]):
        want[i] += list(r)
    got = [list(row.values()) for row in out.to_pylist()]
    assert len(got) == n
    for g, w in zip(got, want):
        assert all(_same(a, b) for a, b in zip(g, w)), (g, w)
