"""The Spark layer: the algorithm cores run inside Structured Streaming and on static DataFrames.

- :mod:`driftjoin.spark.runtime`: what every operator stands on (sessions, the settings checkers,
  the stream-or-static stage runner, the shared state layer, the plan guard, statistics,
  published decisions, the query-listener hub, the one module of private PySpark names).
- :mod:`driftjoin.spark.sources`: the generator data sources (vectors, JSON documents).
- one package per operator, each with its API, its settings (checked once into one object that
  builds the plan), operators, plan and driver-side controller: :mod:`~driftjoin.spark.similarity`
  (S3J, the grid, metric spaces), :mod:`~driftjoin.spark.topk` (SWOOP),
  :mod:`~driftjoin.spark.natural` (schema-free natural joins), :mod:`~driftjoin.spark.equi`
  (Streaming HyperCube). Operator packages import the runtime and their cores, never each other.
"""
