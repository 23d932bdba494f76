"""``topk_set_join`` (SWOOP) on Spark: API, operators and the shared lower bound's controller."""
