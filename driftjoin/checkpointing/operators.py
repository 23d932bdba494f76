"""The testbed's operators: real state, real records, and snapshots that are real copies.

Each operator instance is driven record by record by the simulator
(:mod:`driftjoin.checkpointing.engine`): ``process(port, ch, rec, nbytes)`` returns the records
it emits, ``snapshot()`` returns a copy of its state that later processing cannot change, and
``restore(snap)`` puts a copy back. ``state_bytes`` is the serialised size of the state, kept
up to date from the sizes of the records it stores (what a checkpoint uploads).

Why the outputs are comparable record for record between a failure-free run and a recovered
one: every operator's output *multiset* is independent of how its input channels interleave
(channels are FIFO, interleavings across channels change after a recovery). Joins are
symmetric hash joins (each matching pair is emitted once, by whichever side arrives second);
windows are event-time tumbling windows over the time the replayable source stamped on the
record (the thesis uses processing-time windows, whose contents depend on the timing that a
recovery changes); a window's state is dropped only when every input channel's watermark (the
largest event time seen on it: sources emit in time order) has passed its end, so no record of
a dropped window can arrive later; a running count emits 1, 2, ..., n per key and window in
any order. The cyclic reachability join keeps tombstones of deleted links and sources, so the
set of paths over surviving links is derived exactly once whatever the order (see
:class:`ReachJoin`).
"""

from __future__ import annotations

import copy
from collections import defaultdict
from typing import Any, Callable

import numpy as np

from driftjoin.distance import get_metric
from driftjoin.s3j.compute import SimilarityWorker, restore_worker, worker_state
from driftjoin.s3j.ids import global_workset
from driftjoin.s3j.records import Records
from driftjoin.s3j.routing import WorksetRouter
from driftjoin.s3j.space import SpacePartitioner
from driftjoin.s3j.workset import WorksetFormulation, formulation_state, restore_formulation

Record = tuple
Out = list[Record]
_NONE: Out = []


class Operator:
    """One parallel instance of an operator. Subclasses set ``kind`` (its cost key)."""

    kind = "map"
    stateful = False

    def __init__(self, n_inputs: int) -> None:
        self.n_inputs = n_inputs
        self.state_bytes = 0

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        raise NotImplementedError

    def snapshot(self) -> Any:
        return None

    def restore(self, snap: Any) -> None:
        pass


class Source(Operator):
    """A replayable source partition: its state is the offset in its input log."""

    kind = "source"
    stateful = True

    def __init__(self, n_inputs: int = 0) -> None:
        super().__init__(n_inputs)
        self.offset = 0
        self.state_bytes = 8

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        self.offset += 1
        return [rec]

    def snapshot(self) -> Any:
        return self.offset

    def restore(self, snap: Any) -> None:
        self.offset = snap


class Sink(Operator):
    """The query's output: an append-only log (like a Kafka topic written transactionally).

    The snapshot is the log's length (what is below it is durable); restore truncates, so the
    output of a recovered run is what survives, as it would be read committed downstream.
    """

    kind = "sink"
    stateful = True

    def __init__(self, n_inputs: int) -> None:
        super().__init__(n_inputs)
        self.log: list[Record] = []
        self.state_bytes = 8  # what a checkpoint stores: the committed length

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        self.log.append(rec)
        return _NONE

    def snapshot(self) -> Any:
        return len(self.log)

    def restore(self, snap: Any) -> None:
        del self.log[snap:]


class Map(Operator):
    kind = "map"

    def __init__(self, n_inputs: int, fn: Callable[[Record], Record]) -> None:
        super().__init__(n_inputs)
        self.fn = fn

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        return [self.fn(rec)]


class Filter(Operator):
    kind = "filter"

    def __init__(self, n_inputs: int, pred: Callable[[Record], bool]) -> None:
        super().__init__(n_inputs)
        self.pred = pred

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        return [rec] if self.pred(rec) else _NONE


class Watermarks:
    """Per input channel, the largest event time seen; their minimum is a safe watermark."""

    def __init__(self, n_inputs: int) -> None:
        self.marks = [float("-inf")] * n_inputs

    def advance(self, ch: int, t: float, window: float = 1.0) -> int:
        """Record ``t`` on channel ``ch``; return the first window not yet ended on every channel."""
        if t > self.marks[ch]:
            self.marks[ch] = t
        low = min(self.marks)
        return int(low // window) if low > float("-inf") else -(1 << 62)


class IncrementalJoin(Operator):
    """Symmetric hash join without windows (NexMark Q3): port 0 = left keyed rows, 1 = right.

    ``left_key`` must be unique per left row (a person id); right rows keep every match.
    """

    kind = "join"
    stateful = True

    def __init__(self, n_inputs: int, left_key: Callable, right_key: Callable, combine: Callable) -> None:
        super().__init__(n_inputs)
        self.left_key, self.right_key, self.combine = left_key, right_key, combine
        self.left: dict[Any, Record] = {}
        self.right: dict[Any, list[Record]] = defaultdict(list)

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        self.state_bytes += nbytes
        if port == 0:
            k = self.left_key(rec)
            self.left[k] = rec
            return [self.combine(rec, r) for r in self.right.get(k, _NONE)]
        k = self.right_key(rec)
        self.right[k].append(rec)
        left = self.left.get(k)
        return [self.combine(left, rec)] if left is not None else _NONE

    def snapshot(self) -> Any:
        return dict(self.left), {k: list(v) for k, v in self.right.items()}, self.state_bytes

    def restore(self, snap: Any) -> None:
        left, right, self.state_bytes = snap
        self.left = dict(left)
        self.right = defaultdict(list, {k: list(v) for k, v in right.items()})


class WindowedJoin(Operator):
    """Running symmetric join inside event-time tumbling windows (NexMark Q8)."""

    kind = "window_join"
    stateful = True

    def __init__(self, n_inputs: int, window: float, left_key: Callable, right_key: Callable,
                 combine: Callable, time: Callable[[Record], float]) -> None:
        super().__init__(n_inputs)
        self.window = window
        self.left_key, self.right_key, self.combine, self.time = left_key, right_key, combine, time
        self.windows: dict[int, tuple[dict, dict, list]] = {}
        self.wm = Watermarks(n_inputs)

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        t = self.time(rec)
        w = int(t // self.window)
        win = self.windows.get(w)
        if win is None:
            win = self.windows[w] = ({}, defaultdict(list), [0])
        left, right, size = win
        size[0] += nbytes
        self.state_bytes += nbytes
        if port == 0:
            k = self.left_key(rec)
            left[k] = rec
            out = [self.combine(rec, r, w) for r in right.get(k, _NONE)]
        else:
            k = self.right_key(rec)
            right[k].append(rec)
            lr = left.get(k)
            out = [self.combine(lr, rec, w)] if lr is not None else _NONE
        done = self.wm.advance(ch, t, self.window)  # windows < done have ended on every channel
        for old in [x for x in self.windows if x < done]:
            self.state_bytes -= self.windows.pop(old)[2][0]
        return out

    def snapshot(self) -> Any:
        wins = {w: (dict(l), {k: list(v) for k, v in r.items()}, s[0]) for w, (l, r, s) in self.windows.items()}
        return wins, list(self.wm.marks), self.state_bytes

    def restore(self, snap: Any) -> None:
        wins, marks, self.state_bytes = snap
        self.windows = {w: (dict(l), defaultdict(list, {k: list(v) for k, v in r.items()}), [s])
                        for w, (l, r, s) in wins.items()}
        self.wm.marks = list(marks)


class WindowedCount(Operator):
    """Running count per key in event-time tumbling windows (NexMark Q12)."""

    kind = "window_agg"
    stateful = True
    ENTRY_BYTES = 24

    def __init__(self, n_inputs: int, window: float, key: Callable, time: Callable[[Record], float]) -> None:
        super().__init__(n_inputs)
        self.window, self.key, self.time = window, key, time
        self.windows: dict[int, dict[Any, int]] = {}
        self.wm = Watermarks(n_inputs)

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        t = self.time(rec)
        w = int(t // self.window)
        counts = self.windows.setdefault(w, {})
        k = self.key(rec)
        c = counts.get(k, 0) + 1
        if c == 1:
            self.state_bytes += self.ENTRY_BYTES
        counts[k] = c
        done = self.wm.advance(ch, t, self.window)
        for old in [x for x in self.windows if x < done]:
            self.state_bytes -= self.ENTRY_BYTES * len(self.windows.pop(old))
        return [("C", k, w, c)]

    def snapshot(self) -> Any:
        return {w: dict(c) for w, c in self.windows.items()}, list(self.wm.marks), self.state_bytes

    def restore(self, snap: Any) -> None:
        wins, marks, self.state_bytes = snap
        self.windows = {w: dict(c) for w, c in wins.items()}
        self.wm.marks = list(marks)


# --- the cyclic reachability query (thesis 3.6, after FFP) -----------------------------------------

class ReachJoin(Operator):
    """Joins directed links with (derived) sources whose reachable node is the link's start.

    Port 0: the input stream (``L+``/``L-`` link added/deleted, ``S+``/``S-`` source node
    added/deleted; deletions are broadcast to every instance); port 1: derived sources coming
    back around the cycle. A link is stored at its start node, a source at its reachable node;
    whichever of a matching (source, link) pair arrives second emits the pair.

    Deletions keep tombstones: a deleted link or root purges every stored source whose path uses
    it, and a derived source arriving later that uses a tombstoned link or root is dropped. So
    every simple path over links and roots that are never deleted is derived exactly once, in
    any interleaving (each step's two sides are stored for good and meet once), and every path
    over a deleted element is purged: the final state is a function of the input alone.
    """

    kind = "reach_join"
    stateful = True

    def __init__(self, n_inputs: int) -> None:
        super().__init__(n_inputs)
        self.links: dict[int, dict[int, tuple[int, int]]] = defaultdict(dict)    # node -> link -> (end, bytes)
        self.sources: dict[int, dict[tuple, tuple]] = defaultdict(dict)  # node -> (root, links) -> (src, bytes)
        self.dead_links: set[int] = set()
        self.dead_roots: set[int] = set()
        #: where the stored sources that use a link / a root are: for purging without a scan
        self.by_link: dict[int, set[tuple]] = defaultdict(set)
        self.by_root: dict[int, set[tuple]] = defaultdict(set)

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        tag = rec[0]
        if tag == "L+":
            _, lid, a, b = rec
            if lid in self.dead_links:
                return _NONE
            self.links[a][lid] = (b, nbytes)
            self.state_bytes += nbytes
            return [("J", src, lid, b) for src, _ in self.sources.get(a, {}).values()]
        if tag in ("S+", "D"):
            src = (rec[1], rec[2], rec[3], rec[4]) if tag == "D" else (rec[1], rec[2], (rec[2],), ())
            root, node, _, lids = src
            if root in self.dead_roots or any(l in self.dead_links for l in lids):
                return _NONE
            self.sources[node][(root, lids)] = (src, nbytes)
            self.by_root[root].add((node, lids))
            for l in lids:
                self.by_link[l].add((node, root, lids))
            self.state_bytes += nbytes
            return [("J", src, lid, b) for lid, (b, _) in self.links.get(node, {}).items()]
        if tag == "L-":
            _, lid, a, _b = rec
            self.dead_links.add(lid)
            gone = self.links.get(a, {}).pop(lid, None)
            if gone is not None:
                self.state_bytes -= gone[1]
            for node, root, lids in self.by_link.pop(lid, ()):
                self._drop(node, root, lids)
            return [rec]
        if tag == "S-":
            _, root, _node = rec
            self.dead_roots.add(root)
            for node, lids in self.by_root.pop(root, ()):
                self._drop(node, root, lids)
            return [rec]
        raise ValueError(f"unknown reachability record {tag!r}")

    def _drop(self, node: int, root: int, lids: tuple) -> None:
        """Forget a stored source (the indexes may still name it: a later drop finds nothing)."""
        gone = self.sources.get(node, {}).pop((root, lids), None)
        if gone is not None:
            self.state_bytes -= gone[1]

    def snapshot(self) -> Any:
        return ({n: dict(d) for n, d in self.links.items()}, {n: dict(d) for n, d in self.sources.items()},
                set(self.dead_links), set(self.dead_roots), self.state_bytes,
                {k: set(v) for k, v in self.by_link.items()}, {k: set(v) for k, v in self.by_root.items()})

    def restore(self, snap: Any) -> None:
        links, sources, dl, dr, self.state_bytes, by_link, by_root = snap
        self.links = defaultdict(dict, {n: dict(d) for n, d in links.items()})
        self.sources = defaultdict(dict, {n: dict(d) for n, d in sources.items()})
        self.dead_links, self.dead_roots = set(dl), set(dr)
        self.by_link = defaultdict(set, {k: set(v) for k, v in by_link.items()})
        self.by_root = defaultdict(set, {k: set(v) for k, v in by_root.items()})


class ReachSelect(Operator):
    """Drops joined pairs whose link leads back into the source's path (or past ``max_hops``)."""

    kind = "select"

    def __init__(self, n_inputs: int, max_hops: int) -> None:
        super().__init__(n_inputs)
        self.max_hops = max_hops

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        if rec[0] != "J":
            return [rec]
        _, (root, node, path, lids), lid, b = rec
        if b in path or len(lids) >= self.max_hops:
            return _NONE
        return [rec]


class ReachProject(Operator):
    """Builds the new source (same root, the link's end reachable, the path extended)."""

    kind = "project"

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        if rec[0] != "J":
            return [rec]
        _, (root, node, path, lids), lid, b = rec
        return [("D", root, b, path + (b,), lids + (lid,))]


def reachable_view(log: list[Record]) -> dict[tuple, int]:
    """The reachability query's result from a sink log: each surviving path and how often it came.

    Paths using a deleted link or root are dropped (their derivation depends on timing); each
    remaining path must come exactly once.
    """
    dead_links = {r[1] for r in log if r[0] == "L-"}
    dead_roots = {r[1] for r in log if r[0] == "S-"}
    view: dict[tuple, int] = {}
    for r in log:
        if r[0] == "D" and r[1] not in dead_roots and not any(l in dead_links for l in r[4]):
            view[r[1:]] = view.get(r[1:], 0) + 1
    return view


# --- S3J similarity join (driftjoin.s3j): routing -> formulation -> computation ---------------------

class S3JRoute(Operator):
    """Space partitioning (stateless): one inner copy and the outer copies of each vector."""

    kind = "s3j_route"

    def __init__(self, n_inputs: int, partitioner: SpacePartitioner, metric: str, window: float) -> None:
        super().__init__(n_inputs)
        self.partitioner, self.prepare, self.window = partitioner, get_metric(metric).prepare, window

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        _, rid, side, vec, t = rec
        r = self.partitioner.route(self.prepare(np.asarray([vec], dtype=np.float64)))
        w = int(t // self.window)
        return [("M", int(p), bool(o), rid, side, vec, t, w) for p, o in zip(r.partition.tolist(), r.outer.tolist())]


def _one(rid: int, side: int, vec: tuple, t: float, w: int) -> Records:
    return Records(id=np.asarray([rid], dtype=np.int64), side=np.asarray([side], dtype=np.int8),
                   vec=np.asarray([vec], dtype=np.float64), ingest=np.asarray([t]), window=np.asarray([w], dtype=np.int64))


class S3JFormulate(Operator):
    """Workset formulation of the space partitions this instance holds (one per instance here)."""

    kind = "s3j_formulate"
    stateful = True

    def __init__(self, n_inputs: int, metric: str, threshold: float, dim: int) -> None:
        super().__init__(n_inputs)
        self.metric, self.threshold, self.dim = metric, threshold, dim
        self.parts: dict[int, tuple[WorksetFormulation, WorksetRouter]] = {}
        self.wm = Watermarks(n_inputs)

    def _part(self, p: int) -> tuple[WorksetFormulation, WorksetRouter]:
        if p not in self.parts:
            self.parts[p] = (WorksetFormulation(get_metric(self.metric), self.threshold, self.dim), WorksetRouter(p))
        return self.parts[p]

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        _, p, outer, rid, side, vec, t, w = rec
        core, router = self._part(p)
        done = self.wm.advance(ch, float(w))
        core.expire_before(done)
        router.expire_before(done)
        m = core.formulate(_one(rid, side, vec, t, w), np.asarray([outer]))
        mem = m.records.take(m.row)  # new members: this record, and outer-buffer records meeting a new workset
        routed = router.route(global_workset(p, m.workset), m.role, mem.window, mem.id)
        mem = mem.take(routed.row)
        self.state_bytes = sum(c.outer_buffer.nbytes() + c.centroids.nbytes for c, _ in self.parts.values())
        return [("W", wk, g, r, s, i, sd, tuple(v), ts, win) for wk, g, r, s, i, sd, v, ts, win in zip(
            routed.worker.tolist(), routed.gid.tolist(), routed.role.tolist(), routed.store.tolist(),
            mem.id.tolist(), mem.side.tolist(), mem.vec.tolist(), mem.ingest.tolist(), mem.window.tolist())]

    def snapshot(self) -> Any:
        return ({p: (copy.deepcopy(formulation_state(c)), copy.deepcopy(r)) for p, (c, r) in self.parts.items()},
                list(self.wm.marks), self.state_bytes)

    def restore(self, snap: Any) -> None:
        parts, marks, self.state_bytes = snap
        self.parts = {}
        for p, (st, r) in parts.items():
            core = WorksetFormulation(get_metric(self.metric), self.threshold, self.dim)
            self.parts[p] = (restore_formulation(core, copy.deepcopy(st)), copy.deepcopy(r))
        self.wm.marks = list(marks)


class S3JCompute(Operator):
    """Similarity computation of the worksets routed to this worker."""

    kind = "s3j_compute"
    stateful = True

    def __init__(self, n_inputs: int, metric: str, threshold: float) -> None:
        super().__init__(n_inputs)
        self.metric, self.threshold = metric, threshold
        self.core = SimilarityWorker(get_metric(metric), threshold, self_join=False)
        self.wm = Watermarks(n_inputs)

    def process(self, port: int, ch: int, rec: Record, nbytes: int) -> Out:
        _, _wk, gid, role, store, rid, side, vec, t, w = rec
        self.core.expire_before(self.wm.advance(ch, float(w)))
        pairs = self.core.add(_one(rid, side, vec, t, w), np.asarray([gid], dtype=np.int64),
                              np.asarray([role], dtype=np.int8), store=np.asarray([store]))
        self.state_bytes = self.core.state_bytes()
        return [("J", int(a), int(b), int(win)) for a, b, win in
                zip(pairs.left_id.tolist(), pairs.right_id.tolist(), pairs.window.tolist())]

    def snapshot(self) -> Any:
        return copy.deepcopy(worker_state(self.core)), list(self.wm.marks), self.state_bytes

    def restore(self, snap: Any) -> None:
        st, marks, self.state_bytes = snap
        self.core = restore_worker(SimilarityWorker(get_metric(self.metric), self.threshold, self_join=False),
                                   copy.deepcopy(st))
        self.wm.marks = list(marks)
