"""The minimal stock in isolation: Algorithm 6/5 against the brute-force skyband, lb (Lemma 6.1),
crop_end and set_index_time, with many ties in similarity and end time. Both implementations:
the pure-Python ``Stock`` and the compiled ``FastStock``."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.swoop.fast import FastStock
from driftjoin.swoop.pairs import end_key
from driftjoin.swoop.stock import Stock

STOCKS = [Stock, FastStock]

from .helpers import kth_at, skyband

SIMS = [0.1, 0.25, 0.5, 0.75, 1.0]


@st.composite
def stock_script(draw):
    """Batches of new candidate pairs, each starting at an index time (non-decreasing)."""
    k = draw(st.sampled_from([1, 2, 3, 4, 7, 20, 1000]))
    n_batches = draw(st.integers(1, 14))
    seq = 0
    t = 0
    script = []
    for _ in range(n_batches):
        t += draw(st.sampled_from([0, 0, 1, 2]))
        batch = []
        for _ in range(draw(st.integers(0, 9))):
            sim = draw(st.sampled_from(SIMS))
            end = t + draw(st.integers(1, 6))
            older = draw(st.integers(0, seq + 3))
            batch.append((-sim, -end, seq + 10, older))
            seq += 1
        script.append((t, batch))
    return k, script


def check(stock: Stock, alive: list, k: int, t: float) -> None:
    assert list(stock) == skyband(alive, k)
    ends = stock.end_index()
    assert ends == sorted(end_key(key) for key in stock)
    probes = [probe + delta for probe in range(int(t), int(t) + 9) for delta in (0.0, 0.5)]
    expected = [kth_at(alive, k, probe) for probe in probes]
    assert [stock.lb(probe) for probe in probes] == expected
    if isinstance(stock, Stock):  # the Python engine's bulk verification only
        # a floor of lb at future times (the join never asks about t <= t_J)
        floor = stock.lb_floor(np.array(probes)).tolist()
        assert all(low <= exact for low, exact, p in zip(floor, expected, probes) if p > t)
        stock._steps = None  # fresh steps are exact
        assert stock.lb_floor(np.array(probes)).tolist() == expected
    ends, sims = stock.lb_steps()
    assert ends == sorted(ends) and sims == sorted(set(sims), reverse=True)
    # the staircase is lb itself (the compiled candidate generation reads lb off it)
    steps = [next((v for e, v in zip(ends, sims) if probe <= e), 0.0) for probe in probes]
    assert [v for v, p in zip(steps, probes) if p > t] == [
        v for v, p in zip(expected, probes) if p > t
    ]
    lbs = {probe: stock.lb(probe) for probe in range(int(t) + 1, int(t) + 9)}
    for ub in [0.0, *SIMS, 0.3, 2.0]:
        cut = stock.crop_end(ub)
        assert all((lb <= ub) == (probe > cut) for probe, lb in lbs.items())
    assert stock.topk() == sorted(alive)[:k]
    top = sorted(alive)
    assert stock.kth() == (top[k - 1] if len(top) >= k else None)
    listed = list(stock)
    assert stock.first_end() == (min(-key[1] for key in listed) if listed else None)
    for lo in listed[:3]:
        for hi in [None, *listed[-2:]]:
            expected_between = [p for p in listed if lo < p and (hi is None or p <= hi)]
            assert stock.between(lo, hi) == expected_between


@pytest.mark.parametrize("stock_cls", STOCKS)
@settings(max_examples=120, deadline=None)
@given(script=stock_script())
def test_insert_keeps_the_stock_minimal_and_correct(stock_cls, script):
    k, batches = script
    stock = stock_cls(k)
    alive: list = []
    for t, batch in batches:
        expiring = sorted(key for key in stock if -key[1] <= t)
        assert sorted(stock.set_index_time(t)) == expiring
        alive = [key for key in alive if -key[1] > t]
        before = set(stock)
        added, dropped = stock.insert(sorted(batch))
        alive += batch
        assert set(added) <= set(batch)
        assert set(dropped) <= before
        assert set(stock) == (before | set(added)) - set(dropped)
        check(stock, alive, k, t)


@pytest.mark.parametrize("stock_cls", STOCKS)
def test_figure_10_example(stock_cls):
    """k = 3: a pair below the skyband is rejected, one above it evicts the pair it dominates."""
    stock = stock_cls(3)
    # (sim, end): p1 (0.9, 2), p2 (0.8, 5), p3 (0.7, 4), p4 (0.6, 3)
    pairs = [(-0.9, -2, 1, 0), (-0.8, -5, 2, 0), (-0.7, -4, 3, 0), (-0.6, -3, 4, 0)]
    added, _ = stock.insert(sorted(pairs))
    assert added == sorted(pairs)  # p4 is the 4th best but ends after p1 expires
    # p: similarity 0.5, end 3 -> p2, p3 and p4 dominate it: irrelevant
    added, removed = stock.insert([(-0.5, -3, 5, 0)])
    assert added == [] and removed == []
    # q: similarity 0.65, end 5 -> it dominates p4 (0.6, 3), which had 2 dominators (p2, p3)
    added, removed = stock.insert([(-0.65, -5, 6, 0)])
    assert added == [(-0.65, -5, 6, 0)]
    assert removed == [(-0.6, -3, 4, 0)]
    assert stock.lb(1) == 0.7 and stock.lb(3) == 0.65 and stock.lb(5.5) == 0.0
