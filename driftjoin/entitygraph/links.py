"""The input of the entity core: one micro-batch of links, and the one order they are applied in.

A link says that two records are the same entity. In a *self* linkage (a self-join: ``right=None``)
both ids name records of one input, so ``(7, 9)`` and ``(9, 7)`` are one link and a record is
``(0, id)``; in a *two-sided* linkage the left id names a record of the left input and the right id
one of the right input, so a record is ``(side, id)`` and left 7 and right 7 are two records.

Records are compared by ``(side, id)``, ids by value (integers numerically, strings by code
point): that order names entities (the *founder*, :mod:`driftjoin.entitygraph.graph`) and orders
links. Within a batch, links are applied in the order of ``(time, left record, right record)``
(:func:`link_order`): a function of the batch's links as a set, so any split of a batch's rows
over input partitions, and any replay, applies them the same way. The order matters only to the
guards (which of two links that together would exceed ``max_size`` is refused); the groups and
ids without guards are the same in any order.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def id_array(values: object) -> np.ndarray:
    """Ids as the core keeps them: int64 for integers, an object array of str otherwise."""
    a = np.asarray(values)
    if a.dtype == object:
        if all(isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in a.tolist()):
            return a.astype(np.int64)
        return a
    if np.issubdtype(a.dtype, np.integer):
        return a.astype(np.int64)
    if a.dtype.kind in "US":
        return a.astype(object)
    if a.size == 0:
        return a.astype(np.int64)
    raise TypeError(f"record ids must be integers or strings, got an array of {a.dtype}")


@dataclass
class LinkBatch:
    """The links of one micro-batch: ``left[i]`` and ``right[i]`` are the same entity.

    ``time`` (seconds, optional) orders the links and dates the entities for expiry; a link's time
    must not be earlier than either record's own time (the later record's time, or the pair's
    ingestion time, is right). ``left_source`` / ``right_source`` (optional) name the source of
    each record for the ``one_per_source`` guard; without them a two-sided linkage uses the side.
    """

    left: np.ndarray
    right: np.ndarray
    time: np.ndarray | None = None
    left_source: np.ndarray | None = None
    right_source: np.ndarray | None = None

    def __post_init__(self) -> None:
        self.left = id_array(self.left)
        self.right = id_array(self.right)
        if self.left.dtype != self.right.dtype:
            if len(self.left) and len(self.right):
                raise TypeError("left and right ids must be of one type (both integers or both strings)")
            kind = self.left.dtype if len(self.left) else self.right.dtype
            self.left, self.right = self.left.astype(kind), self.right.astype(kind)
        if len(self.left) != len(self.right):
            raise ValueError("left and right must have one id per link")
        if self.time is not None:
            self.time = np.asarray(self.time, dtype=np.float64)
        for name in ("left_source", "right_source"):
            value = getattr(self, name)
            if value is not None:
                setattr(self, name, np.asarray(value, dtype=object))

    def __len__(self) -> int:
        return len(self.left)

    def take(self, idx: np.ndarray) -> LinkBatch:
        pick = (lambda a: None if a is None else a[idx])
        return LinkBatch(self.left[idx], self.right[idx], pick(self.time), pick(self.left_source),
                         pick(self.right_source))

    def times(self) -> np.ndarray:
        return np.zeros(len(self)) if self.time is None else self.time


def canonical(batch: LinkBatch, two_sided: bool) -> tuple[LinkBatch, int]:
    """The batch without links of a record to itself, each self-linkage link as ``(smaller,
    larger)``, in :func:`link_order`; and how many links were dropped as links to oneself."""
    if not two_sided and len(batch):
        swap = batch.left > batch.right
        if swap.any():
            left = np.where(swap, batch.right, batch.left)
            right = np.where(swap, batch.left, batch.right)
            ls, rs = batch.left_source, batch.right_source
            if ls is not None and rs is not None:
                ls, rs = np.where(swap, rs, ls), np.where(swap, ls, rs)
            batch = LinkBatch(left, right, batch.time, ls, rs)
        keep = np.asarray(batch.left != batch.right, dtype=bool)
        dropped = int(len(batch) - keep.sum())
        if dropped:
            batch = batch.take(np.nonzero(keep)[0])
    else:
        dropped = 0
    return batch.take(link_order(batch, two_sided)), dropped


def link_order(batch: LinkBatch, two_sided: bool) -> np.ndarray:
    """Indices of the links by ``(time, left record, right record)`` (module docstring)."""
    if len(batch) == 0:
        return np.zeros(0, np.int64)
    return np.lexsort((batch.right, batch.left, batch.times()))
