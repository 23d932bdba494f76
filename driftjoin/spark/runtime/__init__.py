"""What every Spark operator stands on; imports no operator package.

Sessions and the Python workers' interpreter (:mod:`.session`, :mod:`.worker_daemon`,
:mod:`.class_archive`), the shared state layer (:mod:`.state`), the plan stored with the
checkpoint (:mod:`.plan_guard`), key placement (:mod:`.keys`), input columns (:mod:`.columns`,
:mod:`.vectors`), static runs (:mod:`.static`), the query a task runs in (:mod:`.queries`),
per-batch statistics (:mod:`.stats`), versioned decisions of the control plane
(:mod:`.decisions`) and the one query listener per session (:mod:`.hub`).
"""
