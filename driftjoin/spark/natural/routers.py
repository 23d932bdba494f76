"""natural_join's routers: stateless, one per input task, in every task of the input.

Each router task reads the routing decision bound to its batch once
(:func:`~driftjoin.spark.natural.table.load_view`), parses and flattens its documents, gives each
its window and its candidate fits (:meth:`~driftjoin.spark.natural.table.RoutingView.candidates`)
and sends it to every joiner in the union of the candidates' masks, carrying each candidate's
mask; then one heartbeat per joiner and the plan key with what the task saw (its view, the
windows it routed to, its largest time, count-window sort keys), from which every joiner derives
the same window table (:mod:`driftjoin.spark.natural.joiners`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from typing import Any, Iterator

import pyarrow as pa

from driftjoin.schemafree.document import Document
from driftjoin.schemafree.partitioner import mask_targets
from driftjoin.spark.natural.plan import (
    DOC,
    NaturalPlan,
    add_heartbeats,
    check_rows,
    empty_rows,
    pack_route,
)
from driftjoin.spark.natural.table import (
    RoutingView,
    doc_seq,
    fit_id,
    load_view,
)
from driftjoin.spark.runtime.plan_guard import PLAN_KEY
from driftjoin.spark.runtime.queries import task_query


class Router:
    """Routes the documents of one task by one :class:`~driftjoin.spark.natural.table.RoutingView`.

    Each valid document goes to every joiner in the union of its candidates' masks and carries
    every candidate's mask (:func:`~driftjoin.spark.natural.plan.pack_route`); a document the
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
        add_heartbeats(out, [*self.plan.keys, PLAN_KEY], info, self.id_is_str)
        return out


def _routed_batch(rows: dict[str, list], schema: pa.Schema) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays([pa.array(rows[f.name], f.type) for f in schema], schema=schema)


def route_documents(plan: NaturalPlan, id_is_str: bool, schema: pa.Schema,
                    batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The router task (``mapInArrow``): read the routing table once, route, then heartbeats."""
    task = task_query()
    view = load_view(plan.control, plan.lineage, plan.partitions, plan.initial, task.batch_id or 0, query=task.query_id)
    router = Router(plan, view, id_is_str)
    for batch in batches:
        rows = router.add(batch)
        if rows is not None and rows["jkey"]:
            yield _routed_batch(rows, schema)
    yield _routed_batch(router.heartbeats(), schema)
