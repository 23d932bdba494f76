"""Spaces (driftjoin.metric.spaces): every distance form against plain Python definitions, dead-letter
reasons and threshold checks."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.metric.spaces import JaccardSpace, LevenshteinSpace, VectorSpace, get_space, user_metric, CallableSpace
from driftjoin.metric.tokens import TokenOrder
from tests.metric import data
from tests.metric.oracle import jaccard, levenshtein


@settings(max_examples=60, deadline=None)
@given(a=st.lists(data.strings, max_size=12), b=st.lists(data.strings, max_size=12), r=st.integers(0, 4))
def test_levenshtein_forms_equal_the_definition(a, b, r):
    sp = LevenshteinSpace()
    va, vb = sp.prepare(a), sp.prepare(b)
    want = np.array([[levenshtein(x, y) for y in b] for x in a], dtype=float).reshape(len(a), len(b))
    assert np.array_equal(sp.pairwise(va, vb), want)
    i, j, d = sp.within(va, vb, r + 0.5)
    assert sorted(zip(i.tolist(), j.tolist(), d.tolist())) == [(x, y, want[x, y]) for x, y in zip(*np.nonzero(want <= r))]
    ia, ib = np.nonzero(np.ones_like(want, bool))
    got = sp.distances(va, ia, vb, ib, cutoff=r)
    assert np.array_equal(got <= r, want[ia, ib] <= r)
    assert np.array_equal(got[got <= r], want[ia, ib][want[ia, ib] <= r])


@settings(max_examples=60, deadline=None)
@given(a=st.lists(data.token_sets, max_size=10), b=st.lists(data.token_sets, max_size=10),
       r=st.sampled_from([0.0, 0.25, 0.5, 2 / 3, 0.99, 1.0, 1.5]), sample=st.lists(data.token_sets, max_size=5))
def test_jaccard_forms_equal_the_definition(a, b, r, sample):
    sp = JaccardSpace(TokenOrder.from_sample(sample))
    va, vb = sp.prepare(a), sp.prepare(b)
    want = np.array([[jaccard(x, y) for y in b] for x in a], dtype=float).reshape(len(a), len(b))
    assert np.array_equal(sp.pairwise(va, vb), want)
    i, j, d = sp.within(va, vb, r)
    assert list(zip(i.tolist(), j.tolist(), d.tolist())) == [(x, y, want[x, y]) for x, y in zip(*np.nonzero(want <= r))]
    ia, ib = np.nonzero(np.ones_like(want, bool))
    assert np.array_equal(sp.distances(va, ia, vb, ib), want[ia, ib])
    # codes: one per distinct token, sorted per set
    for k, s in enumerate(a):
        row = va.row(k)
        assert len(row) == len(set(s)) and np.all(np.diff(row) >= 0)


def test_token_order_puts_unsampled_tokens_first_then_rare_ones():
    order = TokenOrder.from_sample([["common", "rare"], ["common"], ["common", "mid"], ["mid"]])
    c = order.codes(["common", "mid", "rare", "unseen", 7])
    assert c[2] < c[1] < c[0]
    assert c[3] < c[2] and c[4] < c[2]
    assert np.array_equal(order.codes(["unseen"]), TokenOrder().codes(["unseen"]))  # fixed hash, no state


def test_vector_space_and_user_metric_forms():
    sp = VectorSpace("manhattan")
    v = sp.prepare([[0, 0], [1, 2], [3, 3]])
    assert sp.pairwise(v, v)[1, 2] == 3.0 and sp.distances(v, np.array([0]), v, np.array([2]))[0] == 6.0
    with pytest.raises(ValueError, match="cosine.*not a metric.*angular"):
        VectorSpace("cosine")
    calls = []

    def pairwise(A, B):
        calls.append(len(A))
        return np.abs(A[:, None, 0] - B[None, :, 0])

    um = user_metric(pairwise)
    w = um.prepare([[0.0], [1.0], [5.0]])
    assert um.distances(w, np.array([0, 0, 2]), w, np.array([1, 2, 1])).tolist() == [1.0, 5.0, 4.0]
    assert calls == [1, 1]  # one call per distinct left value
    assert CallableSpace(lambda a, b: len(a) + len(b)).pairwise(np.array(["a", "bb"], object), np.array(["c"], object)).tolist() == [[2.0], [3.0]]


def test_reasons():
    lev, jac = LevenshteinSpace(), JaccardSpace()
    assert lev.reason("") is None and lev.reason("\U0001d11e") is None
    assert lev.reason(None) == "null string"
    assert lev.reason(12) == "not a string: int 12"
    assert jac.reason(["a", "a"]) is None and jac.reason(np.array([1, 2])) is None
    assert jac.reason(None) == "null token set"
    assert jac.reason([]) == "empty token set: Jaccard distance needs at least one token"
    assert "not a single str" in jac.reason("abc")
    assert "1.5 of type float is neither str nor int" in jac.reason([1.5])
    vec = VectorSpace("angular")
    assert vec.reason([0.0, 0.0]).startswith("zero vector") and vec.reason([1.0, float("nan")]).startswith("vector has a NaN")


@pytest.mark.parametrize("metric, threshold, message", [
    ("levenshtein", 1.5, "whole edits; use a whole number such as 1"),
    ("levenshtein", -1, ">= 0"),
    ("levenshtein", True, "whole number of edits"),
    ("levenshtein", "2", "whole number of edits"),
    ("jaccard", 1.0, r"in \[0, 1\)"),
    ("jaccard", -0.1, r"in \[0, 1\)"),
    ("euclidean", 0, "> 0"),
])
def test_bad_thresholds_say_what_to_change(metric, threshold, message):
    with pytest.raises(ValueError, match=message):
        get_space(metric).check_threshold(threshold)


def test_good_thresholds():
    assert get_space("levenshtein").check_threshold(2.0) == 2 and get_space("edit").check_threshold(0) == 0
    assert get_space("jaccard").check_threshold(0) == 0.0
    with pytest.raises(ValueError, match="unknown metric 'hamming'"):
        get_space("hamming")
