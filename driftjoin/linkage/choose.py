"""Each rule's driving condition, chosen from a sample by counting work, and the hot keys of the sample.

A rule can be driven by any of its non-``equal`` conditions (:mod:`driftjoin.linkage.drivers`) or,
if it has ``equal`` conditions, by its block alone. As ``algorithm="auto"`` does for
``similarity_join`` (:mod:`driftjoin.metric.choose`), the choice counts instead of timing: on
the sample, each candidate driver's entries (work linear in the records) and candidate pairs
(each verified on the values: work quadratic at a fixed density), scaled to ``expected``
records per window with ``f = expected / len(sample)``::

    work = ENTRY * entries * f + DISTANCE * candidates * f^2

and the least work wins (ties: the order of the conditions in the rule, the block first). The
choice is recorded with the estimates. Without a sample (a stream without ``sample=``) a rule
is driven by its first condition that needs no sample (``levenshtein``, ``jaccard``, ``within``;
prefix filtering then orders tokens by hash), inside its block if it has equal fields, and by
its block alone only when it has no such condition: the keys of a condition inside a block give
a subset of the block's candidates for a few more entries per record (linear), while a block
alone pairs all of its records (quadratic), and a hot block (one postcode holding 15% of the
records) is what streams have. ``drive`` overrides the choice per rule: ``"block"`` or a column
of the rule.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from driftjoin.linkage.drivers import BlockDriver, Driver, PassJoinDriver, PrefixDriver, RangeDriver, S3JDriver, driver_kinds
from driftjoin.linkage.plan import LinkCore, lane_allowed
from driftjoin.linkage.records import Fields, link_records
from driftjoin.linkage.rules import Condition, Rule, RuleError, RuleSet
from driftjoin.linkage.split import MIN_RECORDS, decide
from driftjoin.metric.choose import DISTANCE, ENTRY
from driftjoin.metric.store import unordered
from driftjoin.metric.tokens import TokenOrder
from driftjoin.windows import Windowing

#: Space partitions of an S3J driver per worker.
S3J_PARTITIONS_PER_WORKER = 2
#: Sample rows the drivers' work is counted on (the token order and centroids use the whole sample).
ESTIMATE_ROWS = 2000


@dataclass(frozen=True)
class DriverEstimate:
    """What a driver did on the sample and its estimated work."""

    rule: int
    driver: str
    column: str | None
    entries: int
    candidates: int
    work: float


def _make(kind: str, cond: Condition | None, sample: Fields | None, partitions: int, seed: int) -> Driver:
    if kind == "block":
        return BlockDriver(None)
    if kind == "passjoin":
        return PassJoinDriver(cond)
    if kind == "range":
        return RangeDriver(cond)
    if kind == "prefix":
        if sample is None:
            return PrefixDriver(cond, TokenOrder())
        v = sample.cols[cond.column]
        ok = cond.measure.usable(v)
        return PrefixDriver(cond, TokenOrder.from_sample(cond.measure.token_lists(v[ok])))
    v = sample.cols[cond.column]
    ok = cond.measure.usable(v)
    return S3JDriver.from_sample(cond, list(v[ok]), partitions, seed)


def _options(rule: Rule, sample: Fields | None) -> list[tuple[str, Condition | None]]:
    """The drivers a rule can use: S3J only where the sample holds usable values (its centroids)."""
    out: list[tuple[str, Condition | None]] = [("block", None)] if rule.equal else []
    for c in rule.fuzzy:
        kind = driver_kinds(c)
        if kind != "s3j" or (sample is not None and c.measure.usable(sample.cols[c.column]).any()):
            out.append((kind, c))
    return out


def _count(core: LinkCore, r: int, sample: Fields) -> tuple[int, int, dict[int, int]]:
    """Entries, candidate pairs and records per group of rule ``r`` on the sample (one window)."""
    batch = link_records(np.arange(len(sample)), sample)
    e, _ = core.entries(batch, r)
    allowed = unordered(lane_allowed(core.drivers[r], True, False))
    key = e.group * 4 + e.cls  # groups are below 2**61
    uk, cnt = np.unique(key, return_counts=True)
    _, at = np.unique(uk // 4, return_inverse=True)
    per = np.zeros((int(at.max(initial=-1)) + 1, 4), np.int64)  # entries per group and class
    per[at, uk % 4] = cnt
    pairs = np.unique(np.stack([e.group, e.rec], axis=1), axis=0) if len(e.rec) else np.zeros((0, 2), np.int64)
    ug, n_recs = np.unique(pairs[:, 0], return_counts=True)
    sizes = dict(zip(ug.tolist(), n_recs.tolist()))
    cand = 0
    for a, b in allowed:
        na, nb = per[:, a], per[:, b]
        cand += int((na * (na - 1) // 2).sum()) if a == b else int((na * nb).sum())
    return len(e.rec), cand, sizes


def build_core(ruleset: RuleSet, *, n_workers: int, self_join: bool, windows: Windowing, sample: Fields | None = None,
               expected: int | Callable[[], int] | None = None, drive: list | None = None, seed: int = 0,
               min_heavy: int = MIN_RECORDS) -> tuple[LinkCore, list[DriverEstimate]]:
    """The :class:`LinkCore` of a rule set: each rule's driver (module docstring) and the hot keys of
    the sample as decision version 0 (:func:`driftjoin.linkage.split.decide`).

    Parameters
    ----------
    ruleset : the checked rules.
    n_workers : the workers.
    self_join, windows : the link's shape.
    sample : fields of sample records (None: no sample).
    expected : records per window the estimates are scaled to (default: the sample's size), or a
        function that returns it, called once after the sample's counts (a caller can count its
        input meanwhile).
    drive : per rule, ``None`` (choose), ``"block"`` or a column of the rule.
    seed : S3J's centroid draw.
    min_heavy : the fewest records of a heavy group.

    Example::

        >>> from driftjoin.linkage.rules import check_rules
        >>> rs = check_rules([{"zip": "equal", "name": ("levenshtein", 1)}], {"zip": "string", "name": "string"})
        >>> core, est = build_core(rs, n_workers=2, self_join=True, windows=Windowing.unbounded(),
        ...                        sample=Fields.build(rs, {"zip": ["1", "2"] * 50, "name": [f"n{i}" for i in range(100)]}))
        >>> core.drivers[0].name
        'block'
    """
    drive = list(drive) if drive is not None else [None] * len(ruleset.rules)
    if len(drive) != len(ruleset.rules):
        raise RuleError("drive", f"has {len(drive)} entries for {len(ruleset.rules)} rules: give one per rule (None "
                                 "to choose)")
    partitions = max(1, S3J_PARTITIONS_PER_WORKER * n_workers)
    has = sample is not None and len(sample) > 0
    est_sample = sample.take(np.arange(min(ESTIMATE_ROWS, len(sample)))) if has else None
    # First each option's counts on the sample, then the scale: ``expected`` may still be counted
    counted: list[list[tuple[Driver, Condition | None, int, int]]] = []
    for rule, forced in zip(ruleset.rules, drive):
        options = _options(rule, sample if has else None)
        if not has and forced is None and len(options) > 1 and options[0][0] == "block":
            options = options[1:]  # the module docstring: a condition inside the block, not the block alone
        if forced is not None:
            chosen = [o for o in options if (forced == "block" and o[0] == "block")
                      or (o[1] is not None and o[1].column == forced)]
            if not chosen:
                names = ", ".join(repr("block" if c is None else c.column) for _, c in options)
                raise RuleError(f"drive[{rule.index}]", f"is {forced!r}; rule {rule.index} can be driven by {names}")
            options = chosen
        if not options:
            col = rule.fuzzy[0].column
            raise RuleError(f"rules[{rule.index}][{col!r}]",
                            "can only drive its rule through S3J's space partitioning (a vector or user metric with no "
                            "equal field beside it), whose centroids are drawn from a sample: give sample= (a static "
                            "DataFrame or a list of rows) with values in this column, or add an equal condition to the "
                            "rule")
        if not (has and len(options) > 1):  # nothing to choose: the first option, no estimate
            counted.append([(_make(*options[0], sample, partitions, seed), options[0][1], 0, 0)])
            continue
        row = []
        for kind, cond in options:
            drv = _make(kind, cond, sample, partitions, seed)
            probe = LinkCore(RuleSet((rule,), ruleset.measures, ruleset.columns), (drv,), n_workers, True, windows)
            entries, cand, _ = _count(probe, 0, est_sample)
            row.append((drv, cond, entries, cand))
        counted.append(row)
    total = expected() if callable(expected) else expected
    f = (total or (len(sample) if has else 1)) / max(len(est_sample) if has else 1, 1)
    drivers: list[Driver] = []
    estimates: list[DriverEstimate] = []
    for rule, row in zip(ruleset.rules, counted):
        if len(row) == 1:
            drivers.append(row[0][0])
            continue
        mine = [DriverEstimate(rule.index, drv.name, None if cond is None else cond.column, entries, cand,
                               ENTRY * entries * f + DISTANCE * cand * f * f) for drv, cond, entries, cand in row]
        estimates += mine
        drivers.append(row[min(range(len(row)), key=lambda k: mine[k].work)][0])  # ties: the first option
    core = LinkCore(ruleset, tuple(drivers), n_workers, self_join, windows)
    if has and n_workers > 1:
        counts: dict[tuple[int, int], float] = {}
        for r in range(len(ruleset.rules)):
            _, _, sizes = _count(core, r, est_sample)
            for g, n in sizes.items():
                counts[(r, g)] = n * f
        core.tables[0] = decide(counts, n_workers, min_records=min_heavy)
    return core, estimates


def estimates_as_dicts(estimates: list[DriverEstimate]) -> list[dict[str, Any]]:
    return [asdict(e) for e in estimates]
