"""The settings of ``natural_join``, checked once before Spark starts (:mod:`driftjoin.spark.runtime.settings`).

:meth:`NaturalSettings.check` needs no data and no Spark, and returns the one typed, immutable
object ``natural_join`` builds its plan from (:meth:`driftjoin.spark.natural.plan.NaturalPlan.of`):
the window is read here, once, into its kind (a document count, a duration of ``time_col`` or of
the micro-batch time, a JSON time attribute) and its size or length, the watermark into seconds.
What depends on the input (its columns, whether it is a stream) is checked by the join when it
sees the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

from driftjoin.durations import parse_duration
from driftjoin.schemafree.partitioner import PARTITIONER_NAMES
from driftjoin.schemafree.window import CountWindow, TimeWindow
from driftjoin.spark.runtime.settings import (
    SettingError,
    choice,
    duration,
    integer,
    known,
    number,
    text,
)

LOCAL_JOINS = ("fptree", "hash", "nested")
#: ``"parallel"``: stateless routers in every input task, partitionings fitted by the control
#: plane; ``"assigner"``: the paper's single Assigner (one task routes every document).
ROUTINGS = ("parallel", "assigner")
#: The settings of the rows only (``invalid_documents`` takes these).
COLUMNS = ("id_col", "doc_col", "time_col", "window")
_ADVICE = ("use a document count (window=1000 or CountWindow(1000)), a duration (window='1 minute', over time_col= or "
           "the micro-batch time) or TimeWindow(length, attribute)")


@dataclass(frozen=True)
class NaturalSettings:
    """The checked settings of one ``natural_join`` (see its docstring for each)."""

    window: object = "1 minute"
    slide: object = None
    within: object = None
    #: None: ``spark.sql.shuffle.partitions`` of the session (:meth:`NaturalPlan.of`)
    partitions: int | None = None
    partitioner: str = "value"
    local_join: str = "fptree"
    id_col: str = "id"
    doc_col: str = "doc"
    time_col: str | None = None
    watermark: str | float | None = None
    merged: bool = False
    delta: int = 3
    theta: float = 0.2
    creators: int = 1
    expand: bool = True
    sample_size: int = 2000
    seed: int = 0
    metrics_dir: str | None = None
    routing: str = "parallel"
    #: derived: ``"count"`` (``size`` documents), ``"time"`` (``length`` seconds of ``time_col`` or of
    #: the batch time) or ``"attribute"`` (``length`` units of the JSON attribute ``time_attribute``)
    window_kind: str = field(default="count", metadata={"derived": True})
    size: int | None = field(default=None, metadata={"derived": True})
    length: float | None = field(default=None, metadata={"derived": True})
    time_attribute: str | None = field(default=None, metadata={"derived": True})
    #: derived: how late a document may arrive in event-time windows (seconds, or attribute units)
    lateness: float = field(default=0.0, metadata={"derived": True})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings a caller may give (the derived fields are not among them)."""
        return tuple(f.name for f in fields(cls) if not f.metadata.get("derived"))

    @property
    def require_time(self) -> bool:
        """Whether a document without a time is invalid (every window but a count window without ``time_col``)."""
        return self.window_kind != "count" or self.time_col is not None

    @classmethod
    def check(cls, given: Mapping[str, Any], *, dead_letters: bool = False) -> NaturalSettings:
        """Check the settings ``given`` (name to value); raises :class:`SettingError` naming the first
        bad one. ``dead_letters``: for ``invalid_documents``, which takes the row settings only
        (no window there reads every document as valid in time: a count window).

        >>> NaturalSettings.check({"window": "5 seconds", "time_col": "ts", "watermark": "1 second"}).lateness
        1.0
        """
        names = COLUMNS if dead_letters else cls.names()
        known(given, names, "invalid_documents" if dead_letters else "natural_join")
        s = {**{f.name: f.default for f in fields(cls) if f.name in cls.names()}, **given}
        for name in ("id_col", "doc_col"):
            text(name, s[name], what="a column of the input")
        text("time_col", s["time_col"], optional=True, what="a column of the input")
        if dead_letters and s["window"] is None:
            return cls(**s, window_kind="count", size=1)
        kind, size, length, attribute = _window(s["window"], s["time_col"])
        derived = {"window_kind": kind, "size": size, "length": length, "time_attribute": attribute}
        if dead_letters:
            return cls(**s, **derived)
        if s["slide"] is not None or s["within"] is not None:
            raise SettingError("slide" if s["slide"] is not None else "within",
                               "is not offered: natural_join joins per tumbling window (window= a duration, a document "
                               "count or TimeWindow): slide= (sliding windows) and within= (an interval join) are not "
                               "offered; drop them, or join within a time band with similarity_join or equi_join, "
                               "which take within=", show_value=False)
        if s["partitions"] is not None:
            s["partitions"] = integer("partitions", s["partitions"], what="the number of joiners")
        choice("partitioner", s["partitioner"], PARTITIONER_NAMES,
               what="'value': one joiner per document by the values of common attributes, else 'ag' (association "
                    "groups); 'sc': set cover; 'ds': disjoint sets")
        choice("local_join", s["local_join"], LOCAL_JOINS)
        s["delta"] = integer("delta", s["delta"], what="sightings before an unknown pair gets a joiner")
        s["theta"] = number("theta", s["theta"], low=0, what="tolerated quality loss before a refit")
        s["creators"] = integer("creators", s["creators"])
        s["sample_size"] = integer("sample_size", s["sample_size"], what="documents kept per window for a refit")
        choice("routing", s["routing"], ROUTINGS, what="'parallel': stateless routers, partitionings from the control "
                                                       "plane; 'assigner': the paper's single Assigner")
        s["merged"], s["expand"] = bool(s["merged"]), bool(s["expand"])
        text("metrics_dir", s["metrics_dir"], optional=True, what="a directory for statistics and decisions")
        event_time = kind == "attribute" or (kind == "time" and s["time_col"] is not None)
        if s["watermark"] is not None and not event_time:
            raise SettingError("watermark", "= applies to event-time windows only: pass time_col= with "
                                            "window='<duration>', or TimeWindow(...)", show_value=False)
        lateness = 0.0
        if s["watermark"] is not None:
            lateness = (float(s["watermark"]) if kind == "attribute" and isinstance(s["watermark"], (int, float))
                        else duration("watermark", s["watermark"]))
        return cls(**s, **derived, lateness=lateness)


def _window(window: object, time_col: str | None) -> tuple[str, int | None, float | None, str | None]:
    """``(kind, size, length, attribute)`` of a ``window=`` setting."""
    if isinstance(window, bool):
        raise SettingError("window", f"={window!r} is not a window; {_ADVICE}", show_value=False)
    if isinstance(window, CountWindow):
        return "count", window.size, None, None
    if isinstance(window, TimeWindow):
        if time_col is not None:
            raise SettingError("time_col", "= does not apply to TimeWindow, which reads the time from a JSON attribute; "
                                           "drop time_col= or use window='<duration>' with time_col=", show_value=False)
        return "attribute", None, float(window.length), window.attribute
    if isinstance(window, (int, np.integer)):
        if window < 1:
            raise SettingError("window", f"={window!r}: a count window holds at least 1 document; {_ADVICE}",
                               show_value=False)
        return "count", int(window), None, None
    if isinstance(window, str):
        try:
            return "time", None, parse_duration(window, "window"), None
        except ValueError as e:
            raise SettingError.worded("window", f"{e}; {_ADVICE}") from None
    raise SettingError("window", f"={window!r} is not a window; {_ADVICE}", show_value=False)
