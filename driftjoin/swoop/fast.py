"""The compiled engine of :class:`~driftjoin.swoop.Swoop`: Python wrappers of the numba kernels.

:class:`FastStock` is the minimal stock of section 6 with the API of
:class:`~driftjoin.swoop.stock.Stock` (pairs in and out as ``PairKey`` tuples), and
:class:`FastCore` holds the whole join state of one :class:`~driftjoin.swoop.Swoop` (window
columns, inverted indexes, stock) and runs one insert or expiry per kernel call. The kernels
implement the same algorithm as the pure-Python reference (:mod:`~driftjoin.swoop.stock`,
:mod:`~driftjoin.swoop.candidates`, :mod:`~driftjoin.swoop.index`), which remains the engine
for user-defined similarity functions and the reference of the tests.

All state is numpy arrays, so a join pickles (the Spark operator stores it between
micro-batches). The kernels are compiled on first use and cached on disk (``cache=True``);
:func:`warm_up` compiles them explicitly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from driftjoin.swoop import _kernels as K
from driftjoin.swoop.pairs import EndKey, PairKey
from driftjoin.swoop.similarity import SIMILARITIES, WellBehavedSimilarity

_MAX_TOKENS = 2**31 - 1  # window token lists are int32
_UNKNOWN = ...  # "not cached" (Ellipsis: a singleton that survives pickling)
SCANS = ("filtered", "paper")  # scans of the inverted lists (_kernels.get_candidates)


def supports(similarity: WellBehavedSimilarity) -> bool:
    """Whether the compiled engine implements ``similarity`` (the built-in functions only)."""
    builtin = SIMILARITIES.get(similarity.name)
    return builtin is not None and type(similarity) is type(builtin)


def _grown(array: np.ndarray, size: int, axis: int = -1) -> np.ndarray:
    """``array`` copied into a larger zero-filled array (``size`` along ``axis``)."""
    shape = list(array.shape)
    old = shape[axis]
    shape[axis] = size
    out = np.zeros(shape, array.dtype)
    index = [slice(None)] * array.ndim
    index[axis] = slice(0, old)
    out[tuple(index)] = array
    return out


def _rows(n: int) -> np.ndarray:
    """Zeroed window rows ``int64[n, W_ROWS]`` starting at a 64-byte boundary (a row is 32
    bytes, so no row straddles two cache lines)."""
    width = K.W_ROWS
    buf = np.zeros(n * width + 8, np.int64)
    skip = (-buf.ctypes.data % 64) // 8
    return buf[skip : skip + n * width].reshape(n, width)


def _keys(of: np.ndarray, oi: np.ndarray, row: int, m: int) -> list[PairKey]:
    """Output rows ``row``, ``row + 1`` (sim, end; i, j) as stock keys."""
    if not m:
        return []
    return [
        (-s, -e, i, j)
        for s, e, i, j in zip(
            of[row, :m].tolist(),
            of[row + 1, :m].tolist(),
            oi[row, :m].tolist(),
            oi[row + 1, :m].tolist(),
        )
    ]


class FastStock:
    """Minimal stock ``S`` with end time index ``E`` on compiled kernels (see ``_kernels``)."""

    def __init__(self, k: int, capacity: int = 64) -> None:
        self.k = k
        self.meta = np.zeros(K.META_SIZE, np.int64)
        self.sf = np.zeros((2, 0), np.float64)
        self.si = np.zeros((2, 0), np.int64)
        self.so = np.zeros((3, 0), np.int64)
        self.of = np.zeros((4, 0), np.float64)
        self.oi = np.zeros((4, 0), np.int64)
        self._kth: PairKey | None | object = _UNKNOWN  # caches, dropped by changed()
        self._first_end: float | None | object = _UNKNOWN
        self.grow(capacity)

    # -- storage -------------------------------------------------------------------------------

    def grow(self, need_free: int) -> None:
        """Make room for at least ``need_free`` more pairs (capacity doubles)."""
        cap = self.sf.shape[1]
        free = int(self.meta[K.M_NFREE])
        if free >= need_free:
            return
        size = max(2 * cap, cap + need_free - free, 64)
        self.sf = _grown(self.sf, size)
        self.si = _grown(self.si, size)
        so = _grown(self.so, size)
        so[2, free : free + size - cap] = np.arange(cap, size)  # the new slots are free
        self.so = so
        self.meta[K.M_NFREE] = free + size - cap
        self.of = np.zeros((4, size), np.float64)
        self.oi = np.zeros((4, size), np.int64)

    def changed(self) -> None:
        """Drop the cached k-th pair and first end (after a change made by a kernel)."""
        self._kth = self._first_end = _UNKNOWN

    def _key(self, slot: int) -> PairKey:
        sf, si = self.sf, self.si
        return (-sf[0, slot].item(), -sf[1, slot].item(), si[0, slot].item(), si[1, slot].item())

    def _range(self, row: int, lo: int, hi: int) -> list[PairKey]:
        slots = self.so[row, lo:hi]
        return list(
            zip(
                (-self.sf[0, slots]).tolist(),
                (-self.sf[1, slots]).tolist(),
                self.si[0, slots].tolist(),
                self.si[1, slots].tolist(),
            )
        )

    # -- the API of stock.Stock ----------------------------------------------------------------

    def __len__(self) -> int:
        return int(self.meta[K.M_N])

    def __iter__(self) -> Iterator[PairKey]:
        """The pairs in stock order."""
        return iter(self._range(0, 0, len(self)))

    def end_index(self) -> list[EndKey]:
        """A copy of ``E`` as end time index keys (for inspection)."""
        return [(-e, -s, -i, -j) for s, e, i, j in self._range(1, 0, len(self))]

    def topk(self) -> list[PairKey]:
        """The first ``k`` pairs of ``S``."""
        return self._range(0, 0, min(self.k, len(self)))

    def kth(self) -> PairKey | None:
        """The k-th pair of ``S`` (the top-k boundary), ``None`` if ``|S| < k``."""
        kth = self._kth
        if kth is _UNKNOWN:
            kth = self._kth = (
                self._key(self.so[0, self.k - 1]) if self.meta[K.M_N] >= self.k else None
            )
        return kth  # type: ignore[return-value]

    def between(self, lo: PairKey, hi: PairKey | None) -> list[PairKey]:
        """Pairs ``p`` with ``lo < p <= hi`` in stock order (``hi=None``: no upper limit)."""
        n = len(self)
        start = self._bisect_right(lo)
        stop = n if hi is None else self._bisect_right(hi)
        return self._range(0, start, stop)

    def _bisect_right(self, key: PairKey) -> int:
        return K.s_bisect_key(
            self.sf, self.si, self.so, len(self), -float(key[0]), -float(key[1]), int(key[2]),
            int(key[3]), True,
        )

    def first_end(self) -> float | None:
        """End time of ``E[0]``, the next pair to expire (``None`` for an empty stock)."""
        first = self._first_end
        if first is _UNKNOWN:
            first = self._first_end = self.sf[1, self.so[1, 0]].item() if self.meta[K.M_N] else None
        return first  # type: ignore[return-value]

    def pair_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Similarities and end times of the stock's pairs (a partitioned join shares them)."""
        slots = self.so[0, : len(self)]
        return self.sf[0, slots], self.sf[1, slots]

    def lb(self, t: float) -> float:
        """Skyband lower bound ``lb(t, k)`` (Lemma 6.1)."""
        return K.stock_lb(self.sf, self.so, self.meta, self.k, float(t))

    def crop_end(self, ub: float) -> float:
        """End time ``T`` with ``lb(t, k) <= ub`` exactly for ``t > T`` (``-inf``: all ``t``)."""
        return K.stock_crop_end(self.sf, self.so, self.meta, self.k, float(ub))

    def lb_steps(self) -> tuple[list[float], list[float]]:
        """Steps of the staircase ``lb(t, k)`` (as ``Stock.lb_steps``), from the kernel that
        the candidate generation uses."""
        ends = np.empty(len(self), np.float64)
        sims = np.empty(len(self), np.float64)
        d = K.stock_lb_steps(self.sf, self.so, self.meta, self.k, ends, sims)
        return ends[:d].tolist(), sims[:d].tolist()

    def export(self) -> tuple[np.ndarray, np.ndarray]:
        """The pairs in stock order as ``float64[2, n]`` (similarity, end) and ``int64[2, n]``
        (``i``, ``j``): the stock's whole content (:meth:`load` restores it)."""
        slots = self.so[0, : len(self)]
        return self.sf[:, slots], self.si[:, slots]

    def load(self, sf: np.ndarray, si: np.ndarray) -> None:
        """Replace the content by :meth:`export`'s arrays (pairs in stock order)."""
        n = sf.shape[1]
        size = max(self.sf.shape[1], n, 64)
        self.sf = np.zeros((2, size), np.float64)
        self.si = np.zeros((2, size), np.int64)
        self.sf[:, :n] = sf
        self.si[:, :n] = si
        self.so = np.zeros((3, size), np.int64)
        self.so[0, :n] = np.arange(n)
        # E: end time ascending, then similarity ascending, then i and j descending
        self.so[1, :n] = np.lexsort((-si[1], -si[0], sf[0], sf[1]))
        self.so[2, : size - n] = np.arange(n, size)
        self.meta[K.M_N] = n
        self.meta[K.M_NFREE] = size - n
        if self.of.shape[1] != size:
            self.of = np.zeros((4, size), np.float64)
            self.oi = np.zeros((4, size), np.int64)
        self.changed()

    def set_index_time(self, t: float) -> list[PairKey]:
        """Remove and return (in ``E`` order) the pairs with end time ``<= t``."""
        m = K.stock_set_index_time(self.sf, self.si, self.so, self.meta, float(t), self.of, self.oi)
        self.changed()
        return _keys(self.of, self.oi, 2, m)

    def insert(self, candidates: Sequence[PairKey]) -> tuple[list[PairKey], list[PairKey]]:
        """Algorithm 6 with Algorithm 5 (as ``Stock.insert``); returns ``(added, removed)``."""
        n = len(candidates)
        if not n:
            return [], []
        self.grow(n)
        pf = np.empty((2, n), np.float64)
        pi = np.empty((2, n), np.int64)
        for x, (s, e, i, j) in enumerate(candidates):
            pf[0, x], pf[1, x], pi[0, x], pi[1, x] = -s, -e, i, j
        na, nrem = K.stock_insert_pairs(
            self.sf, self.si, self.so, self.meta, self.k, pf, pi, self.of, self.oi
        )
        self.changed()
        return _keys(self.of, self.oi, 0, na), _keys(self.of, self.oi, 2, nrem)


class Counters:
    """``Swoop.generator`` of the compiled engine: running totals for the benchmarks."""

    def __init__(self, meta: np.ndarray, shortest_list_first: bool) -> None:
        self._meta = meta
        self.shortest_list_first = shortest_list_first
        self.bulk_min = 0  # unused: the compiled verification has no separate bulk path

    @property
    def pre_candidates(self) -> int:
        return int(self._meta[K.M_PRE])

    @property
    def candidates(self) -> int:
        return int(self._meta[K.M_CAND])

    @property
    def scanned(self) -> int:
        """List entries read (after cropping)."""
        return int(self._meta[K.M_SCAN])

    @property
    def verified(self) -> int:
        """Pre-candidates whose tokens were compared."""
        return int(self._meta[K.M_VERIFY])


class FastCore:
    """Window columns, inverted indexes (one per side) and stock of one compiled SWOOP join."""

    def __init__(
        self,
        k: int,
        similarity: WellBehavedSimilarity,
        *,
        two_stream: bool = False,
        shortest_list_first: bool = True,
        scan: str = "filtered",
    ) -> None:
        if scan not in SCANS:
            raise ValueError(f"scan must be one of {SCANS}, got {scan!r}")
        self.k = k
        self.two_stream = two_stream
        self.code = K.SIM_CODES[similarity.name]
        self.stock = FastStock(k)
        self.meta = self.stock.meta
        self.meta[K.M_PAPER] = scan == "paper"
        self.generator = Counters(self.meta, shortest_list_first)
        self.ntok = 0  # token numbers covered by itok and tmark
        self.itok = np.zeros((2, 0, 4), np.int64)
        self.tmark = np.zeros(0, np.int64)
        self.pools = [np.zeros((K.P_ROWS, 1024), np.int64) for _ in range(2)]
        self.wcap = 0
        self.wi = _rows(0)
        self.wf = self.wi.view(np.float64)
        self.wtok = np.zeros(0, np.int32)
        self.scratch = np.zeros((K.SCRATCH_ROWS, 0), np.int64)
        self.cs = np.zeros(0, np.float64)
        self.kout = np.zeros(9, np.float64)
        self.bound = np.zeros((4, 0), np.float64)  # a shared lower bound (set_bound)
        self._grow_tokens(64)
        self._grow_window(1024)
        self.wtok = np.zeros(8 * 1024, np.int32)
        self._arguments()

    def _grow_tokens(self, ntok: int) -> None:
        if ntok > _MAX_TOKENS:
            raise OverflowError(f"the compiled engine numbers at most {_MAX_TOKENS} tokens")
        size = max(ntok, 2 * self.ntok)
        self.itok = _grown(self.itok, size, axis=1)
        self.tmark = _grown(self.tmark, size)
        self.ntok = size

    def _grow_window(self, npos: int) -> None:
        size = max(npos, 2 * self.wcap)
        if size <= self.wcap:
            return
        wi = _rows(size)
        wi[: self.wcap] = self.wi
        self.wi = wi
        self.wf = wi.view(np.float64)  # the end times, in the same rows
        self.scratch = np.zeros((K.SCRATCH_ROWS, size), np.int64)
        self.cs = np.zeros(size, np.float64)
        self.wcap = size

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        del state["wf"], state["_args"]  # a view of wi, and references to the arrays
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if len(self.meta) < K.META_SIZE:  # saved before the partitioned joins' meta slots
            meta = _grown(self.meta, K.META_SIZE)
            self.meta = self.stock.meta = self.generator._meta = meta
            self.bound = np.zeros((4, 0), np.float64)
        wi = _rows(len(self.wi))  # realigned
        wi[:] = self.wi
        self.wi = wi
        self.wf = wi.view(np.float64)
        if self.pools[0].ndim == 1:  # saved before list entries carried end, size and rank
            self.pools = [
                K.index_columns(self.itok, side, pool, wi, self.wf, self.wtok, self.meta)
                for side, pool in enumerate(self.pools)
            ]
        if self.scratch.shape[0] != K.SCRATCH_ROWS:  # work space of another version
            self.scratch = np.zeros((K.SCRATCH_ROWS, self.wcap), np.int64)
        self._arguments()

    def _arguments(self) -> None:
        """The kernel arguments after ``(tokens, seq, end)``, per side (rebuilt on growth)."""
        stock, pools = self.stock, self.pools
        nb = int(self.meta[K.M_NB])
        if nb and self.bound.shape[1] < nb + stock.sf.shape[1]:  # work space (``_kernels``)
            bound = np.zeros((4, 2 * (nb + stock.sf.shape[1])), np.float64)
            bound[:2, :nb] = self.bound[:2, :nb]
            self.bound = bound
        self._args = [
            (
                side, probe, self.itok, pools[side], pools[probe], self.wi, self.wf, self.wtok,
                self.tmark, self.meta, stock.sf, stock.si, stock.so, stock.of, stock.oi, self.k,
                self.code, self.generator.shortest_list_first, self.scratch, self.cs, self.kout,
                self.bound,
            )  # fmt: skip
            for side, probe in (((0, 0), (1, 1)) if not self.two_stream else ((0, 1), (1, 0)))
        ]

    def join(
        self, tokens: np.ndarray, seq: int, end: float, side: int, indexed: bool = True
    ) -> tuple[PairKey | None, list[PairKey], list[PairKey]]:
        """Join a new set (not yet in the window); ``side`` is 0 (self-join, R) or 1 (S).

        ``seq`` is its arrival number; it joins the window (and the index) if ``indexed``.
        Returns the k-th pair before the insert and the added and removed pairs that the
        change stream needs (``_kernels``'s ``join_insert``); both lists are empty when the
        top-k did not change, and then the k-th pair is not computed (``None``).
        """
        if not indexed:
            self.meta[K.M_PROBE] = 1
            try:
                return self._join(tokens, seq, end, side)
            finally:
                self.meta[K.M_PROBE] = 0
        return self._join(tokens, seq, end, side)

    def index(self, tokens: np.ndarray, seq: int, end: float, side: int) -> None:
        """Append a new set to the window and the index without probing (another worker of a
        ``"probe"`` partitioned join searches its pairs)."""
        self.meta[K.M_NOPROBE] = 1
        try:
            self._join(tokens, seq, end, side)
        finally:
            self.meta[K.M_NOPROBE] = 0

    def set_part(self, nlow: int, nhigh: int) -> None:
        """The next joins are a token-space part's: ``tokens`` = lower parts' tokens (``nlow``),
        the part's own, then higher parts' (``nhigh``) (``_kernels``' module docstring)."""
        self.meta[K.M_NLOW] = nlow
        self.meta[K.M_NHIGH] = nhigh

    def set_bound(self, ends: np.ndarray, sims: np.ndarray) -> None:
        """Prune with a shared lower bound too: the staircase ``lb(t) = sims[d]`` for the first
        ``d`` with ``t <= ends[d]`` (ends ascending, similarities descending; empty: none)."""
        n = len(ends)
        self.meta[K.M_NB] = 0
        if n > self.bound.shape[1]:
            self.bound = np.zeros((4, n), np.float64)
        self.bound[0, :n] = ends
        self.bound[1, :n] = sims
        self.meta[K.M_NB] = n
        self._arguments()

    def _join(
        self, tokens: np.ndarray, seq: int, end: float, side: int
    ) -> tuple[PairKey | None, list[PairKey], list[PairKey]]:
        code = K.join_insert(tokens, seq, end, *self._args[side])
        while code < 0:
            self._grow(code, tokens, side)
            code = K.join_insert(tokens, seq, end, *self._args[side])
        if not code:
            return None, [], []
        stock = self.stock
        meta, of, oi = self.meta, stock.of, stock.oi
        flags = int(meta[K.M_KTH])
        bs, be, bi, bj, as_, ae, ai, aj, first = self.kout.tolist()
        stock._kth = (-as_, -ae, int(ai), int(aj)) if flags & 2 else None
        stock._first_end = first if flags & 4 else None
        return (
            (-bs, -be, int(bi), int(bj)) if flags & 1 else None,
            _keys(of, oi, 0, int(meta[K.M_NADD])),
            _keys(of, oi, 2, int(meta[K.M_NREM])),
        )

    def _grow(self, code: int, tokens: np.ndarray, side: int) -> None:
        """Grow what a kernel's ``NEED_*`` return code asks for (then call it again)."""
        meta = self.meta
        if code == K.NEED_WINDOW:
            tail = int(meta[K.M_TOKTAIL]) + len(tokens)
            if tail > len(self.wtok):
                self.wtok = _grown(self.wtok, max(2 * tail, 8 * self.wcap))
            self._grow_window(max(int(meta[K.M_NPOS]), len(tokens)) + 1)
        elif code == K.NEED_TOKENS:
            self._grow_tokens(int(tokens.max()) + 1)
        elif code == K.NEED_INDEX:
            pools = self.pools
            pools[side] = K.index_repack(self.itok, side, pools[side], meta, int(meta[K.M_NEED]))
        else:
            self.stock.grow(int(meta[K.M_NEED]))
        self._arguments()

    def apply_sets(self, expire: np.ndarray, numbers: np.ndarray, offsets: np.ndarray, ends: np.ndarray,
                   sides: np.ndarray) -> None:
        """Expiries and new sets indexed without joining them, in one kernel call
        (``_kernels.apply_sets``; a logged change, :mod:`~driftjoin.swoop.delta`)."""
        x = 0
        while True:
            code, x = K.apply_sets(x, expire, numbers, offsets, ends, sides, self.itok, self.pools[0],
                                   self.pools[1], self.wi, self.wf, self.wtok, self.meta)
            if code == 0:
                return
            self._grow(code, numbers[offsets[x] : offsets[x + 1]], int(sides[x]))

    def counters(self) -> tuple[int, int, int]:
        """Pre-candidates and candidates so far, and the stamp of the last candidate search."""
        meta = self.meta
        return int(meta[K.M_PRE]), int(meta[K.M_CAND]), int(meta[K.M_STAMP])

    def set_counters(self, counters: tuple[int, ...]) -> None:
        """Restore :meth:`counters` (the stamp never goes back: the marks in the window rows and
        the token map must stay below the next stamp)."""
        meta = self.meta
        meta[K.M_PRE], meta[K.M_CAND] = counters[0], counters[1]
        meta[K.M_STAMP] = max(int(meta[K.M_STAMP]), counters[2])

    def load_stock(self, sf: np.ndarray, si: np.ndarray) -> None:
        """Replace the stock's content (:meth:`FastStock.load`)."""
        self.stock.load(sf, si)
        self._arguments()

    def expire(self, count: int, t: float) -> list[PairKey]:
        """The ``count`` oldest sets leave the window, then the pairs ending by ``t``."""
        stock = self.stock
        m = K.expire_sets(
            count, float(t), self.itok, self.pools[0], self.pools[1], self.wi, self.wf, self.wtok,
            self.meta, stock.sf, stock.si, stock.so, stock.of, stock.oi,
        )  # fmt: skip
        if not m:
            return []
        stock.changed()
        return _keys(stock.of, stock.oi, 2, m)

    def list_lengths(self, tokens: Sequence[int], side: int = 0) -> list[int]:
        """Valid entries of the inverted lists of ``tokens`` (for inspection)."""
        itok = self.itok
        return [
            int(itok[side, t, K.F_TAIL] - itok[side, t, K.F_HEAD]) if t < self.ntok else 0
            for t in tokens
        ]


def warm_up() -> None:
    """Compile (or load from the cache) every kernel by running a tiny join."""
    from driftjoin.swoop.similarity import JACCARD

    core = FastCore(2, JACCARD)
    core.join(np.array([0, 1], np.int64), 0, 1.0, 0)
    core.join(np.array([0, 1], np.int64), 1, 1.5, 0)
    core.join(np.array([1, 2], np.int64), 2, 2.0, 0)
    core.expire(1, 1.0)
    stock = core.stock
    stock.insert([(-0.5, -3.0, 5, 0)])
    stock.lb(0.0)
    stock.crop_end(0.5)
    stock.between((-1.0, -9.0, 0, 0), None)
    stock.set_index_time(9.0)
