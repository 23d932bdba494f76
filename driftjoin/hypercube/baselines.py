"""The two baselines of section 4, on the same dispatcher interface as SHC.

Neither reconfigures: task i runs on worker i, and ``begin_batch`` only advances event time.
"""

from __future__ import annotations

from driftjoin.hypercube.dispatcher import Dispatcher
from driftjoin.hypercube.model import BatchSummary, Reconfiguration
from driftjoin.hypercube.routers import BicliqueRouter, HashRouter


class ParallelHashJoin(Dispatcher):
    """PHJ (section 2.1): ``p`` tasks, a tuple with join value b goes to task ``h^L(b)``."""

    name = "phj"

    def __init__(self, p: int, *, window: float | None = None, lateness: float = 0.0) -> None:
        super().__init__(p, window, lateness)
        self._router = HashRouter(tuple(range(p)))

    def begin_batch(self, summary: BatchSummary) -> Reconfiguration:
        return Reconfiguration(evict_before=self.clock.advance(summary))

    @property
    def router(self) -> HashRouter:
        return self._router

    def worker_of(self, task: int) -> int:
        return task


class JoinBiclique(Dispatcher):
    """Join-Biclique (section 2.3): ``p // 2`` units store R, the other units store S.

    ``groups`` is the number of subgroups each relation's units are organised into (the paper's
    ``y``); unit ``u`` of a relation belongs to subgroup ``u mod groups``. See
    :class:`~driftjoin.hypercube.routers.BicliqueRouter` for the routing.
    """

    name = "biclique"

    def __init__(self, p: int, *, groups: int = 1, window: float | None = None, lateness: float = 0.0) -> None:
        super().__init__(p, window, lateness)
        m = p // 2
        if not 1 <= groups <= m:
            raise ValueError(f"Join-Biclique needs p >= 2 and 1 <= groups <= p // 2 = {m}, got groups={groups}")
        self.groups = groups
        r_units, s_units = tuple(range(m)), tuple(range(m, p))
        self._router = BicliqueRouter(
            tuple(r_units[g::groups] for g in range(groups)),
            tuple(s_units[g::groups] for g in range(groups)),
        )

    def begin_batch(self, summary: BatchSummary) -> Reconfiguration:
        return Reconfiguration(evict_before=self.clock.advance(summary))

    @property
    def router(self) -> BicliqueRouter:
        return self._router

    def worker_of(self, task: int) -> int:
        return task
