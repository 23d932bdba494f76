"""Exact similarity joins in a general metric space (engine-agnostic cores, no Spark).

Values and distances (:mod:`.spaces`: strings under edit distance, token sets under Jaccard
distance, vectors, user metrics), records with their window copies (:mod:`.records`), and four
exact strategies that a runtime drives per micro-batch, each as a stateless *router* (records to
``(worker, role)`` rows) and a per-worker join whose ``add(batch, role)`` returns each new pair
once (``add_routed`` when the router sends a payload) and whose state is a plain picklable value:

- :mod:`.s3j`: S3J's space partitioning, workset formulation and similarity computation over any
  :class:`~.spaces.Space` (centroids are records);
- :mod:`.pivots`: pivot filtering (LAESA) over any space, for expensive metrics: never more
  distance calls than the brute force (a user's Python function);
- :mod:`.passjoin`: PassJoin's segment pigeonhole for edit distance;
- :mod:`.prefix`: prefix filtering (AllPairs / PPJoin) for Jaccard distance.

:mod:`.choose` picks a strategy from a sample by counting work; :mod:`.validate` checks settings
and records; :mod:`.engine` runs a strategy in one process over micro-batches.
"""
