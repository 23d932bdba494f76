"""Worker-side join state and the exactly-once reporting rule.

Each routed document carries the bit mask of all joiners it was sent to. A joiner
holding two joinable documents ``a`` and ``b`` reports the pair only if it is the
*owner*: the lowest joiner id in ``targets(a) & targets(b)``.

Why every joining pair is produced exactly once:

* the routing guarantees ``targets(a) & targets(b)`` is non-empty for joinable
  documents (see :mod:`~driftjoin.schemafree.partitioner`), and every joiner in that
  intersection holds both documents in the same window, so the owner finds the pair
  (its local join is exact and probes each document against all earlier ones);
* every other joiner holding both sees a different owner and stays silent, and a joiner
  outside the intersection lacks one of the two documents.

The rule needs no shared state and stays valid when partitions grow in the middle of a
window, because it only uses the masks fixed when each document was routed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

from driftjoin.schemafree.document import Document, merged_document
from driftjoin.schemafree.fptree import AttributeOrder
from driftjoin.schemafree.localjoin import LocalJoin, LocalJoinName, make_local_join


@dataclass(frozen=True, slots=True)
class RoutedDocument:
    """A document together with the mask of every joiner it was routed to."""

    doc: Document
    targets: int


class JoinPair(NamedTuple):
    """One join result: ids with ``left < right``, and the merged document if asked."""

    left: int
    right: int
    merged: dict[str, Any] | None = None


def owner(targets_a: int, targets_b: int) -> int:
    """Joiner that reports a pair: lowest id both documents were routed to (-1: none)."""
    common = targets_a & targets_b
    return (common & -common).bit_length() - 1


@dataclass
class _WindowState:
    local: LocalJoin
    docs: dict[int, RoutedDocument]


class Joiner:
    """Per-worker state for the open windows; reports the pairs it owns.

    ``local_join`` selects the algorithm (``"fptree"``, ``"hash"``, ``"nested"``); with
    ``merge`` every pair carries the merged document.
    """

    def __init__(self, joiner_id: int, local_join: LocalJoinName = "fptree", *, merge: bool = False) -> None:
        make_local_join(local_join)  # validate the name early
        self.joiner_id = joiner_id
        self.local_join: LocalJoinName = local_join
        self.merge = merge
        self._windows: dict[int, _WindowState] = {}

    @property
    def open_windows(self) -> list[int]:
        """Windows with state, ascending."""
        return sorted(self._windows)

    def open_window(self, window: int, order: AttributeOrder | None = None) -> None:
        """Start a window with the global attribute order of its partitions."""
        if window in self._windows:
            raise ValueError(f"window {window} is already open at joiner {self.joiner_id}")
        self._windows[window] = _WindowState(make_local_join(self.local_join, order), {})

    def add(self, window: int, docs: Iterable[RoutedDocument]) -> list[JoinPair]:
        """Join ``docs`` (in arrival order) into ``window``; return the new owned pairs.

        The window is opened with the default attribute order if it is not open yet.
        """
        if window not in self._windows:
            self.open_window(window)
        state = self._windows[window]
        me = self.joiner_id
        pairs: list[JoinPair] = []
        for routed in docs:
            if not routed.targets >> me & 1:
                raise ValueError(f"document {routed.doc.doc_id} was not routed to joiner {me}")
            doc = routed.doc
            if doc.doc_id in state.docs:
                raise ValueError(f"document {doc.doc_id} added twice to window {window}")
            for partner_id in state.local.join(doc):
                partner = state.docs[partner_id]
                if owner(routed.targets, partner.targets) != me:
                    continue
                left, right = sorted((doc, partner.doc), key=lambda d: d.doc_id)
                merged = merged_document(left, right) if self.merge else None
                pairs.append(JoinPair(left.doc_id, right.doc_id, merged))
            state.local.insert(doc)
            state.docs[doc.doc_id] = routed
        return pairs

    def close_window(self, window: int) -> None:
        """Evict the whole window (tumbling windows drop their state at once)."""
        self._windows.pop(window, None)
