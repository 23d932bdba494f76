"""The state layer shared by driftjoin's stateful operators: append-only chunks and a validated cache.

Measured on the S3J pipeline: a worker's state was one pickled value read and
written whole every micro-batch, 1 MB at the start of a one-minute window and 41 MB at its end,
so the cost of a batch grew with the window and a window cost its square. This layer keeps one
key's state as

* a small **meta** value (``ValueState``): the batch sequence number, a random **token**
  written with every batch, the index of the chunks, and the operator's small fields;
* **chunks** (``MapState`` keyed by ``(group, chunk)``): the bulky parts, written once when a
  batch adds them and removed by key when they expire (a group is a window, or any unit that
  expires at once). A batch writes only what it added.

Reading every chunk back on every batch would still cost O(window), so each Python worker
process keeps a **cache** of decoded states (:data:`CACHE`), keyed by operator and grouping key
and validated by the token: a batch uses the cached value as it is only if its token equals the
token in the meta value it just read. Spark rolls a failed batch's state back, so after a
failure, a replay, a restart, or when the key's previous batch ran in another process (Spark
reuses a few Python worker processes and hands a partition to any idle one: measured here, a
key ran in the same process as in its previous batch about half the time), the tokens differ.
Then the state is rebuilt from the meta value's list of chunks, and the operator may reuse the
decoded chunks of the stale value: chunk ids are random 62-bit numbers, never reused, and a
chunk never changes once written, so a decoded chunk whose id the current meta still lists is
exactly that chunk. Only the chunks written since (by the other process) are read: O(batch).
The value is taken out of the cache when a batch starts and put back only when the batch
saves, so a batch that fails half-way (after changing the value in place) never leaves its
changes behind as if they were committed.
"""

from __future__ import annotations

import io
import os
import pickle
import secrets
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pyspark.sql.types import BinaryType, LongType, StructField, StructType

from driftjoin.spark.runtime.queries import task_query

T = TypeVar("T")
R = TypeVar("R")

#: The schema of every pickled value the state layer keeps.
BLOB = StructType([StructField("blob", BinaryType(), False)])
_CHUNK_KEY = StructType([StructField("group", LongType(), False), StructField("chunk", LongType(), False)])

#: Default size of the per-process cache of decoded states (``DRIFTJOIN_STATE_CACHE_MB``).
CACHE_MB = 1024


#: Where the classes that earlier package layouts pickled into state live now (old module -> new
#: module), so a checkpoint written before driftjoin's operators became packages restarts exactly.
MOVED_MODULES = {
    "driftjoin.spark.state": "driftjoin.spark.runtime.state",
    "driftjoin.spark.plan_guard": "driftjoin.spark.runtime.plan_guard",
    "driftjoin.spark.topk_operators": "driftjoin.spark.topk.operators",
    "driftjoin.spark.natural": "driftjoin.spark.natural.joiners",
    "driftjoin.spark.natural_assigner": "driftjoin.spark.natural.assigner",
    "driftjoin.spark.natural_plan": "driftjoin.spark.natural.plan",
    "driftjoin.spark.natural_table": "driftjoin.spark.natural.table",
    "driftjoin.spark.s3j_operators": "driftjoin.spark.similarity.s3j",
    "driftjoin.spark.grid_operators": "driftjoin.spark.similarity.grid",
    "driftjoin.spark.equi_operators": "driftjoin.spark.equi.operators",
    "driftjoin.spark.equi_dispatch": "driftjoin.spark.equi.dispatch",
    "driftjoin.spark.equi_payload": "driftjoin.spark.equi.payload",
}


class OldCheckpointError(RuntimeError):
    """A checkpoint whose state another driftjoin version wrote in a form this one does not read."""


def old_checkpoint(operator: str) -> OldCheckpointError:
    """The one refusal of such a checkpoint, saying what to do."""
    from driftjoin import __version__

    return OldCheckpointError(f"this checkpoint holds {operator} state written by another driftjoin version in a form "
                              f"driftjoin {__version__} does not read: restart the query with a new checkpoint "
                              "location (or run the driftjoin version that wrote it)")


class _StateUnpickler(pickle.Unpickler):
    """Reads a state value, finding classes that moved (:data:`MOVED_MODULES`) where they are now."""

    def find_class(self, module: str, name: str) -> Any:
        return super().find_class(MOVED_MODULES.get(module, module), name)


def dumps(value: Any) -> bytes:
    return pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)


def loads(data: bytes) -> Any:
    """A state value written by :func:`dumps`, by this or an earlier package layout."""
    return _StateUnpickler(io.BytesIO(data)).load()


class StateCache:
    """Decoded states of recently run keys in this process, least recently used first out."""

    def __init__(self, limit_bytes: int) -> None:
        self.limit = limit_bytes
        self._entries: OrderedDict[tuple, tuple[str, Any, int]] = OrderedDict()
        self.hits = 0
        self.stale = 0
        self.misses = 0

    def take(self, key: tuple, token: str | None) -> tuple[Any | None, bool]:
        """The cached value of ``key`` and whether it was saved with ``token`` (else it is stale:
        only its decoded chunks may be reused); the entry leaves the cache."""
        entry = self._entries.pop(key, None)
        if entry is None:
            self.misses += 1
            return None, False
        exact = token is not None and entry[0] == token
        if exact:
            self.hits += 1
        else:
            self.stale += 1
        return entry[1], exact

    def put(self, key: tuple, token: str, value: Any, nbytes: int) -> None:
        self._entries[key] = (token, value, nbytes)
        self._entries.move_to_end(key)
        total = sum(e[2] for e in self._entries.values())
        while total > self.limit and self._entries:
            _, (_, _, size) = self._entries.popitem(last=False)
            total -= size

    def clear(self) -> None:
        self._entries.clear()


CACHE = StateCache(int(float(os.environ.get("DRIFTJOIN_STATE_CACHE_MB", CACHE_MB)) * 2**20))


@dataclass
class Meta:
    """The small part of one key's state (pickled into the meta value)."""

    seq: int = -1
    token: str | None = None
    #: chunk ids per group, in the order they were written
    chunks: dict[int, list[int]] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)


class Chunks:
    """The chunks a batch reads (on a cache miss), adds and removes; see the module docstring."""

    def __init__(self, store: Any, meta: Meta) -> None:
        self._store = store
        self._meta = meta
        #: chunks read from the store by this batch (statistics: O(batch) when the cache works)
        self.read_count = 0
        #: bytes of the chunks this batch wrote
        self.written_bytes = 0
        #: state calls of this key in this batch (each a round trip to the JVM's state server):
        #: reading the meta value, every chunk read, written or removed, writing the meta value
        self.calls = 1

    def groups(self) -> list[int]:
        return sorted(self._meta.chunks)

    def ids(self, group: int) -> list[int]:
        return list(self._meta.chunks.get(group, ()))

    def read(self, group: int, known: dict[int, Any] | None = None) -> list[tuple[int, Any]]:
        """``(chunk id, value)`` of every chunk of ``group``, in the order written; values of
        ``known`` chunk ids (decoded earlier: chunks never change) are not read again."""
        known = known or {}
        out = []
        for c in self._meta.chunks.get(group, ()):
            if c in known:
                out.append((c, known[c]))
            else:
                self.read_count += 1
                self.calls += 1
                out.append((c, loads(self._store.getValue((group, c))[0])))
        return out

    def keep_stale(self, group: int, stale: Iterable[R], parts: Callable[[R], tuple[int, ...]],
                   ) -> tuple[list[R], list[tuple[int, Any]]]:
        """Bring a stale copy of ``group`` up to date: ``(kept, new)``, the items of ``stale``
        whose parts (chunk ids) are all still listed, and ``(chunk id, value)`` of every other
        chunk of ``group``, read.

        For an operator that writes each part once and combines parts only in memory (runs that
        merge, each carrying the ids of the chunks it holds): an item whose parts are all listed
        holds exactly those chunks (a chunk never changes), so only the chunks written since are
        read; an item with a part gone (or with none) is dropped and its listed chunks are read.
        """
        listed = set(self.ids(group))
        kept = [item for item in stale if parts(item) and listed.issuperset(parts(item))]
        covered = {c for item in kept for c in parts(item)}
        return kept, [(c, v) for c, v in self.read(group, dict.fromkeys(covered)) if c not in covered]

    def add(self, group: int, value: Any, chunk: int | None = None) -> int:
        """Write a new chunk to ``group``; returns its id (random: ids are never reused, not even
        by a replay of a batch whose first attempt failed after writing; ``chunk``: one the
        caller drew the same way)."""
        return self.add_pickled(group, dumps(value), chunk)

    def add_pickled(self, group: int, blob: bytes, chunk: int | None = None) -> int:
        """:meth:`add` for a value pickled already; ``chunk``: its id, drawn by the caller as
        :meth:`add` draws one (a random 62-bit number)."""
        chunk = secrets.randbits(62) if chunk is None else chunk
        self._store.updateValue((group, chunk), (blob,))
        self.calls += 1
        self.written_bytes += len(blob)
        self._meta.chunks.setdefault(group, []).append(chunk)
        return chunk

    def add_runs(self, store: Any, encode: Callable[[Any], Any] | None = None) -> dict[int, int]:
        """Write the runs a batch added to a run store, each once: ``store.added`` lists
        ``(window, run)`` in the order they were made, a run written under its window (the group)
        with its first part id as chunk id (drawn as :meth:`add` draws one), unless its window
        closed in the batch (``store.windows`` no longer has it). Runs merge in memory only, so a
        run never changes once written. ``encode``: what of a run is written (default its
        ``arrays()``). Clears ``store.added``; returns the bytes written per chunk."""
        sizes: dict[int, int] = {}
        for window, run in store.added:
            if window in store.windows:
                blob = dumps(run.arrays() if encode is None else encode(run))
                self.add_pickled(window, blob, chunk=run.parts[0])
                sizes[run.parts[0]] = len(blob)
        store.added.clear()
        return sizes

    def listed(self, sizes: dict[int, int]) -> dict[int, int]:
        """``sizes`` (bytes per chunk id) of the chunks still listed."""
        listed = {c for ids in self._meta.chunks.values() for c in ids}
        return {c: n for c, n in sizes.items() if c in listed}

    def remove(self, group: int, chunk: int) -> None:
        self._store.removeKey((group, chunk))
        self.calls += 1
        ids = self._meta.chunks.get(group, [])
        ids.remove(chunk)
        if not ids:
            self._meta.chunks.pop(group, None)

    def drop_groups(self, keep: Callable[[int], bool]) -> list[int]:
        """Remove every chunk of the groups ``keep`` rejects (e.g. windows that closed)."""
        dropped = [g for g in list(self._meta.chunks) if not keep(g)]
        for g in dropped:
            for c in self._meta.chunks.pop(g):
                self._store.removeKey((g, c))
                self.calls += 1
        return dropped


@dataclass
class Loaded(Generic[T]):
    """One key's state for one batch: its value, the chunks, the sequence number of this batch,
    and how it was found: ``"cache"`` (as saved), ``"delta"`` (a stale cached value brought up
    to date), ``"chunks"`` (rebuilt from every chunk) or ``"new"``."""

    value: T
    chunks: Chunks
    meta: Meta
    seq: int
    source: str

    @property
    def cached(self) -> bool:
        return self.source == "cache"


class ChunkedState:
    """One key's state in the layout of the module docstring, for one named part of an operator.

    ``cache``: the process cache to use; by default :data:`CACHE` inside a streaming query and
    none elsewhere (a static run reads each key once, so caching would only hold memory).
    """

    def __init__(self, handle: Any, name: str, cache: StateCache | None | bool = True) -> None:
        query = task_query().query_id
        self.name = (name, query)
        self.cache = (CACHE if query is not None else None) if cache is True else (cache or None)
        self._meta = handle.getValueState(f"{name}_meta", BLOB)
        self._store = handle.getMapState(f"{name}_chunks", _CHUNK_KEY, BLOB)

    def load(self, key: Any, rebuild: Callable[[Meta, Chunks, T | None], T], empty: Callable[[], T]) -> Loaded[T]:
        """This batch's state: the cached value if its token matches, else ``rebuild(meta, chunks,
        stale)`` (``stale``: a cached value of an older or failed batch, whose decoded chunks the
        rebuild may reuse by id, or None)."""
        stored = self._meta.get()  # None when the key has no state yet: no separate exists() round trip
        meta = Meta() if stored is None else loads(stored[0])
        chunks = Chunks(self._store, meta)
        value, exact = (None, False) if self.cache is None else self.cache.take((self.name, key), meta.token)
        if exact:
            return Loaded(value, chunks, meta, meta.seq + 1, "cache")
        if meta.token is None:
            return Loaded(empty(), chunks, meta, meta.seq + 1, "new")
        return Loaded(rebuild(meta, chunks, value), chunks, meta, meta.seq + 1, "chunks" if value is None else "delta")

    def save(self, key: Any, loaded: Loaded[T], nbytes: int, fields: dict[str, Any] | None = None) -> None:
        """Write the meta value with a new token and put the value back in the cache."""
        meta = loaded.meta
        meta.seq = loaded.seq
        meta.token = uuid.uuid4().hex
        if fields is not None:
            meta.fields = fields
        self._meta.update((dumps(meta),))
        loaded.chunks.calls += 1
        if self.cache is not None:
            self.cache.put((self.name, key), meta.token, loaded.value, nbytes)


class BlobState:
    """One pickled value per key, read and written whole every batch (small states: a single
    Assigner, dispatcher or SWOOP key). The value carries its batch sequence number ``seq``."""

    def __init__(self, handle: Any, name: str) -> None:
        self.value = handle.getValueState(name, BLOB)

    def load(self) -> dict[str, Any] | None:
        stored = self.value.get()  # None when there is no value: one round trip, not exists() and get()
        return None if stored is None else loads(stored[0])

    def save(self, state: dict[str, Any]) -> None:
        self.value.update((dumps(state),))

    def resume(self, fmt: int | None = None, operator: str = "") -> tuple[dict[str, Any] | None, int]:
        """The saved state (None on the first batch) and this batch's sequence number; with
        ``fmt``, a state saved with another ``"format"`` is refused (:func:`old_checkpoint`)."""
        saved = self.load()
        if fmt is not None and saved is not None and saved.get("format") != fmt:
            raise old_checkpoint(operator)
        return saved, 0 if saved is None or "seq" not in saved else saved["seq"] + 1


#: Chunk groups of a :class:`LoggedState`.
SNAPSHOT, LOG = 0, 1


@dataclass
class Logged(Generic[T]):
    """A value kept as a snapshot plus a log, and the last chunk (snapshot or log) it reflects."""

    value: T
    applied: int | None = None


class LoggedState:
    """State whose core changes in place: a snapshot plus a log of per-batch changes.

    For cores that are not a set of immutable pieces (an equi-join worker's tasks, a SWOOP
    index), each batch writes one log chunk (what it changed, or the input that changes it
    deterministically); a new snapshot replaces snapshot and log once the log has grown as large
    as the snapshot, so writes stay proportional to the batch (amortised) and a rebuild reads at
    most about twice the state. A stale cached value (the key's previous batch ran in another
    process) replays only the log chunks written after the one it reflects.
    """

    def __init__(self, handle: Any, name: str, cache: StateCache | None | bool = True) -> None:
        self.chunked = ChunkedState(handle, name, cache)

    def load(self, key: Any, empty: Callable[[], T], restore: Callable[[Any], T],
             apply: Callable[[T, Any], None]) -> Loaded[Logged[T]]:
        def rebuild(meta: Meta, chunks: Chunks, stale: Logged[T] | None) -> Logged[T]:
            log = chunks.ids(LOG)
            snap = chunks.ids(SNAPSHOT)
            if stale is not None and stale.applied is not None and (stale.applied in log or stale.applied in snap):
                start = log.index(stale.applied) + 1 if stale.applied in log else 0
                current = stale
            else:
                current = Logged(restore(chunks.read(SNAPSHOT)[0][1]) if snap else empty(), snap[0] if snap else None)
                start = 0
            pending = set(log[start:])
            for chunk, change in chunks.read(LOG, {c: None for c in log if c not in pending}):
                if chunk in pending:
                    apply(current.value, change)
                    current.applied = chunk
            return current

        return self.chunked.load(key, rebuild, lambda: Logged(empty()))

    def save(self, key: Any, loaded: Loaded[Logged[T]], change: Any, snapshot: Callable[[], Any], nbytes: int,
             fields: dict[str, Any] | None = None) -> bool:
        """Log ``change`` (or write ``snapshot()`` instead once the log outweighs the snapshot);
        returns whether a snapshot was written."""
        chunks, meta = loaded.chunks, loaded.meta
        pickled = dumps(change)
        logged = meta.fields.get("log_bytes", 0) + len(pickled)
        fresh = dict(fields or {})
        if logged >= meta.fields.get("snapshot_bytes", 0):
            chunks.drop_groups(lambda g: False)
            blob = dumps(snapshot())
            loaded.value.applied = chunks.add_pickled(SNAPSHOT, blob)
            fresh.update(snapshot_bytes=len(blob), log_bytes=0)
            wrote = True
        else:
            loaded.value.applied = chunks.add_pickled(LOG, pickled)
            fresh.update(snapshot_bytes=meta.fields["snapshot_bytes"], log_bytes=logged)
            wrote = False
        self.chunked.save(key, loaded, nbytes, fresh)
        return wrote

    @staticmethod
    def fields(loaded: Loaded[Logged[T]]) -> dict[str, Any]:
        """The operator's own meta fields (without the log's bookkeeping)."""
        return {k: v for k, v in loaded.meta.fields.items() if k not in ("snapshot_bytes", "log_bytes")}
