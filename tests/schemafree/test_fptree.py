"""FP-tree creation with the global attribute order and FPTreeJoin (Table I, Fig. 5)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.schemafree.document import Document, flatten, joinable
from driftjoin.schemafree.fptree import AttributeOrder, FPTree
from driftjoin.schemafree.localjoin import HashJoin, NestedLoopJoin

TABLE_I = [
    {"a": 3, "b": 7, "c": 1},
    {"a": 3, "b": 8},
    {"a": 3, "b": 7},
    {"b": 8, "c": 2},
]


def table_docs() -> list[Document]:
    return [Document(i + 1, flatten(d)) for i, d in enumerate(TABLE_I)]


def test_global_order_of_table_i_is_b_a_c() -> None:
    order = AttributeOrder.from_sample(d.avps for d in table_docs())
    assert order.attributes == ("b", "a", "c")
    assert order.rank("zzz") > order.rank("c")  # unseen attributes come last


def test_ties_prefer_fewer_distinct_values() -> None:
    order = AttributeOrder.from_sample([{"x": "1", "y": "1"}, {"x": "2", "y": "1"}])
    assert order.attributes == ("y", "x")


def test_fptree_of_table_i_and_the_join_of_d1() -> None:
    docs = table_docs()
    tree = FPTree(AttributeOrder.from_sample(d.avps for d in docs))
    for doc in docs[1:]:
        tree.insert(doc)
    # root -> b:8 -> (a:3 [d2], c:2 [d4]); root -> b:7 -> a:3 [d3]: 6 nodes with root
    assert tree.nodes == 6 and len(tree) == 3
    assert tree.ubiquitous == ("b",)  # num = 1: the first level holds only b
    assert tree.join(docs[0]) == [3]  # Fig. 5: only d3 joins d1


def test_shortcut_stops_at_an_attribute_the_probe_lacks() -> None:
    tree = FPTree(AttributeOrder.of(["u", "v"]))
    tree.insert(Document(1, {"u": "1", "v": "1"}))
    tree.insert(Document(2, {"u": "1", "v": "2"}))
    tree.insert(Document(3, {"u": "2", "v": "1", "w": "0"}))
    assert tree.ubiquitous == ("u", "v")
    assert sorted(tree.join(Document(9, {"v": "1"}))) == [1, 3]
    assert tree.join(Document(9, {"u": "3"})) == []
    tree.insert(Document(4, {"v": "1"}))
    assert tree.ubiquitous == ()


def test_a_new_attribute_ranked_first_breaks_the_ubiquitous_prefix() -> None:
    tree = FPTree(AttributeOrder.of(["x", "u"]))
    tree.insert(Document(1, {"u": "1"}))
    assert tree.ubiquitous == ("u",)
    tree.insert(Document(2, {"u": "1", "x": "5"}))
    assert tree.ubiquitous == ()
    assert tree.join(Document(3, {"u": "1", "x": "6"})) == [1]


documents = st.lists(
    st.dictionaries(st.sampled_from("abcde"), st.integers(0, 2), max_size=5),
    min_size=1,
    max_size=30,
)


@settings(max_examples=150, deadline=None)
@given(documents, st.permutations("abcde"))
def test_every_local_join_equals_brute_force(raw: list[dict[str, int]], order: list[str]) -> None:
    docs = [Document(i, flatten(d)) for i, d in enumerate(raw)]
    expected = {
        (j, i) for i, d in enumerate(docs) for j in range(i) if joinable(d.avps, docs[j].avps)
    }
    for local in (FPTree(AttributeOrder.of(order[:3])), HashJoin(), NestedLoopJoin()):
        found = []
        for i, doc in enumerate(docs):
            partners = local.join(doc)
            assert len(partners) == len(set(partners))
            found.extend((j, i) for j in partners)
            local.insert(doc)
        assert sorted(found) == sorted(expected)
