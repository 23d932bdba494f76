"""The plan of ``natural_join`` and the stateless parsing every routing step starts with.

:class:`NaturalPlan` holds every setting, checked on the driver before a query starts and
shipped to the tasks by pickling; :func:`check_rows` is the one test of an input row that
both the join (which keeps the valid rows) and :func:`dead_letter_batches` (which reports the
others with a reason) apply, so a row is always in exactly one of the two.
"""

from __future__ import annotations

import json
import math
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

import numpy as np

from driftjoin.schemafree.document import flatten
from driftjoin.schemafree.partitioner import Partitioner
from driftjoin.spark.runtime.heartbeats import heartbeat_batch
from driftjoin.spark.runtime.plan_guard import OperatorPlan
from driftjoin.spark.natural.settings import NaturalSettings

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
else:
    from driftjoin.deferred import pandas as pd, pyarrow as pa

#: Kinds of routed rows: a router task's heartbeat (one per joiner and batch), a document copy.
BEAT, DOC = 0, 1
#: Version of the state; a checkpoint written by another version is refused.
STATE_FORMAT = 3
ASSIGNER_OP, JOINER_OP = "natural_assigner", "natural_joiner"


@dataclass(frozen=True)
class NaturalPlan(OperatorPlan):
    """Everything the operators need, fixed when the query is built (shipped by pickling).

    ``window_kind`` is ``"count"`` (``size`` documents), ``"time"`` (``length`` seconds of
    ``time_col`` or of the batch time) or ``"attribute"`` (``length`` units of the JSON
    attribute ``time_attribute``, which is removed from the joined pairs). ``control`` is the
    directory the routers read the control plane's decisions from (None: a static join, whose
    one decision travels with the plan) and the joiners write their statistics to;
    ``lineage`` names this run's decisions (a new one each time the query is built).
    """

    operator = "natural_join"
    #: settings a restarted query may change: where statistics and decisions go (a new directory
    #: only costs broadcasting the windows that are open across the restart), and the local join
    #: (each joiner rebuilds it from its stored documents, and every local join is exact)
    ADOPTABLE = frozenset({"metrics_dir", "local_join"})

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
    initial: bytes | None = None  # pickled Partitioner fitted on ``sample=`` (or, static, a drawn sample)
    routing: str = "parallel"
    control: str | None = None
    lineage: str = "run"

    @property
    def parallelism(self) -> int:
        """The joiners (each its own Spark state partition)."""
        return self.partitions

    @property
    def stats_dir(self) -> str | None:
        """Where the joiners write statistics: the control directory, else ``metrics_dir``."""
        return self.control or self.metrics_dir

    def settings(self) -> dict[str, Any]:
        """The plan as stored with the checkpoint (:mod:`driftjoin.spark.runtime.plan_guard`)."""
        return {"operator": "natural_join", "state_format": STATE_FORMAT, "partitions": self.partitions,
                "partitioner": self.partitioner, "local_join": self.local_join, "delta": self.delta,
                "theta": self.theta, "creators": self.creators, "expand": self.expand,
                "window_kind": self.window_kind, "size": self.size, "length": self.length,
                "time_attribute": self.time_attribute, "watermark": self.watermark, "two_streams": self.two_streams,
                "merged": self.merged, "sample_size": self.sample_size, "seed": self.seed,
                "require_time": self.require_time, "routing": self.routing, "metrics_dir": self.metrics_dir}
        # ``initial`` seeds a new query only; ``control`` and ``lineage`` belong to one run

    @classmethod
    def of(cls, settings: NaturalSettings, *, partitions: int, two_streams: bool) -> NaturalPlan:
        """The plan of a join with ``settings`` (checked) on ``partitions`` joiners, of one input or
        two (``two_streams``); a new ``lineage`` each time (module docstring)."""
        s = settings
        return cls(partitions=partitions, partitioner=s.partitioner, local_join=s.local_join, delta=s.delta,
                   theta=s.theta, creators=s.creators, expand=s.expand, window_kind=s.window_kind, size=s.size,
                   length=s.length, time_attribute=s.time_attribute, watermark=s.lateness, two_streams=two_streams,
                   merged=s.merged, sample_size=s.sample_size, seed=int(s.seed), metrics_dir=s.metrics_dir,
                   require_time=s.require_time, routing=s.routing, lineage=uuid.uuid4().hex[:12])

    @classmethod
    def of_rows(cls, settings: NaturalSettings, two_streams: bool) -> NaturalPlan:
        """The plan the dead-letter output tests rows with (``invalid_documents``: the window decides
        which rows need a time; nothing is joined)."""
        s = settings
        return cls(partitions=1, partitioner="ag", local_join="hash", delta=1, theta=0.0, creators=1, expand=False,
                   window_kind=s.window_kind, size=s.size, length=s.length, time_attribute=s.time_attribute,
                   watermark=0.0, two_streams=two_streams, merged=False, sample_size=1, seed=0, metrics_dir=None,
                   require_time=s.require_time)

    def new_partitioner(self) -> Partitioner:
        return Partitioner(self.partitions, self.partitioner, delta=self.delta, theta=self.theta,  # type: ignore[arg-type]
                           creators=self.creators, expand=self.expand)

    def window_of(self, time: float) -> int:
        """Window index of a time (time and attribute windows)."""
        return math.floor(time / self.length)  # type: ignore[operator]




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


def check_rows(plan: NaturalPlan, batch: pa.RecordBatch) -> tuple[list[dict[str, str] | None], list[str | None],
                                                                list[str | None], list[float | None]]:
    """Per row: the flat pairs and their JSON (None if invalid), reason (None if valid) and time."""
    ids = batch.column("id").is_null().to_pylist()
    texts = batch.column("doc").to_pylist()
    times = batch.column("time").to_pylist()
    pairs: list[dict[str, str] | None] = []
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
            pairs.append(None)
            avps_out.append(None)
            reasons.append(str(e))
            out_times.append(None)
            continue
        pairs.append(avps)
        avps_out.append(json.dumps(avps, separators=(",", ":"), ensure_ascii=False))
        reasons.append(None)
        out_times.append(stamp)
    return pairs, avps_out, reasons, out_times


def parse_batches(plan: NaturalPlan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Stateless step before the single Assigner (``routing="assigner"``): valid rows with their flat
    pairs as JSON, all under the Assigner's key."""
    akey = 0
    for batch in batches:
        _, avps, _, times = check_rows(plan, batch)
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
    """The rows the join drops (:func:`check_rows`), with the reason."""
    for batch in batches:
        _, _, reasons, _ = check_rows(plan, batch)
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
# Routed rows: what routers (or the single Assigner) send the joiners
# --------------------------------------------------------------------------------------------

#: Columns of a routed row. ``route`` holds the document's candidate fits and its mask under
#: each (:func:`pack_route`); ``window`` is -1 when the router cannot know it (count windows,
#: numbered by the joiners). A heartbeat row (``kind`` :data:`BEAT`) carries its task's view as
#: JSON in ``avps`` (:func:`add_heartbeats`), for count windows with the sort keys of the
#: task's documents; ``unknown`` lists, on the copy for joiner 0, the delta keys a candidate did
#: not know (JSON).
ROUTED_COLUMNS = ("jkey", "kind", "seq", "side", "id", "window", "time", "route", "avps", "unknown")


def pack_route(candidates: list[tuple[int, int]]) -> str:
    """``[(fit id, mask), ...]`` as text: ``fit:mask`` in hexadecimal, comma-separated."""
    return ",".join(f"{fid:x}:{mask:x}" for fid, mask in candidates)


def unpack_route(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(",") if text else ():
        fid, mask = item.split(":")
        out.append((int(fid, 16), int(mask, 16)))
    return out


def routed_frame(rows: dict[str, list], id_is_str: bool) -> pd.DataFrame:
    """Routed rows (a dict of columns) as the frame a stateful step yields."""
    return pd.DataFrame({
        "jkey": pd.Series(rows["jkey"], dtype=np.int32), "kind": pd.Series(rows["kind"], dtype=np.int8),
        "seq": pd.Series(rows["seq"], dtype=np.int64), "side": pd.Series(rows["side"], dtype=np.int8),
        "id": pd.Series(rows["id"], dtype=object if id_is_str else np.int64),
        "window": pd.Series(rows["window"], dtype=np.int64), "time": pd.Series(rows["time"], dtype=np.float64),
        "route": pd.Series(rows["route"], dtype=object), "avps": pd.Series(rows["avps"], dtype=object),
        "unknown": pd.Series(rows["unknown"], dtype=object),
    })


def empty_rows() -> dict[str, list]:
    return {name: [] for name in ROUTED_COLUMNS}


#: Arrow types of :data:`ROUTED_COLUMNS` by their aliases (the id column's type depends on the
#: ids); pyarrow reads them when a schema is built, not when this module is imported.
ROUTED_TYPES = {"jkey": "int32", "kind": "int8", "seq": "int64", "side": "int8", "window": "int64",
                "time": "float64", "route": "string", "avps": "string", "unknown": "string"}


def routed_arrow_schema(id_is_str: bool) -> pa.Schema:
    """The Arrow schema of routed rows (:data:`ROUTED_COLUMNS`)."""
    types = dict(ROUTED_TYPES, id="string" if id_is_str else "int64")
    return pa.schema([(name, pa.type_for_alias(types[name])) for name in ROUTED_COLUMNS])


def add_heartbeats(rows: dict[str, list], keys: list[int], info: dict[str, Any], id_is_str: bool) -> None:
    """Append one heartbeat row per key (every joiner and the plan key) carrying ``info`` as JSON
    (:func:`driftjoin.spark.runtime.heartbeats.heartbeat_batch`)."""
    text = json.dumps(info, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    beats = heartbeat_batch(routed_arrow_schema(id_is_str), keys, {"kind": BEAT, "window": -1, "time": math.nan, "avps": text})
    for name, values in beats.to_pydict().items():
        rows[name].extend(values)
