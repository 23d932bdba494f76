"""Record id -> slot, for one side: a hashed base built in bulk plus a dict of recent inserts.

A Python dict of every linked record is what a rebuild of the entity state would spend most of its
time on (one insert per record, about 0.2 s per 400,000 records here), and a rebuild happens
whenever a key's previous micro-batch ran in another Python process. So the bulk of the ids lives
in a :class:`pandas.Index` (its hash table is built in C, vectorised lookups), with the slots in
an aligned array; records added since the base was built go to a dict, which is folded into a new
base once it holds a quarter of the base (amortised O(1) per insert). A removed record's base slot
is set to -1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd


class RecordIndex:
    """Slots of the records of one side, by id."""

    #: the fewest recent records folded into the base (a fold rebuilds the base's hash table)
    fold_min = 4096

    def __init__(self, kind: np.dtype, keys: np.ndarray | None = None, slots: np.ndarray | None = None) -> None:
        self.kind = np.dtype(kind)
        self.base = pd.Index(np.zeros(0, self.kind) if keys is None else np.asarray(keys, self.kind))
        self.base_slots = np.zeros(0, np.int64) if slots is None else np.asarray(slots, np.int64)
        self.recent: dict = {}
        self.removed = 0

    def __len__(self) -> int:
        return len(self.base) - self.removed + len(self.recent)

    def __bool__(self) -> bool:
        return len(self) > 0

    def lookup(self, ids: np.ndarray) -> np.ndarray:
        """The slot of each id (-1: not a linked record)."""
        out = np.full(len(ids), -1, np.int64)
        if len(self.base) and len(ids):
            pos = self.base.get_indexer(ids)
            hit = pos >= 0
            out[hit] = self.base_slots[pos[hit]]
        if self.recent:
            miss = np.nonzero(out < 0)[0]
            if len(miss):
                get = self.recent.get
                out[miss] = np.fromiter((get(x, -1) for x in ids[miss].tolist()), np.int64, len(miss))
        return out

    def get(self, key: object) -> int | None:
        slot = int(self.lookup(np.asarray([key], dtype=self.kind))[0])
        return None if slot < 0 else slot

    def insert(self, keys: np.ndarray, slots: np.ndarray) -> None:
        """Add records (ids not in the index)."""
        if len(self.recent) + len(keys) > max(self.fold_min, len(self.base) // 4):
            self._fold(np.asarray(keys, self.kind), np.asarray(slots, np.int64))
        else:
            self.recent.update(zip(keys.tolist(), slots.tolist()))

    def remove(self, keys: np.ndarray) -> None:
        if not len(keys):
            return
        if self.recent:
            rest = []
            for k in keys.tolist():
                if self.recent.pop(k, None) is None:
                    rest.append(k)
            keys = np.asarray(rest, dtype=keys.dtype)
        if len(keys) and len(self.base):
            pos = self.base.get_indexer(keys)
            pos = pos[pos >= 0]
            pos = pos[self.base_slots[pos] >= 0]
            self.base_slots[pos] = -1
            self.removed += len(pos)
        if self.removed > len(self.base) // 2:
            self._fold()

    def _fold(self, new_keys: np.ndarray | None = None, new_slots: np.ndarray | None = None) -> None:
        """A new base of the live base, the recent records and ``new_keys``."""
        live = self.base_slots >= 0
        keys = [np.asarray(self.base.to_numpy()[live], self.kind)]
        slots = [self.base_slots[live]]
        if self.recent:
            extra = np.empty(len(self.recent), self.kind)
            extra[:] = list(self.recent)
            keys.append(extra)
            slots.append(np.fromiter(self.recent.values(), np.int64, len(self.recent)))
        if new_keys is not None:
            keys.append(new_keys)
            slots.append(new_slots)
        keys, slots = np.concatenate(keys), np.concatenate(slots)
        self.base, self.base_slots, self.recent, self.removed = pd.Index(keys), slots, {}, 0

    def items(self) -> Iterator[tuple[object, int]]:
        for key, slot in zip(self.base.tolist(), self.base_slots.tolist()):
            if slot >= 0:
                yield key, slot
        yield from self.recent.items()
