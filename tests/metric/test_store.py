"""The run store's bookkeeping for a runtime that persists runs one by one (labels, retired runs)."""

from __future__ import annotations

import numpy as np

from driftjoin.metric.records import MetricRecords
from driftjoin.metric.store import Run, RunStore


def _run(ids: list[int]) -> Run:
    rec = MetricRecords.of(np.array(ids), np.array([str(i) for i in ids], dtype=object))
    return Run.build(rec, np.zeros(len(ids), np.int64), np.zeros(len(ids), np.int64), np.arange(len(ids)))


def test_merged_labelled_runs_are_retired_and_the_merged_run_is_unlabelled():
    store = RunStore([(0, 0)])
    first = _run([1, 2])
    store.add(7, first)
    first.label = 11  # the runtime wrote it
    second = _run([3])
    store.add(7, second)  # 2 >= 2 * 1: no merge
    assert store.retired == [] and [r.label for r in store.windows[7]] == [11, None]
    second.label = 12
    store.add(7, _run([4]))  # [2, 1, 1] -> [2, 2] -> [4]: both written runs merged away
    assert sorted(store.retired) == [(7, 11), (7, 12)]
    assert [r.label for r in store.windows[7]] == [None]
    assert sorted(store.windows[7][0].records.id.tolist()) == [1, 2, 3, 4]
    assert Run.from_arrays(first.arrays(), 5).label == 5
