"""Generated streams as Spark data sources: ``format("driftjoin")`` (vectors) and
``format("driftjoin-docs")`` (JSON documents); replayable, so exactly-once."""
