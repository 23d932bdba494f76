"""The ``driftjoin`` command line: demo, run, threshold, pack, bench.

Every command checks its flags and files before Spark starts (a mistake costs no session start)
and prints an error as one line, ``driftjoin <command>: error: <message>``: exit code 2 for a
setting to change (a flag, a key of the job file, a restart with other settings than the
checkpoint's), 1 for a failure while running, with the path of Spark's log. The line of a failed
query is its innermost driftjoin or Python error (:func:`driftjoin.spark.runtime.errors.explain_error`),
not Spark's wrapping. Spark's own output goes to a log file unless ``--verbose``, which also shows
Python tracebacks.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path
from typing import Callable

import typer
from typer.core import TyperCommand

from driftjoin.app.pack import command as pack_command
from driftjoin.distance import METRICS
from driftjoin.generators.vectors import DISTRIBUTIONS
from driftjoin.spark.runtime.errors import root_cause
from driftjoin.spark.runtime.settings import SettingError

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                  help="Exact, adaptive, distributed stream joins on Apache Spark.")

VERBOSE = typer.Option(False, "--verbose", "-v", help="Show Spark's log and the Python workers' output on the console, "
                                                      "and Python tracebacks of errors.")
LOG_LEVEL = typer.Option("WARN", help="Spark's log level (ERROR, WARN, INFO, DEBUG), in the log file or with --verbose "
                                      "on the console.")


class _Usage(TyperCommand):
    """A command whose usage line writes its required argument plainly (``run [OPTIONS] JOB.toml``)."""

    def collect_usage_pieces(self, ctx):  # noqa: ANN001, ANN201 (click's signature)
        return [p[1:-1] if p.startswith("{") and p.endswith("}") else p for p in super().collect_usage_pieces(ctx)]


class QueryFailed(Exception):
    """A query of the command failed while running (its innermost error is the message)."""


class NothingValid(Exception):
    """The job read records but none could be joined (every one a dead letter)."""


def _version(show: bool) -> None:
    if show:
        from driftjoin import __version__

        typer.echo(f"driftjoin {__version__}")
        raise typer.Exit()


@app.callback()
def main(version: bool = typer.Option(False, "--version", help="Print driftjoin's version and exit.",
                                      callback=_version, is_eager=True)) -> None:
    """Exact, adaptive, distributed stream joins on Apache Spark."""


def _exit_code(error: BaseException) -> int:
    if isinstance(error, (SettingError, ValueError, TypeError, FileNotFoundError)):
        return 2
    if type(error).__name__ in ("AnalysisException", "ParseException"):  # a query Spark cannot analyse
        return 2
    if isinstance(error, QueryFailed) or type(error).__module__.startswith(("pyspark", "py4j")):
        return 2 if root_cause(error).is_setting else 1
    return 1


def _message(error: BaseException) -> str:
    """The error's line: a setting's message as it is, else the innermost error with its name."""
    if isinstance(error, (SettingError, ValueError, TypeError, FileNotFoundError, NothingValid)):
        return str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return str(root_cause(error))


def friendly(command: str) -> Callable:
    """Turn the exceptions of a command into one line and an exit code (2: a setting, 1: a failure)."""
    def wrap(fn: Callable) -> Callable:
        @functools.wraps(fn)
        def run(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except (typer.Exit, typer.Abort, KeyboardInterrupt):
                raise
            except Exception as e:
                if kwargs.get("verbose"):
                    raise
                from driftjoin.spark.runtime import session

                typer.secho(f"driftjoin {command}: error: {_message(e)}", err=True, fg=typer.colors.RED)
                code = _exit_code(e)
                if code == 1 and session.LOG_FILE and Path(session.LOG_FILE).exists():
                    typer.echo(f"(Spark's log: {session.LOG_FILE}; --verbose shows it on the console)", err=True)
                raise typer.Exit(code=code) from None
        return run
    return wrap


@app.command()
@friendly("demo")
def demo(
    out: Path = typer.Option(Path("driftjoin-demo"), help="Folder for pairs, checkpoint, metrics and the plot (new, "
                                                          "empty, or an earlier demo's)."),
    seconds: float = typer.Option(60.0, help="How long the generated streams run (seconds, > 0)."),
    rate: int = typer.Option(500, help="Records per second per stream (>= 1)."),
    parallelism: int = typer.Option(2, help="Number of workers (>= 1)."),
    window: str = typer.Option("20 seconds", help="Tumbling processing-time window, e.g. '20 seconds'."),
    verbose: bool = VERBOSE,
    log_level: str = LOG_LEVEL,
) -> None:
    """Stream two generated vector streams through the join and summarise."""
    from driftjoin.app.demo import check_demo, run_demo

    check_demo(out, seconds=seconds, rate=rate, parallelism=parallelism, window=window)
    run_demo(out, seconds=seconds, rate=rate, parallelism=parallelism, window=window, verbose=verbose, log_level=log_level)


@app.command(cls=_Usage)
@friendly("run")
def run(config: Path = typer.Argument(..., metavar="JOB.toml", help="TOML job file (see README)."),
        timeout: float = typer.Option(0.0, help="Stop after this many seconds (0: until the input is drained, a "
                                                "bounded source is read, or Ctrl-C)."),
        available_now: bool = typer.Option(False, "--available-now", help="Read what the source holds now, then end "
                                                                          "(like trigger = \"available-now\")."),
        verbose: bool = VERBOSE,
        log_level: str = LOG_LEVEL) -> None:
    """Run a similarity-join job described by a TOML config file (and its entities, with an [entities]
    table): progress, then a summary."""
    from driftjoin.app.runner import JobConfig

    cfg = JobConfig.load(config)
    if timeout < 0:
        raise SettingError("--timeout", "must be >= 0 (seconds; 0: no limit)", timeout)
    checkpoint = cfg.checkpoint
    made = _first_missing(checkpoint) if checkpoint is not None else None
    scratch = Path(tempfile.mkdtemp(prefix="driftjoin-run-"))
    log_file = (checkpoint if checkpoint is not None else scratch) / "spark.log"
    ok = False
    try:
        _run_job(cfg, timeout=timeout, available_now=available_now, verbose=verbose, log_level=log_level,
                 log_file=log_file, scratch=scratch)
        ok = True
    finally:
        _tidy(checkpoint, made, scratch, ok)


def _run_job(cfg, *, timeout: float, available_now: bool, verbose: bool, log_level: str, log_file: Path,
             scratch: Path) -> None:
    from rich.console import Console

    from driftjoin.app.console import print_summary, watch
    from driftjoin.app.runner import start_job
    from driftjoin.spark.runtime.session import local_session

    console = Console()
    # a stream's first records wait for the first batch: pay the process's start-up before it starts
    spark = local_session(cfg.parallelism, "driftjoin-run", verbose=verbose, log_level=log_level, log_file=str(log_file),
                          warm_up=not (available_now or cfg.available_now))
    job = None
    try:
        job = start_job(spark, cfg, available_now=available_now, scratch=scratch)
        limit = timeout or float(cfg.sink.get("timeout", 0)) or None
        if not job.available_now and limit is None and cfg.expected_records is None:
            console.print("[dim]runs until Ctrl-C (--available-now ends when the input is drained; --timeout SECONDS)[/dim]")
        outcome = watch(job.queries, console, total=cfg.expected_records, limit=limit)
        if outcome.error is not None:
            raise QueryFailed(str(outcome.error)) from outcome.error
        result = print_summary(console, spark, job, outcome, "driftjoin run summary")
        if job.pairs_path:
            what = ("entity changes (Parquet; driftjoin.current_entities gives each record's entity)"
                    if job.entities else "pairs (Parquet, read with spark.read.parquet)")
            console.print(f"{what}: {job.pairs_path}")
        if result["nothing_valid"]:
            raise NothingValid(result["nothing_valid"])
        if outcome.reason == "interrupted":
            raise typer.Exit(code=130)
    finally:
        for q in job.queries if job else []:
            if q.isActive:
                q.stop()
        spark.stop()


def _first_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (None if ``path`` exists)."""
    missing = None
    for p in (path, *path.parents):
        if p.exists():
            break
        missing = p
    return missing


def _tidy(checkpoint: Path | None, made: Path | None, scratch: Path, ok: bool) -> None:
    """After a run: folders this run made for a checkpoint that no query used (it failed before
    its query started) go, and Spark's log in them moves to the scratch folder. The scratch
    folder (a console sink's checkpoint and statistics) goes after a run that ended well, and
    stays with the log after a failure."""
    from driftjoin.spark.runtime import session

    if checkpoint is not None and made is not None and made.is_dir() and not (checkpoint / "pairs").exists():
        log = checkpoint / "spark.log"
        if log.exists():
            shutil.move(str(log), scratch / "spark.log")
            if session.LOG_FILE == str(log):
                session.LOG_FILE = str(scratch / "spark.log")
        shutil.rmtree(made, ignore_errors=True)
    if ok:
        shutil.rmtree(scratch, ignore_errors=True)


@app.command()
@friendly("threshold")
def threshold(
    selectivity: float = typer.Option(..., help="Target selectivity: the fraction of pairs that join, e.g. 0.001 for 0.1%."),
    metric: str = typer.Option("angular", help=f"Distance: {', '.join(sorted(METRICS))}."),
    dim: int = typer.Option(2, help="Dimension of the generated vectors."),
    dist: str = typer.Option("uniform", help=f"Distribution of the generated vectors: {', '.join(DISTRIBUTIONS)}."),
    sample: int = typer.Option(2000, help="Vectors per side the threshold is estimated on."),
    verbose: bool = VERBOSE,
) -> None:
    """Print the threshold that gives a selectivity on generated data of the given distribution."""
    from driftjoin.generators.vectors import generate_vectors
    from driftjoin.spark.runtime.settings import choice, integer
    from driftjoin.spark.similarity.threshold import choose_threshold

    choice("--dist", dist, DISTRIBUTIONS)
    integer("--dim", dim, what="the vectors' dimension")
    integer("--sample", sample, low=2)
    a = generate_vectors(dist, seed=0, stream=0, start=0, count=sample, dim=dim)
    b = generate_vectors(dist, seed=0, stream=1, start=0, count=sample, dim=dim)
    typer.echo(f"{choose_threshold(a, b, selectivity=selectivity, metric=metric, sample=sample):.6g}")


app.command("pack")(friendly("pack")(pack_command))

bench_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, rich_markup_mode=None,
                        help="The paper's experiments (bench/ has more).")
app.add_typer(bench_app, name="bench")

MODELLED = ("throughput and p99 latency are modelled, not measured on Spark: the operators run in this process and "
            "each worker's measured time is placed on its own core")


@bench_app.command("selectivity")
@friendly("bench selectivity")
def bench_selectivity(scale: float = typer.Option(1.0, help="Multiply rates and durations (1.0 = the paper's)."),
                      workers: int = typer.Option(5, help="Number of workers."),
                      verbose: bool = VERBOSE) -> None:
    """Table 2: S3J vs ClusterJoin over selectivities 10% .. 0.1% (modelled throughput and latency)."""
    from driftjoin.app.bench import bench_selectivity as run
    from driftjoin.spark.runtime.settings import integer, number

    number("--scale", scale, low=0, low_open=True)
    integer("--workers", workers)
    run(scale, workers)
    typer.echo(MODELLED)


@bench_app.command("parallelism")
@friendly("bench parallelism")
def bench_parallelism(scale: float = typer.Option(1.0, help="Multiply rates and durations (1.0 = the paper's)."),
                      verbose: bool = VERBOSE) -> None:
    """Table 3: S3J vs ClusterJoin at parallelism 5, 10, 15, 20 (8,000 records/s, 0.1%; modelled
    throughput and latency)."""
    from driftjoin.app.bench import bench_parallelism as run
    from driftjoin.spark.runtime.settings import number

    number("--scale", scale, low=0, low_open=True)
    run(scale)
    typer.echo(MODELLED)


@bench_app.command("batch")
@friendly("bench batch")
def bench_batch(sizes: str = typer.Option("10000,100000", help="Comma-separated row counts (up to 1000000)."),
                dims: str = typer.Option("2,32,128", help="Comma-separated dimensions."),
                datasets: str = typer.Option("gaussian", help="Comma-separated data sets: gaussian, aniso, text."),
                methods: str = typer.Option("auto,grid,s3j,mllib,faiss,numpy", help="Comma-separated: auto, grid, s3j, mllib, faiss, numpy."),
                parallelism: int = typer.Option(2, help="driftjoin workers."),
                timeout: float = typer.Option(900.0, help="Seconds after which a join is cancelled and reported as a timeout."),
                limits: str = typer.Option("", help="Per-method timeouts overriding --timeout, e.g. 's3j=180,mllib=900'."),
                lsh: str = typer.Option("", help="Fixed MLlib setting 'tables,bucket' (bucket length in thresholds) instead of "
                                                 "tuning, or 'reuse': the setting an earlier run tuned on the same data set and "
                                                 "dimension (bench/results/lsh_tuning.json; tuned there if none)."),
                verbose: bool = VERBOSE) -> None:
    """driftjoin's exact static joins vs MLlib's LSH join, FAISS and a numpy join, on the same data (measured)."""
    from driftjoin.app.bench import bench_batch as run

    setting: tuple[int, float] | str | None = None
    if lsh == "reuse":
        setting = lsh
    elif lsh:
        try:
            tables, bucket = lsh.split(",")
            setting = (int(tables), float(bucket))
        except ValueError:
            raise SettingError("--lsh", "must be TABLES,BUCKET, e.g. 8,2.0, or 'reuse'", lsh) from None
    try:
        limit_map = {m.strip(): float(v) for m, v in (item.split("=") for item in limits.split(",") if item.strip())}
    except ValueError:
        raise SettingError("--limits", "must be METHOD=SECONDS,..., e.g. s3j=180,mllib=900", limits) from None
    try:
        size_list, dim_list = [int(x) for x in sizes.split(",")], [int(x) for x in dims.split(",")]
    except ValueError:
        raise SettingError("--sizes and --dims", "are comma-separated integers, e.g. --sizes 10000,100000",
                           show_value=False) from None
    run(size_list, dim_list, timeout=timeout, lsh_setting=setting, datasets=tuple(datasets.split(",")),
        methods=tuple(methods.split(",")), parallelism=parallelism, limits=limit_map)


if __name__ == "__main__":
    app(prog_name="driftjoin")
