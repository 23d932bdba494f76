"""Value partitioning (driftjoin.schemafree.valuepart) against the brute-force natural join.

The joiners are the core's (:class:`~driftjoin.schemafree.joiner.Joiner`, the lowest-common-
joiner reporting rule); hypothesis draws the documents (nested objects, arrays, nulls, an
attribute present in most documents), the number of joiners, the set ``S`` (present in all,
some or no documents, nested paths), the micro-batch boundaries and a refit per window.
"""

from __future__ import annotations

import json
import pickle
import subprocess
import sys
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.schemafree.document import Document, flatten
from driftjoin.schemafree.generator import nobench_documents, server_log_documents
from driftjoin.schemafree.joiner import Joiner, RoutedDocument
from driftjoin.schemafree.partitioner import Partitioner, mask_targets
from driftjoin.schemafree.valuepart import ValuePartitioning, choose_value_partitioning
from driftjoin.schemafree.window import CountWindow

scalar = st.one_of(st.integers(0, 2), st.sampled_from(["x", "1"]), st.booleans(), st.none())
value = st.one_of(scalar, st.lists(st.integers(0, 1), max_size=2),
                  st.fixed_dictionaries({}, optional={"p": scalar, "q": st.integers(0, 1)}))
document = st.fixed_dictionaries({}, optional={name: value for name in ("a", "b", "c", "d")})
ATTRIBUTES = ["a", "b", "c", "d", "n.p", "n.q", "a.p", "zz"]


@st.composite
def stream(draw: Any) -> tuple[list[dict[str, Any]], int]:
    """Documents where ``s`` is present in most (null now and then) and the others optional."""
    raw = draw(st.lists(document, min_size=1, max_size=40))
    for doc in raw:
        if draw(st.integers(0, 9)) > 0:
            doc["s"] = draw(st.one_of(st.integers(0, 3), st.none()))
    return raw, draw(st.integers(3, 15))


def join_with(partitionings: list[ValuePartitioning], docs: list[Document], size: int,
              cuts: list[int]) -> list[tuple[int, int]]:
    """Route every count window of ``size`` by its partitioning (window i: ``partitionings[i %
    len]``), feed each joiner its documents in micro-batches cut at ``cuts``, collect the pairs."""
    p = partitionings[0].partitions
    joiners = [Joiner(j, "hash") for j in range(p)]
    pairs: list[tuple[int, int]] = []
    bounds = sorted({0, *cuts, len(docs)})
    for start, end in zip(bounds, bounds[1:]):
        per: dict[tuple[int, int], list[RoutedDocument]] = {}
        for doc in docs[start:end]:
            window = doc.doc_id // size
            mask = partitionings[window % len(partitionings)].mask(doc.avps)
            for j in mask_targets(mask):
                per.setdefault((j, window), []).append(RoutedDocument(doc, mask))
        for (j, window), routed in sorted(per.items()):
            pairs += [(pr.left, pr.right) for pr in joiners[j].add(window, routed)]
    return pairs


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=stream(), p=st.sampled_from([1, 2, 4, 8]),
       sets=st.lists(st.lists(st.sampled_from(["s", *ATTRIBUTES]), max_size=3, unique=True), min_size=1, max_size=3),
       cuts=st.lists(st.integers(1, 39), max_size=5))
def test_any_set_of_attributes_gives_every_pair_once(oracle, case, p, sets, cuts) -> None:
    raw, size = case
    docs = [Document(i, flatten(d)) for i, d in enumerate(raw)]
    parts = [ValuePartitioning(tuple(sorted(s)), p) for s in sets]
    got = join_with(parts, docs, size, cuts)
    assert len(got) == len(set(got))
    assert set(got) == oracle(docs, CountWindow(size))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=stream(), p=st.sampled_from([1, 2, 4, 8]), cuts=st.lists(st.integers(1, 39), max_size=5))
def test_chosen_sets_refitted_per_window_give_every_pair_once(oracle, case, p, cuts) -> None:
    """Each window's ``S`` chosen on the window before (the first on itself), as at refits."""
    raw, size = case
    docs = [Document(i, flatten(d)) for i, d in enumerate(raw)]
    windows = [docs[i:i + size] for i in range(0, len(docs), size)]
    parts = []
    for w in range(len(windows)):
        chosen = choose_value_partitioning([d.avps for d in windows[max(w - 1, 0)]], p, presence=0.5, slack=float(p))
        parts.append(chosen or ValuePartitioning(("zz",), p))  # none: every document to every joiner
    got = join_with(parts, docs, size, cuts)
    assert len(got) == len(set(got))
    assert set(got) == oracle(docs, CountWindow(size))


def test_full_documents_go_to_one_joiner_partial_ones_to_all_empty_ones_nowhere() -> None:
    part = ValuePartitioning(("Server", "User"), 4)
    full = flatten({"Server": "srv1", "User": "u3", "Success": True})
    assert bin(part.mask(full)).count("1") == 1
    assert part.mask(full) == part.mask(flatten({"Server": "srv1", "User": "u3", "IP": "x"}))
    assert part.mask(flatten({"Server": "srv1", "User": None})) == 0b1111  # null is absent
    assert part.mask(flatten({"Server": "srv1", "User": {"id": 3}})) == 0b1111  # User.id is another attribute
    assert part.mask({}) == 0


def test_choice_divides_the_work_of_both_streams() -> None:
    for raw in (server_log_documents(2000, seed=1, timestamp=False), nobench_documents(2000, seed=1)):
        sample = [flatten(d) for d in raw]
        for p in (2, 4, 8, 16):
            part = choose_value_partitioning(sample, p)
            assert part is not None and part.attributes
            assert part.max_load(sample) <= 1.5 / p


def test_no_common_attribute_falls_back_to_association_groups() -> None:
    docs = [Document(i, {f"a{i % 7}": "1", f"b{i % 5}": "2"}) for i in range(200)]
    assert choose_value_partitioning([d.avps for d in docs], 4) is None
    part = Partitioner(4, "value")
    part.fit(docs)
    assert part.value is None and part.kind == "ag"
    assert part.baseline_replication > 0
    # the fallback is the paper's AG: the same routing as an AG fit
    ag = Partitioner(4, "ag")
    ag.fit(docs)
    assert [part.route_mask(d) for d in docs] == [ag.route_mask(d) for d in docs]


def test_one_joiner_takes_everything_and_a_value_fit_has_no_delta_keys() -> None:
    docs = [Document(i, flatten(d)) for i, d in enumerate(server_log_documents(300, seed=2, timestamp=False))]
    one = Partitioner(1, "value")
    one.fit(docs)
    assert one.kind == "value()" and {one.route_mask(d) for d in docs} == {1}
    part = Partitioner(4, "value", delta=1)
    part.fit(docs)
    assert part.kind.startswith("value(")
    stranger = Document(10**6, {"Unseen": '"x"'})
    assert part.route_unknown(stranger) == (0b1111, ())
    assert part.sightings({("Unseen", '"x"'): 5}) == {}
    assert part.baseline_replication < 1.1 and part.baseline_max_load <= 1.5 / 4


def test_hash_is_the_same_in_every_process() -> None:
    """Routers run in many Python workers: the home must not depend on PYTHONHASHSEED."""
    code = ("import json,sys; from driftjoin.schemafree.valuepart import ValuePartitioning as V; "
            "v = V(('a', 'b'), 8); print(json.dumps([v.mask({'a': str(i), 'b': '\"x\"'}) for i in range(50)]))")
    outs = set()
    for seed in ("1", "2"):
        run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env={"PYTHONHASHSEED": seed, "PATH": ""})
        outs.add(run.stdout)
    assert len(outs) == 1
    masks = json.loads(outs.pop())
    assert len(Counter(masks)) == 8  # 50 values spread over all 8 joiners


def test_a_fit_pickled_before_value_partitioning_loads_as_keys() -> None:
    part = Partitioner(2, "ag")
    part.fit([Document(0, {"a": "1"}), Document(1, {"b": "2"})])
    state = part.__dict__.copy()
    del state["value"]
    old = Partitioner.__new__(Partitioner)
    old.__dict__.update(state)
    again = pickle.loads(pickle.dumps(old))
    assert again.value is None and again.route_mask(Document(2, {"a": "1"})) == part.route_mask(Document(2, {"a": "1"}))


def test_an_unknown_partitioner_name_is_refused() -> None:
    with pytest.raises(ValueError, match="'value'"):
        Partitioner(2, "values")  # type: ignore[arg-type]
