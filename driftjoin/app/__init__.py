"""Applications on top of the library: the ``driftjoin`` CLI, the demo, TOML jobs, the console,
the statistics reports and the paper-table benchmarks."""
