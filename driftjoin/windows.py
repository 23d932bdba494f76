"""Time windows of a join, one vocabulary for every operator: tumbling, sliding and interval.

Times are integer *ticks* (:data:`TICKS_PER_SECOND` per second: microseconds, the resolution of
a Spark timestamp), so every boundary test below is exact integer arithmetic: a record exactly on
a boundary and one a tick beside it always fall where the definitions say.

Semantics (``o`` is Spark's ``startTime`` offset, 0 unless given):

- **tumbling** ``window=W``: a record at ``t`` is in window ``k = floor((t - o) / W)``, the
  times ``[o + kW, o + (k + 1)W)``. A pair joins once, in the window that holds both.
- **sliding** ``window=W, slide=S`` (``S <= W``; Spark's ``window()`` convention): window ``k``
  holds ``[o + kS, o + kS + W)``, so ``t`` is in every ``k`` from ``floor((t - o - W) / S) + 1``
  to ``floor((t - o) / S)``. A pair is emitted once for each window that holds both records,
  with that window's start and end. Tumbling is the case ``S = W``.
- **interval** ``within=D``: every pair with ``|t1 - t2| <= D``, exactly once, wherever the
  records fall. Reduced to tumbling *buckets* of width ``B >= D`` (default ``B = max(D, 1)``):
  each record has a *home* copy in bucket ``b = floor(t / B)`` and a *ghost* copy in
  ``g = floor((t + D) / B)`` when ``g != b`` (then ``g = b + 1``, i.e. ``t >= (b + 1)B - D``).
  A bucket pairs home x home and home x ghost, never ghost x ghost, and accepts a pair only if
  ``|t1 - t2| <= D`` (:meth:`Windowing.accept`).

  *Exactly once*: let ``tx <= ty``, ``ty - tx <= D``, ``bx``, ``by`` their home buckets. As
  ``ty - tx <= D <= B``, ``by - bx`` is 0 or 1. If 0, both homes are in ``bx`` and the pair is
  met there; the only other bucket holding both is ``bx + 1``, where both are ghosts. If 1,
  ``tx + D >= ty >= by B`` so x has its ghost in ``by``, where it meets y's home; the buckets
  of x are ``{bx, by}`` and those of y ``{by, by + 1}``, so ``by`` is the only common one.
  Pairs further apart than ``D`` are refused by the time test.

  *Why B = D*: at a steady rate, a bucket examines the pairs of its ``B + D`` ticks of records,
  ``(B + D)^2 / B`` per tick of stream, least at ``B = D``, and a record is held for at most
  ``B + D`` ticks of event time. Every record then has a ghost (two copies); a wider bucket
  copies a fraction ``D / B`` of the records but examines more pairs.
- **unbounded**: one window (0) that never closes (a static join).

Closing rule (the clock, as :mod:`driftjoin.clock` applies it per batch): the *frontier* is
``F = seen - lateness``, ``seen`` the largest time of all earlier batches. Window ``k`` ends at
``end(k) = o + kS + W`` (interval: ``o = 0``, ``S = W = B``) and is *closed* once
``end(k) <= F``; :meth:`Windowing.first_open` is the oldest open window,
``floor((F - o - W) / S) + 1``, and state of older windows is dropped, so state is bounded by
the watermark. A record is *late* when its earliest window is closed (for an interval join: its
home bucket): a window it belongs to can no longer meet all of its partners, so it goes to the
dead letters whole rather than be joined with part of them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from driftjoin.durations import parse_duration
from driftjoin.runs import run_positions

#: Ticks per second: times and durations are integers in microseconds.
TICKS_PER_SECOND = 1_000_000

TUMBLING = "tumbling"
SLIDING = "sliding"
INTERVAL = "interval"
UNBOUNDED = "unbounded"
KINDS = (TUMBLING, SLIDING, INTERVAL, UNBOUNDED)


def to_ticks(seconds: float) -> int:
    """Seconds as a whole number of ticks (rounded to the nearest tick)."""
    return int(round(float(seconds) * TICKS_PER_SECOND))


@dataclass(frozen=True)
class WindowCopies:
    """The window copies of a batch of records: record ``row[k]`` is in ``window[k]``, as a ghost
    copy where ``ghost[k]`` (interval joins only), in record order."""

    row: np.ndarray
    window: np.ndarray
    ghost: np.ndarray

    def __len__(self) -> int:
        return len(self.row)


@dataclass(frozen=True)
class Windowing:
    """Which windows a record belongs to and which pairs a window accepts (module docstring).

    ``length`` is W (the bucket width B for an interval join), ``slide`` S, ``within`` D (interval
    joins only), ``offset`` o, all in ticks. Build one with :meth:`tumbling`, :meth:`sliding`,
    :meth:`interval`, :meth:`unbounded` or :func:`windowing` (from the user's settings).

    Example::

        >>> w = Windowing.interval(within=30)
        >>> c = w.copies(np.array([0, 45]))
        >>> c.row.tolist(), c.window.tolist(), c.ghost.tolist()
        ([0, 0, 1, 1], [0, 1, 1, 2], [False, True, False, True])
    """

    kind: str
    length: int
    slide: int
    within: int | None = None
    offset: int = 0

    @staticmethod
    def tumbling(window: int, offset: int = 0) -> "Windowing":
        """Tumbling windows of ``window`` ticks."""
        return Windowing(TUMBLING, _positive(window, "window"), int(window), None, int(offset))

    @staticmethod
    def sliding(window: int, slide: int, offset: int = 0) -> "Windowing":
        """Windows of ``window`` ticks starting every ``slide`` ticks (``slide <= window``)."""
        _positive(window, "window")
        _positive(slide, "slide")
        if slide > window:
            raise ValueError(f"slide ({slide} ticks) is longer than window ({window} ticks): windows would leave gaps; "
                             "use a slide at most the window")
        return Windowing(SLIDING if slide < window else TUMBLING, int(window), int(slide), None, int(offset))

    @staticmethod
    def interval(within: int, bucket: int | None = None) -> "Windowing":
        """Pairs with ``|t1 - t2| <= within`` ticks, on buckets of ``bucket`` ticks (default ``max(within, 1)``)."""
        if isinstance(within, bool) or int(within) != within or within < 0:
            raise ValueError(f"within must be a whole number of ticks >= 0, got {within!r}")
        b = max(int(within), 1) if bucket is None else _positive(bucket, "bucket")
        if b < within:
            raise ValueError(f"bucket ({b} ticks) must be at least within ({within} ticks)")
        return Windowing(INTERVAL, b, b, int(within), 0)

    @staticmethod
    def unbounded() -> "Windowing":
        """One window that never closes (a static join)."""
        return Windowing(UNBOUNDED, 1, 1, None, 0)

    def settings(self) -> dict[str, int | str | None]:
        """The windowing as JSON values (what a plan stored with a checkpoint compares)."""
        return {"window_kind": self.kind, "window_ticks": self.length, "slide_ticks": self.slide,
                "within_ticks": self.within, "window_offset_ticks": self.offset}

    def copies(self, times: np.ndarray) -> WindowCopies:
        """The window copies of records at ``times`` (int64 ticks), grouped by record."""
        t = np.asarray(times, dtype=np.int64)
        n = len(t)
        rows = np.arange(n, dtype=np.int64)
        if self.kind == UNBOUNDED:
            return WindowCopies(rows, np.zeros(n, np.int64), np.zeros(n, bool))
        if self.kind == INTERVAL:
            home = t // self.length
            ghost_w = (t + self.within) // self.length
            has = ghost_w != home
            row = np.concatenate([rows, rows[has]])
            window = np.concatenate([home, ghost_w[has]])
            ghost = np.concatenate([np.zeros(n, bool), np.ones(int(has.sum()), bool)])
            order = np.argsort(row, kind="stable")
            return WindowCopies(row[order], window[order], ghost[order])
        first = self.first_window(t)
        last = (t - self.offset) // self.slide
        count = last - first + 1
        row = np.repeat(rows, count)
        window = np.repeat(first, count) + run_positions(count)
        return WindowCopies(row, window, np.zeros(len(row), bool))

    def first_window(self, times: np.ndarray) -> np.ndarray:
        """The earliest window of each time (an interval join: the home bucket)."""
        t = np.asarray(times, dtype=np.int64)
        if self.kind == UNBOUNDED:
            return np.zeros(len(t), np.int64)
        return (t - self.offset - self.length) // self.slide + 1

    def start(self, window: np.ndarray) -> np.ndarray:
        """First tick of each window (a bucket for an interval join)."""
        return self.offset + np.asarray(window, dtype=np.int64) * self.slide

    def end(self, window: np.ndarray) -> np.ndarray:
        """End of each window, exclusive: the window closes once the frontier reaches it."""
        return self.start(window) + self.length

    def accept(self, time_a: np.ndarray, ghost_a: np.ndarray, time_b: np.ndarray, ghost_b: np.ndarray) -> np.ndarray:
        """Which pairs of copies of one window are pairs of the join (never two ghosts; within ``D``)."""
        ok = ~(np.asarray(ghost_a, bool) & np.asarray(ghost_b, bool))
        if self.kind == INTERVAL:
            ok &= np.abs(np.asarray(time_a, np.int64) - np.asarray(time_b, np.int64)) <= self.within
        return ok

    def first_open(self, frontier: int | None) -> int | None:
        """The oldest window that is not closed at ``frontier`` (None: no frontier yet, or unbounded)."""
        if frontier is None or self.kind == UNBOUNDED:
            return None
        return (int(frontier) - self.offset - self.length) // self.slide + 1

    def late(self, times: np.ndarray, frontier: int | None) -> np.ndarray:
        """Which records have a closed earliest window at ``frontier`` (dead letters)."""
        first = self.first_open(frontier)
        if first is None:
            return np.zeros(len(np.asarray(times)), bool)
        return self.first_window(times) < first


def _positive(ticks: int, what: str) -> int:
    if isinstance(ticks, bool) or int(ticks) != ticks or ticks <= 0:
        raise ValueError(f"{what} must be a whole number of ticks > 0, got {ticks!r}")
    return int(ticks)


def windowing(
    window: str | float | None = None,
    slide: str | float | None = None,
    within: str | float | None = None,
    *,
    start_time: str | float | None = None,
) -> Windowing:
    """The windowing of a join from the user's settings (durations like ``"1 minute"`` or seconds).

    Parameters
    ----------
    window : tumbling (or, with ``slide``, sliding) window length; None for an unbounded join.
    slide : the slide of a sliding window (at most ``window``).
    within : an interval join: pairs whose times differ by at most this much (not with ``window``).
    start_time : Spark's ``startTime`` offset of the windows.

    Raises ``ValueError`` with what to change for contradicting or malformed settings.

    Example::

        >>> windowing(window="1 minute", slide="20 seconds").slide == 20 * TICKS_PER_SECOND
        True
        >>> windowing(within="30 seconds").kind
        'interval'
    """
    if within is not None:
        if window is not None or slide is not None:
            raise ValueError("within= (an interval join) cannot be combined with window= or slide=: "
                             "use within= alone to join records whose times differ by at most that much, "
                             "or window=/slide= for window joins")
        if start_time is not None:
            raise ValueError("start_time= applies to window=, not to within=: remove it")
        return Windowing.interval(to_ticks(parse_duration(within, "within", allow_zero=True)))
    if window is None:
        if slide is not None or start_time is not None:
            raise ValueError("slide= and start_time= need window=: give the window length too")
        return Windowing.unbounded()
    w = to_ticks(parse_duration(window, "window"))
    offset = 0 if start_time is None else to_ticks(parse_duration(start_time, "start_time", allow_zero=True))
    if slide is None:
        return Windowing.tumbling(w, offset)
    s = to_ticks(parse_duration(slide, "slide"))
    if s > w:
        raise ValueError(f"slide={slide!r} is longer than window={window!r}: records between windows would never "
                         "join; use a slide at most the window (slide equal to window is a tumbling window)")
    return Windowing.sliding(w, s, offset)
