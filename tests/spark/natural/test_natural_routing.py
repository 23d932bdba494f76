"""natural_join's parallel routing without Spark: routers, joiners and the control plane driven
batch by batch, with the decisions published at any moment (before a batch, between two of its
tasks, several batches late, the first fit before its batch commits), tasks that read older decisions than their neighbours, replayed
batches, restarts with a new lineage and parallelism 1, 2, 4 and 8, against a brute-force
natural join per window (hypothesis over the data, the micro-batch and task boundaries and the
decision timing, one or two input streams).

The harness (:class:`driftjoin.spark.natural.local.LocalRun`) plays Spark's part: each batch's
rows are cut into router tasks, each task reads one published decision (any version between
the newest a task of an earlier batch read and the newest when it runs: on Spark every task of a
batch reads the one bound to the batch), the routed rows are shuffled and
grouped by joiner key, every joiner runs on a copy of its state and writes its statistics, and
only then is the batch committed and may the controller read it.
"""

from __future__ import annotations

import itertools
import json
import math
import pickle
import random
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.schemafree.document import flatten
from driftjoin.schemafree.generator import nobench_documents, server_log_documents
from driftjoin.spark.natural.local import LocalRun
from driftjoin.spark.natural.plan import JOINER_OP, NaturalPlan
from driftjoin.spark.natural.table import decisions_name, read_fit
from driftjoin.spark.runtime.decisions import read_version, versions
from driftjoin.spark.runtime.stats import read_stats


def make_plan(root: str, lineage: str, m: int, kind: str, partitioner: str = "ag", initial: bytes | None = None,
              two: bool = False) -> NaturalPlan:
    return NaturalPlan(partitions=m, partitioner=partitioner, local_join="fptree", delta=2, theta=0.0, creators=1,
                       expand=True, window_kind=kind, size=40 if kind == "count" else None,
                       length=10.0 if kind == "time" else None, time_attribute=None, watermark=2.0 if kind == "time" else 0.0,
                       two_streams=two, merged=False, sample_size=30, seed=0, metrics_dir=None,
                       require_time=kind == "time", initial=initial, control=root, lineage=lineage)


def brute_force(rows: list[dict], window_of: dict[int, int], two: bool = False) -> set[tuple[int, int, int]]:
    """Joining pairs per window: ``(smaller id, larger id, window)``; two streams: only pairs
    across the inputs, ``(id from side 0, id from side 1, window)``."""
    flat = {r["id"]: flatten(json.loads(r["doc"])) for r in rows}
    side = {r["id"]: r.get("side", 0) for r in rows}
    by_window: dict[int, list[int]] = {}
    for i in sorted(window_of):
        by_window.setdefault(window_of[i], []).append(i)
    out = set()
    for w, members in by_window.items():
        for a, b in itertools.combinations(members, 2):
            if two and side[a] == side[b]:
                continue
            shared = flat[a].keys() & flat[b].keys()
            if shared and all(flat[a][k] == flat[b][k] for k in shared):
                out.add((b, a, w) if two and side[a] == 1 else (a, b, w))
    return out


def expected_windows(plan: NaturalPlan, batches: list[list[dict]]) -> dict[int, int]:
    """Window of every document that is not late: count windows number documents batch after
    batch (by time, then id, inside a batch); time windows drop documents of windows the clock closed."""
    out: dict[int, int] = {}
    count = 0
    seen = -math.inf
    for rows in batches:
        if plan.window_kind == "count":
            for r in sorted(rows, key=lambda r: (r.get("t") is None, r.get("t") or 0.0, r["id"])):
                out[r["id"]] = count // plan.size  # type: ignore[operator]
                count += 1
            continue
        first = math.floor((seen - plan.watermark) / plan.length) if math.isfinite(seen) else None
        for r in rows:
            w = math.floor(r["t"] / plan.length)  # type: ignore[operator]
            if first is None or w >= first:
                out[r["id"]] = w
        seen = max([seen, *(r["t"] for r in rows)])
    return out


class Harness(LocalRun):
    """A :class:`LocalRun` whose tasks read a random published decision: any version from the
    newest any task of an earlier batch of the lineage read to the newest when the task runs.
    On Spark every task of a batch reads the version bound to it (at least every earlier
    batch's, at most the newest); tasks that read newest-when-they-start are covered too."""

    def __init__(self, plan: NaturalPlan, rng: random.Random) -> None:
        super().__init__(plan)
        self.rng = rng
        self.pairs: list[tuple[int, int, int]] = []
        self.stale_tasks = 0
        self.read_floor: int | None = None  # the newest version a task of an earlier batch read

    def restart(self, plan: NaturalPlan) -> None:
        super().restart(plan)
        self.read_floor = None  # a new lineage: its own decisions

    def _version(self, low: int | None, read: list[int]) -> int | None:
        """A version to read; -1: none (a task that ran before the lineage's first decision reached it)."""
        name = decisions_name(self.plan.lineage)
        options = [v for v in versions(self.plan.control, name) if low is None or v >= low]
        if not options:
            return None
        if low is None:  # no earlier task read a decision: a task may still read none
            options.append(-1)
        version = self.rng.choice(options)
        self.stale_tasks += version < options[-1]
        read.append(version)
        return version

    def run_batch(self, rows: list[dict], cuts: int, publish_at: set[int], replay: bool, early: bool = False) -> None:
        low, read = self.read_floor, []  # no task reads below what a task of an earlier batch read
        order = rows[:]
        self.rng.shuffle(order)
        tasks = [order[i::cuts] for i in range(cuts)]
        pairs, states, _ = self.attempt(tasks, lambda t: self._version(low, read),
                                        lambda t: self.decide() if t in publish_at else None, self.rng.randrange(10**6))
        if early:  # the first fit from joiner 0's record of this batch, before it commits (or is replayed)
            self.controller.early_fit()
        if replay:  # the batch fails after the joiners ran: rerun from the old state, rows in another order
            again, states, _ = self.attempt([t[::-1] for t in reversed(tasks)], lambda t: self._version(low, read), None,
                                            self.rng.randrange(10**6))
            assert Counter(again) == Counter(pairs)
        self.pairs += pairs
        self.commit(states)
        if any(v >= 0 for v in read):
            self.read_floor = max(v for v in read if v >= 0)


@st.composite
def scenario(draw):
    m = draw(st.sampled_from([1, 2, 4, 8]), label="parallelism")
    kind = draw(st.sampled_from(["count", "time"]), label="window")
    n = draw(st.integers(20, 120), label="documents")
    attrs = st.dictionaries(st.sampled_from(["a", "b", "c", "d", "e"]), st.integers(0, 3), min_size=1, max_size=3)
    docs = [draw(attrs) for _ in range(n)]
    if draw(st.booleans(), label="common attributes"):  # what value partitioning routes by
        lacking = draw(st.sets(st.integers(0, n - 1), max_size=3))
        for i, doc in enumerate(docs):
            doc["t"] = draw(st.integers(0, 9))
            doc["s"] = None if i in lacking else draw(st.integers(0, 3))
    for i in draw(st.sets(st.integers(0, n - 1), max_size=2), label="empty documents"):
        docs[i] = {}  # joins nothing, under any fit or none
    times = sorted(draw(st.lists(st.integers(0, 600), min_size=n, max_size=n)))
    jitter = [draw(st.integers(-40, 0)) if draw(st.booleans()) else 0 for _ in range(n)]
    two = draw(st.booleans(), label="two streams")
    rows = [{"id": i, "doc": json.dumps(docs[i]), "t": max(times[i] + jitter[i], 0) / 10,
             "side": draw(st.integers(0, 1)) if two else 0} for i in range(n)]
    cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=6), label="batch ends"))
    batches = [rows[a:b] for a, b in zip([0, *cuts], [*cuts, n])]
    plan_of_batch = [
        {"tasks": draw(st.integers(1, 4)), "publish_at": draw(st.sets(st.integers(0, 3), max_size=2)),
         "after": draw(st.booleans()), "replay": draw(st.booleans()), "early": draw(st.booleans())}
        for _ in batches
    ]
    restart = draw(st.one_of(st.none(), st.integers(1, max(len(batches) - 1, 1))), label="restart before batch")
    return (m, kind, batches, plan_of_batch, restart, draw(st.sampled_from(["ag", "sc", "ds", "value"])),
            draw(st.booleans()), two)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(case=scenario(), seed=st.integers(0, 2**16))
def test_parallel_routing_is_exact_whenever_decisions_land(tmp_path_factory, case, seed):
    m, kind, batches, steps, restart, partitioner, with_sample, two = case
    root = str(tmp_path_factory.mktemp("control"))
    initial = None
    if with_sample:  # sample=: a fit before the start
        from driftjoin.schemafree.document import Document

        fitted = make_plan(root, "L0", m, kind, partitioner).new_partitioner()
        fitted.fit([Document(i, flatten(json.loads(r["doc"]))) for i, r in enumerate(batches[0][:30])])
        initial = pickle.dumps(fitted)
    harness = Harness(make_plan(root, "L1", m, kind, partitioner, initial, two), random.Random(seed))
    for b, (rows, step) in enumerate(zip(batches, steps)):
        if b == restart:
            harness.restart(make_plan(root, "L2", m, kind, partitioner, initial, two))
        harness.run_batch(rows, step["tasks"], step["publish_at"], step["replay"], step["early"])
        if step["after"]:  # the batch is committed; the controller may get to it now or later
            harness.decide()
    window_of = expected_windows(harness.plan, batches)
    expected = brute_force([r for rows in batches for r in rows], window_of, two)
    got = [(a, b, w) if two else (min(a, b), max(a, b), w) for a, b, w in harness.pairs]
    assert len(got) == len(set(got))
    assert set(got) == expected


@pytest.mark.parametrize("partitioner", ["ag", "value"])
@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_parallel_routing_nobench_with_refits_and_stale_tasks(tmp_path, m, partitioner):
    """Many windows, refits at every window boundary (theta 0), delta keys; each batch's decision
    is published while the next batch runs (after its first task), so tasks of one batch route
    by different decisions: exact, and the decisions refit and publish delta keys (value fits:
    route by values, with no delta keys)."""
    raw = nobench_documents(480, seed=5, thousandth=6, optional=0.5, sparse_blocks=4)
    rows = [{"id": i, "doc": json.dumps(raw[i])} for i in range(480)]
    plan = make_plan(str(tmp_path), "L1", m, "count", partitioner)
    harness = Harness(plan, random.Random(m))
    batches = [rows[i:i + 60] for i in range(0, 480, 60)]
    for b, batch in enumerate(batches):
        harness.run_batch(batch, 3, {1}, replay=b == 3)
    expected = brute_force(rows, expected_windows(plan, batches))
    got = [(min(a, b), max(a, b), w) for a, b, w in harness.pairs]
    assert len(got) == len(set(got)) and set(got) == expected
    decisions = versions(str(tmp_path), decisions_name("L1"))
    assert len(decisions) >= 4
    last = read_version(str(tmp_path), decisions_name("L1"), decisions[-1])
    if m > 1:  # one joiner never degrades: no refit
        assert last["newest"] >= 2  # refitted after the first fit
        assert harness.stale_tasks > 0
    if m > 1 and partitioner == "ag":
        assert any(last["additions"].values())  # delta keys published to the routers
    if partitioner == "value":
        kept: Counter[int] = Counter()  # window -> documents kept over the joiners
        fits: dict[int, str] = {}
        for rec in read_stats(str(tmp_path), JOINER_OP):
            for w, (n, *_rest) in rec["windows"].items():
                kept[int(w)] += n
            fits.update({int(w): k for w, k in rec.get("table", {}).items()})
        valued = [w for w, k in fits.items() if k != "0" and read_fit(str(tmp_path), k).value is not None]
        assert all(kept[w] == 40 for w in valued)  # each document at one joiner (all carry S)
        # a 30-document sample of 12 (bool, thousandth) pairs splits evenly enough for 2 joiners
        # only; with more the fits are AG
        assert valued or m >= 4
        assert not any(last["additions"].get(fits[w]) for w in valued)  # a value fit has no delta keys


@pytest.mark.parametrize("kind", ["count", "time"])
@pytest.mark.parametrize("early", [True, False])
def test_first_fit_serves_the_third_window_when_decisions_land_a_batch_late(tmp_path, kind, early):
    """Spark's case: windows of one micro-batch, routers read the decision their batch is bound
    to (the plan key binds the newest during the batch before), and the controller hears of a
    batch's commit only after the next batch's plan key bound (the listener is asynchronous).
    Fits made on commit then serve window 3: windows 0-2 broadcast. The first fit made ahead of
    the commit (:meth:`~driftjoin.spark.natural.control.NaturalPartitionController.early_fit`,
    what the controller's watch does on Spark) lands after batch 0's plan key bound and serves
    window 2; both exact."""
    raw = nobench_documents(240, seed=7, thousandth=6, optional=0.5, sparse_blocks=4)
    rows = [{"id": i, "doc": json.dumps(raw[i]), "t": i / 4} for i in range(240)]  # 40 documents per 10 s
    plan = make_plan(str(tmp_path), "L1", 2, kind, "value")
    run = LocalRun(plan)
    batches = [rows[i:i + 40] for i in range(0, 240, 40)]
    pairs = []
    for batch in batches:
        found, states, _ = run.attempt([batch[0::2], batch[1::2]])
        if early:
            run.controller.early_fit()
        run.commit(states)
        pairs += found
        if run.batch >= 2:  # batch b's commit is heard after batch b + 1's routers read the table
            run.controller.step(run.batch - 2)
    assert sorted((min(a, b), max(a, b), w) for a, b, w in pairs) == sorted(brute_force(rows, expected_windows(plan, batches)))
    opened = {r["batch"]: r["opening"] for r in read_stats(str(tmp_path), JOINER_OP) if r["joiner"] == 0}
    fitted = [b for b in sorted(opened) if opened[b] != "0"]  # window b opens in batch b
    assert fitted == ([2, 3, 4, 5] if early else [3, 4, 5])


def test_a_fitted_task_never_broadcasts_so_each_document_reaches_one_joiner(tmp_path):
    """The case of the 0.70x run (docs/benchmarks.md, natural_join scale-out): the server log at 2
    joiners, value partitioning without ``sample=``, event-time windows of one micro-batch, the
    first fit made ahead of the commit (after batch 0's plan key bound batch 1's decision) and
    every later decision landing after the next batch's plan key bound. Windows 0 and 1 are
    broadcast (batch 1's tasks read no decision); every later window is routed by the value fit
    alone, although window 2 is read with the floor 0: its documents (all carry ``S``) reach
    one joiner each and none is dropped. The broadcast documents of windows 0 and 1 trigger no
    refit (they say nothing about the fit, and window 1 had no fit only because its batch was
    bound before the first fit landed). Exact."""
    docs = server_log_documents(7500, seed=3, timestamp=False)
    rows = [{"id": i, "doc": json.dumps(d), "t": i / 100} for i, d in enumerate(docs)]  # 1,500 per 15 s window
    plan = make_plan(str(tmp_path), "L1", 2, "time", "value")
    plan = NaturalPlan(**{**plan.__dict__, "length": 15.0, "watermark": 0.0, "theta": 0.2, "sample_size": 2000})
    run = LocalRun(plan)
    batches = [rows[i:i + 1500] for i in range(0, 7500, 1500)]
    pairs, stats = [], []
    for b, batch in enumerate(batches):
        if b >= 2:  # batch b - 2's commit is heard after batch b's routers read the table
            run.controller.step(b - 2)
        found, states, batch_stats = run.attempt([batch[0::2], batch[1::2]])
        if b == 0:
            run.controller.early_fit()
        run.commit(states)
        pairs += found
        stats += batch_stats
    assert sorted((min(a, b), max(a, b), w) for a, b, w in pairs) == sorted(brute_force(rows, expected_windows(plan, batches)))
    assert read_fit(str(tmp_path), "L1.1").value is not None
    assert [e["fit"] for e in run.controller.decisions] == ["L1.1"]  # no refit on broadcast documents
    received: Counter[int] = Counter()
    dropped: Counter[int] = Counter()
    for rec in stats:
        for w, (kept, _owned, _to_all, lost, _unfitted) in rec["windows"].items():
            received[int(w)] += kept
            dropped[int(w)] += lost
    assert received == {0: 3000, 1: 3000, 2: 1500, 3: 1500, 4: 1500}
    assert not any(dropped.values())


def test_candidate_fits_with_the_same_values_route_a_document_to_one_joiner(tmp_path):
    """Two value fits with the same ``S`` and joiner count route alike (the mask is a function of
    ``S``, the document's ``S``-values and m), so a document routed by both candidates goes to one
    joiner, the union of equal masks; a document lacking part of ``S`` to every joiner."""
    from driftjoin.schemafree.document import Document
    from driftjoin.spark.natural.local import input_batch
    from driftjoin.spark.natural.plan import DOC
    from driftjoin.spark.natural.routers import Router
    from driftjoin.spark.natural.table import Decision, RoutingView

    docs = server_log_documents(600, seed=4, timestamp=False)
    plan = make_plan(str(tmp_path), "L1", 2, "time", "value")
    fits = {}
    for key, part in (("L1.1", docs[:300]), ("L1.2", docs[300:])):
        fits[key] = plan.new_partitioner()
        fits[key].fit([Document(i, flatten(d)) for i, d in enumerate(part)])
    assert fits["L1.1"].value is not None and fits["L1.1"].value == fits["L1.2"].value
    view = RoutingView("L1", Decision(3, "L1", 2, 1), fits, 2)
    assert view.candidates(0) == ("L1.1", "L1.2")
    docs.append({k: v for k, v in docs[0].items() if k != fits["L1.1"].value.attributes[0]})  # lacks part of S
    routed = Router(plan, view, False).add(input_batch([{"id": i, "doc": json.dumps(d), "t": 1.0}
                                                        for i, d in enumerate(docs)]))
    copies = Counter(i for i, kind in zip(routed["id"], routed["kind"]) if kind == DOC)
    assert copies == {i: 2 if i == len(docs) - 1 else 1 for i in range(len(docs))}


def test_the_first_fit_watch_polls_only_while_a_query_runs(tmp_path):
    """A join that is built but never started never polls its directory; the watch for the first
    fit starts with a query of the session and stops when it terminates, though no batch ran."""
    from driftjoin.spark.natural.control import NaturalPartitionController

    controller = NaturalPartitionController(make_plan(str(tmp_path), "L1", 2, "count", "value"))
    assert controller.watcher is None
    controller.on_started("q")
    watcher = controller.watcher
    assert watcher is not None and watcher.is_alive()
    controller.on_started("q")  # one watch at a time
    assert controller.watcher is watcher
    controller.on_terminated("q")
    watcher.join(timeout=5)
    assert not watcher.is_alive()


def test_no_early_first_fit_in_a_restarted_query_whose_earlier_windows_are_open(tmp_path):
    """A restart's first batch, its window opened before the restart with the earlier lineage's
    fit, then replayed: the early first fit is not published in a restarted query (only a
    committed batch lists the earlier windows, and a task with a fit routes an unlisted window by
    the new lineage's fits only), so the replay's tasks broadcast. Exact, no RoutingError."""
    raw = nobench_documents(90, seed=3, thousandth=6, optional=0.5, sparse_blocks=4)
    rows = [{"id": i, "doc": json.dumps(raw[i])} for i in range(90)]
    plan = make_plan(str(tmp_path), "L1", 2, "count", "value")
    run = LocalRun(plan)
    batches = [rows[:20], rows[20:30], rows[30:90]]  # window 0 (40 documents) spans all three
    pairs = []
    for b, batch in enumerate(batches):
        if b == 2:
            run.restart(make_plan(str(tmp_path), "L2", 2, "count", "value"))
        found, states, _ = run.attempt([batch[0::2], batch[1::2]])
        run.controller.early_fit()  # what the watch does on Spark
        if b == 2:  # the batch fails after its joiners ran; the replay reads what is published now
            found, states, _ = run.attempt([batch[1::2], batch[0::2]])
        run.commit(states)
        run.decide()
        pairs += found
    assert read_fit(str(tmp_path), "L1.1") is not None
    assert sorted((min(a, b), max(a, b), w) for a, b, w in pairs) == sorted(brute_force(rows, expected_windows(plan, batches)))
