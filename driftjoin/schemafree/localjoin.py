"""Local join algorithms run inside one joiner for one window (Section V, VII-A).

Each algorithm stores the documents of a window and, for a new document, returns the
ids of the stored documents it joins with (probe before insert gives every pair once):

* ``fptree`` - :class:`~driftjoin.schemafree.fptree.FPTree` with FPTreeJoin;
* ``hash`` - hash-based join (HBJ): an inverted index from attribute-value pair to
  documents; candidates sharing a pair are verified for conflicts;
* ``nested`` - nested-loop join (NLJ): every stored document is tested.
"""

from __future__ import annotations

from typing import Literal, Protocol

from driftjoin.schemafree.document import AVPair, Document, joinable
from driftjoin.schemafree.fptree import AttributeOrder, FPTree

LocalJoinName = Literal["fptree", "hash", "nested"]


class LocalJoin(Protocol):
    """Window state of one joiner: stored documents and the partner search."""

    def join(self, doc: Document) -> list[int]:
        """Ids of stored documents joinable with ``doc`` (``doc`` not yet stored)."""
        ...

    def insert(self, doc: Document) -> None:
        """Store ``doc`` for documents arriving later in the window."""
        ...


class NestedLoopJoin:
    """NLJ: test the probe against every stored document."""

    def __init__(self) -> None:
        self._docs: list[Document] = []

    def join(self, doc: Document) -> list[int]:
        avps = doc.avps
        return [other.doc_id for other in self._docs if joinable(avps, other.avps)]

    def insert(self, doc: Document) -> None:
        self._docs.append(doc)


class HashJoin:
    """HBJ: inverted index on attribute-value pairs, candidates verified."""

    def __init__(self) -> None:
        self._index: dict[AVPair, list[Document]] = {}

    def join(self, doc: Document) -> list[int]:
        seen: set[int] = set()
        result: list[int] = []
        avps = doc.avps
        for pair in avps.items():
            for other in self._index.get(pair, ()):
                if other.doc_id not in seen:
                    seen.add(other.doc_id)
                    if joinable(avps, other.avps):
                        result.append(other.doc_id)
        return result

    def insert(self, doc: Document) -> None:
        for pair in doc.avps.items():
            self._index.setdefault(pair, []).append(doc)


def make_local_join(name: LocalJoinName, order: AttributeOrder | None = None) -> LocalJoin:
    """A fresh local join; ``order`` is the global attribute order (FP-tree only)."""
    if name == "fptree":
        return FPTree(order)
    if name == "hash":
        return HashJoin()
    if name == "nested":
        return NestedLoopJoin()
    raise ValueError(f"unknown local join {name!r}; use 'fptree', 'hash' or 'nested'")
