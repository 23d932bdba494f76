"""Link records and pairs: the fields a record carries through routing and state, and the output.

A link record is a :class:`driftjoin.metric.records.MetricRecords` copy (``id, side, time,
window, ghost``) whose ``value`` is a :class:`Fields`: the record's value of every column a
condition reads (in the form of :func:`driftjoin.linkage.rules.column_values`), its ingestion time,
and the version of the hot-key decision its window was routed under (:mod:`driftjoin.linkage.split`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from driftjoin.linkage.rules import RuleSet, column_values
from driftjoin.metric.records import MetricRecords


@dataclass
class Fields:
    """Per record: ``cols[column]`` (values of each column), ``ingest`` (seconds) and ``version``."""

    cols: dict[str, np.ndarray]
    ingest: np.ndarray
    version: np.ndarray

    def __len__(self) -> int:
        return len(self.ingest)

    @staticmethod
    def build(ruleset: RuleSet, raw: dict[str, Sequence], ingest: Sequence[float] | None = None,
              version: Sequence[int] | None = None) -> "Fields":
        """Fields from raw column values (lists or arrays; None for null)."""
        n = len(next(iter(raw.values()))) if raw else 0
        cols = {c: column_values(kind, raw[c]) for c, kind in ruleset.columns.items()}
        return Fields(cols, np.zeros(n) if ingest is None else np.asarray(ingest, np.float64),
                      np.zeros(n, np.int64) if version is None else np.asarray(version, np.int64))

    def take(self, idx: np.ndarray) -> "Fields":
        idx = np.asarray(idx, np.int64)
        return Fields({c: v[idx] for c, v in self.cols.items()}, self.ingest[idx], self.version[idx])

    @staticmethod
    def concat(parts: Sequence["Fields"]) -> "Fields":
        parts = [p for p in parts if len(p)] or list(parts[:1])
        return Fields({c: np.concatenate([p.cols[c] for p in parts]) for c in parts[0].cols},
                      np.concatenate([p.ingest for p in parts]), np.concatenate([p.version for p in parts]))


def link_records(ids: Sequence, fields_: Fields, times: Sequence[int] | None = None,
                 side: Sequence[int] | None = None) -> MetricRecords:
    """Records before window assignment (window 0, no ghosts); times in ticks, default 0."""
    return MetricRecords.of(np.asarray(ids), fields_, times, side)


@dataclass
class LinkPairs:
    """Matched pairs, oriented as the output (self-link: ``left_id < right_id``; two-sided: the
    left input's record first): the first rule, every rule as a bit mask, the distance of every
    measure (``distances[:, m]``, NaN where not usable), the window and the later ingestion time."""

    left_id: np.ndarray
    right_id: np.ndarray
    rule: np.ndarray
    rules: np.ndarray
    distances: np.ndarray
    window: np.ndarray
    ingest: np.ndarray

    def __len__(self) -> int:
        return len(self.left_id)

    @staticmethod
    def empty(n_measures: int, id_dtype=np.int64) -> "LinkPairs":
        return LinkPairs(np.zeros(0, id_dtype), np.zeros(0, id_dtype), np.zeros(0, np.int32), np.zeros(0, np.int64),
                         np.zeros((0, n_measures)), np.zeros(0, np.int64), np.zeros(0))

    @staticmethod
    def concat(parts: Sequence["LinkPairs"], n_measures: int, id_dtype=np.int64) -> "LinkPairs":
        parts = [p for p in parts if len(p)]
        if not parts:
            return LinkPairs.empty(n_measures, id_dtype)
        return LinkPairs(*(np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(LinkPairs)))

    def rule_lists(self) -> list[list[int]]:
        """``rules`` as lists of rule indexes (ascending)."""
        return [[r for r in range(64) if m >> r & 1] for m in self.rules.tolist()]

    def tuples(self) -> list[tuple]:
        """``(left_id, right_id, window, rule)`` per pair (tests, benchmarks)."""
        return list(zip(self.left_id.tolist(), self.right_id.tolist(), self.window.tolist(), self.rule.tolist()))
