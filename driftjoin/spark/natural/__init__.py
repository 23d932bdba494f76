"""``natural_join`` of schema-free JSON documents on Spark: :mod:`.api` (the join, its dead letters,
its metrics), :mod:`.settings` (the settings checked once), :mod:`.plan` (the plan and the parsing
every route starts with), :mod:`.routers` and :mod:`.joiners` (the stateless routers and the
stateful joiners), :mod:`.table` (the published routing table), :mod:`.assigner` (the paper's
single Assigner), :mod:`.control` (the partitioning controller) and :mod:`.local` (the parallel
routing played in one process, for tests and benchmarks)."""
