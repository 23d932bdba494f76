"""Grid sizing and state moves against the paper's running example (section 3.3, Figure 3).

The example: p = 8; 500 tuples, 200 with b1, 250 with b2, 50 light. OUT^H = 20k with
|R(b1)| = |S(b1)| = 100 (a 2 x 2 grid) and |R(b2)| = 50, |S(b2)| = 200 (a 1 x 4 grid). Then S
tuples of b1 arrive until |S(b1)| = 300 (the paper says "300 more" but computes with
|S(b1)| = 300 and OUT^H = 100 * 300 + 50 * 200 = 40k, so 200 more): p^d_R(b1) = 1.414 keeps
p_R(b1) = 2, p^d_S(b1) = 4.243 doubles p_S(b1) to 4 with 4 new tasks; b2 wants 0.707 x 2.828 and
keeps its 1 x 4 grid.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.hypercube import (
    Drop,
    Grid,
    Residue,
    Side,
    Simulator,
    StateMoves,
    StreamingHyperCube,
    StreamTuple,
    Task,
    Transfer,
    apply_moves,
    desired_sides,
    initial_sides,
    oracle_pairs,
    placement_moves,
    resize_sides,
)
from driftjoin.hypercube.grid import nearest_pow2
from driftjoin.hypercube.invariants import placement_violations


def test_desired_sizes_of_the_running_example() -> None:
    assert desired_sides(100, 100, 20_000, 8) == pytest.approx((2.0, 2.0))
    assert desired_sides(50, 200, 20_000, 8) == pytest.approx((1.0, 4.0))
    d_r, d_s = desired_sides(100, 300, 40_000, 8)
    assert (round(d_r, 3), round(d_s, 3)) == (1.414, 4.243)
    d_r, d_s = desired_sides(50, 200, 40_000, 8)
    assert (round(d_r, 3), round(d_s, 3)) == (0.707, 2.828)


def test_grid_sizes_of_the_running_example() -> None:
    assert initial_sides(2.0, 2.0, 8) == (2, 2)
    assert initial_sides(1.0, 4.0, 8) == (1, 4)
    # 2 <= 2 * 1.414 keeps p_R(b1); 2 < 4.243 / 2 doubles p_S(b1).
    assert resize_sides(2, 2, 1.414, 4.243, 8) == (2, 4)
    # b2: 1 <= 2 * 0.707 and 4 within a factor 2 of 2.828: no migration.
    assert resize_sides(1, 4, 0.707, 2.828, 8) == (1, 4)


def test_doubling_moves_are_figure_3() -> None:
    """2 x 2 -> 2 x 4: task (x, y) sends all its R(b1) and the S(b1) with h' = 1 to (x, y + 2)."""
    old = Grid(2, 2, (10, 11, 12, 13))
    new = Grid(2, 4, (10, 11, 20, 21, 12, 13, 22, 23))
    moves = placement_moves("b1", old, new)
    expected_transfers = set()
    expected_drops = set()
    for x in range(2):
        for y in range(2):
            src, dst = old.task(x, y), new.task(x, y + 2)
            expected_transfers.add(Transfer(src, dst, "b1", Side.R, None))
            expected_transfers.add(Transfer(src, dst, "b1", Side.S, Residue(4, y + 2)))
            expected_drops.add(Drop(src, "b1", Side.S, Residue(4, y)))
    assert set(moves.transfers) == expected_transfers and len(moves.transfers) == 8
    assert set(moves.drops) == expected_drops and len(moves.drops) == 4


def test_halving_moves_follow_section_3_2() -> None:
    """4 x 2 -> 2 x 2: task (x, y), x >= 2, sends all its R(b) to (x - 2, y) and is released."""
    old = Grid(4, 2, tuple(range(8)))
    new = Grid(2, 2, (0, 1, 2, 3))
    moves = placement_moves("b", old, new)
    assert set(moves.transfers) == {
        Transfer(old.task(x, y), old.task(x - 2, y), "b", Side.R, None) for x in (2, 3) for y in (0, 1)
    }
    assert set(moves.drops) == {Drop(old.task(x, y), "b", side, None) for x in (2, 3) for y in (0, 1) for side in Side}


def test_running_example_end_to_end() -> None:
    """Feed the example through SHC: grids 2 x 2 and 1 x 4, then p_S(b1) doubles with 4 new tasks."""
    dispatcher = StreamingHyperCube(8, min_heavy=1)
    sim = Simulator(dispatcher)
    tid = iter(range(10_000))
    first = (
        [StreamTuple(Side.R, "b1", next(tid)) for _ in range(100)]
        + [StreamTuple(Side.S, "b1", next(tid)) for _ in range(100)]
        + [StreamTuple(Side.R, "b2", next(tid)) for _ in range(50)]
        + [StreamTuple(Side.S, "b2", next(tid)) for _ in range(200)]
        + [StreamTuple(Side(i % 2), f"light{i}", next(tid)) for i in range(50)]
    )
    sim.step(first)
    b1, b2 = dispatcher.grids["b1"], dispatcher.grids["b2"]
    assert (b1.p_r, b1.p_s, b2.p_r, b2.p_s) == (2, 2, 1, 4)
    assert dispatcher.out_h == 20_000 and set(dispatcher.grids) == {"b1", "b2"}
    # 8 light tasks on workers 0..7, then each new task on a worker with the fewest tasks.
    assert dispatcher.pool.task_counts == [2] * 8

    second = [StreamTuple(Side.S, "b1", next(tid)) for _ in range(200)]
    plan = dispatcher.plan(second)
    sim.execute(plan, len(second))
    b1_new = dispatcher.grids["b1"]
    assert dispatcher.out_h == 40_000
    assert (b1_new.p_r, b1_new.p_s) == (2, 4) and dispatcher.grids["b2"] == b2
    assert len(plan.reconfiguration.created) == 4 and plan.reconfiguration.released == ()
    assert plan.reconfiguration.moves == placement_moves("b1", b1, b1_new)
    assert dispatcher.pool.task_counts == [3, 3, 3, 3, 2, 2, 2, 2]
    assert dispatcher.stats.doublings == 1 and dispatcher.stats.halvings == 0
    # The moved tuples are the arrows of Figure 3: each R(b1) to the 2 new tasks of its row, each
    # S(b1) with h' = 1 to the 2 new tasks of its new column.
    moved_s = [t for t in first if t.key == "b1" and t.side is Side.S
               and set(b1_new.holders(Side.S, t.tid)) <= set(plan.reconfiguration.created)]
    assert 30 < len(moved_s) < 70
    assert sim.moved == 2 * 100 + 2 * len(moved_s)
    assert placement_violations(sim.dispatcher, sim.tasks) == []
    assert sorted(sim.pairs) == sorted(oracle_pairs(first + second))


@settings(max_examples=200, deadline=None)
@given(
    d_r=st.floats(0, 200), d_s=st.floats(0, 200), cap=st.integers(1, 64),
    p_r=st.sampled_from([1, 2, 4, 8, 16]), p_s=st.sampled_from([1, 2, 4, 8, 16]),
)
def test_resize_rule(d_r: float, d_s: float, cap: int, p_r: int, p_s: int) -> None:
    """After resizing, a side is within a factor 2 of its desired size unless 1 or held by the cap."""
    if p_r * p_s > cap:
        p_r, p_s = 1, 1
    n_r, n_s = resize_sides(p_r, p_s, d_r, d_s, cap)
    assert n_r * n_s <= cap and n_r & (n_r - 1) == 0 and n_s & (n_s - 1) == 0
    for side, d, other in ((n_r, d_r, n_s), (n_s, d_s, n_r)):
        assert side == 1 or side <= 2 * d
        assert side >= d / 2 or 2 * side * other > cap
    i_r, i_s = initial_sides(d_r, d_s, cap)
    assert i_r * i_s <= cap
    if nearest_pow2(d_r, 1 << 30) * nearest_pow2(d_s, 1 << 30) <= cap:
        for side, d in ((i_r, d_r), (i_s, d_s)):
            assert side == 1 and d <= 1 or d / math.sqrt(2) <= side <= d * math.sqrt(2)


def test_desired_sizes_without_heavy_output() -> None:
    """One-sided heavy values (OUT^H = 0) spread their stored side as far as the cap allows."""
    d_r, d_s = desired_sides(500, 0, 0, 8)
    assert initial_sides(d_r, d_s, 8) == (8, 1)


sides_pow2 = st.sampled_from([1, 2, 4, 8])


@settings(max_examples=200, deadline=None)
@given(
    shape_old=st.tuples(sides_pow2, sides_pow2),
    shape_new=st.tuples(sides_pow2, sides_pow2),
    keep=st.sampled_from(["none", "same place", "anywhere"]),
    light_old=st.booleans(),
    light_new=st.booleans(),
    n=st.integers(0, 60),
    rnd=st.randoms(use_true_random=False),
)
def test_placement_moves_rebuild_invariant(shape_old, shape_new, keep, light_old, light_new, n, rnd) -> None:
    """Any grid (or light placement) to any other, keeping none of the old tasks, those at the
    coordinates of both grids (as the dispatcher does), or old tasks at arbitrary new coordinates:
    after the moves every tuple of b sits exactly on the tasks invariant (I) names for the new
    grid; other values at the same tasks are untouched."""
    old = Grid(1, 1, (100,)) if light_old else Grid(*shape_old, tuple(range(shape_old[0] * shape_old[1])))
    if light_new:
        new = Grid(1, 1, (100,)) if not light_old else Grid(1, 1, (101,))
    else:
        p_r, p_s = shape_new
        cells = [
            old.task(x, y) if keep == "same place" and not light_old and x < old.p_r and y < old.p_s
            else 1000 + x * p_s + y
            for x in range(p_r)
            for y in range(p_s)
        ]
        if keep == "anywhere":
            reused = rnd.sample(old.cells, min(len(old.cells), len(cells)))
            cells = reused + cells[len(reused):]
            rnd.shuffle(cells)
        new = Grid(p_r, p_s, tuple(cells))
    tasks: dict[int, Task] = {}

    def task_of(task_id: int) -> Task:
        return tasks.setdefault(task_id, Task(task_id))

    tuples = [StreamTuple(Side(i % 2), "b", i) for i in range(n)]
    bystanders = [StreamTuple(Side.R, "other", 10_000 + t) for t in old.cells]
    for t in tuples:
        for task_id in old.holders(t.side, t.tid):
            task_of(task_id).install([t])
    for t, task_id in zip(bystanders, old.cells):
        task_of(task_id).install([t])
    moved = apply_moves(placement_moves("b", old, new), task_of)
    held: dict[int, set[int]] = {}
    for task_id, task in tasks.items():
        for t in task.stored_tuples():
            if t.key == "b":
                held.setdefault(t.tid, set()).add(task_id)
    for t in tuples:
        assert held.get(t.tid, set()) == set(new.holders(t.side, t.tid))
    for t, task_id in zip(bystanders, old.cells):
        assert t in tasks[task_id].stored_tuples()
    assert moved <= sum(len(new.holders(t.side, t.tid)) for t in tuples)
    if old == new:
        assert placement_moves("b", old, new) == StateMoves()
