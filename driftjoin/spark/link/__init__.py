"""``link``: exact multi-field match rules on Spark (api, settings, inputs, plan, router, processor)."""
