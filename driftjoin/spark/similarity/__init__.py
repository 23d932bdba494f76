"""``similarity_join`` on Spark: three paths in one shape.

- :mod:`.api`: ``similarity_join`` and ``invalid_records``, a short dispatch, and the user's columns
  of the pairs;
- :mod:`.settings`: the settings checked once into one object (``SimilaritySettings``);
- :mod:`.inputs`: the inputs checked against the settings (``JoinInputs``: windows, ids, workers);
- :mod:`.shape`: what the paths share (the plan's common part, the router's opening and
  heartbeats, the dead-letter output, the pairs' schema and frames);
- the paths: :mod:`.s3j` (S3J on vectors, with ClusterJoin and brute force), :mod:`.grid` (the
  1-Bucket-Theta grid on vectors), :mod:`.spaces` (strings, token sets, user metrics through
  :mod:`driftjoin.metric`'s strategies); :mod:`.choice` (S3J or the grid: ``algorithm="auto"``);
- :mod:`.control` (the workset balancer) and :mod:`.assignment` (the assignments it publishes);
- :mod:`.threshold`: ``choose_threshold``.
"""
