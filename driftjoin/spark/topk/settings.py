"""The settings of ``topk_set_join``, checked before Spark starts (:mod:`driftjoin.spark.runtime.settings`).

:meth:`TopKSettings.check` needs no data and no Spark; what depends on the input (its columns,
whether it is a stream) is checked by the join when it sees the input.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from driftjoin.spark.runtime.settings import (
    SettingError,
    choice,
    duration,
    flag,
    integer,
    text,
)
from driftjoin.swoop import SIMILARITIES

#: ``design=`` of a join with ``parallelism > 1``: the partitioned designs the operator runs
#: (:mod:`driftjoin.swoop.partitioned`; both route a set by its owner).
DESIGNS = ("owner", "probe")


@dataclass(frozen=True)
class TopKSettings:
    """The checked settings of one ``topk_set_join`` (see its docstring for each)."""

    k: int
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

    @classmethod
    def check(cls, given: Mapping[str, Any]) -> TopKSettings:
        """Check the settings ``given`` (name to value); raises :class:`SettingError` naming the first bad one.

        >>> TopKSettings.check({"k": 10, "within": "1 minute"}).within
        '1 minute'
        """
        names = [f.name for f in fields(cls)]
        unknown = sorted(set(given) - set(names))
        if unknown:
            raise SettingError(unknown[0], f"is not a setting of topk_set_join; settings are: {', '.join(names)}",
                               show_value=False)
        if "k" not in given:
            raise SettingError("k", "is required (how many pairs the top-k holds)", show_value=False)
        s = {**{f.name: f.default for f in fields(cls) if f.name != "k"}, **given}
        integer("k", s["k"], what="how many pairs the top-k holds")
        choice("similarity", s["similarity"], sorted(SIMILARITIES))
        for name in ("tokens_col", "id_col", "time_col"):
            text(name, s[name], what="a column of the input")
        text("metrics_dir", s["metrics_dir"], optional=True)
        integer("parallelism", s["parallelism"], what="the workers that find the pairs")
        flag("share_bound", s["share_bound"])
        choice("design", s["design"], DESIGNS, what="with parallelism > 1")
        duration("within", s["within"], allow_zero=True, optional=True)
        duration("window", s["window"], optional=True)
        if s["within"] is not None and s["window"] is not None:
            raise SettingError("window", "is the old spelling of within= (pairs whose times differ by at most that "
                                         "much): give within= only", show_value=False)
        if s["share_bound"] and s["parallelism"] == 1:
            raise SettingError("share_bound", "shares a bound between workers: it needs parallelism > 1",
                               show_value=False)
        if s["share_bound"] and not s["metrics_dir"]:
            raise SettingError("share_bound", "needs metrics_dir= (a directory the workers and the driver share: stocks "
                                              "go out and the bound comes back through it)", show_value=False)
        return cls(**s)
