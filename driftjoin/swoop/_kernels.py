"""Compiled (numba) kernels of the SWOOP core: the same algorithm as the pure-Python reference
(:mod:`~driftjoin.swoop.stock`, :mod:`~driftjoin.swoop.candidates`,
:mod:`~driftjoin.swoop.index`), on flat numpy arrays.

All state is numpy arrays (so it pickles and needs no numba type at the call boundary); the
Python side (:mod:`~driftjoin.swoop.fast`) owns them, grows them and converts to tuples where
the API needs pairs. Layouts:

Stock (section 6). Pairs live in a slot pool: ``sf[0, x]`` similarity, ``sf[1, x]`` end time,
``si[0, x]`` / ``si[1, x]`` the arrival numbers ``i`` (later) and ``j`` (earlier) of slot
``x``. ``so[0, :n]`` is ``S`` (slots in stock order), ``so[1, :n]`` is ``E`` (slots in end time
index order), ``so[2, :nfree]`` the free slots. ``meta[M_N]`` is ``|S|``, ``meta[M_NFREE]`` the
number of free slots. Insertion and deletion shift slot numbers only (8 bytes per pair).

Inverted index (section 5.1), one per side: ``itok[side, v, F_OFF|F_CAP|F_HEAD|F_TAIL]``
describes the list ``I(v)`` as the segment ``pool[:, off : off + cap]`` of the side's pool
whose valid entries (oldest first) are ``pool[:, head:tail]``. An entry of set ``r_j`` has three
rows: ``P_SEQ`` its window number, ``P_END`` its end time (``float64`` bits) and ``P_INFO`` its
size, the rank of ``v`` among its tokens and its signature (the constants below), so that the
filtered scan of :func:`get_candidates` reads the list alone (one sequential stream) and reads
the window row of an entry only when its bounds let it through. A full segment is compacted in
place when at most half of it is valid, otherwise moved to a segment of twice the size at the
pool's top (``meta[M_TOP0 + side]``); :func:`index_repack` rebuilds a full pool.

Window (section 3): position ``p = seq - meta[M_BASE]`` has one 32-byte row (one cache line
serves a pre-candidate): ``wi[p, W_SIZE2]`` is ``2 * size + side``, ``wi[p, W_TOFF]`` the offset
of its tokens in ``wtok`` (int32: less memory traffic), ``wi[p, W_MARK]`` the pre-candidate map
``M`` of Algorithm 4 (a stamp per call, so no clearing is needed), and ``wf[p, W_END]`` the end
time (``wf`` is a float64 view of ``wi``). Valid positions are ``meta[M_HEAD] : meta[M_NPOS]``.

Partitioned joins (:mod:`~driftjoin.swoop.partitioned`): a worker's window holds only the sets
it indexes, so its window numbers (``meta[M_BASE]`` + position, stored in the lists and as the
earlier set ``j`` of a pair) are its own, while the later set ``i`` of a pair is the global
arrival number the caller passes; both keep the arrival order, so the stock order is the same.
In the ``"probe"`` design every worker's window holds every set and ``meta[M_NOPROBE]`` makes
:func:`join_insert` index a set that another worker probes without searching its candidates.
``meta[M_PROBE]``, ``meta[M_NOPROBE]``, ``meta[M_NLOW]``, ``meta[M_NHIGH]`` and a shared lower
bound ``bound``
(``float64[4, n]``: ``bound[0:2, :meta[M_NB]]`` step end times ascending and similarities
descending, a staircase like :func:`stock_lb_steps`'s; ``bound[2:4]`` work space for at least
``meta[M_NB]`` + the stock's capacity steps) select the variants; at their zero defaults the
kernels do exactly what a single join does.

Similarity functions are selected by code (:data:`SIM_CODES`) and evaluate the same float
operations as :mod:`~driftjoin.swoop.similarity`, so the values are bit-identical.
"""

from __future__ import annotations

import math

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

from driftjoin.bits import popcount

SIM_CODES = {"jaccard": 0, "cosine": 1, "dice": 2, "overlap": 3, "hamming": 4}

# meta slots
M_N = 0  # |S|
M_NFREE = 1  # free stock slots
M_BASE = 2  # arrival number of window position 0
M_HEAD = 3  # first valid window position
M_NPOS = 4  # next window position
M_TOKTAIL = 5  # used length of wtok
M_PRE = 6  # running total of pre-candidates
M_CAND = 7  # running total of candidates
M_STAMP = 8  # stamp of the last get_candidates call
M_NADD = 9  # output: reported added pairs
M_NREM = 10  # output: reported removed pairs
M_NEED = 11  # output of a failed call: stock slots needed
M_TOP0 = 12  # pool top of index side 0 (side 1: M_TOP0 + 1)
M_KTH = 14  # output: bit 0 / 1: the stock had / has a k-th pair before / after the insert;
# bit 2: the stock is not empty
# inputs of the workers of a partitioned join (driftjoin.swoop.partitioned); all 0 in a single
# join, which never writes them
M_PROBE = 15  # 1: join the new set without indexing it (another worker indexes it)
M_NLOW = 16  # the first M_NLOW tokens belong to lower token-space parts: not probed, not indexed,
M_NHIGH = 17  # and a pair sharing one is another part's; the last M_NHIGH are not probed either
M_NB = 18  # steps of the shared lower bound in ``bound`` (0: none)
M_NOPROBE = 19  # 1: index the new set without probing (another worker finds its pairs)
M_SCAN = 20  # running total of list entries read
M_VERIFY = 21  # running total of pre-candidates whose tokens were compared
M_PAPER = 22  # 1: the paper's scan of the inverted lists, 0: the filtered one (get_candidates)
META_SIZE = 24

F_OFF, F_CAP, F_HEAD, F_TAIL = 0, 1, 2, 3
P_SEQ, P_END, P_INFO = 0, 1, 2  # rows of a list pool: window number, end time, size and rank
P_ROWS = 3
# P_INFO of an entry of set r_j in the list of token v: bits 0-15 pi (how many tokens of r_j
# have a larger number than v), bits 16-31 |r_j| (INFO_LARGE: 65535 or more, no filtering),
# bits 32-63 the signature of r_j (bit ``u & 31`` set for each of its tokens u)
INFO_LARGE = 0xFFFF
SIG_BITS = 32
SIG_KMAX = 4  # the signature bound counts buckets holding up to this many tokens of r_i
W_MARK, W_END, W_SIZE2, W_TOFF = 0, 1, 2, 3
W_ROWS = 4

NEED_INDEX = -1  # return codes of join_insert: grow the index pool / stock / window and
NEED_STOCK = -2  # token arrays, then call again
NEED_WINDOW = -3
NEED_TOKENS = -4
SCRATCH_ROWS = 11  # rows of join_insert's work space

_COMPACT_MIN = 1024  # window compaction, as in window.py
_NEG_INF = -np.inf


@intrinsic
def _prefetch(typingctx, arr, idx):
    """Hint the CPU to load the cache line of ``arr[idx]`` (row ``idx`` of a 2-d array)."""
    sig = types.void(arr, idx)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        ary = context.make_array(aryty)(context, builder, args[0])
        index = [args[1]] + [context.get_constant(types.intp, 0)] * (aryty.ndim - 1)
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, index, wraparound=False)
        i8p = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        builder.call(fn, [i8p, i32(0), i32(3), i32(1)])  # read, high locality, data cache
        return context.get_dummy_value()

    return sig, codegen


_AHEAD = 8  # list entries whose window row is prefetched ahead of the current one


# -- similarity functions ------------------------------------------------------------------


@njit(cache=True, inline="always")
def sim(code, l_r, l_s, o):
    """``sim(l_r, l_s, o)`` of similarity ``code`` (same float operations as similarity.py)."""
    if code == 0:
        return o / (l_r + l_s - o)
    if code == 1:
        return math.sqrt(o * o / (l_r * l_s))
    if code == 2:
        return 2 * o / (l_r + l_s)
    if code == 3:
        return float(o)
    if o:
        return 1.0 / (1 + l_r + l_s - 2 * o)
    return 0.0


@njit(cache=True)
def overlap(code, l_r, l_s, tau):
    """``WellBehavedSimilarity.overlap``: the minimum ``o`` with ``sim(l_r, l_s, o) >= tau``."""
    if tau <= 0:
        return 0
    top = min(l_r, l_s)
    if code == 0:
        est = tau / (1.0 + tau) * (l_r + l_s)
    elif code == 1:
        est = tau * math.sqrt(l_r * l_s)
    elif code == 2:
        est = tau * (l_r + l_s) / 2.0
    elif code == 3:
        est = tau
    else:
        est = max(1.0, (l_r + l_s - 1.0 / tau + 1.0) / 2.0)
    if est > top:
        o = top + 1
    else:
        o = max(0, int(math.ceil(est)))
    while o > 0 and sim(code, l_r, l_s, o - 1) >= tau:
        o -= 1
    while o <= top and sim(code, l_r, l_s, o) < tau:
        o += 1
    return o


# -- stock order and bisection ---------------------------------------------------------------


@njit(cache=True, inline="always")
def _s_lt(sf, si, a, b):
    """Slot ``a`` precedes slot ``b`` in stock order (sim desc, end desc, i asc, j asc)."""
    if sf[0, a] != sf[0, b]:
        return sf[0, a] > sf[0, b]
    if sf[1, a] != sf[1, b]:
        return sf[1, a] > sf[1, b]
    if si[0, a] != si[0, b]:
        return si[0, a] < si[0, b]
    return si[1, a] < si[1, b]


@njit(cache=True, inline="always")
def _e_lt(sf, si, a, b):
    """Slot ``a`` precedes slot ``b`` in end time index order (end asc, sim asc, i, j desc)."""
    if sf[1, a] != sf[1, b]:
        return sf[1, a] < sf[1, b]
    if sf[0, a] != sf[0, b]:
        return sf[0, a] < sf[0, b]
    if si[0, a] != si[0, b]:
        return si[0, a] > si[0, b]
    return si[1, a] > si[1, b]


@njit(cache=True)
def _s_bisect(sf, si, so, lo, hi, c):
    """First position ``x`` in ``S[lo:hi]`` with ``S[x] >= c`` (``bisect_left``)."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if _s_lt(sf, si, so[0, mid], c):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _e_bisect(sf, si, so, lo, hi, c):
    """First position ``x`` in ``E[lo:hi]`` with ``E[x] >= c`` in end time index order."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if _e_lt(sf, si, so[1, mid], c):
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _e_first_end_ge(sf, so, lo, hi, t):
    """First position in ``E[lo:hi]`` whose pair ends at ``t`` or later."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if sf[1, so[1, mid]] < t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _e_first_end_gt(sf, so, lo, hi, t):
    """First position in ``E[lo:hi]`` whose pair ends after ``t``."""
    while lo < hi:
        mid = (lo + hi) >> 1
        if sf[1, so[1, mid]] <= t:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def _s_first_sim_le(sf, so, n, ub):
    """First position in ``S`` whose similarity is at most ``ub``."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        if sf[0, so[0, mid]] > ub:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True)
def s_bisect_key(sf, si, so, n, sim, end, i, j, right):
    """``bisect_left`` (``bisect_right`` if ``right``) of the pair ``(sim, end, i, j)`` in ``S``."""
    lo, hi = 0, n
    while lo < hi:
        mid = (lo + hi) >> 1
        x = so[0, mid]
        if sf[0, x] != sim:
            below = sf[0, x] > sim
        elif sf[1, x] != end:
            below = sf[1, x] > end
        elif si[0, x] != i:
            below = si[0, x] < i
        elif si[1, x] != j:
            below = si[1, x] < j
        else:
            below = right
        if below:
            lo = mid + 1
        else:
            hi = mid
    return lo


# -- stock operations ------------------------------------------------------------------------


@njit(cache=True)
def stock_lb(sf, so, meta, k, t):
    """Skyband lower bound ``lb(t, k)`` (Lemma 6.1), ``0.0`` below ``k`` pairs."""
    n = meta[M_N]
    x = k - 1 + _e_first_end_ge(sf, so, 0, n, t)
    return sf[0, so[0, x]] if x < n else 0.0


@njit(cache=True)
def stock_lb_steps(sf, so, meta, k, st_end, st_sim):
    """The steps of the staircase ``lb(t, k)`` (Figure 6; the aligned pairs of Figure 9):
    ``lb(t) = st_sim[d]`` for the first ``d`` with ``t <= st_end[d]``, ``0.0`` after the last.
    ``st_sim`` are the distinct similarities of ``S[k-1:]`` (descending); a similarity ``v``
    holds until the end of ``E[x - k]``, ``x`` the number of pairs with similarity ``>= v``
    (Lemma 6.1). Returns the number of steps ``D``; ``O(D log |S|)``."""
    n = meta[M_N]
    d = 0
    x = k - 1
    while x < n:
        v = sf[0, so[0, x]]
        lo, hi = x + 1, n  # first position with a smaller similarity
        while lo < hi:
            mid = (lo + hi) >> 1
            if sf[0, so[0, mid]] >= v:
                lo = mid + 1
            else:
                hi = mid
        x = lo
        st_end[d] = sf[1, so[1, x - k]]
        st_sim[d] = v
        d += 1
    return d


@njit(cache=True)
def stock_crop_end(sf, so, meta, k, ub):
    """End time ``T`` with ``lb(t, k) <= ub`` exactly for ``t > T`` (``-inf``: all ``t``)."""
    u = _s_first_sim_le(sf, so, meta[M_N], ub) - k + 1
    return sf[1, so[1, u - 1]] if u > 0 else _NEG_INF


@njit(cache=True)
def _alloc(so, meta):
    meta[M_NFREE] -= 1
    return so[2, meta[M_NFREE]]


@njit(cache=True)
def _free(so, meta, slot):
    so[2, meta[M_NFREE]] = slot
    meta[M_NFREE] += 1


@njit(cache=True)
def _row_insert(so, row, n, pos, slot):
    for x in range(n, pos, -1):
        so[row, x] = so[row, x - 1]
    so[row, pos] = slot


@njit(cache=True)
def _row_delete(so, row, n, pos):
    for x in range(pos, n - 1):
        so[row, x] = so[row, x + 1]


@njit(cache=True)
def _add(sf, si, so, meta, slot):
    n = meta[M_N]
    _row_insert(so, 0, n, _s_bisect(sf, si, so, 0, n, slot), slot)
    _row_insert(so, 1, n, _e_bisect(sf, si, so, 0, n, slot), slot)
    meta[M_N] = n + 1


@njit(cache=True)
def _emit(sf, si, slot, of, oi, row, m):
    of[row, m] = sf[0, slot]
    of[row + 1, m] = sf[1, slot]
    oi[row, m] = si[0, slot]
    oi[row + 1, m] = si[1, slot]


@njit(cache=True)
def stock_set_index_time(sf, si, so, meta, t, of, oi):
    """Remove the pairs ending at or before ``t``; they go to ``of/oi[2:4, :m]`` in ``E``
    order. Returns ``m``."""
    n = meta[M_N]
    m = _e_first_end_gt(sf, so, 0, n, t)
    if m == 0:
        return 0
    for x in range(m):
        _emit(sf, si, so[1, x], of, oi, 2, x)
    for x in range(m, n):
        so[1, x - m] = so[1, x]
    w = 0
    for x in range(n):
        slot = so[0, x]
        if sf[1, slot] > t:
            so[0, w] = slot
            w += 1
        else:
            _free(so, meta, slot)
    meta[M_N] = n - m
    return m


@njit(cache=True)
def _cleanup(sf, si, so, meta, s, e, t_bound, maxe, stop, of, oi, nrem):
    """Algorithm 5 from the aligned position ``(E[e], S[s])`` (as ``Stock._cleanup``)."""
    n = meta[M_N]
    e_stop = _e_first_end_gt(sf, so, e, n, maxe)  # E[e_stop:] ends after maxe
    s_stop = n if stop < 0 else _s_bisect(sf, si, so, s, n, stop)
    while e < e_stop and s < s_stop:
        ek = so[1, e]
        if _s_lt(sf, si, so[0, s], ek):  # E[e] ranks behind S[s]: at least k dominate it
            x = _s_bisect(sf, si, so, s, n, ek)
            _row_delete(so, 1, n, e)
            _row_delete(so, 0, n, x)
            n -= 1
            meta[M_N] = n
            _emit(sf, si, ek, of, oi, 2, nrem)
            nrem += 1
            _free(so, meta, ek)
            e_stop -= 1
            if x < s_stop:
                s_stop -= 1
        else:
            s += 1
            e += 1
            t_bound = sf[1, so[1, e - 1]]
    return s, e, t_bound, nrem


@njit(cache=True)
def stock_insert(sf, si, so, meta, k, cands, nc, added, of, oi):
    """Algorithm 6 with Algorithm 5 (as ``Stock.insert``).

    ``cands[:nc]`` are allocated slots holding the candidates, sorted in stock order; rejected
    ones are freed. The added slots go to ``added[:na]``, the removed pairs to
    ``of/oi[2:4, :nrem]``. Returns ``(na, nrem)``.
    """
    na = 0
    nrem = 0
    i = 0
    # lines 2-4: while |S| < k every pair is in the top-k, hence relevant
    while i < nc and meta[M_N] < k:
        _add(sf, si, so, meta, cands[i])
        added[na] = cands[i]
        na += 1
        i += 1
    while i < nc:
        n = meta[M_N]
        # lines 5-7 (stock minimal here): align (E[e], S[s]) at the next candidate
        s = _s_bisect(sf, si, so, 0, n, cands[i])
        if s >= n:
            break
        if s < k:
            s, e, t_bound = k - 1, 0, _NEG_INF
        else:
            e = s - k + 1
            t_bound = sf[1, so[1, e - 1]]
        maxe = _NEG_INF
        while True:
            # lines 9-11: insert the relevant candidates that precede S[s]
            while i < nc and _s_lt(sf, si, cands[i], so[0, s]):
                c = cands[i]
                i += 1
                if sf[1, c] > t_bound:
                    _add(sf, si, so, meta, c)
                    added[na] = c
                    na += 1
                    if sf[1, c] > maxe:
                        maxe = sf[1, c]
                else:
                    _free(so, meta, c)
            # lines 12-15: Algorithm 5 until the next candidate's turn or a clean stock
            stop = cands[i] if i < nc else -1
            s, e, t_bound, nrem = _cleanup(
                sf, si, so, meta, s, e, t_bound, maxe, stop, of, oi, nrem
            )
            if s >= meta[M_N] or sf[1, so[1, e]] > maxe:
                break
        if s >= meta[M_N]:
            break
    # lines 16-19: candidates behind the last pair of S (the stock is minimal again)
    while i < nc:
        c = cands[i]
        i += 1
        if sf[1, c] > sf[1, so[1, meta[M_N] - k]]:
            _add(sf, si, so, meta, c)
            added[na] = c
            na += 1
        else:
            _free(so, meta, c)
    return na, nrem


@njit(cache=True)
def _sort_slots(sf, si, a, n, tmp):
    """Sort slots ``a[:n]`` in stock order (insertion sort; bottom-up merge sort when long)."""
    if n <= 24:
        for x in range(1, n):
            v = a[x]
            y = x - 1
            while y >= 0 and _s_lt(sf, si, v, a[y]):
                a[y + 1] = a[y]
                y -= 1
            a[y + 1] = v
        return
    width = 1
    src, dst = a, tmp
    while width < n:
        lo = 0
        while lo < n:
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            p, q, w = lo, mid, lo
            while p < mid and q < hi:
                if _s_lt(sf, si, src[q], src[p]):
                    dst[w] = src[q]
                    q += 1
                else:
                    dst[w] = src[p]
                    p += 1
                w += 1
            while p < mid:
                dst[w] = src[p]
                p += 1
                w += 1
            while q < hi:
                dst[w] = src[q]
                q += 1
                w += 1
            lo = hi
        src, dst = dst, src
        width *= 2
    if src is not a:
        for x in range(n):
            a[x] = src[x]


@njit(cache=True)
def stock_insert_pairs(sf, si, so, meta, k, pf, pi, of, oi):
    """``Stock.insert`` for pairs given as arrays (``pf[0]`` sim, ``pf[1]`` end, ``pi[0]``
    i, ``pi[1]`` j), sorted in stock order; needs ``len(pf[0])`` free slots. Added pairs go to
    ``of/oi[0:2, :na]``, removed ones to ``of/oi[2:4, :nrem]``; returns ``(na, nrem)``."""
    nc = pf.shape[1]
    cands = np.empty(nc, np.int64)
    for x in range(nc):
        c = _alloc(so, meta)
        sf[0, c] = pf[0, x]
        sf[1, c] = pf[1, x]
        si[0, c] = pi[0, x]
        si[1, c] = pi[1, x]
        cands[x] = c
    slots = np.empty(nc, np.int64)
    na, nrem = stock_insert(sf, si, so, meta, k, cands, nc, slots, of, oi)
    for x in range(na):
        _emit(sf, si, slots[x], of, oi, 0, x)
    return na, nrem


# -- inverted index --------------------------------------------------------------------------


@njit(cache=True)
def _index_room(itok, side, pool, top, tokens):
    """Pool entries that appending a set with ``tokens`` may need at the pool top."""
    need = 0
    for t in tokens:
        off, cap, tail = itok[side, t, F_OFF], itok[side, t, F_CAP], itok[side, t, F_TAIL]
        if tail == off + cap and not (cap > 0 and tail - itok[side, t, F_HEAD] <= cap // 2):
            need += max(4, 2 * cap)
    return top + need <= pool.shape[1], need


@njit(cache=True, inline="always")
def _move_entries(pool, src, dst, n):
    """Copy ``n`` list entries (all three rows) from ``src`` to ``dst`` (``dst <= src`` or apart)."""
    for r in range(P_ROWS):
        for x in range(n):
            pool[r, dst + x] = pool[r, src + x]


@njit(cache=True)
def _index_append(itok, side, pool, meta, t, seq, end, info):
    off, cap = itok[side, t, F_OFF], itok[side, t, F_CAP]
    head, tail = itok[side, t, F_HEAD], itok[side, t, F_TAIL]
    if tail == off + cap:
        live = tail - head
        if cap > 0 and live <= cap // 2:  # compact in place
            _move_entries(pool, head, off, live)
        else:  # move to a segment of twice the size at the pool top
            top = meta[M_TOP0 + side]
            _move_entries(pool, head, top, live)
            off = top
            cap = max(4, 2 * cap)
            meta[M_TOP0 + side] = top + cap
            itok[side, t, F_OFF] = off
            itok[side, t, F_CAP] = cap
        head = off
        tail = off + live
        itok[side, t, F_HEAD] = head
    pool[P_SEQ, tail] = seq
    pool[P_END].view(np.float64)[tail] = end
    pool[P_INFO, tail] = info
    itok[side, t, F_TAIL] = tail + 1


@njit(cache=True)
def index_repack(itok, side, pool, meta, extra):
    """A new pool for ``side`` holding every list with room to grow, plus ``extra`` entries."""
    ntok = itok.shape[1]
    total = 0
    for t in range(ntok):
        live = itok[side, t, F_TAIL] - itok[side, t, F_HEAD]
        if live:
            total += max(4, 2 * live)
    out = np.empty((P_ROWS, max(1024, 2 * (total + extra))), np.int64)
    top = 0
    for t in range(ntok):
        head, tail = itok[side, t, F_HEAD], itok[side, t, F_TAIL]
        live = tail - head
        cap = max(4, 2 * live) if live else 0
        for r in range(P_ROWS):
            for x in range(live):
                out[r, top + x] = pool[r, head + x]
        itok[side, t, F_OFF] = top
        itok[side, t, F_CAP] = cap
        itok[side, t, F_HEAD] = top
        itok[side, t, F_TAIL] = top + live
        top += cap
    meta[M_TOP0 + side] = top
    return out


@njit(cache=True, inline="always")
def _signature(tokens):
    """The signature of a set: bit ``u & 31`` for each token ``u``."""
    sig = 0
    for x in range(len(tokens)):
        sig |= 1 << (tokens[x] & (SIG_BITS - 1))
    return sig


@njit(cache=True, inline="always")
def _info(lr, pi, sig):
    """``P_INFO`` of an entry (module constants)."""
    if lr >= INFO_LARGE:
        return (sig << 32) | (INFO_LARGE << 16)
    return (sig << 32) | (lr << 16) | pi


@njit(cache=True, inline="always")
def new_overlap_bound(info, a, b, m1, m2, m3, m4):
    """An upper bound of ``|r_i & r_j|`` for the set ``r_j`` of a list entry (``info``, not
    ``INFO_LARGE``) met first in the list of token ``v`` of ``r_i`` (``get_candidates``): the
    tokens it may share are ``v`` and the available ones, ``a`` of them with a larger number
    than ``v`` and ``b`` with a smaller; ``m1`` ... ``m4`` are the signature buckets holding at
    least 1 ... 4 available tokens (``m1 = -1``: no signature bound)."""
    ls = (info >> 16) & INFO_LARGE
    pi = info & INFO_LARGE
    o = 1 + min(pi, a) + min(ls - pi - 1, b)
    if m1 != -1:
        sj = info >> 32
        o = min(o, 1 + popcount(sj & m1) + popcount(sj & m2) + popcount(sj & m3)
                + popcount(sj & m4))
    return o


@njit(cache=True)
def _rank_desc(tokens, x):
    """``pi``: how many of the (distinct) ``tokens`` have a larger number than ``tokens[x]``."""
    v = tokens[x]
    c = 0
    for y in range(len(tokens)):
        if tokens[y] > v:
            c += 1
    return c


@njit(cache=True)
def _ranks_desc(tokens, out):
    """:func:`_rank_desc` of every token into ``out[:len(tokens)]`` (``O(n log n)`` when long)."""
    n = len(tokens)
    if n <= 32:
        for x in range(n):
            out[x] = _rank_desc(tokens, x)
        return
    asc = np.argsort(tokens)
    for q in range(n):
        out[asc[q]] = n - 1 - q


@njit(cache=True)
def index_columns(itok, side, seqs, wi, wf, wtok, meta):
    """The list entries of a pool of arrival numbers only (``int64[n]``, a join saved before the
    entries carried their set's end time, size and token rank) as a pool of this layout."""
    out = np.zeros((P_ROWS, len(seqs)), np.int64)
    out[P_SEQ] = seqs
    ends = out[P_END].view(np.float64)
    base = meta[M_BASE]
    for t in range(itok.shape[1]):
        for y in range(itok[side, t, F_HEAD], itok[side, t, F_TAIL]):
            p = seqs[y] - base
            ls = wi[p, W_SIZE2] >> 1
            off = wi[p, W_TOFF]
            ends[y] = wf[p, W_END]
            pi = 0
            sig = 0
            for z in range(off, off + ls):
                u = wtok[z]
                if u > t:
                    pi += 1
                sig |= 1 << (u & (SIG_BITS - 1))
            out[P_INFO, y] = _info(ls, pi, sig)
    return out


# -- window expiry ---------------------------------------------------------------------------


@njit(cache=True)
def expire_sets(count, t, itok, pool0, pool1, wi, wf, wtok, meta, sf, si, so, of, oi):
    """The ``count`` oldest valid sets leave (their index entries are at the list heads), then
    the stock pairs ending by ``t`` (:func:`stock_set_index_time`). Returns their number."""
    _expire_window(count, itok, wi, wtok, meta)
    return stock_set_index_time(sf, si, so, meta, t, of, oi)


@njit(cache=True)
def _expire_window(count, itok, wi, wtok, meta):
    """The ``count`` oldest valid sets leave the window and the heads of their lists."""
    head = meta[M_HEAD]
    for p in range(head, head + count):
        side = wi[p, W_SIZE2] & 1
        off = wi[p, W_TOFF]
        for x in range(off, off + (wi[p, W_SIZE2] >> 1)):
            tok = wtok[x]
            if itok[side, tok, F_HEAD] == itok[side, tok, F_TAIL]:
                continue  # a token the set is not indexed under (another token-space part's)
            h = itok[side, tok, F_HEAD] + 1
            if h == itok[side, tok, F_TAIL]:  # empty: reset to the segment start
                h = itok[side, tok, F_OFF]
                itok[side, tok, F_TAIL] = h
            itok[side, tok, F_HEAD] = h
    head += count
    meta[M_HEAD] = head
    npos = meta[M_NPOS]
    if head >= _COMPACT_MIN and 2 * head >= npos:  # compact the window columns
        live = npos - head
        first = wi[head, W_TOFF] if live else meta[M_TOKTAIL]
        ntok = meta[M_TOKTAIL] - first
        for x in range(ntok):
            wtok[x] = wtok[first + x]
        for p in range(live):
            for r in range(W_ROWS):
                wi[p, r] = wi[head + p, r]  # (the end time too: wf is a view of wi)
            wi[p, W_TOFF] -= first
        meta[M_TOKTAIL] = ntok
        meta[M_BASE] += head
        meta[M_HEAD] = 0
        meta[M_NPOS] = live


# -- candidate generation (Algorithm 4) and the whole insert --------------------------------


@njit(cache=True)
def _lookup_order(tokens, itok, pside, lens, order, shortest_first):
    """Lists in lookup order (section 5.5): shortest first, then later-numbered tokens first.

    A stable sort of the positions by (length, -token), or by -token alone: insertion sort for
    short sets, two stable merge sorts (-token, then length) when long: ``O(n log n)``, where
    insertion sort is quadratic (about 2.5 s for a set of 70,000 tokens numbered in ascending
    order, its worst case)."""
    lr = len(tokens)
    for x in range(lr):
        t = tokens[x]
        lens[x] = itok[pside, t, F_TAIL] - itok[pside, t, F_HEAD]
        order[x] = x
    if lr > 32:
        neg = np.empty(lr, np.int64)
        for x in range(lr):
            neg[x] = -tokens[x]
        by_token = np.argsort(neg, kind="mergesort")
        if not shortest_first:
            order[:lr] = by_token
            return
        by_len = np.argsort(lens[:lr][by_token], kind="mergesort")
        for x in range(lr):
            order[x] = by_token[by_len[x]]
        return
    for x in range(1, lr):  # insertion sort by (length, -token) or by -token
        v = order[x]
        y = x - 1
        while y >= 0:
            u = order[y]
            if shortest_first and lens[u] != lens[v]:
                before = lens[v] < lens[u]
            else:
                before = tokens[v] > tokens[u]
            if not before:
                break
            order[y + 1] = u
            y -= 1
        order[y + 1] = v


@njit(cache=True)
def _bound_crop_end(bound, nb, ub):
    """:func:`stock_crop_end` of the staircase ``bound``: the end of its last step above ``ub``."""
    lo, hi = 0, nb  # first step with similarity <= ub
    while lo < hi:
        mid = (lo + hi) >> 1
        if bound[1, mid] > ub:
            lo = mid + 1
        else:
            hi = mid
    return bound[0, lo - 1] if lo > 0 else _NEG_INF


@njit(cache=True)
def _lb_envelope(st_end, st_sim, n, bound, nb):
    """The steps of ``max(lb, shared bound)`` from both staircases, into ``bound[2:4]``;
    returns their number. Both are non-increasing, so their maximum is too."""
    out_e, out_s = bound[2], bound[3]
    i = j = m = 0
    while i < n or j < nb:
        ea = st_end[i] if i < n else np.inf
        eb = bound[0, j] if j < nb else np.inf
        e = min(ea, eb)
        v = max(st_sim[i] if i < n else 0.0, bound[1, j] if j < nb else 0.0)
        if m and out_s[m - 1] == v:
            out_e[m - 1] = e
        else:
            out_e[m] = e
            out_s[m] = v
            m += 1
        if ea == e:
            i += 1
        if eb == e:
            j += 1
    return m


@njit(cache=True, inline="always")
def _bit_add(bit, n, i, dv):
    """Fenwick tree ``bit[1:n + 1]``: add ``dv`` at position ``i`` (1-based)."""
    while i <= n:
        bit[i] += dv
        i += i & -i


@njit(cache=True, inline="always")
def _bit_sum(bit, i):
    """Fenwick tree: the sum of positions ``1..i``."""
    s = 0
    while i > 0:
        s += bit[i]
        i -= i & -i
    return s


@njit(cache=True, inline="always")
def _lb_step(st_end, nsteps, d, t_end):
    """The first step ``d' >= d`` of the staircase that covers ``t_end`` (``lb`` is
    ``st_sim[d']``, or ``0.0`` at ``d' == nsteps``)."""
    while d < nsteps and st_end[d] < t_end:
        d += 1
    return d


@njit(cache=True)
def _lb_step_of(st_end, nsteps, t_end):
    """The first step ``d`` with ``t_end <= st_end[d]`` (``nsteps``: none), by bisection."""
    lo, hi = 0, nsteps
    while lo < hi:
        mid = (lo + hi) >> 1
        if st_end[mid] < t_end:
            lo = mid + 1
        else:
            hi = mid
    return lo


@njit(cache=True, inline="always")
def _verify(code, lr, ls, lb, off, wtok, tmark, stamp, nlow):
    """Overlap of the new set (tokens marked ``stamp`` in ``tmark``) with the window set whose
    ``ls`` tokens start at ``wtok[off]``, counted while ``tau_o = max(1, overlap(lb))`` is in
    reach; returns it, or ``-1`` when it falls short (or the set shares a lower part's token)."""
    tau = overlap(code, lr, ls, lb)
    if tau < 1:
        tau = 1
    o = 0
    if nlow:
        for z in range(ls):
            m = tmark[wtok[off + z]]
            if m == stamp:
                o += 1
            elif m == -stamp:  # shares a lower part's token: that part's pair
                return -1
            elif o + ls - z - 1 < tau:
                return -1
    else:
        for z in range(ls):
            if tmark[wtok[off + z]] == stamp:
                o += 1
            elif o + ls - z - 1 < tau:
                return -1
    return o if o >= tau else -1


@njit(cache=True)
def get_candidates(
    tokens, pside, itok, pool, wi, wf, wtok, tmark, meta, sf, so, k, code, shortest_first,
    cj, cs, lens, order, st_end, st_sim, bound, work,
):
    """Algorithm 4 for a set with ``tokens``: candidates to ``cj`` (window positions) and ``cs``
    (similarities), in no particular order. Returns their number and the pre-candidates'.

    Verification (lines 10-13): ``tau_o = max(1, overlap(|r_i|, |r_j|, lb(t_j + w)))``,
    counting stops as soon as ``tau_o`` is out of reach. ``lb`` is read off the steps of the
    staircase (:func:`stock_lb_steps`, computed once per call), walked along each list, whose
    entries come in ascending end time.

    Two scans of a list (``meta[M_PAPER]``), with the same results:

    * ``"paper"`` (1): Algorithm 4 as written. Cropping (section 5.4): list ``rho`` keeps the
      entries ending after ``crop_end(ub(|r_i|, rho))``, found by bisection (``lb`` is
      non-increasing, Lemma 1). Every entry kept is a pre-candidate whose window row is read
      (to deduplicate it in the map ``M``, then for its size and tokens); before comparing
      tokens it is dropped when even ``o = min(|r_i| - rho + 1, |r_j|)`` (1-based ``rho``)
      falls short of ``lb`` (tested as ``sim(...) < lb``, the same condition as
      ``o < tau_o``, property 5).
    * ``"filtered"`` (0, the default) reads only the list itself while it scans. The list is
      scanned from tail to head and the scan stops at the first entry with
      ``lb(t_j + w) > ub(|r_i|, rho)`` (the paper's stop condition: the same entries as the
      crop, without a bisection). An entry carries its set's end time, size, rank ``pi``
      (how many tokens of ``r_j`` have a larger number than the list's token ``v``) and
      signature (``P_INFO``), and is dropped unless
      ``sim(|r_i|, |r_j|, new_overlap_bound(...)) >= lb``: an upper bound of the overlap of a
      set first met in this list, whose common tokens are ``v`` and the *available* tokens of
      ``r_i`` (those not in an earlier list nor a lower part's): at most ``min(pi, a)`` of
      them before ``v`` in token number order and ``min(|r_j| - pi - 1, b)`` after (``a`` and
      ``b`` count the available tokens on either side of ``v``), and at most as many as fall
      into the signature's buckets. It never exceeds the paper's ``min(|r_i| - rho + 1,
      |r_j|)`` (``1 + a + b = |r_i| - rho + 1``), so it drops every entry the paper's test
      drops, and many more (with shortest lists first and tokens numbered by first
      appearance, a set met in a long list shares few tokens after ``v``: the prefix filter of
      threshold joins, with ``lb`` as the threshold). It is exact: a set dropped in the first
      list it appears in is irrelevant (the bound holds there); met again in a later list,
      where the bound need not hold, it is dropped again or verified, and verification is
      exact. The survivors' rows are then read (prefetched) in a second pass, deduplicated and
      verified as in the paper.

    A pre-candidate is verified when it is first met (when it enters the map ``M``) rather
    than in a second loop over ``M``: its lookup position is final then and ``lb`` does not
    change during the call, so the result is the same and the window row is read once.

    Partitioned joins (module docstring): ``lb`` is the larger of the stock's and the shared
    ``bound``'s (both are lower bounds of the global one), from the steps of their maximum; in
    a token-space part only the lists of the part's own tokens are probed, at the lookup
    positions after the lower parts' tokens (a pair of this part shares none of them, so it
    misses them as it misses earlier lists), and a pair that shares a lower part's token
    (marked ``-stamp``) is rejected.

    ``work`` (``int64[5, n]``, ``n > |r_i|`` and at least the window's capacity) is work space.
    """
    lr = len(tokens)
    nlow = meta[M_NLOW]
    nown = lr - nlow - meta[M_NHIGH]
    nb = meta[M_NB]
    paper = meta[M_PAPER] != 0
    stamp = meta[M_STAMP] + 1
    meta[M_STAMP] = stamp
    base = meta[M_BASE]
    for x in range(lr):
        tmark[tokens[x]] = stamp
    for x in range(nlow):
        tmark[tokens[x]] = -stamp
    own = tokens[nlow : nlow + nown]
    _lookup_order(own, itok, pside, lens, order, shortest_first)
    nsteps = stock_lb_steps(sf, so, meta, k, st_end, st_sim)  # the stock is fixed until the end
    if nb:
        nsteps = _lb_envelope(st_end, st_sim, nsteps, bound, nb)
        st_end, st_sim = bound[2], bound[3]
    seqs = pool[P_SEQ]
    ends = pool[P_END].view(np.float64)
    infos = pool[P_INFO]
    if not paper:  # each list's scan starts at its tail, scattered over a large pool: ask for all
        for x in range(nown):  # of them now, so that their cache misses overlap
            if lens[x]:
                tail = itok[pside, own[x], F_TAIL] - 1
                _prefetch(ends, tail)
                _prefetch(infos, tail)
    survivors, steps, ranks, bit, buckets = work[0], work[1], work[2], work[3], work[4]
    avail = lr - nlow  # tokens of r_i a set first met in the current list may share
    m1 = m2 = m3 = m4 = 0  # signature buckets holding at least 1, 2, 3, 4 available tokens
    if not paper:  # the available tokens by rank (own tokens whose list is empty are not)
        _ranks_desc(tokens, ranks)
        for x in range(lr + 1):
            bit[x] = 0
        for x in range(SIG_BITS):
            buckets[x] = 0
        for x in range(nlow, lr):
            if x >= nlow + nown or lens[x - nlow]:
                _bit_add(bit, lr, ranks[x] + 1, 1)
                buckets[tokens[x] & (SIG_BITS - 1)] += 1
            else:
                avail -= 1
        for x in range(SIG_BITS):
            c = buckets[x]
            if c > SIG_KMAX:  # a crowded bucket: no signature bound for this set
                m1 = -1
                break
            if c >= 1:
                m1 |= 1 << x
            if c >= 2:
                m2 |= 1 << x
            if c >= 3:
                m3 |= 1 << x
            if c >= 4:
                m4 |= 1 << x
    use_sig = m1 != -1
    npre = 0
    nc = 0
    nscan = 0
    nverify = 0
    for r in range(nown):
        x = order[r]
        if lens[x] == 0:
            continue
        t = own[x]
        rho = nlow + r
        lo, hi = itok[pside, t, F_HEAD], itok[pside, t, F_TAIL]
        rest = lr - rho
        ub = sim(code, lr, rest, rest)
        if paper:
            cut = stock_crop_end(sf, so, meta, k, ub)
            if nb:
                cut = max(cut, _bound_crop_end(bound, nb, ub))
            if cut != _NEG_INF:  # first entry ending after cut
                while lo < hi:
                    mid = (lo + hi) >> 1
                    if wf[seqs[mid] - base, W_END] <= cut:
                        lo = mid + 1
                    else:
                        hi = mid
            hi = itok[pside, t, F_TAIL]
            nscan += hi - lo
            d = 0  # lb step of the current entry: entries come in ascending end time
            for y in range(lo, hi):
                if y + _AHEAD < hi:  # rows and token lists are scattered over the window
                    _prefetch(wi, seqs[y + _AHEAD] - base)
                    _prefetch(wtok, wi[seqs[y + _AHEAD // 2] - base, W_TOFF])
                p = seqs[y] - base
                if wi[p, W_MARK] == stamp:  # met in an earlier list: keeps that position
                    continue
                wi[p, W_MARK] = stamp
                npre += 1
                ls = wi[p, W_SIZE2] >> 1
                d = _lb_step(st_end, nsteps, d, wf[p, W_END])
                lb = st_sim[d] if d < nsteps else 0.0  # = stock_lb(..., t_end)
                # early stop before any token: o <= min(|r_i| - rho + 1, |r_j|) (1-based rho)
                # falls short of tau_o exactly when its similarity is below lb (property 5)
                if sim(code, lr, ls, min(lr - rho, ls)) < lb:
                    continue
                nverify += 1
                o = _verify(code, lr, ls, lb, wi[p, W_TOFF], wtok, tmark, stamp, nlow)
                if o >= 0:
                    cj[nc] = p
                    cs[nc] = sim(code, lr, ls, o)
                    nc += 1
            continue
        # the filtered scan: the bound of a set first met here, from the list entries alone
        xg = nlow + x
        _bit_add(bit, lr, ranks[xg] + 1, -1)
        avail -= 1
        a = _bit_sum(bit, ranks[xg])  # available tokens with a larger number than t
        b = avail - a
        if use_sig:  # t leaves its bucket
            u = t & (SIG_BITS - 1)
            c = buckets[u]
            buckets[u] = c - 1
            if c == 1:
                m1 &= ~(1 << u)
            elif c == 2:
                m2 &= ~(1 << u)
            elif c == 3:
                m3 &= ~(1 << u)
            else:
                m4 &= ~(1 << u)
        # tail to head (section 5.4): lb does not decrease, and the scan stops at the first
        # entry with lb > ub, where the paper's crop begins
        y = hi - 1
        d = _lb_step_of(st_end, nsteps, ends[y])
        m = 0
        while y >= lo:
            t_end = ends[y]
            while d > 0 and st_end[d - 1] >= t_end:
                d -= 1
            if d < nsteps:
                lb = st_sim[d]
                if lb > ub:
                    break
                info = infos[y]
                ls = (info >> 16) & INFO_LARGE
                if ls != INFO_LARGE and sim(
                    code, lr, ls, new_overlap_bound(info, a, b, m1, m2, m3, m4)
                ) < lb:
                    y -= 1
                    continue
            survivors[m] = y
            steps[m] = d
            m += 1
            y -= 1
        nscan += hi - 1 - y
        for z in range(m):
            if z + _AHEAD < m:
                _prefetch(wi, seqs[survivors[z + _AHEAD]] - base)
                _prefetch(wtok, wi[seqs[survivors[z + _AHEAD // 2]] - base, W_TOFF])
            y = survivors[z]
            p = seqs[y] - base
            if wi[p, W_MARK] == stamp:  # met in an earlier list: keeps that position
                continue
            wi[p, W_MARK] = stamp
            npre += 1
            nverify += 1
            ls = wi[p, W_SIZE2] >> 1
            lb = st_sim[steps[z]] if steps[z] < nsteps else 0.0
            o = _verify(code, lr, ls, lb, wi[p, W_TOFF], wtok, tmark, stamp, nlow)
            if o >= 0:
                cj[nc] = p
                cs[nc] = sim(code, lr, ls, o)
                nc += 1
    meta[M_SCAN] += nscan
    meta[M_VERIFY] += nverify
    return nc, npre


@njit(cache=True)
def join_insert(
    tokens, seq, end, side, pside, itok, pool_own, pool_probe, wi, wf, wtok, tmark, meta,
    sf, si, so, of, oi, k, code, shortest_first, scratch, cs, kout, bound,
):
    """``_join`` of a new set: candidates (Algorithm 4), stock insert (Algorithms 6 and 5),
    index and window append (not with ``meta[M_PROBE]``; in a token-space part, only the own
    tokens' lists). ``seq`` is the pair's ``i``. ``scratch`` (``int64[SCRATCH_ROWS, n]``) and
    ``cs`` (``float64[n]``) are work space for ``n`` >= the window's capacity and ``> |r|``. Returns 1 if the stock changed,
    else 0, or a ``NEED_*`` code without having changed the join (the caller grows the arrays
    and calls again).

    Reported changes for the change stream: the added pairs that can matter (all when
    ``|S| < k`` before or after, else those up to the later of the two k-th pairs) to
    ``of/oi[0:2, :meta[M_NADD]]``, the removed pairs up to the k-th pair before the insert to
    ``of/oi[2:4, :meta[M_NREM]]``. If the stock changed, ``kout[0:4]`` / ``kout[4:8]`` hold
    the k-th pair (sim, end, i, j) before / after the insert (flags in ``meta[M_KTH]``) and
    ``kout[8]`` the end time of ``E[0]``.
    """
    lr = len(tokens)
    indexed = meta[M_PROBE] == 0
    nlow = meta[M_NLOW]
    own = tokens[nlow : lr - meta[M_NHIGH]]
    meta[M_NADD] = 0
    meta[M_NREM] = 0
    if lr >= len(cs) or indexed and (
        meta[M_NPOS] >= wi.shape[0] or meta[M_TOKTAIL] + lr > len(wtok)
    ):
        return NEED_WINDOW
    for x in range(lr):
        if tokens[x] >= itok.shape[1]:
            return NEED_TOKENS
    if indexed:
        ok, need = _index_room(itok, side, pool_own, meta[M_TOP0 + side], own)
        if not ok:
            meta[M_NEED] = need
            return NEED_INDEX
    changed = 0
    pre, cj, added, tmp = scratch[0], scratch[1], scratch[2], scratch[3]
    lens, order = scratch[4], scratch[5]  # (pre: the candidates' stock slots)
    if meta[M_NOPROBE]:
        nc, npre = 0, 0
    else:
        nc, npre = get_candidates(
            tokens, pside, itok, pool_probe, wi, wf, wtok, tmark, meta, sf, so, k, code,
            shortest_first, cj, cs, lens, order, of[2], of[3],  # (of: free until the stock insert)
            bound, scratch[6:11],
        )
    if nc > meta[M_NFREE]:
        meta[M_NEED] = nc
        return NEED_STOCK
    meta[M_PRE] += npre
    meta[M_CAND] += nc
    base = meta[M_BASE]
    for x in range(nc):
        c = _alloc(so, meta)
        sf[0, c] = cs[x]
        sf[1, c] = wf[cj[x], W_END]
        si[0, c] = seq
        si[1, c] = cj[x] + base
        pre[x] = c
    if nc:
        _sort_slots(sf, si, pre, nc, tmp)
        n0 = meta[M_N]
        has_before = n0 >= k
        b = so[0, k - 1] if has_before else -1
        if has_before:  # keep the k-th pair's key (its slot may be freed)
            bsim, bend, bi, bj = sf[0, b], sf[1, b], si[0, b], si[1, b]
        else:
            bsim, bend, bi, bj = 0.0, 0.0, 0, 0
        na, nrem = stock_insert(sf, si, so, meta, k, pre, nc, added, of, oi)
        if na or nrem:
            changed = 1
        n1 = meta[M_N]
        has_after = n1 >= k
        a = so[0, k - 1] if has_after else -1
        meta[M_KTH] = has_before + 2 * has_after + 4 * (n1 > 0)
        kout[0], kout[1], kout[2], kout[3] = bsim, bend, bi, bj
        if has_after:
            kout[4], kout[5], kout[6], kout[7] = sf[0, a], sf[1, a], si[0, a], si[1, a]
        kout[8] = sf[1, so[1, 0]] if n1 else 0.0
        m = 0
        for x in range(nrem):  # removed pairs that were in the top-k before
            keep = not has_before
            if not keep:
                rs, re_, ri, rj = of[2, x], of[3, x], oi[2, x], oi[3, x]
                keep = not (
                    rs < bsim or rs == bsim and (
                        re_ < bend or re_ == bend and (ri > bi or ri == bi and rj > bj)
                    )
                )
            if keep:
                of[2, m], of[3, m], oi[2, m], oi[3, m] = of[2, x], of[3, x], oi[2, x], oi[3, x]
                m += 1
        meta[M_NREM] = m
        m = 0
        for x in range(na):
            c = added[x]
            keep = not has_before or not has_after or not _s_lt(sf, si, a, c)
            if not keep:  # c <= before?
                keep = not (
                    sf[0, c] < bsim or sf[0, c] == bsim and (
                        sf[1, c] < bend or sf[1, c] == bend and (
                            si[0, c] > bi or si[0, c] == bi and si[1, c] > bj
                        )
                    )
                )
            if keep:
                _emit(sf, si, c, of, oi, 0, m)
                m += 1
        meta[M_NADD] = m
    if not indexed:
        return changed
    _window_append(tokens, own, end, side, itok, pool_own, wi, wf, wtok, meta)
    return changed


@njit(cache=True)
def _window_append(tokens, own, end, side, itok, pool_own, wi, wf, wtok, meta):
    """Append a new set to the window and to the lists of its ``own`` tokens (room checked)."""
    lr = len(tokens)
    base = meta[M_BASE]
    p = meta[M_NPOS]
    nlow = meta[M_NLOW]
    sig = _signature(tokens)
    if lr <= 32:
        for x in range(len(own)):
            _index_append(itok, side, pool_own, meta, own[x], base + p, end,
                          _info(lr, _rank_desc(tokens, nlow + x), sig))
    else:
        ranks = np.empty(lr, np.int64)
        _ranks_desc(tokens, ranks)
        for x in range(len(own)):
            _index_append(itok, side, pool_own, meta, own[x], base + p, end,
                          _info(lr, ranks[nlow + x], sig))
    toff = meta[M_TOKTAIL]
    wi[p, W_SIZE2] = 2 * lr + side
    wi[p, W_TOFF] = toff
    wi[p, W_MARK] = -1
    wf[p, W_END] = end
    for x in range(lr):
        wtok[toff + x] = np.int32(tokens[x])
    meta[M_TOKTAIL] = toff + lr
    meta[M_NPOS] = p + 1


@njit(cache=True)
def apply_sets(start, expire, numbers, offsets, ends, sides, itok, pool0, pool1, wi, wf, wtok, meta):
    """Index sets without joining them, for a join rebuilt from its logged changes
    (:mod:`~driftjoin.swoop.delta`): from step ``start`` on, step ``x`` expires the
    ``expire[x]`` oldest sets (:func:`_expire_window`), then appends set ``x`` (tokens
    ``numbers[offsets[x]:offsets[x + 1]]``, none: expiry only) to the window and the tails of
    its lists, as :func:`join_insert` does, without probing. Returns ``(0, steps)`` when done,
    or ``(NEED_*, x)`` having done the steps before ``x`` only (the caller grows the arrays the
    code names, for set ``x``, and calls again from ``x``)."""
    n = len(expire)
    for x in range(start, n):
        tokens = numbers[offsets[x] : offsets[x + 1]]
        lr = len(tokens)
        side = sides[x]
        pool = pool1 if side else pool0
        if lr:  # room first: a step is done whole or not at all
            if meta[M_NPOS] >= wi.shape[0] or meta[M_TOKTAIL] + lr > len(wtok):
                return NEED_WINDOW, x
            for y in range(lr):
                if tokens[y] >= itok.shape[1]:
                    return NEED_TOKENS, x
            own = tokens[meta[M_NLOW] : lr - meta[M_NHIGH]]
            ok, need = _index_room(itok, side, pool, meta[M_TOP0 + side], own)
            if not ok:
                meta[M_NEED] = need
                return NEED_INDEX, x
        if expire[x]:
            _expire_window(expire[x], itok, wi, wtok, meta)
        if lr:
            _window_append(tokens, tokens[meta[M_NLOW] : lr - meta[M_NHIGH]], ends[x], side, itok, pool,
                           wi, wf, wtok, meta)
    return 0, n
