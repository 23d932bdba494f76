"""Routing tables: what the control plane publishes and stateless parallel routers apply.

A :class:`RoutingTable` is one version of SHC's placement (section 3.2) as plain data: the grid
of every heavy join value (its task ids) and the worker of every grid task. Light values stay on
the ``p`` hash-join tasks ``0 .. p-1``, task ``i`` on worker ``i``, in every version. The driver
builds tables (:mod:`driftjoin.hypercube.planner`); routers never decide anything.

A :class:`Binding` is what one executed micro-batch routes by: ``cur``, the table new tuples are
stored under, and ``prev``, the table of the previous executed batch, under which the stored
tuples lie. A value whose placement differs between the two is *moving* in this batch. Its new
tuples go, as everywhere, to their whole line (row for R, column for S) of the new placement to
be stored and to probe, and also, probe only, to their line of the old placement, where all its
stored tuples still are; the workers move the stored tuples to the new placement before the next
batch (:mod:`driftjoin.hypercube.migration`, which has the exactness argument). Two placements
of one value never share a task (grids get fresh tasks: ``StreamingHyperCube(fresh_grids=True)``;
grid tasks are never light tasks), so a probe at the old placement can only meet old tuples.

:func:`route_batch` routes a whole batch with numpy: one copy per row for light values, and the
rows of heavy or moving values line by line. Join-Biclique and the parallel hash join use fixed
routers (:class:`BicliqueRouting`, :class:`HashRouting`) with the same output.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Protocol

import numpy as np

from driftjoin.hypercube.grid import Grid
from driftjoin.hypercube.hashing import GROUP_SEED, LIGHT_SEED, key_hash, tuple_hash, tuple_hash_array
from driftjoin.hypercube.model import Key, Role, Side

_SP, _PROBE, _STORE = int(Role.STORE_PROBE), int(Role.PROBE), int(Role.STORE)


@dataclass(frozen=True)
class RoutingTable:
    """SHC's placement at one ``version``: heavy values' grids and their tasks' workers."""

    p: int
    grids: Mapping[Key, Grid] = field(default_factory=dict)
    workers: Mapping[int, int] = field(default_factory=dict)
    version: int = 0

    def light_task(self, key: Key) -> int:
        return key_hash(key, LIGHT_SEED) % self.p

    def placement(self, key: Key) -> Grid:
        """The grid of ``key``: its own if heavy, else the 1 x 1 grid of its hash-join task."""
        grid = self.grids.get(key)
        return grid if grid is not None else Grid.light(self.light_task(key))

    def worker_of(self, task: int) -> int:
        return task if task < self.p else self.workers[task]

    def to_doc(self, encode: Callable[[Key], Any]) -> dict[str, Any]:
        """The table as JSON values (``encode`` turns a join value into one)."""
        return {"version": self.version, "p": self.p,
                "grids": [[encode(k), g.p_r, g.p_s, list(g.cells)] for k, g in self.grids.items()],
                "workers": [[t, w] for t, w in sorted(self.workers.items())]}

    @staticmethod
    def from_doc(doc: Mapping[str, Any], decode: Callable[[Any], Key]) -> RoutingTable:
        grids = {decode(k): Grid(p_r, p_s, tuple(cells)) for k, p_r, p_s, cells in doc["grids"]}
        return RoutingTable(int(doc["p"]), grids, {int(t): int(w) for t, w in doc["workers"]}, int(doc["version"]))


@dataclass(frozen=True)
class Binding:
    """The tables of one executed micro-batch (module docstring)."""

    cur: RoutingTable
    prev: RoutingTable
    #: the first batch id this binding applies to (-1: the initial binding, before any)
    start: int = -1

    @staticmethod
    def initial(p: int) -> Binding:
        table = RoutingTable(p)
        return Binding(table, table)

    @cached_property
    def moving(self) -> dict[Key, tuple[Grid, Grid]]:
        """``key -> (old placement, new placement)`` of every value that moves in this batch."""
        out = {}
        for key in sorted(set(self.prev.grids) | set(self.cur.grids)):
            old, new = self.prev.placement(key), self.cur.placement(key)
            if old != new:
                out[key] = (old, new)
        return out

    def routes(self, side: Side, key: Key, tid: int) -> list[tuple[int, Role, bool]]:
        """The copies of one tuple: ``(task, role, primary)``; the first is its primary copy."""
        h = tuple_hash(side, tid)
        out = [(t, Role.STORE_PROBE, i == 0) for i, t in enumerate(_line(self.cur.placement(key), side, h))]
        moving = self.moving.get(key)
        if moving is not None:
            out += [(t, Role.PROBE, False) for t in _line(moving[0], side, h)]
        return out

    def to_doc(self, encode: Callable[[Key], Any]) -> dict[str, Any]:
        return {"start": self.start, "cur": self.cur.to_doc(encode), "prev": self.prev.to_doc(encode)}

    @staticmethod
    def from_doc(doc: Mapping[str, Any], decode: Callable[[Any], Key]) -> Binding:
        return Binding(RoutingTable.from_doc(doc["cur"], decode), RoutingTable.from_doc(doc["prev"], decode),
                       int(doc["start"]))


def _line(grid: Grid, side: Side, h: int) -> tuple[int, ...]:
    return grid.rows[h & (grid.p_r - 1)] if side == Side.R else grid.columns[h & (grid.p_s - 1)]


@dataclass
class Routes:
    """The copies of a batch: ``row`` indexes the batch; ``primary`` marks one copy per row (the
    one that counts the row in the statistics and reports it when late)."""

    row: np.ndarray
    task: np.ndarray
    worker: np.ndarray
    role: np.ndarray
    primary: np.ndarray

    @staticmethod
    def concat(parts: Sequence[Routes]) -> Routes:
        if not parts:
            empty = np.zeros(0, dtype=np.int64)
            return Routes(empty, empty, empty, empty.astype(np.int8), empty.astype(bool))
        return Routes(*(np.concatenate([getattr(r, f) for r in parts]) for f in ("row", "task", "worker", "role", "primary")))


class BatchRouting(Protocol):
    """Routes a batch given per row its side, its join value (as a code into ``uniques``) and the
    low 64 bits of its tuple id."""

    def route_batch(self, side: np.ndarray, codes: np.ndarray, uniques: Sequence[Key], low: np.ndarray) -> Routes: ...


def _light_tasks(uniques: Sequence[Key], p: int) -> np.ndarray:
    return np.fromiter((key_hash(k, LIGHT_SEED) % p for k in uniques), dtype=np.int64, count=len(uniques))


class ShcRouting:
    """SHC under a :class:`Binding`."""

    def __init__(self, binding: Binding) -> None:
        self.binding = binding

    def route_batch(self, side: np.ndarray, codes: np.ndarray, uniques: Sequence[Key], low: np.ndarray) -> Routes:
        b = self.binding
        n = len(codes)
        light = _light_tasks(uniques, b.cur.p)
        special = np.zeros(len(uniques), dtype=bool)
        for u, key in enumerate(uniques):
            special[u] = key in b.cur.grids or key in b.moving
        plain = np.flatnonzero(~special[codes]) if n else np.zeros(0, dtype=np.int64)
        task = light[codes[plain]]
        parts = [Routes(plain, task, task, np.full(len(plain), _SP, np.int8), np.ones(len(plain), dtype=bool))]
        if special.any():
            rows = np.flatnonzero(special[codes])
            h = tuple_hash_array(side[rows], low[rows])
            for u in np.flatnonzero(special).tolist():
                at = codes[rows] == u
                key = uniques[u]
                moving = b.moving.get(key)
                for s in (0, 1):
                    sel = at & (side[rows] == s)
                    if not sel.any():
                        continue
                    r, hs = rows[sel], h[sel]
                    parts.append(_line_routes(b.cur.placement(key), Side(s), r, hs, _SP, True, b.cur))
                    if moving is not None:
                        parts.append(_line_routes(moving[0], Side(s), r, hs, _PROBE, False, b.prev))
        return Routes.concat(parts)


def _line_routes(grid: Grid, side: Side, rows: np.ndarray, h: np.ndarray, role: int, primary: bool,
                 table: RoutingTable) -> Routes:
    """Copies of ``rows`` to their whole line of ``grid``; with ``primary`` the first of each line
    is the row's primary copy."""
    lines = np.asarray(grid.rows if side == Side.R else grid.columns, dtype=np.int64)
    idx = (h & np.uint64(len(lines) - 1)).astype(np.int64)
    tasks = lines[idx]  # (rows, line length)
    width = tasks.shape[1]
    workers = np.vectorize(table.worker_of, otypes=[np.int64])(tasks) if tasks.size else tasks
    prim = np.zeros(tasks.shape, dtype=bool)
    if primary:
        prim[:, 0] = True
    return Routes(np.repeat(rows, width), tasks.ravel(), workers.ravel(), np.full(tasks.size, role, np.int8), prim.ravel())


class HashRouting:
    """The parallel hash join: value b on task (and worker) ``h^L(b) mod p``."""

    def __init__(self, p: int) -> None:
        self.p = p

    def route_batch(self, side: np.ndarray, codes: np.ndarray, uniques: Sequence[Key], low: np.ndarray) -> Routes:
        task = _light_tasks(uniques, self.p)[codes] if len(codes) else np.zeros(0, dtype=np.int64)
        n = len(task)
        return Routes(np.arange(n), task, task, np.full(n, _SP, np.int8), np.ones(n, dtype=bool))


class BicliqueRouting:
    """Join-Biclique's ContRand routing (:class:`~driftjoin.hypercube.routers.BicliqueRouter`):
    one STORE copy (the primary) in the tuple's own relation, PROBE copies to every unit of the
    other relation's subgroup; units are tasks ``0 .. p-1`` on workers ``0 .. p-1``."""

    def __init__(self, p: int, groups: int) -> None:
        m = p // 2
        r_units, s_units = list(range(m)), list(range(m, p))
        self.groups = groups
        self.units = ([r_units[g::groups] for g in range(groups)], [s_units[g::groups] for g in range(groups)])

    def route_batch(self, side: np.ndarray, codes: np.ndarray, uniques: Sequence[Key], low: np.ndarray) -> Routes:
        group = np.fromiter((key_hash(k, GROUP_SEED) % self.groups for k in uniques), dtype=np.int64,
                            count=len(uniques))[codes] if len(codes) else np.zeros(0, dtype=np.int64)
        h = tuple_hash_array(side, low)
        parts = []
        for s in (0, 1):
            for g in range(self.groups):
                rows = np.flatnonzero((side == s) & (group == g))
                if not len(rows):
                    continue
                own = np.asarray(self.units[s][g], dtype=np.int64)
                store = own[(h[rows] % np.uint64(len(own))).astype(np.int64)]
                parts.append(Routes(rows, store, store, np.full(len(rows), _STORE, np.int8), np.ones(len(rows), dtype=bool)))
                other = np.asarray(self.units[1 - s][g], dtype=np.int64)
                probe = np.tile(other, len(rows))
                parts.append(Routes(np.repeat(rows, len(other)), probe, probe, np.full(len(probe), _PROBE, np.int8),
                                    np.zeros(len(probe), dtype=bool)))
        return Routes.concat(parts)


def batch_order(side: np.ndarray, ts: np.ndarray, low: np.ndarray) -> np.ndarray:
    """The order every worker processes a batch's copies in: by time, then by a hash of the tuple
    (which interleaves the sides without bias), then side. All copies of a tuple sort alike, so
    Join-Biclique's units agree which of two tuples of one batch came first (the later reports
    the pair); SHC and the hash join do not depend on it."""
    h = tuple_hash_array(side, low)
    return np.lexsort((np.asarray(low, dtype=np.uint64), np.asarray(side), h, np.asarray(ts)))
