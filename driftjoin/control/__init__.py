"""Elastic control of whole streaming queries (thesis chapter 4).

- :mod:`driftjoin.control.autoscale`: autoscaling policies, metrics and actuation;
- :mod:`driftjoin.control.joint`: workset balancing and scaling decided together.

Each operator's own controller lives with the operator (e.g.
:mod:`driftjoin.spark.similarity.control` for the workset balancer).
"""
