"""Window vocabulary (driftjoin.windows) against a brute-force oracle of the definitions: which
pairs each window kind emits, how often, with which window; the closing rule and late records.
Times are drawn on and one tick beside every boundary."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.windows import TICKS_PER_SECOND, Windowing, windowing


def emitted(w: Windowing, times: list[int]) -> Counter:
    """What a window join emits: pairs of copies of the same window that the window accepts."""
    t = np.array(times, dtype=np.int64)
    c = w.copies(t)
    out: Counter = Counter()
    for k in np.unique(c.window):
        sel = np.nonzero(c.window == k)[0]
        for a in range(len(sel)):
            for b in range(a + 1, len(sel)):
                i, j = c.row[sel[a]], c.row[sel[b]]
                if i == j:
                    continue
                if w.accept(t[[i]], c.ghost[[sel[a]]], t[[j]], c.ghost[[sel[b]]])[0]:
                    key = (min(i, j), max(i, j))
                    out[key + ((int(w.start([k])[0]), int(w.end([k])[0])) if w.kind != "interval" else ())] += 1
    return out


def oracle_windows(length: int, slide: int, offset: int, times: list[int]) -> Counter:
    """Every window [offset + k slide, + length) holding both records, by enumerating k."""
    out: Counter = Counter()
    lo = (min(times) - offset) // slide - length // slide - 2
    hi = (max(times) - offset) // slide + 2
    for i in range(len(times)):
        for j in range(i + 1, len(times)):
            for k in range(lo, hi + 1):
                s = offset + k * slide
                if s <= times[i] < s + length and s <= times[j] < s + length:
                    out[(i, j, s, s + length)] += 1
    return out


def oracle_within(d: int, times: list[int]) -> Counter:
    return Counter((i, j) for i in range(len(times)) for j in range(i + 1, len(times)) if abs(times[i] - times[j]) <= d)


def near(points: list[int]) -> st.SearchStrategy[int]:
    """Times on a boundary or one tick beside it, and anywhere."""
    return st.one_of(st.sampled_from(points).flatmap(lambda p: st.sampled_from([p - 1, p, p + 1])), st.integers(-50, 150))


@settings(max_examples=150, deadline=None)
@given(data=st.data(), length=st.integers(1, 30), slide_frac=st.integers(1, 30), offset=st.integers(-7, 7))
def test_tumbling_and_sliding_equal_the_definition(data, length, slide_frac, offset):
    slide = max(1, min(length, slide_frac))
    bounds = [offset + k * slide + e for k in range(-6, 8) for e in (0, length)]
    times = data.draw(st.lists(near(bounds), min_size=2, max_size=14))
    w = Windowing.sliding(length, slide, offset)
    assert emitted(w, times) == oracle_windows(length, slide, offset, times)
    if slide == length:
        assert w.kind == "tumbling"


@settings(max_examples=150, deadline=None)
@given(data=st.data(), d=st.integers(0, 20), extra=st.integers(0, 15))
def test_interval_emits_each_pair_within_d_exactly_once(data, d, extra):
    bucket = max(d, 1) + extra
    bounds = [k * bucket + e for k in range(-4, 8) for e in (0, -d)]
    times = data.draw(st.lists(near(bounds), min_size=2, max_size=16))
    w = Windowing.interval(d, bucket)
    assert emitted(w, times) == oracle_within(d, times)
    # at most two copies per record, the ghost only when the record is within d of the next bucket
    c = w.copies(np.array(times))
    assert np.bincount(c.row, minlength=len(times)).max() <= 2
    assert sorted(c.row[c.ghost].tolist()) == [i for i, t in enumerate(times) if (t // bucket + 1) * bucket - d <= t]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), length=st.integers(1, 20), slide=st.integers(1, 20), offset=st.integers(-5, 5),
       kind=st.sampled_from(["sliding", "interval"]))
def test_closing_rule_and_late_records(data, length, slide, offset, kind):
    if kind == "interval":
        w = Windowing.interval(min(slide, length), length)
        starts_of = lambda t: [b * length for b in (t // length,)]  # home bucket  # noqa: E731
    else:
        slide = min(slide, length)
        w = Windowing.sliding(length, slide, offset)
        starts_of = lambda t: [offset + k * slide for k in range(-100, 100)  # noqa: E731
                              if offset + k * slide <= t < offset + k * slide + length]
    frontier = data.draw(st.integers(-60, 60))
    t = data.draw(st.integers(-60, 60))
    # late exactly when one of the record's windows ends at or before the frontier
    assert w.late(np.array([t]), frontier)[0] == any(s + length <= frontier for s in starts_of(t))
    first = w.first_open(frontier)
    for k in range(first - 5, first + 5):
        assert (w.end([k])[0] <= frontier) == (k < first)
    assert not w.late(np.array([t]), None)[0]


def test_unbounded_is_one_window_that_never_closes():
    w = Windowing.unbounded()
    c = w.copies(np.array([-10**15, 0, 10**15]))
    assert c.window.tolist() == [0, 0, 0] and w.first_open(10**18) is None
    assert emitted(w, [0, 5, 10**12]) == Counter({(0, 1, 0, 1): 1, (0, 2, 0, 1): 1, (1, 2, 0, 1): 1})


def test_settings_from_durations():
    assert windowing() == Windowing.unbounded()
    assert windowing(window="1 minute") == Windowing.tumbling(60 * TICKS_PER_SECOND)
    assert windowing(window=60, slide="20 seconds") == Windowing.sliding(60 * TICKS_PER_SECOND, 20 * TICKS_PER_SECOND)
    assert windowing(within="30 seconds") == Windowing.interval(30 * TICKS_PER_SECOND)
    assert windowing(within=0).within == 0
    assert windowing(window="1 minute", start_time="5 seconds").offset == 5 * TICKS_PER_SECOND


@pytest.mark.parametrize("kwargs, message", [
    ({"window": "1 minute", "within": "30 seconds"}, "within= .* cannot be combined"),
    ({"slide": "10 seconds", "within": "30 seconds"}, "cannot be combined"),
    ({"window": "20 seconds", "slide": "1 minute"}, "slide='1 minute' is longer than window"),
    ({"slide": "10 seconds"}, "need window="),
    ({"window": "0 seconds"}, "positive"),
    ({"window": "soon"}, "not a duration"),
    ({"within": "-1 seconds"}, "positive"),
])
def test_bad_settings_say_what_to_change(kwargs, message):
    with pytest.raises(ValueError, match=message):
        windowing(**kwargs)
