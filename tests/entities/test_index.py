"""The record index (a hashed base, recent inserts, removals, folds) against a plain dict."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.entitygraph.index import RecordIndex

OPS = st.lists(st.tuples(st.sampled_from(["insert", "remove"]), st.lists(st.integers(0, 40), max_size=12)), max_size=30)


@settings(max_examples=40, deadline=None)
@given(OPS, st.booleans())
def test_index_matches_a_dict(ops, strings):
    kind = np.dtype(object) if strings else np.dtype(np.int64)
    index = RecordIndex(kind)
    index.fold_min = 3
    truth: dict = {}
    slot = 0
    for op, raw in ops:
        keys = [f"k{x}" if strings else x for x in dict.fromkeys(raw)]
        if op == "insert":
            keys = [k for k in keys if k not in truth]
            slots = np.arange(slot, slot + len(keys))
            slot += len(keys)
            arr = np.empty(len(keys), kind)
            arr[:] = keys
            index.insert(arr, slots)
            truth.update(zip(keys, slots.tolist()))
        else:
            keys = [k for k in keys if k in truth]
            arr = np.empty(len(keys), kind)
            arr[:] = keys
            index.remove(arr)
            for k in keys:
                del truth[k]
        probe = np.empty(41, kind)
        probe[:] = [f"k{x}" if strings else x for x in range(41)]
        assert index.lookup(probe).tolist() == [truth.get(k, -1) for k in probe.tolist()]
        assert len(index) == len(truth) and dict(index.items()) == truth
