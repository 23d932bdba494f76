"""The local join of a worker's tasks over columns: one micro-batch at a time, no per-tuple Python.

:class:`~driftjoin.hypercube.task.Task` is the paper's symmetric hash join, one routed copy at a
time: a copy probes the other side's stored tuples of its join value, then is stored. In Python
that costs microseconds per copy and per pair (measured in issue 39: the joined rows of a Zipf
1.1 stream spent 87 of their 93 task seconds in the per-tuple join and in building the pairs'
rows). This module computes the same pairs for a whole batch at once, with numpy and pyarrow.

**What it computes.** Per task, the copies of a batch in the batch order
(:func:`~driftjoin.hypercube.table.batch_order`) behave exactly as :class:`Task` handles them one
by one: a copy whose role probes meets every stored tuple of the other side with its task and
join value (and, for a window join, ``|t_a - t_b| <= W``): those stored before the batch, and the
copies of this batch that come earlier in the batch order and whose role stores; a copy whose
role stores is then stored. So a pair of copies ``(a, b)`` at one task is reported iff
``b`` was stored before the batch and ``a`` probes, or both are in the batch, the earlier one
stores and the later one probes.

**How.** Every stored row and copy carries a 64-bit group id ``gid = h(task, key)``
(:func:`group_ids`). A side's stored rows live in a few immutable :class:`Segment` s, each a
pyarrow table sorted by gid (a log-structured layout: a batch's stored copies become a new
segment, and the two newest segments merge while the newer one is at least half the older, so a
worker holds O(log n) segments and each row is merged O(log n) times). A probe finds its partners
in a segment with two binary searches (``np.searchsorted``); its partners in its own batch with
one more, on the key ``(rank of gid, position in the batch order)``, bounded by its own position.
The pairs stay index ranges (:class:`Joined`) until the output asks for them, in chunks, as
``take`` of the two sides' rows: the joined rows are built column by column, never row by row.

**Exactness of the group ids.** Equal gids need not mean equal ``(task, key)`` (a 64-bit hash can
collide), so a segment checks, when it is built, that each of its runs of equal gid holds one
``(task, key)``: it is then *pure*, and a probe is compared with the first row of its range only
(the range is all or nothing). An impure segment (a collision) compares ``(task, key)`` pair by
pair. Either way a reported pair has equal task and key: the hash only decides where to look.

The worker around this kernel (state moves, eviction, the checkpoint's snapshot and log) is
:mod:`driftjoin.hypercube.columnar_worker`; the exactness of the pipeline over many workers and
batches is proven in :mod:`driftjoin.hypercube.migration` and does not depend on how a task
joins, only on which pairs it reports.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from driftjoin.hypercube.hashing import splitmix64_array
from driftjoin.hypercube.model import Key, Role
from driftjoin.hypercube.table import batch_order
from driftjoin.runs import run_positions

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    import pyarrow.compute as pc
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa, pyarrow_compute as pc

#: The columns every stored row and routed copy has; any other column is carried along (the row's values).
TASK, KEY, TB, TL, TS = "task", "key", "tb", "tl", "ts"
#: Columns of a routed copy that are not stored.
ROLE, PRIMARY = "role", "primary"
#: Pairs expanded at once (index arrays of this length; the output's chunks).
CHUNK = 1 << 20
_TASK_SEED = np.uint64(0x7461736B5F676964)
_PROBE_ONLY, _STORE_ONLY = int(Role.PROBE), int(Role.STORE)


# ---- hashing and comparing join values -------------------------------------------------------

def _plain(array: pa.Array | pa.ChunkedArray) -> pa.Array:
    return array.combine_chunks() if isinstance(array, pa.ChunkedArray) else array


def key_hashes(keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """A 64-bit hash of each join value (integers mixed directly; other types through pandas' hashing)."""
    keys = _plain(keys)
    if pa.types.is_integer(keys.type):
        return splitmix64_array(keys.cast(pa.int64()).to_numpy().view(np.uint64))
    return pd.util.hash_array(np.asarray(keys.to_numpy(zero_copy_only=False), dtype=object))


def group_ids(task: np.ndarray, keys: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """``gid = h(task, key)`` of each row (module docstring)."""
    t = splitmix64_array(np.asarray(task, dtype=np.int64).view(np.uint64) ^ _TASK_SEED)
    return splitmix64_array(key_hashes(keys) ^ t)


def keys_equal(a: pa.Array | pa.ChunkedArray, b: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Element-wise equality of two arrays of join values (no nulls: rows with null keys never get here)."""
    a, b = _plain(a), _plain(b)
    if pa.types.is_integer(a.type):
        return a.to_numpy() == b.to_numpy()
    return pc.equal(a, b).to_numpy(zero_copy_only=False).astype(bool)


def _run_starts(gid: np.ndarray) -> np.ndarray:
    """For each row of a gid-sorted array, the index of the first row of its run of equal gid."""
    starts = np.ones(len(gid), dtype=bool)
    starts[1:] = gid[1:] != gid[:-1]
    return np.maximum.accumulate(np.where(starts, np.arange(len(gid)), 0))


def _pure(gid: np.ndarray, task: np.ndarray, keys: pa.Array) -> bool:
    """Whether every run of equal gid of a gid-sorted table holds one ``(task, key)``."""
    if len(gid) < 2:
        return True
    first = _run_starts(gid)
    inner = np.flatnonzero(first != np.arange(len(gid)))
    if not len(inner):
        return True
    f = first[inner]
    return bool((task[inner] == task[f]).all() and keys_equal(keys.take(inner), keys.take(f)).all())


# ---- segments and a side's store -------------------------------------------------------------

class Segment:
    """Stored rows sorted by gid, immutable (module docstring); ``pure``: no gid collision inside."""

    __slots__ = ("table", "gid", "task", "ts", "keys", "pure", "_tasks")

    def __init__(self, table: pa.Table, gid: np.ndarray, *, pure: bool | None = None) -> None:
        self.table = table
        self.gid = gid
        self.task = table[TASK].to_numpy()
        self.ts = table[TS].to_numpy()
        self.keys = _plain(table[KEY])
        self.pure = _pure(gid, self.task, self.keys) if pure is None else pure
        self._tasks: frozenset[int] | None = None

    @property
    def tasks(self) -> frozenset[int]:
        """The tasks with rows here (computed once)."""
        if self._tasks is None:
            self._tasks = frozenset(pd.unique(self.task).tolist())
        return self._tasks

    @staticmethod
    def build(table: pa.Table, gid: np.ndarray | None = None, *, ordered: bool = False) -> Segment:
        """A segment of ``table`` (sorted by gid here unless ``ordered``)."""
        if gid is None:
            gid = group_ids(table[TASK].to_numpy(), table[KEY])
        if not ordered:
            order = np.argsort(gid, kind="stable")
            table, gid = table.take(order), gid[order]
        return Segment(table.combine_chunks(), gid)

    def __len__(self) -> int:
        return self.table.num_rows

    def where(self, keep: np.ndarray) -> Segment | None:
        """The rows of ``keep`` (still sorted; a subset of a pure segment is pure)."""
        if keep.all():
            return self
        if not keep.any():
            return None
        return Segment(self.table.filter(pa.array(keep)), self.gid[keep], pure=True if self.pure else None)

    def find(self, task: int, key: Key, gid: int) -> np.ndarray:
        """The rows of ``(task, key)``."""
        g = np.uint64(gid)
        rows = np.arange(np.searchsorted(self.gid, g, side="left"), np.searchsorted(self.gid, g, side="right"))
        if not len(rows):
            return rows
        ok = (self.task[rows] == task) & keys_equal(self.keys.take(rows), pa.array([key] * len(rows), self.keys.type))
        return rows[ok]


def merge_segments(a: Segment, b: Segment) -> Segment:
    gid = np.concatenate([a.gid, b.gid])
    order = np.argsort(gid, kind="stable")  # two sorted runs: a merge
    table = pa.concat_tables([a.table, b.table]).take(order).combine_chunks()
    return Segment(table, gid[order], pure=None)


class SideStore:
    """One side's stored rows at one worker (all its tasks), as :class:`Segment` s, oldest first."""

    def __init__(self) -> None:
        self.segments: list[Segment] = []
        self.schema: pa.Schema | None = None

    def __len__(self) -> int:
        return sum(len(s) for s in self.segments)

    @property
    def nbytes(self) -> int:
        return sum(s.table.nbytes for s in self.segments)

    def conform(self, table: pa.Table) -> pa.Table:
        """``table`` in this store's schema (the first table added sets it)."""
        if self.schema is None:
            self.schema = table.schema
            return table
        return table if table.schema.equals(self.schema) else table.cast(self.schema)

    def add(self, table: pa.Table, gid: np.ndarray | None = None, *, ordered: bool = False) -> int:
        """Store the rows of ``table`` (``gid``-sorted already if ``ordered``); returns how many."""
        if table is None or not table.num_rows:
            return 0
        self.segments.append(Segment.build(self.conform(table), gid, ordered=ordered))
        while len(self.segments) >= 2 and len(self.segments[-2]) <= 2 * len(self.segments[-1]):
            b = self.segments.pop()
            self.segments[-1] = merge_segments(self.segments[-1], b)
        return table.num_rows

    def evict(self, before: float, *, lazy: bool = False) -> int:
        """Drop the rows with ``ts < before``; returns how many.

        ``lazy``: rewrite a segment only once a quarter of it is to go (or all of it), so a large
        old segment is not copied at every batch for a few rows. The rows left behind must be
        ones that can no longer join: a window join's eviction threshold guarantees that (no
        on-time row is within the window of a row below it)."""
        n, kept = 0, []
        for seg in self.segments:
            keep = seg.ts >= before
            gone = int(len(keep) - keep.sum())
            if lazy and 0 < gone < len(keep) / 4:
                kept.append(seg)
                continue
            n += gone
            s = seg.where(keep)
            if s is not None:
                kept.append(s)
        self.segments = kept
        return n

    def drop(self, task: int, key: Key) -> int:
        """Drop the rows of ``(task, key)``; returns how many."""
        if not self.segments:
            return 0
        gid = int(group_ids(np.array([task]), pa.array([key], self.schema.field(KEY).type))[0])
        n, kept = 0, []
        for seg in self.segments:
            rows = seg.find(task, key, gid)
            if len(rows):
                keep = np.ones(len(seg), dtype=bool)
                keep[rows] = False
                n += len(rows)
                seg = seg.where(keep)
            if seg is not None:
                kept.append(seg)
        self.segments = kept
        return n

    def select(self, task: int, key: Key) -> pa.Table | None:
        """The stored rows of ``(task, key)`` (None if none)."""
        if not self.segments:
            return None
        gid = int(group_ids(np.array([task]), pa.array([key], self.schema.field(KEY).type))[0])
        parts = [seg.table.take(rows) for seg in self.segments if len(rows := seg.find(task, key, gid))]
        return pa.concat_tables(parts) if parts else None

    def table(self) -> pa.Table | None:
        """Every stored row as one table (the snapshot), or None."""
        return pa.concat_tables([s.table for s in self.segments]) if self.segments else None

    def tasks(self) -> set[int]:
        return set().union(*(s.tasks for s in self.segments))


# ---- one batch: the pairs as index ranges ----------------------------------------------------

@dataclass
class _Part:
    """Pairs of probing copies (``rows`` of ``probe``) with the partner rows ``lo[i]:hi[i]`` of
    ``partner``; ``verify``: compare task and key pair by pair (impure partner)."""

    probe_side: int
    probe: pa.Table
    rows: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    partner: pa.Table
    partner_ts: np.ndarray
    verify: bool


class Joined:
    """The pairs one batch produced at one worker, as index ranges; expanded in chunks on demand."""

    def __init__(self, parts: list[_Part], window: float | None) -> None:
        self.parts = parts
        self.window = window

    def count(self) -> int:
        """How many pairs (cheap without a window and collisions; else expanded once, in chunks)."""
        if self.window is None and not any(p.verify for p in self.parts):
            return int(sum(int((p.hi - p.lo).sum()) for p in self.parts))
        return sum(len(pi) for _, pi, _ in self._indexes())

    def _indexes(self, chunk: int = CHUNK) -> Iterator[tuple[_Part, np.ndarray, np.ndarray]]:
        """``(part, probe rows, partner rows)`` of every pair, at most about ``chunk`` at a time."""
        for part in self.parts:
            counts = part.hi - part.lo
            cum = np.cumsum(counts)
            start, n = 0, len(counts)
            while start < n:
                base = cum[start - 1] if start else 0
                end = max(int(np.searchsorted(cum, base + chunk, side="right")), start + 1)
                c = counts[start:end]
                total = int(c.sum())
                if total:
                    pi = np.repeat(part.rows[start:end], c)
                    si = np.repeat(part.lo[start:end], c) + run_positions(c)
                    keep = None
                    if part.verify:
                        keep = ((part.probe[TASK].to_numpy()[pi] == part.partner[TASK].to_numpy()[si])
                                & keys_equal(part.probe[KEY].take(pi), part.partner[KEY].take(si)))
                    if self.window is not None:
                        near = np.abs(part.probe[TS].to_numpy()[pi] - part.partner_ts[si]) <= self.window
                        keep = near if keep is None else keep & near
                    if keep is not None:
                        pi, si = pi[keep], si[keep]
                    if len(pi):
                        yield part, pi, si
                start = end

    def indexes(self, chunk: int = CHUNK) -> Iterator[tuple[pa.Table, np.ndarray, pa.Table, np.ndarray]]:
        """The pairs as ``(left table, left rows, right table, right rows)``, chunk by chunk: the
        caller takes only the columns it needs."""
        for part, pi, si in self._indexes(chunk):
            if part.probe_side == 0:
                yield part.probe, pi, part.partner, si
            else:
                yield part.partner, si, part.probe, pi

    def pairs(self, chunk: int = CHUNK) -> Iterator[tuple[pa.Table, pa.Table]]:
        """The pairs as ``(left rows, right rows)`` tables of equal length, chunk by chunk."""
        for lt, li, rt, ri in self.indexes(chunk):
            yield lt.take(li), rt.take(ri)


def _segment_ranges(seg: Segment, gid: np.ndarray, task: np.ndarray, keys: pa.Array) -> tuple[np.ndarray, np.ndarray]:
    lo = np.searchsorted(seg.gid, gid, side="left")
    hi = np.searchsorted(seg.gid, gid, side="right")
    if seg.pure:
        hit = np.flatnonzero(hi > lo)
        if len(hit):
            f = lo[hit]
            bad = hit[~((seg.task[f] == task[hit]) & keys_equal(seg.keys.take(f), keys.take(hit)))]
            hi[bad] = lo[bad]
    return lo, hi


def join_batch(stores: Sequence[SideStore], copies: Sequence[pa.Table | None], window: float | None) -> tuple[Joined, list[pa.Table | None]]:
    """Join one batch's copies (one table per side: :data:`TASK`, :data:`ROLE`, :data:`KEY`,
    :data:`TB`, :data:`TL`, :data:`TS` and any carried columns) at one worker, then store the
    copies whose role stores. Returns the pairs and, per side, the rows stored (sorted by gid)."""
    tables = [c if c is not None and c.num_rows else None for c in copies]
    sizes = [0 if t is None else t.num_rows for t in tables]
    total = sum(sizes)
    # every copy's position in the batch order (the same at every worker)
    side = np.repeat(np.array([0, 1], dtype=np.int8), sizes)
    ts_all = np.concatenate([t[TS].to_numpy() for t in tables if t is not None]) if total else np.zeros(0)
    tl_all = (np.concatenate([t[TL].to_numpy() for t in tables if t is not None]).view(np.uint64)
              if total else np.zeros(0, dtype=np.uint64))
    position = np.empty(total, dtype=np.int64)
    position[batch_order(side, ts_all, tl_all)] = np.arange(total)
    pos = [position[:sizes[0]], position[sizes[0]:]]
    info = []
    for s, t in enumerate(tables):
        if t is None:
            info.append(None)
            continue
        task = t[TASK].to_numpy()
        keys = _plain(t[KEY])
        gid = group_ids(task, keys)
        role = t[ROLE].to_numpy()
        stores_rows = np.flatnonzero(role != _PROBE_ONLY)
        stores_rows = stores_rows[np.lexsort((pos[s][stores_rows], gid[stores_rows]))]
        keep = [c for c in t.column_names if c not in (ROLE, PRIMARY)]
        stored = t.select(keep).take(stores_rows).combine_chunks() if len(stores_rows) else None
        info.append({"table": t, "task": task, "keys": keys, "gid": gid,
                     "probes": np.flatnonzero(role != _STORE_ONLY), "stored": stored,
                     "stored_gid": gid[stores_rows], "stored_pos": pos[s][stores_rows]})
    parts: list[_Part] = []
    for s in (0, 1):
        me, other = info[s], info[1 - s]
        if me is None or not len(me["probes"]):
            continue
        rows = me["probes"]
        gid, task, keys = me["gid"][rows], me["task"][rows], me["keys"].take(rows)
        for seg in stores[1 - s].segments:
            lo, hi = _segment_ranges(seg, gid, task, keys)
            parts.append(_part(s, me["table"], rows, lo, hi, seg.table, seg.ts, not seg.pure))
        if other is not None and other["stored"] is not None:
            lo, hi, pure = _batch_ranges(other, gid, task, keys, pos[s][rows], total)
            parts.append(_part(s, me["table"], rows, lo, hi, other["stored"], other["stored"][TS].to_numpy(), not pure))
    stored = [None if i is None else i["stored"] for i in info]
    for s in (0, 1):
        if info[s] is not None and info[s]["stored"] is not None:
            stores[s].add(info[s]["stored"], info[s]["stored_gid"], ordered=True)
    return Joined(parts, window), stored


def _part(s: int, probe: pa.Table, rows: np.ndarray, lo: np.ndarray, hi: np.ndarray, partner: pa.Table,
          partner_ts: np.ndarray, verify: bool) -> _Part:
    some = hi > lo
    return _Part(s, probe, rows[some], lo[some], hi[some], partner, partner_ts, verify)


def _batch_ranges(other: dict, gid: np.ndarray, task: np.ndarray, keys: pa.Array, position: np.ndarray,
                  total: int) -> tuple[np.ndarray, np.ndarray, bool]:
    """Ranges of the batch's stored copies of the other side (sorted by gid, then position) that
    share a probe's gid and come before it in the batch order."""
    b_gid, b_pos = other["stored_gid"], other["stored_pos"]
    stored = other["stored"]
    starts = np.ones(len(b_gid), dtype=bool)
    starts[1:] = b_gid[1:] != b_gid[:-1]
    rank = np.cumsum(starts) - 1
    uniq = b_gid[starts]
    m = np.int64(total + 1)
    comp = rank.astype(np.int64) * m + b_pos
    r = np.minimum(np.searchsorted(uniq, gid), len(uniq) - 1)
    hit = uniq[r] == gid
    base = r.astype(np.int64) * m
    lo = np.searchsorted(comp, base, side="left")
    hi = np.searchsorted(comp, base + position, side="left")
    hi = np.where(hit, hi, lo)
    b_task = stored[TASK].to_numpy()
    b_keys = _plain(stored[KEY])
    pure = _pure(b_gid, b_task, b_keys)
    if pure:
        found = np.flatnonzero(hi > lo)
        if len(found):
            f = lo[found]
            bad = found[~((b_task[f] == task[found]) & keys_equal(b_keys.take(f), keys.take(found)))]
            hi[bad] = lo[bad]
    return lo, hi, pure


# ---- moving tables between processes ---------------------------------------------------------

def to_ipc(table: pa.Table) -> bytes:
    """A table as Arrow IPC stream bytes (exact for every Arrow type; what state and moves hold)."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


def from_ipc(data: bytes) -> pa.Table:
    return pa.ipc.open_stream(pa.py_buffer(data)).read_all()
