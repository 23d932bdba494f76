"""Tests for the S3J workset balancer (paper section 8, Algorithm 1)."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.s3j.balancer import (
    REL_TOL,
    BalancerStats,
    Move,
    SplitPlan,
    WorksetStats,
    addition_benefit,
    degree_of_imbalance,
    find_irremovables,
    greedy_rebalance,
    plan_splits,
    removal_benefit,
    s3j_rebalance,
    should_rebalance,
)

FAST = settings(max_examples=150, deadline=None)


def stats(num_workers: int, *rows: tuple[object, float, float, int]) -> BalancerStats:
    return BalancerStats.of(num_workers, rows)


# --------------------------------------------------------------------------------------------
# Strategies
# --------------------------------------------------------------------------------------------


@st.composite
def random_stats(draw, *, integral: bool = False, max_workers: int = 8, min_size: float = 0.0):
    n_workers = draw(st.integers(1, max_workers))
    n_ws = draw(st.integers(0, 30))
    if integral:
        loads = draw(st.lists(st.integers(0, 100), min_size=n_ws, max_size=n_ws))
        sizes = draw(st.lists(st.integers(int(min_size), 50), min_size=n_ws, max_size=n_ws))
    else:
        loads = draw(
            st.lists(
                st.one_of(st.floats(0, 1e6, allow_nan=False), st.integers(0, 1000).map(float)),
                min_size=n_ws,
                max_size=n_ws,
            )
        )
        sizes = draw(st.lists(st.floats(min_size, 1e6, allow_nan=False), min_size=n_ws, max_size=n_ws))
    # Skewed placement: often everything on a few workers.
    hot = draw(st.integers(1, n_workers))
    workers = draw(st.lists(st.integers(0, hot - 1), min_size=n_ws, max_size=n_ws))
    return BalancerStats(
        tuple(WorksetStats((i // 7, i % 7), loads[i], sizes[i], workers[i]) for i in range(n_ws)),
        n_workers,
    )


def check_rebalance_consistent(s: BalancerStats, r) -> None:
    """Moves, assignment and loads of a Rebalance agree with each other."""
    by_id = {w.workset: w for w in s.worksets}
    assert set(r.assignment) == set(by_id)
    moved = [m.workset for m in r.moves]
    assert len(moved) == len(set(moved)), "a workset moved twice"
    for m in r.moves:
        w = by_id[m.workset]
        assert (m.source, m.load, m.size_bytes) == (w.worker, w.load, w.size_bytes)
        assert m.target != m.source and r.assignment[m.workset] == m.target
    for w in s.worksets:
        if w.workset not in moved:
            assert r.assignment[w.workset] == w.worker
    after = r.apply(s)
    assert r.loads_before == s.worker_loads()
    assert r.loads_after == after.worker_loads()
    assert r.di_before == degree_of_imbalance(s.worker_loads())
    assert r.di_after == degree_of_imbalance(after.worker_loads())


def slack(s: BalancerStats) -> float:
    return 1e-9 * max(1.0, s.total_load)


# --------------------------------------------------------------------------------------------
# Definition 11
# --------------------------------------------------------------------------------------------


def test_degree_of_imbalance_formula():
    assert degree_of_imbalance([]) == 0.0
    assert degree_of_imbalance([7.0]) == 0.0
    assert degree_of_imbalance([5, 5, 5]) == 0.0
    assert degree_of_imbalance([10, 0]) == 10.0  # avg 5: 5 + 5
    assert degree_of_imbalance([9, 0, 0]) == 12.0  # avg 3: 6 + 3 + 3
    assert degree_of_imbalance([6, 2, 1, 3]) == pytest.approx(6.0)  # avg 3: 3 + 1 + 2 + 0


@FAST
@given(st.lists(st.floats(0, 1e9, allow_nan=False), min_size=1, max_size=20))
def test_degree_of_imbalance_matches_definition(loads):
    avg = sum(loads) / len(loads)
    expected = sum(abs(x - avg) for x in loads)
    assert degree_of_imbalance(loads) == pytest.approx(expected, rel=1e-9, abs=1e-6)
    # Bounded by twice the load that sits above the average, and by 2 (N-1)/N * total.
    assert degree_of_imbalance(loads) <= 2 * (len(loads) - 1) / len(loads) * sum(loads) * (1 + 1e-9) + 1e-6


def test_benefits_add_up_to_the_change_of_di():
    loads = [10.0, 3.0, 1.0]
    avg = sum(loads) / 3
    w_load = 2.0
    moved = [8.0, 3.0, 3.0]
    delta = degree_of_imbalance(loads) - degree_of_imbalance(moved)
    parts = removal_benefit(10.0, w_load, 0, avg, 0) + addition_benefit(1.0, w_load, 0, avg, 0)
    assert parts == pytest.approx(delta)
    # The migration cost (bytes * factor) is subtracted from each benefit.
    assert removal_benefit(10.0, w_load, 100, avg, 0.01) == pytest.approx(removal_benefit(10.0, w_load, 0, avg, 0) - 1)
    assert addition_benefit(1.0, w_load, 100, avg, 0.01) == pytest.approx(addition_benefit(1.0, w_load, 0, avg, 0) - 1)


# --------------------------------------------------------------------------------------------
# Input validation
# --------------------------------------------------------------------------------------------


def test_stats_validation():
    with pytest.raises(ValueError):
        stats(0)
    with pytest.raises(ValueError):
        stats(2, ("a", 1, 1, 2))  # worker out of range
    with pytest.raises(ValueError):
        stats(2, ("a", 1, 1, 0), ("a", 2, 1, 1))  # duplicate id
    with pytest.raises(ValueError):
        stats(2, ("a", -1, 1, 0))
    with pytest.raises(ValueError):
        stats(2, ("a", math.nan, 1, 0))
    with pytest.raises(ValueError):
        stats(2, ("a", 1, -1, 0))
    with pytest.raises(ValueError):
        s3j_rebalance(stats(2, ("a", 1, 1, 0)), -1)
    with pytest.raises(ValueError):
        s3j_rebalance(stats(2, ("a", 1, 1, 0)), math.inf)


@pytest.mark.parametrize(
    "s",
    [
        stats(3),  # no worksets
        stats(1, ("a", 5, 1, 0), ("b", 3, 1, 0)),  # one worker
        stats(3, ("a", 0, 1, 0), ("b", 0, 1, 0)),  # no load
    ],
)
def test_degenerate_inputs(s):
    for r in (s3j_rebalance(s, 0), greedy_rebalance(s)):
        assert r.moves == ()
        assert r.di_before == r.di_after == 0.0
        check_rebalance_consistent(s, r)


# --------------------------------------------------------------------------------------------
# Algorithm 1: crafted cases
# --------------------------------------------------------------------------------------------


def test_two_workers_exact_fit_moves_one():
    s = stats(2, ("a", 5, 1, 0), ("b", 5, 1, 0))
    r = s3j_rebalance(s, 0)
    assert r.moves == (Move("a", 0, 1, 5, 1),)  # ties: the first workset
    assert r.loads_after == (5.0, 5.0)
    assert (r.di_before, r.di_after) == (10.0, 0.0)
    check_rebalance_consistent(s, r)


def test_irremovable_heavy_workset_stays_and_the_small_one_moves():
    # avg 5; "big" (8 > 5) is the heaviest on overloaded worker 0 -> irremovable.
    s = stats(2, ("big", 8, 1, 0), ("small", 1, 1, 0), ("other", 1, 1, 1))
    assert find_irremovables(s) == {"big"}
    r = s3j_rebalance(s, 0)
    assert r.irremovables == {"big"}
    assert r.moves == (Move("small", 0, 1, 1, 1),)
    assert r.loads_after == (8.0, 2.0)
    assert (r.di_before, r.di_after) == (8.0, 6.0)


def test_single_heavy_workset_nothing_to_do():
    s = stats(3, ("h", 9, 1, 0))
    r = s3j_rebalance(s, 0)
    assert r.irremovables == {"h"} and r.moves == ()


def test_only_the_heaviest_workset_of_a_worker_is_irremovable():
    # avg 3: both 4s are heavier than the average, only the first heaviest is irremovable;
    # the other is a candidate, but no receiver can take it without ending above average.
    s = stats(3, ("a", 4, 1, 0), ("b", 4, 1, 0), ("c", 1, 1, 1))
    r = s3j_rebalance(s, 0)
    assert r.irremovables == {"a"}
    assert r.ignored == ("b",)
    assert r.moves == ()


def test_three_workers_spread_evenly():
    s = stats(3, ("a", 3, 1, 0), ("b", 3, 1, 0), ("c", 3, 1, 0))
    r = s3j_rebalance(s, 0)
    assert r.moves == (Move("a", 0, 1, 3, 1), Move("b", 0, 2, 3, 1))
    assert r.loads_after == (3.0, 3.0, 3.0)
    assert (r.di_before, r.di_after) == (12.0, 0.0)


def test_three_workers_best_workset_to_least_loaded_receiver():
    # avg 4. Worker 0 (9) is overloaded with an irremovable 6; its 2 and 1 move, each to the
    # least-loaded underloaded worker at that moment.
    s = stats(3, ("w6", 6, 1, 0), ("w2", 2, 1, 0), ("w1", 1, 1, 0), ("x3", 3, 1, 1))
    r = s3j_rebalance(s, 0)
    assert r.irremovables == {"w6"}
    assert r.moves == (Move("w2", 0, 2, 2, 1), Move("w1", 0, 2, 1, 1))
    assert r.loads_after == (6.0, 3.0, 3.0)
    assert (r.di_before, r.di_after) == (10.0, 4.0)


def test_two_overloaded_donors():
    # avg 4: workers 0 and 1 give their surplus to workers 2 and 3.
    s = stats(
        4,
        ("a", 4, 1, 0), ("b", 2, 1, 0), ("c", 2, 1, 0),
        ("d", 4, 1, 1), ("e", 2, 1, 1),
        ("f", 2, 1, 2),
    )  # fmt: skip
    r = s3j_rebalance(s, 0)
    assert sorted(r.loads_after) == [4.0, 4.0, 4.0, 4.0]
    assert r.di_after == 0.0
    # The 4 on worker 0 has the highest removal benefit (4) and fits the empty worker 3
    # exactly; then worker 1's 2 (benefit 2) fills worker 2.
    assert r.moves == (Move("a", 0, 3, 4, 1), Move("e", 1, 2, 2, 1))
    check_rebalance_consistent(s, r)


def test_migration_factor_prefers_the_smaller_state():
    # Same load, different state sizes: the cheap one moves.
    s = stats(2, ("fat", 5, 1000, 0), ("thin", 5, 1, 0))
    r = s3j_rebalance(s, 0.001)
    assert r.moves == (Move("thin", 0, 1, 5, 1),)
    assert r.migrated_bytes == 1


def test_migration_factor_blocks_moves_not_worth_their_cost():
    s = stats(2, ("a", 5, 100, 0), ("b", 5, 100, 0))
    assert s3j_rebalance(s, 0.049).moves  # cost 4.9 < benefit 5
    assert s3j_rebalance(s, 0.05).moves == ()  # cost 5 = benefit 5: not positive


def test_receiver_never_ends_above_average():
    # Line 25 reading: avg 5, moving a 4 onto the worker with 2 would give 6 > 5, so it is
    # refused even though it would lower DI (6 -> 2); both candidates end on the ignore list.
    s = stats(2, ("a", 4, 1, 0), ("b", 4, 1, 0), ("c", 2, 1, 1))
    r = s3j_rebalance(s, 0)
    assert r.moves == ()
    assert r.ignored == ("a", "b")


def test_removal_benefit_decides_the_candidates():
    # avg 4, worker 0 at 5: removing its 3 leaves 2 (|5-4| - |2-4| = -1); removing its 2
    # leaves 3 (1 - 1 = 0). Neither is positive: nothing moves.
    s = stats(2, ("a", 3, 1, 0), ("b", 2, 1, 0), ("c", 3, 1, 1))
    assert s3j_rebalance(s, 0).moves == ()
    # avg 5, worker 0 at 7: removing the 3 is worth 2 - 1 = 1, removing a 2 is worth 2 - 0 = 2,
    # so the first 2 is best and fits worker 1 exactly.
    s = stats(2, ("a", 3, 1, 0), ("b", 2, 1, 0), ("x", 2, 1, 0), ("c", 3, 1, 1))
    r = s3j_rebalance(s, 0)
    assert [m.workset for m in r.moves] == ["b"]
    assert r.loads_after == (5.0, 5.0)


def test_huge_migration_factor_no_moves_crafted():
    s = stats(3, ("a", 3, 1, 0), ("b", 3, 1, 0), ("c", 3, 1, 0))
    assert s3j_rebalance(s, 1e12).moves == ()


def test_any_hashable_workset_id():
    s = stats(2, ((0, 1), 5, 1, 0), ((0, 2), 5, 1, 0), (frozenset({3}), 0, 0, 1))
    r = s3j_rebalance(s, 0)
    assert r.moves[0].workset == (0, 1)


# --------------------------------------------------------------------------------------------
# Algorithm 1: properties on random inputs
# --------------------------------------------------------------------------------------------


@FAST
@given(random_stats(), st.sampled_from([0.0, 1e-6, 1e-3, 0.1, 1.0]))
def test_s3j_invariants(s, migration_factor):
    r = s3j_rebalance(s, migration_factor)  # terminates (no hang under the hypothesis deadline)
    check_rebalance_consistent(s, r)
    # Never raises DI; each move lowers DI by more than twice its migration cost.
    assert r.di_after <= r.di_before + slack(s)
    assert r.di_before - r.di_after >= 2 * migration_factor * r.migrated_bytes - slack(s)
    if r.moves:
        assert r.di_after < r.di_before
    # Never moves an irremovable workset; irremovables are as specified.
    assert r.irremovables == find_irremovables(s)
    assert not {m.workset for m in r.moves} & r.irremovables
    avg = s.average_load
    loads = s.worker_loads()
    for ws in r.irremovables:
        w = next(x for x in s.worksets if x.workset == ws)
        assert w.load > avg and loads[w.worker] > avg
        assert w.load == max(x.load for x in s.worksets if x.worker == w.worker)
    # Replaying the moves: each donor was overloaded and each receiver underloaded at the
    # time of its move, and no receiver ever ends above the average.
    current = list(loads)
    for m in r.moves:
        assert current[m.source] > avg
        assert current[m.target] < avg
        current[m.source] -= m.load
        current[m.target] += m.load
        assert current[m.target] <= avg * (1 + 2 * REL_TOL) + 1e-9
        assert r.loads_after[m.target] <= avg * (1 + 2 * REL_TOL) + 1e-9
    assert len(r.moves) <= len(s.worksets)
    assert not {m.workset for m in r.moves} & set(r.ignored)


@FAST
@given(random_stats(min_size=1.0))
def test_huge_migration_factor_yields_no_moves(s):
    factor = 10 * max(1.0, s.total_load)  # every cost exceeds any possible DI gain
    r = s3j_rebalance(s, factor)
    assert r.moves == ()
    assert r.di_after == r.di_before


@FAST
@given(random_stats())
def test_s3j_is_deterministic_and_idempotent_without_cost(s):
    r = s3j_rebalance(s, 0)
    assert s3j_rebalance(s, 0) == r
    # A second round over the result has nothing left to improve.
    again = s3j_rebalance(r.apply(s), 0)
    assert again.di_after <= r.di_after + slack(s)


# --------------------------------------------------------------------------------------------
# Algorithm 1: the optimised implementation equals a literal reading of the pseudo-code
# --------------------------------------------------------------------------------------------


def literal_algorithm_1(s: BalancerStats, migration_factor: Fraction):
    """Algorithm 1 transcribed literally (with the documented readings), in exact arithmetic:
    over_benefits and under_benefits rebuilt from scratch on every repeat, O and U re-derived
    from the current loads, ignore list never reset."""
    avg = Fraction(sum(Fraction(w.load) for w in s.worksets), s.num_workers)
    worker = {w.workset: w.worker for w in s.worksets}
    seq = {w.workset: i for i, w in enumerate(s.worksets)}
    by_id = {w.workset: w for w in s.worksets}

    def load(n):
        return sum((Fraction(w.load) for w in s.worksets if worker[w.workset] == n), Fraction(0))

    def cost(w):
        return Fraction(w.size_bytes) * migration_factor

    O0 = [n for n in range(s.num_workers) if load(n) > avg]
    irremovables = set()
    for o in O0:
        mine = [w for w in s.worksets if w.worker == o]
        top = max(mine, key=lambda w: (w.load, -seq[w.workset]))
        if top.load > avg:
            irremovables.add(top.workset)

    ignore_list, moves = [], []
    while True:
        O = [n for n in range(s.num_workers) if load(n) > avg]
        U = [n for n in range(s.num_workers) if load(n) < avg]
        over_benefits = []
        for o in O:
            L_o = load(o)
            for w in s.worksets:
                if worker[w.workset] != o:
                    continue
                b = abs(L_o - avg) - abs(L_o - w.load - avg) - cost(w)
                if b > 0 and w.workset not in irremovables:
                    over_benefits.append((b, w.load, -seq[w.workset], w.workset))
        over_benefits.sort(reverse=True)
        best = None
        for entry in over_benefits:
            if entry[3] not in ignore_list:
                best = by_id[entry[3]]
                break
        if best is None:
            break
        under_benefits = []
        for u in U:
            L_u = load(u)
            b = abs(L_u - avg) - abs(L_u + best.load - avg) - cost(best)
            under_benefits.append((b, -L_u, -u, u))
        under_benefits.sort(reverse=True)
        optimal = None
        for b, _, _, u in under_benefits:
            if b > 0 and load(u) + best.load <= avg:
                optimal = u
                break
        if optimal is not None:
            moves.append((best.workset, worker[best.workset], optimal))
            worker[best.workset] = optimal
        else:
            ignore_list.append(best.workset)
    return moves, worker, ignore_list


@settings(max_examples=200, deadline=None)
@given(random_stats(integral=True), st.sampled_from([0, Fraction(1, 4), Fraction(1, 2), 1, 3]), st.data())
def test_matches_literal_transcription(s, factor, data):
    # A power-of-two worker count keeps every float computation of the implementation exact,
    # so both sides see the same ties.
    n = data.draw(st.sampled_from([1, 2, 4, 8]))
    s = BalancerStats(
        tuple(WorksetStats(w.workset, w.load, w.size_bytes, w.worker % n) for w in s.worksets), n
    )
    r = s3j_rebalance(s, float(factor))
    moves, worker, ignored = literal_algorithm_1(s, Fraction(factor))
    assert [(m.workset, m.source, m.target) for m in r.moves] == moves
    assert dict(r.assignment) == worker
    assert list(r.ignored) == ignored


# --------------------------------------------------------------------------------------------
# LPT greedy
# --------------------------------------------------------------------------------------------


def makespan(r) -> float:
    return max(r.loads_after)


def test_lpt_classic_two_machines():
    # Jobs 3,3,2,2,2 on 2 machines: LPT gives {3,2,2} / {3,2} = 7 / 5 (optimum 6 / 6).
    s = stats(2, *((f"j{i}", x, 1, 0) for i, x in enumerate([3, 3, 2, 2, 2])))
    r = greedy_rebalance(s)
    assert sorted(r.loads_after) == [5.0, 7.0]
    groups = sorted(sorted(s.worksets[i].load for i in range(5) if r.assignment[f"j{i}"] == n) for n in range(2))
    assert sorted(groups, key=sum) == [[2, 3], [2, 2, 3]]


def test_lpt_classic_worst_case_three_machines():
    # Graham's tight example for m = 3: 5,5,4,4,3,3,3 -> LPT makespan 11, optimum 9
    # (ratio 4/3 - 1/(3m) = 11/9).
    jobs = [5, 5, 4, 4, 3, 3, 3]
    s = stats(3, *((f"j{i}", x, 1, 0) for i, x in enumerate(jobs)))
    r = greedy_rebalance(s)
    assert makespan(r) == 11
    assert sorted(r.loads_after) == [8.0, 8.0, 11.0]


def test_lpt_assignment_order_and_ties():
    # Sorted 7,5,4,3,1 over 3 workers all starting empty: 7->0, 5->1, 4->2, 3->2, 1->1.
    s = stats(3, ("a", 4, 1, 0), ("b", 7, 1, 0), ("c", 1, 1, 0), ("d", 5, 1, 0), ("e", 3, 1, 0))
    r = greedy_rebalance(s)
    assert dict(r.assignment) == {"b": 0, "d": 1, "a": 2, "e": 2, "c": 1}
    assert r.loads_after == (7.0, 6.0, 7.0)
    assert list(r.assignment) == ["a", "b", "c", "d", "e"]  # caller's order kept
    assert {m.workset for m in r.moves} == {"d", "a", "e", "c"}


def test_lpt_keeps_worksets_home_on_ties():
    # Already balanced: no pointless moves.
    s = stats(3, ("a", 5, 1, 2), ("b", 5, 1, 1), ("c", 5, 1, 0))
    r = greedy_rebalance(s)
    assert r.moves == ()


def test_lpt_moves_irremovables_and_ignores_cost():
    s = stats(2, ("big", 8, 10**9, 0), ("small", 1, 1, 0), ("other", 1, 1, 0))
    r = greedy_rebalance(s)
    assert sorted(r.loads_after) == [2.0, 8.0]
    assert r.irremovables == frozenset()


def brute_force_makespan(loads: list[int], m: int) -> int:
    best = math.inf
    for assign in itertools.product(range(m), repeat=len(loads)):
        totals = [0] * m
        for x, a in zip(loads, assign):
            totals[a] += x
        best = min(best, max(totals))
    return best


@settings(max_examples=80, deadline=None)
@given(st.integers(1, 3), st.lists(st.integers(0, 20), min_size=1, max_size=7), st.data())
def test_lpt_matches_textbook_and_graham_bound(m, jobs, data):
    workers = data.draw(st.lists(st.integers(0, m - 1), min_size=len(jobs), max_size=len(jobs)))
    s = BalancerStats(tuple(WorksetStats(i, x, 1, workers[i]) for i, x in enumerate(jobs)), m)
    r = greedy_rebalance(s)
    check_rebalance_consistent(s, r)
    # Textbook LPT (ties to the lowest worker) gives the same multiset of loads.
    totals = [0] * m
    for x in sorted(jobs, reverse=True):
        totals[totals.index(min(totals))] += x
    assert sorted(r.loads_after) == sorted(totals)
    opt = brute_force_makespan(jobs, m)
    assert makespan(r) <= (Fraction(4, 3) - Fraction(1, 3 * m)) * opt


# --------------------------------------------------------------------------------------------
# Trigger
# --------------------------------------------------------------------------------------------


def test_trigger_load_rule():
    # DI / total: [10, 0] -> 10 / 10 = 1.0; [6, 4] -> 2 / 10 = 0.2.
    assert should_rebalance([10, 0], None, 0.5, math.inf)
    assert not should_rebalance([10, 0], None, 1.0, math.inf)  # must exceed
    assert should_rebalance([6, 4], None, 0.1, math.inf)
    assert not should_rebalance([6, 4], None, 0.2, math.inf)
    assert not should_rebalance([5, 5, 5], None, 0.0, math.inf)
    assert not should_rebalance([0, 0], None, 0.0, math.inf)  # no load, no trigger
    assert not should_rebalance([], [], 0.0, 0.0)


def test_trigger_latency_rule():
    balanced = [5, 5, 5]
    assert not should_rebalance(balanced, [1.0, 1.0, 1.0], 0.5, 0.5)
    assert should_rebalance(balanced, [1.0, 1.0, 1.6], 0.5, 0.5)  # 60% above the others
    assert not should_rebalance(balanced, [1.0, 1.0, 1.4], 0.5, 0.5)  # 40%: within
    assert should_rebalance(balanced, [1.0, 1.0, 0.4], 0.5, 0.5)  # 60% below: idle worker
    assert should_rebalance(balanced, [0.0, 0.0, 0.1], 0.5, 0.5)  # others at 0
    assert not should_rebalance(balanced, [0.0, 0.0, 0.0], 0.5, 0.5)
    assert not should_rebalance(balanced, [1.0, 1.0, 9.0], 0.5, math.inf)  # rule disabled
    assert not should_rebalance([5], [3.0], 0.5, 0.0)  # one worker: nothing to compare
    assert not should_rebalance(balanced, None, 0.5, 0.0)
    with pytest.raises(ValueError):
        should_rebalance(balanced, [1.0, 1.0], 0.5, 0.5)
    with pytest.raises(ValueError):
        should_rebalance(balanced, [1.0, 1.0, -1.0], 0.5, 0.5)
    with pytest.raises(ValueError):
        should_rebalance(balanced, None, -0.1, 0.5)


@FAST
@given(st.lists(st.floats(0, 1e6, allow_nan=False), min_size=1, max_size=10), st.floats(0, 2))
def test_trigger_load_rule_matches_ratio(loads, threshold):
    total = sum(loads)
    expected = total > 0 and degree_of_imbalance(loads) / math.fsum(loads) > threshold
    assert should_rebalance(loads, None, threshold, math.inf) == expected


# --------------------------------------------------------------------------------------------
# Split planner
# --------------------------------------------------------------------------------------------


def test_plan_splits_crafted():
    # avg 3: the 9 needs 3 parts.
    assert plan_splits(stats(3, ("h", 9, 1, 0))) == [SplitPlan("h", 3, 9)]
    # avg 4: 10 -> ceil(2.5) = 3 parts; exactly 2 * avg -> 2 parts.
    assert plan_splits(stats(3, ("h", 10, 1, 0), ("x", 2, 1, 1))) == [SplitPlan("h", 3, 10)]
    assert plan_splits(stats(2, ("h", 8, 1, 0), ("x", 0, 1, 1))) == [SplitPlan("h", 2, 8)]
    # Nothing heavier than the average: nothing to split.
    assert plan_splits(stats(2, ("a", 5, 1, 0), ("b", 5, 1, 0))) == []
    assert plan_splits(stats(2)) == []
    # Two heavy worksets on one worker: only the irremovable one by default.
    # avg 3.5: "a" and "b" (4) on worker 0, "d" (5) alone on worker 2.
    s = stats(4, ("a", 4, 1, 0), ("b", 4, 1, 0), ("c", 1, 1, 1), ("d", 5, 1, 2))
    assert plan_splits(s) == [SplitPlan("d", 2, 5), SplitPlan("a", 2, 4)]
    assert plan_splits(s, all_heavy=True) == [SplitPlan("d", 2, 5), SplitPlan("a", 2, 4), SplitPlan("b", 2, 4)]


@FAST
@given(random_stats(), st.booleans())
def test_plan_splits_properties(s, all_heavy):
    avg = s.average_load
    plans = plan_splits(s, all_heavy=all_heavy)
    ids = [p.workset for p in plans]
    if all_heavy:
        assert set(ids) >= find_irremovables(s)
    else:
        assert set(ids) == find_irremovables(s)
    for p in plans:
        assert p.load > avg and p.parts >= 2
        # Every part fits the average load, and no fewer parts would.
        assert p.load / p.parts <= avg * (1 + 1e-9)
        assert p.load / (p.parts - 1) > avg * (1 - 1e-9)
    assert [p.load for p in plans] == sorted((p.load for p in plans), reverse=True)
