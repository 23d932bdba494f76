"""``entities`` on Spark: one stateful key holding the entity graph of :mod:`driftjoin.entitygraph`.

- :mod:`.api`: ``entities``, its dead letters (``invalid_entity_links``) and each record's entity
  now (``current_entities``);
- :mod:`.settings`: the settings checked once into one object (``EntitiesSettings``);
- :mod:`.plan`: the plan (checked on a restart), the link rows normalised, the output schema;
- :mod:`.processor`: the stateful processor (streams) and its static run over the core.
"""
