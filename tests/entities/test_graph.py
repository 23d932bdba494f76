"""The entity core against the oracle written apart (tests/entities/oracle.py): rows, ids, guards and
expiry per batch, over link orders and micro-batch cuts; a state rebuilt from its written facts after
every batch behaves and describes itself exactly as the state kept in memory."""

from __future__ import annotations

import random

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.entitygraph import EntityGraph, EntityRules, LinkBatch

from .helpers import Store, as_batch, refused_of, rows_of, rules_of
from .oracle import Oracle, components

SETTINGS = settings(max_examples=40, deadline=None)


def link_lists(ids, sources: bool = False, max_batches: int = 6):
    link = st.tuples(ids, ids, st.integers(0, 12), st.sampled_from([None, "a", "b", "c"]) if sources else st.none(),
                     st.sampled_from([None, "a", "b", "c"]) if sources else st.none())
    return st.lists(st.lists(link, max_size=10), min_size=1, max_size=max_batches)


def run_both(oracle: Oracle, batches: list[list[tuple]], *, rebuild: bool, run_cap: int = 4) -> tuple[EntityGraph, Store]:
    """Feed the core and the oracle the same batches and check each batch's rows and refusals; with
    ``rebuild`` the core is rebuilt from its written facts before every batch (a restart)."""
    g = EntityGraph(rules_of(oracle), run_cap=run_cap)
    store = Store()
    for seq, links in enumerate(batches):
        if rebuild and seq:
            kept = g.facts.describe()
            g = store.restore(g)
            assert g.facts.describe() == kept
        expected = oracle.batch(seq, links)
        changes = g.apply(as_batch(links))
        store.save(g)
        assert changes.seq == seq
        assert rows_of(changes) == expected["rows"], f"batch {seq}"
        assert refused_of(changes, oracle.two_sided) == sorted(expected["refused"]), f"batch {seq}"
        assert g.entity_ids() == oracle.ids()
        sizes = {}
        for r, e in oracle.ids().items():
            sizes[e] = sizes.get(e, 0) + 1
        assert g.largest() == max(sizes.values(), default=0) and g.entity_count == len(sizes)
    return g, store


@SETTINGS
@given(link_lists(st.integers(0, 14)), st.booleans())
def test_self_linkage_rows_and_ids_match_oracle(batches, rebuild):
    run_both(Oracle(), batches, rebuild=rebuild)


@SETTINGS
@given(link_lists(st.sampled_from(["ann", "bo", "cy", "dee", "é", "f", "gus", "hal", "ida"])), st.booleans())
def test_string_ids_and_two_sided_linkage_match_oracle(batches, rebuild):
    run_both(Oracle(two_sided=True), batches, rebuild=rebuild)


@SETTINGS
@given(link_lists(st.integers(0, 12), sources=True), st.integers(2, 5), st.booleans(), st.booleans(), st.booleans())
def test_guards_match_oracle(batches, max_size, size_guard, source_guard, two_sided):
    oracle = Oracle(two_sided=two_sided, max_size=max_size if size_guard else None, one_per_source=source_guard)
    g, _ = run_both(oracle, batches, rebuild=True)
    if size_guard:
        assert g.largest() <= max_size


@SETTINGS
@given(link_lists(st.integers(0, 12), max_batches=10), st.integers(0, 6), st.booleans())
def test_expiry_matches_oracle_and_rebuilds(batches, horizon, two_sided):
    # times grow with the batch (a stream), with some disorder inside
    batches = [[(a, b, t + 3 * i, x, y) for a, b, t, x, y in links] for i, links in enumerate(batches)]
    run_both(Oracle(two_sided=two_sided, expire_after=float(horizon)), batches, rebuild=True, run_cap=3)


@SETTINGS
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30)), max_size=60), st.randoms(use_true_random=False))
def test_grouping_never_depends_on_link_order_or_batch_cuts(pairs, rnd):
    pairs = [(a, b, 0, None, None) for a, b in pairs]
    shuffled = pairs[:]
    rnd.shuffle(shuffled)
    cuts = sorted(rnd.sample(range(len(shuffled) + 1), min(3, len(shuffled) + 1)))
    batches = [shuffled[a:b] for a, b in zip([0, *cuts], [*cuts, len(shuffled)])]
    g = EntityGraph(EntityRules())
    for links in batches:
        g.apply(as_batch(links))
    got: dict = {}
    for record, entity in g.entity_ids().items():
        got.setdefault(entity, set()).add(record[1])
    records = sorted({x for a, b, *_ in pairs for x in (a, b)})
    expected = components(records, [(a, b) for a, b, *_ in pairs if a != b])
    assert sorted(map(sorted, got.values())) == sorted(map(sorted, expected))
    # ids: one batch names each entity by its smallest record
    if len(batches) == 1:
        assert all(entity == min(members) for entity, members in got.items())


def test_a_merge_keeps_the_older_entity_and_names_the_retired_one():
    g = EntityGraph(EntityRules())
    g.apply(LinkBatch([10], [11]))             # entity 10, batch 0
    g.apply(LinkBatch([1, 3], [2, 4]))         # entities 1 and 3, batch 1 (younger, though smaller ids)
    c = g.apply(LinkBatch([2, 11], [3, 4]))    # one component: 10 is the oldest
    rows = rows_of(c)
    assert rows == {(0, r): (10, prev, "merged", 6) for r, prev in ((1, 1), (2, 1), (3, 3), (4, 3))}
    assert g.entity_ids() == {(0, r): 10 for r in (1, 2, 3, 4, 10, 11)}
    c = g.apply(LinkBatch([5], [6]))
    assert rows_of(c) == {(0, 5): (5, None, "new", 2), (0, 6): (5, None, "new", 2)}
    c = g.apply(LinkBatch([6, 12], [1, 13]))
    assert rows_of(c) == {(0, 5): (10, 5, "merged", 8), (0, 6): (10, 5, "merged", 8),
                          (0, 12): (12, None, "new", 2), (0, 13): (12, None, "new", 2)}


def test_same_batch_ties_go_to_the_smaller_founder_and_two_sided_ids_are_left_records():
    g = EntityGraph(EntityRules(two_sided=True))
    g.apply(LinkBatch(["b", "a"], ["a", "z"]))  # left b ~ right a; left a ~ right z: two entities, ids b and a
    assert g.entity_ids() == {(0, "b"): "b", (1, "a"): "b", (0, "a"): "a", (1, "z"): "a"}
    c = g.apply(LinkBatch(["a"], ["a"]))         # left a ~ right a joins them: same batch, founder (0, "a") < (0, "b")
    assert rows_of(c) == {(0, "b"): ("a", "b", "merged", 4), (1, "a"): ("a", "b", "merged", 4)}


def test_guards_refuse_the_link_and_report_it():
    g = EntityGraph(EntityRules(max_size=3))
    c = g.apply(LinkBatch([1, 2, 3, 5], [2, 3, 4, 6], time=[0, 1, 2, 3]))
    assert refused_of(c, False) == [((0, 3), (0, 4), "max_size")]
    assert c.refused_entities[0].tolist() == [1] and c.refused_entities[1].tolist() == [None]
    assert c.counts["max_size"] == 1 and g.largest() == 3
    g = EntityGraph(EntityRules(two_sided=True, one_per_source=True))
    c = g.apply(LinkBatch([1, 1], [7, 8], time=[0, 1]))  # left 1 with two right records: the second is refused
    assert refused_of(c, True) == [((0, 1), (1, 8), "one_per_source")]
    assert g.entity_ids() == {(0, 1): 1, (1, 7): 1}


def test_singletons_cost_nothing_and_replays_give_the_same_rows():
    g = EntityGraph(EntityRules(max_size=2))
    store = Store()
    g.apply(LinkBatch([1, 2], [2, 3], time=[0, 1]))
    store.save(g)
    assert g.record_count == 2  # 3 was only in a refused link
    batch = LinkBatch([3, 4, 5], [4, 5, 1], time=[2, 3, 4])
    first = g.apply(batch)
    replay = store.restore(g).apply(batch, seq=first.seq)
    assert rows_of(first) == rows_of(replay) and refused_of(first, False) == refused_of(replay, False)


def test_state_is_written_per_batch_for_what_changed_and_runs_stay_few():
    rng = np.random.default_rng(3)
    g = EntityGraph(EntityRules(), run_cap=2000)
    store = Store()
    facts_written, rows = [], []
    next_id = 0
    for batch in range(300):
        # 20 new records per batch, each pair linked, some pairs linked to an older record
        ids = np.arange(next_id, next_id + 20)
        next_id += 20
        left, right = list(ids[0::2]), list(ids[1::2])
        old = rng.integers(0, max(next_id - 20, 1), 3)
        left += list(old)
        right += list(ids[:3])
        before = store.written
        c = g.apply(LinkBatch(left, right))
        store.save(g)
        facts_written.append(store.written - before)
        rows.append(len(c))
        assert len(store.order) <= 3 * (np.log2(next_id) + 1) + next_id / 2000
    # the state grew to thousands of records, but no batch wrote more than a few runs' worth
    assert g.record_count > 5000
    assert max(facts_written) < 0.25 * sum(facts_written[-10:]) * 30


def test_run_bookkeeping_survives_random_rebuilds_with_expiry():
    rnd = random.Random(7)
    oracle = Oracle(expire_after=4.0)
    batches = []
    for b in range(40):
        batches.append([(rnd.randrange(60), rnd.randrange(60), b + rnd.random(), None, None) for _ in range(rnd.randrange(1, 12))])
    g, store = run_both(oracle, batches, rebuild=True, run_cap=8)
    assert g.facts.summary()["dead_facts"] <= g.facts.summary()["facts"]
