"""The count bounds never reject a pair within the threshold (they are necessary conditions), and
the edit bounds reject what they say they reject: checked against the metric tests' own
dynamic-programming edit distance and exact Jaccard (tests/metric/oracle.py), over strings from a
small alphabet (many near pairs) and a wide one (hash collisions of characters, ``ord(c) mod 64``)."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.metric.bounds import EditSignature, SetSignature, within_edits, within_jaccard
from driftjoin.metric.records import object_array
from tests.metric.oracle import jaccard, levenshtein


def all_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Every ordered pair ``(i, j)`` of ``range(n)``, as two index arrays."""
    ia, ib = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    return ia.ravel(), ib.ravel()


small = st.text(alphabet="abc", max_size=7)
wide = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=400), max_size=7)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(small, wide, st.none()), min_size=1, max_size=12), st.integers(0, 3))
def test_every_pair_within_k_edits_passes_and_nulls_never_pass(values, k):
    v = object_array(values)
    sig = EditSignature.of(v)
    ia, ib = all_pairs(len(values))
    ok = within_edits(sig, ia, sig, ib, k)
    for i, j, passed in zip(ia.tolist(), ib.tolist(), ok.tolist()):
        x, y = values[i], values[j]
        if x is None or y is None:
            assert not passed
            continue
        if levenshtein(x, y) <= k:
            assert passed, (x, y, k)
        bits = lambda s: {ord(c) % 64 for c in s}  # noqa: E731
        expected = abs(len(x) - len(y)) <= k and len(bits(x) ^ bits(y)) <= 2 * k
        assert passed == expected, (x, y, k)


def test_signatures_of_concatenated_arrays_are_the_concatenation():
    a, b = object_array(["ann", None]), object_array(["bob", "anne"])
    both = EditSignature.concat([EditSignature.of(a), EditSignature.of(b)])
    whole = EditSignature.of(object_array(["ann", None, "bob", "anne"]))
    assert both.length.tolist() == whole.length.tolist() and both.bits.tolist() == whole.bits.tolist()


tokens = st.frozensets(st.one_of(st.integers(0, 6), st.sampled_from(["a", "b", "ab", "street"])), max_size=6)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(tokens, st.none()), min_size=1, max_size=10),
       st.sampled_from([Fraction(0), Fraction(1, 3), Fraction(2, 5), Fraction(1, 2), Fraction(3, 4), Fraction(1)]))
def test_every_pair_within_the_jaccard_threshold_passes_and_null_or_empty_sets_never_pass(sets, d):
    sig = SetSignature.of(sets)
    ia, ib = all_pairs(len(sets))
    ok = within_jaccard(sig, ia, sig, ib, d)
    for i, j, passed in zip(ia.tolist(), ib.tolist(), ok.tolist()):
        x, y = sets[i], sets[j]
        if not x or not y:
            assert not passed
        elif jaccard(x, y) <= d:
            assert passed, (x, y, d)


def test_the_jaccard_bound_rejects_sets_whose_words_differ():
    s = SetSignature.of([{"12", "main", "street"}, {"7", "high", "road"}])
    assert within_jaccard(s, np.array([0]), s, np.array([1]), Fraction(2, 5)).tolist() == [False]
