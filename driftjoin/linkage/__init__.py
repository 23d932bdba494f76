"""Exact multi-field match rules (``link``): the engine-agnostic core, no Spark.

A rule set is a list of rules, each a dict from column to condition; a pair of records matches
when every condition of at least one rule holds (:mod:`.rules`: the vocabulary, its checks, null
semantics, the measures and their exact tests). :mod:`.drivers` turns a rule into keys: records
that satisfy the rule share a key (the rule's equal fields and its *driving* condition, through
the metric cores' strategies: PassJoin, prefix filtering, S3J, sorted buckets for absolute
differences). :mod:`.split` spreads the keys of hot blocks over several workers. :mod:`.worker`
stores the keys per window and finds each matching pair exactly once, under the first rule it
satisfies, with every rule it satisfies and the distance of every measure; :mod:`.plan` routes
records to workers; :mod:`.choose` picks each rule's driver from a sample; :mod:`.engine` runs it
all in one process over micro-batches (tests, benchmarks, the reference the Spark operator in
:mod:`driftjoin.spark.link` follows).
"""
