"""What a run of inserts changed in a SWOOP join, and how to apply it to the join as it was.

A streaming operator keeps the join as a snapshot plus a log (:mod:`driftjoin.spark.runtime.state`) and
rebuilds it from them when its cached copy is stale. Logging the *input* of each micro-batch
and inserting it again rebuilds the join exactly (SWOOP is deterministic), but it re-does the
batch's whole join: candidate generation, verification and the stock merge (measured in issue
13: a stale rebuild cost as much as the batch itself). A :class:`JoinDelta` logs the *result*
instead, split by what it costs to reproduce:

* the framework's part, per accepted operation in order (:mod:`~driftjoin.swoop.framework`):
  the set's id, side, time and role, and for a set the join indexed (``OWN``) its token numbers.
  Applying it moves the index time, expires the sets that end by it from the window and the
  inverted lists, and appends the indexed sets to the window and the tails of their lists,
  exactly as the insert did, but without probing: no candidate is generated, no pair verified.
  Expiries need not be logged, they follow from the times (a set leaves when the index time
  reaches its end). ``PROBE`` and ``TICK`` sets (workers of a partitioned join) only become
  visitors, kept for their ids and ends.
* the tokens numbered by the run, in order (:class:`~driftjoin.swoop.records.TokenOrder`), so a
  rebuilt join numbers the tokens of later sets alike;
* the stock after the run, whole (its pairs in stock order: at most ``|S|`` pairs, ``O(k log(|W|
  / k))`` expected, Lemma 2), which replaces the stock of the join the delta is applied to; the
  top-k is its first ``k`` pairs;
* the running counters (pre-candidates, candidates) and, in the compiled engine, the stamp of
  the last candidate generation, so a rebuilt join counts on from the same totals.

A delta applies to the join state it was recorded from (the state after the previous delta, or
a snapshot) and leaves the join equal to the one that ran the inserts: the same window, inverted
lists, stock, top-k, visitors, token numbers, index time and counters, hence the same outputs
for any following insert (the test compares all of them). Physical layouts may differ (where a
list sits in the compiled index's pool, when the window's storage is compacted), never contents.

The compiled engine applies a delta's expiries and appends in one kernel call
(``_kernels.apply_sets``); the Python engine set by set. Workers of the ``"token"`` design
(:class:`~driftjoin.swoop.partitioned.TokenPartWorker`) do not record deltas: each of their sets
is indexed under a per-set share of its tokens that a delta does not log (the Spark operator
runs the ``"owner"`` design).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np



@dataclass
class JoinDelta:
    """The changes of a run of operations on a :class:`~driftjoin.swoop.Swoop` (module docstring).

    The operations are columns (a few arrays pickle much faster than a tuple per set)."""

    #: tokens numbered by the run, in the order of their numbers
    tokens: list[str | int]
    #: per accepted operation, in order: set id, side, time, role (``OWN``, ``PROBE``, ``TICK``
    #: or ``ADVANCE``, :mod:`~driftjoin.swoop.framework`) and size (0 for ``TICK``, ``ADVANCE``)
    ids: list[Any]
    sides: list[str | None]
    times: list[float]
    roles: list[int]
    sizes: list[int]
    #: the token numbers of the ``OWN`` sets, concatenated in order (int32 when they fit)
    numbers: np.ndarray
    #: the stock after the run, in stock order: ``float64[2, n]`` (similarity, end time) and
    #: ``int64[2, n]`` (``i``, ``j``)
    stock_f: np.ndarray
    stock_i: np.ndarray
    #: the join's counters after the run (pre-candidates, candidates; the compiled engine's stamp)
    counters: tuple[int, ...]


