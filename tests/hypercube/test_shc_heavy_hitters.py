"""The heavy-hitter sketch's guarantee and the classification rule of section 3.2."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.hypercube import BatchSummary, HeavyHitterTracker, MisraGries, Side, StreamTuple

skewed_items = st.lists(st.one_of(st.integers(0, 3), st.integers(0, 60)), min_size=1, max_size=400)


def batches(items: list, cuts: list[int]) -> list[list]:
    bounds = [0, *sorted({c % (len(items) + 1) for c in cuts}), len(items)]
    return [items[a:b] for a, b in zip(bounds, bounds[1:]) if a < b]


@settings(max_examples=150, deadline=None)
@given(items=skewed_items, k=st.integers(1, 12), cuts=st.lists(st.integers(0, 400), max_size=12))
def test_misra_gries_error_bound_under_batched_merges(items: list[int], k: int, cuts: list[int]) -> None:
    """f - n/(k+1) <= estimate <= f for every item, whatever the batch boundaries."""
    mg = MisraGries(k)
    seen: Counter[int] = Counter()
    for batch in batches(items, cuts):
        mg.merge(Counter(batch))
        seen.update(batch)
        assert len(mg.counters) <= k
        assert mg.n == sum(seen.values())
        for item in set(items) | {-1}:
            f = seen[item]
            assert f - mg.n / (k + 1) <= mg.estimate(item) <= f


def test_misra_gries_rejects_bad_input() -> None:
    with pytest.raises(ValueError):
        MisraGries(0)
    with pytest.raises(ValueError):
        MisraGries(3).merge({"a": 0})


def test_epsilon_must_respect_one_over_two_p() -> None:
    HeavyHitterTracker(8, epsilon=1 / 16)
    with pytest.raises(ValueError):
        HeavyHitterTracker(8, epsilon=1 / 15)
    with pytest.raises(ValueError):
        HeavyHitterTracker(8, epsilon=0.0)
    assert HeavyHitterTracker(8).epsilon == 1 / 16


@settings(max_examples=120, deadline=None)
@given(
    items=st.lists(st.tuples(st.sampled_from([Side.R, Side.S]), st.one_of(st.integers(0, 2), st.integers(0, 40))),
                   min_size=1, max_size=500),
    p=st.integers(1, 8),
    eps_frac=st.sampled_from([1.0, 0.5, 0.25]),
    cuts=st.lists(st.integers(0, 500), max_size=10),
)
def test_classification_follows_the_paper(items, p: int, eps_frac: float, cuts: list[int]) -> None:
    """Heavy if N(b) > N/p, light if N(b) < (1/p - eps) N, at most 2p heavy, estimates within eps N."""
    eps = eps_frac / (2 * p)
    tracker = HeavyHitterTracker(p, epsilon=eps)
    r_true: Counter = Counter()
    s_true: Counter = Counter()
    tid = 0
    for batch in batches(items, cuts):
        tuples = []
        for side, key in batch:
            tuples.append(StreamTuple(side, key, tid))
            tid += 1
            (r_true if side is Side.R else s_true)[key] += 1
        tracker.add(BatchSummary.of(tuples, None).counts)
        n = tracker.n
        assert n == sum(r_true.values()) + sum(s_true.values())
        heavy_if_was_heavy = 0
        for key in set(r_true) | set(s_true):
            r, s = tracker.estimate(key)
            assert r_true[key] - eps * n / 2 <= r <= r_true[key]
            assert s_true[key] - eps * n / 2 <= s <= s_true[key]
            f = r_true[key] + s_true[key]
            for was_heavy in (False, True):
                verdict = tracker.is_heavy(key, was_heavy)
                if f > n / p:
                    assert verdict
                if f < (1 / p - eps) * n:
                    assert not verdict
            heavy_if_was_heavy += tracker.is_heavy(key, True)
        assert heavy_if_was_heavy <= 2 * p


def test_hysteresis_band_keeps_a_heavy_value_heavy() -> None:
    """Between (1/p - eps) N and (1/p - eps/2) N a value keeps its current class."""
    tracker = HeavyHitterTracker(4, epsilon=1 / 8, min_heavy=1)
    # N = 100, 1/p = 0.25: promote above 18.75, demote below 12.5.
    counts = {(Side.R, "b", 0): 15} | {(Side.S, i, 0): 1 for i in range(85)}
    tracker.add(counts)
    assert tracker.is_heavy("b", True)
    assert not tracker.is_heavy("b", False)


def test_min_heavy_keeps_small_values_light() -> None:
    tracker = HeavyHitterTracker(4, min_heavy=10)
    tracker.add({(Side.R, "a", 0): 3})
    assert not tracker.is_heavy("a", False)
    tracker.add({(Side.S, "a", 0): 7})
    assert tracker.is_heavy("a", False)


def test_window_panes_forget_expired_tuples() -> None:
    """N and the estimates cover only the panes that end after the eviction threshold."""
    tracker = HeavyHitterTracker(2, window=100.0, panes=4)
    assert tracker.pane_width == 25.0
    old = [StreamTuple(Side.R, "hot", i, float(i)) for i in range(20)]  # pane 0: [0, 25)
    new = [StreamTuple(Side.S, i, i, 60.0 + i) for i in range(10)]  # panes 2 and 3
    tracker.add(BatchSummary.of(old + new, tracker.pane_width).counts)
    assert tracker.n == 30 and tracker.estimate("hot") == (20, 0)
    tracker.expire(24.0)  # pane 0 still overlaps [24, ...)
    assert tracker.n == 30
    tracker.expire(25.0)
    assert tracker.n == 10 and tracker.estimate("hot") == (0, 0)
