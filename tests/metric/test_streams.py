"""Every metric strategy on streams in time order with no lateness: windows close after every batch,
state keeps open windows only, and the pairs are still the oracle's; late records are refused whole."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.metric.engine import MetricEngine
from driftjoin.metric.passjoin import PassJoinStrategy
from driftjoin.metric.prefix import PrefixStrategy
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import JaccardSpace, LevenshteinSpace
from driftjoin.windows import Windowing
from tests.metric import data
from tests.metric.oracle import jaccard, levenshtein, oracle, run, window_spec

KINDS = st.sampled_from([Windowing.tumbling(10), Windowing.sliding(10, 4), Windowing.interval(4)])


def build(kind, values, space, self_join, w):
    if kind == "passjoin":
        return PassJoinStrategy(1, 3, self_join=self_join, windows=w)
    if kind == "prefix":
        return PrefixStrategy(0.5, 3, self_join=self_join, windows=w)
    return S3JStrategy(space, 1 if isinstance(space, LevenshteinSpace) else 0.5, choose_centroids(space, values, 3, 0),
                       self_join=self_join, windows=w)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recs=data.records(data.strings, windowing=KINDS), kind=st.sampled_from(["passjoin", "s3j"]))
def test_strings_in_time_order(recs, kind):
    ids, sides, vals, times, self_join, w, cuts = recs
    times = sorted(times)
    space = LevenshteinSpace()
    values = space.prepare(vals)
    got, late = run(build(kind, values, space, self_join, w), ids, values, times, sides, cuts, lateness=0)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), levenshtein, 1, self_join, window_spec(w))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recs=data.records(data.token_sets, windowing=KINDS), kind=st.sampled_from(["prefix", "s3j"]))
def test_sets_in_time_order(recs, kind):
    ids, sides, vals, times, self_join, w, cuts = recs
    times = sorted(times)
    space = JaccardSpace()
    values = space.prepare(vals)
    got, late = run(build(kind, values, space, self_join, w), ids, values, times, sides, cuts, lateness=0)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), jaccard, 0.5, self_join, window_spec(w))


@pytest.mark.parametrize("kind", ["passjoin", "s3j"])
def test_state_holds_open_windows_only_and_late_records_are_refused(kind):
    space = LevenshteinSpace()
    w = Windowing.interval(5)
    rng = np.random.default_rng(1)
    words = space.prepare(["".join(rng.choice(list("ab"), size=4)) for _ in range(400)])
    eng = MetricEngine(build(kind, words, space, True, w))
    for k in range(40):
        t = np.full(10, 10 * k)
        eng.process(MetricRecords.of(np.arange(10 * k, 10 * k + 10), words[10 * k : 10 * k + 10], t))
        for worker in eng.workers.values():
            assert all(win >= w.first_open(10 * k) for win in worker.store.windows)
    # a record of a bucket that closed is refused whole
    eng.process(MetricRecords.of([-1], space.prepare(["abab"]), [10 * 39 - 20]))
    assert eng.late == [-1]
