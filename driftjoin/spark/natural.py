"""``natural_join``: the schema-free natural join of JSON document streams on Spark (issues 6, 14).

Data path (one micro-batch, ``routing="parallel"``, the default)::

    docs (id, JSON text | struct)  side 0 ─┐
    other                          side 1 ─┴ select side, id, doc, time; unionByName
      │ mapInArrow(route_documents)   in every input task, statelessly: parse + flatten, window,
      │                               the document's candidate fits (the newest routing table
      │                               the control plane published) and its mask under each;
      │                               one row per joiner in the union of the masks, and one
      │                               heartbeat per joiner (the task's view, window counts,
      │                               largest time, count-window sort keys)
      ▼ (jkey, kind, seq, side, id, window, time, route, avps, unknown)
    groupBy(jkey).transformWithStateInPandas(JoinerProcessor)        [m joiners + the plan key]
      │ every joiner derives the same window table from the heartbeats (which windows open,
      │ with which fit; count-window numbers; the window clock), keeps each document under the
      │ mask of its window's fit, joins it (FP-tree, hash, nested loop) and reports a pair only
      │ if it is the lowest joiner both documents were sent to
      ▼ (left_id, right_id, window[, merged])
    statistics (per joiner and batch) → NaturalPartitionController on the driver
      (driftjoin/control/natural.py): window quality, theta refits on the joiners' samples,
      delta keys from the sightings → a new routing table (driftjoin/spark/natural_table.py)

Only the joiners hold state. The control plane decides between batches and its tables may
reach some tasks of a batch and not others: :mod:`driftjoin.spark.natural_table` has the rule
that keeps every window routed by one fit anyway, ``docs/natural_join.md`` the whole argument.
``routing="assigner"`` keeps the paper's single Assigner (:mod:`driftjoin.spark.natural_assigner`)
in front of the same joiners. A static DataFrame is fitted on a sample on the driver and routed
in one pass by the same routers, then joined by the same joiners through ``applyInPandas``.
"""

from __future__ import annotations

import heapq
import json
import math
import pickle
import tempfile
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from driftjoin.clock import WindowClock
from driftjoin.durations import parse_duration
from driftjoin.schemafree.document import Document, merged_document
from driftjoin.schemafree.fptree import AttributeOrder
from driftjoin.schemafree.joiner import owner
from driftjoin.schemafree.localjoin import make_local_join
from driftjoin.schemafree.metrics import gini
from driftjoin.schemafree.partitioner import mask_targets
from driftjoin.spark.metrics_sink import read_stats, write_stats
from driftjoin.spark.natural_assigner import Assigner, AssignerProcessor, AssignerState
from driftjoin.spark.natural_plan import (
    ADOPTABLE,
    ASSIGNER_OP,
    BEAT,
    DOC,
    JOINER_OP,
    NaturalPlan,
    InvalidDocument,
    add_heartbeats,
    check_rows,
    check_settings,
    check_window,
    dead_letter_batches,
    empty_rows,
    pack_route,
    parse_batches,
    parse_document,
    unpack_route,
)
from driftjoin.spark.natural_table import (
    BROADCAST,
    RoutingView,
    doc_seq,
    fit_id,
    load_view,
    mark_start,
    opening_fit,
    write_record,
)
from driftjoin.spark.plan_guard import PLAN_KEY, PlanGuard
from driftjoin.spark.session import prepare_for_stateful, prepare_session
from driftjoin.spark.similarity import _id_type
from driftjoin.spark.state import BlobState, ChunkedState, Chunks, Meta
from driftjoin.spark.static import run_static


def _task_ids() -> tuple[int, str | None]:
    """The micro-batch id and query id of the running task (0 and None outside a stream)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return 0, None
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return (0 if batch is None else int(batch)), ctx.getLocalProperty("sql.streaming.queryId")


# --------------------------------------------------------------------------------------------
# The routers (stateless, one per input task)
# --------------------------------------------------------------------------------------------


class Router:
    """Routes the documents of one task by one :class:`~driftjoin.spark.natural_table.RoutingView`.

    Each valid document goes to every joiner in the union of its candidates' masks and carries
    every candidate's mask (:func:`~driftjoin.spark.natural_plan.pack_route`); a document the
    table knows to be late, and an empty one (no pair: it joins nothing), goes to joiner 0 only,
    which reports a late one. :meth:`heartbeats` closes the task.
    """

    def __init__(self, plan: NaturalPlan, view: RoutingView, id_is_str: bool) -> None:
        self.plan = plan
        self.view = view
        self.id_is_str = id_is_str
        self.windows: Counter[int] = Counter()
        self.max_time = -math.inf
        self.sort_keys: tuple[list, list, list, list] = ([], [], [], [])
        self.documents = 0

    def route(self, sides: list[int], ids: list[Any], times: list[float | None], pairs: list[dict[str, str]],
              texts: list[str]) -> dict[str, list]:
        """Routed rows of valid documents (flat pairs and their JSON text)."""
        plan, view = self.plan, self.view
        keys = plan.keys
        count = plan.window_kind == "count"
        out = empty_rows()
        for side, doc_id, stamp, avps, text in zip(sides, ids, times, pairs, texts):
            window = None if count else plan.window_of(stamp)  # type: ignore[arg-type]
            seq = doc_seq(side, doc_id, stamp, text)
            doc = Document(seq, avps)
            routes, unknown, union = [], {}, 0
            for key in view.candidates(window):
                mask, unseen = view.route(key, doc)
                routes.append((fit_id(key), mask))
                union |= mask
                if unseen:
                    unknown[key] = [list(k) for k in unseen]
            blob = pack_route(routes)
            unknown_text = json.dumps(unknown, separators=(",", ":"), ensure_ascii=False) if unknown else ""
            when = math.nan if stamp is None else stamp
            for target in mask_targets(union or 1):
                for name, value in (("jkey", keys[target]), ("kind", DOC), ("seq", seq), ("side", side), ("id", doc_id),
                                    ("window", -1 if window is None else window), ("time", when), ("route", blob),
                                    ("avps", text), ("unknown", unknown_text if target == 0 else "")):
                    out[name].append(value)
            self.documents += 1
            if count:
                for column, value in zip(self.sort_keys, (when, doc_id, side, seq)):
                    column.append(value)
            else:
                self.windows[window] += 1  # type: ignore[index]
                self.max_time = max(self.max_time, stamp)  # type: ignore[type-var]
        return out

    def add(self, batch: pa.RecordBatch) -> dict[str, list] | None:
        """Parse and route one input batch (invalid rows are the dead letters' business)."""
        pairs, texts, _, times = check_rows(self.plan, batch)
        keep = [i for i, p in enumerate(pairs) if p is not None]
        if not keep:
            return None
        sides = batch.column("side").to_pylist()
        ids = batch.column("id").to_pylist()
        return self.route([sides[i] for i in keep], [ids[i] for i in keep], [times[i] for i in keep],
                          [pairs[i] for i in keep], [texts[i] for i in keep])  # type: ignore[misc]

    def heartbeats(self) -> dict[str, list]:
        """One heartbeat per joiner and the plan key: this task's view and what it routed."""
        view = self.view
        info = {"lineage": view.lineage, "decision": view.version, "newest": view.newest, "floor": view.floor,
                "orders": view.orders(), "documents": self.documents,
                "max_time": self.max_time if math.isfinite(self.max_time) else None,
                "windows": {str(w): n for w, n in sorted(self.windows.items())}}
        if self.plan.window_kind == "count":
            info["keys"] = self.sort_keys
        out = empty_rows()
        add_heartbeats(out, [*self.plan.keys, PLAN_KEY], info, "" if self.id_is_str else 0)
        return out


def _routed_batch(rows: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(rows[f.name], f.type) for f in schema], schema=schema)


def route_documents(plan: NaturalPlan, id_is_str: bool, schema: pa.Schema,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The router task (``mapInArrow``): read the routing table once, route, then heartbeats."""
    batch_id, _ = _task_ids()
    view = load_view(plan.control, plan.lineage, plan.partitions, plan.initial, batch_id)
    router = Router(plan, view, id_is_str)
    for batch in batches:
        rows = router.add(batch)
        if rows is not None and rows["jkey"]:
            yield _routed_batch(rows, schema)
    yield _routed_batch(router.heartbeats(), schema)


# --------------------------------------------------------------------------------------------
# The joiners
# --------------------------------------------------------------------------------------------


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
        clock = WindowClock(plan.length if plan.window_kind != "count" else None, plan.watermark, st.seen)
        first = clock.first_open() if explicit is None else None
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
            clock.advance(max((i["max_time"] for i in infos if i["max_time"] is not None), default=-math.inf))
            st.seen = clock.seen
            frontier = clock.first_open()
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


class JoinerProcessor(StatefulProcessor):
    """One joiner under its slot key (and the plan key, which only keeps the plan); its documents
    live in the shared chunked state layer (one chunk per window and batch; the window table in
    the meta fields), so a batch writes only the documents it stored and a cached joiner skips
    rebuilding its local joins (:mod:`driftjoin.spark.state`)."""

    def __init__(self, plan: NaturalPlan, id_is_str: bool, final: bool = False) -> None:
        self.plan = plan
        self.id_is_str = id_is_str
        self.final = final

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "joiner_docs")
        self.legacy = BlobState(handle, "joiner")
        self.guard = PlanGuard(handle, "natural_join", self.plan.settings(), ADOPTABLE)

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

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        pdf = pd.concat(list(rows), ignore_index=True)
        if pdf.empty:
            return
        self.guard.check()
        if key[0] == PLAN_KEY:
            return
        started = time.perf_counter()
        loaded = self.state.load(key[0], self._rebuild, JoinerState)
        if loaded.source == "new" and self.legacy.value.exists():
            raise ValueError("natural_join state has another format; use a new checkpoint location")
        if loaded.source == "cache":
            loaded.value.restore(loaded.meta.fields)
        batch, query = _task_ids()
        core = Joiner(self.plan, self.plan.slot_of(key[0]), loaded.value)
        result = core.run(pdf, loaded.seq, batch, query, self.final)
        loaded.chunks.drop_groups(lambda g: g not in result.closed)
        for w, stored in result.added.items():
            if w in core.windows:  # not closed by this batch
                core.windows[w].chunks.append(loaded.chunks.add(w, stored))
        self.state.save(key[0], loaded, sum(len(w.docs) for w in core.windows.values()) * 200, core.windows.fields())
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

    def close(self) -> None:
        pass


# --------------------------------------------------------------------------------------------
# The operator
# --------------------------------------------------------------------------------------------


def _doc_column(df: DataFrame, name: str) -> Column:
    if name not in df.columns:
        raise ValueError(f"doc_col={name!r} is not a column of the input; columns are {df.columns}")
    dtype = df.schema[name].dataType
    if isinstance(dtype, T.StringType):
        return F.col(name)
    if isinstance(dtype, (T.StructType, T.MapType)):
        return F.to_json(F.col(name))
    if isinstance(dtype, T.BinaryType):
        return F.col(name).cast("string")
    raise TypeError(f"doc_col={name!r} has type {dtype.simpleString()}; use a string of JSON text, a struct or a map")


def _time_column(df: DataFrame, plan: NaturalPlan, time_col: str | None) -> Column:
    if time_col is None:
        if plan.window_kind == "time":
            return F.current_timestamp().cast("double")  # the micro-batch time
        return F.lit(None).cast("double")
    if time_col not in df.columns:
        raise ValueError(f"time_col={time_col!r} is not a column of the input; columns are {df.columns}")
    dtype = df.schema[time_col].dataType
    if isinstance(dtype, (T.TimestampType, T.TimestampNTZType, T.DateType)):
        return F.col(time_col).cast("timestamp").cast("double")
    if isinstance(dtype, T.NumericType):
        return F.col(time_col).cast("double")
    raise TypeError(f"time_col={time_col!r} has type {dtype.simpleString()}; use a timestamp or a number of seconds")


def _normalise(df: DataFrame, side: int, plan: NaturalPlan, id_col: str, doc_col: str, id_type: T.DataType,
               time_col: str | None, with_raw: bool) -> DataFrame:
    cols = [
        F.lit(side).cast("byte").alias("side"),
        F.col(id_col).cast(id_type).alias("id"),
        _doc_column(df, doc_col).alias("doc"),
        _time_column(df, plan, time_col).alias("time"),
    ]
    if with_raw:
        row = F.struct(*[F.col(c) for c in df.columns])
        cols.append(F.to_json(row, {"ignoreNullFields": "false"}).alias("raw"))
    return df.select(*cols)


def _sample_documents(sample: object, plan: NaturalPlan, doc_col: str) -> list[Document]:
    if isinstance(sample, DataFrame):
        if sample.isStreaming:
            raise ValueError("sample= must be a static DataFrame or a list of documents, not a stream")
        texts = [r[0] for r in sample.select(_doc_column(sample, doc_col)).limit(plan.sample_size).collect()]
    elif isinstance(sample, (list, tuple)):
        texts = [s if isinstance(s, (str, bytes)) or s is None else json.dumps(s) for s in sample]
    else:
        raise TypeError("sample= must be a list of documents (dicts or JSON text) or a static DataFrame with doc_col")
    docs = []
    for i, text in enumerate(texts):
        try:
            avps, stamp = parse_document(text, plan.time_attribute)
        except InvalidDocument:
            continue
        docs.append(Document(i, avps, stamp))
    if not docs:
        raise ValueError("sample= holds no valid JSON object; pass documents to fit the partitions on, or sample=None to fit on the first window")
    return docs


def _make_plan(docs: DataFrame, other: DataFrame | None, *, window: object, partitions: int | None, partitioner: str,
               local_join: str, time_col: str | None, watermark: str | None, merged: bool, delta: int, theta: float,
               creators: int, expand: bool, sample_size: int, seed: int, metrics_dir: str | None,
               routing: str) -> NaturalPlan:
    if partitions is None:
        partitions = int(docs.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    check_settings(partitions, partitioner, local_join, delta, theta, creators, sample_size, routing)
    kind, size, length, attribute = check_window(window, time_col)
    event_time = kind == "attribute" or (kind == "time" and time_col is not None)
    if watermark is not None and not event_time:
        raise ValueError("watermark= applies to event-time windows only: pass time_col= with window='<duration>', or TimeWindow(...)")
    lateness = 0.0
    if watermark is not None:
        lateness = float(watermark) if kind == "attribute" and isinstance(watermark, (int, float)) else parse_duration(watermark, "watermark")
    return NaturalPlan(
        partitions=int(partitions), partitioner=partitioner, local_join=local_join, delta=int(delta), theta=float(theta),
        creators=int(creators), expand=bool(expand), window_kind=kind, size=size, length=length, time_attribute=attribute,
        watermark=lateness, two_streams=other is not None, merged=bool(merged), sample_size=int(sample_size),
        seed=int(seed), metrics_dir=metrics_dir, require_time=kind != "count" or time_col is not None, routing=routing,
        lineage=uuid.uuid4().hex[:12],
    )


def _schemas(plan: NaturalPlan, id_type: T.DataType) -> tuple[T.StructType, T.StructType, T.StructType, T.StructType]:
    parsed = T.StructType([
        T.StructField("akey", T.IntegerType()), T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        T.StructField("time", T.DoubleType()), T.StructField("avps", T.StringType()),
    ])
    routed = T.StructType([
        T.StructField("jkey", T.IntegerType()), T.StructField("kind", T.ByteType()), T.StructField("seq", T.LongType()),
        T.StructField("side", T.ByteType()), T.StructField("id", id_type), T.StructField("window", T.LongType()),
        T.StructField("time", T.DoubleType()), T.StructField("route", T.StringType()),
        T.StructField("avps", T.StringType()), T.StructField("unknown", T.StringType()),
    ])
    keyed = T.StructType([T.StructField("seq", T.LongType()), T.StructField("avps", T.StringType())])
    fields = [T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("window", T.LongType())]
    if plan.merged:
        fields.append(T.StructField("merged", T.StringType()))
    return parsed, routed, keyed, T.StructType(fields)


def sample_rows(plan: NaturalPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Valid documents as (number, flat pairs as JSON): the driver's sample of a static input is
    the ``sample_size`` of smallest number (a uniform sample, the same on every run)."""
    for batch in batches:
        _, texts, _, times = check_rows(plan, batch)
        sides, ids = batch.column("side").to_pylist(), batch.column("id").to_pylist()
        keep = [i for i, t in enumerate(texts) if t is not None]
        if keep:
            yield pa.RecordBatch.from_arrays(
                [pa.array([doc_seq(sides[i], ids[i], times[i], texts[i]) for i in keep], pa.int64()),  # type: ignore[arg-type]
                 pa.array([texts[i] for i in keep], pa.string())], names=["seq", "avps"])


def _control_dir(spark: Any, metrics_dir: str | None) -> str:
    """Where a stream's decisions and statistics go: ``metrics_dir``, else (local mode only) a
    new temporary directory."""
    if metrics_dir:
        return metrics_dir
    master = spark.sparkContext.master
    if not master.startswith("local"):
        raise ValueError(f"natural_join on a cluster ({master}) needs metrics_dir= (a directory the driver and the "
                         "executors share, e.g. on HDFS or S3): the control plane publishes its partitionings there")
    return tempfile.mkdtemp(prefix="driftjoin-natural-")


def natural_join(
    docs: DataFrame,
    other: DataFrame | None = None,
    *,
    window: object = "1 minute",
    partitions: int | None = None,
    partitioner: str = "value",
    local_join: str = "fptree",
    id_col: str = "id",
    doc_col: str = "doc",
    time_col: str | None = None,
    watermark: str | None = None,
    merged: bool = False,
    sample: object = None,
    delta: int = 3,
    theta: float = 0.2,
    creators: int = 1,
    expand: bool = True,
    sample_size: int = 2000,
    seed: int = 0,
    metrics_dir: str | None = None,
    routing: str = "parallel",
) -> DataFrame:
    """Exact natural join of schema-free JSON documents per tumbling window, streaming or static.

    ``docs`` has an id column (``id_col``, integer or string, unique) and a document column
    (``doc_col``: JSON text, or a struct/map converted with ``to_json``). Two documents join
    when they share at least one attribute and agree on every attribute they share (nested
    objects are flattened to dotted paths, arrays are atomic values, nulls are absent; see
    :mod:`driftjoin.schemafree.document`).

    ``other=None`` joins ``docs`` with itself: each unordered pair once, ``left_id < right_id``.
    With ``other`` only pairs across the two inputs are produced: ``left_id`` from ``docs``,
    ``right_id`` from ``other``.

    ``window``: a document count (``1000`` or ``CountWindow(1000)``; documents of a micro-batch
    are taken in order of ``time_col`` if given, then id), a duration (``"1 minute"``) over
    ``time_col`` (event time; ``watermark`` = how late a document may arrive, default 0) or,
    without ``time_col``, over the micro-batch time, or ``TimeWindow(length, attribute)`` with
    the time in a JSON attribute. A static input with a duration and no ``time_col`` is one
    window.

    ``partitions`` joiners (default ``spark.sql.shuffle.partitions``) and a ``partitioner``:
    ``"value"`` (default: each document to one joiner by the values of attributes almost every
    document carries, the others to all joiners; association groups where no such attributes
    divide the work; :mod:`driftjoin.schemafree.valuepart`), or the paper's ``"ag"``
    association groups, ``"sc"`` set cover, ``"ds"`` disjoint sets, fitted on
    ``sample`` (a list of documents or a static DataFrame), else, on a stream, on the first
    window's first documents, updated by ``delta`` and refitted between windows when
    replication or maximal load grows by more than ``theta``. ``local_join``: ``"fptree"``,
    ``"hash"`` or ``"nested"``.

    ``routing``: ``"parallel"`` (default) routes in every input task, by partitionings that a
    controller on the driver (:class:`driftjoin.control.natural.NaturalPartitionController`)
    fits from the joiners' statistics and publishes in ``metrics_dir`` (a new temporary
    directory when none is given, local mode only); a static input is fitted on a sample on
    the driver (``sample``, else ``sample_size`` documents drawn from it) and routed in one
    pass. ``"assigner"``: the paper's single Assigner, one task routing every document
    sequentially (kept to measure against).

    Output: ``left_id, right_id, window`` (window index: ``floor(time / length)`` or
    ``position // size``), and ``merged`` (the union of both documents as flat JSON) when
    ``merged=True``. Rows that cannot be joined are skipped; :func:`invalid_documents` lists
    them. Per-window metrics go to ``metrics_dir`` (see :func:`natural_join_metrics`).
    """
    if other is not None and other.isStreaming != docs.isStreaming:
        raise ValueError("docs and other must both be streaming or both static")
    prepare_session(docs.sparkSession, metrics_dir)
    plan = _make_plan(docs, other, window=window, partitions=partitions, partitioner=partitioner, local_join=local_join,
                      time_col=time_col, watermark=watermark, merged=merged, delta=delta, theta=theta, creators=creators,
                      expand=expand, sample_size=sample_size, seed=seed, metrics_dir=metrics_dir, routing=routing)
    id_type = _id_type(docs, other, id_col)
    id_is_str = isinstance(id_type, T.StringType)
    inputs = [_normalise(docs, 0, plan, id_col, doc_col, id_type, time_col, False)]
    if other is not None:
        inputs.append(_normalise(other, 1, plan, id_col, doc_col, id_type, time_col, False))
    fit_docs = _sample_documents(sample, plan, doc_col) if sample is not None else None
    data = inputs[0] if len(inputs) == 1 else inputs[0].unionByName(inputs[1])
    parsed_schema, routed_schema, keyed_schema, pair_schema = _schemas(plan, id_type)
    spark = docs.sparkSession
    streaming = data.isStreaming
    if routing == "parallel" and not streaming and fit_docs is None:
        drawn = data.mapInArrow(lambda it: sample_rows(plan, it), keyed_schema).orderBy("seq").limit(plan.sample_size)
        fit_docs = [Document(r.seq, json.loads(r.avps)) for r in drawn.collect()]
    if fit_docs:
        fitted = plan.new_partitioner()
        fitted.fit(fit_docs)
        plan = NaturalPlan(**{**plan.__dict__, "initial": pickle.dumps(fitted, protocol=pickle.HIGHEST_PROTOCOL)})
    if routing == "assigner":
        parsed = data.mapInArrow(lambda it: parse_batches(plan, it), parsed_schema)
        if streaming:
            prepare_for_stateful(spark, plan.partitions)
            routed = parsed.groupBy("akey").transformWithStateInPandas(
                AssignerProcessor(plan, id_is_str), routed_schema, "Append", "None")
            return routed.groupBy("jkey").transformWithStateInPandas(
                JoinerProcessor(plan, id_is_str), pair_schema, "Append", "None")
        spark.conf.set("spark.sql.shuffle.partitions", str(plan.partitions))
        routed = parsed.groupBy("akey").applyInPandas(
            lambda k, pdf: run_static(AssignerProcessor(plan, id_is_str, final=True), k, pdf), routed_schema)
        return routed.groupBy("jkey").applyInPandas(
            lambda k, pdf: run_static(JoinerProcessor(plan, id_is_str, final=True), k, pdf), pair_schema)
    arrow_schema = pa.schema([pa.field(f.name, _ARROW[type(f.dataType)]) for f in routed_schema.fields])
    if streaming:
        from driftjoin.control.natural import NaturalPartitionController, attach_natural

        plan = NaturalPlan(**{**plan.__dict__, "control": _control_dir(spark, metrics_dir)})
        prepare_for_stateful(spark, plan.partitions)
        attach_natural(spark, NaturalPartitionController(plan))
        routed = data.mapInArrow(lambda it: route_documents(plan, id_is_str, arrow_schema, it), routed_schema)
        return routed.groupBy("jkey").transformWithStateInPandas(
            JoinerProcessor(plan, id_is_str), pair_schema, "Append", "None")
    spark.conf.set("spark.sql.shuffle.partitions", str(plan.partitions))
    routed = data.mapInArrow(lambda it: route_documents(plan, id_is_str, arrow_schema, it), routed_schema)
    return routed.groupBy("jkey").applyInPandas(
        lambda k, pdf: run_static(JoinerProcessor(plan, id_is_str, final=True), k, pdf), pair_schema)


_ARROW = {T.IntegerType: pa.int32(), T.ByteType: pa.int8(), T.LongType: pa.int64(), T.StringType: pa.string(),
          T.DoubleType: pa.float64()}


def invalid_documents(
    docs: DataFrame,
    other: DataFrame | None = None,
    *,
    id_col: str = "id",
    doc_col: str = "doc",
    time_col: str | None = None,
    window: object = None,
) -> DataFrame:
    """The dead-letter output: every input row :func:`natural_join` skips, with the reason.

    Columns: ``side`` (0 ``docs``, 1 ``other``), ``id``, ``raw`` (the whole row as JSON) and
    ``reason``: ``missing id``, ``missing document``, ``unparsable JSON: ...``, ``not a JSON
    object (got ...)``, ``missing time`` (null ``time_col``), ``missing time attribute ...``
    or ``time attribute ... is not a number`` (with ``window=TimeWindow(...)``). Pass the same
    ``time_col``/``window`` as to the join. Stateless: it can run as its own streaming query.
    """
    prepare_session(docs.sparkSession)
    kind, size, length, attribute = ("count", 1, None, None) if window is None else check_window(window, time_col)
    plan = NaturalPlan(partitions=1, partitioner="ag", local_join="hash", delta=1, theta=0.0, creators=1, expand=False,
                       window_kind=kind, size=size, length=length, time_attribute=attribute, watermark=0.0,
                       two_streams=other is not None, merged=False, sample_size=1, seed=0, metrics_dir=None,
                       require_time=kind != "count" or time_col is not None)
    id_type = _id_type(docs, other, id_col)
    inputs = [_normalise(docs, 0, plan, id_col, doc_col, id_type, time_col, True)]
    if other is not None:
        inputs.append(_normalise(other, 1, plan, id_col, doc_col, id_type, time_col, True))
    data = inputs[0] if len(inputs) == 1 else inputs[0].unionByName(inputs[1])
    schema = T.StructType([
        T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        T.StructField("raw", T.StringType()), T.StructField("reason", T.StringType()),
    ])
    return data.mapInArrow(lambda it: dead_letter_batches(plan, it), schema)




# --------------------------------------------------------------------------------------------
# Metrics reader
# --------------------------------------------------------------------------------------------

_METRIC_COLUMNS = ["window", "documents", "replication", "max_load", "gini", "loads", "to_all", "pairs",
                   "repartitioned", "repartitions", "late", "closed"]


def natural_join_metrics(metrics_dir: str) -> pd.DataFrame:
    """Per-window metrics of a natural join run, one row per window, ascending.

    Columns: ``window, documents, replication, max_load, gini, loads, to_all, pairs,
    repartitioned, repartitions, late, closed``. ``loads[j]``: documents joiner ``j`` kept;
    ``replication`` their sum over the window's documents, ``max_load`` the largest share at
    one joiner; ``pairs`` sums the joiners' reports and ``late`` the documents dropped because
    their window had closed. ``repartitioned``: the window's quality made the control plane (or
    the single Assigner) refit; ``repartitions``: such refits up to this window. While a
    controller of this directory runs in this process, its decisions on the batches written so
    far are awaited first (at most 30 s).
    """
    from driftjoin.control.natural import CONTROLLERS, read_log

    controller = CONTROLLERS.get(metrics_dir)
    if controller is not None:
        controller.settle()
    pairs: Counter[int] = Counter()
    loads: dict[int, dict[int, int]] = {}
    to_all: Counter[int] = Counter()
    documents: Counter[int] = Counter()
    late: Counter[int] = Counter()
    closed: set[int] = set()
    joiners = 0
    for rec in read_stats(metrics_dir, JOINER_OP):
        joiners = max(joiners, rec["joiner"] + 1)
        for w, n in rec.get("pairs_by_window", {}).items():
            pairs[int(w)] += n
        for w, (received, _, everywhere, *_) in rec.get("windows", {}).items():
            per = loads.setdefault(int(w), {})
            per[rec["joiner"]] = per.get(rec["joiner"], 0) + received
            to_all[int(w)] += everywhere
        for w, n in rec.get("documents", {}).items():
            documents[int(w)] += n
        for w, n in rec.get("late", {}).items():
            late[int(w)] += n
        closed.update(rec.get("closed", []))
    assigner: dict[int, tuple[int, dict[str, Any]]] = {}
    for rec in read_stats(metrics_dir, ASSIGNER_OP):  # routing="assigner": its own record of each window
        for w in rec.get("windows", []):
            if w["window"] not in assigner or assigner[w["window"]][0] < rec["seq"]:
                assigner[w["window"]] = (rec["seq"], w)
        for k, v in rec.get("late", {}).items():
            late[int(k)] += v
    refits = {int(e["window"]) for e in read_log(metrics_dir) if not e["first"]}
    rows, done = [], 0
    for w in sorted(set(pairs) | set(loads) | set(documents) | set(late) | set(assigner)):
        if w in assigner:
            base = assigner[w][1]
            rows.append({"window": w, **{k: base[k] for k in ("documents", "replication", "max_load", "gini", "loads",
                                                              "to_all", "repartitioned", "repartitions", "closed")},
                         "pairs": pairs.get(w, 0), "late": late.get(w, 0)})
            continue
        n = documents.get(w, 0)
        per = loads.get(w, {})
        vector = [per.get(j, 0) for j in range(joiners)]
        done += w in refits
        rows.append({
            "window": w, "documents": n, "replication": sum(vector) / n if n else 0.0,
            "max_load": max(vector, default=0) / n if n else 0.0, "gini": gini(vector), "loads": vector,
            "to_all": to_all.get(w, 0), "pairs": pairs.get(w, 0), "repartitioned": w in refits, "repartitions": done,
            "late": late.get(w, 0), "closed": w in closed,
        })
    return pd.DataFrame(rows, columns=_METRIC_COLUMNS)


__all__ = [
    "Assigner",
    "AssignerProcessor",
    "AssignerState",
    "InvalidDocument",
    "Joiner",
    "JoinerProcessor",
    "NaturalPlan",
    "Router",
    "invalid_documents",
    "natural_join",
    "natural_join_metrics",
    "parse_document",
    "route_documents",
]
