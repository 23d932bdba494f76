"""Token sets as the metric cores hold them, and the global token order of prefix filtering.

A set is its distinct tokens (``str`` or ``int``; repeated tokens count once). It is held twice:

- ``tokens``: the exact set (a ``frozenset``), on which every accepted pair is finally verified;
- ``codes``: one ``int64`` per distinct token, sorted ascending, which is the *global token order*
  of prefix filtering (:mod:`driftjoin.metric.prefix`) and what the filters compute on.

Global token order (from a sample, so that every worker agrees without coordination): tokens of
the sample by ascending document frequency, rare first (ties by kind, then value), get codes
``2^62 + rank``; every other token is rarer than all of them and gets ``hash >> 2`` (a fixed
64-bit hash, pandas' ``hash_array``), below ``2^62``. Two distinct unsampled tokens may share a
code; the order is then still a total order on codes, and a shared code only ever *adds* to the
overlap computed on codes (``|f(A) & f(B)| >= |A & B|`` for the multisets of codes of any map
``f``), so filters on codes never lose a pair, and the final test on ``tokens`` is exact.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np

#: Codes of sampled tokens start here; codes of unsampled tokens are below.
SAMPLED_BASE = 1 << 62


class TokenOrder:
    """The global token order (module docstring), fitted on a sample of sets.

    Example::

        >>> order = TokenOrder.from_sample([["a", "b"], ["a", "c"], ["a"]])
        >>> c = order.codes(["a", "b", "zzz"])
        >>> bool(c[2] < c[1] < c[0])  # unseen first, then rare, frequent last
        True
    """

    def __init__(self, tokens: Sequence[str | int] = ()) -> None:
        self.tokens = np.asarray(list(tokens), dtype=object)
        self._index = None

    @staticmethod
    def from_sample(sets: Sequence[Sequence[str | int]]) -> "TokenOrder":
        """Sampled tokens by ascending document frequency, ties by (kind, value)."""
        freq = Counter(chain.from_iterable(set(s) for s in sets))
        return TokenOrder(sorted(freq, key=lambda tok: (freq[tok], isinstance(tok, str), tok)))

    def __len__(self) -> int:
        return len(self.tokens)

    def __getstate__(self) -> dict:
        return {"tokens": self.tokens}

    def __setstate__(self, state: dict) -> None:
        self.tokens, self._index = state["tokens"], None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TokenOrder) and self.tokens.tolist() == other.tokens.tolist()

    def codes(self, tokens: Sequence[str | int]) -> np.ndarray:
        """The code of each token (``int64``)."""
        import pandas as pd

        flat = np.asarray(tokens, dtype=object) if len(tokens) else np.zeros(0, dtype=object)
        if len(flat) == 0:
            return np.zeros(0, np.int64)
        out = (pd.util.hash_array(flat) >> np.uint64(2)).astype(np.int64)
        if len(self.tokens):
            if self._index is None:
                self._index = pd.Index(self.tokens)
            rank = self._index.get_indexer(flat)
            known = rank >= 0
            out[known] = SAMPLED_BASE + rank[known]
        return out


@dataclass
class TokenSets:
    """A column of token sets: ``codes[indptr[i]:indptr[i + 1]]`` (sorted) and ``tokens[i]`` of set i."""

    indptr: np.ndarray
    codes: np.ndarray
    tokens: np.ndarray

    def __len__(self) -> int:
        return len(self.tokens)

    @property
    def sizes(self) -> np.ndarray:
        return np.diff(self.indptr)

    @staticmethod
    def empty() -> "TokenSets":
        return TokenSets(np.zeros(1, np.int64), np.zeros(0, np.int64), np.zeros(0, dtype=object))

    @staticmethod
    def build(sets: Sequence[Sequence[str | int]], order: TokenOrder) -> "TokenSets":
        """Sets from validated token collections (non-empty, ``str``/``int`` tokens)."""
        distinct = [frozenset(s) for s in sets]
        tokens = np.empty(len(distinct), dtype=object)
        tokens[:] = distinct
        sizes = np.fromiter(map(len, distinct), np.int64, len(distinct))
        codes = order.codes(list(chain.from_iterable(distinct)))
        row = np.repeat(np.arange(len(distinct), dtype=np.int64), sizes)
        codes = codes[np.lexsort((codes, row))]
        return TokenSets(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64), codes, tokens)

    def take(self, idx: np.ndarray) -> "TokenSets":
        idx = np.asarray(idx, dtype=np.int64)
        sizes = self.sizes[idx]
        indptr = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
        starts = self.indptr[:-1][idx]
        flat = np.repeat(starts - indptr[:-1], sizes) + np.arange(indptr[-1], dtype=np.int64)
        return TokenSets(indptr, self.codes[flat], self.tokens[idx])

    @staticmethod
    def concat(parts: Sequence["TokenSets"]) -> "TokenSets":
        parts = [p for p in parts if len(p)] or list(parts[:1]) or [TokenSets.empty()]
        sizes = np.concatenate([p.sizes for p in parts])
        return TokenSets(np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
                         np.concatenate([p.codes for p in parts]), np.concatenate([p.tokens for p in parts]))

    def row(self, i: int) -> np.ndarray:
        return self.codes[self.indptr[i] : self.indptr[i + 1]]
