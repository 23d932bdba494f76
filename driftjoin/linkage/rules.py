"""The vocabulary of match rules, its checks, and the exact test of every condition.

A **rule set** is a list of rules; a **rule** is a dict from column to **condition**; a pair of
records *satisfies* a rule when every condition of the rule holds, and *matches* when it
satisfies at least one rule. Conditions:

===============================  ==========================================  =====================================
condition                        columns                                     holds when
===============================  ==========================================  =====================================
``"equal"``                      string, number, date, timestamp, other      the two values are equal
``("levenshtein", k)``           string                                      at most ``k`` edits (code points)
``("jaccard", t)``               array of strings or integers (token sets)   ``1 - |A & B| / |A | B| <= t``
``("jaccard", t, "words")``      string, tokenised: ``"words"`` (runs of     the same, on the tokens
                                 letters and digits, casefolded) or
                                 ``"qgrams"`` / ``"qgrams:q"`` (casefolded
                                 substrings of length q, default 3)
``("euclidean", t)``, ...        vector (array of numbers, MLlib Vector)     the vector distance ``<= t``
``(f, t)``, ``(user_metric, t)``  any                                         ``f(a, b) <= t``
``("within", d)``, ``("abs", d)``  number, date, timestamp                   ``|a - b| <= d``: a number; for dates
                                                                             and timestamps a duration (``"2
                                                                             days"``) or a number (days for a
                                                                             date, seconds for a timestamp)
===============================  ==========================================  =====================================

A condition may also be written as a dict, ``{"metric": "jaccard", "threshold": 0.4, "tokens":
"words"}`` (what a TOML job file writes).

**Nulls** follow SQL: a condition on a null value is false, so the record takes no part in the
rules with that column and can still match through another rule. A NaN or infinite number and a
token set that is empty (an empty array, a string with no word) count as null. Values a condition cannot
use at all (a token list with a null element, a vector with a NaN or of another length than the
column's) make the record a dead letter (:meth:`Measure.reason`).

**Measures.** The distance of a condition is its *measure* ``(column, metric, tokens)``; two
conditions with the same measure and different thresholds share it. Every matched pair carries
the distance of every measure of the rule set (:attr:`RuleSet.measures`, named by
:attr:`Measure.field`): ``equal`` gives 0 or 1 (the discrete metric), ``within`` the absolute
difference in the column's unit (days for dates, seconds for timestamps).

**Exact tests.** Every condition is decided exactly on the values as they are: edit distances
are integers (rapidfuzz), equality is equality, a Jaccard distance is the exact ratio
``|A ^ B| / |A | B|`` compared with the number the threshold stands for, as ``similarity_join``
compares it (:mod:`driftjoin.metric.exact`: ``0.3`` is ``3/10``, so a pair at exactly 3/10
matches), ``within`` on floats with the exact difference (:func:`abs_diff_at_most`: a difference
rounds once, and a tie is settled with its exact error), on dates and timestamps with integers.
Vector metrics and user metrics compare their float64 value with the threshold.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from numbers import Real
from typing import TYPE_CHECKING, Any

import numpy as np

from driftjoin.durations import parse_duration
from driftjoin.metric.exact import jaccard_distance, jaccard_le
from driftjoin.metric.records import object_array
from driftjoin.metric.spaces import (
    CallableSpace,
    JaccardSpace,
    LevenshteinSpace,
    PairwiseSpace,
    Space,
    VectorSpace,
    get_space,
)
from driftjoin.windows import TICKS_PER_SECOND

if TYPE_CHECKING:
    import pandas as pd
else:
    from driftjoin.deferred import pandas as pd

#: Kinds of columns, as a runtime reports a column's type.
KINDS = ("string", "set", "ints", "vector", "number", "date", "timestamp", "other")
#: Microseconds per day (dates are held as days, timestamps as microseconds).
DAY_TICKS = 86_400 * TICKS_PER_SECOND

#: Most rules in a rule set.
MAX_RULES = 63

EQUAL = "equal"
WITHIN = "within"
LEVENSHTEIN = "levenshtein"
JACCARD = "jaccard"
CALLABLE = "callable"

_WORD = re.compile(r"[^\W_]+")
_EQUAL_KINDS = ("string", "number", "date", "timestamp", "other")
_KIND_TEXT = {"string": "strings", "set": "arrays of strings", "ints": "arrays of integers", "vector": "vectors",
              "number": "numbers", "date": "dates", "timestamp": "timestamps", "other": "values"}
_ADVICE = {
    "string": "'equal', ('levenshtein', k), ('jaccard', t, 'words') or ('jaccard', t, 'qgrams')",
    "set": "'equal' is not available on arrays; use ('jaccard', t)",
    "ints": "('jaccard', t) (as a token set) or a vector metric such as ('euclidean', t)",
    "vector": "a vector metric such as ('euclidean', t) or ('angular', t)",
    "number": "'equal' or ('within', d)",
    "date": "'equal' or ('within', '2 days')",
    "timestamp": "'equal' or ('within', '10 minutes')",
    "other": "'equal' or a user metric (f, t)",
}


class RuleError(ValueError):
    """A rule set that cannot work: ``name`` is where (``rules[1]['surname']``), ``problem`` what
    to write instead (the Spark layer raises it as :class:`driftjoin.SettingError`)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(f"{name} {problem}")


# -- tokenisers -------------------------------------------------------------------------------

def words(text: str) -> list[str]:
    """The words of ``text``: maximal runs of letters and digits (Unicode word characters other
    than ``_``), casefolded.

    >>> words("12 Smith-Jones  St.")
    ['12', 'smith', 'jones', 'st']
    """
    return _WORD.findall(text.casefold())


def qgrams(text: str, q: int = 3) -> list[str]:
    """The substrings of length ``q`` of the casefolded ``text`` (the whole text if shorter, none
    if empty).

    >>> qgrams("Anna", 3)
    ['ann', 'nna']
    """
    t = text.casefold()
    if len(t) <= q:
        return [t] if t else []
    return [t[i : i + q] for i in range(len(t) - q + 1)]


def tokeniser(spec: str | None) -> Callable[[str], list[str]] | None:
    """The function of a ``tokens`` setting (``"words"``, ``"qgrams"``, ``"qgrams:q"``)."""
    if spec is None:
        return None
    if spec == "words":
        return words
    q = int(spec.split(":", 1)[1]) if ":" in spec else 3
    return lambda text: qgrams(text, q)


@lru_cache(maxsize=1 << 18)
def tokenised(spec: str, text: str) -> frozenset:
    """The token set of ``text`` under a ``tokens`` setting (cached: a record's value is tested
    against many candidates)."""
    return frozenset(tokeniser(spec)(text))


def _tokens_spec(name: str, value: Any) -> str:
    if value == "words":
        return "words"
    if isinstance(value, str) and re.fullmatch(r"qgrams(:[1-9][0-9]?)?", value):
        return value if ":" in value else "qgrams:3"
    raise RuleError(name, f"has tokens={value!r}; write 'words' (runs of letters and digits) or 'qgrams' "
                          "(3-grams; 'qgrams:2' for another length)")


# -- exact tests ------------------------------------------------------------------------------

def abs_diff_at_most(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """``|a - b| <= t`` exactly for float64 arrays (finite) and a float ``t >= 0``: ``s = fl(a - b)``
    decides unless ``|s| == t``; then the exact error ``e = (a - b) - s`` (TwoSum, exact in
    float64) says on which side of ``t`` the true difference lies.

    >>> d = 3.3 - 0.1  # 3.1999999999999997, but the exact difference of the two doubles is larger
    >>> abs_diff_at_most(np.array([3.3]), np.array([0.1]), d).tolist(), bool(abs(3.3 - 0.1) <= d)
    ([False], True)
    """
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        s = a - b
        m = np.abs(s)
        out = m < t
        tie = m == t
        if tie.any():
            bb = s - a
            e = (a - (s - bb)) + (-b - bb)  # TwoSum: a + (-b) == s + e exactly
            out |= tie & (((s > 0) & (e <= 0)) | ((s < 0) & (e >= 0)) | (s == 0))
    return out


# -- measures ---------------------------------------------------------------------------------

@dataclass(frozen=True, eq=False)
class Measure:
    """A distance on one column: ``(column, metric, tokens)`` (module docstring).

    ``space``: the metric core's space for levenshtein, jaccard, vector metrics and user
    metrics (None for ``equal`` and ``within``); ``kind``: the column's kind.
    """

    column: str
    metric: str
    kind: str
    tokens: str | None = None
    space: Space | None = None
    #: field name in the output (set by :class:`RuleSet`)
    field: str = ""

    @property
    def key(self) -> tuple:
        fn = self.space if self.metric == CALLABLE else None
        return (self.column, self.metric, self.tokens, id(fn) if fn is not None else None)

    @property
    def label(self) -> str:
        name = self.metric if self.metric != CALLABLE else (getattr(self.space, "name", "") or "user")
        return "_".join(p for p in (self.column, name, (self.tokens or "").replace(":", "")) if p)

    # values ------------------------------------------------------------------------------
    def values(self, raw: Sequence[Any]) -> np.ndarray:
        """The column's values as this measure holds them (numbers float64 with NaN for null,
        dates int64 days, timestamps int64 microseconds, both with :data:`NULL_TIME` for null;
        anything else an object array with None for null)."""
        return column_values(self.kind, raw)

    def usable(self, v: np.ndarray) -> np.ndarray:
        """Which values the condition can hold on (not null, not NaN, a non-empty token set)."""
        if self.kind == "number":
            return np.isfinite(v)
        if self.kind in ("date", "timestamp"):
            return v != NULL_TIME
        ok = ~pd.isnull(v) if len(v) else np.zeros(0, bool)  # element by element: values may be arrays
        if self.metric == JACCARD:
            k = np.nonzero(ok)[0]
            ok[k] = np.fromiter(map(len, map(self.token_set, v[k])), np.int64, len(k)) > 0
        return ok

    def reason(self, value: Any) -> str | None:
        """Why a non-null value cannot be used at all (a dead letter), or None."""
        if value is None:
            return None
        if self.metric == JACCARD and self.tokens is None:
            if any(t is None for t in value):
                return f"{self.column}: a token set with a null element"
        if isinstance(self.space, VectorSpace):
            why = self.space.reason(value)
            if why is not None:
                return f"{self.column}: {why}"
        return None

    def token_set(self, value: Any) -> frozenset:
        if self.tokens is not None:
            return tokenised(self.tokens, value)
        return frozenset(value.tolist() if isinstance(value, np.ndarray) else value)

    def token_lists(self, v: np.ndarray) -> list[list]:
        """The token sets of usable values as sorted-free lists (for :class:`JaccardSpace`)."""
        return [list(self.token_set(x)) for x in v]

    # distances -----------------------------------------------------------------------------
    def distances(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Distance of ``a[k]`` and ``b[k]`` (values of :meth:`values`), NaN where either is not usable."""
        n = len(a)
        out = np.full(n, np.nan)
        ok = self.usable(a) & self.usable(b)
        k = np.nonzero(ok)[0]
        if len(k) == 0:
            return out
        x, y = a[k], b[k]
        if self.metric == EQUAL:
            out[k] = np.where(equal_values(self.kind, x, y), 0.0, 1.0)
        elif self.metric == WITHIN:
            if self.kind == "number":
                out[k] = np.abs(x - y)
            else:
                out[k] = np.abs(x - y) / (1.0 if self.kind == "date" else TICKS_PER_SECOND)
        elif self.metric == JACCARD:
            out[k] = jaccard_distance(*self._overlaps(x, y))
        else:
            sp = self.space
            out[k] = sp.rowwise(sp.prepare(list(x)), sp.prepare(list(y)))
        return out

    def _overlaps(self, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        sa = [self.token_set(v) for v in x]
        sb = [self.token_set(v) for v in y]
        n_a = np.fromiter(map(len, sa), np.int64, len(sa))
        n_b = np.fromiter(map(len, sb), np.int64, len(sb))
        o = np.fromiter((len(p & q) for p, q in zip(sa, sb)), np.int64, len(sa))
        return n_a, n_b, o


#: A null date or timestamp (the smallest int64).
NULL_TIME = np.iinfo(np.int64).min


def column_values(kind: str, raw: Sequence[Any]) -> np.ndarray:
    """A column's values in the form the measures compute on (see :meth:`Measure.values`)."""
    if isinstance(raw, np.ndarray) and raw.dtype != object:
        if kind == "number":
            return raw.astype(np.float64)
        if kind in ("date", "timestamp"):
            return raw.astype(np.int64)
    if kind == "number":
        return np.array([np.nan if v is None else float(v) for v in raw], dtype=np.float64)
    if kind in ("date", "timestamp"):
        return np.array([NULL_TIME if v is None else int(v) for v in raw], dtype=np.int64)
    return object_array(list(raw))


def equal_values(kind: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a[k] == b[k]`` for values of one kind (usable ones)."""
    if kind in ("number", "date", "timestamp"):
        return a == b
    return np.fromiter((x == y for x, y in zip(a, b)), bool, len(a))


@dataclass(frozen=True, eq=False)
class Condition:
    """One condition of a rule: a measure and its threshold (``equal``: none)."""

    measure: Measure
    threshold: Any = None

    @property
    def column(self) -> str:
        return self.measure.column

    @property
    def metric(self) -> str:
        return self.measure.metric

    def holds(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Whether the condition holds for ``a[k]``, ``b[k]`` (values of the measure), exactly."""
        m = self.measure
        ok = m.usable(a) & m.usable(b)
        k = np.nonzero(ok)[0]
        if len(k) == 0:
            return ok
        x, y = a[k], b[k]
        if m.metric == EQUAL:
            res = equal_values(m.kind, x, y)
        elif m.metric == WITHIN:
            if m.kind == "number":
                res = abs_diff_at_most(x, y, self.threshold)
            else:
                res = np.abs(x - y) <= self.threshold
        elif m.metric == JACCARD:
            res = jaccard_le(jaccard_distance(*m._overlaps(x, y)), self.threshold)
        elif m.metric == LEVENSHTEIN:
            from rapidfuzz import process
            from rapidfuzz.distance import Levenshtein

            d = process.cpdist(list(x), list(y), scorer=Levenshtein.distance, score_cutoff=int(self.threshold),
                               dtype=np.int32, workers=1)
            res = d <= self.threshold
        else:
            sp = m.space
            res = sp.le(sp.rowwise(sp.prepare(list(x)), sp.prepare(list(y))), sp.radius(self.threshold))
        ok[k] = res
        return ok

    def describe(self) -> str:
        m = self.measure
        if m.metric == EQUAL:
            return f"{m.column} equal"
        extra = f" ({m.tokens})" if m.tokens else ""
        return f"{m.column} {m.label.split('_', 1)[-1] if m.metric == CALLABLE else m.metric}{extra} <= {self.threshold}"


#: Rough cost of testing a condition on a candidate (conditions are tested cheapest first).
_COST = {EQUAL: 0, WITHIN: 1, LEVENSHTEIN: 2, JACCARD: 4, CALLABLE: 5}


@dataclass(frozen=True, eq=False)
class Rule:
    """The conditions of one rule: ``equal`` ones (the block) and the others."""

    index: int
    conditions: tuple[Condition, ...]

    @property
    def by_cost(self) -> tuple[Condition, ...]:
        """The conditions, cheapest test first (vector metrics between edits and Jaccard)."""
        return tuple(sorted(self.conditions, key=lambda c: _COST.get(c.metric, 3)))

    @property
    def equal(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if c.metric == EQUAL)

    @property
    def fuzzy(self) -> tuple[Condition, ...]:
        return tuple(c for c in self.conditions if c.metric != EQUAL)

    def describe(self) -> str:
        return " and ".join(c.describe() for c in self.conditions)


@dataclass(frozen=True, eq=False)
class RuleSet:
    """A checked rule set (module docstring): rules in order, the measures, the columns they read."""

    rules: tuple[Rule, ...]
    measures: tuple[Measure, ...]
    #: column -> kind of every column a condition reads
    columns: dict[str, str] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.rules)

    def measure_index(self, m: Measure) -> int:
        return next(i for i, x in enumerate(self.measures) if x is m)

    def settings(self) -> list[list[list]]:
        """The rules as JSON values (what a plan stored with a checkpoint compares)."""
        return [[[c.column, c.metric if c.metric != CALLABLE else f"callable:{c.measure.label}", c.measure.tokens,
                  c.threshold] for c in r.conditions] for r in self.rules]


# -- parsing and checks -----------------------------------------------------------------------

def _condition_parts(name: str, spec: Any) -> tuple[Any, Any, Any]:
    """``(metric, threshold, tokens)`` of a condition as written."""
    if isinstance(spec, str):
        if spec.strip().lower() == EQUAL:
            return EQUAL, None, None
        raise RuleError(name, f"is {spec!r}; a condition is 'equal', (metric, threshold) such as ('levenshtein', 2), "
                              "or ('within', '2 days')")
    if isinstance(spec, Mapping):
        unknown = sorted(set(spec) - {"metric", "threshold", "tokens"})
        if unknown or "metric" not in spec:
            raise RuleError(name, "as a table needs metric= (and threshold=, optionally tokens=), e.g. "
                                  "{metric = 'jaccard', threshold = 0.4, tokens = 'words'}"
                                  + (f"; unknown key {unknown[0]!r}" if unknown else ""))
        metric = spec["metric"]
        if isinstance(metric, str) and metric.strip().lower() == EQUAL:
            return EQUAL, None, None
        if "threshold" not in spec:
            raise RuleError(name, f"needs threshold= for metric {metric!r}")
        return metric, spec["threshold"], spec.get("tokens")
    if isinstance(spec, (tuple, list)) and len(spec) in (2, 3):
        return spec[0], spec[1], spec[2] if len(spec) == 3 else None
    raise RuleError(name, f"is {spec!r}; a condition is 'equal', (metric, threshold), (metric, threshold, tokens) "
                          "or a dict with metric=, threshold= and tokens=")


def _within_threshold(name: str, kind: str, value: Any) -> Any:
    if kind == "number":
        if isinstance(value, bool) or not isinstance(value, Real) or not math.isfinite(value) or value < 0:
            raise RuleError(name, f"has ('within', {value!r}): on a number column the threshold is a finite number >= 0")
        return float(value)
    try:
        if isinstance(value, str):
            seconds = parse_duration(value, "within", allow_zero=True)
        elif isinstance(value, Real) and not isinstance(value, bool):
            seconds = float(value) * (86_400 if kind == "date" else 1)
            if not math.isfinite(seconds) or seconds < 0:
                raise ValueError
        else:
            raise ValueError
    except ValueError:
        unit = "days" if kind == "date" else "seconds"
        raise RuleError(name, f"has ('within', {value!r}): on a {kind} column write a duration such as '2 days' or "
                              f"'30 minutes', or a number of {unit}") from None
    if kind == "date":
        return seconds / 86_400.0
    return int(round(seconds * TICKS_PER_SECOND))


def _measure(name: str, column: str, kind: str, metric: Any, threshold: Any, tokens: Any) -> Condition:
    """One condition of a column of ``kind``, checked."""
    if isinstance(metric, str):
        key = metric.strip().lower()
        if key in (WITHIN, "abs"):
            if kind not in ("number", "date", "timestamp"):
                raise RuleError(name, f"compares {_KIND_TEXT[kind]} with ('{key}', ...), which needs numbers, dates or "
                                      f"timestamps; for {_KIND_TEXT[kind]} use {_ADVICE[kind]}")
            if tokens is not None:
                raise RuleError(name, "has tokens=, which only a Jaccard condition on a string column takes")
            return Condition(Measure(column, WITHIN, kind), _within_threshold(name, kind, threshold))
        try:
            space = get_space(key)
        except ValueError as e:
            raise RuleError(name, f"names metric {metric!r}: {e}; or 'equal' or 'within'") from None
    elif isinstance(metric, Space) or callable(metric):
        space = get_space(metric)
    else:
        raise RuleError(name, f"has metric {metric!r}; give a name ('levenshtein', 'jaccard', 'euclidean', 'within', "
                              "...), a callable f(a, b) -> float or driftjoin.user_metric(...)")
    if tokens is not None:
        tokens = _tokens_spec(name, tokens)
        if not isinstance(space, JaccardSpace) or kind != "string":
            raise RuleError(name, "has tokens=, which only a Jaccard condition on a string column takes "
                                  "(('jaccard', t, 'words'))")
    if isinstance(space, LevenshteinSpace):
        if kind != "string":
            raise RuleError(name, f"compares {_KIND_TEXT[kind]} with levenshtein, which needs strings; for "
                                  f"{_KIND_TEXT[kind]} use {_ADVICE[kind]}")
        metric_name = LEVENSHTEIN
    elif isinstance(space, JaccardSpace):
        if kind == "string" and tokens is None:
            raise RuleError(name, "compares strings with jaccard, which needs token sets: write ('jaccard', t, 'words') "
                                  "or ('jaccard', t, 'qgrams') to tokenise the string")
        if kind not in ("string", "set", "ints"):
            raise RuleError(name, f"compares {_KIND_TEXT[kind]} with jaccard, which needs token sets (arrays of strings "
                                  f"or integers, or a string with tokens=); for {_KIND_TEXT[kind]} use {_ADVICE[kind]}")
        metric_name = JACCARD
    elif isinstance(space, VectorSpace):
        if kind not in ("vector", "ints"):
            raise RuleError(name, f"compares {_KIND_TEXT[kind]} with {space.name}, which needs vectors; for "
                                  f"{_KIND_TEXT[kind]} use {_ADVICE[kind]}")
        metric_name = space.name
    else:
        assert isinstance(space, (CallableSpace, PairwiseSpace))
        metric_name = CALLABLE
    try:
        t = space.check_threshold(threshold)
    except ValueError as e:
        raise RuleError(name, f"has a threshold the metric cannot use: {e}") from None
    return Condition(Measure(column, metric_name, kind, tokens, space), t)


def check_rules(rules: Any, columns: Mapping[str, str] | None = None) -> RuleSet:
    """Check a rule set (module docstring) and resolve it into :class:`Rule` objects.

    Parameters
    ----------
    rules : a non-empty list of dicts from column to condition.
    columns : column -> kind (:data:`KINDS`) of the input; None checks everything that needs no
        input (the structure, metric names, thresholds, tokens), taking every column as a string
        unless its condition says otherwise (``within`` as a number, a vector metric as a
        vector, Jaccard without tokens as a set).

    Raises :class:`RuleError` naming the rule and column (``rules[1]['surname']``) and what to write.

    Example::

        >>> rs = check_rules([{"dob": "equal", "surname": ("levenshtein", 2)}, {"name": ("levenshtein", 1)}],
        ...                  {"dob": "date", "surname": "string", "name": "string"})
        >>> [r.describe() for r in rs.rules]
        ['dob equal and surname levenshtein <= 2', 'name levenshtein <= 1']
        >>> [m.field for m in rs.measures]
        ['dob', 'surname', 'name']
        >>> check_rules([{"dob": ("levenshtein", 1)}], {"dob": "date"})
        Traceback (most recent call last):
        ...
        driftjoin.linkage.rules.RuleError: rules[0]['dob'] compares dates with levenshtein, which needs strings; for dates use 'equal' or ('within', '2 days')
    """
    if isinstance(rules, Mapping):
        rules = [rules]
    if not isinstance(rules, (list, tuple)) or not rules:
        raise RuleError("rules", "must be a non-empty list of rules, each a dict from column to condition, e.g. "
                                 "[{'dob': 'equal', 'surname': ('levenshtein', 2)}]")
    if len(rules) > MAX_RULES:
        raise RuleError("rules", f"has {len(rules)} rules; at most {MAX_RULES} (a pair's rules are a 64-bit mask)")
    measures: list[Measure] = []
    out: list[Rule] = []
    used: dict[str, str] = {}
    for r, rule in enumerate(rules):
        if not isinstance(rule, Mapping):
            raise RuleError(f"rules[{r}]", f"is {rule!r}; a rule is a dict from column to condition, e.g. "
                                           "{'surname': ('levenshtein', 2)}")
        if not rule:
            raise RuleError(f"rules[{r}]", "has no condition: give at least one, e.g. {'surname': ('levenshtein', 1)}")
        conds: list[Condition] = []
        for column, spec in rule.items():
            name = f"rules[{r}][{column!r}]"
            if not isinstance(column, str) or not column:
                raise RuleError(name, "is not a column name")
            metric, threshold, tokens = _condition_parts(name, spec)
            if columns is not None:
                if column not in columns:
                    raise RuleError(name, f"names no column of the input; columns are {', '.join(sorted(columns))}")
                kind = columns[column]
            else:
                kind = _guess_kind(metric, threshold, tokens)
            if metric == EQUAL:
                if kind not in _EQUAL_KINDS:
                    raise RuleError(name, f"is 'equal' on {_KIND_TEXT[kind]}, which are not compared for equality; use "
                                          f"{_ADVICE[kind]}")
                cond = Condition(Measure(column, EQUAL, kind))
            else:
                cond = _measure(name, column, kind, metric, threshold, tokens)
            if columns is not None and column in used and used[column] != kind:
                raise RuleError(name, f"reads column {column!r} as {_KIND_TEXT[kind]} but another condition reads it as "
                                      f"{_KIND_TEXT[used[column]]}")
            used[column] = kind
            same = next((m for m in measures if m.key == cond.measure.key), None)
            if same is None:
                measures.append(cond.measure)
            else:
                cond = Condition(same, cond.threshold)
            conds.append(cond)
        out.append(Rule(r, tuple(conds)))
    counts: dict[str, int] = {}
    for m in measures:
        counts[m.column] = counts.get(m.column, 0) + 1
    for m in measures:
        object.__setattr__(m, "field", m.column if counts[m.column] == 1 else m.label)
    return RuleSet(tuple(out), tuple(measures), used)


def _guess_kind(metric: Any, threshold: Any, tokens: Any) -> str:
    if isinstance(metric, str):
        key = metric.strip().lower()
        if key in (WITHIN, "abs"):
            return "timestamp" if isinstance(threshold, str) else "number"
        if key == JACCARD:
            return "string" if tokens is not None else "set"
        if key not in (EQUAL, LEVENSHTEIN, "edit", "edit_distance"):
            return "vector"
        return "string"
    return "other"
