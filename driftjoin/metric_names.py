"""The names ``metric=`` takes: one registry that the settings, the cores and the docs all read.

``similarity_join(metric=...)`` names a distance by a string (or passes a callable or
:func:`driftjoin.user_metric`). A name is one of three kinds, which decides the path a join
takes and the column it needs:

- ``"vector"``: the vector metrics of :mod:`driftjoin.distance` (``angular``, ``cosine``,
  ``euclidean``, ``manhattan``, ``chebyshev``) on ``array<double>``/``array<float>``/MLlib vectors;
- ``"string"``: edit distance (``levenshtein``, also written ``edit`` or ``edit_distance``) on strings;
- ``"set"``: Jaccard distance (``jaccard``) on token sets.

Names are matched without case and surrounding spaces (:func:`lookup`). A few names people reach
for that are not metrics (squared Euclidean, dot products, Hamming) are refused with what to use
instead; any other unknown name is refused with every name listed and the closest one suggested
(:class:`UnknownMetricError`), by the core (:func:`driftjoin.metric.spaces.get_space`,
:func:`driftjoin.distance.get_metric`) and the settings check alike.

>>> lookup(" Edit ").name
'levenshtein'
>>> lookup("levenstein")
Traceback (most recent call last):
...
driftjoin.metric_names.UnknownMetricError: unknown metric 'levenstein' (did you mean 'levenshtein'?); metric= takes angular, chebyshev, cosine, euclidean, manhattan (vectors), levenshtein, also written edit or edit_distance (strings), jaccard (token sets), a callable f(a, b) -> float or driftjoin.user_metric(...)
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass

#: The kinds of value a metric compares.
VECTOR, STRING, SET = "vector", "string", "set"
KIND_WORDS = {VECTOR: "vectors", STRING: "strings", SET: "token sets"}


@dataclass(frozen=True)
class MetricName:
    """One metric ``metric=`` can name: its name, the other spellings it takes, what it compares
    and what it is (for messages and docs)."""

    name: str
    kind: str
    definition: str
    aliases: tuple[str, ...] = ()

    @property
    def spellings(self) -> tuple[str, ...]:
        return (self.name, *self.aliases)


#: Every metric name, in the order the docs list them.
METRIC_NAMES: tuple[MetricName, ...] = (
    MetricName("angular", VECTOR, "the angle between two vectors / pi, in [0, 1]"),
    MetricName("cosine", VECTOR, "1 - cos, in [0, 2] (joined through angular, its metric equivalent)"),
    MetricName("euclidean", VECTOR, "the L2 distance"),
    MetricName("manhattan", VECTOR, "the L1 distance"),
    MetricName("chebyshev", VECTOR, "the L-infinity distance"),
    MetricName("levenshtein", STRING, "edit distance: insertions, deletions, substitutions of characters",
               ("edit", "edit_distance")),
    MetricName("jaccard", SET, "1 - |A & B| / |A | B| of two token sets"),
)

#: Names that are not metrics S3J can partition by, and what to use instead.
REFUSED = {
    "sqeuclidean": "squared Euclidean is not a metric; use metric='euclidean' with threshold=sqrt(t)",
    "squared_euclidean": "squared Euclidean is not a metric; use metric='euclidean' with threshold=sqrt(t)",
    "dot": "a dot product is a similarity, not a distance; use metric='cosine' or 'angular'",
    "inner_product": "an inner product is a similarity, not a distance; use metric='cosine' or 'angular'",
    "hamming": "Hamming is defined on sets/bit strings; use driftjoin.topk_set_join for sets, or metric='jaccard'",
}

_BY_SPELLING = {spelling: m for m in METRIC_NAMES for spelling in m.spellings}


def names(kind: str | None = None) -> tuple[str, ...]:
    """The metric names (not the aliases), all or of one kind (:data:`VECTOR`, :data:`STRING`, :data:`SET`)."""
    return tuple(m.name for m in METRIC_NAMES if kind is None or m.kind == kind)


def listing() -> str:
    """Every name ``metric=`` takes, by kind, as messages say it."""
    parts = []
    for kind, word in KIND_WORDS.items():
        entries = [m.name + (f", also written {' or '.join(m.aliases)}" if m.aliases else "")
                   for m in METRIC_NAMES if m.kind == kind]
        parts.append(f"{', '.join(sorted(entries))} ({word})")
    return ", ".join(parts) + ", a callable f(a, b) -> float or driftjoin.user_metric(...)"


class UnknownMetricError(ValueError):
    """A ``metric=`` name that is not in the registry: why (refused names) or the closest name."""

    def __init__(self, name: str) -> None:
        self.name = name
        key = name.strip().lower()
        self.reason = REFUSED.get(key)
        close = difflib.get_close_matches(key, list(_BY_SPELLING), n=1)
        self.suggestion = _BY_SPELLING[close[0]].name if close and self.reason is None else None
        super().__init__(f"unknown metric {name!r}{self.detail}; metric= takes {listing()}")

    @property
    def detail(self) -> str:
        """Why, or the closest name (the text after the name)."""
        if self.reason is not None:
            return f": {self.reason}"
        return f" (did you mean {self.suggestion!r}?)" if self.suggestion else ""


def lookup(name: str) -> MetricName:
    """The metric ``name`` names (any spelling, any case); :class:`UnknownMetricError` otherwise."""
    entry = _BY_SPELLING.get(name.strip().lower()) if isinstance(name, str) else None
    if entry is None:
        raise UnknownMetricError(str(name))
    return entry


def kind_of(name: str) -> str | None:
    """The kind of value ``name`` compares (None: not a name in the registry)."""
    entry = _BY_SPELLING.get(name.strip().lower()) if isinstance(name, str) else None
    return None if entry is None else entry.kind
