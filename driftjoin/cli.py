"""The ``driftjoin`` command line: demo, run, threshold."""

from __future__ import annotations

import time
from pathlib import Path

import typer

app = typer.Typer(add_completion=False, help="Exact, adaptive, distributed stream joins on Apache Spark.")


@app.command()
def demo(
    out: Path = typer.Option(Path("driftjoin-demo"), help="Folder for pairs, checkpoint, metrics and the plot."),
    seconds: float = typer.Option(60.0, help="How long the generated streams run."),
    rate: int = typer.Option(500, help="Records per second per stream."),
    parallelism: int = typer.Option(2, help="Number of workers."),
    window: str = typer.Option("20 seconds", help="Tumbling processing-time window."),
) -> None:
    """Stream two generated vector streams through the join and summarise."""
    from driftjoin.demo import run_demo

    run_demo(out, seconds=seconds, rate=rate, parallelism=parallelism, window=window)


@app.command()
def run(config: Path = typer.Argument(..., help="TOML job file (see README)."),
        timeout: float = typer.Option(0.0, help="Stop after this many seconds (0: until the source ends or Ctrl-C).")) -> None:
    """Run a similarity-join job described by a TOML config file."""
    from driftjoin.runner import JobConfig, start_job
    from driftjoin.spark.session import local_session

    try:
        cfg = JobConfig.load(config)
    except ValueError as e:
        raise typer.BadParameter(str(e)) from None
    spark = local_session(int(cfg.join.get("parallelism", 2)), "driftjoin-run")
    queries = start_job(spark, cfg)
    limit = timeout or float(cfg.sink.get("timeout", 0)) or None
    start = time.time()
    try:
        while any(q.isActive for q in queries) and (limit is None or time.time() - start < limit):
            time.sleep(1.0)
            for q in queries:
                if q.exception():
                    raise typer.Exit(code=1)
    finally:
        for q in queries:
            q.stop()
        spark.stop()


@app.command()
def threshold(
    selectivity: float = typer.Option(..., help="Target selectivity, e.g. 0.001 for 0.1%."),
    metric: str = typer.Option("angular"),
    dim: int = typer.Option(2),
    dist: str = typer.Option("uniform"),
    sample: int = typer.Option(2000),
) -> None:
    """Print the threshold that gives a selectivity on generated data of the given distribution."""
    from driftjoin.generators.vectors import generate_vectors
    from driftjoin.selectivity import choose_threshold

    a = generate_vectors(dist, seed=0, stream=0, start=0, count=sample, dim=dim)
    b = generate_vectors(dist, seed=0, stream=1, start=0, count=sample, dim=dim)
    typer.echo(f"{choose_threshold(a, b, selectivity=selectivity, metric=metric, sample=sample):.6g}")


bench_app = typer.Typer(add_completion=False, help="The paper's experiments (bench/ has more).")
app.add_typer(bench_app, name="bench")


@bench_app.command("selectivity")
def bench_selectivity(scale: float = typer.Option(1.0, help="Multiply rates and durations (1.0 = the paper's)."),
                      workers: int = typer.Option(5)) -> None:
    """Table 2: S3J vs ClusterJoin over selectivities 10% .. 0.1%."""
    from driftjoin.benchmarks import bench_selectivity as run

    run(scale, workers)


@bench_app.command("parallelism")
def bench_parallelism(scale: float = typer.Option(1.0, help="Multiply rates and durations (1.0 = the paper's).")) -> None:
    """Table 3: S3J vs ClusterJoin at parallelism 5, 10, 15, 20 (8,000 records/s, 0.1%)."""
    from driftjoin.benchmarks import bench_parallelism as run

    run(scale)


@bench_app.command("batch")
def bench_batch(sizes: str = typer.Option("10000,100000", help="Comma-separated row counts (up to 1000000)."),
                dims: str = typer.Option("2,32,128", help="Comma-separated dimensions."),
                datasets: str = typer.Option("gaussian", help="Comma-separated data sets: gaussian, aniso, text."),
                methods: str = typer.Option("auto,grid,s3j,mllib,faiss,numpy", help="Comma-separated: auto, grid, s3j, mllib, faiss, numpy."),
                parallelism: int = typer.Option(2, help="driftjoin workers."),
                timeout: float = typer.Option(900.0, help="Seconds after which a join is cancelled and reported as a timeout."),
                lsh: str = typer.Option("", help="Fixed MLlib setting 'tables,bucket' (bucket length in thresholds) instead of tuning.")) -> None:
    """driftjoin's exact static joins vs MLlib's LSH join, FAISS and a numpy join, on the same data."""
    from driftjoin.benchmarks import bench_batch as run

    setting = None
    if lsh:
        tables, bucket = lsh.split(",")
        setting = (int(tables), float(bucket))
    run([int(x) for x in sizes.split(",")], [int(x) for x in dims.split(",")], timeout=timeout, lsh_setting=setting,
        datasets=tuple(datasets.split(",")), methods=tuple(methods.split(",")), parallelism=parallelism)


if __name__ == "__main__":
    app()
