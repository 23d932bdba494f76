"""The array idioms of the vectorised cores against plain loops."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from driftjoin.runs import code_points, run_positions


@given(st.lists(st.integers(0, 6), max_size=30))
def test_run_positions_are_the_loops_ranges(counts):
    want = [j for c in counts for j in range(c)]
    assert run_positions(np.array(counts, dtype=np.int64)).tolist() == want


@given(st.lists(st.text(st.characters(exclude_categories=())), max_size=8))
def test_code_points_index_like_python_strings(strings):
    got = code_points(strings)
    assert got.dtype == np.uint32
    assert got.tolist() == [ord(c) for s in strings for c in s]
    assert len(got) == sum(map(len, strings))
