"""The driver side of a distributed equi-join: the interface every algorithm implements.

Per micro-batch a Spark driver (or :class:`~driftjoin.hypercube.simulator.Simulator`) calls

1. ``reconf = dispatcher.begin_batch(summary)`` with the batch's :class:`BatchSummary`: the
   dispatcher checks the watermark, updates its statistics and decides its new configuration;
2. applies ``reconf`` to the task states (eviction, state moves, released tasks);
3. routes every tuple of the batch with ``dispatcher.router`` (a frozen, picklable function that
   executors can call) and lets each task process its copies in batch order.

:meth:`Dispatcher.plan` does 1 and 3 in one call and materialises the routed copies.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

from driftjoin.hypercube.model import (
    BatchPlan,
    BatchSummary,
    LateTupleError,
    Reconfiguration,
    Router,
    StreamTuple,
    route_all,
)


class WatermarkClock:
    """Event time for window joins, advanced per batch like a Spark watermark.

    The watermark is the largest timestamp of all earlier batches minus ``lateness``; a batch may
    hold tuples in any order but none below the watermark. Stored tuples older than
    ``watermark - window`` can never join with a tuple of this or a later batch, so tasks evict
    them before processing the batch.
    """

    def __init__(self, window: float | None, lateness: float = 0.0) -> None:
        if window is not None and window < 0:
            raise ValueError("window must be >= 0")
        if lateness < 0:
            raise ValueError("lateness must be >= 0")
        self.window = window
        self.lateness = lateness
        self.max_ts: float | None = None

    def advance(self, summary: BatchSummary) -> float | None:
        """Check ``summary`` against the watermark; return this batch's eviction threshold."""
        if self.window is None:
            return None
        evict_before = None
        if self.max_ts is not None:
            watermark = self.max_ts - self.lateness
            if summary.min_ts is not None and summary.min_ts < watermark:
                raise LateTupleError(f"tuple at ts={summary.min_ts} is below the watermark {watermark}")
            evict_before = watermark - self.window
        if summary.max_ts is not None and (self.max_ts is None or summary.max_ts > self.max_ts):
            self.max_ts = summary.max_ts
        return evict_before


@dataclass
class DispatcherStats:
    """Reconfigurations made so far (all zero for the static baselines)."""

    promotions: int = 0
    demotions: int = 0
    doublings: int = 0
    halvings: int = 0
    tasks_created: int = 0
    tasks_released: int = 0


class Dispatcher(ABC):
    """Routing and reconfiguration of one join over ``p`` workers, separate from task state."""

    name: str

    def __init__(self, p: int, window: float | None = None, lateness: float = 0.0) -> None:
        if p < 1:
            raise ValueError("p must be >= 1")
        self.p = p
        self.window = window
        self.clock = WatermarkClock(window, lateness)
        self.stats = DispatcherStats()

    @property
    def pane_width(self) -> float | None:
        """Width of the panes ``BatchSummary`` counts by (None: one pane)."""
        return None

    @abstractmethod
    def begin_batch(self, summary: BatchSummary) -> Reconfiguration:
        """Take in a batch's statistics and return what tasks must apply before its tuples."""

    @property
    @abstractmethod
    def router(self) -> Router:
        """The routing function for the batch announced by the last :meth:`begin_batch`."""

    @abstractmethod
    def worker_of(self, task: int) -> int:
        """The worker a live task runs on."""

    def plan(self, batch: Sequence[StreamTuple]) -> BatchPlan:
        """Summarise ``batch``, reconfigure, and route all of it."""
        reconf = self.begin_batch(BatchSummary.of(batch, self.pane_width))
        return BatchPlan(reconf, route_all(self.router, batch))
