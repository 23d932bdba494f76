"""Partitioned SWOOP: the top-k of one window computed by ``p`` workers and merged exactly.

Two designs split the pairs of the window between ``p`` workers so that every pair belongs to
exactly one worker; each worker runs SWOOP (index, minimal stock, its own top-k) over its own
pairs, and a merger turns the workers' top-k change streams into the global one.

* ``"owner"``: each set is *indexed* by exactly one worker, its owner
  (:func:`owner_of`: a deterministic hash of its id and side), and *probed* against every
  worker's index. A pair is found when its later set probes the index that holds its earlier
  set, so exactly once, by the earlier set's owner. Every worker sees every set: the owner
  joins and indexes it (``OWN``), the others only join it with their indexed sets
  (``PROBE``). Each worker's index and window hold about ``|W| / p`` sets, so its lists are
  ``p`` times shorter; its own top-k ranks ``1 / p`` of the pairs, so its skyband lower bound
  is lower than a single join's and prunes less.
* ``"probe"``: the roles swapped. Every worker indexes every set, and each set is *probed* by
  exactly one worker, its owner (:func:`owner_of`). A pair is found when its later set probes,
  so exactly once, by the later set's owner, against an index that holds every earlier set.
  The owner joins and indexes a set (``OWN``), the others only index it (``INDEX``: no
  candidate search). Each worker searches the candidates of ``1 / p`` of the sets over whole
  lists, the same search a single join makes for them, so the candidate search divides by
  ``p``, where the ``"owner"`` design's searches every set over lists ``p`` times shorter
  (and a search stops at a position bound that does not shrink with the lists). Indexing and
  expiring a set are cheap and every worker does them; the price is memory: every worker
  holds the whole window and index. Its own top-k ranks ``1 / p`` of the pairs, as in the
  ``"owner"`` design.
* ``"token"`` (docs/architecture.md): the token space is split, :func:`token_part` maps each
  token to one of ``p`` parts, and a pair belongs to the lowest part among the parts of the
  tokens its two sets share. A set goes to every part that one of its tokens maps to; there
  it is indexed under that part's tokens only and probes only their lists, at the lookup
  positions after the lower parts' tokens (a pair of this part shares none of them, so the
  positional bound may count them as missed), and a pair that shares a lower part's token is
  rejected. The other parts get a *tick* (``TICK``: the arrival number and the index time
  advance, nothing is joined), so that every worker numbers the sets and rejects late or
  duplicate sets as the others do.

Every worker numbers all sets it sees in arrival order, so the arrival numbers, the index time
and the rejections are the same everywhere, and the pair order of :mod:`~driftjoin.swoop.pairs`
(similarity, end time, then the arrival numbers ``i``, ``j``) is global. Inside a worker the
earlier set of a pair is its *window number* (only indexed sets join a worker's window), which
keeps the arrival order; workers report pairs with the global numbers (:class:`KeyedChange`).

Merging. The global top-k is contained in the union ``U`` of the workers' top-k's: a pair in
the global top-k has fewer than ``k`` better valid pairs in all, so fewer than ``k`` among its
own worker's pairs. Hence the first ``k`` pairs of ``U`` are the global top-k, and
:class:`TopKMerger` keeps ``U`` (at most ``p k`` pairs) from the workers' change streams. The
workers' changes of one operation (insert or advance) are grouped into steps by time and phase
(expiries at time ``g`` before the insert's own step at its time), applied to ``U`` step by step
and reported as the net difference of the top-k, leaves then enters, each in pair order: the
same stream as a single join (:mod:`~driftjoin.swoop.framework`), so a replay gives the same
events.

Sharing the bound (``share_bound``): the control plane may combine the workers' stocks into a
:class:`~driftjoin.swoop.bound.Staircase`, a lower bound of the *global* skyband lower bound,
and publish it to every worker between micro-batches; workers then prune with the larger of
their own and the shared bound. That is exact (the argument is in :mod:`~driftjoin.swoop.bound`):
a pair pruned by it can never enter the global top-k, and every pair that can is kept by its
worker and ranks in its worker's top-k whenever it ranks in the global one. A worker's own
top-k may then miss pairs that only its own (not the global) ranking would have needed.
"""

from __future__ import annotations

import hashlib
import time
from bisect import bisect_left, bisect_right, insort
from collections.abc import Hashable, Iterable, Sequence
from typing import NamedTuple

import numpy as np

from driftjoin.swoop.bound import Staircase
from driftjoin.swoop.framework import INDEX, OWN, PROBE, TICK
from driftjoin.swoop.join import Swoop
from driftjoin.swoop.pairs import PairKey, SimilarPair, TopKChange, topk_delta
from driftjoin.swoop.records import InvalidSetError, validate_set_id, validate_tokens
from driftjoin.swoop.similarity import WellBehavedSimilarity

DESIGNS = ("owner", "probe", "token")
_M64 = (1 << 64) - 1


# -- routing -------------------------------------------------------------------------------------


def _mix64(x: int) -> int:
    """SplitMix64's finaliser: a bijection of 64-bit ints that spreads every input bit."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _mix64_array(x: np.ndarray) -> np.ndarray:
    """:func:`_mix64` over a ``uint64`` array (numpy's unsigned arithmetic wraps, as masked)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def stable_hash(value: Hashable) -> int:
    """A 64-bit hash that is the same in every process (Python's ``hash`` of a ``str`` is not).

    Integers hash by value (``5`` and ``numpy.int64(5)`` alike), strings by their UTF-8 bytes,
    anything else by its ``repr``.
    """
    if isinstance(value, (int, np.integer)) and not isinstance(value, bool):
        return _mix64(int(value) & _M64)
    data = value.encode("utf-8") if isinstance(value, str) else repr(value).encode("utf-8")
    return _mix64(int.from_bytes(hashlib.blake2b(data, digest_size=8).digest(), "little"))


def owner_of(set_id: Hashable, side: str | None, parallelism: int) -> int:
    """The worker that indexes a set in the ``"owner"`` design (that probes it in the
    ``"probe"`` design): a hash of its id and side."""
    return _mix64((stable_hash(set_id) + (side == "S")) & _M64) % parallelism


def owners_of_ints(ids: np.ndarray, sides: np.ndarray, parallelism: int) -> np.ndarray:
    """:func:`owner_of` for integer ids, vectorised (``sides``: 1 for ``"S"``, else 0)."""
    h = _mix64_array(np.asarray(ids, np.int64).view(np.uint64))
    with np.errstate(over="ignore"):
        h = h + np.asarray(sides, np.uint64)
    return (_mix64_array(h) % np.uint64(parallelism)).astype(np.int64)


def token_part(token: str | int, parallelism: int) -> int:
    """The token-space part of a token in the ``"token"`` design."""
    return stable_hash(token) % parallelism


# -- workers -------------------------------------------------------------------------------------


class KeyedChange(NamedTuple):
    """A worker's top-k change: the event and the pair's key with global arrival numbers."""

    time: float
    kind: str
    key: PairKey
    pair: SimilarPair


class PartWorker(Swoop):
    """SWOOP over the pairs of one worker, reporting pairs with global arrival numbers.

    The later set ``i`` of a pair is any set the worker saw, the earlier ``j`` one of its
    window's (module docstring).
    """

    def __init__(
        self,
        k: int,
        similarity: str | WellBehavedSimilarity,
        window: float,
        worker: int,
        parallelism: int,
        *,
        two_stream: bool = False,
        shortest_list_first: bool = True,
        engine: str = "auto",
    ) -> None:
        super().__init__(
            k, similarity, window, two_stream=two_stream,
            shortest_list_first=shortest_list_first, engine=engine,
        )  # fmt: skip
        self.worker = worker
        self.parallelism = parallelism

    @property
    def valid_sets(self) -> int:
        """Sets of the window (indexed here or not)."""
        return len(self._records)

    @property
    def indexed_sets(self) -> int:
        """Sets of the window indexed here."""
        return len(self._W)

    def advance_keyed(self, ts: float) -> list[KeyedChange]:
        """:meth:`advance` with the changes as :class:`KeyedChange` (all expiries)."""
        return self.advance(ts)  # type: ignore[return-value]

    def set_bound(self, bound: Staircase | None) -> None:
        """Prune with a shared lower bound from now on (``None``: the own stock's only)."""
        if self._core is not None:
            empty = np.zeros(0, np.float64)
            self._core.set_bound(*((bound.ends, bound.sims) if bound else (empty, empty)))
        else:
            self.generator.bound = bound if bound else None

    def _pair(self, key: PairKey) -> SimilarPair:
        later, earlier = self._records[key[2]], self._W.get(key[3])
        if later.side == "S":
            later, earlier = earlier, later
        return SimilarPair(-key[0], later.set_id, earlier.set_id, -key[1])

    def _report(
        self, time: float, left: list[PairKey], entered: list[PairKey], events: list
    ) -> None:
        for kind, keys in (("leave", left), ("enter", entered)):
            for key in keys:
                global_key = (key[0], key[1], key[2], self._W.get(key[3]).seq)
                events.append(KeyedChange(time, kind, global_key, self._pair(key)))


class RoutedWorker(PartWorker):
    """A worker of a design that routes each set by its owner (:func:`owner_of`): the owner's
    role is ``OWN``, the others' :attr:`OTHERS`."""

    OTHERS: int

    def insert_routed(
        self, set_id: Hashable, tokens: Iterable[str | int], ts: float, side: str | None,
        owner: int,
    ) -> tuple[list[KeyedChange], int]:
        """Insert a set that ``owner`` owns; returns the changes and how many of them the
        expiries made (the insert's own step comes last). Raises ``InvalidSetError``."""
        return self._insert(set_id, tokens, ts, side, OWN if owner == self.worker else self.OTHERS)

    def insert_routed_many(
        self, sets: Sequence[tuple[Hashable, Iterable[str | int], float, str | None, int]]
    ) -> list[tuple[list[KeyedChange], int] | InvalidSetError]:
        """:meth:`insert_routed` of ``(set_id, tokens, ts, side, owner)`` in order, the batch's
        tokens numbered at once (:meth:`~driftjoin.swoop.Swoop.insert_many`); an error stands
        for a refused set."""
        me, others = self.worker, self.OTHERS
        return self._insert_many([s[:4] for s in sets], [OWN if s[4] == me else others for s in sets])


class OwnerWorker(RoutedWorker):
    """Worker ``worker`` of ``parallelism`` in the ``"owner"`` design: indexes the sets it owns,
    joins every set."""

    OTHERS = PROBE


class ProbeWorker(RoutedWorker):
    """Worker ``worker`` of ``parallelism`` in the ``"probe"`` design: indexes every set, joins
    the sets it owns."""

    OTHERS = INDEX


class TokenPartWorker(PartWorker):
    """Part ``worker`` of ``parallelism`` in the ``"token"`` design."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._parts: dict[str | int, int] = {}  # token -> part (cache of token_part)
        self._split: tuple[int, int] = (0, 0)  # lower and higher parts' tokens of the new set
        self._lower: frozenset[int] = frozenset()  # the new set's tokens (Python engine)
        self._own_new: frozenset[int] = frozenset()

    def start_delta(self) -> None:
        """Not for token-space parts: their token numbers come in a per-set split (lower parts',
        own, higher parts') that a delta does not record (the Spark operator runs the owner design)."""
        raise NotImplementedError("logged changes (driftjoin.swoop.delta) support the 'owner' and 'probe' designs only")

    def insert_routed(
        self, set_id: Hashable, tokens: Iterable[str | int] | None, ts: float, side: str | None
    ) -> tuple[list[KeyedChange], int]:
        """Insert a set that has a token of this part, or tick (``tokens=None``) for one that
        has none; as :meth:`OwnerWorker.insert_routed`."""
        if tokens is None:
            return self._insert(set_id, None, ts, side, TICK)
        return self._insert(set_id, tokens, ts, side, OWN)

    def _number_batch(self, token_lists: list) -> list:
        """None: a part numbers each set's tokens in its own split order (:meth:`_number`)."""
        return [None] * len(token_lists)

    def _number(self, distinct: list[str | int]) -> frozenset[int] | np.ndarray:
        """The token numbers ordered lower parts', own, higher parts' (``_kernels``)."""
        parts = self._parts
        q, p = self.worker, self.parallelism
        numbers = self.tokens.number_array(distinct).tolist()
        lower, own, higher = [], [], []
        for token, number in zip(distinct, numbers):
            part = parts.get(token)
            if part is None:
                part = parts[token] = token_part(token, p)
            (own if part == q else lower if part < q else higher).append(number)
        self._split = (len(lower), len(higher))
        if self._core is not None:
            return np.array(lower + own + higher, np.int64)
        self._lower, self._own_new = frozenset(lower), frozenset(own)
        return frozenset(numbers)

    def _join_step(self, record, indexed):  # type: ignore[no-untyped-def]
        if self._core is not None:
            self._core.set_part(*self._split)
        return super()._join_step(record, indexed)

    def _join(self, record, indexed):  # type: ignore[no-untyped-def]
        """The Python engine's join of a part (the compiled one: ``_kernels``)."""
        side = record.side
        probe = self._indexes[("S" if side == "R" else "R") if self.two_stream else None]
        candidates = self.generator.get_candidates(record, probe, self._own_new, self._lower)
        self._indexes[side].add(self._own_new, self._W.next_number())
        return self.stock.insert(candidates) if candidates else ([], [])


#: The worker class of each design.
WORKERS: dict[str, type[PartWorker]] = {"owner": OwnerWorker, "probe": ProbeWorker, "token": TokenPartWorker}


# -- merging -------------------------------------------------------------------------------------


class TopKMerger:
    """The global top-k from the workers' top-k change streams (module docstring)."""

    def __init__(self, k: int) -> None:
        self.k = k
        self._U: list[PairKey] = []  # the union of the workers' top-k, in pair order
        self._pairs: dict[PairKey, SimilarPair] = {}

    def __len__(self) -> int:
        return len(self._U)

    def topk(self) -> list[SimilarPair]:
        """The global top-k, in pair order."""
        return [self._pairs[key] for key in self._U[: self.k]]

    def merge(self, parts: Iterable[tuple[Sequence[KeyedChange], int]], ts: float) -> list[TopKChange]:
        """The global changes of one operation at time ``ts`` from every worker's ``(changes,
        number of expiry changes)`` (:meth:`OwnerWorker.insert_routed`)."""
        steps: dict[tuple[float, int], tuple[list[KeyedChange], list[KeyedChange]]] = {}
        for changes, mark in parts:
            for n, change in enumerate(changes):
                step = steps.setdefault((change.time, n >= mark), ([], []))
                step[change.kind == "enter"].append(change)
        events: list[TopKChange] = []
        for (step_time, _), (leaves, enters) in sorted(steps.items()):
            events += self.step(step_time, leaves, enters)
        return events

    def step(
        self, time: float, leaves: Sequence[KeyedChange], enters: Sequence[KeyedChange]
    ) -> list[TopKChange]:
        """Apply one step's changes to ``U``; the net change of the global top-k."""
        U, pairs, k = self._U, self._pairs, self.k
        before = U[k - 1] if len(U) >= k else None
        removed = [change.key for change in leaves]
        added = [change.key for change in enters]
        for key in removed:
            del U[bisect_left(U, key)]
        for change in enters:
            insort(U, change.key)
            pairs[change.key] = change.pair
        after = U[k - 1] if len(U) >= k else None
        left, entered = topk_delta(before, after, added, removed, self._between)
        events = [TopKChange(time, "leave", pairs[key]) for key in left]
        events += [TopKChange(time, "enter", pairs[key]) for key in entered]
        for key in removed:
            del pairs[key]
        return events

    def _between(self, lo: PairKey, hi: PairKey | None) -> list[PairKey]:
        U = self._U
        start = bisect_right(U, lo)
        return U[start : bisect_right(U, hi)] if hi is not None else U[start:]


def shared_bound(workers: Iterable[PartWorker], k: int) -> Staircase:
    """The control plane's decision: the staircase of the union of the workers' stocks."""
    sims, ends = zip(*(worker.stock.pair_arrays() for worker in workers))
    return Staircase.of_pairs(np.concatenate(sims), np.concatenate(ends), k)


# -- the whole join in one process ---------------------------------------------------------------


class PartitionedTopK:
    """A top-k join computed by ``parallelism`` workers and merged, in one process.

    The API of :class:`~driftjoin.swoop.Swoop` (``insert``, ``advance``, ``topk``), plus
    :meth:`insert_batch`, which runs a micro-batch as the Spark operator does: each worker
    processes the whole batch, then the merger, then (``share_bound``) the control plane
    publishes the shared bound for the next batch. ``worker_cpu`` and ``merger_cpu`` add up the
    CPU seconds each spent in :meth:`insert_batch`, the load each would put on its own core.
    """

    def __init__(
        self,
        k: int,
        similarity: str | WellBehavedSimilarity,
        window: float,
        *,
        parallelism: int,
        design: str = "owner",
        two_stream: bool = False,
        share_bound: bool = False,
        shortest_list_first: bool = True,
        engine: str = "auto",
    ) -> None:
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise ValueError(f"parallelism must be a positive int, got {parallelism!r}")
        if design not in DESIGNS:
            raise ValueError(f"design must be one of {DESIGNS}, got {design!r}")
        worker_class = WORKERS[design]
        self.workers: list[PartWorker] = [
            worker_class(
                k, similarity, window, w, parallelism, two_stream=two_stream,
                shortest_list_first=shortest_list_first, engine=engine,
            )  # fmt: skip
            for w in range(parallelism)
        ]
        self.k = k
        self.parallelism = parallelism
        self.design = design
        self.two_stream = two_stream
        self.share_bound = share_bound
        self.merger = TopKMerger(k)
        self.worker_cpu = [0.0] * parallelism
        self.merger_cpu = 0.0

    @property
    def index_time(self) -> float | None:
        return self.workers[0].index_time

    @property
    def window_size(self) -> int:
        """``|W|``: number of valid sets."""
        return self.workers[0].valid_sets

    def topk(self) -> list[SimilarPair]:
        return self.merger.topk()

    def insert(
        self, set_id: Hashable, tokens: Iterable[str | int], ts: float, side: str | None = None
    ) -> list[TopKChange]:
        """As :meth:`Swoop.insert <driftjoin.swoop.framework.TopKJoin.insert>`."""
        events, rejected = self.insert_batch([(set_id, tokens, ts, side)], publish=False)
        if rejected:
            raise rejected[0][1]
        return events

    def advance(self, ts: float) -> list[TopKChange]:
        """As :meth:`Swoop.advance <driftjoin.swoop.framework.TopKJoin.advance>`."""
        changes = [worker.advance_keyed(ts) for worker in self.workers]
        return self.merger.merge([(c, len(c)) for c in changes], ts)

    def insert_batch(
        self,
        rows: Sequence[tuple[Hashable, Iterable[str | int], float, str | None]],
        *,
        publish: bool = True,
    ) -> tuple[list[TopKChange], list[tuple[int, InvalidSetError]]]:
        """Insert a micro-batch of ``(set_id, tokens, ts, side)`` in order.

        Returns the global changes and the rejected rows (position, error). With
        ``share_bound`` and ``publish``, the bound is published after the batch.
        """
        routed, rejected = self._route(rows)
        results: list[list] = []
        owner = self.design != "token"
        for w, worker in enumerate(self.workers):
            started = time.process_time()
            out: list = []
            if owner:
                out = worker.insert_routed_many(
                    [(set_id, tokens, ts, side, target) for set_id, tokens, ts, side, (_, target) in routed]
                )
            else:
                insert = worker.insert_routed
                for set_id, tokens, ts, side, (_, target) in routed:
                    try:
                        out.append(insert(set_id, tokens if w in target else None, ts, side))
                    except InvalidSetError as exc:
                        out.append(exc)
            results.append(out)
            self.worker_cpu[w] += time.process_time() - started
        started = time.process_time()
        events: list[TopKChange] = []
        for n, (_, _, ts, _, _) in enumerate(routed):
            parts = [out[n] for out in results]
            if isinstance(parts[0], InvalidSetError):  # every worker rejects it alike
                rejected.append((routed[n][4][0], parts[0]))
                continue
            events += self.merger.merge(parts, ts)
        self.merger_cpu += time.process_time() - started
        if self.share_bound and publish:
            self.publish_bound()
        rejected.sort(key=lambda item: item[0])
        return events, rejected

    def publish_bound(self) -> None:
        """The control plane's step: combine the stocks, publish the bound to every worker."""
        bound = shared_bound(self.workers, self.k)
        for worker in self.workers:
            worker.set_bound(bound)

    def _route(self, rows):  # type: ignore[no-untyped-def]
        """The stateless router: per row its position and target (owner, or token parts)."""
        routed, rejected = [], []
        p = self.parallelism
        parts_of: dict[str | int, int] = {}
        for n, (set_id, tokens, ts, side) in enumerate(rows):
            try:
                set_id = validate_set_id(set_id)
                if self.design != "token":
                    target = (n, owner_of(set_id, side, p))
                else:
                    distinct = validate_tokens(set_id, tokens, self.workers[0].similarity.max_size)
                    tokens = distinct
                    target = (n, {
                        parts_of[t] if t in parts_of else parts_of.setdefault(t, token_part(t, p))
                        for t in distinct
                    })  # fmt: skip
            except InvalidSetError as exc:
                rejected.append((n, exc))
                continue
            routed.append((set_id, tokens, ts, side, target))
        return routed, rejected
