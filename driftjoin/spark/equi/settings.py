"""The settings of ``equi_join``, checked once before Spark starts (:mod:`driftjoin.spark.runtime.settings`).

:meth:`EquiSettings.check` needs no data and no Spark, and returns the one typed, immutable
object ``equi_join`` builds its plan from (:meth:`driftjoin.spark.equi.operators.EquiPlan.of`):
the key columns as a tuple, ``within`` and ``lateness`` parsed once into seconds, the time columns
as a (left, right) pair. The rules that need the number of workers (Join-Biclique's groups, the
algorithm's options) run when the plan resolves it from the session; what depends on the input
(its columns and their types, whether it is a stream) when the join sees the input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from driftjoin.durations import parse_duration
from driftjoin.hypercube.simulator import ALGORITHMS
from driftjoin.spark.runtime.settings import SettingError, core, known, text

#: ``algorithm=`` beside the papers' (:data:`driftjoin.hypercube.simulator.ALGORITHMS`): Spark's own
#: join, and the start-time choice between it and SHC (:mod:`driftjoin.hypercube.choice`)
ENGINES = ("spark", "auto")
#: ``routing=``: stateless parallel routers fed by the driver's control plane, or the paper's one dispatcher
ROUTINGS = ("parallel", "dispatcher")
#: ``output=``: the joined rows, or pairs per worker and micro-batch (benchmarks)
OUTPUTS = ("rows", "count")
#: The settings of the rows only (``invalid_equi_records`` takes these).
COLUMNS = ("on", "time_col")


@dataclass(frozen=True)
class EquiSettings:
    """The checked settings of one ``equi_join`` (see its docstring for each)."""

    #: the key column(s), a tuple of distinct names
    on: tuple[str, ...] = ()
    algorithm: str = "shc"
    #: None: ``spark.sql.shuffle.partitions`` of the session (:meth:`EquiPlan.of`)
    parallelism: int | None = None
    within: str | float | None = None
    #: the deprecated spelling of ``within`` (``equi_join`` warns and takes it as ``within``)
    window: str | float | None = None
    groups: int | None = None
    time_col: str | tuple[str, str] | None = None
    lateness: str | float | None = 0.0
    prefixes: tuple[str, str] = ("left_", "right_")
    options: Mapping[str, Any] | None = None
    metrics_dir: str | None = None
    output: str = "rows"
    routing: str = "parallel"
    partitions: int | None = None
    #: ``algorithm="auto"`` on streams: a (left, right) pair of static DataFrames whose keys it counts
    sample: Any = None
    #: derived: the interval of an interval join in seconds (None: the whole streams join)
    within_seconds: float | None = field(default=None, metadata={"derived": True})
    #: derived: how late a row may be, in seconds (0 without ``within``)
    lateness_seconds: float = field(default=0.0, metadata={"derived": True})
    #: derived: the time column of each side (both None without ``within``)
    time_cols: tuple[str | None, str | None] = field(default=(None, None), metadata={"derived": True})

    def dispatcher_options(self) -> dict[str, Any]:
        """The algorithm's settings as its dispatcher takes them: SHC's ``options`` and Join-Biclique's ``groups``."""
        return {**(self.options or {}), **({"groups": self.groups} if self.groups is not None else {})}

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings a caller may give (the derived fields are not among them)."""
        return tuple(f.name for f in fields(cls) if not f.metadata.get("derived"))

    @classmethod
    def check(cls, given: Mapping[str, Any], *, dead_letters: bool = False) -> EquiSettings:
        """Check the settings ``given`` (name to value); raises :class:`SettingError` naming the first
        bad one. ``dead_letters``: for ``invalid_equi_records``, which takes ``on`` and ``time_col``.

        >>> EquiSettings.check({"on": "k", "within": "10 seconds", "time_col": "t"}).within_seconds
        10.0
        """
        names = COLUMNS if dead_letters else cls.names()
        known(given, names, "invalid_equi_records" if dead_letters else "equi_join")
        s = {**{f.name: f.default for f in fields(cls) if f.name in cls.names()}, **given}
        s["on"] = _names(s["on"])
        if dead_letters:
            times = (None, None) if s["time_col"] is None else _time_cols(s["time_col"])
            return cls(**s, time_cols=times)
        if s["window"] is not None:
            if s["within"] is not None:
                raise SettingError("window", "is the old spelling of within= (pairs whose times differ by at most that "
                                             "much): give within= only", show_value=False)
            s["within"], s["window"] = s["window"], None
        if s["algorithm"] not in ALGORITHMS and s["algorithm"] not in ENGINES:
            raise SettingError("algorithm", f"={s['algorithm']!r} is unknown; use one of "
                                            f"{sorted(ALGORITHMS) + list(ENGINES)}", show_value=False)
        if s["sample"] is not None and s["algorithm"] not in ("auto", "shc"):
            raise SettingError("sample", "= is read by algorithm='auto' (to choose between Spark's own join and SHC) and "
                                         "'shc' (to spread the keys heavy in it from the first micro-batch); drop it "
                                         "or use one of those", show_value=False)
        if s["sample"] is not None and s["algorithm"] == "shc" and (s["within"] is not None or s["routing"] != "parallel"):
            raise SettingError("sample", "= seeds SHC's heavy hitters on a whole-stream join with parallel routing; "
                                         "drop it for an interval join (within=) or routing='dispatcher'",
                               show_value=False)
        if s["algorithm"] in ENGINES:
            _check_engine(s)
        if s["routing"] not in ROUTINGS:
            raise SettingError("routing", f"={s['routing']!r} is unknown; use 'parallel' (stateless routers, the "
                                          "default) or 'dispatcher' (the paper's single dispatcher task)",
                               show_value=False)
        if s["groups"] is not None and s["algorithm"] != "biclique":
            raise SettingError("groups", f"= is a Join-Biclique setting; drop it or use algorithm='biclique' (got "
                                         f"algorithm={s['algorithm']!r})", show_value=False)
        if s["within"] is None:
            if s["time_col"] is not None:
                raise SettingError("time_col", "= is only used by interval joins; also pass within= (e.g. within='10 "
                                               "seconds') or drop time_col", show_value=False)
            if s["lateness"] not in (0, 0.0, None):
                raise SettingError("lateness", "= is only used by interval joins; also pass within= or drop lateness",
                                   show_value=False)
            within, lateness, times = None, 0.0, (None, None)
        else:
            within = _seconds(s["within"], "within")
            if s["time_col"] is None:
                raise SettingError("within", "= needs time_col= (the event-time column of both sides, or a (left, "
                                             "right) pair of names)", show_value=False)
            times = _time_cols(s["time_col"])
            lateness = _seconds(s["lateness"] if s["lateness"] is not None else 0, "lateness")
        if s["output"] not in OUTPUTS:
            raise SettingError("output", f"={s['output']!r}: use 'rows' (the joined rows) or 'count' (pairs per worker "
                                         "and batch)", show_value=False)
        prefixes = s["prefixes"]
        if (not isinstance(prefixes, (tuple, list)) or len(prefixes) != 2
                or not all(isinstance(p, str) for p in prefixes) or prefixes[0] == prefixes[1]):
            raise SettingError("prefixes", f"={prefixes!r}: give two different strings for the left and right "
                                           "columns, e.g. ('l_', 'r_')", show_value=False)
        s["prefixes"] = (prefixes[0], prefixes[1])
        if s["options"] is not None and not isinstance(s["options"], Mapping):
            raise SettingError("options", "must be a dict of SHC's settings, e.g. {'epsilon': 0.2}", s["options"])
        text("metrics_dir", s["metrics_dir"], optional=True, what="a directory for statistics and SHC's routing tables")
        return cls(**s, within_seconds=within, lateness_seconds=lateness, time_cols=times)


def _check_engine(s: Mapping[str, Any]) -> None:
    """Settings that Spark's own join (``algorithm="spark"``, or what ``"auto"`` may choose) has no use for."""
    name = s["algorithm"]
    runs = "runs" if name == "spark" else "may choose"
    if s["routing"] != "parallel":
        raise SettingError("routing", f"='dispatcher' is the papers' single dispatcher task; algorithm={name!r} {runs} "
                                      "Spark's own join, which has none: use algorithm='shc' with it, or drop routing=",
                           show_value=False)
    if s["output"] != "rows":
        raise SettingError("output", f"='count' counts pairs per worker; algorithm={name!r} {runs} Spark's own join, "
                                     "which has none: use algorithm='shc' with it, or output='rows'", show_value=False)
    if name == "spark" and s["options"]:
        raise SettingError("options", "= are SHC's settings; algorithm='spark' runs Spark's own join: drop them",
                           show_value=False)


def _names(on: Any) -> tuple[str, ...]:
    names = (on,) if isinstance(on, str) else tuple(on) if isinstance(on, Sequence) else ()
    if not names or not all(isinstance(n, str) and n for n in names) or len(set(names)) != len(names):
        raise SettingError("on", f"={on!r}: give the join key column name, or a list of distinct names (composite key)",
                           show_value=False)
    return names


def _time_cols(time_col: Any) -> tuple[str, str]:
    times = (time_col, time_col) if isinstance(time_col, str) else tuple(time_col) if isinstance(time_col, Sequence) else ()
    if len(times) != 2 or not all(isinstance(t, str) for t in times):
        raise SettingError("time_col", f"={time_col!r}: give one column name, or a (left, right) pair of names",
                           show_value=False)
    return times[0], times[1]


def _seconds(value: Any, what: str) -> float:
    """A duration (zero allowed) in seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0:
        return 0.0
    if isinstance(value, (int, float)) and not math.isfinite(value):
        raise SettingError(what, "must be a finite number of seconds or a duration like '30 seconds'", value)
    return core(what, lambda: parse_duration(value, what))
