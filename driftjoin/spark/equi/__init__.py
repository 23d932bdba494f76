"""``equi_join`` (Streaming HyperCube) on Spark: API, routers and workers, the paper's single
dispatcher, the row payload and the routing-table controller."""
