"""The values exchanged between a dispatcher (driver) and its tasks (workers).

A join of R(A, B) and S(B, C) on B sees a stream of :class:`StreamTuple`. For every micro-batch a
dispatcher returns a :class:`Reconfiguration` (state moves between tasks, to apply first) and a
router that turns each tuple into routed copies ``(task, role)``; a :class:`BatchPlan` holds both,
materialised. Everything here is plain data so that a Spark layer can ship it to executors.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, IntFlag
from typing import NamedTuple, Protocol

from driftjoin.hypercube.hashing import tuple_hash

Key = int | str | bytes
"""A value of the join attribute B."""

Pair = tuple[int, int]
"""One join result: ``(tid of the R tuple, tid of the S tuple)``."""


class Side(IntEnum):
    """Which relation a tuple belongs to: R(A, B) or S(B, C)."""

    R = 0
    S = 1

    @property
    def other(self) -> Side:
        return Side.S if self is Side.R else Side.R


class Role(IntFlag):
    """What a task does with a routed copy: keep it for later probes, probe with it, or both.

    SHC and the parallel hash join send STORE_PROBE copies; Join-Biclique stores a tuple in one
    unit of its own relation and probes the units of the other relation with PROBE-only copies.
    """

    STORE = 1
    PROBE = 2
    STORE_PROBE = 3


class StreamTuple(NamedTuple):
    """One input tuple. ``tid`` must be unique within its side; ``ts`` is its event time."""

    side: Side
    key: Key
    tid: int
    ts: float = 0.0
    payload: object = None


class Routed(NamedTuple):
    """A copy of a tuple sent to a task."""

    task: int
    tup: StreamTuple
    role: Role


class Router(Protocol):
    """A frozen routing function: valid for one micro-batch, picklable, cheap to call."""

    def route(self, tup: StreamTuple) -> tuple[tuple[int, Role], ...]: ...


@dataclass(frozen=True, slots=True)
class Residue:
    """The tuples of one side whose grid hash is ``residue`` modulo ``modulus`` (a power of two).

    A grid row x of a ``p_R x p_S`` grid holds exactly the R tuples of ``Residue(p_R, x)``.
    """

    modulus: int
    residue: int

    def contains(self, side: Side, tid: int) -> bool:
        return tuple_hash(side, tid) & (self.modulus - 1) == self.residue


@dataclass(frozen=True, slots=True)
class Transfer:
    """Copy the stored ``side`` tuples of ``key`` at ``src`` that fall in ``select`` (None: all) to ``dst``."""

    src: int
    dst: int
    key: Key
    side: Side
    select: Residue | None


@dataclass(frozen=True, slots=True)
class Drop:
    """At ``task``, keep only the ``side`` tuples of ``key`` in ``keep``; ``keep=None`` drops them all."""

    task: int
    key: Key
    side: Side
    keep: Residue | None


@dataclass(frozen=True)
class StateMoves:
    """State migration with snapshot semantics, in three phases.

    1. every :class:`Transfer` reads its source as it was before any move of this batch;
    2. the copies are installed at their destinations;
    3. the :class:`Drop` s are applied (they never remove an installed copy).

    A move of the paper ("send all tuples to (x', y') and get released") is a transfer plus a drop.
    The phases map onto an export pass and an install pass of a stateful engine.
    """

    transfers: tuple[Transfer, ...] = ()
    drops: tuple[Drop, ...] = ()

    def __add__(self, other: StateMoves) -> StateMoves:
        return StateMoves(self.transfers + other.transfers, self.drops + other.drops)


@dataclass(frozen=True)
class Reconfiguration:
    """What tasks apply before the routed copies of a batch, in this order.

    ``evict_before``: window joins drop stored tuples with ``ts < evict_before`` (None: keep all).
    ``moves``: state migration. ``created`` / ``released``: task ids that start / stop existing
    (a released task is empty once the moves are applied).
    """

    evict_before: float | None = None
    moves: StateMoves = StateMoves()
    created: tuple[int, ...] = ()
    released: tuple[int, ...] = ()


@dataclass(frozen=True)
class BatchPlan:
    """A micro-batch fully planned: apply ``reconfiguration``, then every task processes its routes.

    Order inside a batch: with STORE_PROBE copies only (SHC, PHJ) the two tuples of a pair meet at
    exactly one task, and whichever of them that task processes second reports the pair, so a task
    may process its copies in any order. Join-Biclique splits a tuple into a STORE copy and PROBE
    copies at different units; its tasks must follow the list order (the batch order), or a pair
    of the same batch could be reported at both units or at neither.
    """

    reconfiguration: Reconfiguration
    routes: list[Routed]


class LateTupleError(ValueError):
    """A tuple arrived with ``ts`` below the watermark, after its possible partners were evicted."""


@dataclass(frozen=True)
class BatchSummary:
    """What a dispatcher needs to know about a batch before routing it.

    ``counts[(side, key, pane)]`` is the number of tuples of ``side`` with join value ``key`` whose
    timestamp falls in sliding-window pane ``pane`` (always 0 for full-stream joins). On Spark the
    workers count their share of a micro-batch and the driver merges the counts
    (:meth:`merge`).
    """

    counts: dict[tuple[Side, Key, int], int] = field(default_factory=dict)
    min_ts: float | None = None
    max_ts: float | None = None
    #: ``(side, pane) -> tuples`` when ``counts`` are Misra-Gries counters rather than exact counts
    #: (merged from the workers' :func:`~driftjoin.hypercube.heavy.reduce_counts`); None: exact
    totals: dict[tuple[Side, int], int] | None = None

    @staticmethod
    def of(batch: Iterable[StreamTuple], pane_width: float | None) -> BatchSummary:
        counts: dict[tuple[Side, Key, int], int] = {}
        lo = hi = None
        for t in batch:
            pane = 0 if pane_width is None else int(t.ts // pane_width)
            k = (t.side, t.key, pane)
            counts[k] = counts.get(k, 0) + 1
            if lo is None or t.ts < lo:
                lo = t.ts
            if hi is None or t.ts > hi:
                hi = t.ts
        return BatchSummary(counts, lo, hi)

    @staticmethod
    def merge(parts: Iterable[BatchSummary]) -> BatchSummary:
        """One summary of a batch from the summaries of its parts (e.g. one per worker).

        Counts add up; reduced parts (with ``totals``) make a reduced summary whose totals add up.
        """
        counts: dict[tuple[Side, Key, int], int] = {}
        totals: dict[tuple[Side, int], int] = {}
        reduced = False
        lo = hi = None
        for part in parts:
            for k, m in part.counts.items():
                counts[k] = counts.get(k, 0) + m
            if part.totals is not None:
                reduced = True
                for k, m in part.totals.items():
                    totals[k] = totals.get(k, 0) + m
            else:
                for (side, _, pane), m in part.counts.items():
                    totals[(side, pane)] = totals.get((side, pane), 0) + m
            if part.min_ts is not None and (lo is None or part.min_ts < lo):
                lo = part.min_ts
            if part.max_ts is not None and (hi is None or part.max_ts > hi):
                hi = part.max_ts
        return BatchSummary(counts, lo, hi, totals if reduced else None)


def route_all(router: Router, batch: Sequence[StreamTuple]) -> list[Routed]:
    """Every routed copy of ``batch`` in batch order (the order tasks must process them in)."""
    return [Routed(task, t, role) for t in batch for task, role in router.route(t)]
