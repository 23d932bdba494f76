"""The settings of ``topk_set_join``, checked once before Spark starts (:mod:`driftjoin.spark.runtime.settings`).

:meth:`TopKSettings.check` needs no data and no Spark, and returns the one typed, immutable
object ``topk_set_join`` builds its plan (:meth:`driftjoin.spark.topk.operators.TopKPlan.of`)
and its controller from: durations are parsed here, once, into seconds. What depends on the
input (its columns, whether it is a stream) is checked by the join when it sees the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from driftjoin.spark.runtime.settings import (
    SettingError,
    choice,
    duration,
    flag,
    integer,
    known,
    text,
)
from driftjoin.swoop import SIMILARITIES

#: ``design=`` of a join with ``parallelism > 1``: the partitioned designs the operator runs
#: (:mod:`driftjoin.swoop.partitioned`; both route a set by its owner).
DESIGNS = ("owner", "probe")
#: The time band of a pair when neither ``within=`` nor the deprecated ``window=`` is given.
DEFAULT_WITHIN = "10 minutes"
#: The settings of the columns only (``invalid_sets`` takes these).
COLUMNS = ("tokens_col", "id_col", "time_col")


@dataclass(frozen=True)
class TopKSettings:
    """The checked settings of one ``topk_set_join`` (see its docstring for each)."""

    #: None only in the settings of ``invalid_sets`` (which joins nothing)
    k: int | None = None
    similarity: str = "jaccard"
    tokens_col: str = "tokens"
    id_col: str = "id"
    time_col: str = "ts"
    within: str | float | None = None
    window: str | float | None = None
    metrics_dir: str | None = None
    parallelism: int = 1
    share_bound: bool = False
    design: str = "owner"
    #: derived: ``within`` in seconds (default :data:`DEFAULT_WITHIN`), or None with the deprecated ``window``
    within_seconds: float | None = field(default=None, metadata={"derived": True})
    #: derived: the deprecated ``window`` in seconds (a pair's times differ by less than it), or None
    window_seconds: float | None = field(default=None, metadata={"derived": True})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings a caller may give (the derived fields are not among them)."""
        return tuple(f.name for f in fields(cls) if not f.metadata.get("derived"))

    @classmethod
    def check(cls, given: Mapping[str, Any], *, dead_letters: bool = False) -> TopKSettings:
        """Check the settings ``given`` (name to value); raises :class:`SettingError` naming the first
        bad one. ``dead_letters``: for ``invalid_sets``, which takes the columns only.

        >>> TopKSettings.check({"k": 10, "within": "1 minute"}).within_seconds
        60.0
        """
        names = cls.names()
        known(given, COLUMNS if dead_letters else names, "invalid_sets" if dead_letters else "topk_set_join")
        if "k" not in given and not dead_letters:
            raise SettingError("k", "is required (how many pairs the top-k holds)", show_value=False)
        s = {**{f.name: f.default for f in fields(cls) if f.name in names}, **given}
        for name in COLUMNS:
            text(name, s[name], what="a column of the input")
        if dead_letters:
            return cls(**s)
        s["k"] = integer("k", s["k"], what="how many pairs the top-k holds")
        choice("similarity", s["similarity"], sorted(SIMILARITIES))
        text("metrics_dir", s["metrics_dir"], optional=True)
        s["parallelism"] = integer("parallelism", s["parallelism"], what="the workers that find the pairs")
        flag("share_bound", s["share_bound"])
        choice("design", s["design"], DESIGNS, what="with parallelism > 1")
        within = duration("within", s["within"], allow_zero=True, optional=True)
        window = duration("window", s["window"], optional=True)
        if s["within"] is not None and s["window"] is not None:
            raise SettingError("window", "is the old spelling of within= (pairs whose times differ by at most that "
                                         "much): give within= only", show_value=False)
        if s["share_bound"] and s["parallelism"] == 1:
            raise SettingError("share_bound", "shares a bound between workers: it needs parallelism > 1",
                               show_value=False)
        if s["share_bound"] and not s["metrics_dir"]:
            raise SettingError("share_bound", "needs metrics_dir= (a directory the workers and the driver share: stocks "
                                              "go out and the bound comes back through it)", show_value=False)
        if window is None and within is None:
            within = duration("within", DEFAULT_WITHIN)
        return cls(**s, within_seconds=within, window_seconds=window)
