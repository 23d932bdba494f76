"""Tumbling windows (Section V-A): non-overlapping chunks of the stream.

Two documents can only join when they fall into the same window. A window is either a
fixed number of documents (count-based, by arrival position) or a fixed span of event
time (time-based, ``floor(time / length)``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from driftjoin.schemafree.document import Document


@dataclass(frozen=True, slots=True)
class CountWindow:
    """Tumbling window of ``size`` consecutive documents (by arrival position)."""

    size: int

    def __post_init__(self) -> None:
        if self.size < 1:
            raise ValueError("a count window holds at least one document")


@dataclass(frozen=True, slots=True)
class TimeWindow:
    """Tumbling window of ``length`` time units; the time is read from ``attribute``.

    The time attribute is removed from the joined attribute-value pairs (see
    :func:`driftjoin.schemafree.document.make_document`).
    """

    length: float
    attribute: str = "timestamp"

    def __post_init__(self) -> None:
        if not self.length > 0:
            raise ValueError("a time window has a positive length")

    def window_of(self, time: float) -> int:
        """Window index of an event time."""
        return math.floor(time / self.length)


Window = CountWindow | TimeWindow


def split_windows(docs: Sequence[Document], window: Window) -> list[tuple[int, list[Document]]]:
    """Group documents into tumbling windows, ascending by window index.

    Arrival order is kept inside a window. For count windows ``docs`` are taken in
    the given order; for time windows every document needs a ``time``.
    """
    if isinstance(window, CountWindow):
        return [
            (start // window.size, list(docs[start : start + window.size]))
            for start in range(0, len(docs), window.size)
        ]
    groups: dict[int, list[Document]] = {}
    for doc in docs:
        if doc.time is None:
            raise ValueError(f"document {doc.doc_id} has no event time for a time window")
        groups.setdefault(window.window_of(doc.time), []).append(doc)
    return sorted(groups.items())

