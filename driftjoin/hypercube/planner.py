"""The control plane's SHC decisions (section 3.2) from the workers' per-batch counts.

The paper's dispatcher sees every tuple, updates its heavy-hitter sketch, and re-grids before
routing. In the parallel pipeline the routers only apply tables, so the decisions move to the
driver: after a micro-batch commits, each worker has written the counts of the tuples whose
primary copy it received (exact, or reduced to Misra-Gries counters with the tracker's ``k``:
:func:`~driftjoin.hypercube.heavy.reduce_counts`), and :class:`RoutingPlanner` folds the
batch's merged counts into the same :class:`~driftjoin.hypercube.shc.StreamingHyperCube` the
in-process dispatcher runs (heavy hitters, promotion and demotion, doubling and halving,
task-to-worker assignment), with fresh tasks for every new grid. When the grids change it makes
a new :class:`~driftjoin.hypercube.table.RoutingTable` version. Routers use it from a later
batch (:mod:`driftjoin.hypercube.table`): decisions lag the data, exactness does not depend on
them (:mod:`driftjoin.hypercube.migration`).

A planner may be *seeded* before the first batch (:meth:`RoutingPlanner.seed`) with the counts
of a sample of the stream (earlier data): the keys heavy in it get their grids in the table the
workers start from (version 0), so a key heavy from the start is spread from the first batch
instead of from the third (the paper's dispatcher, which sees every tuple before routing it,
has no such lag to make up for).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from driftjoin.hypercube.model import BatchSummary, Key, Side
from driftjoin.hypercube.shc import StreamingHyperCube
from driftjoin.hypercube.table import RoutingTable


class RoutingPlanner:
    """Folds committed batches' counts in batch order into SHC's decisions (module docstring).

    Settings as :class:`~driftjoin.hypercube.shc.StreamingHyperCube`. ``through``: the last
    batch folded; ``table``: the newest table (version 0: every value light).
    """

    def __init__(self, p: int, *, window: float | None = None, lateness: float = 0.0, epsilon: float | None = None,
                 panes: int = 4, min_heavy: int | None = None, cap: int | None = None) -> None:
        self.shc = StreamingHyperCube(p, window=window, lateness=lateness, epsilon=epsilon, panes=panes,
                                      min_heavy=min_heavy, cap=cap, fresh_grids=True)
        self.table = RoutingTable(p)
        self.through = -1

    @property
    def k(self) -> int:
        """Counters per side and pane the workers may reduce their counts to."""
        return self.shc.tracker.k

    @property
    def pane_width(self) -> float | None:
        return self.shc.pane_width

    def seed(self, summary: BatchSummary) -> RoutingTable:
        """Take in the counts of a sample of the stream before any batch; returns the table the
        workers start from (the sample's heavy keys on their grids, version 0).

        Parameters
        ----------
        summary : the sample's counts (as one batch's: :class:`~driftjoin.hypercube.model.BatchSummary`).

        Example::

            >>> planner = RoutingPlanner(4)
            >>> table = planner.seed(BatchSummary({(Side.R, 7, 0): 90, (Side.S, 7, 0): 90}, None, None,
            ...                                    {(Side.R, 0): 100, (Side.S, 0): 100}))
            >>> (7 in table.grids, table.version)
            (True, 0)
        """
        if self.through != -1 or self.table.grids:
            raise ValueError("a planner is seeded once, before its first batch")
        self.shc.begin_batch(summary)
        grids = dict(self.shc.grids)
        self.table = RoutingTable(self.shc.p, grids, {t: self.shc.worker_of(t) for g in grids.values() for t in g.cells},
                                  self.table.version)
        return self.table

    def fold(self, batch: int, summary: BatchSummary) -> bool:
        """Take in one committed batch's counts; returns whether a new table version was made."""
        if batch <= self.through:
            raise ValueError(f"batch {batch} was folded already (through {self.through})")
        self.shc.begin_batch(summary)
        self.through = batch
        grids = dict(self.shc.grids)
        if grids == dict(self.table.grids):
            return False
        workers = {t: self.shc.worker_of(t) for g in grids.values() for t in g.cells}
        self.table = RoutingTable(self.shc.p, grids, workers, self.table.version + 1)
        return True


def batch_counts(side: np.ndarray, keys: Sequence[Key], ts: np.ndarray,
                 pane_width: float | None) -> dict[tuple[Side, Key, int], int]:
    """Exact counts ``(side, key, pane) -> n`` of some tuples (the :class:`BatchSummary` counts)."""
    out: dict[tuple[Side, Key, int], int] = {}
    panes = (np.zeros(len(ts), dtype=np.int64) if pane_width is None
             else np.floor(np.asarray(ts, dtype=np.float64) / pane_width).astype(np.int64))
    for s, k, q in zip(np.asarray(side).tolist(), keys, panes.tolist()):
        item = (Side(s), k, q)
        out[item] = out.get(item, 0) + 1
    return out
