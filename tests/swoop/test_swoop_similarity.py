"""Similarity functions of Table 2: hand-computed values, Definition 4.1, and the bounds."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop.similarity import (
    COSINE,
    DICE,
    HAMMING,
    JACCARD,
    OVERLAP,
    SIMILARITIES,
    Hamming,
    get_similarity,
)

FUNCTIONS = list(SIMILARITIES.values())


@pytest.mark.parametrize(
    ("fn", "l_r", "l_s", "o", "expected"),
    [
        # Jaccard o / (l_r + l_s - o)
        (JACCARD, 4, 6, 2, 2 / 8),
        (JACCARD, 3, 3, 3, 1.0),
        (JACCARD, 5, 2, 0, 0.0),
        # Cosine o / sqrt(l_r * l_s)
        (COSINE, 4, 9, 3, 3 / 6),
        (COSINE, 2, 8, 2, 2 / 4),
        (COSINE, 5, 5, 0, 0.0),
        # Dice 2o / (l_r + l_s)
        (DICE, 4, 6, 2, 4 / 10),
        (DICE, 3, 3, 3, 1.0),
        # Overlap o
        (OVERLAP, 7, 3, 2, 2.0),
        # Hamming distance d = l_r + l_s - 2o ranked as 1 / (1 + d); 0 for disjoint sets
        (HAMMING, 4, 6, 2, 1 / 7),
        (HAMMING, 3, 3, 3, 1.0),
        (HAMMING, 2, 3, 0, 0.0),
    ],
)
def test_hand_computed_values(fn, l_r, l_s, o, expected):
    assert fn.sim(l_r, l_s, o) == pytest.approx(expected, rel=1e-15)


def test_set_sim_on_actual_sets():
    r, s = frozenset("abcd"), frozenset("cdefgh")
    assert JACCARD.set_sim(r, s) == 2 / 8
    assert DICE.set_sim(r, s) == 4 / 10
    assert OVERLAP.set_sim(r, s) == 2.0
    assert COSINE.set_sim(r, s) == pytest.approx(2 / math.sqrt(24))
    assert Hamming.distance(4, 6, 2) == len(r ^ s) == 6
    assert HAMMING.set_sim(r, s) == 1 / 7


def test_get_similarity():
    assert get_similarity("Jaccard") is JACCARD
    assert get_similarity(COSINE) is COSINE
    with pytest.raises(ValueError, match="unknown similarity"):
        get_similarity("euclid")


sizes = st.integers(1, 40)


@st.composite
def size_pair_overlap(draw):
    l_r, l_s = draw(sizes), draw(sizes)
    return l_r, l_s, draw(st.integers(0, min(l_r, l_s)))


@settings(max_examples=150, deadline=None)
@given(size_pair_overlap(), st.sampled_from(FUNCTIONS))
def test_definition_4_1_properties(lso, fn):
    l_r, l_s, o = lso
    assert fn.sim(l_r, l_s, 0) == 0.0  # (1)
    assert fn.sim(l_r, l_s, o) == fn.sim(l_s, l_r, o)  # (2)
    if o < min(l_r, l_s):
        assert fn.sim(l_r, l_s, o) <= fn.sim(l_r, l_s, o + 1)  # (3)
    if l_s < l_r:
        assert fn.sim(l_r, l_s, l_s) <= fn.sim(l_r, l_s + 1, l_s + 1)  # (4)
    if o > 0:
        assert fn.sim(l_r, l_s, o) > 0.0  # pairs sharing a token qualify


@settings(max_examples=200, deadline=None)
@given(
    sizes,
    sizes,
    st.sampled_from(FUNCTIONS),
    st.one_of(
        st.floats(-1.0, 45.0, allow_nan=False),
        # thresholds that are exactly attained similarities (the tie cases)
        st.tuples(sizes, sizes, sizes).map(lambda t: JACCARD.sim(t[0], t[1], min(t))),
    ),
)
def test_overlap_is_the_true_minimum(l_r, l_s, fn, tau):
    top = min(l_r, l_s)
    reaching = [o for o in range(top + 1) if fn.sim(l_r, l_s, o) >= tau]
    expected = reaching[0] if reaching else top + 1
    assert fn.overlap(l_r, l_s, tau) == expected


@settings(max_examples=200, deadline=None)
@given(sizes, sizes, st.sampled_from(FUNCTIONS))
def test_overlap_at_attained_similarity(l_r, l_s, fn):
    """overlap(l_r, l_s, sim(l_r, l_s, o)) is at most o and at least the first o' of equal sim."""
    for o in range(min(l_r, l_s) + 1):
        tau = fn.sim(l_r, l_s, o)
        need = fn.overlap(l_r, l_s, tau)
        assert need <= o
        assert fn.sim(l_r, l_s, need) == tau or need == 0


@settings(max_examples=150, deadline=None)
@given(st.data(), st.sampled_from(FUNCTIONS))
def test_positional_upper_bound(data, fn):
    """Theorem 5.1: a set missing >= rho - 1 tokens of r is at most ub(|r|, rho) similar."""
    r = frozenset(data.draw(st.sets(st.integers(0, 30), min_size=1, max_size=12)))
    rho = data.draw(st.integers(1, len(r)))
    missing = set(sorted(r)[: rho - 1])
    s = frozenset(data.draw(st.sets(st.integers(0, 40), min_size=1, max_size=15))) - missing
    if s:
        assert fn.set_sim(r, s) <= fn.ub(len(r), rho)
    assert fn.ub_profile(len(r))[rho - 1] == fn.ub(len(r), rho)
    # the bound is attained by s = r minus the rho - 1 missing tokens
    assert fn.set_sim(r, r - missing) == fn.ub(len(r), rho)


def test_table_2_closed_forms_hand_computed():
    # Jaccard: tau / (1 + tau) * (l_r + l_s) = 0.5 / 1.5 * 12 = 4
    assert JACCARD.overlap(5, 7, 0.5) == 4
    # Cosine: tau * sqrt(l_r * l_s) = 0.5 * 6 = 3
    assert COSINE.overlap(4, 9, 0.5) == 3
    # Dice: tau * (l_r + l_s) / 2 = 0.6 * 10 / 2 = 3
    assert DICE.overlap(4, 6, 0.6) == 3
    # Overlap: ceil(tau)
    assert OVERLAP.overlap(4, 6, 2.5) == 3
    # Hamming with distance bound 1/tau = 4 (d <= 3): o >= (5 + 6 - 3) / 2 = 4
    assert HAMMING.overlap(5, 6, 0.25) == 4
    # unreachable thresholds and non-positive ones
    assert JACCARD.overlap(3, 5, 0.9) == 4
    assert DICE.overlap(3, 5, 0.0) == 0


@settings(max_examples=100, deadline=None)
@given(sizes, st.lists(size_pair_overlap(), min_size=1, max_size=30), st.sampled_from(FUNCTIONS))
def test_sim_array_is_bit_identical_to_sim(l_r, triples, fn):
    import numpy as np

    pairs = [(l_s, min(o, l_r, l_s)) for _, l_s, o in triples]
    l_s = np.array([p[0] for p in pairs], np.int64)
    o = np.array([p[1] for p in pairs], np.int64)
    assert fn.sim_array(l_r, l_s, o).tolist() == [fn.sim(l_r, a, b) for a, b in pairs]
