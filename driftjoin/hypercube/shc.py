"""The Streaming HyperCube dispatcher (section 3.2).

Light values go through the parallel hash join on ``p`` tasks; each heavy value b through its own
``p_R(b) x p_S(b)`` grid of tasks, resized by doubling or halving a side whenever it drifts a
factor 2 from ``p^d_R(b) = |R(b)| / sqrt(OUT^H) * sqrt(p)`` (and the same for S).

Exactly-once across reconfigurations. Every configuration places a join value b on a grid (a
light value on the 1 x 1 grid of its hash-join task), and between batches the task states obey

    (I) each stored R tuple t of b is held exactly by the tasks of row ``h_R(t) mod p_R(b)`` and
        each stored S tuple by the tasks of column ``h_S(t) mod p_S(b)`` of b's current grid.

Under (I) any stored R tuple and stored S tuple of b share exactly one task. A new tuple is routed
to its whole row (column), so it meets every stored partner exactly once, reports the pair there,
and is stored so that (I) still holds. Pairs are only reported by probes, and a pair is probed
only by the later of its two tuples, so it is reported at most once, and since every pair's later
tuple probes the one task holding the earlier one, at least once. A reconfiguration of b (promotion
light -> heavy, demotion heavy -> light, doubling, halving, or several at once) happens between
batches, before the batch is routed under the new grid, and :func:`placement_moves` rebuilds
exactly the placement (I) of the new grid from the old one without reporting anything. The tests
check (I) after every batch as well as the output against an oracle.
"""

from __future__ import annotations

from collections.abc import Iterable

from driftjoin.hypercube.dispatcher import Dispatcher
from driftjoin.hypercube.grid import Grid, desired_sides, initial_sides, placement_moves, resize_sides
from driftjoin.hypercube.heavy import HeavyHitterTracker
from driftjoin.hypercube.model import BatchSummary, Key, Reconfiguration, StateMoves
from driftjoin.hypercube.routers import GridRouter, HashRouter
from driftjoin.hypercube.workers import WorkerPool


class StreamingHyperCube(Dispatcher):
    """SHC over ``p`` workers.

    Each batch is reflected in the heavy-hitter tracker before it is routed, and every heavy value
    and every value of the batch is classified and re-sized again, so the paper's rules hold at
    every batch boundary. ``epsilon`` (default ``1/(2p)``), ``panes`` and ``min_heavy`` (default
    ``p``) configure the :class:`HeavyHitterTracker`; ``cap`` (default ``p``) bounds the tasks of
    one grid: a side does not double past it. ``fresh_grids``: a resized grid gets new tasks in
    every cell instead of keeping the cells both shapes share, so two placements of a value
    never share a task (what the parallel routing of :mod:`driftjoin.hypercube.migration` needs:
    an old placement is probed for one batch while the new one fills).
    """

    name = "shc"

    def __init__(
        self,
        p: int,
        *,
        window: float | None = None,
        lateness: float = 0.0,
        epsilon: float | None = None,
        panes: int = 4,
        min_heavy: int | None = None,
        cap: int | None = None,
        fresh_grids: bool = False,
    ) -> None:
        super().__init__(p, window, lateness)
        self.fresh_grids = fresh_grids
        self.tracker = HeavyHitterTracker(
            p, epsilon=epsilon, window=window, panes=panes, min_heavy=p if min_heavy is None else min_heavy
        )
        self.cap = p if cap is None else cap
        if self.cap < 1:
            raise ValueError("cap must be >= 1")
        self.pool = WorkerPool(p)
        self.light = HashRouter(tuple(self.pool.allocate() for _ in range(p)))
        self.grids: dict[Key, Grid] = {}
        self.out_h = 0  # the estimate of OUT^H = sum over heavy b of |R(b)| |S(b)| at the last batch
        self._router = GridRouter(self.light, self.grids)

    @property
    def pane_width(self) -> float | None:
        return self.tracker.pane_width

    @property
    def router(self) -> GridRouter:
        return self._router

    def worker_of(self, task: int) -> int:
        return self.pool.worker_of(task)

    def placement(self, key: Key) -> Grid:
        """Where ``key`` lives now: its grid if heavy, else the 1 x 1 grid of its hash-join task."""
        return self.grids.get(key) or Grid.light(self.light.task_of(key))

    def begin_batch(self, summary: BatchSummary) -> Reconfiguration:
        """Update the heavy hitters with the batch, then re-grid every value whose grid is off."""
        evict_before = self.clock.advance(summary)
        tracker = self.tracker
        tracker.expire(evict_before)
        tracker.add(summary.counts, summary.totals)
        candidates = dict.fromkeys([*self.grids, *(key for _, key, _ in summary.counts)])
        heavy = {key: tracker.estimate(key) for key in candidates if tracker.is_heavy(key, key in self.grids)}
        self.out_h = sum(r * s for r, s in heavy.values())
        old_grids, self.grids = self.grids, {}
        moves, created, released = StateMoves(), [], []
        for key in dict.fromkeys([*old_grids, *heavy]):
            old = old_grids.get(key)
            new = None
            if key in heavy:
                d_r, d_s = desired_sides(*heavy[key], self.out_h, self.p)
                if old is None:
                    sides = initial_sides(d_r, d_s, self.cap)
                else:
                    sides = resize_sides(old.p_r, old.p_s, d_r, d_s, self.cap)
                new = self.grids[key] = self._regrid(old, *sides, created, released)
            else:
                self._release(old_grids[key].cells, released)
            self._count(old, new)
            light = Grid.light(self.light.task_of(key))
            moves += placement_moves(key, old or light, new or light)
        if self.grids != old_grids:
            self._router = GridRouter(self.light, self.grids)
        self.stats.tasks_created += len(created)
        self.stats.tasks_released += len(released)
        return Reconfiguration(evict_before, moves, tuple(created), tuple(released))

    def _regrid(self, old: Grid | None, p_r: int, p_s: int, created: list[int], released: list[int]) -> Grid:
        """The grid of the new shape: a cell keeps its task where the old grid had one."""
        if old is not None and (old.p_r, old.p_s) == (p_r, p_s):
            return old
        old_cells = {} if old is None else {pos: task for task, pos in old.position.items()}
        kept = {} if self.fresh_grids else {(x, y): task for (x, y), task in old_cells.items() if x < p_r and y < p_s}
        self._release([task for pos, task in old_cells.items() if pos not in kept], released)
        cells = []
        for x in range(p_r):
            for y in range(p_s):
                task = kept.get((x, y))
                if task is None:
                    task = self.pool.allocate()
                    created.append(task)
                cells.append(task)
        return Grid(p_r, p_s, tuple(cells))

    def _release(self, tasks: Iterable[int], released: list[int]) -> None:
        for task in tasks:
            self.pool.release(task)
            released.append(task)

    def _count(self, old: Grid | None, new: Grid | None) -> None:
        if old is None and new is not None:
            self.stats.promotions += 1
        elif old is not None and new is None:
            self.stats.demotions += 1
        elif old is not None and new is not None:
            for before, after in ((old.p_r, new.p_r), (old.p_s, new.p_s)):
                steps = after.bit_length() - before.bit_length()  # sides are powers of two
                if steps > 0:
                    self.stats.doublings += steps
                else:
                    self.stats.halvings -= steps
