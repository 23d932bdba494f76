"""Cheap necessary conditions of a distance within a threshold, tested on candidate pairs in bulk.

A driver's candidates (records that share a key) are mostly not pairs: PassJoin on a given name
pairs every two records with that name, and a rule that also asks for the surname within one
edit rejects almost all of them. Computing the exact distance of each candidate costs a call per
pair (and, for token sets, the tokenising of both values); these bounds cost a few operations per
pair on numbers kept per record, and reject what cannot match before the exact test, which still
decides every pair that passes. Each is the classic count filter of its measure:

- **edits** (``levenshtein(x, y) <= k``): the *length* bound ``|len(x) - len(y)| <= k`` (an edit
  changes the length by at most one; PassJoin's length filter, Li et al. 2011) and the
  *character-set* bound ``|B(x) Δ B(y)| <= 2k``, where ``B(s) = {h(c) : c in s}`` for a map ``h``
  of characters to the 64 bits of a word (``ord(c) mod 64``). An insertion adds at most one
  element to ``B``, a deletion removes at most one, a substitution does at most one of each, so
  one edit changes ``B`` by at most two elements (the q = 1 case of the q-gram count filter,
  Gravano et al. 2001); this holds for any ``h``: collisions only weaken the bound.
- **token sets** (``jaccard(A, B) <= d``): with ``B(A)`` the bits ``h(t)`` of A's tokens, every
  bit of ``B(A)`` missing from ``B(B)`` stands for at least one token of A that is not in B, and
  distinct bits for distinct tokens, so the overlap is at most
  ``o+ = min(|A| - |B(A) - B(B)|, |B| - |B(B) - B(A)|)``. The Jaccard distance falls as the
  overlap grows, so the distance at ``o+`` is a lower bound, compared with the threshold by the
  same exact test as the distance itself (:func:`driftjoin.metric.exact.jaccard_le`).

Signatures are made per record (one pass over a run's values) and kept while the run lives.

Example::

    >>> import numpy as np
    >>> from driftjoin.metric.records import object_array
    >>> s = EditSignature.of(object_array(["smith", "smyth", "jones", None]))
    >>> within_edits(s, np.array([0, 0, 0]), s, np.array([1, 2, 3]), 1).tolist()
    [True, False, False]
    >>> t = SetSignature.of([{"12", "main", "street"}, {"12", "main", "road"}, None])
    >>> within_jaccard(t, np.array([0, 0]), t, np.array([1, 2]), 0.5).tolist()
    [True, False]
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
from numba import njit

from driftjoin.bits import popcount
from driftjoin.metric.exact import jaccard_distance, jaccard_le
from driftjoin.runs import code_points

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd

#: Length of a null (the kernel refuses a negative length before the length test).
NO_LENGTH = -1


@dataclass(frozen=True)
class EditSignature:
    """Per string: its length (:data:`NO_LENGTH` for a null) and its character-set word ``B``."""

    length: np.ndarray
    bits: np.ndarray

    @staticmethod
    def of(values: np.ndarray) -> "EditSignature":
        """The signatures of an object array of strings (None or NaN: null)."""
        n = len(values)
        length = np.full(n, NO_LENGTH, np.int64)
        bits = np.zeros(n, np.uint64)
        ok = np.nonzero(~pd.isnull(values))[0] if n else np.zeros(0, np.int64)
        strings = values[ok].tolist()
        lens = np.fromiter(map(len, strings), np.int64, len(ok))
        length[ok] = lens
        # bit ``ord(c) & 63`` of each character, OR-ed per string over the joined code points
        cp = code_points(strings)
        filled = np.nonzero(lens)[0]
        if len(filled):
            word = np.left_shift(np.uint64(1), (cp & 63).astype(np.uint64))
            bits[ok[filled]] = np.bitwise_or.reduceat(word, (np.cumsum(lens) - lens)[filled])
        return EditSignature(length, bits)

    @staticmethod
    def concat(parts: list["EditSignature"]) -> "EditSignature":
        """The signatures of the strings of ``parts``, in order."""
        return EditSignature(np.concatenate([p.length for p in parts]), np.concatenate([p.bits for p in parts]))


def within_edits(a: EditSignature, ia: np.ndarray, b: EditSignature, ib: np.ndarray, k: int) -> np.ndarray:
    """Whether strings ``a[ia[j]]`` and ``b[ib[j]]`` pass both bounds for ``k`` edits (module
    docstring); False where either is null.

    Parameters
    ----------
    a, b : signatures of two arrays of strings.
    ia, ib : the candidate pairs, as rows of ``a`` and ``b``.
    k : the edits allowed.
    """
    return _within_edits(a.length, a.bits, np.asarray(ia, np.int64), b.length, b.bits, np.asarray(ib, np.int64),
                          int(k))


@njit(cache=True)
def _within_edits(la, ba, ia, lb, bb, ib, k):  # pragma: no cover - compiled
    out = np.zeros(len(ia), np.bool_)
    for j in range(len(ia)):
        x, y = la[ia[j]], lb[ib[j]]
        if x < 0 or y < 0 or abs(x - y) > k:
            continue
        out[j] = popcount(ba[ia[j]] ^ bb[ib[j]]) <= 2 * k
    return out


@dataclass(frozen=True)
class SetSignature:
    """Per token set: its size (-1 for a null or empty set) and its token word ``B``."""

    size: np.ndarray
    bits: np.ndarray

    @staticmethod
    def of(sets: Sequence[Collection | None]) -> "SetSignature":
        """The signatures of token sets (None: null)."""
        n = len(sets)
        size = np.full(n, -1, np.int64)
        bits = np.zeros(n, np.uint64)
        for i, t in enumerate(sets):
            if t:
                size[i] = len(t)
                b = 0
                for x in t:
                    b |= 1 << (hash(x) & 63)
                bits[i] = b
        return SetSignature(size, bits)

    @staticmethod
    def concat(parts: list["SetSignature"]) -> "SetSignature":
        """The signatures of the sets of ``parts``, in order."""
        return SetSignature(np.concatenate([p.size for p in parts]), np.concatenate([p.bits for p in parts]))


def within_jaccard(a: SetSignature, ia: np.ndarray, b: SetSignature, ib: np.ndarray, d: Any) -> np.ndarray:
    """Whether token sets ``a[ia[j]]`` and ``b[ib[j]]`` may be within Jaccard distance ``d``
    (module docstring); False where either is null or empty.

    Parameters
    ----------
    a, b : signatures of two sequences of token sets.
    ia, ib : the candidate pairs, as rows of ``a`` and ``b``.
    d : the threshold (a number or a :class:`fractions.Fraction`, as the exact test takes it).
    """
    ia, ib = np.asarray(ia, np.int64), np.asarray(ib, np.int64)
    na, nb = a.size[ia], b.size[ib]
    ok = (na > 0) & (nb > 0)
    j = np.nonzero(ok)[0]
    if len(j):
        top = _overlap_bound(na[j], a.bits, ia[j], nb[j], b.bits, ib[j])
        ok[j] = jaccard_le(jaccard_distance(na[j], nb[j], top), d)
    return ok


@njit(cache=True)
def _overlap_bound(na, ba, ia, nb, bb, ib):  # pragma: no cover - compiled
    out = np.zeros(len(ia), np.int64)
    for j in range(len(ia)):
        x, y = ba[ia[j]], bb[ib[j]]
        out[j] = min(na[j] - popcount(x & ~y), nb[j] - popcount(y & ~x))
    return out


def warm_up() -> None:
    """Compile the bound kernels into numba's on-disk cache, or load them from it (setup and the
    Spark worker daemon run this once, so no task pays it)."""
    z = np.zeros(1, np.int64)
    within_edits(EditSignature(z, np.zeros(1, np.uint64)), z, EditSignature(z, np.zeros(1, np.uint64)), z, 1)
    one = SetSignature(np.ones(1, np.int64), np.ones(1, np.uint64))
    within_jaccard(one, z, one, z, 0.5)
