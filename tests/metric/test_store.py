"""The run store's bookkeeping for a runtime that persists batch by batch (added runs, parts)."""

from __future__ import annotations

import numpy as np

from driftjoin.metric.records import MetricRecords
from driftjoin.metric.store import Run, RunStore


def _run(ids: list[int]) -> Run:
    rec = MetricRecords.of(np.array(ids), np.array([str(i) for i in ids], dtype=object))
    return Run.build(rec, np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64), np.arange(len(ids)))


def test_added_runs_are_listed_once_and_merged_runs_carry_their_parts():
    store = RunStore([(0, 0)], keep_added=True)
    first, second, third = _run([1, 2]), _run([3]), _run([4])
    store.add(7, first)
    store.add(7, second)  # 2 >= 2 * 1: no merge
    assert [r.parts for r in store.windows[7]] == [first.parts, second.parts]
    assert len(first.parts) == len(second.parts) == 1 and first.parts != second.parts
    store.add(7, third)  # [2, 1, 1] -> [2, 2] -> [4]
    assert [w for w, _ in store.added] == [7, 7, 7]
    assert [r.parts for _, r in store.added] == [first.parts, second.parts, third.parts]
    assert [sorted(r.records.id.tolist()) for _, r in store.added] == [[1, 2], [3], [4]]  # as added, not merged
    (merged,) = store.windows[7]
    assert sorted(merged.parts) == sorted(first.parts + second.parts + third.parts)
    assert sorted(merged.records.id.tolist()) == [1, 2, 3, 4]


def test_runs_read_back_merge_without_being_added_again():
    store = RunStore([(0, 0)], keep_added=True)
    store.put(3, Run.from_arrays(_run([1]).arrays(), (11,)))
    store.put(3, Run.from_arrays(_run([2]).arrays(), (12,)))
    assert store.added == [] and [sorted(r.parts) for r in store.windows[3]] == [[11, 12]]


def test_a_store_that_does_not_keep_added_runs_holds_no_references():
    store = RunStore([(0, 0)])
    store.add(1, _run([1, 2]))
    assert store.added == [] and store.windows[1][0].parts == ()
