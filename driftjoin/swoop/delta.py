"""What a run of inserts changed in a SWOOP join, and how to apply it to the join as it was.

A streaming operator keeps the join as a snapshot plus a log (:mod:`driftjoin.spark.state`) and
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
from itertools import islice
from typing import TYPE_CHECKING, Any

import numpy as np

from driftjoin.swoop.framework import ADVANCE, OWN
from driftjoin.swoop.records import SetRecord

if TYPE_CHECKING:
    from driftjoin.swoop.join import Swoop


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


def start(join: Swoop) -> None:
    """Record the operations from now on (:func:`take` ends the recording)."""
    join._log = []
    join._logged_tokens = len(join.tokens)


def take(join: Swoop) -> JoinDelta:
    """The changes since :func:`start`, and stop recording."""
    log = join._log
    if log is None:
        raise RuntimeError("no delta is being recorded: call start_delta() first")
    ids = join.tokens._ids
    fresh = len(ids) - join._logged_tokens
    tokens = list(islice(reversed(ids), fresh))[::-1] if fresh else []
    own = [np.fromiter(numbers, np.int64) if isinstance(numbers, frozenset) else numbers
           for _, _, _, role, numbers in log if role == OWN]
    sizes = [len(numbers) if role == OWN else numbers for _, _, _, role, numbers in log]
    stock_f, stock_i = join.stock.export()
    columns = [list(c) for c in zip(*log)] if log else [[]] * 4
    numbers = np.concatenate(own) if own else np.zeros(0, np.int64)
    if len(numbers) and numbers.max() < 2**31:  # always in the compiled engine: half the bytes
        numbers = numbers.astype(np.int32)
    delta = JoinDelta(tokens, *columns[:4], sizes, numbers, stock_f, stock_i, join._counters())
    join._log = None
    del join._logged_tokens
    return delta


def apply(join: Swoop, delta: JoinDelta) -> None:
    """Bring ``join`` (in the state the delta was recorded from) to the state after it."""
    if join._log is not None:
        raise RuntimeError("cannot apply a delta while one is being recorded")
    ids = join.tokens._ids
    for token in delta.tokens:
        ids[token] = len(ids)
    W, records, live, visitors = join._W, join._records, join._live_ids, join._visitors
    window = join.window
    compiled = join._core is not None
    numbers, at = delta.numbers, 0
    # the compiled engine's index and window work, done in one call at the end: per indexed set,
    # the sets that expire before it, its end time and side (and the expiries after the last one)
    expire: list[int] = []
    ends: list[float] = []
    sides: list[int] = []
    pending = 0
    for set_id, side, ts, role, size in zip(delta.ids, delta.sides, delta.times, delta.roles, delta.sizes):
        oldest = W.oldest_end()
        if oldest is not None and oldest <= ts:
            expired = W.expire(ts)
            if compiled:
                pending += len(expired)
            else:
                join._unindex(expired)
            for record in expired:
                del records[record.seq]
                del live[(record.side, record.set_id)]
        join._t_J = ts
        if visitors and visitors[0].end <= ts:
            join._drop_visitors(ts)
        if role == ADVANCE:
            continue
        seq = join._next_seq
        join._next_seq += 1
        if role == OWN:
            own = numbers[at:at + size] if compiled else frozenset(numbers[at:at + size].tolist())
            at += size
            record = SetRecord(seq, set_id, side, ts, ts + window, own, size)
            if compiled:
                expire.append(pending)
                ends.append(record.end)
                sides.append(1 if side == "S" else 0)
                pending = 0
            else:
                join._index_only(record)
            W.append(record)
        else:  # a visitor (PROBE, TICK): its id and end only
            record = SetRecord(seq, set_id, side, ts, ts + window, (), size)
            visitors.append(record)
        records[seq] = record
        live[(side, set_id)] = seq
    if compiled and (expire or pending):
        offsets = np.zeros(len(expire) + 2, np.int64)
        np.cumsum([size for size, role in zip(delta.sizes, delta.roles) if role == OWN], out=offsets[1:len(expire) + 1])
        offsets[-1] = offsets[-2]  # a last step of expiries only
        join._core.apply_sets(np.array([*expire, pending], np.int64), numbers, offsets,
                              np.array([*ends, 0.0], np.float64), np.array([*sides, 0], np.int64))
    join._load_stock(delta.stock_f, delta.stock_i)
    join._set_counters(delta.counters)
