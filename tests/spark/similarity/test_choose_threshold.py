"""choose_threshold on arrays (no Spark): the smallest threshold at which the selectivity the user
wrote is reached, counted exactly (0.07 of 100 pairs is 7 pairs, though ``0.07 * 100`` is
``7.000000000000001`` in floats), against a brute force over exact distances (1-D integer points:
Euclidean distances are exact integers), with ties and duplicates."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.spark.similarity.threshold import choose_threshold

SELECTIVITIES = [0.07, 0.1, 0.15, 0.3, 0.7, 0.001, 0.29, 1.0]


@settings(max_examples=80, deadline=None)
@given(left=st.lists(st.integers(-6, 6), min_size=2, max_size=30), right=st.none() | st.lists(st.integers(-6, 6), min_size=2, max_size=30),
       selectivity=st.sampled_from(SELECTIVITIES))
def test_the_smallest_threshold_that_reaches_the_selectivity(left, right, selectivity):
    a = np.array(left, float)[:, None]
    b = None if right is None else np.array(right, float)[:, None]
    if b is None:
        d = [abs(x - y) for i, x in enumerate(left) for y in left[i + 1 :]]
    else:
        d = [abs(x - y) for x in left for y in right]
    k = math.ceil(Fraction(str(selectivity)) * len(d))  # the pairs that must join
    t = choose_threshold(a, b, selectivity=selectivity, metric="euclidean", sample=100)
    assert t > 0
    assert sum(x <= t for x in d) >= k
    assert sum(x < t for x in d) < k or t < min((x for x in d if x > 0), default=math.inf)  # nothing smaller will do


def test_seven_hundredths_of_a_hundred_pairs_is_seven():
    left, right = np.array([[0.0], [1000.0]]), np.arange(1.0, 51.0)[:, None]  # distances 1..50 and 950..999
    assert choose_threshold(left, right, selectivity=0.07, metric="euclidean") == 7.0  # a float quantile says 8
    assert choose_threshold(left, right, selectivity=0.3, metric="euclidean") == 30.0
    same = np.array([[0.0], [0.0], [0.0], [2.0]])  # 3 of 6 pairs at distance 0: half the smallest positive one
    assert choose_threshold(same, selectivity=0.5, metric="euclidean") == 1.0
