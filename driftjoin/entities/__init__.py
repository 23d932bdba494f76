"""Entities: incremental connected components of links with stable ids (the core of ``entities``).

Plain Python and numpy (scipy for the components of a batch); no Spark. :mod:`driftjoin.entities.graph`
defines entities, their ids and what a batch emits, with the argument; :mod:`driftjoin.entities.facts`
how the state is kept and written per batch; :mod:`driftjoin.entities.links` the input and its order.
"""

from driftjoin.entities.graph import JOINED, MAX_SIZE, MERGED, NEW, ONE_PER_SOURCE, Changes, EntityGraph, EntityRules
from driftjoin.entities.links import LinkBatch

__all__ = ["Changes", "EntityGraph", "EntityRules", "LinkBatch", "NEW", "JOINED", "MERGED", "MAX_SIZE", "ONE_PER_SOURCE"]
