"""End to end: every partitioner x local join equals the brute-force join, once each.

The streams cover documents that match no partition (unseen pairs, broadcast), delta
updates inside a window, expanded attributes (a ubiquitous Boolean), several Partition
Creators with the Merger, repartitioning between windows, and time windows.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driftjoin.schemafree.document import Document
from driftjoin.schemafree.generator import nobench_documents, server_log_documents
from driftjoin.schemafree.partitioner import PARTITIONER_NAMES
from driftjoin.schemafree.pipeline import load_documents, natural_join_windows
from driftjoin.schemafree.window import CountWindow, TimeWindow, Window

Oracle = Callable[[Sequence[Document], Window], set[tuple[int, int]]]

LOCAL_JOINS = ("fptree", "hash", "nested")
COMBINATIONS = list(itertools.product(PARTITIONER_NAMES, LOCAL_JOINS))

scalar = st.one_of(st.integers(0, 3), st.sampled_from(["x", "y", "1"]), st.booleans(), st.none())
value = st.one_of(
    scalar,
    st.lists(st.integers(0, 2), max_size=2),
    st.fixed_dictionaries({}, optional={"p": scalar, "q": st.integers(0, 2)}),
)
document = st.fixed_dictionaries(
    {"flag": st.booleans()},
    optional={name: value for name in ("a", "b", "c", "d", "e")},
)


def check(raw: list[Any], window: CountWindow | TimeWindow, oracle: Oracle, **options: Any) -> list[Any]:
    docs = load_documents(raw, window)
    expected = oracle(docs, window)
    outputs = []
    for partitioner, local_join in COMBINATIONS:
        out = natural_join_windows(docs, window, partitioner=partitioner, local_join=local_join, **options)
        got = [(p.left, p.right) for p in out.pairs]
        assert len(got) == len(set(got)), f"duplicates with {partitioner}/{local_join}"
        assert set(got) == expected, f"wrong pairs with {partitioner}/{local_join}"
        assert sum(m.pairs for m in out.windows) == len(expected)
        outputs.append(out)
    return outputs


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    raw=st.lists(document, min_size=1, max_size=45),
    size=st.integers(3, 15),
    partitions=st.integers(1, 6),
    delta=st.integers(1, 3),
    theta=st.sampled_from([0.0, 0.2, 5.0]),
    creators=st.integers(1, 3),
    expand=st.booleans(),
)
def test_random_streams_match_brute_force(
    oracle: Oracle,
    raw: list[dict[str, Any]],
    size: int,
    partitions: int,
    delta: int,
    theta: float,
    creators: int,
    expand: bool,
) -> None:
    check(
        raw,
        CountWindow(size),
        oracle,
        partitions=partitions,
        delta=delta,
        theta=theta,
        creators=creators,
        expand=expand,
    )


def test_nobench_stream_exercises_every_mechanism(oracle: Oracle) -> None:
    raw = nobench_documents(360, seed=3, thousandth=6, optional=0.5, sparse_blocks=4)
    for out in check(raw, CountWindow(90), oracle, partitions=6, delta=2, theta=0.0, creators=2):
        assert sum(m.to_all for m in out.windows[1:]) > 0  # documents matching no partition
        assert out.windows[-1].repartitions > 0  # repartitioned between windows


def test_expanded_boolean_with_more_joiners_than_values(oracle: Oracle) -> None:
    raw = [{"ok": i % 3 != 0, "k": i % 11, "u": i % 4} for i in range(200)]
    raw += [{"ok": True}, {"ok": False, "u": 1}, {"k": 3}]  # missing chain attributes
    outputs = check(raw, CountWindow(100), oracle, partitions=10, theta=5.0)
    for (partitioner, _), out in zip(COMBINATIONS, outputs, strict=True):
        if partitioner != "sc":  # SC spreads overlapping partitions, see the benchmark
            assert out.windows[0].max_load < 0.3


def test_time_windows_on_the_server_log(oracle: Oracle) -> None:
    raw = server_log_documents(400, seed=5, users=30, rate=20.0)
    outputs = check(raw, TimeWindow(5.0), oracle, partitions=5)
    assert len(outputs[0].windows) >= 3


@pytest.mark.parametrize("local_join", LOCAL_JOINS)
def test_merged_documents_are_reported(local_join: str) -> None:
    out = natural_join_windows(
        [{"u": 1, "a": "x"}, {"u": 1, "b": [1, None]}, {"u": 2}],
        window=3,
        partitions=2,
        local_join=local_join,  # type: ignore[arg-type]
        merge=True,
    )
    assert [(p.left, p.right, p.merged) for p in out.pairs] == [(0, 1, {"a": "x", "b": [1, None], "u": 1})]
