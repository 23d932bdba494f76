"""Columnar record batches shared by the S3J operators.

A record is ``(id, side, vector, ingest, window)``: ``side`` is 0 for the left stream and 1
for the right one (a self-join uses side 0 only), ``ingest`` is its ingestion time in epoch
seconds (the latency metric is measured from it) and ``window`` the index of the window it is
a copy for (:mod:`driftjoin.windows`). Vectors are already *prepared* for the metric (unit
length for angular and cosine).

Two more columns travel with a record while its window needs them: ``time``, the time that
decides its windows in integer ticks, and ``ghost``, whether the copy is the ghost copy of an
interval join (:meth:`driftjoin.windows.Windowing.copies`). :func:`expand` makes a batch's
window copies from its times; pairs of an interval join are accepted on both
(:meth:`driftjoin.windows.Windowing.accept`), other windows need neither once each copy has its
window, so a worker stores them only for interval joins (:meth:`Records.without_times`).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from driftjoin.windows import INTERVAL, TUMBLING, UNBOUNDED, Windowing


@dataclass
class Records:
    """A batch of records as parallel numpy arrays (``time`` and ``ghost`` optional, together)."""

    id: np.ndarray
    side: np.ndarray
    vec: np.ndarray
    ingest: np.ndarray
    window: np.ndarray
    time: np.ndarray | None = None
    ghost: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.side)

    @property
    def dim(self) -> int:
        return self.vec.shape[1]

    @property
    def timed(self) -> bool:
        return self.time is not None

    def take(self, idx: np.ndarray) -> "Records":
        return Records(**{f.name: None if (v := getattr(self, f.name)) is None else v[idx] for f in fields(self)})

    def without_times(self) -> "Records":
        """The records without ``time`` and ``ghost`` (what a window other than an interval keeps)."""
        return Records(self.id, self.side, self.vec, self.ingest, self.window)

    def arrays(self) -> tuple:
        """The columns as a plain tuple, ``time`` and ``ghost`` only when present (what a runtime
        persists; ``Records(*arrays)`` restores it)."""
        return tuple(v for f in fields(self) if (v := getattr(self, f.name)) is not None)

    @staticmethod
    def empty(dim: int, id_dtype: np.dtype | type = np.int64, timed: bool = False) -> "Records":
        return Records(
            id=np.zeros(0, dtype=id_dtype),
            side=np.zeros(0, dtype=np.int8),
            vec=np.zeros((0, dim), dtype=np.float64),
            ingest=np.zeros(0, dtype=np.float64),
            window=np.zeros(0, dtype=np.int64),
            time=np.zeros(0, dtype=np.int64) if timed else None,
            ghost=np.zeros(0, dtype=bool) if timed else None,
        )

    @staticmethod
    def concat(parts: list["Records"]) -> "Records":
        parts = [p for p in parts if len(p)] or parts[:1]
        if len({p.timed for p in parts}) > 1:
            raise ValueError("cannot concatenate records with and without times")
        return Records(**{f.name: None if getattr(parts[0], f.name) is None
                          else np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Records)})

    def nbytes(self) -> int:
        id_bytes = self.id.nbytes if self.id.dtype != object else sum(len(str(x)) for x in self.id)
        timed = self.time.nbytes + self.ghost.nbytes if self.timed else 0
        return int(id_bytes + self.side.nbytes + self.vec.nbytes + self.ingest.nbytes + self.window.nbytes + timed)


def expand(records: Records, windows: Windowing) -> Records:
    """The window copies of ``records`` (``time`` in ticks given), grouped by record.

    A tumbling or unbounded window gives every record one copy (its window, no ghost), without
    copying the vectors; a sliding window one copy per window holding the record, an interval
    join a home copy and, near a bucket's end, a ghost copy (:meth:`Windowing.copies`).

    Example::

        >>> r = Records(np.array([7]), np.zeros(1, np.int8), np.zeros((1, 2)), np.zeros(1), np.zeros(1, np.int64),
        ...             np.array([45]), np.zeros(1, bool))
        >>> c = expand(r, Windowing.interval(within=30))
        >>> c.id.tolist(), c.window.tolist(), c.ghost.tolist()
        ([7, 7], [1, 2], [False, True])
    """
    if records.time is None:
        raise ValueError("records need their times (ticks) to be given windows")
    if windows.kind in (TUMBLING, UNBOUNDED):
        return Records(records.id, records.side, records.vec, records.ingest, windows.first_window(records.time),
                       records.time, np.zeros(len(records), bool))
    c = windows.copies(records.time)
    out = records.take(c.row)
    out.window, out.ghost = c.window, c.ghost
    return out


def keeps_times(windows: Windowing | None) -> bool:
    """Whether pairs of copies of ``windows`` are accepted on their times (an interval join)."""
    return windows is not None and windows.kind == INTERVAL
