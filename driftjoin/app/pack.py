"""``driftjoin pack``: the artifact that ships driftjoin to executors that do not have it, and
the spark-submit line that uses it.

Spark ships Python code to executors in two ways; this builds one artifact for each:

- ``archive`` (default): a packed virtual environment, ``driftjoin-<version>-env.tar.gz``. A
  venv made from this Python holds driftjoin and its runtime dependencies at the versions this
  driver runs (:func:`runtime_pins`: numpy, pandas, pyarrow, protobuf, scipy, numba, llvmlite,
  sortedcontainers, rapidfuzz; not pyspark, whose workers come from the cluster's own Spark), the
  compiled ``.pyc`` of every module, and numba's compiled kernels in their on-disk cache, so an executor
  loads them instead of compiling them in its first micro-batch. ``--archives
  <file>#environment`` unpacks it in every executor's working directory and
  ``spark.pyspark.python=./environment/bin/python`` runs it. As with venv-pack, the
  environment's ``python`` is a link to the interpreter it was made from: the executors need
  that Python at the same path (the same image or OS package, the usual case on YARN and
  Kubernetes), and the kernels are compiled for this machine's CPU (an executor with another
  CPU compiles them on first use, as without the cache).
- ``zip``: driftjoin alone, ``driftjoin-<version>.zip``, for ``--py-files`` when the executors'
  Python already has the dependencies. PySpark puts only ``.zip``, ``.egg`` and ``.jar``
  py-files on the executors' path (a wheel is copied but never importable). numba caches the
  kernels of a zipped module under a hash of the zip's path, which is new in every
  application, so each executor compiles them in its first micro-batch.

The driver needs driftjoin too, and so does a Python process the driver's JVM starts itself
(``transformWithStateInPandas`` plans its state there, with ``spark.pyspark.python``): the
printed line therefore unpacks the archive beside the job (``./environment`` resolves from the
driver's working directory as from the executors') or, for the zip, passes its absolute path in
``spark.executorEnv.PYTHONPATH``, which Spark also gives the driver's Python workers (on an
executor the path does not exist and the shipped copy, first on the path, is used).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import typer

import driftjoin

#: What Spark calls the unpacked archive in each working directory (``--archives x#ENVIRONMENT``).
ENVIRONMENT = "environment"
#: Modules whose numba kernels the archive carries compiled (each has a ``warm_up()``).
KERNELS = ("driftjoin.s3j.kernels", "driftjoin.swoop.fast")


@dataclass(frozen=True)
class Packed:
    """A built artifact and how to submit a job with it."""

    path: Path
    #: Shell commands, in order: preparation on the submitting machine, then spark-submit.
    commands: list[str]


def runtime_pins() -> list[str]:
    """driftjoin's runtime requirements (no extras) pinned to the versions installed here.

    The executors then run exactly what the driver runs. Raises a ValueError when driftjoin is
    not installed (imported from a path without its metadata): its requirements are unknown.

    >>> any(p.startswith("numpy==") for p in runtime_pins())
    True
    """
    try:
        requires = metadata.requires("driftjoin") or []
    except metadata.PackageNotFoundError:
        raise ValueError("driftjoin pack needs an installed driftjoin (pip install driftjoin), not one imported "
                         "from a path: its package metadata lists the dependencies to pack") from None
    pins = []
    for requirement in requires:
        if "extra ==" in requirement:
            continue
        name = re.match(r"[A-Za-z0-9._-]+", requirement).group(0)
        pins.append(f"{name}=={metadata.version(name)}")
    return pins


def package_dir() -> Path:
    """The folder of the driftjoin package this process runs."""
    return Path(driftjoin.__file__).resolve().parent


def _copy_package(dest: Path) -> None:
    shutil.copytree(package_dir(), dest / "driftjoin", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def build_zip(out: Path) -> Path:
    """``out/driftjoin-<version>.zip``: the driftjoin package (pure Python), for ``--py-files``.

    >>> import tempfile
    >>> build_zip(Path(tempfile.mkdtemp())).name.endswith(".zip")
    True
    """
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"driftjoin-{driftjoin.__version__}.zip"
    src = package_dir()
    with zipfile.ZipFile(target.with_suffix(".zip.part"), "w", zipfile.ZIP_DEFLATED) as z:
        for path in sorted(src.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                z.write(path, Path("driftjoin") / path.relative_to(src))
    target.with_suffix(".zip.part").replace(target)
    return target


def base_python() -> str:
    """The interpreter this one was made from (a venv's base): what a packed venv links to."""
    return os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)


def build_archive(out: Path, python: str | None = None, *, compile_kernels: bool = True, log=print) -> Path:
    """``out/driftjoin-<version>-env.tar.gz``: a venv of ``python`` (default :func:`base_python`)
    with driftjoin and :func:`runtime_pins`, compiled modules and, with ``compile_kernels``,
    numba's kernels in its cache. Takes a minute or two (pip, numba, gzip).

    ``log``: progress lines (each step and its size).
    """
    python = python or base_python()
    out.mkdir(parents=True, exist_ok=True)
    target = out / f"driftjoin-{driftjoin.__version__}-env.tar.gz"
    pins = runtime_pins()
    with tempfile.TemporaryDirectory(prefix="driftjoin-pack-") as tmp:
        venv = Path(tmp) / ENVIRONMENT
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "NUMBA_CACHE_DIR", "VIRTUAL_ENV")}
        log(f"venv of {python}, installing {' '.join(pins)}")
        subprocess.run([python, "-m", "venv", str(venv)], check=True, env=env)
        vpy = venv / "bin" / "python"
        if pins:
            subprocess.run([str(vpy), "-m", "pip", "install", "--quiet", "--no-input", "--disable-pip-version-check",
                            *pins], check=True, env=env)
        subprocess.run([str(vpy), "-m", "pip", "uninstall", "--quiet", "--yes", "pip", "setuptools"], check=True, env=env)
        site = Path(subprocess.run([str(vpy), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], check=True,
                                   env=env, capture_output=True, text=True).stdout.strip())
        _copy_package(site)
        subprocess.run([str(vpy), "-m", "compileall", "-q", str(site / "driftjoin")], check=True, env=env)
        if compile_kernels:
            log("compiling the numba kernels into the environment's cache")
            code = "; ".join(f"import {m}; {m}.warm_up()" for m in KERNELS)
            subprocess.run([str(vpy), "-c", code], check=True, env=env, cwd=tmp)
        log(f"packing {_size(venv) / 1e6:.0f} MB")
        part = target.with_name(target.name + ".part")
        with tarfile.open(part, "w:gz", compresslevel=6) as tar:
            for entry in sorted(venv.iterdir()):
                tar.add(entry, arcname=entry.name)
        part.replace(target)
    return target


def _size(folder: Path) -> int:
    return sum(p.lstat().st_size for p in folder.rglob("*"))


def submit_commands(kind: str, artifact: Path, *, master: str, job: str, python: str | None = None,
                    driver_python: str | None = None) -> list[str]:
    """The commands that run ``job`` on ``master`` with ``artifact`` (see the module docstring).

    ``python`` (zip only): the executors' Python, which has the dependencies (default: the
    cluster's ``spark.pyspark.python`` / ``PYSPARK_PYTHON``). ``driver_python``: the driver's
    Python in client mode (default: the archive's environment, for the zip the cluster's default).

    >>> submit_commands("zip", Path("/d/driftjoin-0.1.0.zip"), master="yarn", job="job.py")[-1].split()[:4]
    ['spark-submit', '--master', 'yarn', '--py-files']
    """
    artifact = artifact.resolve()
    q = shlex.quote
    driver = f" --conf spark.pyspark.driver.python={q(driver_python)}" if driver_python else ""
    if kind == "archive":
        return [f"mkdir -p {ENVIRONMENT} && tar -xzf {q(str(artifact))} -C {ENVIRONMENT}",
                f"spark-submit --master {q(master)} --archives {q(f'{artifact}#{ENVIRONMENT}')} "
                f"--conf spark.pyspark.python=./{ENVIRONMENT}/bin/python{driver} {q(job)}"]
    if kind == "zip":
        chosen = f" --conf spark.pyspark.python={q(python)}" if python else ""
        return [f"spark-submit --master {q(master)} --py-files {q(str(artifact))} "
                f"--conf spark.executorEnv.PYTHONPATH={q(str(artifact))}{chosen}{driver} {q(job)}"]
    raise ValueError(f"--kind must be 'archive' or 'zip', got {kind!r}")


def pack(kind: str = "archive", out: Path = Path("dist"), *, master: str = "spark://HOST:7077", job: str = "my_job.py",
         python: str | None = None, driver_python: str | None = None, compile_kernels: bool = True,
         log=print) -> Packed:
    """Build the ``kind`` artifact under ``out`` and return it with the commands that submit a job with it.

    Parameters
    ----------
    kind
        ``"archive"``: a packed venv for ``--archives`` (driftjoin, its runtime dependencies,
        numba's kernels compiled; a minute or two). ``"zip"``: driftjoin alone for ``--py-files``,
        for executors whose Python has the dependencies.
    out
        The folder the artifact is written to (made if missing).
    master, job
        The master URL and the job file written into the ``spark-submit`` line.
    python
        ``archive``: the interpreter the venv is made from (the executors need it at the same
        path; default :func:`base_python`). ``zip``: the executors' Python that has the
        dependencies, if not the cluster's default.
    driver_python
        The driver's Python in client mode (default: the archive's environment; for the zip the
        cluster's default).
    compile_kernels
        ``archive``: compile numba's kernels into the environment's cache, so executors do not
        compile them in their first micro-batch.
    log
        Progress lines of the archive's build.

    Examples
    --------
    >>> import tempfile
    >>> from pathlib import Path
    >>> from driftjoin.app.pack import pack
    >>> packed = pack("zip", Path(tempfile.mkdtemp()), master="spark://h:7077", job="job.py")
    >>> packed.path.name, packed.commands[-1].split()[:5]
    ('driftjoin-0.1.0.zip', ['spark-submit', '--master', 'spark://h:7077', '--py-files', ...])
    """
    if kind not in ("archive", "zip"):
        raise ValueError(f"--kind must be 'archive' or 'zip', got {kind!r}")
    if kind == "archive":
        path = build_archive(out, python, compile_kernels=compile_kernels, log=log)
        python = None
    else:
        path = build_zip(out)
    return Packed(path, submit_commands(kind, path, master=master, job=job, python=python, driver_python=driver_python))


def command(
    kind: str = typer.Option("archive", help="archive: a packed venv for --archives (driftjoin and its dependencies, "
                                             "kernels compiled); zip: driftjoin alone for --py-files."),
    out: Path = typer.Option(Path("dist"), help="Folder for the artifact."),
    master: str = typer.Option("spark://HOST:7077", help="The master URL to put in the spark-submit line."),
    job: str = typer.Option("my_job.py", help="The job file to put in the spark-submit line."),
    python: str = typer.Option("", help="archive: the Python the venv is made from (executors need it at the same path; "
                                        "default: this one's base). zip: the executors' Python with the dependencies."),
    driver_python: str = typer.Option("", help="The driver's Python in client mode (default: the archive's; for the zip "
                                               "the cluster's)."),
    compile_kernels: bool = typer.Option(True, help="archive: compile numba's kernels into the environment's cache."),
) -> None:
    """Build what ships driftjoin to executors that lack it; print the commands that submit a job with it."""
    packed = pack(kind, out, master=master, job=job, python=python or None, driver_python=driver_python or None,
                  compile_kernels=compile_kernels, log=lambda line: typer.echo(f"driftjoin pack: {line}", err=True))
    typer.echo(f"# {packed.path} ({packed.path.stat().st_size / 1e6:.1f} MB); in the job's working directory:")
    for line in packed.commands:
        typer.echo(line)
