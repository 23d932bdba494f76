"""Single-process driver: the whole topology of Fig. 2 over tumbling windows.

:func:`route_windows` plays Partition Creators, Merger and Assigner: it fits the
partitions on the first window, routes each document (counting unseen pairs for the
delta update), measures the window and refits on a window whose replication or maximal
load grew by more than ``theta`` - the new partitions then serve the next window.
:func:`natural_join_windows` adds the joiners, which is what a Spark adapter does per
micro-batch with :class:`~driftjoin.schemafree.partitioner.Partitioner` on the driver
and :class:`~driftjoin.schemafree.joiner.Joiner` on the workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from driftjoin.schemafree.document import Document, RawDocument, make_document
from driftjoin.schemafree.fptree import AttributeOrder
from driftjoin.schemafree.joiner import Joiner, JoinPair, RoutedDocument
from driftjoin.schemafree.localjoin import LocalJoinName
from driftjoin.schemafree.metrics import WindowMetrics, routing_quality
from driftjoin.schemafree.partitioner import Partitioner, PartitionerName, mask_targets
from driftjoin.schemafree.window import CountWindow, TimeWindow, Window, split_windows


@dataclass(frozen=True, slots=True)
class RoutedWindow:
    """One window after routing: documents with their joiner masks, and its quality."""

    window: int
    docs: list[RoutedDocument]
    order: AttributeOrder
    loads: list[int]
    to_all: int
    repartitioned: bool
    repartitions: int


@dataclass(frozen=True, slots=True)
class JoinOutput:
    """Result of :func:`natural_join_windows`: all pairs and per-window metrics."""

    pairs: list[JoinPair]
    windows: list[WindowMetrics]


def load_documents(docs: Iterable[RawDocument | Document], window: Window) -> list[Document]:
    """Parse raw documents; ids are stream positions, time-window time taken out."""
    time_attribute = window.attribute if isinstance(window, TimeWindow) else None
    return [
        doc if isinstance(doc, Document) else make_document(doc, index, time_attribute)
        for index, doc in enumerate(docs)
    ]


def route_windows(docs: list[Document], window: Window, partitioner: Partitioner) -> Iterator[RoutedWindow]:
    """Route every window; fit on the first one and refit when quality degrades.

    An unfitted partitioner is fitted on the first window (bootstrap). A window whose
    quality triggers a repartition is the sample of the refit, which serves the next
    window (``repartitioned`` marks the triggering window).
    """
    windows = split_windows(docs, window)
    full = (1 << partitioner.partitions) - 1
    for position, (index, members) in enumerate(windows):
        if not partitioner.fitted:
            partitioner.fit(members)
        order = partitioner.attribute_order
        routed = [RoutedDocument(doc, partitioner.assign(doc)) for doc in members]
        loads = [0] * partitioner.partitions
        for item in routed:
            for target in mask_targets(item.targets):
                loads[target] += 1
        to_all = sum(1 for item in routed if item.targets == full) if partitioner.partitions > 1 else 0
        replication, max_load, _ = routing_quality(loads, len(members))
        last = position == len(windows) - 1
        repartitioned = not last and partitioner.needs_repartition(replication, max_load)
        if repartitioned:
            partitioner.fit(members)
        yield RoutedWindow(index, routed, order, loads, to_all, repartitioned, partitioner.repartitions)


def natural_join_windows(
    docs: Iterable[RawDocument | Document],
    window: int | Window = 1000,
    partitions: int = 8,
    partitioner: PartitionerName = "ag",
    local_join: LocalJoinName = "fptree",
    *,
    delta: int = 3,
    theta: float = 0.2,
    creators: int = 1,
    expand: bool = True,
    merge: bool = False,
) -> JoinOutput:
    """Natural join of a document stream per tumbling window on ``partitions`` joiners.

    ``docs`` are JSON objects (dicts or JSON text) or :class:`Document` objects; raw
    documents get their stream position as id. ``window`` is a document count or a
    :class:`CountWindow`/:class:`TimeWindow`. Returns every joining pair once (sorted)
    and :class:`WindowMetrics` per window.
    """
    spec = CountWindow(window) if isinstance(window, int) else window
    documents = load_documents(docs, spec)
    router = Partitioner(
        partitions, partitioner, delta=delta, theta=theta, creators=creators, expand=expand
    )
    joiners = [Joiner(j, local_join, merge=merge) for j in range(partitions)]
    pairs: list[JoinPair] = []
    metrics: list[WindowMetrics] = []
    for routed in route_windows(documents, spec, router):
        per_joiner: list[list[RoutedDocument]] = [[] for _ in joiners]
        for item in routed.docs:
            for target in mask_targets(item.targets):
                per_joiner[target].append(item)
        found = 0
        for joiner, items in zip(joiners, per_joiner, strict=True):
            joiner.open_window(routed.window, routed.order)
            new = joiner.add(routed.window, items)
            joiner.close_window(routed.window)
            found += len(new)
            pairs.extend(new)
        replication, max_load, gini = routing_quality(routed.loads, len(routed.docs))
        metrics.append(
            WindowMetrics(
                window=routed.window,
                documents=len(routed.docs),
                replication=replication,
                max_load=max_load,
                gini=gini,
                loads=tuple(routed.loads),
                to_all=routed.to_all,
                pairs=found,
                repartitioned=routed.repartitioned,
                repartitions=routed.repartitions,
            )
        )
    pairs.sort(key=lambda p: (p.left, p.right))
    return JoinOutput(pairs, metrics)
