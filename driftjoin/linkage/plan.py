"""Where a record's keys go: lanes, groups, classes and workers of every rule (the router's work).

Each rule ``r`` has two *lanes*: ``2r`` holds its ordinary groups, ``2r + 1`` the cells of its
heavy groups (:mod:`driftjoin.linkage.split`). An entry of a lane is ``(record, group, class,
worker)``:

- ``G = mix(r + 1, block hash, driver key)`` (:mod:`driftjoin.linkage.drivers`) is the group before
  any split; in lane ``2r`` the entry's group is ``G``, on worker ``G mod p``;
- the class is the driver's class (bit 0) plus bit 1: the side in a two-sided link, the role
  (ROW/COL) in a split cell of a self-link, 0 in an ordinary group of a self-link; a lane pairs
  the class pairs :func:`lane_allowed` lists (the driver's, across sides or roles where bit 1
  is used);
- a heavy ``G`` (grid side ``g`` in the record's :class:`~driftjoin.linkage.split.SplitTable`)
  goes to its cells instead: one entry per cell, group ``mix(G, cell + 1)``, on the worker the
  table places the cell on (:meth:`~driftjoin.linkage.split.SplitTable.cell_workers`), in lane ``2r + 1`` (the diagonal cells of a self-link, where records pair
  among themselves as in an ordinary group, in lane ``2r``).

A record takes part in rule ``r`` only if every condition of the rule can hold on it (no null
field among the rule's columns: SQL's semantics, :mod:`driftjoin.linkage.rules`), so nulls cost
nothing. Routing (:meth:`LinkCore.route`) sends each record copy once to each worker that holds
one of its entries; the worker recomputes the entries and keeps its own, so both sides agree
by construction (entries are a function of the record copy and the plan).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from driftjoin.linkage.drivers import Driver, block_hash, mix
from driftjoin.linkage.records import Fields
from driftjoin.linkage.rules import RuleSet
from driftjoin.linkage.split import SplitTable, cells, row_of
from driftjoin.metric.base import side_classes
from driftjoin.metric.records import MetricRecords
from driftjoin.windows import Windowing


@dataclass(frozen=True)
class LaneEntries:
    """Entries of one lane: record ``rec[k]`` (a row of the batch) under ``group[k]``, class
    ``cls[k]``, on worker ``worker[k]``; ``pre[k]`` is the group before any split."""

    rec: np.ndarray
    group: np.ndarray
    cls: np.ndarray
    worker: np.ndarray
    pre: np.ndarray

    def take(self, keep: np.ndarray) -> "LaneEntries":
        return LaneEntries(self.rec[keep], self.group[keep], self.cls[keep], self.worker[keep], self.pre[keep])

    @staticmethod
    def empty() -> "LaneEntries":
        z = np.zeros(0, np.int64)
        return LaneEntries(z, z, z, z, z)


def lane_allowed(driver: Driver, self_join: bool, split: bool) -> list[tuple[int, int]]:
    """The class pairs a lane pairs (module docstring)."""
    return side_classes(self_join and not split, list(driver.allowed))


@dataclass(frozen=True, eq=False)
class LinkCore:
    """A rule set, its drivers and its workers: what every router and worker computes with.

    ``tables``: the hot-key decisions by version (version 0 is the one fixed before the start;
    a runtime adds the versions its control plane publishes).

    Example::

        >>> from driftjoin.linkage.drivers import BlockDriver
        >>> from driftjoin.linkage.rules import check_rules
        >>> from driftjoin.linkage.records import Fields, link_records
        >>> rs = check_rules([{"zip": "equal"}], {"zip": "string"})
        >>> core = LinkCore(rs, (BlockDriver(None),), 4, True, Windowing.unbounded())
        >>> batch = link_records([1, 2, 3], Fields.build(rs, {"zip": ["a", "a", None]}))
        >>> e = core.entries(batch, 0)[0]
        >>> e.rec.tolist(), bool(e.group[0] == e.group[1])
        ([0, 1], True)
    """

    ruleset: RuleSet
    drivers: tuple[Driver, ...]
    n_workers: int
    self_join: bool
    windows: Windowing
    tables: dict[int, SplitTable] = field(default_factory=lambda: {0: SplitTable()})

    def table(self, version: int) -> SplitTable:
        t = self.tables.get(int(version))
        if t is None:
            raise RuntimeError(f"link: hot-key decision version {version} is not known to this worker")
        return t

    def allowed(self, lane: int) -> list[tuple[int, int]]:
        return lane_allowed(self.drivers[lane // 2], self.self_join, bool(lane % 2))

    @property
    def n_lanes(self) -> int:
        return 2 * len(self.ruleset.rules)

    def takes_part(self, batch: MetricRecords, r: int) -> np.ndarray:
        """Which records can satisfy rule ``r`` (every field of the rule usable)."""
        cols: Fields = batch.value
        ok = np.ones(len(batch), bool)
        for c in self.ruleset.rules[r].conditions:
            ok &= c.measure.usable(cols.cols[c.column])
        return ok

    def entries(self, batch: MetricRecords, r: int) -> tuple[LaneEntries, LaneEntries]:
        """The entries of rule ``r``'s two lanes for a batch of record copies."""
        rule = self.ruleset.rules[r]
        drv = self.drivers[r]
        cols: Fields = batch.value
        ok = self.takes_part(batch, r)
        rows = np.nonzero(ok)[0]
        if len(rows) == 0:
            return LaneEntries.empty(), LaneEntries.empty()
        eq = rule.equal
        block, _ = block_hash(len(rows), [c.measure.kind for c in eq], [cols.cols[c.column][rows] for c in eq],
                              [np.ones(len(rows), bool) for _ in eq])
        keys = drv.keys(None if drv.condition is None else cols.cols[drv.condition.column], rows)
        pos = np.searchsorted(rows, keys.rec)
        pre = mix(r + 1, block[pos], keys.key.astype(np.uint64))
        side = batch.side[keys.rec].astype(np.int64)
        p = self.n_workers
        versions = cols.version[keys.rec]
        g = np.zeros(len(pre), np.int64)
        for v in np.unique(versions).tolist():
            at = versions == v
            g[at] = self.table(v).grid(r, pre[at])
        plain = g == 0
        bit = np.zeros(len(pre), np.int64) if self.self_join else side
        ordinary = LaneEntries(keys.rec[plain], pre[plain], (keys.cls | (bit << 1))[plain], pre[plain] % p, pre[plain])
        heavy = np.nonzero(~plain)[0]
        if len(heavy) == 0:
            return ordinary, LaneEntries.empty()
        rec = keys.rec[heavy]
        c = cells(row_of(batch.id[rec], g[heavy]), g[heavy], side[heavy], self.self_join)
        src = heavy[c.src]
        group = mix(pre[src].astype(np.uint64), c.cell + 1)
        worker = np.empty(len(src), np.int64)
        which, inverse = np.unique(np.stack([versions[src], pre[src]], axis=1), axis=0, return_inverse=True)
        for k, (v, gid) in enumerate(which.tolist()):
            at = inverse.ravel() == k
            worker[at] = self.table(v).cell_workers(r, gid, self.self_join, p)[c.cell[at]]
        d, o = np.nonzero(c.diagonal)[0], np.nonzero(~c.diagonal)[0]
        if len(d):  # a self-link's diagonal cells: ordinary groups of their own
            ordinary = LaneEntries(np.concatenate([ordinary.rec, keys.rec[src[d]]]),
                                   np.concatenate([ordinary.group, group[d]]),
                                   np.concatenate([ordinary.cls, keys.cls[src[d]]]),
                                   np.concatenate([ordinary.worker, worker[d]]), np.concatenate([ordinary.pre, pre[src[d]]]))
        split = LaneEntries(keys.rec[src[o]], group[o], keys.cls[src[o]] | (c.role[o] << 1), worker[o], pre[src[o]])
        return ordinary, split

    def route(self, batch: MetricRecords) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(row, worker, home)``: each copy once to each worker holding one of its entries; a
        copy with no entry anywhere goes to worker ``h(id) mod p`` alone (its statistics);
        ``home`` marks one row per record: the first row of its earliest window's copy."""
        n, p = len(batch), self.n_workers
        parts = [np.zeros(0, np.int64)]
        for r in range(len(self.ruleset.rules)):
            for lane in self.entries(batch, r):
                parts.append(lane.rec * p + lane.worker)
        key = np.unique(np.concatenate(parts))
        row, worker = key // p, key % p
        seen = np.zeros(n, bool)
        seen[row] = True
        lonely = np.nonzero(~seen)[0]
        if len(lonely):
            row = np.concatenate([row, lonely])
            worker = np.concatenate([worker, row_of(batch.id[lonely], np.full(len(lonely), p))])
            order = np.lexsort((worker, row))
            row, worker = row[order], worker[order]
        home = np.ones(len(row), bool)
        home[1:] = row[1:] != row[:-1]
        home &= batch.window[row] == self.windows.first_window(batch.time[row])  # a record's earliest copy
        return row, worker, home
