"""Hot blocking keys: a heavy group spread over a grid of cells, each pair met in exactly one cell.

A rule stores its records under groups (block, driving key; :mod:`driftjoin.linkage.drivers`) and a
group lives on one worker, which compares its records pairwise: a postcode holding 10% of a
window's records would give one worker 1% of all pairs of the window, whatever the number of
workers. As in the Streaming HyperCube (Section 3.2 of the SHC paper; :mod:`driftjoin.hypercube`),
a *heavy* group is split over a grid of cells with side ``g``, spread over the workers:

- **two-sided**: a left record goes to row ``i = h(id) mod g`` (every cell ``(i, j)``), a right
  record to column ``j = h(id) mod g`` (every cell ``(i, j)``): a left-right pair meets in the
  one cell ``(i_left, j_right)``, and cells pair left with right only, as unsplit groups do;
- **self-link**: the cells are the triangle ``i <= j`` (``g (g + 1) / 2`` of them). A record of
  row ``i`` goes to cell ``(min(i, j), max(i, j))`` for every ``j``: as ROW where ``i < j``, as
  COL where ``i > j``; off-diagonal cells pair ROW with COL only (the class bit that two-sided
  links use for the side), while a diagonal cell ``(i, i)`` is an ordinary group of its rule (its
  own group, in the rule's ordinary lane) whose records pair among themselves. A pair of rows
  ``a < b`` meets once, in ``(a, b)``; a pair of one row ``a`` once, in ``(a, a)``. Each record is
  copied ``g`` times and each pair compared once: the group's work, spread over the cells.

Which groups are heavy (:func:`decide`): a group's work grows with the square of its records, so
group ``G`` with ``n`` records is heavy when ``n^2 > W / (4p)`` (``W`` the sum of ``n^2`` over all
groups of all rules, ``p`` the workers: its work alone exceeds a quarter of a worker's fair share,
so that the groups left whole, placed by hash, are small enough to even out) and
``n >= min_records``; it gets ``g = ceil(sqrt(2) n / sqrt(W / p))`` (at least 2, at most ``2p``),
so a cell's work (``(n / g)^2`` pairs off the diagonal, half that on it) is at most half the fair
share, and the cells of all heavy groups are placed heaviest first on the least loaded worker
(:meth:`SplitTable.cell_workers`, a function of the table, so every router and worker agrees). Counts come from a sample before the start
and, on a stream, from the workers' statistics (:mod:`driftjoin.spark.link.control`).

**Exactness under changing decisions.** A decision is a :class:`SplitTable` (a version and its
heavy groups); every record copy of a window is placed under the window's version (the Spark
operator binds each window to the version that was newest when the window first received
records, and never changes it), so inside a window every pair meets under one table, and the
argument above holds for any sequence of tables.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from driftjoin.linkage.drivers import hash_values, mix
from driftjoin.runs import run_positions

#: Groups with fewer records than this are never split (at the start of a stream every group is small).
MIN_RECORDS = 64


@dataclass(frozen=True)
class SplitTable:
    """One version of the hot-key decision: ``heavy[rule][group] = g`` (grid side)."""

    version: int = 0
    heavy: Mapping[int, Mapping[int, int]] = field(default_factory=dict)
    #: ``records[rule][group]``: the records the decision saw in each heavy group (cell weights)
    records: Mapping[int, Mapping[int, float]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_placement", {})

    def cell_workers(self, rule: int, group: int, self_join: bool, workers: int) -> np.ndarray:
        """The worker of each cell of a heavy group: the cells of every heavy group of the table,
        heaviest first, each to the least loaded worker (ties: the lowest); a function of the
        table, so every router and worker places them alike."""
        key = (self_join, workers)
        placed = self._placement.get(key)
        if placed is None:
            cells_all = []
            for r, table in sorted(self.heavy.items()):
                for gid, g in sorted(table.items()):
                    n = float(self.records.get(r, {}).get(gid, 1.0))
                    if self_join:
                        idx = 0
                        for lo in range(g):
                            for hi in range(lo, g):
                                cells_all.append(((n / g) ** 2 * (0.5 if lo == hi else 1.0), r, gid, idx))
                                idx += 1
                    else:
                        cells_all += [((n / g) ** 2, r, gid, c) for c in range(g * g)]
            load = np.zeros(workers)
            placed = {}
            for weight, r, gid, c in sorted(cells_all, key=lambda x: (-x[0], x[1], x[2], x[3])):
                w = int(np.argmin(load))
                load[w] += weight
                placed.setdefault((r, gid), {})[c] = w
            placed = {k: np.array([v[c] for c in range(len(v))], np.int64) for k, v in placed.items()}
            self._placement[key] = placed
        return placed[(rule, group)]

    def grid(self, rule: int, groups: np.ndarray) -> np.ndarray:
        """The grid side of each group of ``rule`` (0: not split)."""
        table = self.heavy.get(rule)
        if not table:
            return np.zeros(len(groups), np.int64)
        keys = np.fromiter(table.keys(), np.int64, len(table))
        sides = np.fromiter(table.values(), np.int64, len(table))
        order = np.argsort(keys)
        keys, sides = keys[order], sides[order]
        pos = np.minimum(np.searchsorted(keys, groups), len(keys) - 1)
        return np.where(keys[pos] == groups, sides[pos], 0)

    def as_dict(self) -> dict:
        """JSON form (decision files, statistics)."""
        return {"version": self.version,
                "heavy": {str(r): {str(k): int(g) for k, g in t.items()} for r, t in self.heavy.items()},
                "records": {str(r): {str(k): float(n) for k, n in t.items()} for r, t in self.records.items()}}

    @staticmethod
    def from_dict(doc: Mapping) -> "SplitTable":
        return SplitTable(int(doc["version"]),
                          {int(r): {int(k): int(g) for k, g in t.items()} for r, t in doc.get("heavy", {}).items()},
                          {int(r): {int(k): float(n) for k, n in t.items()} for r, t in doc.get("records", {}).items()})

    def size(self) -> int:
        return sum(len(t) for t in self.heavy.values())


def decide(counts: Mapping[tuple[int, int], float], workers: int, *, min_records: int = MIN_RECORDS,
           version: int = 0, total_work: float | None = None) -> SplitTable:
    """The heavy groups of ``counts`` (``(rule, group) -> records``; module docstring).

    ``total_work``: ``W`` when ``counts`` hold only the largest groups (the sum of squares of all
    groups, which the workers report); default: the sum over ``counts``.

    Example::

        >>> t = decide({(0, 7): 100, (0, 8): 10, (1, 9): 12}, workers=4)
        >>> dict(t.heavy[0])
        {7: 3}
    """
    w = total_work if total_work is not None else float(sum(n * n for n in counts.values()))
    fair = w / max(workers, 1)
    heavy: dict[int, dict[int, int]] = {}
    records: dict[int, dict[int, float]] = {}
    if workers < 2 or fair <= 0:
        return SplitTable(version, heavy)
    for (rule, group), n in sorted(counts.items()):
        if n >= min_records and 4 * n * n > fair:
            g = max(2, min(2 * workers, math.ceil(math.sqrt(2.0) * n / math.sqrt(fair))))
            heavy.setdefault(int(rule), {})[int(group)] = int(g)
            records.setdefault(int(rule), {})[int(group)] = float(n)
    return SplitTable(version, heavy, records)


def row_of(ids: np.ndarray, g: np.ndarray) -> np.ndarray:
    """The row (or column) ``h(id) mod g`` of each record (``g > 0``)."""
    return mix(hash_values("other", np.asarray(ids)), 0x51) % np.asarray(g, np.int64)


@dataclass(frozen=True)
class Cells:
    """Entries of split groups: entry ``k`` of the input goes to cell ``cell[k]`` with role
    ``role[k]`` (ROW 0 / COL 1; two-sided: the side), ``src[k]`` the input entry; ``diagonal[k]``:
    a self-link's diagonal cell, whose records pair among themselves as an ordinary group does."""

    src: np.ndarray
    cell: np.ndarray
    role: np.ndarray
    diagonal: np.ndarray


def cells(row: np.ndarray, g: np.ndarray, side: np.ndarray, self_join: bool) -> Cells:
    """The cells of entries whose record is in row/column ``row`` of a grid of side ``g`` (module
    docstring): two-sided, cell ``i * g + j``; self-link, the triangle's cells numbered row by row."""
    n = len(row)
    idx = np.arange(n, dtype=np.int64)
    src = np.repeat(idx, g)
    j = run_positions(g)
    r = np.repeat(row, g)
    gg = np.repeat(g, g)
    if self_join:
        lo, hi = np.minimum(r, j), np.maximum(r, j)
        cell = lo * (2 * gg - lo + 1) // 2 + (hi - lo)  # the triangle's cells numbered 0 .. g(g+1)/2 - 1
        return Cells(src, cell, (r > j).astype(np.int64), r == j)
    s = np.repeat(np.asarray(side, np.int64), g)
    cell = np.where(s == 0, r * gg + j, j * gg + r)
    return Cells(src, cell, s, np.zeros(len(src), bool))


@dataclass(frozen=True)
class Binding:
    """Which decision version each window is placed under: version ``versions[k]`` for the windows
    from ``starts[k]`` on (``starts`` ascending; windows before the first start: version 0).

    A runtime only ever appends an interval that starts after every window that has received a
    record, so a window's version never changes once it has records (module docstring). Two
    decisions can arrive before any record reaches the last interval's start (a slow batch): the
    newer one then starts at the same window, and replaces the version of that interval, which
    no record has used.

    Example::

        >>> b = Binding().extend(10, 1).extend(12, 2)
        >>> b.version_of(np.array([3, 10, 11, 12, 40])).tolist()
        [0, 1, 1, 2, 2]
        >>> b.extend(12, 3).as_dict()
        {'starts': [10, 12], 'versions': [1, 3]}
    """

    starts: tuple[int, ...] = ()
    versions: tuple[int, ...] = ()

    def extend(self, start: int, version: int) -> "Binding":
        """Windows from ``start`` on take ``version`` (``start`` after every window with records)."""
        if self.starts and start < self.starts[-1]:
            raise ValueError(f"a binding interval must start at or after {self.starts[-1]}, got {start}")
        if self.starts and start == self.starts[-1]:
            return Binding(self.starts, self.versions[:-1] + (int(version),))
        return Binding(self.starts + (int(start),), self.versions + (int(version),))

    def version_of(self, windows: np.ndarray) -> np.ndarray:
        w = np.asarray(windows, np.int64)
        if not self.starts:
            return np.zeros(len(w), np.int64)
        k = np.searchsorted(np.asarray(self.starts, np.int64), w, side="right") - 1
        return np.where(k >= 0, np.asarray(self.versions, np.int64)[np.maximum(k, 0)], 0)

    @property
    def newest(self) -> int:
        return self.versions[-1] if self.versions else 0

    def as_dict(self) -> dict:
        return {"starts": list(self.starts), "versions": list(self.versions)}

    @staticmethod
    def from_dict(doc: Mapping) -> "Binding":
        return Binding(tuple(int(s) for s in doc.get("starts", ())), tuple(int(v) for v in doc.get("versions", ())))
