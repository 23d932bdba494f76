"""Checks of a metric join before it starts (settings) and of each record (dead-letter reasons).

Settings fail with a ``ValueError`` that says what to change: a metric unknown or not fitting the
column's kind of value, a threshold the metric cannot use (a fractional number of edits, a Jaccard
distance outside [0, 1)), contradicting windows (``slide`` longer than ``window``, ``within``
together with ``window``), a strategy that does not apply to the metric, or a user metric that is
not a metric on a sample (:func:`driftjoin.metric.spaces.check_triangle`).

Records: :func:`reasons` gives, per value, why it cannot be joined (a null string or set, a
non-string in a string column, an empty token set, ...) or None; the runtime sends those rows to
the dead letters with the reason and joins the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from driftjoin.metric.choose import strategies_for
from driftjoin.metric.spaces import CallableSpace, PairwiseSpace, Space, check_triangle, get_space
from driftjoin.metric.tokens import TokenOrder
from driftjoin.windows import Windowing, windowing

#: Kinds of column values, as the runtime reports a column's type.
VALUE_KINDS = ("string", "set", "vector", "other")
_FIT = {"string": ("string",), "set": ("set",), "vector": ("vector",)}
_ADVICE = {
    "string": "metric='levenshtein' (edit distance) or a user metric",
    "set": "metric='jaccard' or a user metric",
    "vector": "a vector metric ('euclidean', 'angular', 'cosine', ...) or a user metric",
    "other": "a user metric (a callable f(a, b) -> float or driftjoin.user_metric(pairwise=...))",
}

#: Sample values the triangle inequality of a user metric is checked on (about n^3 / 2 additions).
TRIANGLE_SAMPLE = 200


@dataclass(frozen=True)
class Settings:
    """Validated settings of a metric join."""

    space: Space
    threshold: float
    windows: Windowing
    algorithm: str


def check_settings(
    metric: str | Space | Callable[[Any, Any], float],
    threshold: Any,
    *,
    value_kind: str,
    column: str = "value",
    window: Any = None,
    slide: Any = None,
    within: Any = None,
    algorithm: str = "auto",
    order: TokenOrder | None = None,
) -> Settings:
    """Validate a metric join's settings (module docstring); returns them resolved.

    Parameters
    ----------
    metric : a name, a :class:`Space` (e.g. :func:`driftjoin.user_metric`) or a callable ``f(a, b)``.
    threshold : the distance threshold (a whole number of edits for ``"levenshtein"``).
    value_kind : what the column holds: ``"string"``, ``"set"`` (array of str or int), ``"vector"``
        or ``"other"``.
    column : the column's name, for messages.
    window, slide, within : the time window (:func:`driftjoin.windows.windowing`).
    algorithm : ``"auto"`` or a strategy of the metric (:func:`driftjoin.metric.choose.strategies_for`).
    order : the global token order of a Jaccard join.

    Example::

        >>> s = check_settings("levenshtein", 2, value_kind="string", within="30 seconds")
        >>> s.threshold, s.windows.kind
        (2, 'interval')
        >>> check_settings("levenshtein", 1.5, value_kind="string")
        Traceback (most recent call last):
        ...
        ValueError: threshold=1.5: edit distance counts whole edits; use a whole number such as 1
    """
    space = get_space(metric, order)
    check_kind(space, value_kind, column)
    t = space.check_threshold(threshold)
    windows = windowing(window=window, slide=slide, within=within)
    allowed = ("auto",) + strategies_for(space)
    if algorithm not in allowed:
        raise ValueError(f"algorithm={algorithm!r} does not apply to metric={space.name!r}; choose one of {', '.join(allowed)}")
    return Settings(space, t, windows, algorithm)


def check_kind(space: Space, value_kind: str, column: str = "value") -> None:
    """Refuse a space that does not compare what the column holds (``value_kind``, as
    :func:`check_settings` takes it), saying which metric fits the column.

    Example::

        >>> from driftjoin.metric.spaces import JaccardSpace
        >>> check_kind(JaccardSpace(), "string", "name")
        Traceback (most recent call last):
        ...
        ValueError: metric='jaccard' compares set values, but column 'name' holds string values: use metric='levenshtein' (edit distance) or a user metric
    """
    if value_kind not in VALUE_KINDS:
        raise ValueError(f"value_kind must be one of {', '.join(VALUE_KINDS)}, got {value_kind!r}")
    if space.value_type != "any" and value_kind not in _FIT[space.value_type]:
        raise ValueError(f"metric={space.name!r} compares {space.value_type} values, but column {column!r} holds "
                         f"{value_kind} values: use {_ADVICE[value_kind]}")


def check_user_metric(space: Space, sample: Sequence[Any]) -> None:
    """For a user metric, :func:`check_triangle` on (at most :data:`TRIANGLE_SAMPLE`) valid sample values."""
    if not isinstance(space, (CallableSpace, PairwiseSpace)):
        return
    valid = [v for v, why in zip(sample, reasons(space, sample)) if why is None][:TRIANGLE_SAMPLE]
    check_triangle(space, space.prepare(valid))


def reasons(space: Space, values: Sequence[Any]) -> list[str | None]:
    """Per value, why it cannot be joined in ``space`` (a dead-letter reason), or None.

    Example::

        >>> from driftjoin.metric.spaces import LevenshteinSpace
        >>> reasons(LevenshteinSpace(), ["ok", None, 7, ""])
        [None, 'null string', 'not a string: int 7', None]
    """
    why = space.reason
    return [why(v) for v in values]
