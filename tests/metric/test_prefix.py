"""Prefix filtering for Jaccard (driftjoin.metric.prefix) against the brute-force oracle: int and
string tokens, repeated tokens, duplicate sets, thresholds exactly at a distance, token orders from
any sample (or none), colliding token codes, every window kind, micro-batch cuts; the bounds."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.metric.prefix import JaccardBounds, PrefixStrategy
from driftjoin.metric.spaces import JaccardSpace
from driftjoin.metric.tokens import TokenOrder
from driftjoin.windows import Windowing
from tests.metric import data
from tests.metric.oracle import jaccard, meant, oracle, run, window_spec


class CollidingOrder(TokenOrder):
    """Codes with many collisions (three codes for all tokens): filters see merged tokens."""

    def codes(self, tokens):
        return np.array([len(str(t)) % 3 for t in tokens], dtype=np.int64)


def check(recs, t, order, p):
    ids, sides, vals, times, self_join, w, cuts = recs
    strategy = PrefixStrategy(t, p, self_join=self_join, windows=w)
    got, late = run(strategy, ids, JaccardSpace(order).prepare(vals), times, sides, cuts)
    assert not late
    assert got == oracle(list(zip(ids, sides, vals, times)), jaccard, t, self_join, window_spec(w))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(recs=data.records(data.token_sets), pick=st.integers(0, 10**6), fallback=st.sampled_from([0.0, 0.3, 0.6, 0.95]),
       sample_size=st.integers(0, 10), p=st.integers(1, 4))
def test_prefix_join_equals_oracle(recs, pick, fallback, sample_size, p):
    vals = recs[2]
    ds = sorted({jaccard(a, b) for a in vals[:8] for b in vals[:8]} - {1.0})
    t = ds[pick % len(ds)] if ds and pick % 4 else fallback
    check(recs, t, TokenOrder.from_sample(vals[:sample_size]), p)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(recs=data.records(data.token_sets, windowing=st.just(Windowing.unbounded())),
       t=st.sampled_from([0.0, 0.25, 0.5, 0.8]))
def test_colliding_codes_never_change_the_pairs(recs, t):
    check(recs, t, CollidingOrder(), 2)


@settings(max_examples=60, deadline=None)
@given(t=st.one_of(st.floats(0.0, 0.999), st.sampled_from([0.1, 0.2, 0.3, 0.7, 1 / 3, 2 / 3, 0.35]),
                   st.fractions(0, 1).filter(lambda f: f < 1)),
       n=st.integers(1, 30), m=st.integers(1, 30))
def test_bounds_are_the_least_overlaps_of_the_predicate(t, n, m):
    b = JaccardBounds(t)
    alpha = b.alpha(np.array([n + m]))[0]
    joins = [o for o in range(min(n, m) + 1) if Fraction(n + m - 2 * o, n + m - o) <= meant(t)]
    if joins:
        assert alpha == joins[0]
        # every qualifying overlap reaches the overlap the prefix of either set assumes
        assert joins[0] >= n - b.prefix_length(np.array([n]))[0] + 1
    else:
        assert alpha > min(n, m)  # the size filter refuses the pair
    any_partner = [o for o in range(1, n + 1) if Fraction(n - o, n) <= meant(t)]
    assert b.prefix_length(np.array([n]))[0] == n - any_partner[0] + 1
