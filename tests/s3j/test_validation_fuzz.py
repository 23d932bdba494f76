"""Fuzzed input batches: every malformed row gets a reason, every valid row passes unchanged
(including elements too large for metrics on raw coordinates)."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.spark.runtime.vectors import MAX_MAGNITUDE, validate

element = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=64), st.none(), st.integers(-5, 5).map(float))
vector = st.one_of(st.none(), st.lists(element, min_size=0, max_size=5))
row = st.tuples(st.one_of(st.none(), st.integers(0, 10**6)), vector)


@settings(max_examples=300, deadline=None)
@given(rows=st.lists(row, max_size=40), dim=st.integers(1, 4), nonzero=st.booleans(), bounded=st.booleans())
def test_every_bad_row_has_a_reason_and_good_rows_pass(rows, dim, nonzero, bounded):
    ids = pa.array([r[0] for r in rows], pa.int64())
    vecs = pa.array([r[1] for r in rows], pa.list_(pa.float64()))
    valid, reason, mat = validate(ids, vecs, dim, nonzero, bounded)
    good = 0
    for (rid, v), ok, why in zip(rows, valid, reason):
        expect_ok = (rid is not None and v is not None and len(v) == dim and all(x is not None and math.isfinite(x) for x in v)
                     and (not nonzero or any(x != 0 for x in v))
                     and (not bounded or all(abs(x) <= MAX_MAGNITUDE for x in v)))
        assert ok == expect_ok, (rid, v, why)
        assert (why is None) == ok
        if ok:
            assert np.array_equal(mat[good], np.array(v, dtype=float))
            good += 1
    assert len(mat) == good
