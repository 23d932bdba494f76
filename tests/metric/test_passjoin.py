"""PassJoin (driftjoin.metric.passjoin) against the brute-force oracle: unicode and empty strings,
duplicates, thresholds exactly at a distance, every window kind, self- and two-stream joins,
micro-batch cuts and worker counts; the segment layout and the substring selection."""

from __future__ import annotations

import pickle
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.metric.engine import MetricEngine
from driftjoin.metric import passjoin
from driftjoin.metric.passjoin import PassJoinStrategy, entries, segment_layout
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.spaces import LevenshteinSpace
from driftjoin.windows import Windowing
from tests.metric import data
from tests.metric.oracle import levenshtein, oracle, run, window_spec


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recs=data.records(data.strings), pick=st.integers(0, 10**6), p=st.integers(1, 5))
def test_passjoin_equals_oracle(recs, pick, p):
    ids, sides, vals, times, self_join, w, cuts = recs
    ds = sorted({levenshtein(a, b) for a in vals[:8] for b in vals[:8]})
    tau = min(ds[pick % len(ds)], 4)  # a threshold exactly at a distance of the data
    strategy = PassJoinStrategy(tau, p, self_join=self_join, windows=w)
    got, late = run(strategy, ids, LevenshteinSpace().prepare(vals), times, sides, cuts)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), levenshtein, tau, self_join, window_spec(w))


@settings(max_examples=40, deadline=None)
@given(words=st.lists(st.text(alphabet="abc", min_size=3, max_size=12), min_size=2, max_size=40), tau=st.integers(1, 3))
def test_longer_strings_on_a_small_alphabet(words, tau):
    """Many repeated substrings: the selection's positions and the distinct-substring rule."""
    strategy = PassJoinStrategy(tau, 3, self_join=True, windows=Windowing.unbounded())
    ids = list(range(len(words)))
    got, _ = run(strategy, ids, LevenshteinSpace().prepare(words), [0] * len(words), [0] * len(words), [len(words) // 2])
    assert got == oracle(list(zip(ids, [0] * len(words), words, [0] * len(words))), levenshtein, tau, True)


def test_segments_are_even_and_cover_the_string():
    for tau in range(4):
        for length in range(0, 14):
            start, size = segment_layout(np.full(tau + 1, length), np.arange(tau + 1), tau)
            assert start[0] == 0 and start[-1] + size[-1] == length
            assert np.array_equal(start[1:], start[:-1] + size[:-1])
            assert size.max() - size.min() <= 1 and np.all(np.diff(size) >= 0)


def test_entries_of_a_string():
    e = entries(np.array(["abcd"], dtype=object), 1)
    seg = sorted(zip(e.i[e.cls == 0].tolist(), e.pos[e.cls == 0].tolist(), e.size[e.cls == 0].tolist()))
    assert seg == [(0, 0, 2), (1, 2, 2)]
    # probes for l = 4 (same length) and l = 3 (one shorter): distinct (l, i, text) only
    sub = sorted({(int(l), int(i), "abcd"[p : p + z]) for l, i, p, z in zip(e.l[e.cls == 1], e.i[e.cls == 1], e.pos[e.cls == 1], e.size[e.cls == 1])})
    assert sub == [(3, 0, "a"), (3, 1, "cd"), (4, 0, "ab"), (4, 1, "cd")]
    assert len(e.l[e.cls == 1]) == len(sub)
    # "aaaaa" selects the same text at several positions: one entry per distinct text
    e = entries(np.array(["aaaaa"], dtype=object), 2)
    keys = list(zip(e.l[e.cls == 1].tolist(), e.i[e.cls == 1].tolist(), e.size[e.cls == 1].tolist()))
    assert len(keys) == len(set(keys)) == 9


@settings(max_examples=60, deadline=None)
@given(words=st.lists(st.text(alphabet="abé", max_size=9), min_size=1, max_size=12),
       tau=st.integers(0, 3), buckets=st.sampled_from([1, 2, 5, 2**64]))
def test_sub_entries_are_distinct_even_when_hashes_collide(words, tau, buckets):
    """One SUB entry per distinct (record, l, i, substring), every one of them kept, with the text
    hash cut to ``buckets`` values and the group made of it alone, so that different substrings,
    lengths and segments collide."""
    strings = np.array(words, dtype=object)
    real = passjoin._substring_hash
    with pytest.MonkeyPatch.context() as patch:
        if buckets < 2**64:  # text hashes, and groups whatever their l, i and length, collide
            patch.setattr(passjoin, "_substring_hash", lambda *a: real(*a) % np.uint64(buckets))
            patch.setattr(passjoin, "_mix", lambda text, *_: text.astype(np.int64))
        e = entries(strings, tau)
    sub = e.cls == passjoin.SUB
    got = [(int(r), int(l), int(i), words[r][p : p + z])
           for r, l, i, p, z in zip(e.rec[sub], e.l[sub], e.i[sub], e.pos[sub], e.size[sub])]
    want = set()
    for r, w in enumerate(words):  # every selected substring, by the definition's ranges
        for l in range(max(0, len(w) - tau), len(w) + 1):
            for i in range(tau + 1):
                lo, hi = passjoin.selected_range(np.array([len(w)]), np.array([l]), np.array([i]), tau)
                start, size = segment_layout(np.array([l]), np.array([i]), tau)
                want |= {(r, l, i, w[q : q + int(size[0])]) for q in range(int(lo[0]), int(hi[0]) + 1)}
    assert len(got) == len(set(got))
    assert set(got) == want


def test_pickled_state_continues_the_same_stream():
    rng = np.random.default_rng(5)
    words = LevenshteinSpace().prepare(["".join(rng.choice(list("abcd"), size=rng.integers(0, 7))) for _ in range(200)])
    strategy = PassJoinStrategy(2, 3, self_join=False, windows=Windowing.tumbling(20))
    side = rng.integers(0, 2, 200)
    times = rng.integers(0, 60, 200)
    one, two = MetricEngine(strategy, lateness=100), MetricEngine(strategy, lateness=100)
    a, b = Counter(), Counter()
    for k, lo in enumerate(range(0, 200, 50)):
        batch = MetricRecords.of(np.arange(lo, lo + 50), words[lo : lo + 50], times[lo : lo + 50], side[lo : lo + 50])
        if k == 2:
            for i, wk in list(two.workers.items()):
                two.workers[i] = strategy.worker(i)
                two.workers[i].restore(pickle.loads(pickle.dumps(wk.state())))
        a.update(one.process(batch).tuples())
        b.update(two.process(batch).tuples())
    assert a == b and max(a.values()) == 1 and sum(a.values()) > 20
