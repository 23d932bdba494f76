"""``topk_set_join`` (SWOOP) on Spark: :mod:`.api` (the join, its dead letters, ``current_topk``),
:mod:`.settings` (the settings checked once), :mod:`.operators` (the plan, the router and the
stateful operators) and :mod:`.control` (the shared lower bound's controller)."""
