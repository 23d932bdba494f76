"""What every metric strategy offers a runtime: a router and per-worker joins.

A runtime (the in-process :mod:`driftjoin.metric.engine`, or a Spark operator) drives a strategy
per micro-batch:

1. expand the batch into window copies (:func:`driftjoin.metric.records.expand`) and drop late
   records (:meth:`driftjoin.windows.Windowing.late`);
2. :meth:`Strategy.route` the copies: rows ``(row, worker, role)``, stateless given the strategy
   (which is a plain picklable value fixed before the start), optionally with a numeric
   *payload* per row that the router computed for the worker (pivot filtering's distances to
   its pivots) and the distance calls the router made;
3. per worker, :meth:`WorkerJoin.add_routed` its rows (in the same order, with their payload): it
   returns each new qualifying pair exactly once and keeps what later pairs need;
4. after the batch, :meth:`WorkerJoin.expire_before` the first open window of the clock.

:meth:`WorkerJoin.state` is a plain dict (numpy arrays, lists, ints) with the per-window part
under ``"windows"``, so a runtime can persist it in chunks; :meth:`WorkerJoin.restore` loads it.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from driftjoin.metric.records import MetricPairs, MetricRecords
from driftjoin.metric.store import Run, RunStore
from driftjoin.windows import Windowing

#: Version of the state dicts of the metric workers.
STATE_FORMAT = 1


@dataclass(frozen=True)
class Routing:
    """Copy ``row[k]`` of the batch goes to worker ``worker[k]`` with role ``role[k]``; ``payload[k]``
    (a float row, when the strategy has one) travels with it; ``calls[k]`` counts the distance calls
    the router made for it (a strategy that makes none leaves ``calls`` None)."""

    row: np.ndarray
    worker: np.ndarray
    role: np.ndarray
    payload: np.ndarray | None = None
    calls: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.row)


@dataclass
class WorkerStats:
    """What a worker did: candidate pairs its store enumerated (each one filtered), distances (or exact
    overlaps) it computed, pairs it emitted, and calls of a user metric it made (every evaluation of
    the user's function, :attr:`driftjoin.metric.spaces.Space.calls`; built-in metrics count none)."""

    candidates: int = 0
    comparisons: int = 0
    pairs: int = 0
    calls: int = 0


class WorkerJoin(ABC):
    """The stateful join of one worker."""

    def __init__(self, self_join: bool, windows: Windowing) -> None:
        self.self_join = self_join
        self.windows = windows
        self.stats = WorkerStats()

    @abstractmethod
    def add(self, batch: MetricRecords, role: np.ndarray) -> MetricPairs:
        """Join the copies routed here (in routing order); returns the pairs they complete."""

    def add_routed(self, batch: MetricRecords, role: np.ndarray, payload: np.ndarray | None) -> MetricPairs:
        """:meth:`add` with the rows' :attr:`Routing.payload` (what a runtime calls); a strategy
        whose router sends a payload overrides it."""
        return self.add(batch, role)

    @abstractmethod
    def expire_before(self, window: int) -> None:
        """Forget the windows older than ``window`` (they are closed)."""

    @abstractmethod
    def state(self) -> dict:
        """The state as a plain dict (``"windows"``: the per-window part)."""

    @abstractmethod
    def restore(self, state: dict) -> None:
        """Load :meth:`state` output."""


class RunJoin(WorkerJoin):
    """A worker whose state is a :class:`~driftjoin.metric.store.RunStore`: a batch becomes one run
    of entries per window, each joined with the stored runs of its window whose classes may pair
    (:meth:`verify` keeps the qualifying pairs) and then stored, so each pair of entries is
    looked at once, when its later entry arrives."""

    def __init__(self, self_join: bool, windows: Windowing, classes: list[tuple[int, int]]) -> None:
        super().__init__(self_join, windows)
        self.store = RunStore(side_classes(self_join, classes))

    def join_runs(self, batch: MetricRecords, window: np.ndarray, build: Callable[[np.ndarray], Run]) -> MetricPairs:
        """Join the entries of ``batch`` whose windows are ``window``: ``build(sel)`` makes the run
        of the entries ``sel`` (one window's)."""
        out: list[MetricPairs] = []
        for w in np.unique(window).tolist():
            run = build(window == w)
            for other, ia, ib in self.store.candidates(w, run):
                out.append(self.verify(run, ia, other, ib))
            self.store.add(w, run)
        pairs = MetricPairs.concat(out, batch.id.dtype)
        self.stats.pairs += len(pairs)
        return pairs

    @abstractmethod
    def verify(self, a: Run, ia: np.ndarray, b: Run, ib: np.ndarray) -> MetricPairs:
        """The qualifying pairs among the candidate entries ``a[ia]``, ``b[ib]`` (``a`` the new run)."""

    def expire_before(self, window: int) -> None:
        self.store.expire_before(window)

    def state(self) -> dict:
        return {"format": STATE_FORMAT, "windows": self.store.state()}

    def restore(self, state: dict) -> None:
        check_format(state)
        self.store.restore(state["windows"])


class Strategy(ABC):
    """A distributed exact strategy: a router and a worker factory (module docstring)."""

    name: str = ""
    n_workers: int = 1

    @abstractmethod
    def route(self, batch: MetricRecords) -> Routing:
        """The worker (and role) of every copy of the batch; a copy may go to several workers."""

    @abstractmethod
    def worker(self, index: int) -> WorkerJoin:
        """A new, empty join for worker ``index``."""

    def describe(self) -> str:
        """What the strategy chose from its sample, for the logs and the recorded choice ("": nothing)."""
        return ""


def check_format(state: dict) -> None:
    if state.get("format") != STATE_FORMAT:
        raise RuntimeError(f"this state has metric join format {state.get('format')}, this driftjoin reads "
                           f"format {STATE_FORMAT}: restart the query with a new checkpoint location")


def candidate_filter(worker: WorkerJoin, a: MetricRecords, ra: np.ndarray, b: MetricRecords, rb: np.ndarray) -> np.ndarray:
    """The pairs of copies ``a[ra]``, ``b[rb]`` (same window) that may join: the window accepts them
    (never two ghosts, within the interval), different sides in a two-stream join, never a record
    with itself (equal ids) in a self-join."""
    ok = worker.windows.accept(a.time[ra], a.ghost[ra], b.time[rb], b.ghost[rb])
    if worker.self_join:
        ok &= a.id[ra] != b.id[rb]
    else:
        ok &= a.side[ra] != b.side[rb]
    return ok


def side_classes(self_join: bool, pairs: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Class pairs of a strategy's role bit (bit 0) combined with the side (bit 1): a self-join
    keeps ``pairs``; a two-stream join pairs only the left side (0) with the right side (1)."""
    if self_join:
        return pairs
    return [(a, 2 | b) for a, b in pairs] + [(2 | a, b) for a, b in pairs if a != b]
