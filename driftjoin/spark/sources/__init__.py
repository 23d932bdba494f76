"""Generated streams as Spark data sources, replayable, so exactly-once: :mod:`.generator`
(``format("driftjoin")``, vectors), :mod:`.documents` (``format("driftjoin-docs")``, JSON
documents) and :mod:`.persons` (``format("driftjoin-persons")``, person records with known
duplicates, for ``link`` and ``entities``)."""
