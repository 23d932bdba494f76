"""Natural joins over schema-free JSON document streams (Gjurovski and Michel).

Engine-agnostic core, plain Python and numpy:

* document model - :func:`flatten`, :class:`Document`, :func:`joinable`;
* partitioning - :class:`Partitioner` (association groups ``"ag"``, set cover ``"sc"``,
  disjoint sets ``"ds"``; Merger, attribute expansion, delta updates, theta
  repartitioning), fitted and queried on the driver;
* local join - :class:`Joiner` per worker with FPTreeJoin, hash or nested-loop join,
  reporting each pair at exactly one joiner;
* :func:`natural_join_windows` - the whole pipeline in one process.
"""

from driftjoin.schemafree.association import (
    AssociationGroup,
    Partition,
    assign_groups,
    association_groups,
    equivalence_groups,
    merge_association_groups,
)
from driftjoin.schemafree.document import Document, flatten, joinable, make_document, merged_document
from driftjoin.schemafree.expansion import AttributeExpansion, ExpansionChain, plan_expansion
from driftjoin.schemafree.fptree import AttributeOrder, FPTree
from driftjoin.schemafree.joiner import Joiner, JoinPair, RoutedDocument, owner
from driftjoin.schemafree.localjoin import HashJoin, NestedLoopJoin, make_local_join
from driftjoin.schemafree.metrics import WindowMetrics, gini
from driftjoin.schemafree.partitioner import Partitioner
from driftjoin.schemafree.pipeline import JoinOutput, load_documents, natural_join_windows, route_windows
from driftjoin.schemafree.window import CountWindow, TimeWindow

__all__ = [
    "AssociationGroup",
    "AttributeExpansion",
    "AttributeOrder",
    "CountWindow",
    "Document",
    "ExpansionChain",
    "FPTree",
    "HashJoin",
    "JoinOutput",
    "JoinPair",
    "Joiner",
    "NestedLoopJoin",
    "Partition",
    "Partitioner",
    "RoutedDocument",
    "TimeWindow",
    "WindowMetrics",
    "assign_groups",
    "association_groups",
    "equivalence_groups",
    "flatten",
    "gini",
    "joinable",
    "load_documents",
    "make_document",
    "make_local_join",
    "merge_association_groups",
    "merged_document",
    "natural_join_windows",
    "owner",
    "plan_expansion",
    "route_windows",
]
