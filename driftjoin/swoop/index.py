"""Inverted list index ``I`` with lists ordered by expiry (SWOOP section 5.1).

``I(v)`` holds the window numbers (:mod:`~driftjoin.swoop.window`; the arrival numbers of a
single join) of the valid sets that contain token ``v``. New sets are
appended at the tail; since timestamps never decrease, every list is ordered by ascending
end time for free, the expiring sets sit at the heads, and removing or adding a set ``r``
costs ``O(|r|)`` independently of the list lengths. The paper uses doubly linked lists; a
Python list with a head offset (compacted when half of it is dead) gives the same amortised
costs and additionally lets the candidate generation *bisect* a list by window number, which
is how it crops a list at the skyband lower bound (section 5.4) without walking it.
"""

from __future__ import annotations

from collections.abc import Iterable

_COMPACT_MIN = 32


class PostingList:
    """One inverted list ``I(v)``: ``seqs[head:]`` are the valid sets, oldest first."""

    __slots__ = ("seqs", "head")

    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.head = 0

    def __len__(self) -> int:
        return len(self.seqs) - self.head


class InvertedIndex:
    """Token number -> :class:`PostingList` of the valid sets containing it."""

    def __init__(self) -> None:
        self._lists: dict[int, PostingList] = {}

    def __len__(self) -> int:
        """Number of tokens with a non-empty list."""
        return len(self._lists)

    def get(self, token: int) -> PostingList | None:
        """``I(token)``, or ``None`` when no valid set contains the token."""
        return self._lists.get(token)

    def add(self, tokens: Iterable[int], seq: int) -> None:
        """Append a new set, window number ``seq``, to the tails of its ``tokens``' lists."""
        lists = self._lists
        for token in tokens:
            plist = lists.get(token)
            if plist is None:
                plist = lists[token] = PostingList()
            plist.seqs.append(seq)

    def remove(self, tokens: Iterable[int]) -> None:
        """Remove an expiring set with ``tokens``: it is at the head of each of their lists.

        Tokens without a list are skipped: a token-space part indexes a set only under its own
        tokens (:mod:`~driftjoin.swoop.partitioned`), and no set has a list of another part's.
        """
        lists = self._lists
        for token in tokens:
            plist = lists.get(token)
            if plist is None:
                continue
            head = plist.head + 1
            if head == len(plist.seqs):
                del lists[token]
            elif head >= _COMPACT_MIN and 2 * head >= len(plist.seqs):
                del plist.seqs[:head]
                plist.head = 0
            else:
                plist.head = head
