"""Columnar record batches and pairs of the metric cores.

A record copy is ``(id, side, value, time, window, ghost)``: ``side`` is 0 for the left stream
and 1 for the right one (a self-join uses 0 only), ``value`` the prepared value
(:meth:`driftjoin.metric.spaces.Space.prepare`), ``time`` its time in ticks
(:mod:`driftjoin.windows`), ``window`` the window it is a copy for and ``ghost`` whether it is a
ghost copy of an interval join. :func:`expand` turns a batch of records into its window copies.

Values live in a *values container*: a 1-D object array (strings, any Python value), a 2-D
float array (vectors) or a :class:`~driftjoin.metric.tokens.TokenSets`; :func:`take_values` and
:func:`concat_values` handle all three.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Union

import numpy as np

from driftjoin.metric.tokens import TokenSets
from driftjoin.windows import Windowing

Values = Union[np.ndarray, TokenSets]


def take_values(values: Values, idx: np.ndarray) -> Values:
    """Rows ``idx`` of a values container."""
    if isinstance(values, np.ndarray):
        return values[np.asarray(idx, dtype=np.int64)]
    return values.take(idx)


def concat_values(parts: Sequence[Values]) -> Values:
    """Rows of several containers of one kind, in order."""
    if isinstance(parts[0], np.ndarray):
        return np.concatenate(parts)
    return type(parts[0]).concat(parts)


def object_array(items: Sequence[Any]) -> np.ndarray:
    """A 1-D object array of ``items`` (never a 2-D array, whatever the items are)."""
    out = np.empty(len(items), dtype=object)
    out[:] = list(items)
    return out


@dataclass
class MetricRecords:
    """A batch of record copies as parallel columns (module docstring)."""

    id: np.ndarray
    side: np.ndarray
    value: Values
    time: np.ndarray
    window: np.ndarray
    ghost: np.ndarray

    def __len__(self) -> int:
        return len(self.side)

    @staticmethod
    def of(ids: Sequence[Any], values: Values, times: Sequence[int] | None = None,
           side: Sequence[int] | None = None) -> "MetricRecords":
        """Records before window assignment (window 0, no ghosts); times default to 0."""
        n = len(ids)
        return MetricRecords(
            id=np.asarray(ids) if not isinstance(ids, np.ndarray) else ids,
            side=np.zeros(n, np.int8) if side is None else np.asarray(side, dtype=np.int8),
            value=values,
            time=np.zeros(n, np.int64) if times is None else np.asarray(times, dtype=np.int64),
            window=np.zeros(n, np.int64),
            ghost=np.zeros(n, bool),
        )

    def take(self, idx: np.ndarray) -> "MetricRecords":
        idx = np.asarray(idx, dtype=np.int64)
        return MetricRecords(**{f.name: (take_values(getattr(self, f.name), idx) if f.name == "value"
                                         else getattr(self, f.name)[idx]) for f in fields(self)})

    @staticmethod
    def concat(parts: Sequence["MetricRecords"]) -> "MetricRecords":
        parts = [p for p in parts if len(p)] or list(parts[:1])
        return MetricRecords(**{f.name: (concat_values([p.value for p in parts]) if f.name == "value"
                                         else np.concatenate([getattr(p, f.name) for p in parts])) for f in fields(MetricRecords)})

    def arrays(self) -> tuple:
        """The columns as a plain tuple (what a runtime persists)."""
        return tuple(getattr(self, f.name) for f in fields(self))


def expand(records: MetricRecords, windows: Windowing) -> MetricRecords:
    """The window copies of ``records`` (:meth:`driftjoin.windows.Windowing.copies`)."""
    c = windows.copies(records.time)
    out = records.take(c.row)
    out.window, out.ghost = c.window, c.ghost
    return out


@dataclass
class MetricPairs:
    """Joined pairs: ``left_id < right_id`` in a self-join, the left stream's record first in a
    two-stream join; ``window`` is the window (interval joins: the bucket) that emitted the pair."""

    left_id: np.ndarray
    right_id: np.ndarray
    distance: np.ndarray
    window: np.ndarray

    def __len__(self) -> int:
        return len(self.left_id)

    @staticmethod
    def empty(id_dtype: Any = np.int64) -> "MetricPairs":
        return MetricPairs(np.zeros(0, id_dtype), np.zeros(0, id_dtype), np.zeros(0), np.zeros(0, np.int64))

    @staticmethod
    def concat(parts: Sequence["MetricPairs"], id_dtype: Any = np.int64) -> "MetricPairs":
        parts = [p for p in parts if len(p)]
        if not parts:
            return MetricPairs.empty(id_dtype)
        return MetricPairs(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(MetricPairs)))

    @staticmethod
    def oriented(a: MetricRecords, ia: np.ndarray, b: MetricRecords, ib: np.ndarray, distance: np.ndarray,
                 self_join: bool) -> "MetricPairs":
        """Pairs of records ``a[ia]`` and ``b[ib]`` (same window) in output orientation."""
        left, right = a.id[ia], b.id[ib]
        swap = (right < left) if self_join else (a.side[ia] == 1)
        return MetricPairs(np.where(swap, right, left), np.where(swap, left, right),
                           np.asarray(distance, dtype=np.float64), a.window[ia])

    def tuples(self) -> list[tuple]:
        """``(left_id, right_id, window)`` per pair (tests, benchmarks)."""
        return list(zip(self.left_id.tolist(), self.right_id.tolist(), self.window.tolist()))
