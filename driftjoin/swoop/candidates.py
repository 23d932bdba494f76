"""Candidate generation from the inverted index (SWOOP Algorithm 4, sections 5.2-5.5).

For a new set ``r_i`` the inverted lists ``I(v)``, ``v in r_i``, are processed in lookup
positions ``rho = 1..|r_i|``:

* list order (section 5.5): shortest list first, from a heap keyed by the current list length
  and then by the token order (later-numbered, presumably rarer tokens first); the lists of
  tokens that no valid set contains have length 0 and take the first positions, which tightens
  the bound of every later list. ``shortest_list_first=False`` processes the lists in token
  order only (the paper's "SWOOP-noopt").
* cropping (section 5.4): a set first met in list ``rho`` is at most ``ub(|r_i|, rho)`` similar
  to ``r_i`` (positional upper bound, Theorem 5.1); a pair ending at ``t`` with
  ``lb(t, k) > ub`` is irrelevant (skyband lower bound, section 5.3). Lists are ordered by end
  time and ``lb`` is non-increasing in ``t`` (Lemma 1), so the paper's tail-to-head walk that
  breaks at the first such pair keeps exactly the entries that end after
  ``Stock.crop_end(ub)``; we find that cut by bisection instead of testing entry by entry.
  Lists of at most ``_SHORT_LIST`` entries are kept whole. That is safe: an extra entry either
  was cropped at the first list it occurs in, so it is irrelevant and verification or the stock
  rejects it whatever position it is recorded with, or it was kept there and keeps that
  (first) position.
  The kept entries are the *pre-candidates*, remembered with the position ``rho`` of the list
  they were first met in (map ``M``).
* verification (lines 10-13): ``tau_o = overlap(|r_i|, |r_j|, lb(t_j + w, k))`` is the overlap a
  pre-candidate needs to stay relevant. The check stops early, before any token is compared,
  when the overlap cannot reach ``tau_o``: a set first met at position ``rho`` lacks the
  ``rho - 1`` tokens of the earlier lists, so ``o <= min(|r_i| - rho + 1, |r_j|)``. Otherwise
  the overlap is one set intersection (a C loop; in CPython this is cheaper than a Python-level
  token merge with early exit for the set sizes at hand).

Bulk verification. A new set that shares frequent tokens can have hundreds of pre-candidates;
from ``bulk_min`` pre-candidate entries on, lines 10-13 run vectorised instead: deduplication
keeping the first position, a lower bound of ``lb`` for all (``Stock.lb_floor``, possibly a
few stock changes old, hence never above the current ``lb``), the positional early stop as a
mask, and the overlaps of the survivors from the window's token buffer; ``o >= tau_o`` is
tested in its equivalent form ``sim(|r_i|, |r_j|, o) >= lb``. The bulk path may thus pass a few
more candidates than the scalar one; both pass every relevant pair, and ``Stock.insert`` makes
the exact decision, so the join result is the same.

Two-stream joins probe the index of the other side only; the caller passes that index.

Partitioned joins (:mod:`~driftjoin.swoop.partitioned`). A worker may be given a shared lower
bound (:attr:`CandidateGenerator.bound`, a :class:`~driftjoin.swoop.bound.Staircase`): ``lb``
is then the larger of the stock's and the bound's at every use, both lower bounds of the
global one. A token-space part probes only the lists of its own tokens (``own``), at the
lookup positions after the lower parts' tokens (``lower``): a pair of this part shares none of
those, so it misses them as it misses the lists looked up earlier, and a pair that shares one
belongs to a lower part and is rejected after verification.
"""

from __future__ import annotations

from bisect import bisect_left
from heapq import heapify, heappop
from collections.abc import Iterable
from itertools import chain

import numpy as np

from driftjoin.swoop.bound import Staircase
from driftjoin.swoop.index import InvertedIndex, PostingList
from driftjoin.swoop.pairs import PairKey
from driftjoin.swoop.records import SetRecord
from driftjoin.swoop.similarity import WellBehavedSimilarity
from driftjoin.swoop.stock import Stock
from driftjoin.swoop.window import Window

_NEG_INF = float("-inf")
_OVERLAP_CACHE_MAX = 1 << 16
BULK_MIN = 48
_SHORT_LIST = 2  # lists this short are taken whole: cropping them costs more than it saves


class CandidateGenerator:
    """``get_candidates(r_i)`` of Algorithm 4 over a window, an index and a stock."""

    def __init__(
        self,
        similarity: WellBehavedSimilarity,
        window: Window,
        stock: Stock,
        *,
        shortest_list_first: bool = True,
    ) -> None:
        self.similarity = similarity
        self.window = window
        self.stock = stock
        self.shortest_list_first = shortest_list_first
        self.bulk_min = BULK_MIN  # pre-candidate entries from which verification is vectorised
        self.pre_candidates = 0  # running totals, for benchmarks (section 7's measures)
        self.candidates = 0
        self.bound: Staircase | None = None  # a shared lower bound (partitioned joins)
        self._overlap_cache: dict[tuple[int, int, float], int] = {}
        self._member = np.zeros(1024, np.bool_)  # token mask of the new set (bulk path)

    def lookup_order(
        self, tokens: Iterable[int], index: InvertedIndex
    ) -> list[PostingList | None]:
        """The inverted lists of ``tokens`` in lookup order (``None``: empty list)."""
        get = index.get
        if self.shortest_list_first:
            heap = []
            for token in tokens:
                plist = get(token)
                live = 0 if plist is None else len(plist.seqs) - plist.head
                heap.append((live, -token, plist))
            heapify(heap)
            return [heappop(heap)[2] for _ in range(len(heap))]
        return [get(token) for token in sorted(tokens, reverse=True)]

    def get_candidates(
        self,
        record: SetRecord,
        index: InvertedIndex,
        own: frozenset[int] | None = None,
        lower: frozenset[int] = frozenset(),
    ) -> list[PairKey]:
        """Candidate pairs of ``record`` with the sets in ``index``, sorted in stock order.

        A token-space part passes its ``own`` tokens of the set and the ``lower`` parts'
        (module docstring); by default every token's list is probed.
        """
        stock, window, bound = self.stock, self.window, self.bound
        ubs = self.similarity.ub_profile(record.size)
        # crop each list: (lookup position rho, 0-based here; the kept entries)
        chunks: list[tuple[int, list[int]]] = []
        entries = 0
        probed = record.tokens if own is None else own
        for rho, plist in enumerate(self.lookup_order(probed, index), len(lower)):
            if plist is None:
                continue
            seqs, start = plist.seqs, plist.head
            if len(seqs) - start > _SHORT_LIST:
                cut = stock.crop_end(ubs[rho])
                if bound is not None:
                    cut = max(cut, bound.crop_end(ubs[rho]))
                if cut != _NEG_INF:
                    start = bisect_left(seqs, window.first_seq_ending_after(cut), start)
            if start < len(seqs):
                chunks.append((rho, seqs[start:]))
                entries += len(seqs) - start
        if entries >= self.bulk_min:
            return self._verify_bulk(record, chunks, entries, lower)
        M: dict[int, int] = {}  # pre-candidate -> first lookup position
        for rho, chunk in chunks:
            for seq in chunk:
                if seq not in M:
                    M[seq] = rho
        self.pre_candidates += len(M)
        return self._verify(record, M, lower)

    def _verify(
        self, record: SetRecord, M: dict[int, int], lower: frozenset[int]
    ) -> list[PairKey]:
        """Lines 10-13 of Algorithm 4 with early stop (module docstring)."""
        stock, window, sim, bound = self.stock, self.window, self.similarity.sim, self.bound
        overlap = self._overlap
        l_r = record.size
        tokens = record.tokens
        i = record.seq
        out: list[PairKey] = []
        for j, rho in M.items():
            other = window.get(j)
            l_s = other.size
            end = other.end
            lb = stock.lb(end)
            if bound is not None:
                lb = max(lb, bound.lb(end))
            tau_o = overlap(l_r, l_s, lb)
            if l_r - rho < tau_o or l_s < tau_o:  # o <= min(|r_i| - rho + 1, |r_j|), 1-based rho
                continue
            o = len(tokens & other.tokens)
            if o >= tau_o and (not lower or lower.isdisjoint(other.tokens)):
                out.append((-sim(l_r, l_s, o), -end, i, j))
        out.sort()
        self.candidates += len(out)
        return out

    def _verify_bulk(
        self,
        record: SetRecord,
        chunks: list[tuple[int, list[int]]],
        entries: int,
        lower: frozenset[int],
    ) -> list[PairKey]:
        """Vectorised :meth:`_verify` over the cropped lists (same result)."""
        window, l_r = self.window, record.size
        seqs = np.fromiter(chain.from_iterable(chunk for _, chunk in chunks), np.int64, entries)
        rhos = np.repeat(
            np.array([rho for rho, _ in chunks], np.int64),
            np.array([len(chunk) for _, chunk in chunks], np.int64),
        )
        seqs, first = np.unique(seqs, return_index=True)  # chunks are in rho order
        self.pre_candidates += len(seqs)
        l_s, ends = window.columns(seqs)
        lb = self.stock.lb_floor(ends)
        if self.bound is not None:
            lb = np.maximum(lb, self.bound.lb_array(ends))
        sim = self.similarity.sim_array
        # o >= tau_o = overlap(l_r, l_s, lb) is evaluated as sim(l_r, l_s, o) >= lb, which is
        # equivalent (property 5, sim monotone in o) and needs no correction loop
        alive = sim(l_r, l_s, np.minimum(l_r - rhos[first], l_s)) >= lb  # early stop
        seqs, l_s, lb = seqs[alive], l_s[alive], lb[alive]
        if not len(seqs):
            return []
        member = self._member
        extent = max(window.token_bound, max(record.tokens) + 1)  # window (synced), new set
        if extent > len(member):
            member = self._member = np.zeros(2 * extent, np.bool_)
        tokens = np.fromiter(record.tokens, np.int64, l_r)
        member[tokens] = True
        o = window.overlaps(seqs, member)
        member[tokens] = False
        sims = sim(l_r, l_s, o)
        ok = sims >= lb
        if lower:  # pairs that share a lower part's token are that part's
            low = np.fromiter(lower, np.int64, len(lower))
            member[low] = True
            ok &= window.overlaps(seqs, member) == 0
            member[low] = False
        sims = sims[ok].tolist()
        i = record.seq
        get = window.get
        out = [(-value, -get(j).end, i, j) for value, j in zip(sims, seqs[ok].tolist())]
        out.sort()
        self.candidates += len(out)
        return out

    def _overlap(self, l_r: int, l_s: int, lb: float) -> int:
        """``max(1, overlap(l_r, l_s, lb))``, memoised (few distinct lower bounds occur)."""
        key = (l_r, l_s, lb)
        tau_o = self._overlap_cache.get(key)
        if tau_o is None:
            if len(self._overlap_cache) >= _OVERLAP_CACHE_MAX:
                self._overlap_cache.clear()
            tau_o = max(1, self.similarity.overlap(l_r, l_s, lb))
            self._overlap_cache[key] = tau_o
        return tau_o
