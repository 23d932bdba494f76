"""Jaccard pairs exactly at the threshold (issue 33): thresholds that binary floating point cannot
write (0.1, 0.2, 0.3, 0.7, 1/3, 2/3) and set pairs built to sit exactly on them, just inside and
just outside, through every strategy of the core (prefix filtering, S3J, and ``auto``'s choice)
against the exact oracle; the number a threshold stands for; the exact decisions on floats."""

from __future__ import annotations

import json
import pickle
from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.metric.choose import build_strategy, choose
from driftjoin.metric.engine import MetricEngine
from driftjoin.metric.exact import (
    MAX_UNION,
    Threshold,
    exact_value,
    jaccard_distance,
    jaccard_le,
    jaccard_le_sum,
    least_overlap,
    least_partner_overlap,
)
from driftjoin.metric.prefix import PrefixStrategy
from driftjoin.metric.records import MetricRecords
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import JaccardSpace
from driftjoin.metric.tokens import TokenOrder
from driftjoin.windows import Windowing
from tests.metric import data
from tests.metric.oracle import jaccard, meant, oracle, run, window_spec

#: thresholds whose float is not the number written: 0.1, 0.7 round up, 0.2, 0.3, 1/3, 2/3 down
WRITTEN = [0.1, 0.2, 0.3, 0.7, 1 / 3, 2 / 3]


@st.composite
def on_threshold(draw, t: float) -> list[list[str]]:
    """Sets of which some pairs sit exactly at Jaccard distance ``t = a/b``: union ``k b`` with
    ``k a`` tokens outside the overlap, split at random between the two sets; plus neighbours one
    token inside and outside, and a few random sets."""
    r = meant(t)
    a, b = r.numerator, r.denominator
    sets: list[list[str]] = []
    for pair in range(draw(st.integers(1, 3))):
        k = draw(st.integers(1, 2))
        union, outside = k * b, k * a
        only_a = draw(st.integers(0, outside))
        shared = [f"s{pair}.{i}" for i in range(union - outside)]
        left = shared + [f"a{pair}.{i}" for i in range(only_a)]
        right = shared + [f"b{pair}.{i}" for i in range(outside - only_a)]
        sets += [left, right]
        if draw(st.booleans()):  # one more token outside the overlap: just beyond the threshold
            sets.append(right + [f"x{pair}"])
        if draw(st.booleans()) and only_a:  # one token fewer outside: just inside
            sets.append(left[:-1])
    sets += draw(st.lists(st.lists(st.sampled_from([f"s0.{i}" for i in range(4)] + ["p", "q"]), min_size=1,
                                   max_size=5), max_size=4))
    return draw(st.permutations(sets))


@st.composite
def records_on_threshold(draw):
    t = draw(st.sampled_from(WRITTEN))
    vals = draw(on_threshold(t))
    n = len(vals)
    w = draw(st.sampled_from([Windowing.unbounded(), Windowing.tumbling(10), Windowing.interval(3)]))
    times = [draw(data.times_near(w)) for _ in range(n)]
    self_join = draw(st.booleans())
    sides = [0] * n if self_join else [draw(st.integers(0, 1)) for _ in range(n)]
    cuts = draw(st.lists(st.integers(0, n), max_size=3))
    return t, (list(range(100, 100 + n)), sides, vals, times, self_join, w, cuts)


def strategy_of(kind: str, t, vals, recs, p: int, seed: int):
    ids, sides, _, times, self_join, w, _ = recs
    space = JaccardSpace(TokenOrder.from_sample(vals[: len(vals) // 2]))
    values = space.prepare(vals)
    t = space.check_threshold(t)
    if kind == "auto":
        kind = choose(space, t, values, n_workers=p, seed=seed)[0]
    if kind == "prefix":
        return PrefixStrategy(t, p, self_join=self_join, windows=w), values
    return S3JStrategy(space, t, choose_centroids(space, values, p, seed), self_join=self_join, windows=w), values


FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FAST
@given(case=records_on_threshold(), kind=st.sampled_from(["prefix", "s3j", "auto"]), p=st.integers(1, 4),
       seed=st.integers(0, 9))
def test_pairs_on_a_written_threshold_equal_the_exact_oracle(case, kind, p, seed):
    t, recs = case
    ids, sides, vals, times, self_join, w, cuts = recs
    strategy, values = strategy_of(kind, t, vals, recs, p, seed)
    got, late = run(strategy, ids, values, times, sides, cuts)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), jaccard, t, self_join, window_spec(w))


@pytest.mark.parametrize("kind", ["prefix", "s3j", "auto"])
@pytest.mark.parametrize("p", [1, 3])
def test_seven_of_ten_shared_joins_at_three_tenths(kind, p):
    """The issue's case: 7 of 10 tokens shared is distance 1 - 7/10 = 3/10 (0.30000000000000004 in
    float arithmetic), so at threshold=0.3 the pair joins, reported at distance 0.3."""
    shared = [f"w{i}" for i in range(7)]
    vals = [shared + ["a", "b"], shared + ["c"], shared + ["a", "b", "c", "d"], ["z"]]  # 3/10, 2/11, 3/11
    recs = ([1, 2, 3, 4], [0] * 4, vals, [0] * 4, True, Windowing.unbounded(), [])
    strategy, values = strategy_of(kind, 0.3, vals, recs, p, 0)
    pairs = MetricEngine(strategy).process(MetricRecords.of([1, 2, 3, 4], values))
    assert sorted(zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.distance.tolist())) == [
        (1, 2, 0.3), (1, 3, 2 / 11), (2, 3, 3 / 11)]


def test_auto_chooses_among_strategies_that_agree():
    vals = [[f"w{i}" for i in range(7)] + extra for extra in (["a", "b"], ["c"], ["a", "c"], ["d", "e", "f"])] * 3
    space = JaccardSpace()
    values = space.prepare(vals)
    want = None
    for name in ("prefix", "s3j"):
        strategy = build_strategy(name, space, space.check_threshold(0.3), 2, self_join=True,
                                  windows=Windowing.unbounded(), sample=values)
        got = sorted(MetricEngine(strategy).process(MetricRecords.of(np.arange(len(vals)), values)).tuples())
        assert want is None or got == want
        want = got
    assert len(want) == len(oracle([(i, 0, v, 0) for i, v in enumerate(vals)], jaccard, 0.3, True))


@pytest.mark.parametrize(("written", "number"), [
    (0.3, Fraction(3, 10)), (0.1, Fraction(1, 10)), (0.7, Fraction(7, 10)), (1 / 3, Fraction(1, 3)),
    (0.25, Fraction(1, 4)), (0.12345678, Fraction(12345678, 10**8)), (0, Fraction(0)), (np.float32(0.3), Fraction(3, 10)),
    (np.float64(0.2), Fraction(1, 5)), (Fraction(2, 7), Fraction(2, 7)), (Decimal("0.3333"), Fraction(3333, 10000)),
])
def test_a_threshold_stands_for_the_number_written(written, number):
    assert exact_value(written) == number
    t = Threshold(written)
    assert t.exact == number and float(t) == float(number)
    assert pickle.loads(pickle.dumps(t)).exact == number  # shipped to Spark's workers
    assert json.loads(json.dumps({"threshold": t})) == {"threshold": float(number)}  # stored with a checkpoint


@settings(max_examples=200, deadline=None)
@given(q=st.integers(1, 10**6), x=st.integers(0, 10**6))
def test_a_float_stands_for_the_simplest_fraction_that_rounds_to_it(q, x):
    """Every fraction of denominator up to 10^6 is the simplest fraction of its own float (two such
    fractions are at least 10^-12 apart), so its float stands for it, and nothing simpler rounds there."""
    r = Fraction(x % (q + 1), q)
    assert exact_value(float(r)) == r


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), "0.3", None, True])
def test_a_threshold_that_is_no_number_is_refused(bad):
    with pytest.raises(ValueError):
        exact_value(bad)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 60), m=st.integers(1, 60), data_=st.data(),
       r=st.one_of(st.sampled_from(WRITTEN + [0.0, 0.5]), st.fractions(0, 1).filter(lambda f: f < 1)))
def test_integer_bounds_and_float_decisions_are_the_exact_predicate(n, m, data_, r):
    o = data_.draw(st.integers(0, min(n, m)))
    exact = Fraction(n + m - 2 * o, n + m - o) <= meant(r)
    d = jaccard_distance(np.array([n]), np.array([m]), np.array([o]))
    assert d[0] == float(Fraction(n + m - 2 * o, n + m - o))  # the nearest float
    assert bool(jaccard_le(d, r)[0]) == exact == (o >= least_overlap(r, n + m))
    joins_any = [x for x in range(1, n + 1) if Fraction(n - x, n) <= meant(r)]
    assert least_partner_overlap(r, n) == joins_any[0]
    # Criterion 1: d(y, c_j) <= d(y, c_i) + radius, exactly
    n2, m2 = data_.draw(st.integers(1, 60)), data_.draw(st.integers(1, 60))
    o2 = data_.draw(st.integers(0, min(n2, m2)))
    base = jaccard_distance(np.array([n2]), np.array([m2]), np.array([o2]))
    want = Fraction(n + m - 2 * o, n + m - o) <= Fraction(n2 + m2 - 2 * o2, n2 + m2 - o2) + 2 * meant(r)
    assert bool(jaccard_le_sum(d, base, 2 * exact_value(r))[0]) == want


def test_distances_of_the_largest_sets_stay_distinct_floats():
    """The bound the exact decisions rest on: sets of up to MAX_UNION / 2 tokens give distinct floats
    for distinct distances, even the closest ones (``o / ((u - o)(u - 1 - o))`` apart)."""
    h = MAX_UNION // 2
    for o in (1, 2, h // 3, h - 2):
        d = jaccard_distance(np.array([h, h]), np.array([h, h - 1]), np.array([o, o]))
        far, near = Fraction(2 * h - 2 * o, 2 * h - o), Fraction(2 * h - 1 - 2 * o, 2 * h - 1 - o)
        assert d.tolist() == [float(far), float(near)] and d[0] > d[1]
        assert jaccard_le(d, near).tolist() == [False, True] and jaccard_le(d, far).tolist() == [True, True]
