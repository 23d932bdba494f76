"""Sliding window ``W``: the valid sets, a FIFO queue in arrival order (section 3).

Sets arrive with non-decreasing timestamps, so arrival order is also expiry order: a set
``r_j`` is valid while ``t_J < t_j + w`` (``W = {r_j | t_J - w < t_j <= t_J}``) and the oldest
set always expires first. Sets are addressed by their arrival number (``seq``); the end times
are kept in a parallel list so that "the first set that ends after ``t``" is one C-level bisect
(used to crop inverted lists, section 5.4).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterator

from driftjoin.swoop.records import SetRecord

_COMPACT_MIN = 1024


class Window:
    """FIFO of :class:`SetRecord` with O(1) access by arrival number and amortised O(1) expiry."""

    def __init__(self) -> None:
        self._records: list[SetRecord] = []
        self._ends: list[float] = []
        self._head = 0  # index of the oldest valid record in the lists
        self._base = 0  # arrival number of self._records[0]

    def __len__(self) -> int:
        return len(self._records) - self._head

    def __iter__(self) -> Iterator[SetRecord]:
        return iter(self._records[self._head :])

    def append(self, record: SetRecord) -> None:
        """Add the newest set (its arrival number must be the next one)."""
        self._records.append(record)
        self._ends.append(record.end)

    def get(self, seq: int) -> SetRecord:
        """The valid set with arrival number ``seq``."""
        return self._records[seq - self._base]

    def oldest_end(self) -> float | None:
        """End time of the oldest valid set, ``None`` for an empty window."""
        return self._ends[self._head] if self._head < len(self._ends) else None

    def expire(self, t: float) -> list[SetRecord]:
        """Remove and return the sets with end time ``<= t`` (oldest first)."""
        stop = bisect_right(self._ends, t, self._head)
        expired = self._records[self._head : stop]
        self._head = stop
        if self._head >= _COMPACT_MIN and 2 * self._head >= len(self._records):
            del self._records[: self._head]
            del self._ends[: self._head]
            self._base += self._head
            self._head = 0
        return expired

    def first_seq_ending_after(self, t: float) -> int:
        """Arrival number of the oldest valid set with end time ``> t`` (next number if none)."""
        return self._base + bisect_right(self._ends, t, self._head)
