"""The settings of ``entities``, checked before Spark starts (:mod:`driftjoin.spark.runtime.settings`).

:meth:`EntitiesSettings.check` needs no data and no Spark: each value alone, then the values
against each other (``expire_after`` needs ``time_col``; ``one_per_source`` on a self-linkage needs
``source_cols``). What depends on the input (its columns and their types, whether it is a stream)
is checked by ``entities`` when it sees the input, still before any job runs. ``driftjoin run``
checks a job file's ``[entities]`` table through it too.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from driftjoin.spark.runtime.settings import SettingError, duration, flag, integer, known, text


def _source_cols(value: Any) -> tuple[str, str] | None:
    if value is None:
        return None
    if isinstance(value, (list, tuple)) and len(value) == 2:
        return tuple(text("source_cols", v, what="the columns of the left and right record's source") for v in value)
    raise SettingError("source_cols", "must be two column names (the source of the left record, of the right "
                                      "record), e.g. ('left_source', 'right_source')", value)


@dataclass(frozen=True)
class EntitiesSettings:
    """The checked settings of one ``entities`` call (see its docstring for each)."""

    left_col: str = "left_id"
    right_col: str = "right_id"
    two_sided: bool = False
    time_col: str | None = None
    ingest_col: str | None = "ingest_time"
    source_cols: tuple[str, str] | None = None
    max_size: int | None = None
    one_per_source: bool = False
    expire_after: str | float | None = None
    metrics_dir: str | None = None

    @staticmethod
    def names() -> list[str]:
        return [f.name for f in fields(EntitiesSettings)]

    @classmethod
    def check(cls, given: Mapping[str, Any]) -> EntitiesSettings:
        """Check the settings ``given`` (name to value); raises :class:`SettingError` naming the first bad one.

        >>> EntitiesSettings.check({"max_size": 50}).max_size
        50
        >>> EntitiesSettings.check({"expire_after": "10 minutes"})
        Traceback (most recent call last):
        ...
        driftjoin.spark.runtime.settings.SettingError: expire_after dates entities by their links' times: give time_col= (e.g. 'ingest_time' of the pairs)
        """
        known(given, cls.names(), "entities")
        s = {**{f.name: f.default for f in fields(cls)}, **given}
        for name in ("left_col", "right_col"):
            text(name, s[name], what="a column of the links")
        for name in ("time_col", "ingest_col", "metrics_dir"):
            text(name, s[name], optional=True)
        flag("two_sided", s["two_sided"])
        flag("one_per_source", s["one_per_source"])
        s["source_cols"] = _source_cols(s["source_cols"])
        if s["max_size"] is not None:
            integer("max_size", s["max_size"], low=2, what="the most records one entity may hold")
        duration("expire_after", s["expire_after"], allow_zero=True, optional=True)
        if s["left_col"] == s["right_col"]:
            raise SettingError("right_col", f"names the same column as left_col ({s['left_col']!r}): a link needs the "
                                            "two records' ids", show_value=False)
        if s["expire_after"] is not None and s["time_col"] is None:
            raise SettingError("expire_after", "dates entities by their links' times: give time_col= (e.g. "
                                               "'ingest_time' of the pairs)", show_value=False)
        if s["one_per_source"] and s["source_cols"] is None and not s["two_sided"]:
            raise SettingError("one_per_source", "needs source_cols= on a self-linkage (the columns that name each "
                                                 "record's source); a two-sided linkage (two_sided=True) uses the side",
                               show_value=False)
        if s["source_cols"] is not None and not s["one_per_source"]:
            raise SettingError("source_cols", "is read only by the one_per_source guard: set one_per_source=True or "
                                              "drop source_cols", show_value=False)
        return cls(**s)

    def expire_seconds(self) -> float | None:
        return duration("expire_after", self.expire_after, allow_zero=True, optional=True)
