"""The state of one worker of a metric join: per window, *entries* grouped by key, in sorted runs.

Every strategy stores records under keys and pairs records that share a key: S3J under their
workset, PassJoin under a segment, prefix filtering under a prefix token. An entry is
``(group, class, record)`` plus strategy columns; ``class`` (2 bits) says which entries may pair
(e.g. S3J: never two outer members; PassJoin: a segment with a substring; a two-stream join: only
different sides), given as a set of unordered class pairs.

When a batch's entries arrive (one :class:`Run` per window), :meth:`RunStore.candidates` yields
every allowed pair of a new entry with a stored entry of the same group, and every allowed
unordered pair of two new entries, each exactly once: each stored run is searched once per
ordered class pair, and two new entries pair once (classes ``a < b``: from the ``a`` side;
equal classes: ``i < j`` in the run's order). Then :meth:`RunStore.add` stores the run.

Runs (as in :mod:`driftjoin.s3j.compute`): a window holds a few runs sorted by composite key
``group << 2 | class``; the last two merge while the older is less than twice the newer, so a
window of n entries has O(log n) runs and no batch re-sorts the whole window. State is a plain
dict of arrays per window (:meth:`RunStore.state`), so a runtime can persist it window by window,
or batch by batch: with ``keep_added`` every run a batch adds is named by a random 62-bit *part*
id and listed in :attr:`RunStore.added` before it merges, and a merged run carries the parts of
the runs it holds (:attr:`Run.parts`). A runtime writes each added run once, under its part id,
and never rewrites what merging does in memory: a batch writes O(batch), not the O(batch log n)
that rewriting merged runs would, and a process whose copy is a few batches old reads only the
parts written since (a run whose parts are all still stored is that run, parts never change).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from driftjoin.metric.records import MetricRecords
from driftjoin.runs import run_positions

#: Bits of a sort key that hold a run's class; the group (window) is in the bits above, so groups
#: stay below 2^61.
CLASS_BITS = 2
#: Candidate pairs yielded at once (bounds memory).
CHUNK = 1 << 21


@dataclass
class Run:
    """Entries of one window sorted by composite key; ``rec`` indexes ``records``."""

    records: MetricRecords
    key: np.ndarray
    rec: np.ndarray
    cols: dict[str, np.ndarray] = field(default_factory=dict)
    #: the stored parts that together hold exactly this run's entries (module docstring; empty
    #: when the store does not keep what is added)
    parts: tuple[int, ...] = ()
    #: per-record values a join derives from ``records`` and keeps while the run lives (never
    #: persisted; a merge keeps what both runs hold: each value has ``concat(parts)``)
    memo: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)

    def __len__(self) -> int:
        return len(self.key)

    @staticmethod
    def build(records: MetricRecords, group: np.ndarray, cls: np.ndarray, rec: np.ndarray,
              cols: dict[str, np.ndarray] | None = None) -> "Run":
        """Entries ``(group, cls, records[rec], cols)``; records that no entry uses are dropped."""
        group = np.asarray(group, np.int64)
        key = (group << CLASS_BITS) | np.asarray(cls, np.int64)
        order = np.argsort(key, kind="stable")
        used, rec = np.unique(np.asarray(rec, np.int64)[order], return_inverse=True)
        return Run(records.take(used), key[order], rec.astype(np.int64),
                   {k: np.asarray(v)[order] for k, v in (cols or {}).items()})

    @property
    def group(self) -> np.ndarray:
        return self.key >> CLASS_BITS

    @property
    def cls(self) -> np.ndarray:
        return self.key & ((1 << CLASS_BITS) - 1)

    @staticmethod
    def merged(a: "Run", b: "Run") -> "Run":
        key = np.concatenate([a.key, b.key])
        order = np.argsort(key, kind="stable")
        rec = np.concatenate([a.rec, b.rec + len(a.records)])
        return Run(MetricRecords.concat([a.records, b.records]), key[order], rec[order],
                   {k: np.concatenate([a.cols[k], b.cols[k]])[order] for k in a.cols}, a.parts + b.parts,
                   memo={k: type(v).concat([v, b.memo[k]]) for k, v in a.memo.items() if k in b.memo})

    def arrays(self) -> tuple:
        return (self.records.arrays(), self.key, self.rec, self.cols)

    @staticmethod
    def from_arrays(arrays: tuple, parts: tuple[int, ...] = ()) -> "Run":
        rec_arrays, key, rec, cols = arrays
        return Run(MetricRecords(*rec_arrays), key, rec, cols, parts)


def unordered(pairs: Iterable[tuple[int, int]]) -> frozenset[tuple[int, int]]:
    """Class pairs as a set of sorted tuples."""
    return frozenset((min(a, b), max(a, b)) for a, b in pairs)


class RunStore:
    """Runs of entries per window (module docstring). ``keep_added``: name every added run by a
    part id and list it in :attr:`added` for a runtime that persists batch by batch."""

    def __init__(self, allowed: Iterable[tuple[int, int]], keep_added: bool = False) -> None:
        self.allowed = unordered(allowed)
        self.windows: dict[int, list[Run]] = {}
        self.keep_added = keep_added
        #: ``(window, run)`` of every run added since the runtime last cleared it, as added
        self.added: list[tuple[int, Run]] = []

    def __len__(self) -> int:
        return sum(len(r) for runs in self.windows.values() for r in runs)

    def runs(self) -> Iterator[tuple[int, Run]]:
        for w, runs in self.windows.items():
            for r in runs:
                yield w, r

    def candidates(self, window: int, new: Run) -> Iterator[tuple[Run, np.ndarray, np.ndarray]]:
        """``(other, ia, ib)``: entries ``new[ia]`` pair with ``other[ib]``, where ``other`` is a
        stored run of ``window`` or ``new`` itself; every allowed pair exactly once."""
        ordered = self.allowed | {(b, a) for a, b in self.allowed}
        for run in self.windows.get(window, ()):
            for ca, cb in sorted(ordered):
                for ia, ib in _cross(new, ca, run, cb):
                    yield run, ia, ib
        for ca, cb in sorted(self.allowed):
            pairs = _within(new, ca) if ca == cb else _cross(new, ca, new, cb)
            for ia, ib in pairs:
                yield new, ia, ib

    def add(self, window: int, run: Run) -> None:
        """Store a batch's run; merge the last two while the older is less than twice the newer."""
        if len(run) == 0:
            return
        if self.keep_added:
            run.parts = (secrets.randbits(62),)  # never reused, not even by a replay of the batch
            self.added.append((window, run))
        self.put(window, run)

    def put(self, window: int, run: Run) -> None:
        """Store a run the runtime read back (its parts stored already), merging as :meth:`add`."""
        runs = self.windows.setdefault(window, [])
        runs.append(run)
        while len(runs) >= 2 and len(runs[-2]) < 2 * len(runs[-1]):
            newer, older = runs.pop(), runs.pop()
            runs.append(Run.merged(older, newer))

    def expire_before(self, window: int) -> None:
        for w in [w for w in self.windows if w < window]:
            del self.windows[w]

    def state(self) -> dict[int, list[tuple]]:
        """Per window, the runs as plain arrays."""
        return {w: [r.arrays() for r in runs] for w, runs in self.windows.items()}

    def restore(self, state: dict[int, list[tuple]]) -> None:
        self.windows = {w: [Run.from_arrays(a) for a in runs] for w, runs in state.items()}


def _cross(a: Run, ca: int, b: Run, cb: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Entries of class ``ca`` in ``a`` with the entries of class ``cb`` and the same group in ``b``."""
    if len(a) == 0 or len(b) == 0:
        return
    idx = np.nonzero(a.cls == ca)[0]
    if len(idx) == 0:
        return
    target = ((a.key[idx] >> CLASS_BITS) << CLASS_BITS) | cb
    lo = np.searchsorted(b.key, target, side="left")
    hi = np.searchsorted(b.key, target, side="right")
    yield from _expand(idx, lo, hi)


def _within(a: Run, c: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Unordered pairs of entries of class ``c`` with equal keys in ``a`` (``i < j``)."""
    idx = np.nonzero(a.cls == c)[0]
    if len(idx) < 2:
        return
    hi = np.searchsorted(a.key, a.key[idx], side="right")
    yield from _expand(idx, idx + 1, hi)


def _expand(idx: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """``(idx[k], j)`` for every ``j`` in ``[lo[k], hi[k])``, in chunks of about :data:`CHUNK` pairs."""
    count = np.maximum(hi - lo, 0)
    keep = count > 0
    idx, lo, count = idx[keep], lo[keep], count[keep]
    if len(idx) == 0:
        return
    ends = np.cumsum(count)
    start = 0
    while start < len(idx):
        base = ends[start - 1] if start else 0
        stop = max(start + 1, int(np.searchsorted(ends, base + CHUNK, side="right")))
        c = count[start:stop]
        yield np.repeat(idx[start:stop], c), np.repeat(lo[start:stop], c) + run_positions(c)
        start = stop
