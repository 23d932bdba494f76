"""natural_join's joiners: the only stateful tasks, one per joiner key (and the plan key).

Every joiner derives the same window table from the routers' heartbeats (which windows open,
with which fit, count-window numbers, the window clock), keeps each document under the mask of
its window's fit, joins it with the window's documents (FP-tree, hash or nested loop:
:mod:`driftjoin.schemafree.localjoin`) and reports a pair only if it is the lowest joiner both
documents were sent to (:func:`driftjoin.schemafree.joiner.owner`), so each pair comes out once.
State: one chunk per window and batch (:class:`~driftjoin.spark.runtime.state.ChunkedState`),
dropped by window when it closes.
"""

from __future__ import annotations

import heapq
import json
import math
import time
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np
from pyspark.sql.streaming.stateful_processor import (
    StatefulProcessorHandle,
)

from driftjoin.schemafree.document import Document, merged_document
from driftjoin.schemafree.fptree import AttributeOrder
from driftjoin.schemafree.joiner import owner
from driftjoin.schemafree.localjoin import make_local_join
from driftjoin.spark.natural.plan import (
    BEAT,
    DOC,
    JOINER_OP,
    NaturalPlan,
    unpack_route,
)
from driftjoin.spark.natural.table import (
    BROADCAST,
    bind_decision,
    fit_id,
    mark_start,
    opening_fit,
    write_record,
)
from driftjoin.spark.runtime.processor import OperatorProcessor
from driftjoin.spark.runtime.queries import task_query
from driftjoin.spark.runtime.state import ChunkedState, Chunks, Meta
from driftjoin.spark.runtime.stats import write_stats

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd


class _WindowJoin:
    """One window of a joiner: its local join structures (one per stream in a two-stream join)
    and the ids of the state chunks whose documents they hold (the shared state layer keeps one
    chunk per window and batch; a stale cached window whose chunks are a prefix of the current
    ones is brought up to date by inserting the newer chunks' documents)."""

    def __init__(self, plan: NaturalPlan, order: list[str]) -> None:
        self.order = order
        attribute_order = AttributeOrder.of(order)
        self.two = plan.two_streams
        self.local = [make_local_join(plan.local_join, attribute_order) for _ in range(2 if self.two else 1)]  # type: ignore[arg-type]
        self.docs: dict[int, tuple[Document, int, int, Any]] = {}
        self.chunks: list[int] = []

    def probe(self, doc: Document, side: int) -> list[int]:
        return self.local[1 - side if self.two else 0].join(doc)

    def insert(self, doc: Document, side: int, mask: int, doc_id: Any) -> None:
        self.local[side if self.two else 0].insert(doc)
        self.docs[doc.doc_id] = (doc, side, mask, doc_id)

    def load(self, chunk: int, stored: tuple[list, list, list, list, list]) -> None:
        """Insert the documents of one state chunk (seq, side, mask, id, flat pairs as JSON)."""
        for seq, side, mask, doc_id, text in zip(*stored):
            self.insert(Document(seq, json.loads(text)), side, mask, doc_id)
        self.chunks.append(chunk)

    def sample(self, me: int, k: int) -> list[list[Any]]:
        """The ``k`` documents of smallest number among those this joiner owns (its lowest
        target): over all joiners, the window's bottom-k sample, each document counted once."""
        owned = ((seq, doc) for seq, (doc, _, mask, _) in self.docs.items() if (mask & -mask).bit_length() - 1 == me)
        return [[seq, json.dumps(doc.avps, separators=(",", ":"), ensure_ascii=False)]
                for seq, doc in heapq.nsmallest(k, owned, key=lambda item: item[0])]


class JoinerState(dict):
    """A joiner's open windows (window -> :class:`_WindowJoin`) and the table every joiner keeps
    alike from the heartbeats: each open window's fit and attribute order, the window clock's
    largest time, the count-window count, the newest window and the lineage last seen."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.fits: dict[int, str] = {}
        self.orders: dict[int, list[str]] = {}
        self.seen = -math.inf
        self.count = 0
        self.newest: int | None = None
        self.lineage: str | None = None

    def fields(self) -> dict[str, Any]:
        return {"fits": dict(self.fits), "orders": dict(self.orders), "seen": self.seen, "count": self.count,
                "newest": self.newest, "lineage": self.lineage}

    def restore(self, fields: dict[str, Any]) -> None:
        self.fits = dict(fields.get("fits", {}))
        self.orders = dict(fields.get("orders", {}))
        self.seen = fields.get("seen", -math.inf)
        self.count = fields.get("count", 0)
        self.newest = fields.get("newest")
        self.lineage = fields.get("lineage")


class RoutingError(RuntimeError):
    """A document reached a joiner without a mask under its window's fit (a broken invariant)."""


def _resolve(candidates: list[tuple[int, int]], fid: int) -> tuple[int, bool]:
    """The document's mask under its window's fit, and whether it was routed by no fit: the
    window's candidate, or the broadcast one when the window has no fit yet or a task that saw
    no fit routed it (every joiner, or none for an empty document, which joins nothing under any
    fit: either way it meets every other routing of the window)."""
    for f, mask in candidates:
        if f == fid:
            return mask, f == 0
    for f, mask in candidates:
        if f == 0:
            return mask, True
    raise RoutingError(f"a document reached a joiner without a mask under its window's fit (candidates "
                       f"{[f for f, _ in candidates]}, needed {fid}); its window was routed by another table")


def _reporter(candidates: list[tuple[int, int]]) -> int:
    """The joiner that reports a late document: the lowest it was sent to (0 if it went to none
    by its masks: the router sent it to joiner 0)."""
    union = 0
    for _, mask in candidates:
        union |= mask
    return (union & -union).bit_length() - 1 if union else 0


@dataclass
class JoinerBatch:
    """What one joiner's batch gives back besides its state."""

    out: dict[str, list]
    stats: dict[str, Any]
    added: dict[int, tuple]
    closed: list[int]


class Joiner:
    """One joiner's batch: derive the window table from the heartbeats, join the new documents
    under their windows' fits, report owned pairs, close windows.

    ``windows`` (a :class:`JoinerState`) is the joiner's state; :meth:`process` returns, besides
    the pairs and statistics, the documents it stored per window (one state chunk each) and the
    windows it closed.
    """

    def __init__(self, plan: NaturalPlan, joiner: int, windows: JoinerState | dict) -> None:
        self.plan = plan
        self.joiner = joiner
        self.windows = windows if isinstance(windows, JoinerState) else JoinerState(windows)

    def _number(self, beats: pd.DataFrame) -> tuple[dict[int, int], Counter[int]]:
        """Count windows: every joiner sorts the sort keys of all the batch's documents (from
        the heartbeats) into the same order (time, id, input, number) and numbers them on from
        the documents counted before; identical rows count once."""
        st, size = self.windows, self.plan.size
        parts = [json.loads(text)["keys"] for text in beats["avps"]]
        keys = pd.DataFrame({name: [v for p in parts for v in p[i]] for i, name in enumerate(("time", "id", "side", "seq"))})
        keys = keys.drop_duplicates("seq").sort_values(["time", "id", "side", "seq"], kind="stable", na_position="last")
        positions = st.count + np.arange(len(keys), dtype=np.int64)
        windows = positions // size  # type: ignore[operator]
        st.count += len(keys)
        return dict(zip(keys["seq"].tolist(), windows.tolist())), Counter(windows.tolist())

    def process(self, pdf: pd.DataFrame, seq: int, batch: int = 0, query: str | None = None,
                final: bool = False) -> tuple[dict[str, list], dict[str, Any], dict[int, tuple], list[int]]:
        result = self.run(pdf, seq, batch, query, final)
        return result.out, result.stats, result.added, result.closed

    def run(self, pdf: pd.DataFrame, seq: int, batch: int = 0, query: str | None = None, final: bool = False) -> JoinerBatch:
        plan, me, st = self.plan, self.joiner, self.windows
        full = (1 << plan.partitions) - 1
        kinds = pdf["kind"].to_numpy()
        beats, docs = pdf[kinds == BEAT], pdf[kinds == DOC]
        infos = [json.loads(t) for t in beats["avps"]]
        if not infos:
            raise RoutingError("a joiner's batch has no heartbeat: every routing task sends one")
        lineage = infos[0]["lineage"]
        explicit: dict[str, str] | None = infos[0].get("fits")
        opening = opening_fit(lineage, [i["newest"] for i in infos])
        orders: dict[str, list[str]] = {}
        for info in infos:
            orders.update(info["orders"])
        # the windows of this batch, the same at every joiner
        if plan.window_kind == "count" and explicit is None:
            numbers, present = self._number(beats)
            doc_windows = docs["seq"].map(numbers).to_numpy(dtype=np.int64)
        else:
            present = Counter()
            for info in infos:
                for w, n in info["windows"].items():
                    present[int(w)] += n
            doc_windows = docs["window"].to_numpy(dtype=np.int64)
        first = _first_open(plan, st.seen) if explicit is None else None
        late_windows = {w for w in present if first is not None and w < first}
        on_time = sorted(w for w in present if w not in late_windows)
        for w in on_time:
            if w not in st.fits:
                key = explicit[str(w)] if explicit is not None else opening
                st.fits[w], st.orders[w] = key, orders.get(key, [])
                st[w] = _WindowJoin(plan, st.orders[w])
        if explicit is None and opening != BROADCAST:
            for w, key in st.fits.items():
                if key == BROADCAST:  # a broadcast window may take a fit: its documents meet any other
                    st.fits[w] = opening
        decide: dict[int, str] = {}
        newest = max([*on_time, *([] if st.newest is None else [st.newest])], default=None)
        if explicit is None and st.newest is not None and newest != st.newest and st.newest in st.fits:
            decide[st.newest] = st.fits[st.newest]
        st.newest = newest
        # the documents, by window and number
        out: dict[str, list] = {"left_id": [], "right_id": [], "window": [], "merged": []}
        per_window: dict[int, list[int]] = {}  # received, owned, to_all, dropped, unfitted (routed by no fit)
        by_window: dict[int, int] = {}
        added: dict[int, tuple] = {}
        late_rows: list[dict[str, Any]] = []
        unseen: dict[str, Counter[str]] = {}
        docs = docs.assign(_w=doc_windows).sort_values(["_w", "seq"], kind="stable")
        for w, group in docs.groupby("_w", sort=True):
            w = int(w)
            if w in late_windows:
                for r_seq, side, doc_id, blob in zip(group["seq"], group["side"], group["id"], group["route"]):
                    if _reporter(unpack_route(blob)) == me:
                        late_rows.append({"side": int(side), "id": doc_id.item() if hasattr(doc_id, "item") else doc_id,
                                          "window": w})
                continue
            join = st.get(w)
            if join is None:
                raise RoutingError(f"document of window {w} arrived at joiner {me} before the window was opened")
            key = st.fits[w]
            fid = fit_id(key)
            counts = per_window.setdefault(w, [0, 0, 0, 0, 0])
            stored: tuple[list, list, list, list, list] = ([], [], [], [], [])
            found = 0
            for seq_no, side, blob, doc_id, text, unknown in zip(group["seq"].tolist(), group["side"].tolist(),
                                                                 group["route"].tolist(), group["id"].tolist(),
                                                                 group["avps"].tolist(), group["unknown"].tolist()):
                mask, unfitted = _resolve(unpack_route(blob), fid)
                if not mask >> me & 1 or seq_no in join.docs:  # sent for another candidate, or a repeated row
                    counts[3] += 1
                    continue
                doc = Document(int(seq_no), json.loads(text))
                side = int(side)
                for partner_seq in join.probe(doc, side):
                    partner, p_side, p_mask, p_id = join.docs[partner_seq]
                    if owner(mask, p_mask) != me:
                        continue
                    if plan.two_streams:
                        pair = ((doc_id, doc), (p_id, partner)) if side == 0 else ((p_id, partner), (doc_id, doc))
                    elif (p_id, partner_seq) < (doc_id, doc.doc_id):
                        pair = ((p_id, partner), (doc_id, doc))
                    else:
                        pair = ((doc_id, doc), (p_id, partner))
                    out["left_id"].append(pair[0][0])
                    out["right_id"].append(pair[1][0])
                    out["window"].append(w)
                    if plan.merged:
                        out["merged"].append(json.dumps(merged_document(pair[0][1], pair[1][1]), sort_keys=True,
                                                        separators=(",", ":"), ensure_ascii=False))
                    found += 1
                join.insert(doc, side, mask, doc_id)
                for column, value in zip(stored, (doc.doc_id, side, mask, doc_id, text)):
                    column.append(value)
                lowest = (mask & -mask).bit_length() - 1
                counts[0] += 1
                counts[1] += lowest == me
                counts[2] += mask == full and lowest == me
                counts[4] += unfitted
                if unknown and mask == full and me == 0:  # delta sightings: every broadcast document is here
                    for k in json.loads(unknown).get(key, []):
                        unseen.setdefault(key, Counter())[json.dumps(k, ensure_ascii=False)] += 1
            added[w] = stored
            by_window[w] = found
        # close windows: the clock (time), the count (count windows), the Assigner's frontier, or the end
        if final:
            frontier = max(st.fits) + 1 if st.fits else None
        elif explicit is not None:
            frontier = infos[0]["frontier"]
        elif plan.window_kind == "count":
            frontier = st.count // plan.size  # type: ignore[operator]
        else:
            st.seen = max([st.seen, *(i["max_time"] for i in infos if i["max_time"] is not None)])
            frontier = _first_open(plan, st.seen)
        closed = sorted(w for w in st.fits if frontier is not None and w < frontier)
        if explicit is None and not final and st.newest in closed and st.newest not in decide:
            decide[st.newest] = st.fits[st.newest]  # type: ignore[index]
        samples = {}
        if explicit is None and not final:
            for w in sorted(set(decide) | {w for w, k in st.fits.items() if k == BROADCAST}):
                samples[str(w)] = st[w].sample(me, plan.sample_size)
        stats: dict[str, Any] = {
            "joiner": me, "seq": seq, "batch": batch, "query": query, "lineage": lineage, "time": time.time(),
            "new_lineage": st.lineage != lineage,
            "received": sum(c[0] for c in per_window.values()), "pairs": sum(by_window.values()),
            "pairs_by_window": {str(k): v for k, v in by_window.items()},
            "windows": {str(w): c for w, c in per_window.items()}, "late_rows": late_rows, "samples": samples,
            "stored": sum(len(j.docs) for w, j in st.items() if w not in closed),
        }
        if me == 0:  # the table every joiner derived alike, reported once
            stats.update({
                "table": {str(w): k for w, k in st.fits.items() if w not in closed}, "newest": st.newest,
                "frontier": frontier, "closed": closed, "decide": {str(w): k for w, k in decide.items()},
                "documents": {str(w): present[w] for w in on_time}, "late": {str(w): present[w] for w in late_windows},
                "opening": opening, "seen_newest": max(i["newest"] for i in infos), "count": st.count,
                "decisions": sorted({i["decision"] for i in infos}),
                "unseen": {k: dict(c) for k, c in unseen.items()},
            })
        for w in closed:
            st.pop(w, None)
            st.fits.pop(w, None)
            st.orders.pop(w, None)
        st.lineage = lineage
        return JoinerBatch(out, stats, added, closed)


def _first_open(plan: NaturalPlan, seen: float) -> int | None:
    """The oldest open window of a time or attribute window (None: count windows, or no time yet):
    a window ``[w L, (w + 1) L)`` closes once the largest time of earlier batches, less the
    watermark, reaches its end (the rule of :mod:`driftjoin.clock` in the documents' own units)."""
    if plan.window_kind == "count" or not math.isfinite(seen):
        return None
    return math.floor((seen - plan.watermark) / plan.length)


def _pairs_frame(plan: NaturalPlan, out: dict[str, list], id_is_str: bool) -> pd.DataFrame:
    id_dtype = object if id_is_str else np.int64
    cols = {
        "left_id": pd.Series(out["left_id"], dtype=id_dtype),
        "right_id": pd.Series(out["right_id"], dtype=id_dtype),
        "window": pd.Series(out["window"], dtype=np.int64),
    }
    if plan.merged:
        cols["merged"] = pd.Series(out["merged"], dtype=object)
    return pd.DataFrame(cols)


class JoinerProcessor(OperatorProcessor):
    """One joiner under its slot key (and the plan key, which only keeps the plan); its documents
    live in the shared chunked state layer (one chunk per window and batch; the window table in
    the meta fields), so a batch writes only the documents it stored and a cached joiner skips
    rebuilding its local joins (:mod:`driftjoin.spark.runtime.state`)."""

    def __init__(self, plan: NaturalPlan, id_is_str: bool, final: bool = False) -> None:
        super().__init__(plan)
        self.id_is_str = id_is_str
        self.final = final

    def bind_decisions(self, batch: int) -> None:
        """Bind the newest routing decision to batch ``batch`` (:func:`~driftjoin.spark.natural.table.bind_decision`)."""
        if self.plan.control:
            bind_decision(self.plan.control, self.plan.lineage, batch)

    def open(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "joiner_docs")
        self.keep_old_states(handle, "joiner")

    def _rebuild(self, meta: Meta, chunks: Chunks, stale: JoinerState | None) -> JoinerState:
        windows = JoinerState()
        windows.restore(meta.fields)
        for w, order in windows.orders.items():
            ids = chunks.ids(w)
            old = (stale or {}).get(w)
            join = old if old is not None and ids[:len(old.chunks)] == old.chunks else _WindowJoin(self.plan, order)
            for chunk, stored in chunks.read(w, {c: None for c in join.chunks}):
                if stored is not None:
                    join.load(chunk, stored)
            windows[w] = join
        return windows

    def batch(self, key: Any, pdf: pd.DataFrame) -> Iterator[pd.DataFrame]:
        started = time.perf_counter()
        loaded = self.state.load(key, self._rebuild, JoinerState)
        self.refuse_old_state(loaded.source == "new")
        if loaded.source == "cache":
            loaded.value.restore(loaded.meta.fields)
        q = task_query()
        batch, query = q.batch_id or 0, q.query_id
        core = Joiner(self.plan, self.plan.slot_of(key), loaded.value)
        result = core.run(pdf, loaded.seq, batch, query, self.final)
        loaded.chunks.drop_groups(lambda g: g not in result.closed)
        for w, stored in result.added.items():
            if w in core.windows:  # not closed by this batch
                core.windows[w].chunks.append(loaded.chunks.add(w, stored))
        self.state.save(key, loaded, sum(len(w.docs) for w in core.windows.values()) * 200, core.windows.fields())
        root = self.plan.stats_dir
        if root:
            if core.joiner == 0 and self.plan.control and result.stats["new_lineage"]:
                mark_start(self.plan.control, self.plan.lineage, batch)  # the first batch this run
            result.stats.update(elapsed=time.perf_counter() - started, state_source=loaded.source,
                                chunks_read=loaded.chunks.read_count)
            write_stats(root, JOINER_OP, core.joiner, loaded.seq, result.stats)
            if self.plan.control:
                write_record(self.plan.control, core.joiner, loaded.seq, result.stats)
        if result.out["left_id"]:
            yield _pairs_frame(self.plan, result.out, self.id_is_str)
