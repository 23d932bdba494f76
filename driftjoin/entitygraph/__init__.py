"""Entities: incremental connected components of links with stable ids (the core of ``entities``).

Plain Python and numpy (scipy for the components of a batch); no Spark. :mod:`driftjoin.entitygraph.graph`
defines entities, their ids and what a batch emits, with the argument; :mod:`driftjoin.entitygraph.facts`
how the state is kept and written per batch; :mod:`driftjoin.entitygraph.links` the input and its order.
"""

from driftjoin.entitygraph.graph import JOINED, MAX_SIZE, MERGED, NEW, ONE_PER_SOURCE, Changes, EntityGraph, EntityRules
from driftjoin.entitygraph.links import LinkBatch

__all__ = ["Changes", "EntityGraph", "EntityRules", "LinkBatch", "NEW", "JOINED", "MERGED", "MAX_SIZE", "ONE_PER_SOURCE"]
