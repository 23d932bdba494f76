"""``equi_join`` (Streaming HyperCube) on Spark: :mod:`.api` (the join and its dead letters),
:mod:`.settings` (the settings checked once), :mod:`.operators` (the plan, the routers and the
workers), :mod:`.dispatch` (the paper's single dispatcher), :mod:`.payload` (how a row travels)
and :mod:`.control` (the routing-table controller)."""
