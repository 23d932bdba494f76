"""Stream records: input validation (the bad-input policy) and the global token order.

Bad-input policy, applied before the join state changes (a rejected insert leaves the join
exactly as it was, consumes no sequence number and registers no token):

* missing field: ``set_id``, ``tokens`` or ``ts`` is ``None``, or ``side`` is ``None`` in a
  two-stream join -> :class:`InvalidSetError`;
* ``tokens`` is a ``str``/``bytes`` (a common slip for a one-token set) or not iterable, or a
  token is neither a ``str`` nor an integer (``int`` or e.g. ``numpy.int64``; ``bool``
  excluded) -> :class:`InvalidSetError`;
* duplicate tokens within a set are dropped: sets are sets;
* an empty set (no token after deduplication) -> :class:`InvalidSetError`; the caller is
  expected to turn it into a dead-letter row;
* a set of more distinct tokens than the similarity ranks exactly (:data:`MAX_SET_SIZE`, 4096
  for cosine; :mod:`~driftjoin.swoop.similarity`, :mod:`driftjoin.metric.exact`)
  -> :class:`InvalidSetError`;
* ``ts`` not a finite real number, or ``ts`` smaller than the index time (out of order)
  -> :class:`InvalidSetError` naming the expected minimum;
* ``side`` not ``"R"``/``"S"`` in a two-stream join, or given at all in a self-join
  -> :class:`InvalidSetError`;
* a ``set_id`` (unhashable, or) equal to that of a set of the same side that is still valid
  at ``ts`` -> :class:`InvalidSetError`.

Out-of-order timestamps raise the subclass :class:`LateSetError`, duplicate ids
:class:`DuplicateSetError`, so a caller can tell late and repeated sets from malformed ones.

:class:`InvalidSetError` subclasses ``ValueError``, so ``except ValueError`` catches all of them.

Token order (section 5.5). Tokens are mapped to ints in order of first appearance in the stream
("frequent tokens are more likely to occur earlier"). A set is processed in descending token
number, i.e. tokens that appeared later (presumably rarer) first. New tokens of one set are
numbered in a fixed order (ints before strings, then by value), so the numbering does not depend
on the iteration order of the caller's container (e.g. a ``set`` of strings under hash
randomisation).
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from itertools import chain, repeat
from dataclasses import dataclass
from numbers import Integral, Real

import numpy as np

SIDES = ("R", "S")
#: Most distinct tokens of a set: unions stay below 2^26 tokens, so distinct ratios of set sizes
#: and overlaps are distinct floats (:mod:`~driftjoin.swoop.similarity`).
MAX_SET_SIZE = 1 << 25
_TOKEN_TYPES = {str, int}
_CONTAINERS = (list, tuple, np.ndarray)


class InvalidSetError(ValueError):
    """A stream record violates the bad-input policy (see the module docstring)."""


class LateSetError(InvalidSetError):
    """A set whose timestamp is older than the index time (it arrived out of order)."""


class DuplicateSetError(InvalidSetError):
    """A set whose id equals that of a set of the same side still in the window."""


@dataclass(slots=True)
class SetRecord:
    """A valid set of window ``W``: arrival number, user id, side, timestamp, end time, tokens.

    Never mutated after creation (not ``frozen`` only because frozen dataclasses are several
    times slower to construct, and one is built per stream element).
    """

    seq: int
    set_id: Hashable
    side: str | None
    ts: float
    end: float
    tokens: frozenset[int] | np.ndarray  # token numbers (an array in the compiled engine)
    size: int


class TokenOrder:
    """Global token numbering by first appearance (the token-order heuristic of section 5.5)."""

    def __init__(self) -> None:
        self._ids: dict[str | int, int] = {}

    def __len__(self) -> int:
        return len(self._ids)

    def number(self, tokens: list[str | int]) -> frozenset[int]:
        """Map validated, deduplicated tokens to their numbers, numbering new tokens first."""
        ids = self._ids
        try:
            return frozenset(map(ids.__getitem__, tokens))
        except KeyError:
            self._register(tokens)
            return frozenset(map(ids.__getitem__, tokens))

    def number_array(self, tokens: list[str | int]) -> np.ndarray:
        """:meth:`number` as an ``int64`` array (in the order of ``tokens``)."""
        ids = self._ids
        try:
            return np.fromiter(map(ids.__getitem__, tokens), np.int64, len(tokens))
        except KeyError:
            self._register(tokens)
            return np.fromiter(map(ids.__getitem__, tokens), np.int64, len(tokens))

    def number_known(self, token_lists: Sequence[object], max_size: int = MAX_SET_SIZE) -> list[np.ndarray | None]:
        """The distinct token numbers of a batch of sets at once, for the sets whose tokens are
        all numbered already; ``None`` for every other set (one with a new token, or whose
        ``tokens`` is not a non-empty ``list``/``tuple``/array of ``str`` and ``int`` of at most
        ``max_size`` items): those
        take :func:`validate_tokens` and :meth:`number_array` one by one, when the join reaches
        them, so a refused set still registers no token and new tokens are numbered in arrival
        order as ever. An array holds the set's numbers ascending (the compiled engine does not
        depend on their order: it orders the lists itself).

        One dictionary pass over the batch's tokens and a few numpy operations, instead of a
        validation and a numbering per set (which every worker of a partitioned join pays for
        every set)."""
        n = len(token_lists)
        out: list[np.ndarray | None] = [None] * n
        rows = [x for x in range(n) if type(token_lists[x]) in _CONTAINERS and 0 < len(token_lists[x]) <= max_size]
        flat = list(chain.from_iterable(token_lists[x] for x in rows))
        if not set(map(type, flat)) <= _TOKEN_TYPES:  # a bool, float, numpy int, ...: set by set
            rows = [x for x in rows if set(map(type, token_lists[x])) <= _TOKEN_TYPES]
            flat = list(chain.from_iterable(token_lists[x] for x in rows))
        if not rows:
            return out
        lengths = np.fromiter((len(token_lists[x]) for x in rows), np.int64, len(rows))
        numbers = np.array(list(map(self._ids.get, flat, repeat(-1))), np.int64)
        owner = np.repeat(np.arange(len(rows), dtype=np.int64), lengths)
        unknown = np.bincount(owner[numbers < 0], minlength=len(rows))
        # distinct numbers per set: sort by (set, number), drop repeats
        order = np.lexsort((numbers, owner))
        numbers, owner = numbers[order], owner[order]
        keep = np.ones(len(numbers), bool)
        keep[1:] = (numbers[1:] != numbers[:-1]) | (owner[1:] != owner[:-1])
        numbers, owner = numbers[keep], owner[keep]
        ends = np.cumsum(np.bincount(owner, minlength=len(rows))).tolist()
        start = 0
        for x, end, new in zip(rows, ends, unknown.tolist()):
            if not new:
                out[x] = numbers[start:end]
            start = end
        return out

    def _register(self, tokens: list[str | int]) -> None:
        ids = self._ids
        fresh = sorted(
            (tok for tok in tokens if tok not in ids),
            key=lambda tok: (isinstance(tok, str), tok),
        )
        for tok in fresh:
            ids[tok] = len(ids)


def validate_tokens(set_id: Hashable, tokens: object, max_size: int = MAX_SET_SIZE) -> list[str | int]:
    """Check the ``tokens`` field and return its distinct tokens (first occurrence order); at most
    ``max_size`` of them."""
    if tokens is None:
        raise InvalidSetError(f"set {set_id!r}: missing field 'tokens'")
    if isinstance(tokens, (str, bytes, bytearray)):
        raise InvalidSetError(
            f"set {set_id!r}: 'tokens' must be a collection of tokens, not a single "
            f"{type(tokens).__name__}"
        )
    try:
        distinct = list(dict.fromkeys(tokens))  # type: ignore[call-overload]
    except TypeError as exc:
        raise InvalidSetError(
            f"set {set_id!r}: 'tokens' must be an iterable of str or int tokens ({exc})"
        ) from None
    if not {type(tok) for tok in distinct} <= _TOKEN_TYPES:  # else: subclasses, or bad tokens
        for tok in distinct:
            if isinstance(tok, bool) or not isinstance(tok, (str, Integral)):
                raise InvalidSetError(
                    f"set {set_id!r}: token {tok!r} of type {type(tok).__name__} "
                    "is neither str nor int"
                )
    if not distinct:
        raise InvalidSetError(f"set {set_id!r}: empty set (no tokens)")
    if len(distinct) > max_size:
        raise InvalidSetError(f"set {set_id!r}: {len(distinct)} distinct tokens, more than the {max_size} whose "
                              "similarities are exactly comparable")
    return distinct


def validate_time(ts: object, index_time: float | None, what: str) -> float:
    """Check a timestamp against the index time; ``what`` names the operation in messages."""
    if ts is None:
        raise InvalidSetError(f"{what}: missing field 'ts'")
    if type(ts) not in (int, float) and (isinstance(ts, bool) or not isinstance(ts, Real)):
        raise InvalidSetError(f"{what}: timestamp {ts!r} is not a finite real number")
    if not math.isfinite(ts):
        raise InvalidSetError(f"{what}: timestamp {ts!r} is not a finite real number")
    if index_time is not None and ts < index_time:
        raise LateSetError(
            f"{what}: out-of-order timestamp {ts!r}: expected ts >= {index_time!r} (the index time)"
        )
    return ts  # type: ignore[return-value]


def validate_side(set_id: Hashable, side: object, two_stream: bool) -> str | None:
    """Check ``side`` for the join kind: ``None`` for a self-join, ``"R"``/``"S"`` otherwise."""
    if not two_stream:
        if side is not None:
            raise InvalidSetError(
                f"set {set_id!r}: side {side!r} given to a self-join (use two_stream=True)"
            )
        return None
    if side is None:
        raise InvalidSetError(f"set {set_id!r}: missing field 'side' (two-stream join)")
    if side not in SIDES:
        raise InvalidSetError(f"set {set_id!r}: side {side!r} is not one of {SIDES}")
    return side  # type: ignore[return-value]


def validate_set_id(set_id: object) -> Hashable:
    """Check that ``set_id`` is present and hashable."""
    if set_id is None:
        raise InvalidSetError("missing field 'set_id'")
    try:
        hash(set_id)
    except TypeError:
        raise InvalidSetError(f"set id {set_id!r} is not hashable") from None
    return set_id  # type: ignore[return-value]
