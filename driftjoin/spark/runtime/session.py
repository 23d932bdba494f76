"""Spark session settings the stateful operators need, and a fast, quiet local session for laptops.

Measured on 2 cores (docs/architecture.md, "Measured costs"): 200 shuffle partitions make a
stateful micro-batch take 14 s, so the join sets ``spark.sql.shuffle.partitions`` to its parallelism;
``transformWithStateInPandas`` needs the RocksDB state store provider; the Python workers and
the state server talk over Unix domain sockets where the OS has them (:data:`UDS`).

Console noise, and where it comes from: the JVM's log4j console appender (startup banner,
warnings, and about 95 lines of ERROR and stack trace when a query is stopped during a batch),
the Python worker that ``transformWithStateInPandas`` starts on the driver for each query
(about ten ``Streaming TransformWithStateInPandas Python worker ...`` lines, printed to the
worker's stdout, which the JVM copies to its stderr), and py4j's Python logger. All of it goes
through the JVM's stderr or Python logging, so :func:`local_session` starts the JVM with its
stderr sent to a log file and quiets py4j, unless ``verbose=True`` (or ``DRIFTJOIN_VERBOSE=1``).
Failures still reach the caller as exceptions; the log file has the details.

:func:`prepare_session` is what every operator calls first on the session it is given (the
user's own, perhaps): it makes the Python workers run an interpreter that has driftjoin (local
mode) or fails up front saying what to set (a cluster), and attaches the query tracker that makes
the operators' statistics exactly-once (:mod:`driftjoin.spark.runtime.queries`).
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile

from pyspark import SparkContext
from pyspark.sql import SparkSession

from driftjoin.spark.runtime import jvm, queries, stats
from driftjoin.spark.runtime.connect import ConnectUnsupported, cluster_parallelism, is_connect, master
from driftjoin.spark.runtime.class_archive import jvm_options as class_archive_options
from driftjoin.spark.runtime.settings import SettingError, integer
from driftjoin.spark.sources import documents, generator, persons

log = logging.getLogger(__name__)

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
#: RocksDB changelog checkpointing: measured here it halves the state commit time per batch.
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"
#: Where the JVM's console output of the quiet session of this process goes (None: the console).
LOG_FILE: str | None = None
_PYTHON_CHECKED: set[tuple[str, str]] = set()
#: Python worker daemon that imports driftjoin's modules before forking workers.
DAEMON = "driftjoin.spark.runtime.worker_daemon"
#: Python workers and the transformWithState state server over Unix domain sockets instead of TCP
#: (Spark 4.1+): measured here, a state call 1.3-2.5x faster and a stateful batch of 2,000 state
#: calls per kind 1.3-1.6x shorter (docs/benchmarks.md, "Latency"). Only where the OS has them.
UDS = "spark.python.unix.domain.socket.enabled"


def _settings(parallelism: int, preload_workers: bool = True) -> dict[str, str]:
    """The settings every driftjoin session shares, local or on a cluster."""
    return {
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": str(parallelism),
        "spark.default.parallelism": str(parallelism),
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
        CHANGELOG: "true",
        "spark.pyspark.python": sys.executable,
        "spark.sql.execution.arrow.pyspark.enabled": "true",
        "spark.sql.session.timeZone": "UTC",
        # a loaded machine can take longer than the default 15 s to start a Python worker
        "spark.python.authenticate.socketTimeout": "120s",
        "spark.python.daemon.module": DAEMON if preload_workers else "pyspark.daemon",
        UDS: "true" if hasattr(socket, "AF_UNIX") else "false",
    }


def _start_quiet_jvm(settings: dict[str, str], log_file: str) -> None:
    """Launch the driver JVM with its stderr (log4j, Python workers' output) going to ``log_file``."""
    global LOG_FILE
    os.makedirs(os.path.dirname(os.path.abspath(log_file)), exist_ok=True)
    with open(log_file, "ab") as err:
        jvm.launch_driver_jvm(settings, err)
    LOG_FILE = log_file


def drop_quiet_log(path: str) -> None:
    """Remove a default log file at exit unless it holds an error worth reading (so a process
    that ran well leaves nothing in the temporary directory)."""
    try:
        with open(path, errors="replace") as f:
            if any(" ERROR " in line or "Traceback" in line for line in f):
                return
        os.remove(path)
    except OSError:
        pass


def _session(master: str, app_name: str, parallelism: int, conf: dict[str, str], *, verbose: bool | None,
             log_level: str, log_file: str | None, preload_workers: bool) -> SparkSession:
    """A session with :func:`_settings` and ``conf`` on ``master``, quiet unless ``verbose``."""
    if jvm.connect_environment():
        raise ConnectUnsupported("driftjoin's local_session and cluster_session (they start the driver here)",
                                 "this process is set up for Spark Connect (SPARK_REMOTE, or a Connect session "
                                 "exists); use the Connect session itself, SparkSession.builder.remote(url)"
                                 ".getOrCreate(), whose server is started with the settings in the README's "
                                 "'Spark Connect' section")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYARROW_IGNORE_TIMEZONE", "1")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    if verbose is None:
        verbose = os.environ.get("DRIFTJOIN_VERBOSE", "").lower() not in ("", "0", "false", "no")
    settings = {"spark.master": master, "spark.app.name": app_name, **_settings(parallelism, preload_workers), **conf}
    if not verbose and not jvm.driver_jvm_running():
        if log_file is None:
            log_file = os.path.join(tempfile.gettempdir(), f"driftjoin-spark-{os.getpid()}.log")
            atexit.register(drop_quiet_log, log_file)
        _start_quiet_jvm(settings, log_file)
    if not verbose:
        logging.getLogger("py4j").setLevel(logging.CRITICAL)
    builder = SparkSession.builder
    for k, v in settings.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(log_level.upper())
    generator.register(spark)
    documents.register(spark)
    persons.register(spark)
    return spark


def local_session(parallelism: int = 2, app_name: str = "driftjoin", *, cores: int | None = None,
                  driver_memory: str = "4g", verbose: bool | None = None, log_level: str = "WARN",
                  log_file: str | None = None, preload_workers: bool = True, class_archive: bool = True,
                  warm_up: bool = False, conf: dict[str, str] | None = None) -> SparkSession:
    """An embedded local Spark with settings for small, fast stateful streaming.

    UI off, adaptive execution off (it would coalesce the partitions that pin workers),
    shuffle partitions = ``parallelism``, RocksDB state store, and the Python workers started
    with this interpreter so the venv's packages are found. Quiet by default: Spark's console
    output (its log, the Python workers' output) goes to a log file, whose path is in
    :data:`LOG_FILE`. The redirection needs the JVM to be started here: in a process that
    already runs a JVM only the log level is applied, and a session that exists is returned.

    Parameters
    ----------
    parallelism:
        The number of workers of the joins: the session's shuffle partitions and default
        parallelism.
    app_name:
        Spark's application name.
    cores:
        Cores of the ``local[N]`` master (default: ``parallelism`` up to this machine's cores).
    driver_memory:
        The driver JVM's heap.
    verbose:
        Show Spark's output on the console as plain Spark does (default: the
        ``DRIFTJOIN_VERBOSE`` environment variable).
    log_level:
        Spark's log level.
    log_file:
        Where the console output goes (default ``<tmp>/driftjoin-spark-<pid>.log``, removed when
        the process exits unless it holds an error).
    preload_workers:
        Start the Python workers from :mod:`driftjoin.spark.runtime.worker_daemon`, which
        imports pandas, pyarrow and the operators once per executor instead of once per Python
        worker (a first micro-batch or a restart pays it per task otherwise).
    class_archive:
        Map the archive of Spark's classes that :mod:`driftjoin.spark.runtime.class_archive`
        builds (``scripts/setup.sh`` does), if there is one: a faster start.
    warm_up:
        Before returning, run one small streaming query of the joins' shape
        (:func:`driftjoin.spark.runtime.warmup.warm_up`), so the process's one-time start-up
        (JVM code paths, the Python workers) is paid before the first real query starts rather
        than by its first micro-batch, whose records wait for it. A few seconds longer to get
        the session; ``driftjoin demo`` and ``driftjoin run`` turn it on.
    conf:
        Further settings (e.g. ``spark.eventLog.enabled`` for a benchmark's stage times).

    Returns
    -------
    pyspark.sql.SparkSession
        The session, with driftjoin's generator sources registered (``format("driftjoin")``).

    Examples
    --------
    >>> from driftjoin import local_session
    >>> spark = local_session(2)
    >>> spark.read.format("driftjoin").option("total", 5).load().count()
    5
    """
    master = f"local[{cores or min(os.cpu_count() or 2, max(2, parallelism))}]"
    java_options = f"-XX:+UseSerialGC -XX:TieredStopAtLevel=1 {class_archive_options(class_archive)}".strip()
    settings = {"spark.driver.memory": driver_memory, "spark.driver.extraJavaOptions": java_options, **(conf or {})}
    spark = _session(master, app_name, parallelism, settings, verbose=verbose, log_level=log_level, log_file=log_file,
                     preload_workers=preload_workers)
    if warm_up:
        from driftjoin.spark.runtime.warmup import warm_up as run_warm_up

        run_warm_up(spark)
    return spark


def cluster_session(master: str, parallelism: int = 2, app_name: str = "driftjoin", *, executor_memory: str = "1g",
                    max_executors: int | None = None, conf: dict[str, str] | None = None, verbose: bool | None = None,
                    log_level: str = "WARN", log_file: str | None = None, preload_workers: bool = True) -> SparkSession:
    """The same settings on a cluster (``spark://``, ``yarn``, ``k8s://``): executors of one core
    each (the autoscaler's workers, docs/autoscaling.md), at most ``max_executors`` of them.

    The executors start Python with this interpreter's path, so they must find the same
    environment there (true on one machine; on a real cluster ship it, e.g. with
    ``spark.archives``). ``conf``: further settings (e.g. dynamic allocation's). Console and
    workers as in :func:`local_session`.
    """
    settings = {"spark.executor.cores": "1", "spark.executor.memory": executor_memory,
                "spark.pyspark.driver.python": sys.executable}
    if max_executors is not None:
        settings["spark.cores.max"] = str(max_executors)
    return _session(master, app_name, parallelism, {**settings, **(conf or {})}, verbose=verbose, log_level=log_level,
                    log_file=log_file, preload_workers=preload_workers)


def task_slots(spark: SparkSession) -> int:
    """Tasks ``spark`` runs at once: N of a ``local[N]`` master (this machine's cores for
    ``local[*]``), else Spark's default parallelism (a cluster's executor cores unless set).

    Not ``defaultParallelism`` in local mode: driftjoin's sessions set it to the number of
    workers, which may exceed the cores the tasks share."""
    url = master(spark)
    local = re.fullmatch(r"local\[(\d+|\*)(?:,\s*\d+)?\]", url)
    if local:
        return (os.cpu_count() or 1) if local.group(1) == "*" else int(local.group(1))
    if url == "local":
        return 1
    if is_connect(spark):  # no sparkContext: the driver's setting, else Spark's default (the executors' cores)
        return cluster_parallelism(spark)
    return spark.sparkContext.defaultParallelism


def default_workers(spark: SparkSession) -> int:
    """The operators' default number of workers: the session's ``spark.sql.shuffle.partitions``.

    On Spark Connect only when the session or its server sets it: a server started without it
    has Spark's default of 200, which a client did not choose and which would make 200 workers
    on two cores (duplication ratio 23 instead of 4); the default is then :func:`task_slots`, the
    cluster's cores, as a local session's. Also :func:`task_slots` when the setting is not a
    number (``auto`` on some platforms)."""
    key = "spark.sql.shuffle.partitions"
    if is_connect(spark) and key not in spark.conf.getAll:
        return task_slots(spark)
    try:
        return int(spark.conf.get(key))
    except ValueError:
        return task_slots(spark)


def worker_placement(spark: SparkSession, parallelism: int | None, partitions: int | None) -> tuple[int, int]:
    """The workers of an operator and the Spark state partitions they share, checked.

    ``parallelism`` defaults to :func:`default_workers` (``spark.sql.shuffle.partitions``, or the
    cluster's cores on a Connect session that leaves it unset); ``partitions`` to
    min(parallelism, :func:`task_slots`): each stateful task costs about 100 ms per micro-batch
    whatever it does, so more tasks than cores only raise the batch floor."""
    if parallelism is None:
        parallelism = default_workers(spark)
    parallelism = integer("parallelism", parallelism, what="the number of workers")
    if partitions is None:
        partitions = min(parallelism, task_slots(spark))
    if isinstance(partitions, bool) or not isinstance(partitions, int) or not 1 <= partitions <= parallelism:
        raise SettingError("partitions", f"must be an integer in [1, parallelism] = [1, {parallelism}] (the Spark state "
                                         "partitions the workers share)", partitions)
    return parallelism, partitions


#: What the Python workers import (driftjoin's runtime dependencies, by module name), in the
#: order a missing one is named; ``google.protobuf`` is transformWithState's (pyspark does not
#: declare it).
WORKER_MODULES = ("numpy", "pandas", "pyarrow", "google.protobuf", "scipy", "numba", "llvmlite", "sortedcontainers",
                  "rapidfuzz", "driftjoin")
#: How to give executors what they lack.
SHIP_HINT = ("ship driftjoin with its dependencies: `driftjoin pack` builds the archive and prints the spark-submit "
             "line (README, Running on a cluster), or install driftjoin into that Python")


def _probe_source() -> str:
    """The body of the check the workers run: imports :data:`WORKER_MODULES`, prints what failed."""
    return ("import importlib, sys\n"
            "missing = []\n"
            f"for name in {WORKER_MODULES!r}:\n"
            "    try:\n"
            "        importlib.import_module(name)\n"
            "    except Exception as e:\n"
            "        missing.append(f'{name} ({type(e).__name__})')\n"
            "version = '' if missing and missing[-1].startswith('driftjoin ') else sys.modules['driftjoin'].__version__\n")


def _imports_driftjoin(python: str) -> bool:
    """Whether ``python`` imports this very driftjoin and the packages its workers need."""
    here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    code = (_probe_source() + "import os\n"
            "print('ok' if not missing else 'missing', os.path.dirname(os.path.abspath(sys.modules['driftjoin'].__file__)) "
            "if 'driftjoin' in sys.modules else '')")
    try:
        run = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0 and run.stdout.split() == ["ok", here]


def _executor_probe():
    """A function that runs :func:`_probe_source` where it is called and returns (python, missing,
    driftjoin version). Built from source, so it reaches the executors by value: it must run
    where driftjoin itself cannot be imported."""
    namespace: dict = {"__name__": "driftjoin_probe"}
    exec("def probe(_):\n" + "".join(f"    {line}\n" for line in _probe_source().splitlines())  # noqa: S102
         + "    return sys.executable, missing, version\n", namespace)
    return namespace["probe"]


def ensure_workers_python(spark: SparkSession) -> None:
    """Make the Python workers able to import driftjoin, or fail before any job says what to set.

    Spark starts its Python workers with ``PYSPARK_PYTHON`` as it was when the session was made
    (``python3`` from PATH if unset; ``spark.pyspark.python`` set on a builder inside Python is
    not read, only by spark-submit), and each UDF takes the interpreter when it is created. In
    local mode the workers run on this machine, so when that interpreter lacks driftjoin (or has
    another copy of it) and the user did not choose it, the operators' UDFs use this one
    (``sys.executable``). On a cluster one task imports everything the executors need
    (:data:`WORKER_MODULES`) and the check fails with one line naming what is missing (and the
    executors' driftjoin version when it is not this one's), and how to ship it.
    """
    sc = spark.sparkContext
    python = jvm.workers_python(sc)
    key = (sc.applicationId, python)
    if key in _PYTHON_CHECKED:
        return
    if sc.master.startswith("local"):
        if python != sys.executable and not _imports_driftjoin(python):
            if os.environ.get("PYSPARK_PYTHON") == python:  # the user chose it: do not overrule, say what to change
                raise ValueError(f"the Python workers run {python} (PYSPARK_PYTHON), which cannot "
                                 f"import this driftjoin with its dependencies: set PYSPARK_PYTHON={sys.executable} "
                                 "before the session is created, or install driftjoin into that Python")
            log.info("driftjoin: Python workers will run %s (%s lacks driftjoin)", sys.executable, python)
            jvm.use_workers_python(sc, sys.executable)
    else:
        _check_executors(sc)
    _PYTHON_CHECKED.add((sc.applicationId, jvm.workers_python(sc)))


def _cause(error: BaseException) -> str:
    """The line of a failed job that says why: the JVM's failure to start a program, else the
    last Python exception line, else the first line."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    for pattern in (r".*Cannot run program.*", r"^\w+(Error|Exception): .*"):
        found = [line for line in lines if re.match(pattern, line)]
        if found:
            return found[-1][:300]
    return (lines or [type(error).__name__])[0][:300]


def _check_executors(sc: SparkContext) -> None:
    """One task imports :data:`WORKER_MODULES` on an executor; a ValueError names what failed."""
    from driftjoin import __version__

    try:
        python, missing, version = sc.parallelize([0], 1).map(_executor_probe()).collect()[0]
    except Exception as e:  # the workers did not start, e.g. no such interpreter
        raise ValueError(f"the executors' Python ({jvm.workers_python(sc)}) did not run a task ({_cause(e)}): {SHIP_HINT}") from None
    if missing:
        raise ValueError(f"the executors' Python ({python}) cannot import {', '.join(missing)}: {SHIP_HINT}")
    if version != __version__:
        raise ValueError(f"the executors' Python ({python}) has driftjoin {version}, the driver {__version__}: "
                         f"{SHIP_HINT}")
    _check_driver_runner(sc)


def _check_driver_runner(sc: SparkContext) -> None:
    """transformWithStateInPandas plans its state in a Python process that the driver's JVM
    starts with the executors' interpreter (``sc.pythonExec``, resolved from the driver's working
    directory) and a path of pyspark, ``spark.executorEnv.PYTHONPATH`` and the JVM's own
    ``PYTHONPATH``, not the py-files. Run that interpreter so here; a ValueError says what to
    change when it is not there or cannot import :data:`WORKER_MODULES`."""
    python, cwd = jvm.workers_python(sc), os.getcwd()
    if shutil.which(python) is None:
        raise ValueError(f"transformWithStateInPandas also runs the executors' Python ({python}) on the driver, and "
                         f"there is none from the driver's working directory ({cwd}): unpack the archive there too "
                         "(`mkdir -p environment && tar -xzf <archive> -C environment`, the first line `driftjoin pack` "
                         "prints), or run the driver in cluster mode")
    py_files = {os.path.basename(f) for f in sc.getConf().get("spark.submit.pyFiles", "").split(",") if f}
    inherited = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p and os.path.basename(p) not in py_files]
    path = [sc.environment.get("PYTHONPATH", ""), *inherited]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
    code = _probe_source() + "print(', '.join(missing))"
    try:
        run = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise ValueError(f"transformWithStateInPandas also runs the executors' Python ({python}) on the driver, "
                         f"which did not start there ({e})") from None
    missing = run.stdout.strip() if run.returncode == 0 else (run.stderr.strip().splitlines() or ["it failed"])[-1]
    if missing:
        raise ValueError(f"transformWithStateInPandas also runs the executors' Python ({python}) on the driver, where it "
                         f"cannot import {missing}: with --py-files also pass --conf spark.executorEnv.PYTHONPATH=<the "
                         "zip's absolute path> (the line `driftjoin pack --kind zip` prints), or install driftjoin there")


def prepare_session(spark: SparkSession, metrics_dir: str | None = None, *, need_metrics: bool = False) -> str | None:
    """What every driftjoin operator does first on the session of its input.

    Checks the Python workers (:func:`ensure_workers_python`); with a ``metrics_dir`` (or
    ``need_metrics``) attaches the query tracker that makes statistics exactly-once and the writer
    of each committed batch's timings (:func:`driftjoin.spark.runtime.stats.track_batches`). Returns the
    metrics directory to use: ``metrics_dir``, or with ``need_metrics`` and none given a default
    inside the query's checkpoint (local mode; :func:`driftjoin.spark.runtime.queries.default_metrics_dir`).
    """
    if not is_connect(spark):  # Spark Connect: the server's settings choose its workers' Python
        ensure_workers_python(spark)
    if metrics_dir is None and need_metrics:
        return queries.default_metrics_dir(spark)
    if metrics_dir is not None:
        queries.track(spark, metrics_dir)
        stats.track_batches(spark, metrics_dir)
    return metrics_dir


#: The oldest Spark whose transformWithState state server reads each request whole: 4.0.0 and 4.0.1
#: read it with ``InputStream.read``, which may return part of a large one (SPARK-53870), and a
#: state write of a few hundred kB then fails ("invalid pickle opcode"; docs/deployment.md, Versions).
MIN_SPARK = (4, 0, 2)


def require_spark(version: str) -> None:
    """Refuse a Spark older than :data:`MIN_SPARK` (``version``: ``spark.version``, the JVM's, which
    on a cluster or a Connect server may be older than this process's pyspark).

    A version whose first three numbers cannot be read (a vendor's own scheme) is let through.

    Parameters
    ----------
    version:
        The Spark version, e.g. ``"4.0.1"`` or ``"4.1.0-SNAPSHOT"``.

    Examples
    --------
    >>> require_spark("4.3.0")
    >>> require_spark("4.0.1")
    Traceback (most recent call last):
    ...
    ValueError: Spark 4.0.1 can lose part of a large state write (SPARK-53870): driftjoin's stateful operators need Spark 4.0.2 or later; upgrade the cluster's Spark (or the pyspark of local mode)
    """
    parts = re.match(r"(\d+)\.(\d+)\.(\d+)", version)
    if parts is not None and tuple(map(int, parts.groups())) < MIN_SPARK:
        raise ValueError(f"Spark {version} can lose part of a large state write (SPARK-53870): driftjoin's "
                         f"stateful operators need Spark {'.'.join(map(str, MIN_SPARK))} or later; upgrade the "
                         "cluster's Spark (or the pyspark of local mode)")


def prepare_for_stateful(spark: SparkSession, parallelism: int) -> None:
    """Set what a driftjoin stateful query needs on an existing session (before it starts).

    Refuses a Spark older than :data:`MIN_SPARK` (:func:`require_spark`). The number of state
    partitions is fixed by the checkpoint on the first run; a restarted query keeps the value it
    was started with whatever this sets.
    """
    require_spark(spark.version)
    spark.conf.set("spark.sql.shuffle.partitions", str(parallelism))
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    if spark.conf.get("spark.sql.streaming.stateStore.providerClass", "") != ROCKSDB:
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB)
        spark.conf.set(CHANGELOG, "true")
