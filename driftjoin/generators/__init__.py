"""Synthetic stream generators (pure numpy), used by the Spark ``driftjoin`` data source."""
