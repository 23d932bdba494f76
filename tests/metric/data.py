"""Hypothesis strategies of the metric-join tests: records with unicode strings (empty ones too),
token sets with repeated tokens, duplicate values, times on and beside window boundaries, windowings,
micro-batch cuts."""

from __future__ import annotations

from hypothesis import strategies as st

from driftjoin.windows import Windowing

#: a few letters, accented and astral characters: unicode code points of every width
ALPHABET = "ab\u00e9\u2713\U0001d11e"

strings = st.text(alphabet=ALPHABET, min_size=0, max_size=7)
token_sets = st.one_of(
    st.lists(st.integers(0, 7), min_size=1, max_size=6),
    st.lists(st.sampled_from(["x", "y", "z", "\u00e9t\u00e9", "w", "v", "u"]), min_size=1, max_size=6),
)

windowings = st.sampled_from([
    Windowing.unbounded(),
    Windowing.tumbling(10),
    Windowing.tumbling(10, offset=3),
    Windowing.sliding(10, 4),
    Windowing.sliding(9, 3, offset=1),
    Windowing.interval(0),
    Windowing.interval(4),
    Windowing.interval(4, 9),
])


def times_near(w: Windowing) -> st.SearchStrategy[int]:
    """Times on a window boundary, one tick beside it, or anywhere in a short span."""
    step = w.slide if w.kind != "unbounded" else 10
    edges = sorted({w.offset + k * step + e for k in range(0, 6) for e in (0, w.length, -(w.within or 0))})
    return st.one_of(st.sampled_from(edges).flatmap(lambda p: st.sampled_from([p - 1, p, p + 1])),
                     st.integers(0, 6 * step))


@st.composite
def records(draw, values: st.SearchStrategy, max_size: int = 40, windowing: st.SearchStrategy = windowings):
    """``(ids, sides, values, times, self_join, windowing, cuts)``; values are drawn from a small
    pool so that duplicates are common; ids are unique."""
    w = draw(windowing)
    pool = draw(st.lists(values, min_size=1, max_size=12))
    n = draw(st.integers(1, max_size))
    vals = [draw(st.sampled_from(pool)) if draw(st.booleans()) else draw(values) for _ in range(n)]
    times = [draw(times_near(w)) for _ in range(n)]
    self_join = draw(st.booleans())
    sides = [0] * n if self_join else [draw(st.integers(0, 1)) for _ in range(n)]
    ids = draw(st.permutations(list(range(1000, 1000 + n))))
    cuts = draw(st.lists(st.integers(0, n), max_size=5))
    return list(ids), sides, vals, times, self_join, w, cuts
