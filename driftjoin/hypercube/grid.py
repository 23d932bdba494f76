"""Grids of tasks for heavy values, their desired sizes, and the state moves between grids.

A heavy value b occupies a ``p_R(b) x p_S(b)`` grid of tasks. An R tuple t is stored at every task
of row ``h_R(t) mod p_R``, an S tuple at every task of column ``h_S(t) mod p_S``; an R and an S
tuple therefore meet in exactly one task. A light value is the degenerate 1 x 1 grid whose only
task is its parallel-hash-join task ``h^L(b)``, so promotion, demotion, doubling and halving are
all one operation: :func:`placement_moves` from the old grid to the new one.

Sides are powers of two: ``h_R mod 2 p_R = h_R mod p_R + p_R * h'`` with ``h'`` the next hash
bit, which is exactly the doubling of section 3.2, and halving drops that bit again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from driftjoin.hypercube.hashing import tuple_hash
from driftjoin.hypercube.model import Drop, Key, Residue, Side, StateMoves, Transfer


def _is_pow2(n: int) -> bool:
    return n >= 1 and n & (n - 1) == 0


@dataclass(frozen=True)
class Grid:
    """The tasks of one join value, row-major: ``cells[x * p_s + y]`` is task (x, y), 0-based."""

    p_r: int
    p_s: int
    cells: tuple[int, ...]

    def __post_init__(self) -> None:
        if not (_is_pow2(self.p_r) and _is_pow2(self.p_s)):
            raise ValueError(f"grid sides must be powers of two, got {self.p_r} x {self.p_s}")
        if len(self.cells) != self.p_r * self.p_s or len(set(self.cells)) != len(self.cells):
            raise ValueError("a grid needs p_r * p_s distinct tasks")

    @staticmethod
    def light(task: int) -> Grid:
        """The 1 x 1 placement of a light value on its hash-join task."""
        return Grid(1, 1, (task,))

    def side_size(self, side: Side) -> int:
        return self.p_r if side is Side.R else self.p_s

    def task(self, x: int, y: int) -> int:
        return self.cells[x * self.p_s + y]

    @cached_property
    def rows(self) -> tuple[tuple[int, ...], ...]:
        return tuple(self.cells[x * self.p_s : (x + 1) * self.p_s] for x in range(self.p_r))

    @cached_property
    def columns(self) -> tuple[tuple[int, ...], ...]:
        return tuple(self.cells[y :: self.p_s] for y in range(self.p_s))

    def holders(self, side: Side, tid: int) -> tuple[int, ...]:
        """The tasks that store a tuple: its row (R) or column (S), by the tuple's grid hash."""
        h = tuple_hash(side, tid)
        return self.rows[h & (self.p_r - 1)] if side is Side.R else self.columns[h & (self.p_s - 1)]

    @cached_property
    def position(self) -> dict[int, tuple[int, int]]:
        return {t: divmod(i, self.p_s) for i, t in enumerate(self.cells)}


def desired_sides(r: float, s: float, out_h: float, p: int) -> tuple[float, float]:
    """``p^d_R(b) = |R(b)| / sqrt(OUT^H) * sqrt(p)`` and the same for S (section 3.2).

    With ``OUT^H = 0`` (no heavy value has tuples on both sides) a non-empty side wants as many
    tasks as possible (``inf``, capped by the caller) and an empty one wants none.
    """
    if out_h <= 0:
        return (math.inf if r > 0 else 0.0), (math.inf if s > 0 else 0.0)
    scale = math.sqrt(p / out_h)
    return r * scale, s * scale


def nearest_pow2(d: float, cap: int) -> int:
    """The power of two closest to ``d`` on a log scale, within ``[1, cap]``."""
    if d <= 1.0:
        return 1
    if math.isinf(d):
        return _floor_pow2(cap)
    return min(1 << round(math.log2(d)), _floor_pow2(cap))


def _floor_pow2(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


def initial_sides(d_r: float, d_s: float, cap: int) -> tuple[int, int]:
    """The grid of a newly heavy value: nearest powers of two, shrunk until ``p_R p_S <= cap``.

    While over the cap, the side that is larger relative to its desired size is halved.
    """
    p_r, p_s = nearest_pow2(d_r, cap), nearest_pow2(d_s, cap)
    while p_r * p_s > cap:
        if p_s == 1 or (p_r > 1 and _over(p_r, d_r) >= _over(p_s, d_s)):
            p_r //= 2
        else:
            p_s //= 2
    return p_r, p_s


def _over(current: int, desired: float) -> float:
    return math.inf if desired <= 0 else current / desired


def resize_sides(p_r: int, p_s: int, d_r: float, d_s: float, cap: int) -> tuple[int, int]:
    """Section 3.2's rule, repeated until it holds: halve a side while it exceeds twice its desired
    size; double a side while it is below half its desired size and ``p_R p_S`` stays ``<= cap``.

    Halvings come first (they free room); among doublings the side furthest below its desired
    size goes first. A side within a factor 2 of its desired size never changes.
    """
    while p_r > 1 and p_r > 2 * d_r:
        p_r //= 2
    while p_s > 1 and p_s > 2 * d_s:
        p_s //= 2
    while True:
        grow_r = p_r < d_r / 2 and 2 * p_r * p_s <= cap
        grow_s = p_s < d_s / 2 and 2 * p_r * p_s <= cap
        if grow_r and (not grow_s or _over(p_r, d_r) <= _over(p_s, d_s)):
            p_r *= 2
        elif grow_s:
            p_s *= 2
        else:
            return p_r, p_s


def placement_moves(key: Key, old: Grid, new: Grid) -> StateMoves:
    """The state moves that turn the placement of ``key`` from ``old`` into ``new``.

    For each side and each task of ``new`` at side-coordinate ``c`` (its row for R, its column for
    S) the task must end up holding exactly the tuples of ``Residue(m_new, c)``. Those are held by
    the old rows (columns) ``c mod m_old`` (growing) or ``c, c + m_new, ...`` (shrinking). A task
    of both grids already holds its old row (column); every other needed part is copied from one
    old task, and a task of both grids that holds more than it needs drops the rest. Tasks absent
    from ``new`` drop everything of ``key``.

    For doubling ``p_S`` this is the paper's move: each task (x, y) sends all its R(b) to
    (x, y + p_S) and the S(b) tuples whose next hash bit is 1 to (x, y + p_S), then drops those;
    for halving ``p_R`` each task (x, y), x >= p_R / 2, sends its R(b) to (x - p_R / 2, y).
    """
    if old == new:
        return StateMoves()
    transfers: list[Transfer] = []
    drops: list[Drop] = []
    for side in (Side.R, Side.S):
        axis = 0 if side is Side.R else 1
        m_old, m_new = old.side_size(side), new.side_size(side)
        for dst, pos in new.position.items():
            c = pos[axis]
            held = old.position.get(dst)
            for c_old in range(c % m_old, m_old, min(m_old, m_new)):
                if held is not None and held[axis] == c_old:
                    continue
                src = old.task(c_old, pos[1] % old.p_s) if axis == 0 else old.task(pos[0] % old.p_r, c_old)
                transfers.append(Transfer(src, dst, key, side, Residue(m_new, c) if m_new > m_old else None))
        for task, held in old.position.items():
            pos = new.position.get(task)
            if pos is None:
                drops.append(Drop(task, key, side, None))
            elif m_new > m_old or held[axis] % m_new != pos[axis]:
                drops.append(Drop(task, key, side, Residue(m_new, pos[axis])))
    return StateMoves(tuple(transfers), tuple(drops))
