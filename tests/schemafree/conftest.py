"""Shared helpers for the schema-free join tests: the brute-force oracle."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence

import pytest

from driftjoin.schemafree.document import Document
from driftjoin.schemafree.window import Window, split_windows

Oracle = Callable[[Sequence[Document], Window], set[tuple[int, int]]]


def brute_force_pairs(docs: Sequence[Document], window: Window) -> set[tuple[int, int]]:
    """Natural join of every window by testing all pairs with plain set logic."""
    pairs: set[tuple[int, int]] = set()
    for _, members in split_windows(docs, window):
        for a, b in itertools.combinations(members, 2):
            shared = a.avps.keys() & b.avps.keys()
            if shared and all(a.avps[k] == b.avps[k] for k in shared):
                pairs.add((min(a.doc_id, b.doc_id), max(a.doc_id, b.doc_id)))
    return pairs


@pytest.fixture
def oracle() -> Oracle:
    """The brute-force natural join per window."""
    return brute_force_pairs
