"""Algorithm 1, the Merger, greedy assignment and the SC/DS baselines."""

from __future__ import annotations

from driftjoin.schemafree.association import (
    AssociationGroup,
    assign_groups,
    association_groups,
    equivalence_groups,
    merge_association_groups,
)
from driftjoin.schemafree.baselines import disjoint_set_partitions, disjoint_sets, set_cover_partitions
from driftjoin.schemafree.document import flatten

# Fig. 3 (text): {A:2, C:7} always appear together (an equivalence group) and imply
# B:3, which also appears without them; the result is three association groups.
FIG3 = [
    {"A": 2, "B": 3, "C": 7},
    {"A": 2, "B": 3, "C": 7, "D": 1},
    {"B": 3, "D": 1},
    {"E": 5, "F": 0},
    {"E": 5},
]


def keysets(docs: list[dict[str, int]]) -> list[list[tuple[str, str]]]:
    return [list(flatten(d).items()) for d in docs]


def test_equivalence_groups_follow_definition_1() -> None:
    groups = {g.keys: g.docs for g in equivalence_groups(keysets(FIG3))}
    assert groups[(("A", "2"), ("C", "7"))] == {0, 1}
    assert groups[(("B", "3"),)] == {0, 1, 2}
    assert groups[(("F", "0"),)] == {3}
    sizes = [len(g.docs) for g in equivalence_groups(keysets(FIG3))]
    assert sizes == sorted(sizes)  # Algorithm 1, line 3


def test_algorithm_1_on_the_figure_3_example() -> None:
    groups = association_groups(keysets(FIG3))
    assert {g.keys: g.load for g in groups} == {
        (("A", "2"), ("B", "3"), ("C", "7")): 3,  # eg1 = {A:2, C:7} implies eg2 = {B:3}
        (("E", "5"), ("F", "0")): 2,  # F:0 implies E:5
        (("D", "1"),): 2,  # B:3 was already absorbed, so D:1 stays alone
    }


def test_association_groups_never_overlap_and_cover_every_key() -> None:
    docs = [{"x": i % 3, "y": i % 5, "z": i % 2} for i in range(30)]
    groups = association_groups(keysets(docs))
    keys = [k for g in groups for k in g.keys]
    assert len(keys) == len(set(keys))
    assert set(keys) == {k for ks in keysets(docs) for k in ks}


def test_merger_merges_subsets_and_keeps_duplicates_in_the_smaller_group() -> None:
    creator_1 = [AssociationGroup(("a", "b"), 3), AssociationGroup(("c",), 1)]
    creator_2 = [AssociationGroup(("a",), 2), AssociationGroup(("b", "c", "d"), 4)]
    merged = merge_association_groups([creator_1, creator_2])
    assert merged == [AssociationGroup(("a", "b"), 5), AssociationGroup(("c", "d"), 5)]


def test_merger_of_one_creator_is_the_identity() -> None:
    groups = association_groups(keysets(FIG3))
    assert sorted(merge_association_groups([groups]), key=repr) == sorted(groups, key=repr)


def test_greedy_assignment_puts_the_heaviest_group_on_the_lightest_partition() -> None:
    groups = [AssociationGroup((name,), load) for name, load in zip("abcde", [5, 4, 3, 3, 1], strict=True)]
    partitions = assign_groups(groups, 2)
    assert [p.load for p in partitions] == [8, 8]
    assert partitions[0].keys == {"a", "d"} and partitions[1].keys == {"b", "c", "e"}


def test_disjoint_sets_are_connected_components() -> None:
    sets = [["a", "b"], ["b", "c"], ["d"], ["e", "d"], ["f"]]
    components = {g.keys: g.load for g in disjoint_sets(sets)}
    assert components == {("a", "b", "c"): 2, ("d", "e"): 2, ("f",): 1}
    partitions = disjoint_set_partitions(sets, 2)
    assert sorted(p.load for p in partitions) == [2, 3]


def test_set_cover_partitions_cover_every_key_and_may_overlap() -> None:
    sets = [["a", "b"], ["b", "c"], ["c", "d"], ["a", "d"], ["e"]]
    partitions = set_cover_partitions(sets, 3)
    assert set().union(*(p.keys for p in partitions)) == {"a", "b", "c", "d", "e"}
    assert sum(p.load for p in partitions) == len(sets)
    assert sum(len(p.keys) for p in partitions) > 5  # a key is in several partitions
