"""The Spark layer: the algorithm cores run inside Structured Streaming and on static DataFrames.

- :mod:`driftjoin.spark.runtime`: what every operator stands on (sessions, the shared state
  layer, the plan guard, statistics, published decisions, the query-listener hub).
- :mod:`driftjoin.spark.sources`: the generator data sources (vectors, JSON documents).
- one package per operator, each with its API, operators, plan and driver-side controller:
  :mod:`~driftjoin.spark.similarity` (S3J and the grid), :mod:`~driftjoin.spark.topk` (SWOOP),
  :mod:`~driftjoin.spark.natural` (schema-free natural joins), :mod:`~driftjoin.spark.equi`
  (Streaming HyperCube). Operator packages import the runtime and their cores, never each other.
"""
