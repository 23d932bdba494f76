"""``entities`` on Spark: api (the function, its dead letters, the current view), settings, plan and
the stateful processor over the core of :mod:`driftjoin.entitygraph`."""
