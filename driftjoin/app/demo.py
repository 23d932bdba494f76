"""``driftjoin demo``: two generated vector streams through the S3J join on an embedded Spark.

Streams for about ``seconds`` seconds, shows progress, then prints the paper's metrics (records
in, pairs out, duplication ratio, comparisons ratio, p50/p99 latency per worker) and writes a PNG
of per-worker p99 latency over time.

The output folder is the demo's own: it is created with a marker file, and a later demo run
replaces only the entries the demo writes (``pairs``, ``checkpoint``, ``metrics``,
``latency.png``, ``spark.log``). A folder that holds anything else and has no marker is refused:
the demo never deletes what it did not create.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from types import SimpleNamespace

from rich.console import Console

from driftjoin.spark.runtime.settings import SettingError, integer, number
from driftjoin.spark.similarity.settings import SimilaritySettings

#: Marks a folder made by the demo; only the demo's own entries in it are ever replaced.
MARKER = ".driftjoin-demo"
OWN_ENTRIES = ("pairs", "checkpoint", "metrics", "latency.png", "spark.log")


def prepare_out_dir(out_dir: Path) -> None:
    """Make ``out_dir`` ready for a demo run without touching anything the demo did not create.

    Raises ``ValueError`` for a file, or for a folder without the demo's marker that holds
    anything but the demo's own entries (a folder of an older demo run is taken as the demo's).
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} is a file; give a folder (new or empty) for the demo's output")
    if out_dir.exists():
        entries = sorted(p.name for p in out_dir.iterdir())
        foreign = [e for e in entries if e not in OWN_ENTRIES]
        if foreign and MARKER not in entries:
            shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
            raise ValueError(f"--out {out_dir} already holds files the demo did not create ({shown}); "
                             "give a new or empty folder (nothing was deleted)")
        for name in OWN_ENTRIES:
            path = out_dir / name
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path)
            elif path.exists() or path.is_symlink():
                path.unlink()
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MARKER).write_text("made by `driftjoin demo`: a new demo run replaces " + ", ".join(OWN_ENTRIES)
                                  + " here and leaves everything else alone\n")


def check_demo(out_dir: Path, *, seconds: float, rate: int, parallelism: int, window: str,
               selectivity: float = 0.001) -> None:
    """Check the demo's flags before Spark starts (:class:`~driftjoin.spark.runtime.settings.SettingError`
    naming the flag)."""
    integer("--rate", rate, what="records per second per stream")
    number("--seconds", seconds, low=0, low_open=True, what="how long the streams run")
    if out_dir.exists() and not out_dir.is_dir():
        raise SettingError("--out", "is a file; give a folder (new or empty) for the demo's output", str(out_dir))
    try:
        SimilaritySettings.check({"threshold": selectivity, "parallelism": parallelism, "window": window, "dim": 2,
                                  "ingest_col": "ts"})
    except SettingError as e:
        raise e.spelled(f"--{e.name}") from None


#: The demo's processing-time trigger (seconds).
TRIGGER_SECONDS = 1.0


def start_demo_query(spark, out_dir: Path, *, seconds: float = 60.0, rate: int = 500, parallelism: int = 2,
                     selectivity: float = 0.001, window: str = "20 seconds", dist: str = "uniform"):
    """Start the demo's streaming query on ``spark``: two generated streams of ``rate`` records/s
    for ``seconds`` through the S3J join, pairs to ``out_dir/pairs`` (Parquet), statistics to
    ``out_dir/metrics``; returns the started query (``bench/latency.py`` measures this one)."""
    from driftjoin.spark.similarity.api import similarity_join

    total = int(rate * seconds)

    def stream(i: int):
        return (spark.readStream.format("driftjoin").option("stream", i).option("rate", rate).option("dim", 2)
                .option("dist", dist).option("seed", 7).option("total", total).load())

    # 2-D uniform directions: angular distance is uniform on [0, 1], so threshold = selectivity
    pairs = similarity_join(stream(0), stream(1), threshold=selectivity, metric="angular", window=window,
                            parallelism=parallelism, dim=2, ingest_col="ts", metrics_dir=str(out_dir / "metrics"))
    return (pairs.writeStream.format("parquet").option("path", str(out_dir / "pairs"))
            .option("checkpointLocation", str(out_dir / "checkpoint"))
            .trigger(processingTime=f"{TRIGGER_SECONDS:g} second").start())


def run_demo(out_dir: Path, seconds: float = 60.0, rate: int = 500, parallelism: int = 2,
             selectivity: float = 0.001, window: str = "20 seconds", dist: str = "uniform",
             verbose: bool = False, log_level: str = "WARN") -> dict:
    """Run the demo into ``out_dir`` and print its summary; returns the summary's rows."""
    from driftjoin.app.console import count_rows, print_summary, watch
    from driftjoin.app.report import plot_latency
    from driftjoin.spark.runtime.session import local_session

    check_demo(out_dir, seconds=seconds, rate=rate, parallelism=parallelism, window=window, selectivity=selectivity)
    console = Console()
    prepare_out_dir(out_dir)
    console.print(f"[bold]driftjoin demo[/bold]: 2 streams x {rate} records/s, 2-D {dist}, angular distance, "
                  f"selectivity {selectivity:.2%}, {parallelism} workers, {window} windows, {seconds:g} s")
    # warm_up: the process's one-time start-up is paid before the streams start, not by their records
    spark = local_session(parallelism, "driftjoin-demo", verbose=verbose, log_level=log_level,
                          log_file=str(out_dir / "spark.log"), warm_up=True)
    total = int(rate * seconds)
    metrics = str(out_dir / "metrics")
    query = start_demo_query(spark, out_dir, seconds=seconds, rate=rate, parallelism=parallelism,
                             selectivity=selectivity, window=window, dist=dist)
    try:
        outcome = watch([query], console, total=2 * total, limit=seconds * 4 + 120)
        if outcome.error is not None:
            raise outcome.error
        job = SimpleNamespace(queries=[query], metrics_dir=metrics, pairs_path=str(out_dir / "pairs"),
                              dead_letters_path=None, available_now=False, trigger_seconds=TRIGGER_SECONDS)
        result = print_summary(console, spark, job, outcome, "driftjoin demo summary")
        plot = plot_latency(metrics, out_dir / "latency.png", f"driftjoin demo: p99 latency per worker ({parallelism} workers)")
        console.print(f"latency plot: {plot}\npairs (Parquet, read with spark.read.parquet): {out_dir / 'pairs'}")
        return {**result, "plot": str(plot), "pairs_in_sink": count_rows(spark, str(out_dir / "pairs")),
                "ended": outcome.reason}
    finally:
        spark.stop()
