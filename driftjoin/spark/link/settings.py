"""The settings of ``link``, checked before Spark starts (:mod:`driftjoin.spark.runtime.settings`).

:meth:`LinkSettings.check` is the one gate of every entry point: ``link`` and ``invalid_links``
call it first, ``driftjoin run`` calls it on a job file's ``[link]`` table, all before a Spark
session is needed. It checks the rule set's shape, metrics, thresholds and tokens
(:func:`driftjoin.linkage.rules.check_rules` without the input's columns), the windows and the
workers; the columns the rules name and their types are checked by ``link`` when it sees the
input, still before any job runs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from typing import Any

from driftjoin.linkage.rules import RuleError, RuleSet, check_rules
from driftjoin.linkage.split import MIN_RECORDS
from driftjoin.spark.runtime.settings import SettingError, core, duration, integer, known, text
from driftjoin.windows import Windowing, windowing


class _DefaultWindow(str):
    """The default ``window=`` of ``link``, told apart from one the user writes (``within=``
    replaces the default window, but refuses a window given with it)."""


#: ``window=`` when the user gives none: one-minute tumbling windows, unless ``within=`` is given.
DEFAULT_WINDOW = _DefaultWindow("1 minute")


def rule_error(e: RuleError) -> SettingError:
    """A :class:`RuleError` of the core as the :class:`SettingError` every entry point raises."""
    return SettingError(e.name, e.problem, show_value=False)


@dataclass(frozen=True)
class LinkSettings:
    """The checked settings of one ``link`` (see its docstring for each)."""

    rules: Any = None
    id_col: str = "id"
    window: str | float | None = DEFAULT_WINDOW
    slide: str | float | None = None
    within: str | float | None = None
    time_col: str | None = None
    watermark: str | float | None = None
    ingest_col: str | None = None
    parallelism: int | None = None
    partitions: int | None = None
    metrics_dir: str | None = None
    drive: Any = None
    seed: int = 0
    min_heavy: int = MIN_RECORDS
    #: derived: the rule set (columns not yet checked), the windows and the watermark (seconds)
    ruleset: RuleSet | None = None
    windows: Windowing | None = None
    lateness: float | None = None

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in ("ruleset", "windows", "lateness"))

    @classmethod
    def check(cls, given: Mapping[str, Any]) -> "LinkSettings":
        """Check the settings ``given`` (name to value; the others take their defaults).

        Raises :class:`SettingError` naming the first bad one; unknown names are refused too.

        >>> LinkSettings.check({"rules": [{"name": ("levenshtein", 1)}], "within": "1 minute"}).windows.kind
        'interval'
        >>> LinkSettings.check({"rules": [{}]})
        Traceback (most recent call last):
        ...
        driftjoin.spark.runtime.settings.SettingError: rules[0] has no condition: give at least one, e.g. {'surname': ('levenshtein', 1)}
        """
        known(given, cls.names(), "link")
        s = {f.name: f.default if f.default_factory is MISSING else f.default_factory() for f in fields(cls)}
        s.update(given)
        if s["rules"] is None:
            raise SettingError("rules", "is required: a list of rules, each a dict from column to condition, e.g. "
                                        "[{'dob': 'equal', 'surname': ('levenshtein', 2)}]", show_value=False)
        try:
            ruleset = check_rules(s["rules"])
        except RuleError as e:
            raise rule_error(e) from None
        text("id_col", s["id_col"], what="a column of the input")
        for name in ("time_col", "ingest_col"):
            text(name, s[name], optional=True, what="a column of the input")
        text("metrics_dir", s["metrics_dir"], optional=True, what="a directory for the operators' statistics")
        window = None if s["within"] is not None and s["window"] is DEFAULT_WINDOW else s["window"]
        windows = core("window", lambda: windowing(window, s["slide"], s["within"]))
        lateness = duration("watermark", s["watermark"], allow_zero=True, optional=True)
        if lateness is not None and s["time_col"] is None and s["ingest_col"] is None:
            raise SettingError("watermark", "needs time_col= (an event-time column) or ingest_col=", show_value=False)
        if s["parallelism"] is not None:
            integer("parallelism", s["parallelism"], what="the number of workers")
        if s["partitions"] is not None:
            high = s["parallelism"]
            integer("partitions", s["partitions"], high=high,
                    what="the Spark state partitions the workers share" + (", at most parallelism" if high else ""))
        integer("seed", s["seed"], low=0)
        integer("min_heavy", s["min_heavy"], low=2, what="the fewest records of a group the hot-key split spreads")
        drive = s["drive"]
        if drive is not None:
            if not isinstance(drive, (list, tuple)) or len(drive) != len(ruleset.rules):
                raise SettingError("drive", f"must be a list with one entry per rule ({len(ruleset.rules)}): None to "
                                            "choose, 'block' or a column of the rule", drive)
            for r, d in enumerate(drive):
                if d is not None and not isinstance(d, str):
                    raise SettingError(f"drive[{r}]", "must be None, 'block' or a column name", d)
        return cls(**{**s, "ruleset": ruleset, "windows": windows, "lateness": lateness})
