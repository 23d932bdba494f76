"""Adaptive workset balancing (S3J paper, section 8 and Algorithm 1), as pure functions.

The similarity computation of S3J runs per *workset*; worksets are self-contained, so any
workset can be moved to any worker without touching the others (section 8.1). This module
decides *which* worksets to move. It knows nothing about Spark or about the worksets' records:
its input is a snapshot of statistics (:class:`BalancerStats`: per workset its load, its state
size in bytes and its current worker; the number of workers) and its output is a
:class:`Rebalance` (new assignment, list of moves, degree of imbalance before and after).
Carrying the moves out (shipping state, re-routing records) is the engine's job.

Contents:

- :func:`degree_of_imbalance`: ``DI = sum_n |L_n - L_avg|`` (Definition 11).
- :func:`s3j_rebalance`: Algorithm 1, with the readings of its ambiguous lines documented on
  the function.
- :func:`greedy_rebalance`: longest-processing-time-first (LPT) greedy, a migration-blind
  second opinion.
- :func:`should_rebalance`: when to run a balancing round (relative DI or latency spread).
- :func:`plan_splits`: which irremovable worksets to split, and into how many parts (the
  paper's future work, section 9.6).

Workers are numbered ``0 .. num_workers - 1``. A worker's load is the sum of the loads of the
worksets assigned to it, in whatever unit the caller uses (number of comparisons, or the
section 7.7 cost model); sizes are in bytes; the migration factor converts bytes to load units.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "WorksetId",
    "WorksetStats",
    "BalancerStats",
    "Move",
    "Rebalance",
    "SplitPlan",
    "REL_TOL",
    "degree_of_imbalance",
    "find_irremovables",
    "removal_benefit",
    "addition_benefit",
    "s3j_rebalance",
    "greedy_rebalance",
    "should_rebalance",
    "plan_splits",
]

#: Any hashable identifies a workset, e.g. ``(space_partition, local_id)`` or a global int.
WorksetId = Hashable

#: Relative tolerance (times the average worker load) used for every comparison against the
#: average load and for "benefit > 0", so that floating-point rounding can neither trigger a
#: move that does not reduce the imbalance nor make a worker flip between over- and
#: underloaded. A workset lighter than ``REL_TOL * L_avg`` is never worth moving anyway.
REL_TOL = 1e-9


# --------------------------------------------------------------------------------------------
# Statistics and results
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WorksetStats:
    """Monitoring statistics of one workset over the last monitoring window."""

    workset: WorksetId
    load: float
    size_bytes: float
    worker: int

    def __post_init__(self) -> None:
        if not (math.isfinite(self.load) and self.load >= 0):
            raise ValueError(f"workset {self.workset!r}: load must be finite and >= 0, got {self.load!r}")
        if not (math.isfinite(self.size_bytes) and self.size_bytes >= 0):
            raise ValueError(
                f"workset {self.workset!r}: size_bytes must be finite and >= 0, got {self.size_bytes!r}"
            )
        if isinstance(self.worker, bool) or not isinstance(self.worker, int):
            raise TypeError(f"workset {self.workset!r}: worker must be an int, got {self.worker!r}")


@dataclass(frozen=True, slots=True)
class BalancerStats:
    """A snapshot of the statistics one balancing round works on.

    ``worksets`` keeps the caller's order; it is used to break ties deterministically.
    Workset ids must be unique and every worker must be in ``range(num_workers)``.
    """

    worksets: tuple[WorksetStats, ...]
    num_workers: int

    def __post_init__(self) -> None:
        object.__setattr__(self, "worksets", tuple(self.worksets))
        if isinstance(self.num_workers, bool) or not isinstance(self.num_workers, int) or self.num_workers < 1:
            raise ValueError(f"num_workers must be a positive int, got {self.num_workers!r}")
        seen: set[WorksetId] = set()
        for w in self.worksets:
            if not isinstance(w, WorksetStats):
                raise TypeError(f"expected WorksetStats, got {type(w).__name__}")
            if w.workset in seen:
                raise ValueError(f"duplicate workset id {w.workset!r}")
            seen.add(w.workset)
            if not 0 <= w.worker < self.num_workers:
                raise ValueError(
                    f"workset {w.workset!r} is on worker {w.worker}, outside range({self.num_workers})"
                )

    @classmethod
    def of(
        cls,
        num_workers: int,
        worksets: Iterable[tuple[WorksetId, float, float, int]],
    ) -> BalancerStats:
        """Build from ``(workset, load, size_bytes, worker)`` rows."""
        return cls(tuple(WorksetStats(ws, load, size, worker) for ws, load, size, worker in worksets), num_workers)

    def worker_loads(self) -> tuple[float, ...]:
        """``L_n`` for every worker: the sum of its worksets' loads."""
        parts: list[list[float]] = [[] for _ in range(self.num_workers)]
        for w in self.worksets:
            parts[w.worker].append(w.load)
        return tuple(math.fsum(p) for p in parts)

    @property
    def total_load(self) -> float:
        return math.fsum(w.load for w in self.worksets)

    @property
    def average_load(self) -> float:
        """``L_avg``: the target load of every worker."""
        return self.total_load / self.num_workers

    def assignment(self) -> dict[WorksetId, int]:
        return {w.workset: w.worker for w in self.worksets}

    def with_assignment(self, assignment: Mapping[WorksetId, int]) -> BalancerStats:
        """The same statistics with the worksets on the workers given by ``assignment``
        (worksets missing from it stay where they are)."""
        return BalancerStats(
            tuple(
                WorksetStats(w.workset, w.load, w.size_bytes, assignment.get(w.workset, w.worker))
                for w in self.worksets
            ),
            self.num_workers,
        )


@dataclass(frozen=True, slots=True)
class Move:
    """Migrate ``workset`` (its state: ``size_bytes``) from worker ``source`` to ``target``."""

    workset: WorksetId
    source: int
    target: int
    load: float
    size_bytes: float


@dataclass(frozen=True, slots=True)
class Rebalance:
    """The outcome of a balancing round.

    ``assignment`` maps every workset to its worker after the round; ``moves`` are the
    migrations needed to get there from the input assignment, in the order they were decided
    (each workset appears at most once). ``irremovables`` and ``ignored`` are diagnostics of
    :func:`s3j_rebalance` (empty for :func:`greedy_rebalance`).
    """

    assignment: Mapping[WorksetId, int]
    moves: tuple[Move, ...]
    di_before: float
    di_after: float
    loads_before: tuple[float, ...]
    loads_after: tuple[float, ...]
    irremovables: frozenset[WorksetId] = field(default_factory=frozenset)
    ignored: tuple[WorksetId, ...] = ()

    @property
    def migrated_bytes(self) -> float:
        return math.fsum(m.size_bytes for m in self.moves)

    @property
    def migrated_load(self) -> float:
        return math.fsum(m.load for m in self.moves)

    def apply(self, stats: BalancerStats) -> BalancerStats:
        """``stats`` with the worksets moved to their new workers."""
        return stats.with_assignment(self.assignment)


class SplitPlan(NamedTuple):
    """Split ``workset`` (load ``load``) into ``parts`` pieces of roughly ``load / parts``."""

    workset: WorksetId
    parts: int
    load: float


# --------------------------------------------------------------------------------------------
# Definition 11 and the two benefit functions
# --------------------------------------------------------------------------------------------


def degree_of_imbalance(loads: Sequence[float]) -> float:
    """Degree of imbalance of Definition 11: ``DI = sum_n |L_n - L_avg|`` with
    ``L_avg = sum_n L_n / N``. 0 for a perfect balance (and for no workers)."""
    n = len(loads)
    if n == 0:
        return 0.0
    avg = math.fsum(loads) / n
    return math.fsum(abs(x - avg) for x in loads)


def removal_benefit(worker_load: float, workset_load: float, size_bytes: float, avg: float, migration_factor: float) -> float:
    """``calculate_removal_benefit``: how much the worker's term of DI shrinks when the
    workset leaves it, ``|L_o - L_avg| - |L_o - l_w - L_avg|``, minus the migration cost
    ``size_bytes * migration_factor``. ``L_avg`` is the fixed target (a move does not change
    the total load)."""
    return abs(worker_load - avg) - abs(worker_load - workset_load - avg) - size_bytes * migration_factor


def addition_benefit(worker_load: float, workset_load: float, size_bytes: float, avg: float, migration_factor: float) -> float:
    """``calculate_addition_benefit``: how much the receiving worker's term of DI shrinks when
    the workset joins it, ``|L_u - L_avg| - |L_u + l_w - L_avg|``, minus the migration cost.

    The removal and the addition term of one move add up to the exact change of DI caused by
    the move (only the two workers' terms change)."""
    return abs(worker_load - avg) - abs(worker_load + workset_load - avg) - size_bytes * migration_factor


def find_irremovables(stats: BalancerStats) -> frozenset[WorksetId]:
    """``find_irremovables(O, L_avg)`` (line 5): for every overloaded worker whose heaviest
    workset is heavier than the average worker load, that heaviest workset (only that one;
    ties go to the first in ``stats.worksets``). Moving it cannot help: wherever it goes, the
    receiving worker ends above the average."""
    avg = stats.average_load
    loads = stats.worker_loads()
    tol = REL_TOL * avg
    heaviest: dict[int, WorksetStats] = {}
    for w in stats.worksets:
        cur = heaviest.get(w.worker)
        if cur is None or w.load > cur.load:
            heaviest[w.worker] = w
    return frozenset(
        w.workset for n, w in heaviest.items() if loads[n] > avg + tol and w.load > avg + tol
    )


# --------------------------------------------------------------------------------------------
# Algorithm 1
# --------------------------------------------------------------------------------------------


def s3j_rebalance(stats: BalancerStats, migration_factor: float) -> Rebalance:
    """Workset balancing, Algorithm 1 of the S3J paper.

    Overloaded workers have ``L_n > L_avg``, underloaded ones ``L_n < L_avg`` (up to
    ``REL_TOL * L_avg``; a worker at the average is neither). Irremovables are computed once
    (line 5, :func:`find_irremovables`). Then, repeatedly: every non-irremovable workset on an
    overloaded worker with a positive :func:`removal_benefit` is a candidate; the candidate
    with the highest benefit that is not on the ignore list is ``best``; among the underloaded
    workers that can accept it, the one with the highest :func:`addition_benefit` receives it,
    provided that benefit is positive; if none can, ``best`` goes to the ignore list. The loop
    stops when no candidate is left (line 32). ``migration_factor`` (load units per byte,
    ``>= 0``) turns a workset's size into the migration cost subtracted from both benefits.

    Readings of the ambiguous parts of the pseudo-code (chosen to match the prose of 8.3):

    - Line 20 uses ``w`` and line 25 ``u``, loop variables of earlier loops; we read them as
      ``best`` and ``optimal``.
    - Line 25, ``compute_load(optimal, u) < L_avg``: the load the candidate receiver would
      have *after* accepting ``best`` must not exceed the average ("an underloaded worker that
      can accept this workset"): a receiver never becomes overloaded. We use ``<=`` instead of
      ``<``: with a strict inequality an exact fit (10/0 with worksets 5+5 -> 5/5) would be
      refused, although it removes all imbalance.
    - Lines 21-26 put every underloaded worker in ``under_benefits`` without a sign test, but
      the prose says the workset is ignored "if there is no worker that has a positive
      benefit": a receiver must both fit and have a positive addition benefit. Every fitting
      receiver has the same addition benefit ``l_w - size * factor``; among them the least
      loaded wins (then the lowest worker number).
    - The migration cost is subtracted in both benefit functions ("the benefit function"
      of the prose). A move therefore happens only if the source's and the receiver's part of
      the DI reduction both exceed the cost; a huge factor means no moves at all.
    - ``over_benefits`` and ``under_benefits`` are created once (lines 3-4) but filled inside
      the loop; re-filling a non-empty queue would leave stale benefits (and already moved
      worksets) in it, so both are rebuilt from the current loads on every repeat. The sets
      ``O`` and ``U`` are likewise re-derived from the current loads on every repeat, so a
      donor that dropped below the average may receive worksets. Irremovables (line 5) and the
      ignore list (line 1) are not reset: an ignored workset is never reconsidered.
    - Ties in ``over_benefits`` go to the heavier workset, then to the first in
      ``stats.worksets``.

    Termination and monotonicity: each repeat either moves a workset or appends a new one to
    the ignore list, and a moved workset lands on a worker that is (and stays) not overloaded,
    so it is never a candidate again. Hence at most ``2 * |worksets| + 1`` repeats. Each move
    has a positive removal and a positive addition part, so DI strictly decreases with every
    move and never increases overall.

    The repeated rebuild of ``over_benefits`` is implemented lazily (removal benefits only
    shrink as donors lose load, so stale heap entries are upper bounds that are re-evaluated
    when they reach the top); the choices are the same as a literal rebuild.
    """
    if not (math.isfinite(migration_factor) and migration_factor >= 0):
        raise ValueError(f"migration_factor must be finite and >= 0, got {migration_factor!r}")

    n_workers = stats.num_workers
    loads = list(stats.worker_loads())
    loads_before = tuple(loads)
    di_before = degree_of_imbalance(loads_before)
    avg = stats.average_load
    tol = REL_TOL * avg
    assignment = stats.assignment()
    irremovables = find_irremovables(stats)

    moves: list[Move] = []
    ignored: list[WorksetId] = []

    def overloaded(n: int) -> bool:
        return loads[n] > avg + tol

    def underloaded(n: int) -> bool:
        return loads[n] < avg - tol

    # over_benefits, lazily maintained: entries (-benefit, -load, seq, version of the donor
    # when the benefit was computed). Only worksets that start on an overloaded worker can
    # ever be candidates: no worker becomes overloaded during the run.
    version = [0] * n_workers
    over: list[tuple[float, float, int, int]] = []
    by_seq = stats.worksets
    for seq, w in enumerate(by_seq):
        if w.workset in irremovables or not overloaded(w.worker):
            continue
        b = removal_benefit(loads[w.worker], w.load, w.size_bytes, avg, migration_factor)
        if b > tol:
            over.append((-b, -w.load, seq, 0))
    heapq.heapify(over)

    # Receivers: min-heap on (load, worker), lazily validated against the current load.
    receivers = [(loads[n], n) for n in range(n_workers) if underloaded(n)]
    heapq.heapify(receivers)

    def least_loaded_receiver() -> int | None:
        while receivers:
            load, n = receivers[0]
            if load != loads[n] or not underloaded(n):
                heapq.heappop(receivers)
                continue
            return n
        return None

    moved: set[int] = set()
    ignore_set: set[int] = set()
    while True:
        # Lines 7-17: the best candidate not in the ignore list.
        best: WorksetStats | None = None
        best_seq = -1
        while over:
            neg_b, neg_load, seq, ver = heapq.heappop(over)
            if seq in moved or seq in ignore_set:
                continue
            w = by_seq[seq]
            donor = assignment[w.workset]
            if ver != version[donor]:
                if overloaded(donor):
                    b = removal_benefit(loads[donor], w.load, w.size_bytes, avg, migration_factor)
                    if b > tol:
                        heapq.heappush(over, (-b, neg_load, seq, version[donor]))
                continue
            best, best_seq = w, seq
            break
        if best is None:
            break  # line 32: no candidate left

        # Lines 18-26: the receiver with the highest positive addition benefit that can
        # accept ``best``. Fitting receivers all tie at l_w - cost; a non-fitting one has a
        # lower benefit, and if the least loaded one does not fit, none does.
        optimal: int | None = None
        u = least_loaded_receiver()
        if u is not None and loads[u] + best.load <= avg + tol:
            if addition_benefit(loads[u], best.load, best.size_bytes, avg, migration_factor) > tol:
                optimal = u

        if optimal is None:  # line 30
            ignore_set.add(best_seq)
            ignored.append(best.workset)
            continue

        # Line 28: assign_workset(best, optimal).
        donor = assignment[best.workset]
        assignment[best.workset] = optimal
        loads[donor] -= best.load
        loads[optimal] += best.load
        version[donor] += 1
        version[optimal] += 1
        moved.add(best_seq)
        moves.append(Move(best.workset, donor, optimal, best.load, best.size_bytes))
        if underloaded(optimal):
            heapq.heappush(receivers, (loads[optimal], optimal))
        if underloaded(donor):
            heapq.heappush(receivers, (loads[donor], donor))

    loads_after = _loads_of(stats, assignment)
    return Rebalance(
        assignment=assignment,
        moves=tuple(moves),
        di_before=di_before,
        di_after=degree_of_imbalance(loads_after),
        loads_before=loads_before,
        loads_after=loads_after,
        irremovables=irremovables,
        ignored=tuple(ignored),
    )


def _loads_of(stats: BalancerStats, assignment: Mapping[WorksetId, int]) -> tuple[float, ...]:
    parts: list[list[float]] = [[] for _ in range(stats.num_workers)]
    for w in stats.worksets:
        parts[assignment[w.workset]].append(w.load)
    return tuple(math.fsum(p) for p in parts)


# --------------------------------------------------------------------------------------------
# LPT greedy (second opinion)
# --------------------------------------------------------------------------------------------


def greedy_rebalance(stats: BalancerStats) -> Rebalance:
    """Longest-processing-time-first greedy, ignoring migration cost.

    Worksets are taken by decreasing load (ties: the order of ``stats.worksets``) and each goes
    to the currently least-loaded worker. When several workers tie for the least load and the
    workset's current worker is one of them, it stays there (otherwise the lowest worker number
    wins); this only avoids pointless moves and gives the same loads as textbook LPT, whose
    makespan is at most ``4/3 - 1/(3N)`` times the optimum. Every workset can move, including
    the irremovable ones.
    """
    loads_before = stats.worker_loads()
    order = sorted(range(len(stats.worksets)), key=lambda i: (-stats.worksets[i].load, i))
    totals = [0.0] * stats.num_workers
    # Min-heap on (total, worker); an entry is stale once its worker's total has grown.
    heap = [(0.0, n) for n in range(stats.num_workers)]
    assignment: dict[WorksetId, int] = {}
    for i in order:
        w = stats.worksets[i]
        while heap[0][0] != totals[heap[0][1]]:
            heapq.heappop(heap)
        least, first = heap[0]
        target = w.worker if totals[w.worker] == least else first
        assignment[w.workset] = target
        totals[target] += w.load
        heapq.heappush(heap, (totals[target], target))
    # Keep the caller's workset order in the mapping.
    assignment = {w.workset: assignment[w.workset] for w in stats.worksets}
    moves = tuple(
        Move(w.workset, w.worker, assignment[w.workset], w.load, w.size_bytes)
        for w in (stats.worksets[i] for i in order)
        if assignment[w.workset] != w.worker
    )
    loads_after = _loads_of(stats, assignment)
    return Rebalance(
        assignment=assignment,
        moves=moves,
        di_before=degree_of_imbalance(loads_before),
        di_after=degree_of_imbalance(loads_after),
        loads_before=loads_before,
        loads_after=loads_after,
    )


# --------------------------------------------------------------------------------------------
# Trigger and split planner
# --------------------------------------------------------------------------------------------


def should_rebalance(
    worker_loads: Sequence[float],
    worker_latencies: Sequence[float] | None,
    di_threshold: float,
    latency_spread: float,
) -> bool:
    """Whether to run a balancing round, from the statistics of the last monitoring window.

    True when either rule fires:

    1. **Load rule**: ``DI / total_load > di_threshold``, with DI of Definition 11. The ratio
       is 0 for a perfect balance and at most ``2 (N - 1) / N`` (all load on one worker), so
       it does not depend on the load unit or on the input rate. No load: never fires.
    2. **Latency rule**: some worker's latency differs from the mean latency of the *other*
       workers by more than ``latency_spread`` times that mean (``0.5`` = 50%), in either
       direction: a slow worker is overloaded, a much faster one is idle (Figure 5's worker
       that "roughly receives any load"). If the others' mean is 0, any positive latency
       fires. Needs at least two latencies; pass ``None`` or ``[]`` to use the load rule only.

    Pass ``math.inf`` as a threshold to disable its rule.
    """
    if di_threshold < 0 or math.isnan(di_threshold):
        raise ValueError(f"di_threshold must be >= 0, got {di_threshold!r}")
    if latency_spread < 0 or math.isnan(latency_spread):
        raise ValueError(f"latency_spread must be >= 0, got {latency_spread!r}")
    total = math.fsum(worker_loads)
    if total > 0 and degree_of_imbalance(worker_loads) / total > di_threshold:
        return True
    lats = list(worker_latencies or ())
    if any(not (math.isfinite(x) and x >= 0) for x in lats):
        raise ValueError(f"latencies must be finite and >= 0, got {lats!r}")
    if lats and worker_loads and len(lats) != len(worker_loads):
        raise ValueError(f"{len(lats)} latencies for {len(worker_loads)} workers")
    if len(lats) >= 2:
        lat_sum = math.fsum(lats)
        for lat in lats:
            others = (lat_sum - lat) / (len(lats) - 1)
            if abs(lat - others) > latency_spread * others:
                return True
    return False


def plan_splits(stats: BalancerStats, *, all_heavy: bool = False) -> list[SplitPlan]:
    """Worksets to split so that balancing can move their pieces (beyond the paper: its
    future work, section 9.6), heaviest first.

    By default these are the irremovable worksets (:func:`find_irremovables`), each to be
    split into ``ceil(load / L_avg)`` parts so that every part fits a worker's average load.
    With ``all_heavy=True`` every workset heavier than ``L_avg`` is included: besides the
    irremovable one, a worker can hold further heavy worksets, which Algorithm 1 may pick but
    can never place (no receiver may end above the average). Splitting the data structure
    itself is done elsewhere.
    """
    avg = stats.average_load
    if avg <= 0:
        return []
    tol = REL_TOL * avg
    if all_heavy:
        chosen = [w for w in stats.worksets if w.load > avg + tol]
    else:
        irremovables = find_irremovables(stats)
        chosen = [w for w in stats.worksets if w.workset in irremovables]
    plans = [
        SplitPlan(w.workset, max(2, math.ceil(w.load / avg - REL_TOL)), w.load) for w in chosen
    ]
    plans.sort(key=lambda p: -p.load)  # stable: ties keep the caller's order
    return plans
