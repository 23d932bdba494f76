"""The FP-tree of a joiner's window and FPTreeJoin (Section V, Algorithms 2 and 3).

Every document is inserted as a path of its attribute-value pairs sorted by the *global
attribute order*: descending by the number of sample documents holding the attribute,
ties by fewer distinct values (Section V-A), then by name; attributes unseen in the
sample come last, by name. The id of a document is stored at the node where its path
ends, so all documents stored at a node have exactly the pairs of the path to it.

FPTreeJoin finds the stored join partners of a probe document ``d``:

* **Shortcut through ubiquitous attributes (Alg. 2).** If the first attributes of the
  order are present in every stored document, the first tree levels consist of them
  only; for each such attribute that ``d`` has, only the child with ``d``'s value can
  avoid a conflict, so all sibling subtrees are pruned at once.
* **Traversal (Alg. 3).** A depth-first search skips every child whose attribute ``d``
  has with another value (the conflict test of line 5) and counts the pairs shared with
  ``d`` along the path; documents at a node are partners when that count is positive.

Children are indexed by attribute and then value, so the line-5 test selects the one
compatible child per attribute directly instead of testing each sibling. The header
table and branch ids of the original FP-tree serve frequent-pattern mining and are not
needed for the join, so they are left out.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from driftjoin.schemafree.document import Attribute, Document, Value


@dataclass(frozen=True, slots=True)
class AttributeOrder:
    """Global attribute order shared by all joiners of a window."""

    attributes: tuple[Attribute, ...] = ()
    _rank: Mapping[Attribute, int] = field(default_factory=dict)

    @classmethod
    def of(cls, attributes: Sequence[Attribute]) -> AttributeOrder:
        """Order with the given attributes first, in this sequence."""
        return cls(tuple(attributes), {a: i for i, a in enumerate(attributes)})

    @classmethod
    def from_sample(cls, sample: Iterable[Mapping[Attribute, Value]]) -> AttributeOrder:
        """Order by descending document frequency, then fewer distinct values, then name."""
        doc_count: Counter[Attribute] = Counter()
        values: dict[Attribute, set[Value]] = {}
        for avps in sample:
            for attr, value in avps.items():
                doc_count[attr] += 1
                values.setdefault(attr, set()).add(value)
        ranked = sorted(doc_count, key=lambda a: (-doc_count[a], len(values[a]), a))
        return cls.of(ranked)

    def rank(self, attr: Attribute) -> tuple[int, Attribute]:
        """Sort key of an attribute; unseen attributes follow all known ones."""
        return (self._rank.get(attr, len(self.attributes)), attr)


class _Node:
    """FP-tree node; its label is the (attribute, value) key under which it is stored."""

    __slots__ = ("children", "docs")

    def __init__(self) -> None:
        self.children: dict[Attribute, dict[Value, _Node]] | None = None
        self.docs: list[int] | None = None


class FPTree:
    """FP-tree over the documents of one window at one joiner, with FPTreeJoin."""

    def __init__(self, order: AttributeOrder | None = None) -> None:
        self.order = order or AttributeOrder()
        self._root = _Node()
        self._size = 0
        self._ubiquitous: list[Attribute] = []
        self.nodes = 1

    def __len__(self) -> int:
        return self._size

    @property
    def ubiquitous(self) -> tuple[Attribute, ...]:
        """Leading attributes of the order held by every stored document (``num``)."""
        return tuple(self._ubiquitous)

    def insert(self, doc: Document) -> None:
        """Add a document as the path of its pairs in global attribute order."""
        attrs = sorted(doc.avps, key=self.order.rank)
        node = self._root
        for attr in attrs:
            if node.children is None:
                node.children = {}
            by_value = node.children.setdefault(attr, {})
            value = doc.avps[attr]
            child = by_value.get(value)
            if child is None:
                child = by_value[value] = _Node()
                self.nodes += 1
            node = child
        if node.docs is None:
            node.docs = []
        node.docs.append(doc.doc_id)
        self._update_ubiquitous(doc, attrs)
        self._size += 1

    def _update_ubiquitous(self, doc: Document, attrs: list[Attribute]) -> None:
        if self._size == 0:
            self._ubiquitous = attrs
            return
        prefix = self._ubiquitous
        inside = set(prefix)
        outside = [self.order.rank(a) for a in attrs if a not in inside]
        bound = min(outside) if outside else None
        keep = 0
        for attr in prefix:
            if attr not in doc.avps or (bound is not None and self.order.rank(attr) > bound):
                break
            keep += 1
        del prefix[keep:]

    def join(self, doc: Document) -> list[int]:
        """FPTreeJoin: ids of stored documents that join with ``doc``."""
        result: list[int] = []
        node = self._root
        shared = 0
        for attr in self._ubiquitous:  # Algorithm 2, lines 2-6
            value = doc.avps.get(attr)
            if value is None:
                break
            assert node.children is not None
            child = node.children[attr].get(value)
            if child is None:
                return result  # every stored document conflicts on attr
            node = child
            shared += 1
            if node.docs:
                result.extend(node.docs)
        self._traverse(node, shared, doc.avps, result)
        return result

    @staticmethod
    def _traverse(start: _Node, shared: int, avps: Mapping[Attribute, Value], result: list[int]) -> None:
        """Algorithm 3 without recursion: collect partners below ``start``."""
        stack = [(start, shared)]
        while stack:
            node, count = stack.pop()
            if node.children is None:
                continue
            for attr, by_value in node.children.items():
                value = avps.get(attr)
                if value is None:
                    for child in by_value.values():
                        if child.docs and count:
                            result.extend(child.docs)
                        if child.children is not None:
                            stack.append((child, count))
                else:
                    child = by_value.get(value)
                    if child is not None:  # other values conflict: pruned
                        if child.docs:
                            result.extend(child.docs)
                        if child.children is not None:
                            stack.append((child, count + 1))
