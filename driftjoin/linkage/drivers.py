"""How a rule finds its pairs: the block of its equal fields and the keys of its driving condition.

A rule is a join partitioned by its **block**, the values of its ``equal`` conditions: two
records can satisfy the rule only if their blocks are equal, so each record carries a 64-bit
hash of its block (:func:`block_hash`; a record with a null equal field takes no part in the
rule). Inside a block the rule is *driven* by one of its other conditions, whose **driver** gives
every record a few *keys* ``(key, class)`` such that

    (completeness) two records that satisfy the driving condition share a key under a pair of
    classes the driver allows (:attr:`Driver.allowed`).

Records are then stored and paired by ``group = mix(rule, block hash, key)``
(:func:`groups`); every candidate pair is verified on the values (the block's equality included,
so a hash collision adds candidates, never pairs), and :mod:`driftjoin.linkage.worker` keeps each
pair once. The drivers, each built on a strategy of :mod:`driftjoin.metric`:

- :class:`BlockDriver` (no driving condition; a rule of equal fields only, or a block small
  enough that pairing it whole is cheapest): one key; every pair of the block is a candidate.
- :class:`PassJoinDriver` (``levenshtein``, ``k`` edits): PassJoin's segments and selected
  substrings (:func:`driftjoin.metric.passjoin.entries`): a string indexes its ``k + 1``
  segments (class SEG) and probes the multi-match-aware substrings of the shorter-or-equal
  lengths (class SUB); by pigeonhole a pair within ``k`` edits shares a ``(length, index,
  text)`` key as SEG x SUB.
- :class:`PrefixDriver` (``jaccard``, ``t``): prefix filtering
  (:func:`driftjoin.metric.prefix.prefix_entries` over the global token order of a sample,
  :mod:`driftjoin.metric.tokens`): a set of ``n`` tokens keys on the first ``n - o(n) + 1``
  codes, ``o(n) = ceil((1 - t) n)`` the least overlap any partner within ``t`` needs (in
  integers, with ``t`` the number the threshold stands for: :class:`driftjoin.metric.prefix.JaccardBounds`),
  so two sets within ``t`` share a prefix code.
- :class:`RangeDriver` (``within``, ``d``): buckets of width ``w = 2d``; a value keys on its
  bucket ``b`` (HOME) and on ``b + 1`` (GHOST), pairs meeting as HOME x HOME or HOME x GHOST.
  For ``a <= b`` with ``b - a <= d``: dates and timestamps are integers (days, microseconds;
  the threshold floored to an integer, exact for integer differences) and ``floor(x / w)``
  is exact, so the buckets differ by 0 or 1. Numbers: ``fl(x / w)`` is the exact quotient
  rounded once; while ``|x / w| < 2^50`` its error is below ``1/8``, and the exact quotients
  differ by at most ``1/2``, so the rounded ones by less than 1 and their floors by 0 or 1;
  buckets are clamped to ``[-2^50, 2^50]``, which keeps neighbours neighbours. ``d = 0`` keys
  on the value itself (``-0.0`` as ``0.0``).
- :class:`S3JDriver` (a vector metric or a user metric, ``t``): S3J's space partitioning
  (:meth:`driftjoin.metric.s3j.S3JStrategy.route`, centroids drawn from a sample): a record
  keys on its closest centroid (INNER) and, as OUTER, on every other centroid within
  ``d(r, c_inner) + 2t`` that the parity rule allows; by the triangle inequality a pair within
  ``t`` meets as INNER x INNER or INNER x OUTER.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

import numpy as np

from driftjoin.linkage.rules import JACCARD, LEVENSHTEIN, WITHIN, Condition
from driftjoin.metric.passjoin import entries as passjoin_entries
from driftjoin.metric.prefix import JaccardBounds, code_group, prefix_entries
from driftjoin.metric.records import MetricRecords, object_array
from driftjoin.metric.s3j import S3JStrategy, choose_centroids
from driftjoin.metric.spaces import JaccardSpace
from driftjoin.metric.tokens import TokenOrder
from driftjoin.s3j.workset import INNER
from driftjoin.windows import Windowing

MASK61 = np.uint64((1 << 61) - 1)
#: Largest bucket of a :class:`RangeDriver` on numbers (see the module docstring).
BUCKET_LIMIT = float(1 << 50)


def _splitmix(z: np.ndarray) -> np.ndarray:
    z = z.astype(np.uint64)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def mix(*parts: np.ndarray | int) -> np.ndarray:
    """A 61-bit group from 64-bit parts (a chained splitmix64; order matters)."""
    with np.errstate(over="ignore"):
        h = np.uint64(0x9E3779B97F4A7C15)
        for p in parts:
            h = _splitmix(np.asarray(p).astype(np.uint64) ^ (h * np.uint64(0x2545F4914F6CDD1D)))
    return (h & MASK61).astype(np.int64)


def hash_values(kind: str, values: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each value of a column (equal values, equal hashes; any process)."""
    import pandas as pd

    if kind == "number":
        values = values + 0.0  # -0.0 == 0.0
    if values.dtype == object:
        values = object_array([v if not isinstance(v, np.ndarray) else tuple(v.tolist()) for v in values])
    return pd.util.hash_array(values, categorize=False).astype(np.uint64)


@dataclass(frozen=True)
class Keys:
    """Keys of a batch under one driver: record ``rec[k]`` has key ``key[k]`` of class ``cls[k]``."""

    rec: np.ndarray
    key: np.ndarray
    cls: np.ndarray

    @staticmethod
    def empty() -> "Keys":
        z = np.zeros(0, np.int64)
        return Keys(z, z, z)


class Driver(ABC):
    """The keys of one condition (module docstring)."""

    name: str = ""
    #: class pairs that may pair (classes are 0 or 1)
    allowed: tuple[tuple[int, int], ...] = ((0, 0),)

    def __init__(self, condition: Condition | None) -> None:
        self.condition = condition

    @abstractmethod
    def keys(self, values: np.ndarray, rows: np.ndarray) -> Keys:
        """Keys of the values ``values[rows]`` (usable ones), ``rec`` in terms of ``rows``' entries."""

    def settings(self) -> dict[str, Any]:
        return {"driver": self.name, "column": None if self.condition is None else self.condition.column}


class BlockDriver(Driver):
    """No driving condition: every pair of a block is a candidate."""

    name = "block"

    def keys(self, values: np.ndarray, rows: np.ndarray) -> Keys:
        rows = np.asarray(rows, np.int64)
        return Keys(rows, np.zeros(len(rows), np.int64), np.zeros(len(rows), np.int64))


class PassJoinDriver(Driver):
    """PassJoin's segments (SEG, class 0) and selected substrings (SUB, class 1)."""

    name = "passjoin"
    allowed = ((0, 1),)

    def keys(self, values: np.ndarray, rows: np.ndarray) -> Keys:
        rows = np.asarray(rows, np.int64)
        if len(rows) == 0:
            return Keys.empty()
        e = passjoin_entries(object_array(list(values[rows])), int(self.condition.threshold))
        return Keys(rows[e.rec], e.group, e.cls.astype(np.int64))


class PrefixDriver(Driver):
    """Prefix filtering on the global token order ``order`` (module docstring)."""

    name = "prefix"

    def __init__(self, condition: Condition, order: TokenOrder) -> None:
        super().__init__(condition)
        self.order = order
        self.bounds = JaccardBounds(condition.threshold)

    def keys(self, values: np.ndarray, rows: np.ndarray) -> Keys:
        rows = np.asarray(rows, np.int64)
        if len(rows) == 0:
            return Keys.empty()
        sets = JaccardSpace(self.order).prepare(self.condition.measure.token_lists(values[rows]))
        rec, _, code = prefix_entries(sets, self.bounds)
        return Keys(rows[rec], code_group(code), np.zeros(len(rec), np.int64))

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "token_order": len(self.order)}


class RangeDriver(Driver):
    """Buckets of width ``2d`` for ``|a - b| <= d`` (module docstring): HOME (0) and GHOST (1)."""

    name = "range"
    allowed = ((0, 0), (0, 1))

    def __init__(self, condition: Condition) -> None:
        super().__init__(condition)
        kind = condition.measure.kind
        d = condition.threshold
        self.integer = kind in ("date", "timestamp")
        self.d = int(np.floor(d)) if self.integer else float(d)

    def keys(self, values: np.ndarray, rows: np.ndarray) -> Keys:
        rows = np.asarray(rows, np.int64)
        v = values[rows]
        if self.d == 0:
            key = (v.astype(np.int64) if self.integer else _float_key(v))
            return Keys(rows, key, np.zeros(len(rows), np.int64))
        if self.integer:
            b = v.astype(np.int64) // (2 * self.d)
        else:
            with np.errstate(over="ignore", invalid="ignore"):
                b = np.clip(np.floor(v / (2.0 * self.d)), -BUCKET_LIMIT, BUCKET_LIMIT).astype(np.int64)
        n = len(rows)
        return Keys(np.concatenate([rows, rows]), np.concatenate([b, b + 1]),
                    np.concatenate([np.zeros(n, np.int64), np.ones(n, np.int64)]))


def _float_key(v: np.ndarray) -> np.ndarray:
    return (v + 0.0).view(np.int64)


class S3JDriver(Driver):
    """S3J's space partitioning over ``centroids`` (values of a sample): INNER 0, OUTER 1."""

    name = "s3j"
    allowed = ((0, 0), (0, 1))

    def __init__(self, condition: Condition, centroids: Any) -> None:
        super().__init__(condition)
        space = condition.measure.space
        self.strategy = S3JStrategy(space, condition.threshold, centroids, self_join=True,
                                    windows=Windowing.unbounded())

    @staticmethod
    def from_sample(condition: Condition, sample: list, partitions: int, seed: int = 0) -> "S3JDriver":
        space = condition.measure.space
        prepared = space.prepare(sample)
        return S3JDriver(condition, choose_centroids(space, prepared, partitions, seed))

    def keys(self, values: np.ndarray, rows: np.ndarray) -> Keys:
        rows = np.asarray(rows, np.int64)
        if len(rows) == 0:
            return Keys.empty()
        space = self.condition.measure.space
        batch = MetricRecords.of(np.arange(len(rows)), space.prepare(list(values[rows])))
        r = self.strategy.route(batch)
        return Keys(rows[r.row], r.worker.astype(np.int64), (r.role != INNER).astype(np.int64))

    def settings(self) -> dict[str, Any]:
        return {**super().settings(), "partitions": self.strategy.n_workers}


def driver_kinds(condition: Condition) -> str:
    """The driver a condition would use (``"passjoin"``, ``"prefix"``, ``"range"``, ``"s3j"``)."""
    m = condition.metric
    if m == LEVENSHTEIN:
        return "passjoin"
    if m == JACCARD:
        return "prefix"
    if m == WITHIN:
        return "range"
    return "s3j"


def block_hash(n: int, kinds: list[str], columns: list[np.ndarray], usable: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The block of each of ``n`` records under a rule's equal columns: ``(hash, ok)``, ``ok``
    False where an equal field is null (the record takes no part in the rule)."""
    ok = np.ones(n, bool)
    h = np.zeros(n, np.uint64)
    for kind, v, u in zip(kinds, columns, usable):
        ok &= u
        with np.errstate(over="ignore"):
            h = _splitmix(h * np.uint64(31) ^ hash_values(kind, v))
    return h, ok
