"""The settings of ``similarity_join``, checked once before Spark starts (:mod:`driftjoin.spark.runtime.settings`).

:meth:`SimilaritySettings.check` is the one gate of every entry point: ``similarity_join`` and
``invalid_records`` call it first, ``driftjoin run`` calls it on the job file's ``[join]`` table
and ``driftjoin demo`` on its flags, all before a Spark session is needed. It needs no data and no
Spark: each value alone, then the values against each other (``balance_options`` without
``balance``, ``partitions`` above ``parallelism``, centroids of the wrong shape...). It returns the
one typed, immutable object the join's plans, operators and controllers are built from: the
metric resolved (:mod:`driftjoin.metric_names`) into the distance it names, the threshold in the
form that distance takes, the windows and the watermark parsed once, the compared column, how
pairs leave the workers. What depends on the input (its columns and their types, whether it is a
stream, the dimension of a static input) is checked by the join when it sees the input, still
before any job runs; the rules it shares with this check are written once, here
(:meth:`SimilaritySettings.refuse_on_space_path`, :func:`check_centroids`).

A new setting is one more field and one more line in :meth:`SimilaritySettings.check`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

import numpy as np

from driftjoin.distance import Metric, check_threshold, get_metric
from driftjoin.metric.choose import strategies_for
from driftjoin.metric.spaces import Space, get_space
from driftjoin.metric_names import VECTOR, UnknownMetricError, listing, lookup
from driftjoin.windows import Windowing, windowing
from driftjoin.spark.runtime.settings import (
    SettingError,
    choice,
    core,
    duration,
    flag,
    integer,
    known,
    number,
    options,
    text,
)

#: ``algorithm=`` values: ``auto`` chooses between the two exact methods S3J and the grid;
#: ClusterJoin and brute force are the paper's baselines.
ALGORITHMS = ("auto", "s3j", "grid", "clusterjoin", "bruteforce")
#: ``balance=`` policies of the workset balancer.
BALANCE = ("none", "s3j", "greedy")
#: ``output=`` shapes and how each one's pairs leave the workers (:data:`~driftjoin.spark.similarity.shape.TRANSPORTS`):
#: one row per pair (``flat``), without the provenance columns (``lean``), or grouped by left record.
OUTPUTS = {"pairs": "flat", "pairs-lean": "lean", "grouped": "grouped", "pairs-grouped": "grouped"}
#: ``output=`` shapes of the metric-space path (one row per pair).
SPACE_OUTPUTS = ("pairs", "pairs-lean")
#: Settings only the vector path reads, with their defaults (the metric-space path refuses others).
VECTOR_ONLY = {"dim": None, "centroids": "random", "bounds": (-1.0, 1.0), "virtual_partitions": 500,
               "balance_options": None, "block_bytes": None}

#: The keys of ``balance_options`` (the workset balancer's settings) and their checks.
BALANCE_OPTIONS = {
    "monitoring_window": lambda n, v: number(n, v, low=0, low_open=True, what="seconds between balancing rounds"),
    "di_threshold": lambda n, v: number(n, v, low=0, what="relative degree of imbalance that triggers a rebalance"),
    "latency_spread": lambda n, v: number(n, v, low=0, what="a worker's p99 latency this far from the others' "
                                                            "mean triggers a rebalance (0.5 = 50%)"),
    "migration_factor": lambda n, v: number(n, v, low=0, what="cost of moving a workset per byte"),
    "split": flag,
    "at": lambda n, v: choice(n, v, ("window", "any"), what="'window': only when a new window has started"),
    "load": lambda n, v: choice(n, v, ("comparisons", "cost_model")),
}


def _metric(value: Any) -> Metric | Space:
    """A vector metric of :mod:`driftjoin.distance`, or the space of a metric join (strings, token
    sets, a user metric: :func:`driftjoin.metric.spaces.get_space`); a name is looked up in the
    one registry of names (:mod:`driftjoin.metric_names`)."""
    if isinstance(value, str):
        try:
            entry = lookup(value)
        except UnknownMetricError as e:
            raise SettingError("metric", f"={value!r} is an unknown metric{e.detail}: write one of {listing()}",
                               show_value=False) from None
        return get_metric(entry.name) if entry.kind == VECTOR else get_space(entry.name)
    if isinstance(value, Space) or callable(value):
        return core("metric", lambda: get_space(value))
    raise SettingError("metric", "must be the name of a distance ('angular', 'euclidean', 'levenshtein', 'jaccard', "
                                 "...), a callable f(a, b) -> float or driftjoin.user_metric(...)", value)


def _centroids(value: Any) -> str | np.ndarray:
    if isinstance(value, str):
        return choice("centroids", value, ("random", "sample"),
                      what="or an array of shape (parallelism, dim)")
    try:
        c = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise SettingError("centroids", "must be 'random', 'sample' or an array of shape (parallelism, dim)",
                           show_value=False) from None
    if c.ndim != 2 or not c.size:
        raise SettingError("centroids", f"must have shape (parallelism, dim), got an array of shape {c.shape}",
                           show_value=False)
    if not np.isfinite(c).all():
        raise SettingError("centroids", "must be finite numbers", show_value=False)
    return c


def _bounds(value: Any) -> tuple[float, float]:
    if isinstance(value, (list, tuple)) and len(value) == 2:
        lo, hi = (number("bounds", v, what="the range centroids are drawn from") for v in value)
        if lo < hi:
            return lo, hi
    raise SettingError("bounds", "must be two finite numbers (low, high) with low < high: the range of your data "
                                 "per dimension, where random centroids are drawn", value)


class _DefaultWindow(str):
    """The default ``window=`` of :func:`~driftjoin.similarity_join`, told apart from one the user
    writes (``within=`` replaces the default window, but refuses a window given with it)."""


#: ``window=`` when the user gives none: one-minute tumbling windows, unless ``within=`` is given.
DEFAULT_WINDOW = _DefaultWindow("1 minute")


@dataclass(frozen=True)
class SimilaritySettings:
    """The checked settings of one ``similarity_join`` (see its docstring for each)."""

    #: None only in the settings of ``invalid_records`` (which joins nothing)
    threshold: float | None = None
    metric: Any = "angular"
    id_col: str = "id"
    vector_col: str = "vector"
    value_col: str | None = None
    window: str | float | None = DEFAULT_WINDOW
    slide: str | float | None = None
    within: str | float | None = None
    parallelism: int | None = None
    partitions: int | None = None
    time_col: str | None = None
    watermark: str | float | None = None
    ingest_col: str | None = None
    dim: int | None = None
    centroids: Any = "random"
    bounds: tuple[float, float] = (-1.0, 1.0)
    seed: int = 0
    metrics_dir: str | None = None
    algorithm: str = "auto"
    virtual_partitions: int = 500
    balance: str = "none"
    balance_options: Mapping[str, Any] = field(default_factory=dict)
    output: str = "pairs"
    block_bytes: int | None = None
    #: derived: the windows (:mod:`driftjoin.windows`) and the watermark in seconds (None: none given)
    windows: Windowing | None = field(default=None, metadata={"derived": True})
    lateness: float | None = field(default=None, metadata={"derived": True})
    #: derived: the distance ``metric`` names: a vector metric (:class:`~driftjoin.distance.Metric`)
    #: or the space of a metric-space join (:class:`~driftjoin.metric.spaces.Space`)
    distance: Metric | Space | None = field(default=None, metadata={"derived": True})
    #: derived: the compared column, and the setting that named it (``value_col`` or ``vector_col``)
    column: str = field(default="vector", metadata={"derived": True})
    column_setting: str = field(default="vector_col", metadata={"derived": True})

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The settings a caller may give (the derived fields are not among them)."""
        return tuple(f.name for f in fields(cls) if not f.metadata.get("derived"))

    @property
    def transport(self) -> str:
        """How pairs leave the workers for this ``output`` (:data:`OUTPUTS`)."""
        return OUTPUTS[self.output]

    @property
    def on_space_path(self) -> bool:
        """Whether the metric alone sends the join to the metric-space path (strings, token sets, a
        user metric); a vector metric takes it only for a column without vectors."""
        return isinstance(self.distance, Space)

    @classmethod
    def check(cls, given: Mapping[str, Any], *, dead_letters: bool = False) -> SimilaritySettings:
        """Check the settings ``given`` (name to value; the others take their defaults).

        Raises :class:`SettingError` naming the first bad one; unknown names are refused too (a
        typo must not be ignored). ``dead_letters``: for ``invalid_records``, which takes the
        join's settings but needs no threshold.

        >>> SimilaritySettings.check({"threshold": 0.01, "window": "1 minute", "slide": "20 seconds"}).windows.kind
        'sliding'
        >>> SimilaritySettings.check({"threshold": 0.01, "parallelism": 0})
        Traceback (most recent call last):
        ...
        driftjoin.spark.runtime.settings.SettingError: parallelism must be an integer >= 1 (the number of workers), got 0
        """
        known(given, cls.names(), "similarity_join")
        if "threshold" not in given and not dead_letters:
            raise SettingError("threshold", "is required (a distance: pairs with distance <= threshold join)",
                               show_value=False)
        s = {f.name: f.default if f.default_factory is MISSING else f.default_factory()
             for f in fields(cls) if f.name in cls.names()}
        s.update(given)
        distance = _metric(s["metric"])
        if "threshold" in given:
            s["threshold"] = core("threshold", lambda: distance.check_threshold(s["threshold"])
                                  if isinstance(distance, Space) else check_threshold(distance, s["threshold"]))
        for name in ("id_col", "vector_col"):
            text(name, s[name], what="a column of the input")
        text("value_col", s["value_col"], optional=True, what="the column compared (vector_col's newer name)")
        column, column_setting = _column(s["value_col"], s["vector_col"])
        for name in ("time_col", "ingest_col"):
            text(name, s[name], optional=True, what="a column of the input")
        text("metrics_dir", s["metrics_dir"], optional=True, what="a directory for the operators' statistics")
        window = None if s["within"] is not None and s["window"] is DEFAULT_WINDOW else s["window"]
        windows = core("window", lambda: windowing(window, s["slide"], s["within"]))
        lateness = duration("watermark", s["watermark"], allow_zero=True, optional=True)
        if lateness is not None and s["time_col"] is None and s["ingest_col"] is None:
            raise SettingError("watermark", "needs time_col= (an event-time column) or ingest_col=", show_value=False)
        if s["parallelism"] is not None:
            s["parallelism"] = integer("parallelism", s["parallelism"], what="the number of workers")
        if s["partitions"] is not None:
            high = s["parallelism"]
            s["partitions"] = integer("partitions", s["partitions"], high=high,
                                      what="the Spark state partitions the workers share"
                                           + (", at most parallelism" if high else ""))
        if s["dim"] is not None:
            s["dim"] = integer("dim", s["dim"], what="the vector dimension")
        integer("seed", s["seed"], low=0)
        s["bounds"] = _bounds(s["bounds"])
        s["algorithm"] = choice("algorithm", s["algorithm"], ("auto", *strategies_for(distance))
                                if isinstance(distance, Space) else ALGORITHMS,
                                what=f"for metric={getattr(distance, 'name', distance)!r}")
        s["virtual_partitions"] = integer("virtual_partitions", s["virtual_partitions"], what="ClusterJoin's partitions")
        if s["block_bytes"] is not None:
            s["block_bytes"] = integer("block_bytes", s["block_bytes"], low=1 << 16,
                                       what="memory of one matrix-product block of the grid")
        choice("output", s["output"], OUTPUTS, what="'pairs': one row per pair; 'grouped': one row per left record")
        choice("balance", s["balance"], BALANCE, what="the workset balancer's policy")
        s["balance_options"] = options("balance_options", s["balance_options"], BALANCE_OPTIONS)
        if s["balance_options"] and s["balance"] == "none":
            raise SettingError("balance_options", "needs balance='s3j' or 'greedy' (without a balancer they would be "
                                                  "ignored)", show_value=False)
        if s["balance"] != "none" and s["algorithm"] not in ("s3j", "auto"):
            raise SettingError("balance", f"moves S3J worksets: it needs algorithm='s3j' (or 'auto', which then uses "
                                          f"S3J), not {s['algorithm']!r}", show_value=False)
        if s["algorithm"] == "grid" and s["output"] == "grouped":
            raise grouped_on_the_grid(s["output"])
        s["centroids"] = _centroids(s["centroids"])
        if isinstance(s["centroids"], np.ndarray):
            clusterjoin = s["algorithm"] == "clusterjoin"
            check_centroids(s["centroids"], s["virtual_partitions"] if clusterjoin else s["parallelism"], s["dim"],
                            "virtual partition" if clusterjoin else "worker")
        settings = cls(**s, windows=windows, lateness=lateness, distance=distance, column=column,
                       column_setting=column_setting)
        if settings.on_space_path and not dead_letters:
            settings.refuse_on_space_path()
        return settings

    def refuse_on_space_path(self) -> None:
        """Refuse the settings the metric-space path does not take (strings, token sets, user
        metrics): the vector path's only, balancing, grouped output. Checked here when the metric
        decides the path, and by the join when the column does (a vector metric on strings)."""
        if self.balance != "none":
            raise SettingError("balance", f"={self.balance!r} moves S3J worksets between workers, which the vector path "
                                          "does; a metric join runs S3J's formulation and computation fused per space "
                                          "partition: use balance='none'", show_value=False)
        given = [k for k, default in VECTOR_ONLY.items() if not _is_default(getattr(self, k), default)]
        if given:
            more = f"and {', '.join(given[1:])} apply" if len(given) > 1 else "applies"
            raise SettingError(given[0], f"{more} to vector joins only; remove {'them' if len(given) > 1 else 'it'} for "
                                         f"metric={getattr(self.metric, 'name', self.metric)!r}", show_value=False)
        if self.output not in SPACE_OUTPUTS:
            raise SettingError("output", f"={self.output!r} is not available for a metric join (it emits one row per "
                                         "pair): use output='pairs' or 'pairs-lean'", show_value=False)


def grouped_on_the_grid(output: str) -> SettingError:
    """``output="grouped"`` when the grid joins (asked for, or chosen by ``auto``)."""
    return SettingError("output", f"={output!r} is not available when the grid algorithm joins (it emits one row per "
                                  "pair): use output='pairs' or 'pairs-lean', or algorithm='s3j'", show_value=False)


def check_centroids(centroids: np.ndarray, n: int | None, dim: int | None, per: str) -> None:
    """Centroids given as an array: one per ``per`` (``n`` of them, when known) of ``dim``
    dimensions (when known)."""
    if n is not None and len(centroids) != n:
        raise SettingError("centroids", f"must have shape ({n}, dim) (one per {per}), got {centroids.shape}",
                           show_value=False)
    if dim is not None and centroids.shape[1] != dim:
        raise SettingError("centroids", f"have {centroids.shape[1]} dimensions but dim={dim}", show_value=False)


def _column(value_col: str | None, vector_col: str) -> tuple[str, str]:
    """The compared column and the setting that names it: ``value_col``, or ``vector_col`` (its
    older name, for vectors)."""
    if value_col is None:
        return vector_col, "vector_col"
    if vector_col != "vector" and vector_col != value_col:
        raise SettingError("value_col", f"={value_col!r} and vector_col={vector_col!r} name two columns: give "
                                        "value_col= only (vector_col= is its older name)", show_value=False)
    return value_col, "value_col"


def _is_default(value: Any, default: Any) -> bool:
    return value is default or (isinstance(value, (str, int, float, tuple)) and value == default) or (
        default is None and isinstance(value, Mapping) and not value)
