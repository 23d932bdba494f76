"""What every Spark operator stands on; imports no operator package.

- Sessions and the Python workers: :mod:`.session` (local and cluster sessions, the checks of the
  workers' Python, the settings a stateful query needs), :mod:`.worker_daemon` (the workers'
  daemon with driftjoin's imports done once), :mod:`.warmup` (one small query of the joins' shape
  that pays a new process's start-up before the user's stream starts), :mod:`.class_archive` (the driver JVM's class-data
  archive), :mod:`.connect` (what differs on a Spark Connect session), :mod:`.jvm` (every reach
  into PySpark's and Py4J's private names, in one module).
- Settings: :mod:`.settings` (the checkers each operator's settings class builds on, and the one
  error, ``SettingError``).
- Running the operators: :mod:`.stages` (a stateful stage on a stream or on a static DataFrame,
  the one "both streaming or both static" check), :mod:`.static` (the one static adapter, state in
  memory), :mod:`.processor` (the base of every stateful processor: the batch preamble, the plan
  check, the refusal of an old checkpoint), :mod:`.keys` (key placement), :mod:`.heartbeats` (rows
  that reach every key), :mod:`.columns` (ids and times, read alike by every operator),
  :mod:`.vectors` (vector validation and bytes), :mod:`.background` (a Spark job in a second
  thread while the driver goes on).
- The plan of a query: :mod:`.plan_guard` (the base of every plan and its guard, in the state),
  :mod:`.plan_store` (the same plans beside the checkpoint, checked when a query starts).
- State: :mod:`.state` (the shared state layer: chunks, a process cache, old module names),
  :mod:`.relocate` (a moved or copied checkpoint made to name its own state schema files again).
- The control plane: :mod:`.queries` (the query a task runs in, the one reader of Spark's task
  context), :mod:`.stats` (per-batch statistics counted exactly once), :mod:`.decisions`
  (versioned decisions), :mod:`.hub` (the one query listener per session), :mod:`.files` (files
  shared by driver and tasks, one atomic writer), :mod:`.progress` (every progress report of a
  query, not only the last 100).
- Failures: :mod:`.errors` (the one line of a failed query).
"""
