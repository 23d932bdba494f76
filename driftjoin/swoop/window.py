"""Sliding window ``W``: the valid sets, a FIFO queue in arrival order (section 3).

Sets arrive with non-decreasing timestamps, so arrival order is also expiry order: a set
``r_j`` is valid while ``t_J < t_j + w`` (``W = {r_j | t_J - w < t_j <= t_J}``) and the oldest
set always expires first. Sets are addressed by their *window number*, their position in the
order of appends: the arrival number in a single join, where every set joins the window; a
worker of a partitioned join (:mod:`~driftjoin.swoop.partitioned`) appends only the sets it
indexes, so there the window numbers are its own, and they keep the arrival order.

Besides the records, the window keeps columns for bulk work: the end times as a Python list
(one C-level bisect finds "the first set that ends after ``t``", used to crop inverted lists,
section 5.4) and, as numpy arrays, the sizes, the end times and all tokens in one flat buffer,
so that the overlaps of a new set with hundreds of pre-candidates are computed in a few
vectorised operations. The numpy columns are filled lazily, in one batch for all sets appended
since the last bulk query. Storage is compacted once half of it belongs to expired sets, so it
stays within a constant factor of the window size.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterator
from itertools import chain

import numpy as np

from driftjoin.swoop.records import SetRecord

_COMPACT_MIN = 1024
_INITIAL = 1024


class Window:
    """FIFO of :class:`SetRecord` with O(1) access by arrival number and amortised O(1) expiry.

    ``columns=False`` leaves out the numpy columns (Base and the compiled SWOOP engine, which
    keeps its own, do not use them); :meth:`columns` and :meth:`overlaps` then must not be used.
    """

    _with_columns = True

    def __init__(self, *, columns: bool = True) -> None:
        self._with_columns = columns
        self._records: list[SetRecord] = []
        self._ends: list[float] = []
        self._head = 0  # index of the oldest valid record in the lists
        self._base = 0  # arrival number of self._records[0]
        self._synced = 0  # records[:_synced] are in the numpy columns
        self._sizes = np.zeros(_INITIAL, np.int64)
        self._end_col = np.zeros(_INITIAL, np.float64)
        self._tok_start = np.zeros(_INITIAL, np.int64)
        self._tok_buf = np.zeros(8 * _INITIAL, np.int64)
        self._tok_tail = 0
        self.token_bound = 0  # 1 + the largest token number in the numpy columns

    def __len__(self) -> int:
        return len(self._records) - self._head

    def __iter__(self) -> Iterator[SetRecord]:
        return iter(self._records[self._head :])

    def append(self, record: SetRecord) -> None:
        """Add the newest set; it gets the window number :meth:`next_number`."""
        self._records.append(record)
        self._ends.append(record.end)

    def next_number(self) -> int:
        """The window number of the next set to be appended."""
        return self._base + len(self._records)

    def get(self, seq: int) -> SetRecord:
        """The set with window number ``seq``: a valid one, or one the last :meth:`expire` removed."""
        return self._records[seq - self._base]

    def oldest_end(self) -> float | None:
        """End time of the oldest valid set, ``None`` for an empty window."""
        return self._ends[self._head] if self._head < len(self._ends) else None

    def expire(self, t: float, *, inclusive: bool = True) -> list[SetRecord]:
        """Remove and return the sets with end time ``<= t`` (``< t`` if not ``inclusive``).

        They stay addressable by :meth:`get` until the next call (the change stream names the
        pairs that end with them): storage is compacted before the head moves, not after.
        """
        if self._head >= _COMPACT_MIN and 2 * self._head >= len(self._records):
            self._compact()
        stop = (bisect_right if inclusive else bisect_left)(self._ends, t, self._head)
        expired = self._records[self._head : stop]
        self._head = stop
        return expired

    def first_seq_ending_after(self, t: float) -> int:
        """Window number of the oldest valid set with end time ``> t`` (next number if none)."""
        return self._base + bisect_right(self._ends, t, self._head)

    def columns(self, seqs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Sizes and end times (float64) of the valid sets ``seqs``."""
        self._sync()
        pos = seqs - self._base
        return self._sizes[pos], self._end_col[pos]

    def overlaps(self, seqs: np.ndarray, member: np.ndarray) -> np.ndarray:
        """For each valid set of ``seqs``, how many of its tokens ``t`` have ``member[t]``.

        ``member`` must cover :attr:`token_bound` (call :meth:`columns` first).
        """
        pos = seqs - self._base
        lens = self._sizes[pos]
        offsets = np.cumsum(lens) - lens
        flat = np.repeat(self._tok_start[pos] - offsets, lens) + np.arange(int(lens.sum()))
        return np.add.reduceat(member[self._tok_buf[flat]], offsets, dtype=np.int64)

    def _sync(self) -> None:
        """Copy the sets appended since the last call into the numpy columns."""
        start, stop = self._synced, len(self._records)
        if start == stop:
            return
        fresh = self._records[start:stop]
        if stop > len(self._sizes):
            capacity = max(2 * len(self._sizes), stop)
            self._sizes = _grown(self._sizes, capacity)
            self._end_col = _grown(self._end_col, capacity)
            self._tok_start = _grown(self._tok_start, capacity)
        sizes = np.fromiter((r.size for r in fresh), np.int64, len(fresh))
        tokens = np.fromiter(chain.from_iterable(r.tokens for r in fresh), np.int64, int(sizes.sum()))
        tail = self._tok_tail
        if tail + len(tokens) > len(self._tok_buf):
            self._tok_buf = _grown(self._tok_buf, 2 * (tail + len(tokens)))
        self._tok_buf[tail : tail + len(tokens)] = tokens
        self._tok_start[start:stop] = tail + np.cumsum(sizes) - sizes
        self._tok_tail = tail + len(tokens)
        self._sizes[start:stop] = sizes
        self._end_col[start:stop] = self._ends[start:stop]
        self.token_bound = max(self.token_bound, int(tokens.max()) + 1)
        self._synced = stop

    def _compact(self) -> None:
        head, n = self._head, len(self._records) - self._head
        if not self._with_columns:
            del self._records[:head]
            del self._ends[:head]
            self._base += head
            self._head = 0
            return
        self._sync()
        del self._records[:head]
        del self._ends[:head]
        self._base += head
        self._head = 0
        self._synced = n
        first = int(self._tok_start[head]) if n else self._tok_tail
        self._tok_buf[: self._tok_tail - first] = self._tok_buf[first : self._tok_tail].copy()
        self._tok_tail -= first
        self._tok_start[:n] = self._tok_start[head : head + n] - first
        self._sizes[:n] = self._sizes[head : head + n].copy()
        self._end_col[:n] = self._end_col[head : head + n].copy()


def _grown(array: np.ndarray, capacity: int) -> np.ndarray:
    out = np.zeros(capacity, array.dtype)
    out[: len(array)] = array
    return out
