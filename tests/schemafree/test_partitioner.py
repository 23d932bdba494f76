"""Partitioner: routing, delta updates, repartition trigger, attribute expansion."""

from __future__ import annotations

import pytest

from driftjoin.schemafree.document import Document, flatten
from driftjoin.schemafree.expansion import plan_expansion
from driftjoin.schemafree.joiner import Joiner, RoutedDocument, owner
from driftjoin.schemafree.metrics import gini, routing_quality
from driftjoin.schemafree.partitioner import Partitioner, mask_targets


def docs_of(raw: list[dict[str, object]], start: int = 0) -> list[Document]:
    return [Document(start + i, flatten(d)) for i, d in enumerate(raw)]


BOOLEAN_HEAVY = [{"flag": i % 2 == 0, "k": i % 20, "g": i % 9} for i in range(400)]


def test_unfitted_partitioner_broadcasts_and_empty_documents_go_nowhere() -> None:
    part = Partitioner(4)
    assert part.route(Document(0, {"a": "1"})) == [0, 1, 2, 3]
    part.fit(docs_of([{"a": 1}, {"b": 2}]))
    assert part.route(Document(5, {})) == []


def test_unseen_pair_goes_to_all_joiners_until_seen_delta_times() -> None:
    part = Partitioner(4, delta=3)
    part.fit(docs_of([{"a": i} for i in range(8)]))
    new = Document(100, flatten({"a": 1, "z": "new"}))
    assert part.assign(new) == (1 << 4) - 1
    assert part.assign(new) == (1 << 4) - 1
    third = part.assign(new)  # the third occurrence adds z:"new" to a partition
    assert len(mask_targets(third)) <= 2
    assert part.route(new) == mask_targets(third)


def test_repartition_trigger_uses_theta_relative_to_the_fit() -> None:
    part = Partitioner(4, theta=0.2)
    assert part.needs_repartition(1.0, 0.1)  # never fitted
    part.fit(docs_of([{"a": i % 4, "b": i} for i in range(40)]))
    r, load = part.baseline_replication, part.baseline_max_load
    assert not part.needs_repartition(r * 1.19, load)
    assert part.needs_repartition(r * 1.21, load)
    assert part.needs_repartition(r, load * 1.21)


@pytest.mark.parametrize("method", ["ag", "sc", "ds"])
def test_every_sample_key_has_a_home(method: str) -> None:
    sample = docs_of([{"a": i % 5, "b": i % 3, "c": i} for i in range(60)])
    part = Partitioner(4, method, creators=3 if method == "ag" else 1, expand=False)
    part.fit(sample)
    full = (1 << 4) - 1
    assert all(0 < part.route_mask(d) for d in sample)
    if method != "sc":
        assert all(part.route_mask(d) != full for d in sample)


def test_expansion_chooses_a_disabling_and_a_combining_attribute() -> None:
    sample = [d.avps for d in docs_of(BOOLEAN_HEAVY)]
    plan = plan_expansion(sample, 8)
    assert [c.attributes for c in plan.chains] == [("flag", "g")]
    assert plan.chains[0].disabled == {"flag"}
    assert plan_expansion(sample, 2).chains == ()  # two values suffice for m = 2


def test_a_low_variety_combining_attribute_is_disabled_too() -> None:
    sample = [flatten({"flag": i % 2 == 0, "colour": i % 3, "k": i % 50}) for i in range(300)]
    (chain,) = plan_expansion(sample, 20).chains
    assert chain.attributes == ("flag", "colour", "k")
    assert chain.disabled == {"flag", "colour"}


def test_expansion_lets_m_exceed_the_values_of_a_boolean() -> None:
    sample = docs_of([{"flag": d["flag"], "k": d["k"]} for d in BOOLEAN_HEAVY])
    plain = Partitioner(8, expand=False)
    plain.fit(sample)
    expanded = Partitioner(8)
    expanded.fit(sample)
    assert plain.baseline_max_load >= 0.5
    assert expanded.baseline_max_load <= 0.2
    assert expanded.baseline_replication == 1.0


def test_a_document_missing_the_combining_attribute_follows_its_prefix() -> None:
    sample = docs_of([{"flag": i % 2 == 0, "k": i % 5} for i in range(100)])
    part = Partitioner(8)
    part.fit(sample)
    only_flag = Document(1000, flatten({"flag": True}))
    holders = {t for d in sample if d.avps["flag"] == "true" for t in part.route(d)}
    assert set(part.route(only_flag)) == holders
    assert len(holders) < 8


def test_only_the_owner_joiner_reports_a_pair() -> None:
    a = RoutedDocument(Document(1, {"x": "1"}), 0b0110)
    b = RoutedDocument(Document(2, {"x": "1", "y": "2"}), 0b1100)
    assert owner(a.targets, b.targets) == 2
    reports = {}
    for j in (1, 2, 3):
        joiner = Joiner(j)
        reports[j] = joiner.add(0, [d for d in (a, b) if d.targets >> j & 1])
    assert [(p.left, p.right) for p in reports[2]] == [(1, 2)]
    assert reports[1] == [] and reports[3] == []
    with pytest.raises(ValueError):
        Joiner(0).add(0, [a])


def test_joiner_keeps_windows_apart_and_evicts_them() -> None:
    joiner = Joiner(0, "hash", merge=True)
    first = joiner.add(0, [RoutedDocument(Document(1, {"x": "1"}), 1)])
    second = joiner.add(1, [RoutedDocument(Document(2, {"x": "1"}), 1)])
    assert first == [] and second == []
    assert joiner.open_windows == [0, 1]
    pairs = joiner.add(1, [RoutedDocument(Document(3, {"x": "1", "y": "[1]"}), 1)])
    assert pairs[0].merged == {"x": 1, "y": [1]}
    joiner.close_window(0)
    assert joiner.open_windows == [1]


def test_gini_and_routing_quality() -> None:
    assert gini([5, 5, 5, 5]) == 0.0
    assert gini([0, 0, 0, 10]) == pytest.approx(0.75)
    assert routing_quality([3, 1], 2) == (2.0, 1.5, gini([3, 1]))
