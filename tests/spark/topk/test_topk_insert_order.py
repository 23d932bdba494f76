"""The total order in which the top-k operators insert a batch's sets (``insert_order``) is the
sort by (time, side, id, tokens), whatever order the rows arrive in, also where the tokens
alone break a tie; ``batch_sets`` hands the rows on as plain values; the collector is paused
during a batch's inserts and left as it was."""

from __future__ import annotations

import gc

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.spark.topk.operators import batch_sets, collector_paused, insert_order

ROWS = st.lists(st.tuples(st.sampled_from([0.0, 1.0, 1.5]), st.integers(0, 1), st.integers(0, 3),
                          st.lists(st.sampled_from(["a", "b", "c"]), min_size=1, max_size=3)), max_size=25)


@settings(max_examples=200, deadline=None)
@given(rows=ROWS, seed=st.integers(0, 99))
def test_insert_order_is_the_sort_by_time_side_id_tokens(rows, seed):
    pdf = pd.DataFrame({"ts": [r[0] for r in rows], "side": np.array([r[1] for r in rows], np.int8),
                        "id": np.array([r[2] for r in rows], np.int64),
                        "tokens": [np.array(r[3], object) for r in rows]})
    shuffled = pdf.sample(frac=1, random_state=seed)
    expected = sorted(rows, key=lambda r: (r[0], r[1], r[2], "\x1f".join(r[3])))
    got = [(ts, side, sid, list(tokens)) for sid, side, tokens, ts in batch_sets(insert_order(shuffled))]
    assert [(r[0], r[1], r[2], "\x1f".join(r[3])) for r in got] == [
        (r[0], r[1], r[2], "\x1f".join(r[3])) for r in expected]
    assert all(type(r[0]) is float and type(r[1]) is int and type(r[2]) is int for r in got)


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_paused_restores_the_collector(enabled):
    (gc.enable if enabled else gc.disable)()
    try:
        with pytest.raises(KeyError):
            with collector_paused():
                assert not gc.isenabled()
                raise KeyError("a failing batch")
        assert gc.isenabled() == enabled
    finally:
        gc.enable()
