"""``link`` (exact multi-field match rules, explained pairs) on Spark: :mod:`.api` (the operator
and its dead letters), :mod:`.settings` (the settings checked once, before any job),
:mod:`.inputs` (each rule column's kind, the rows the stages read, the windows), :mod:`.plan`
(the core a query runs, stored with its checkpoint, and the routed and pair schemas),
:mod:`.router` (the stateless stage: validate, window, route to workers), :mod:`.processor` (the
stateful stage: one key per logical worker over the shared state layer) and :mod:`.control` (the
control plane: hot blocking keys found in the workers' statistics, split by versioned decision).
The algorithm is the plain-Python core :mod:`driftjoin.linkage`; ``docs/link.md`` says how a rule
runs and why it is exact."""
