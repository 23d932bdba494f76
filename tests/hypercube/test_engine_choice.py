"""``equi_join(algorithm="auto")``'s choice (:mod:`driftjoin.hypercube.choice`) against SHC's
heavy-key definition written apart, in exact arithmetic: a key is heavy iff its tuples on both
sides exceed ``(1/p - epsilon/2)`` of all tuples and reach ``min_heavy``; Spark's own join is
chosen iff no key is, and an empty sample chooses SHC. Keys left out of ``counts`` because they
cannot be heavy change nothing."""

from __future__ import annotations

from fractions import Fraction

from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.hypercube.choice import SHC, SPARK, choose_engine
from driftjoin.hypercube.model import Side


def _heavy(rows: list[tuple[int, int]], p: int, epsilon: Fraction, min_heavy: int) -> set[int]:
    """The heavy keys of ``rows`` ((side, key) per tuple), counted one by one."""
    per_key: dict[int, int] = {}
    for _, key in rows:
        per_key[key] = per_key.get(key, 0) + 1
    n = len(rows)
    return {k for k, m in per_key.items() if Fraction(m) > (Fraction(1, p) - epsilon / 2) * n and m >= min_heavy}


@settings(max_examples=200, deadline=None)
@given(rows=st.lists(st.tuples(st.sampled_from([0, 1]), st.integers(0, 12)), max_size=80),
       p=st.integers(1, 9), eps_part=st.integers(1, 4), min_heavy=st.integers(1, 6), drop_light=st.booleans())
def test_spark_iff_no_key_is_heavy_by_shcs_rule(rows, p, eps_part, min_heavy, drop_light) -> None:
    epsilon = Fraction(1 / (2 * p * eps_part))  # within SHC's (0, 1/(2p)], exactly the float the join is given
    counts: dict[tuple[Side, int], int] = {}
    for side, key in rows:
        counts[(Side(side), key)] = counts.get((Side(side), key), 0) + 1
    totals = {side: sum(m for (s, _), m in counts.items() if s == side) for side in Side}
    expected = _heavy(rows, p, epsilon, min_heavy)
    if drop_light:  # what the Spark side collects: only keys above the floor
        counts = {(s, k): m for (s, k), m in counts.items() if k in expected}
    choice = choose_engine(counts, totals, p, epsilon=float(epsilon), min_heavy=min_heavy)
    assert set(choice.heavy) == expected
    assert choice.tuples == len(rows)
    if not rows:
        assert choice.algorithm == SHC and "empty" in choice.reason()
    else:
        assert choice.algorithm == (SHC if expected else SPARK)
    sizes = [sum(1 for _, k in rows if k == key) for key in choice.heavy]
    assert sizes == sorted(sizes, reverse=True)


def test_default_epsilon_is_shcs() -> None:
    """``epsilon`` defaults to 1/(2p) as in SHC: at p = 4 the floor is 3/16 of the tuples."""
    totals = {Side.R: 8, Side.S: 8}
    assert choose_engine({(Side.R, "a"): 3}, totals, 4).algorithm == SPARK  # 3 = 3/16 * 16, not above
    assert choose_engine({(Side.R, "a"): 3, (Side.S, "a"): 1}, totals, 4).heavy == ("a",)
