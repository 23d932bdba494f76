"""Columns of numpy arrays addressed by slot, whose removed rows' slots are reused.

The entity core keeps its records and entities in such tables: a batch adds rows in bulk
(vectorised), expiry removes them, and memory stays proportional to the rows alive rather than
to every row ever added. Slots are internal: nothing persisted or emitted depends on them.
"""

from __future__ import annotations

import numpy as np


class SlotTable:
    """Named columns (numpy arrays) indexed by slot, with a free list."""

    def __init__(self, dtypes: dict[str, object]) -> None:
        self.dtypes = dict(dtypes)
        self.cols: dict[str, np.ndarray] = {k: np.empty(0, dtype=dt) for k, dt in self.dtypes.items()}
        self.high = 0
        self.free: list[int] = []

    def __getitem__(self, name: str) -> np.ndarray:
        return self.cols[name]

    def alloc(self, n: int) -> np.ndarray:
        """``n`` slots for new rows: freed slots first (last freed first), then new ones."""
        reuse = min(n, len(self.free))
        slots = np.asarray(self.free[len(self.free) - reuse:][::-1], dtype=np.int64)
        del self.free[len(self.free) - reuse:]
        fresh = np.arange(self.high, self.high + n - reuse, dtype=np.int64)
        self.high += n - reuse
        capacity = len(next(iter(self.cols.values()))) if self.cols else 0
        if self.high > capacity:
            size = max(self.high, 2 * capacity, 16)
            for k, a in self.cols.items():
                grown = np.empty(size, dtype=a.dtype)
                grown[: len(a)] = a
                if a.dtype == object:
                    grown[len(a):] = None
                self.cols[k] = grown
        return np.concatenate([slots, fresh])

    def release(self, slots: object) -> None:
        self.free.extend(np.asarray(slots, dtype=np.int64).reshape(-1).tolist())
