"""The 1-Bucket-Theta grid (Okcan and Riedewald, SIGMOD 2011): which cells, on which workers.

The join matrix ``left x right`` is cut into cells; a left record is hashed to one *row* of
cells and copied to every cell of that row, a right record to one *column*. Any pair of
records therefore meets in exactly one cell: the cell at its row and column. Whatever the
dimension, a record is copied to one row (or column) of cells, about ``sqrt(p)`` of them.

- Two streams: an ``r x c`` grid; cell ``(i, j)`` joins the left records of row bucket ``i``
  with the right records of column bucket ``j``.
- Self-join: one bucket per record (``k`` buckets) and only the cells on and above the
  diagonal, ``(i, j)`` with ``i <= j``: a record of bucket ``b`` goes to the cells of row ``b``
  and of column ``b`` (``k`` cells). An unordered pair of records in buckets ``a <= b`` meets
  only in cell ``(a, b)``: the diagonal cell ``(a, a)`` pairs the records of bucket ``a`` with
  each other, an off-diagonal cell pairs bucket ``a`` with bucket ``b``.

Buckets come from a deterministic 64-bit hash of the record id (SplitMix64, the same in every
process), so a replayed batch routes every record identically; two records with the same id
share a bucket (a self-join never pairs them).

Cells are placed on the ``p`` workers by longest-processing-time first (work of a cell = its
expected number of pairs: a diagonal cell has half the pairs of an off-diagonal one); a worker
that holds several cells of a record's row receives that record once. The grid is chosen to
minimise the busiest worker's work, and among grids within :data:`WORK_TOLERANCE` of the best,
the fewest copies per record (the paper's "minimise the maximum reducer input" with the
output balanced; a perfect square ``p`` with equal inputs gives the paper's ``sqrt(p) x
sqrt(p)`` grid).
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from driftjoin.runs import run_positions

#: A grid whose busiest worker has at most this much more work than the best grid's may be
#: chosen for fewer copies per record.
WORK_TOLERANCE = 0.3
_SEEDS = (0x67726964526F7773, 0x67726964436F6C73)  # left (rows) / right (columns) bucket hashes
_M64 = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def id_hash(ids: np.ndarray, side: int) -> np.ndarray:
    """A 64-bit hash of each id, identical in every process (strings through BLAKE2b)."""
    ids = np.asarray(ids)
    if ids.dtype.kind in "iu":
        base = ids.astype(np.int64).view(np.uint64)
    else:
        base = np.fromiter(
            (int.from_bytes(hashlib.blake2b(str(v).encode(), digest_size=8).digest(), "little") for v in ids),
            dtype=np.uint64, count=len(ids))
    return _splitmix64(base ^ np.uint64(_SEEDS[side]))


@dataclass(frozen=True)
class GridLayout:
    """A grid of cells and their workers.

    ``rows`` x ``cols`` buckets (a self-join has ``rows == cols == k`` and only cells
    ``i <= j``); ``cell_worker[(i, j)]`` is the worker of cell ``(i, j)``.
    """

    rows: int
    cols: int
    self_join: bool
    cell_worker: tuple[tuple[int, int, int], ...]  # (i, j, worker)
    parallelism: int

    @cached_property
    def cells(self) -> dict[tuple[int, int], int]:
        return {(i, j): w for i, j, w in self.cell_worker}

    @cached_property
    def _row_workers(self) -> tuple[tuple[int, ...], ...]:
        """Workers a record of left bucket ``b`` goes to (self-join: bucket ``b``'s row and column)."""
        out = []
        for b in range(self.rows):
            ws = {w for (i, j), w in self.cells.items() if i == b or (self.self_join and j == b)}
            out.append(tuple(sorted(ws)))
        return tuple(out)

    @cached_property
    def _col_workers(self) -> tuple[tuple[int, ...], ...]:
        return tuple(tuple(sorted({w for (i, j), w in self.cells.items() if j == b})) for b in range(self.cols))

    def bucket(self, ids: np.ndarray, side: np.ndarray) -> np.ndarray:
        """Each record's bucket: its row (left records, self-join) or its column (right records)."""
        side = np.asarray(side)
        out = np.zeros(len(side), dtype=np.int32)
        for s, n in ((0, self.rows), (1, self.cols)):
            sel = np.nonzero(side == s)[0] if not self.self_join else (np.arange(len(side)) if s == 0 else np.zeros(0, np.int64))
            if len(sel):
                out[sel] = (id_hash(np.asarray(ids)[sel], 0 if self.self_join else s) % np.uint64(n)).astype(np.int32)
        return out

    def route(self, ids: np.ndarray, side: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Copies of a batch: ``(row, worker, bucket)`` per copy (``row`` indexes the batch)."""
        bucket = self.bucket(ids, side)
        targets = [self._row_workers, self._col_workers]
        rows, workers = [], []
        side = np.asarray(side)
        for s in ((0,) if self.self_join else (0, 1)):
            table = targets[s]
            sel = np.nonzero(side == s)[0] if not self.self_join else np.arange(len(side))
            if not len(sel):
                continue
            fan = np.array([len(t) for t in table])
            flat = np.concatenate([np.asarray(t, dtype=np.int64) for t in table])
            start = np.cumsum(fan) - fan
            b = bucket[sel]
            count = fan[b]
            rep = np.repeat(sel, count)
            k = run_positions(count)
            rows.append(rep)
            workers.append(flat[np.repeat(start[b], count) + k])
        if not rows:
            z = np.zeros(0, dtype=np.int64)
            return z, z.copy(), np.zeros(0, np.int32)
        row = np.concatenate(rows)
        return row, np.concatenate(workers), bucket[row]

    def worker_cells(self, worker: int) -> list[tuple[int, int]]:
        return sorted(c for c, w in self.cells.items() if w == worker)

    def copies_per_record(self, left_fraction: float = 0.5) -> float:
        """Expected copies of one record (buckets equally likely)."""
        rows = float(np.mean([len(t) for t in self._row_workers]))
        if self.self_join:
            return rows
        cols = float(np.mean([len(t) for t in self._col_workers]))
        return left_fraction * rows + (1.0 - left_fraction) * cols

    def max_work(self, left_fraction: float = 0.5) -> float:
        """The busiest worker's share of all candidate pairs (1.0 = one worker does everything)."""
        load = np.zeros(self.parallelism)
        for (i, j), w in self.cells.items():
            load[w] += _cell_work(i, j, self.rows, self.cols, self.self_join)
        return float(load.max())

    def describe(self) -> dict:
        return {"rows": self.rows, "cols": self.cols, "self_join": self.self_join, "cells": len(self.cells),
                "workers_used": len(set(self.cells.values())), "copies_per_record": round(self.copies_per_record(), 3),
                "max_work_share": round(self.max_work(), 4)}


def _cell_work(i: int, j: int, rows: int, cols: int, self_join: bool) -> float:
    """A cell's expected share of the candidate pairs."""
    if self_join:
        return (1.0 if i == j else 2.0) / (rows * rows)
    return 1.0 / (rows * cols)


def _place(rows: int, cols: int, self_join: bool, p: int) -> GridLayout:
    """Longest-processing-time placement of the cells on ``p`` workers (deterministic)."""
    cells = [(i, j) for i in range(rows) for j in range(cols) if not self_join or i <= j]
    # heaviest first; among equals, row-major order keeps a row's cells on consecutive workers
    cells.sort(key=lambda c: (-_cell_work(*c, rows, cols, self_join), c))
    load = [0.0] * p
    placed = []
    for c in cells:
        w = min(range(p), key=lambda k: (load[k], k))
        load[w] += _cell_work(*c, rows, cols, self_join)
        placed.append((c[0], c[1], w))
    return GridLayout(rows, cols, self_join, tuple(sorted(placed)), p)


def choose_layout(parallelism: int, self_join: bool, left_fraction: float = 0.5) -> GridLayout:
    """The grid for ``parallelism`` workers (see the module docstring for the rule)."""
    if not isinstance(parallelism, int) or parallelism < 1:
        raise ValueError(f"parallelism must be an integer >= 1, got {parallelism!r}")
    limit = 2 * math.isqrt(2 * parallelism) + 2
    if self_join:
        options = [_place(k, k, True, parallelism) for k in range(1, limit + 1)]
    else:
        options = [_place(r, c, False, parallelism) for r in range(1, limit + 1) for c in range(1, limit + 1)
                   if r * c <= 4 * parallelism]
    best = min(o.max_work(left_fraction) for o in options)
    good = [o for o in options if o.max_work(left_fraction) <= best * (1.0 + WORK_TOLERANCE) + 1e-12]
    return min(good, key=lambda o: (o.copies_per_record(left_fraction), o.max_work(left_fraction), o.rows * o.cols, o.rows))
