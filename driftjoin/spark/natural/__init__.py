"""``natural_join`` of schema-free JSON documents on Spark: API, routers, joiners, plan, the
published routing table, the paper's single Assigner and the partitioning controller."""
