"""Generated streams as Spark data sources, replayable, so exactly-once: :mod:`.generator`
(``format("driftjoin")``, vectors) and :mod:`.documents` (``format("driftjoin-docs")``, JSON
documents)."""
