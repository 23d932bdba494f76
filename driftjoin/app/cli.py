"""The ``driftjoin`` command line: demo, run, threshold, bench.

Errors print one line, ``driftjoin <command>: error: <message>``, and exit with 2 for a usage or
configuration error (fix the command or the file) or 1 for a failure while running; Spark's own
output goes to a log file unless ``--verbose`` (its path is printed on failure). ``--verbose``
also shows Python tracebacks.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Callable

import typer

app = typer.Typer(add_completion=False, pretty_exceptions_enable=False,
                  help="Exact, adaptive, distributed stream joins on Apache Spark.")

VERBOSE = typer.Option(False, "--verbose", "-v", help="Show Spark's log and the Python workers' output on the console, and tracebacks.")
LOG_LEVEL = typer.Option("WARN", help="Spark's log level (ERROR, WARN, INFO, DEBUG), in the log file or with --verbose on the console.")


class ConfigError(ValueError):
    """A problem the user fixes in the command line or the job file (exit code 2)."""


class RuntimeFailure(Exception):
    """A query failed while running (exit code 1)."""


def short_message(error: BaseException) -> str:
    """The one line of an exception a user needs: for Spark errors the first line of the cause
    (the Python worker's exception line, not its traceback, nor the JVM stack)."""
    text = str(error).split("JVM stacktrace:")[0].strip()
    if "Traceback (most recent call last)" in text:
        tail = text.split("Traceback (most recent call last)")[-1]
        lines = [ln.strip() for ln in tail.splitlines() if ln.strip() and not ln.startswith((" ", "\t"))]
        if lines:
            return lines[-1].split(" SQLSTATE")[0]
    first = next((ln.strip() for ln in text.splitlines() if ln.strip()), type(error).__name__)
    return first if first != type(error).__name__ else f"{type(error).__name__}: {error!r}"


def _is_config_error(error: BaseException) -> bool:
    try:
        from pyspark.errors import AnalysisException
    except ImportError:  # pragma: no cover - pyspark is a dependency
        AnalysisException = ()  # type: ignore[assignment]  # noqa: N806
    return isinstance(error, (ValueError, TypeError, FileNotFoundError, AnalysisException))


def friendly(command: str) -> Callable:
    """Turn exceptions of a command into one line and an exit code (2: configuration, 1: runtime)."""
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

                typer.secho(f"driftjoin {command}: error: {short_message(e)}", err=True, fg=typer.colors.RED)
                code = 2 if _is_config_error(e) else 1
                if code == 1 and session.LOG_FILE:
                    typer.echo(f"(Spark's log: {session.LOG_FILE}; --verbose shows it on the console)", err=True)
                raise typer.Exit(code=code) from None
        return run
    return wrap


@app.command()
@friendly("demo")
def demo(
    out: Path = typer.Option(Path("driftjoin-demo"), help="Folder for pairs, checkpoint, metrics and the plot (new, empty, or an earlier demo's)."),
    seconds: float = typer.Option(60.0, help="How long the generated streams run."),
    rate: int = typer.Option(500, help="Records per second per stream."),
    parallelism: int = typer.Option(2, help="Number of workers."),
    window: str = typer.Option("20 seconds", help="Tumbling processing-time window."),
    verbose: bool = VERBOSE,
    log_level: str = LOG_LEVEL,
) -> None:
    """Stream two generated vector streams through the join and summarise."""
    from driftjoin.app.demo import run_demo

    run_demo(out, seconds=seconds, rate=rate, parallelism=parallelism, window=window, verbose=verbose, log_level=log_level)


@app.command()
@friendly("run")
def run(config: Path = typer.Argument(..., help="TOML job file (see README)."),
        timeout: float = typer.Option(0.0, help="Stop after this many seconds (0: until the input is drained, a bounded source is read, or Ctrl-C)."),
        available_now: bool = typer.Option(False, "--available-now", help="Read what the source holds now, then end (like trigger = \"available-now\")."),
        verbose: bool = VERBOSE,
        log_level: str = LOG_LEVEL) -> None:
    """Run a similarity-join job described by a TOML config file: progress, then a summary."""
    from rich.console import Console

    from driftjoin.app.console import print_summary, watch
    from driftjoin.app.runner import JobConfig, start_job
    from driftjoin.spark.runtime.session import local_session

    cfg = JobConfig.load(config)
    console = Console()
    log_file = str(cfg.checkpoint / "spark.log") if cfg.checkpoint else None
    spark = local_session(int(cfg.join.get("parallelism", 2)), "driftjoin-run", verbose=verbose, log_level=log_level,
                          log_file=log_file)
    job = None
    try:
        job = start_job(spark, cfg, available_now=available_now)
        limit = timeout or float(cfg.sink.get("timeout", 0)) or None
        if not job.available_now and limit is None and cfg.expected_records is None:
            console.print("[dim]runs until Ctrl-C (--available-now ends when the input is drained; --timeout SECONDS)[/dim]")
        outcome = watch(job.queries, console, total=cfg.expected_records, limit=limit)
        if outcome.error is not None:
            raise RuntimeFailure(short_message(outcome.error))
        extra: dict[str, object] = {"ended": outcome.reason, "micro-batches": outcome.batches, "records read": outcome.records}
        if job.pairs_path:
            extra["pairs in the sink"] = _count(spark, job.pairs_path)
        if job.dead_letters_path:
            extra["dead letters"] = _count(spark, job.dead_letters_path)
        print_summary(console, job.metrics_dir, "driftjoin run summary", extra)
        if job.pairs_path:
            console.print(f"pairs (Parquet, read with spark.read.parquet): {job.pairs_path}")
        if outcome.reason == "interrupted":
            raise typer.Exit(code=130)
    finally:
        for q in job.queries if job else []:
            if q.isActive:
                q.stop()
        spark.stop()


def _count(spark, path: str) -> int:
    """Rows of a Parquet sink, read through Spark (its log ignores files of failed attempts)."""
    try:
        return spark.read.parquet(path).count()
    except Exception:  # nothing written yet
        return 0


@app.command()
@friendly("threshold")
def threshold(
    selectivity: float = typer.Option(..., help="Target selectivity, e.g. 0.001 for 0.1%."),
    metric: str = typer.Option("angular"),
    dim: int = typer.Option(2),
    dist: str = typer.Option("uniform"),
    sample: int = typer.Option(2000),
) -> None:
    """Print the threshold that gives a selectivity on generated data of the given distribution."""
    from driftjoin.generators.vectors import generate_vectors
    from driftjoin.spark.similarity.threshold import choose_threshold

    a = generate_vectors(dist, seed=0, stream=0, start=0, count=sample, dim=dim)
    b = generate_vectors(dist, seed=0, stream=1, start=0, count=sample, dim=dim)
    typer.echo(f"{choose_threshold(a, b, selectivity=selectivity, metric=metric, sample=sample):.6g}")


bench_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False, help="The paper's experiments (bench/ has more).")
app.add_typer(bench_app, name="bench")


@bench_app.command("selectivity")
@friendly("bench selectivity")
def bench_selectivity(scale: float = typer.Option(1.0, help="Multiply rates and durations (1.0 = the paper's)."),
                      workers: int = typer.Option(5)) -> None:
    """Table 2: S3J vs ClusterJoin over selectivities 10% .. 0.1%."""
    from driftjoin.app.bench import bench_selectivity as run

    run(scale, workers)


@bench_app.command("parallelism")
@friendly("bench parallelism")
def bench_parallelism(scale: float = typer.Option(1.0, help="Multiply rates and durations (1.0 = the paper's).")) -> None:
    """Table 3: S3J vs ClusterJoin at parallelism 5, 10, 15, 20 (8,000 records/s, 0.1%)."""
    from driftjoin.app.bench import bench_parallelism as run

    run(scale)


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
                                                 "dimension (bench/results/lsh_tuning.json; tuned there if none).")) -> None:
    """driftjoin's exact static joins vs MLlib's LSH join, FAISS and a numpy join, on the same data."""
    from driftjoin.app.bench import bench_batch as run

    setting: tuple[int, float] | str | None = None
    if lsh == "reuse":
        setting = lsh
    elif lsh:
        try:
            tables, bucket = lsh.split(",")
            setting = (int(tables), float(bucket))
        except ValueError:
            raise ConfigError(f"--lsh {lsh!r}: write it as TABLES,BUCKET, e.g. 8,2.0, or 'reuse'") from None
    try:
        limit_map = {m.strip(): float(v) for m, v in (item.split("=") for item in limits.split(",") if item.strip())}
    except ValueError:
        raise ConfigError(f"--limits {limits!r}: write it as METHOD=SECONDS,..., e.g. s3j=180,mllib=900") from None
    try:
        size_list, dim_list = [int(x) for x in sizes.split(",")], [int(x) for x in dims.split(",")]
    except ValueError:
        raise ConfigError("--sizes and --dims are comma-separated integers, e.g. --sizes 10000,100000") from None
    run(size_list, dim_list, timeout=timeout, lsh_setting=setting, datasets=tuple(datasets.split(",")),
        methods=tuple(methods.split(",")), parallelism=parallelism, limits=limit_map)


if __name__ == "__main__":
    app(prog_name="driftjoin")
