"""``natural_join``: the schema-free natural join of JSON document streams on Spark (issue 6).

Data path (one micro-batch)::

    docs (id, JSON text | struct)  side 0 ─┐
    other                          side 1 ─┴ select side, id, doc, time; unionByName
      │ mapInArrow(parse_batches)      parse + flatten (parallel, stateless); bad rows dropped
      ▼ (akey, side, id, time, avps)   avps = the flat attribute-value pairs as JSON
    groupBy(akey).transformWithStateInPandas(AssignerProcessor)      [one key: the Assigner]
      │ windows, Partitioner per open window (fit / delta update / refit at window starts),
      │ route: one row per target joiner, carrying the document's joiner mask
      ▼ (jkey, kind, seq, side, id, window, mask, avps)   kind: open window / document / frontier
    groupBy(jkey).transformWithStateInPandas(JoinerProcessor)        [m joiners]
      │ per open window: local join (FP-tree, hash, nested loop) of the stored documents;
      │ a pair is reported only by the lowest joiner both documents were sent to
      ▼ (left_id, right_id, window[, merged])

The partitioner is global state, so it lives under a single grouping key (``akey``): one task
per batch routes every document. Parsing runs before it, in parallel. Joiner ``i`` has the
grouping key ``slot_keys(m)[i]`` (:mod:`driftjoin.spark.keys`), which Spark places in shuffle
partition ``i`` of ``m``. Each key's state is one binary value read and written once per batch.
Static DataFrames run the same two processors once through ``applyInPandas``.

Exactness and exactly-once are argued in ``docs/natural_join.md``; in short: documents of one
window are all routed by the same fit of the partitioner (a refit only serves windows opened
after it), so two joinable documents of a window share a joiner; the lowest such joiner alone
reports the pair; every step is deterministic given the batch, and state rolls back with it.
"""

from __future__ import annotations

import json
import math
import pickle
import random
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql import types as T
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle

from driftjoin.durations import parse_duration
from driftjoin.schemafree.document import Document, flatten, merged_document
from driftjoin.schemafree.fptree import AttributeOrder
from driftjoin.schemafree.joiner import owner
from driftjoin.schemafree.localjoin import make_local_join
from driftjoin.schemafree.metrics import routing_quality
from driftjoin.schemafree.partitioner import Partitioner, mask_targets
from driftjoin.schemafree.window import CountWindow, TimeWindow
from driftjoin.spark.keys import slot_keys
from driftjoin.spark.metrics_sink import read_stats, write_stats
from driftjoin.spark.plan_guard import PlanGuard
from driftjoin.spark.session import prepare_for_stateful
from driftjoin.spark.state import BlobState, ChunkedState, Chunks, Meta
from driftjoin.spark.similarity import _id_type
from driftjoin.spark.static import run_static

PARTITIONERS = ("ag", "sc", "ds")
LOCAL_JOINS = ("fptree", "hash", "nested")
#: Kinds of routed rows; a joiner handles them in this order within a batch.
OPEN, DOC, FRONTIER = 0, 1, 2
#: Version of the state blobs; a checkpoint written by another version is refused.
STATE_FORMAT = 2
#: Settings a restarted query may change: where statistics go, and the local join (each joiner
#: rebuilds it from its stored documents every batch, and every local join is exact).
ADOPTABLE = frozenset({"metrics_dir", "local_join"})

ASSIGNER_OP, JOINER_OP = "natural_assigner", "natural_joiner"
#: The Assigner's grouping key. It does not depend on the settings, so a query restarted with
#: other settings finds the plan stored with the old Assigner state and is refused
#: (:mod:`driftjoin.spark.plan_guard`) instead of starting afresh.
ASSIGNER_KEY = 0


# --------------------------------------------------------------------------------------------
# Plan: every setting, checked on the driver before the query starts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NaturalPlan:
    """Everything the operators need, fixed when the query is built (shipped by pickling).

    ``window_kind`` is ``"count"`` (``size`` documents), ``"time"`` (``length`` seconds of
    ``time_col`` or of the batch time) or ``"attribute"`` (``length`` units of the JSON
    attribute ``time_attribute``, which is removed from the joined pairs).
    """

    partitions: int
    partitioner: str
    local_join: str
    delta: int
    theta: float
    creators: int
    expand: bool
    window_kind: str
    size: int | None
    length: float | None
    time_attribute: str | None
    watermark: float
    two_streams: bool
    merged: bool
    sample_size: int
    seed: int
    metrics_dir: str | None
    require_time: bool = False  # a document without a time is invalid
    initial: bytes | None = None  # pickled Partitioner fitted on ``sample=``

    @property
    def keys(self) -> tuple[int, ...]:
        return slot_keys(self.partitions)

    def slot_of(self, key: int) -> int:
        return self.keys.index(int(key))

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.plan_guard`)."""
        return {"operator": "natural_join", "state_format": STATE_FORMAT, "partitions": self.partitions,
                "partitioner": self.partitioner, "local_join": self.local_join, "delta": self.delta,
                "theta": self.theta, "creators": self.creators, "expand": self.expand,
                "window_kind": self.window_kind, "size": self.size, "length": self.length,
                "time_attribute": self.time_attribute, "watermark": self.watermark, "two_streams": self.two_streams,
                "merged": self.merged, "sample_size": self.sample_size, "seed": self.seed,
                "require_time": self.require_time, "metrics_dir": self.metrics_dir}
        # ``initial`` (a partitioner fitted on ``sample=``) only seeds the first batch of a new query

    def new_partitioner(self) -> Partitioner:
        return Partitioner(self.partitions, self.partitioner, delta=self.delta, theta=self.theta,  # type: ignore[arg-type]
                           creators=self.creators, expand=self.expand)


def _check_window(window: object, time_col: str | None) -> tuple[str, int | None, float | None, str | None]:
    advice = ("use a document count (window=1000 or CountWindow(1000)), a duration "
              "(window='1 minute', over time_col= or the micro-batch time) or TimeWindow(length, attribute)")
    if isinstance(window, bool):
        raise ValueError(f"window={window!r} is not a window; {advice}")
    if isinstance(window, CountWindow):
        return "count", window.size, None, None
    if isinstance(window, TimeWindow):
        if time_col is not None:
            raise ValueError("TimeWindow reads the time from a JSON attribute; drop time_col= or use window='<duration>' with time_col=")
        return "attribute", None, float(window.length), window.attribute
    if isinstance(window, (int, np.integer)):
        if window < 1:
            raise ValueError(f"window={window!r}: a count window holds at least 1 document; {advice}")
        return "count", int(window), None, None
    if isinstance(window, str):
        try:
            return "time", None, parse_duration(window, "window"), None
        except ValueError as e:
            raise ValueError(f"{e}; {advice}") from None
    raise ValueError(f"window={window!r} is not a window; {advice}")


def _check_settings(partitions: object, partitioner: object, local_join: object, delta: object,
                    theta: object, creators: object, sample_size: object) -> None:
    if not isinstance(partitions, (int, np.integer)) or isinstance(partitions, bool) or partitions < 1:
        raise ValueError(f"partitions must be an integer >= 1 (the number of joiners), got {partitions!r}")
    if partitioner not in PARTITIONERS:
        raise ValueError(f"unknown partitioner {partitioner!r}; use partitioner='ag' (association groups), 'sc' (set cover) or 'ds' (disjoint sets)")
    if local_join not in LOCAL_JOINS:
        raise ValueError(f"unknown local_join {local_join!r}; use local_join='fptree', 'hash' or 'nested'")
    if not isinstance(delta, (int, np.integer)) or isinstance(delta, bool) or delta < 1:
        raise ValueError(f"delta must be an integer >= 1 (sightings before an unknown pair gets a joiner), got {delta!r}")
    if not isinstance(theta, (int, float)) or not math.isfinite(theta) or theta < 0:
        raise ValueError(f"theta must be a finite number >= 0 (tolerated quality loss before a refit), got {theta!r}")
    if not isinstance(creators, (int, np.integer)) or isinstance(creators, bool) or creators < 1:
        raise ValueError(f"creators must be an integer >= 1, got {creators!r}")
    if not isinstance(sample_size, (int, np.integer)) or isinstance(sample_size, bool) or sample_size < 1:
        raise ValueError(f"sample_size must be an integer >= 1 (documents kept per window for a refit), got {sample_size!r}")


# --------------------------------------------------------------------------------------------
# Parsing and the dead-letter output (stateless)
# --------------------------------------------------------------------------------------------


class InvalidDocument(ValueError):
    """A row that cannot be joined; the message is the dead-letter reason."""


def _reject_constant(name: str) -> Any:
    raise InvalidDocument(f"unparsable JSON: {name} is not a JSON number")


_JSON_TYPES = {list: "array", str: "string", int: "number", float: "number", bool: "boolean", type(None): "null"}


def parse_document(text: str | None, time_attribute: str | None = None) -> tuple[dict[str, str], float | None]:
    """Flat attribute-value pairs of a JSON object (and its time attribute, taken out).

    Raises :class:`InvalidDocument` with the reason for the dead-letter output.
    """
    if text is None:
        raise InvalidDocument("missing document")
    try:
        obj = json.loads(text, parse_constant=_reject_constant)
    except json.JSONDecodeError as e:
        raise InvalidDocument(f"unparsable JSON: {e.msg} (char {e.pos})") from None
    except RecursionError:
        raise InvalidDocument("unparsable JSON: nested too deeply") from None
    if not isinstance(obj, dict):
        raise InvalidDocument(f"not a JSON object (got {_JSON_TYPES.get(type(obj), type(obj).__name__)})")
    try:
        avps = flatten(obj)
    except RecursionError:
        raise InvalidDocument("unparsable JSON: nested too deeply") from None
    except (TypeError, ValueError) as e:
        raise InvalidDocument(f"unsupported JSON value: {e}") from None
    stamp: float | None = None
    if time_attribute is not None:
        raw = avps.pop(time_attribute, None)
        if raw is None:
            raise InvalidDocument(f"missing time attribute {time_attribute!r}")
        value = json.loads(raw)
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise InvalidDocument(f"time attribute {time_attribute!r} is not a number")
        stamp = float(value)
    return avps, stamp


def _check_rows(plan: NaturalPlan, batch: pa.RecordBatch) -> tuple[list[str | None], list[str | None], list[float | None]]:
    """Per row: avps JSON (None if invalid), reason (None if valid) and time."""
    ids = batch.column("id").is_null().to_pylist()
    texts = batch.column("doc").to_pylist()
    times = batch.column("time").to_pylist()
    avps_out: list[str | None] = []
    reasons: list[str | None] = []
    out_times: list[float | None] = []
    for missing_id, text, stamp in zip(ids, texts, times):
        try:
            if missing_id:
                raise InvalidDocument("missing id")
            avps, attr_time = parse_document(text, plan.time_attribute)
            if attr_time is not None:
                stamp = attr_time
            if plan.require_time and (stamp is None or not math.isfinite(stamp)):
                raise InvalidDocument("missing time" if stamp is None else "time is not finite")
        except InvalidDocument as e:
            avps_out.append(None)
            reasons.append(str(e))
            out_times.append(None)
            continue
        avps_out.append(json.dumps(avps, separators=(",", ":"), ensure_ascii=False))
        reasons.append(None)
        out_times.append(stamp)
    return avps_out, reasons, out_times


def parse_batches(plan: NaturalPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stateless step before the Assigner: valid rows with their flat pairs as JSON."""
    akey = ASSIGNER_KEY
    for batch in batches:
        avps, _, times = _check_rows(plan, batch)
        keep = [i for i, a in enumerate(avps) if a is not None]
        if not keep:
            continue
        take = pa.array(keep, pa.int64())
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(np.full(len(keep), akey, dtype=np.int32)),
                batch.column("side").take(take).cast(pa.int8()),
                batch.column("id").take(take),
                pa.array([times[i] for i in keep], pa.float64()),
                pa.array([avps[i] for i in keep], pa.string()),
            ],
            names=["akey", "side", "id", "time", "avps"],
        )


def dead_letter_batches(plan: NaturalPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The rows :func:`parse_batches` drops, with the reason."""
    for batch in batches:
        _, reasons, _ = _check_rows(plan, batch)
        bad = [i for i, r in enumerate(reasons) if r is not None]
        if not bad:
            continue
        take = pa.array(bad, pa.int64())
        yield pa.RecordBatch.from_arrays(
            [batch.column("side").take(take).cast(pa.int8()), batch.column("id").take(take),
             batch.column("raw").take(take), pa.array([reasons[i] for i in bad], pa.string())],
            names=["side", "id", "raw", "reason"],
        )


# --------------------------------------------------------------------------------------------
# The Assigner: windows, partitioner, routing (one key)
# --------------------------------------------------------------------------------------------


@dataclass
class _OpenWindow:
    """Assigner state of one open window: its partitioner fit and its routing quality."""

    partitioner: Partitioner
    loads: list[int]
    rng: random.Random
    documents: int = 0
    to_all: int = 0
    sample: list[Document] = field(default_factory=list)
    decided: bool = False
    repartitioned: bool = False

    def metrics(self, window: int, closed: bool) -> dict[str, Any]:
        """Routing quality; ``repartitions`` counts refits up to the one this window triggered."""
        replication, max_load, gini = routing_quality(self.loads, self.documents)
        repartitions = self.partitioner.repartitions + int(self.repartitioned)
        return {
            "window": window, "documents": self.documents, "replication": replication, "max_load": max_load,
            "gini": gini, "loads": list(self.loads), "to_all": self.to_all, "repartitioned": self.repartitioned,
            "repartitions": repartitions, "closed": closed,
        }


@dataclass
class AssignerState:
    """Everything the Assigner keeps between batches (pickled as one blob)."""

    seq: int = -1
    next_doc: int = 0
    count: int = 0
    max_time: float = -math.inf
    frontier: int | None = None
    newest: int | None = None
    current: Partitioner | None = None
    windows: dict[int, _OpenWindow] = field(default_factory=dict)


def _copy(partitioner: Partitioner) -> Partitioner:
    """An independent copy (a pickle round trip: about 4x faster than ``copy.deepcopy``)."""
    return pickle.loads(pickle.dumps(partitioner, protocol=pickle.HIGHEST_PROTOCOL))


@dataclass
class AssignerOutput:
    rows: pd.DataFrame
    stats: dict[str, Any]


def _empty_routed() -> dict[str, list]:
    return {"jkey": [], "kind": [], "seq": [], "side": [], "id": [], "window": [], "mask": [], "avps": []}


class Assigner:
    """Routing for one batch at a time; ``state`` is restored from and saved to the blob."""

    def __init__(self, plan: NaturalPlan, state: AssignerState | None) -> None:
        self.plan = plan
        if state is None:
            state = AssignerState()
            if plan.initial is not None:
                state.current = pickle.loads(plan.initial)
        self.state = state
        self._full = (1 << plan.partitions) - 1
        self._mask_bytes = (plan.partitions + 7) // 8

    # -- windows -----------------------------------------------------------------------------

    def _decide(self, w: int) -> None:
        """End of the newest window ``w``: refit (serving later windows) if quality degraded."""
        rec = self.state.windows[w]
        if rec.decided:
            return
        rec.decided = True
        nxt = _copy(rec.partitioner)
        replication, max_load, _ = routing_quality(rec.loads, rec.documents)
        if rec.documents and nxt.needs_repartition(replication, max_load):
            nxt.fit(rec.sample)
            rec.repartitioned = True
        self.state.current = nxt

    def _open(self, w: int, first_docs: list[Document], out: dict[str, list]) -> None:
        s = self.state
        if s.current is None:
            s.current = self.plan.new_partitioner()
        if not s.current.fitted:
            s.current.fit(first_docs)  # bootstrap: the first documents of the first window
        elif s.newest is not None and w > s.newest and s.newest in s.windows:
            self._decide(s.newest)
        part = _copy(s.current)
        s.windows[w] = _OpenWindow(part, [0] * self.plan.partitions, random.Random(self.plan.seed * 1_000_003 + w))
        s.newest = w if s.newest is None else max(s.newest, w)
        order = json.dumps(list(part.attribute_order.attributes), ensure_ascii=False)
        self._control(out, OPEN, w, order)

    def _control(self, out: dict[str, list], kind: int, window: int, text: str) -> None:
        for key in self.plan.keys:
            out["jkey"].append(key)
            out["kind"].append(kind)
            out["seq"].append(-1)
            out["side"].append(0)
            out["id"].append(self._id_placeholder)
            out["window"].append(window)
            out["mask"].append(b"")
            out["avps"].append(text)

    def _route(self, w: int, docs: list[Document], sides: list[int], ids: list[Any], texts: list[str],
               out: dict[str, list]) -> None:
        rec = self.state.windows[w]
        part = rec.partitioner
        keys = self.plan.keys
        size = self.plan.sample_size
        m = self.plan.partitions
        for doc, side, doc_id, text in zip(docs, sides, ids, texts):
            mask = part.assign(doc)
            rec.documents += 1
            if mask == self._full and m > 1:
                rec.to_all += 1
            if len(rec.sample) < size:
                rec.sample.append(doc)
            else:
                j = rec.rng.randrange(rec.documents)
                if j < size:
                    rec.sample[j] = doc
            blob = mask.to_bytes(self._mask_bytes, "little")
            for target in mask_targets(mask):
                rec.loads[target] += 1
                out["jkey"].append(keys[target])
                out["kind"].append(DOC)
                out["seq"].append(doc.doc_id)
                out["side"].append(side)
                out["id"].append(doc_id)
                out["window"].append(w)
                out["mask"].append(blob)
                out["avps"].append(text)

    # -- one batch ---------------------------------------------------------------------------

    def process(self, pdf: pd.DataFrame, *, final: bool = False, id_is_str: bool = False) -> AssignerOutput:
        """Route one batch (documents in a deterministic order); ``final`` closes every window."""
        plan, s = self.plan, self.state
        self._id_placeholder = "" if id_is_str else 0
        s.seq += 1
        pdf = pdf.sort_values(["time", "id", "side", "avps"], kind="stable", na_position="last").reset_index(drop=True)
        n = len(pdf)
        texts = pdf["avps"].tolist()
        sides = pdf["side"].astype(np.int64).tolist()
        ids = pdf["id"].tolist()
        times = pdf["time"].to_numpy(dtype=np.float64)
        seqs = range(s.next_doc, s.next_doc + n)
        s.next_doc += n
        if plan.window_kind == "count":
            windows = (s.count + np.arange(n, dtype=np.int64)) // plan.size
            s.count += n
        else:
            windows = np.floor(times / plan.length).astype(np.int64)
        late_mask = np.zeros(n, dtype=bool) if s.frontier is None else windows < s.frontier
        late: dict[int, int] = {}
        late_rows: list[dict[str, Any]] = []
        out = _empty_routed()
        opened: list[int] = []
        # sorted by time (or positions), so each window is one run of rows, ascending
        starts = np.flatnonzero(np.r_[True, windows[1:] != windows[:-1]]) if n else np.zeros(0, dtype=np.int64)
        for start, end in zip(starts.tolist(), np.r_[starts[1:], n].tolist()):
            w = int(windows[start])
            if late_mask[start]:
                late[w] = late.get(w, 0) + end - start
                late_rows.extend({"side": sides[i], "id": ids[i], "window": w} for i in range(start, end))
                continue
            idx = range(start, end)
            docs = [Document(seqs[i], json.loads(texts[i]), None if math.isnan(times[i]) else float(times[i])) for i in idx]
            if w not in s.windows:
                self._open(w, docs, out)
                opened.append(w)
            self._route(w, docs, [sides[i] for i in idx], [ids[i] for i in idx], [texts[i] for i in idx], out)
        on_time = ~late_mask & ~np.isnan(times)
        if plan.window_kind != "count" and on_time.any():
            s.max_time = max(s.max_time, float(times[on_time].max()))
        # windows below the frontier are closed: no document of them is routed any more
        if final:
            frontier = (max(s.windows) + 1) if s.windows else s.frontier
        elif plan.window_kind == "count":
            frontier = s.count // plan.size
        elif math.isfinite(s.max_time):
            frontier = math.floor((s.max_time - plan.watermark) / plan.length)
        else:
            frontier = s.frontier
        advanced = frontier is not None and (s.frontier is None or frontier > s.frontier)
        window_stats = []
        touched = set(opened) | {int(w) for w in np.unique(windows[~late_mask]).tolist()}
        if advanced:
            s.frontier = frontier
            for w in sorted(w for w in s.windows if w < frontier):
                if w == s.newest and not final:
                    self._decide(w)
                rec = s.windows.pop(w)
                window_stats.append(rec.metrics(w, True))
                touched.discard(w)
            if not final:
                self._control(out, FRONTIER, frontier, "")
        for w in sorted(touched):
            if w in s.windows:
                rec = s.windows[w]
                window_stats.append(rec.metrics(w, False))
        stats = {
            "seq": s.seq, "time": time.time(), "documents": n - int(late_mask.sum()), "late": {str(k): v for k, v in late.items()},
            "late_rows": late_rows,
            "frontier": s.frontier, "open_windows": sorted(s.windows), "windows": window_stats,
            "routed_rows": len(out["jkey"]),
        }
        rows = pd.DataFrame({
            "jkey": pd.Series(out["jkey"], dtype=np.int32),
            "kind": pd.Series(out["kind"], dtype=np.int8),
            "seq": pd.Series(out["seq"], dtype=np.int64),
            "side": pd.Series(out["side"], dtype=np.int8),
            "id": pd.Series(out["id"], dtype=object if id_is_str else np.int64),
            "window": pd.Series(out["window"], dtype=np.int64),
            "mask": pd.Series(out["mask"], dtype=object),
            "avps": pd.Series(out["avps"], dtype=object),
        })
        return AssignerOutput(rows, stats)


def _saved_core(state: BlobState) -> Any:
    """The core state saved by the previous batch (None on the first), refusing other formats."""
    saved = state.load()
    if saved is not None and saved.get("format") != STATE_FORMAT:
        raise ValueError("natural_join state has another format; use a new checkpoint location")
    return saved["core"] if saved else None


class AssignerProcessor(StatefulProcessor):
    """The Assigner under its single grouping key."""

    def __init__(self, plan: NaturalPlan, id_is_str: bool, final: bool = False) -> None:
        self.plan = plan
        self.id_is_str = id_is_str
        self.final = final

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = BlobState(handle, "assigner")
        self.guard = PlanGuard(handle, "natural_join", self.plan.settings(), ADOPTABLE)

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        pdf = pd.concat(list(rows), ignore_index=True)
        if pdf.empty:
            return
        self.guard.check()
        started = time.perf_counter()
        core = Assigner(self.plan, _saved_core(self.state))
        result = core.process(pdf, final=self.final, id_is_str=self.id_is_str)
        self.state.save({"format": STATE_FORMAT, "core": core.state})
        if self.plan.metrics_dir:
            result.stats["elapsed"] = time.perf_counter() - started
            write_stats(self.plan.metrics_dir, ASSIGNER_OP, 0, core.state.seq, result.stats)
        if not result.rows.empty:
            yield result.rows

    def close(self) -> None:
        pass


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


class Joiner:
    """One joiner's batch: open windows, join new documents, report owned pairs, evict.

    ``windows`` are the open windows' local joins; :meth:`process` returns, besides the pairs
    and statistics, the documents it stored per window (one state chunk each) and the windows
    it closed.
    """

    def __init__(self, plan: NaturalPlan, joiner: int, windows: dict[int, _WindowJoin]) -> None:
        self.plan = plan
        self.joiner = joiner
        self.windows = windows

    def process(self, pdf: pd.DataFrame, seq: int) -> tuple[dict[str, list], dict[str, Any], dict[int, tuple], list[int]]:
        plan, me = self.plan, self.joiner
        pdf = pdf.sort_values(["kind", "seq"], kind="stable")
        out: dict[str, list] = {"left_id": [], "right_id": [], "window": [], "merged": []}
        by_window: dict[int, int] = {}
        added: dict[int, tuple] = {}
        received = 0
        kinds = pdf["kind"].to_numpy()
        for w, text in zip(pdf["window"][kinds == OPEN].tolist(), pdf["avps"][kinds == OPEN].tolist()):
            if int(w) not in self.windows:
                self.windows[int(w)] = _WindowJoin(plan, json.loads(text))
        docs = pdf[kinds == DOC]
        for w, group in docs.groupby("window", sort=True):
            w = int(w)
            join = self.windows.setdefault(w, _WindowJoin(plan, []))
            stored: tuple[list, list, list, list, list] = ([], [], [], [], [])
            found = 0
            for seq_no, side, blob, doc_id, text in zip(group["seq"].tolist(), group["side"].tolist(), group["mask"].tolist(),
                                                        group["id"].tolist(), group["avps"].tolist()):
                mask = int.from_bytes(blob, "little")
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
                received += 1
            added[w] = stored
            by_window[w] = found
        closed: list[int] = []
        fr = pdf["window"][kinds == FRONTIER]
        if len(fr):
            frontier = int(fr.max())
            closed = [w for w in self.windows if w < frontier]
            for w in closed:
                del self.windows[w]
        stats = {
            "joiner": me, "seq": seq, "time": time.time(), "received": received,
            "pairs": sum(by_window.values()), "pairs_by_window": {str(k): v for k, v in by_window.items()},
            "open_windows": sorted(self.windows), "stored": sum(len(w.docs) for w in self.windows.values()),
        }
        return out, stats, added, closed


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
    """One joiner under its slot key; its documents live in the shared chunked state layer
    (one chunk per window and batch, the windows' attribute orders in the meta fields), so a
    batch writes only the documents it stored and a cached joiner skips rebuilding its local
    joins (:mod:`driftjoin.spark.state`)."""

    def __init__(self, plan: NaturalPlan, id_is_str: bool) -> None:
        self.plan = plan
        self.id_is_str = id_is_str

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = ChunkedState(handle, "joiner_docs")
        self.legacy = BlobState(handle, "joiner")

    def _rebuild(self, meta: Meta, chunks: Chunks, stale: dict[int, _WindowJoin] | None) -> dict[int, _WindowJoin]:
        windows: dict[int, _WindowJoin] = {}
        for w, order in meta.fields["orders"].items():
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
        started = time.perf_counter()
        loaded = self.state.load(key[0], self._rebuild, dict)
        if loaded.source == "new" and self.legacy.value.exists():
            raise ValueError("natural_join state has another format; use a new checkpoint location")
        core = Joiner(self.plan, self.plan.slot_of(key[0]), loaded.value)
        out, stats, added, closed = core.process(pdf, loaded.seq)
        loaded.chunks.drop_groups(lambda g: g not in closed)
        for w, stored in added.items():
            if w in core.windows:  # not closed by this batch's frontier
                core.windows[w].chunks.append(loaded.chunks.add(w, stored))
        self.state.save(key[0], loaded, sum(len(w.docs) for w in core.windows.values()) * 200,
                        {"orders": {w: j.order for w, j in core.windows.items()}})
        if self.plan.metrics_dir:
            stats.update(elapsed=time.perf_counter() - started, state_source=loaded.source,
                         chunks_read=loaded.chunks.read_count)
            write_stats(self.plan.metrics_dir, JOINER_OP, core.joiner, loaded.seq, stats)
        if out["left_id"]:
            yield _pairs_frame(self.plan, out, self.id_is_str)

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
               creators: int, expand: bool, sample_size: int, seed: int, metrics_dir: str | None) -> NaturalPlan:
    if partitions is None:
        partitions = int(docs.sparkSession.conf.get("spark.sql.shuffle.partitions"))
    _check_settings(partitions, partitioner, local_join, delta, theta, creators, sample_size)
    kind, size, length, attribute = _check_window(window, time_col)
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
        seed=int(seed), metrics_dir=metrics_dir, require_time=kind != "count" or time_col is not None,
    )


_ROUTED = [
    T.StructField("jkey", T.IntegerType()), T.StructField("kind", T.ByteType()), T.StructField("seq", T.LongType()),
    T.StructField("side", T.ByteType()), None, T.StructField("window", T.LongType()),
    T.StructField("mask", T.BinaryType()), T.StructField("avps", T.StringType()),
]


def _schemas(plan: NaturalPlan, id_type: T.DataType) -> tuple[T.StructType, T.StructType, T.StructType]:
    parsed = T.StructType([
        T.StructField("akey", T.IntegerType()), T.StructField("side", T.ByteType()), T.StructField("id", id_type),
        T.StructField("time", T.DoubleType()), T.StructField("avps", T.StringType()),
    ])
    routed = T.StructType([f if f is not None else T.StructField("id", id_type) for f in _ROUTED])
    fields = [T.StructField("left_id", id_type), T.StructField("right_id", id_type), T.StructField("window", T.LongType())]
    if plan.merged:
        fields.append(T.StructField("merged", T.StringType()))
    return parsed, routed, T.StructType(fields)


def natural_join(
    docs: DataFrame,
    other: DataFrame | None = None,
    *,
    window: object = "1 minute",
    partitions: int | None = None,
    partitioner: str = "ag",
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
    ``"ag"`` association groups, ``"sc"`` set cover, ``"ds"`` disjoint sets, fitted on
    ``sample`` (a list of documents or a static DataFrame) or else on the first micro-batch of
    the first window, updated by ``delta`` and refitted between windows when replication or
    maximal load grows by more than ``theta``. ``local_join``: ``"fptree"``, ``"hash"`` or
    ``"nested"``.

    Output: ``left_id, right_id, window`` (window index: ``floor(time / length)`` or
    ``position // size``), and ``merged`` (the union of both documents as flat JSON) when
    ``merged=True``. Rows that cannot be joined are skipped; :func:`invalid_documents` lists
    them. Per-window metrics go to ``metrics_dir`` (see :func:`natural_join_metrics`).
    """
    if other is not None and other.isStreaming != docs.isStreaming:
        raise ValueError("docs and other must both be streaming or both static")
    plan = _make_plan(docs, other, window=window, partitions=partitions, partitioner=partitioner, local_join=local_join,
                      time_col=time_col, watermark=watermark, merged=merged, delta=delta, theta=theta, creators=creators,
                      expand=expand, sample_size=sample_size, seed=seed, metrics_dir=metrics_dir)
    id_type = _id_type(docs, other, id_col)
    id_is_str = isinstance(id_type, T.StringType)
    inputs = [_normalise(docs, 0, plan, id_col, doc_col, id_type, time_col, False)]
    if other is not None:
        inputs.append(_normalise(other, 1, plan, id_col, doc_col, id_type, time_col, False))
    if sample is not None:
        fitted = plan.new_partitioner()
        fitted.fit(_sample_documents(sample, plan, doc_col))
        plan = NaturalPlan(**{**plan.__dict__, "initial": pickle.dumps(fitted, protocol=pickle.HIGHEST_PROTOCOL)})
    data = inputs[0] if len(inputs) == 1 else inputs[0].unionByName(inputs[1])
    parsed_schema, routed_schema, pair_schema = _schemas(plan, id_type)
    parsed = data.mapInArrow(lambda it: parse_batches(plan, it), parsed_schema)
    spark = docs.sparkSession
    if data.isStreaming:
        prepare_for_stateful(spark, plan.partitions)
        routed = parsed.groupBy("akey").transformWithStateInPandas(
            AssignerProcessor(plan, id_is_str), routed_schema, "Append", "None")
        return routed.groupBy("jkey").transformWithStateInPandas(
            JoinerProcessor(plan, id_is_str), pair_schema, "Append", "None")
    spark.conf.set("spark.sql.shuffle.partitions", str(plan.partitions))
    routed = parsed.groupBy("akey").applyInPandas(
        lambda k, pdf: run_static(AssignerProcessor(plan, id_is_str, final=True), k, pdf), routed_schema)
    return routed.groupBy("jkey").applyInPandas(
        lambda k, pdf: run_static(JoinerProcessor(plan, id_is_str), k, pdf), pair_schema)


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
    kind, size, length, attribute = ("count", 1, None, None) if window is None else _check_window(window, time_col)
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


def natural_join_metrics(metrics_dir: str) -> pd.DataFrame:
    """Per-window metrics of a natural join run, one row per window, ascending.

    Columns: ``window, documents, replication, max_load, gini, loads, to_all, pairs,
    repartitioned, repartitions, late, closed``. Routing quality is the Assigner's latest
    record of the window (final once ``closed``); ``pairs`` sums the joiners' reports and
    ``late`` the documents dropped because their window had closed.
    """
    latest: dict[int, tuple[int, dict[str, Any]]] = {}
    late: dict[int, int] = {}
    for rec in read_stats(metrics_dir, ASSIGNER_OP):
        for w in rec.get("windows", []):
            if w["window"] not in latest or latest[w["window"]][0] < rec["seq"]:
                latest[w["window"]] = (rec["seq"], w)
        for k, v in rec.get("late", {}).items():
            late[int(k)] = late.get(int(k), 0) + v
    pairs: dict[int, int] = {}
    for rec in read_stats(metrics_dir, JOINER_OP):
        for k, v in rec.get("pairs_by_window", {}).items():
            pairs[int(k)] = pairs.get(int(k), 0) + v
    columns = ["window", "documents", "replication", "max_load", "gini", "loads", "to_all", "pairs",
               "repartitioned", "repartitions", "late", "closed"]
    rows = []
    for w in sorted(set(latest) | set(pairs) | set(late)):
        base = latest.get(w, (0, {}))[1]
        rows.append({
            "window": w, "documents": base.get("documents", 0), "replication": base.get("replication", 0.0),
            "max_load": base.get("max_load", 0.0), "gini": base.get("gini", 0.0), "loads": base.get("loads", []),
            "to_all": base.get("to_all", 0), "pairs": pairs.get(w, 0), "repartitioned": base.get("repartitioned", False),
            "repartitions": base.get("repartitions", 0), "late": late.get(w, 0), "closed": base.get("closed", False),
        })
    return pd.DataFrame(rows, columns=columns)


__all__ = [
    "Assigner",
    "AssignerProcessor",
    "InvalidDocument",
    "Joiner",
    "JoinerProcessor",
    "NaturalPlan",
    "invalid_documents",
    "natural_join",
    "natural_join_metrics",
    "parse_document",
]
