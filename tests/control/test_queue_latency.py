"""The thesis's queue latency (control/autoscale/latency.py) against a record-by-record count."""

from __future__ import annotations

import numpy as np
from hypothesis import example, given, settings
from hypothesis import strategies as st

from driftjoin.control.autoscale.latency import batch_waits, waiting_waits, weighted_quantile
from driftjoin.generators.rates import RateSchedule

#: more than any example offers (at most 200 -> 600 records/s for 30 s plus the gaps)
SAMPLES = 50_000


@settings(max_examples=60, deadline=None)
@given(rate=st.floats(5, 200), cuts=st.lists(st.integers(1, 60), min_size=1, max_size=8), gap=st.floats(0, 3),
       q=st.floats(0.01, 0.99))
@example(rate=176.0, cuts=[1] * 8, gap=3.0, q=0.5)          # more records offered than 10,000 samples
def test_sampled_quantiles_match_every_record(rate, cuts, gap, q):
    """Batches read consecutive offsets; the records left at the end count their wait so far.
    With samples >= the records, every record is counted once: the quantile equals that of
    the exact list."""
    sched = RateSchedule("increasing", low=rate, high=3 * rate, duration=30.0)
    exact, parts, first, t = [], [], 0, 0.0
    for n in cuts:
        end = first + n
        t = max(t, float(sched.time_of(np.array([end - 1]))[0])) + gap      # the batch starts after its last record
        parts.append(batch_waits(sched, first, end, t, samples=SAMPLES))
        exact += list(t - sched.time_of(np.arange(first, end)))
        first = end
    stop = t + 5.0
    offered = int(sched.count(stop))
    parts.append(waiting_waits(sched, first, offered, stop, samples=SAMPLES))
    exact += list(stop - sched.time_of(np.arange(first, offered)))
    values = np.concatenate([v for v, _ in parts])
    weights = np.concatenate([w for _, w in parts])
    assert np.allclose(weights, 1.0) and len(values) == len(exact)
    expected = sorted(exact)[min(len(exact) - 1, int(np.ceil(q * len(exact))) - 1)]
    assert abs(weighted_quantile(values, weights, q) - expected) < 1e-9


def test_sampling_weights_stand_for_every_record():
    sched = RateSchedule("constant", high=1000.0, duration=100.0)
    v, w = batch_waits(sched, 0, 50_000, 60.0)
    assert len(v) == 256 and abs(w.sum() - 50_000) < 1e-6
    assert abs(weighted_quantile(v, w, 0.5) - 35.0) < 0.2           # offered 0..50 s, read at 60 s


def test_weighted_quantile():
    values, weights = np.array([1.0, 2.0, 10.0]), np.array([1.0, 1.0, 8.0])
    assert weighted_quantile(values, weights, 0.5) == 10.0 and weighted_quantile(values, weights, 0.05) == 1.0
