"""Checkpointed state carries a format number: the current one round-trips, another is refused
with a message that says what to do."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from driftjoin.distance import get_metric
from driftjoin.s3j.compute import SimilarityWorker, restore_worker, worker_state
from driftjoin.s3j.records import Records
from driftjoin.s3j.workset import STATE_FORMAT, WorksetFormulation, formulation_state, restore_formulation


def _filled():
    m = get_metric("euclidean")
    f = WorksetFormulation(m, 0.5, 2)
    rec = Records(np.arange(4), np.zeros(4, np.int8), np.array([[0, 0], [0.1, 0], [3, 3], [0.6, 0.0]], float), np.zeros(4), np.zeros(4, np.int64))
    mships = f.formulate(rec, np.array([False, False, False, True]))
    w = SimilarityWorker(m, 0.5, True)
    w.add(mships.records.take(mships.row), mships.workset, mships.role)
    return m, f, w


def test_state_round_trips_through_pickle():
    m, f, w = _filled()
    f2 = restore_formulation(WorksetFormulation(m, 0.5, 2), pickle.loads(pickle.dumps(formulation_state(f))))
    assert np.array_equal(f2.centroids, f.centroids) and len(f2.outer_buffer) == len(f.outer_buffer)
    w2 = restore_worker(SimilarityWorker(m, 0.5, True), pickle.loads(pickle.dumps(worker_state(w))))
    assert w2.state_bytes() == w.state_bytes()


@pytest.mark.parametrize("fmt", [STATE_FORMAT + 1, 0, None])
def test_unknown_state_format_is_refused_with_advice(fmt):
    m, f, w = _filled()
    state = formulation_state(f) | {"format": fmt}
    with pytest.raises(RuntimeError, match="new checkpoint location"):
        restore_formulation(WorksetFormulation(m, 0.5, 2), state)
    with pytest.raises(RuntimeError, match="reads format"):
        restore_worker(SimilarityWorker(m, 0.5, True), worker_state(w) | {"format": fmt})
