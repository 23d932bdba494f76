"""A class-data-sharing archive of the classes a driftjoin driver JVM loads (the JDK's AppCDS).

A new driver process spends most of its start-up loading, verifying and linking Spark's classes
from its jars: about 6 s for :func:`~driftjoin.spark.runtime.session.local_session` on the 2-core
machine, and a first streaming micro-batch loads thousands more (streaming, RocksDB,
``transformWithStateInPandas``, Arrow). A dynamic CDS archive (JDK 13+) holds those classes
already parsed and verified; a JVM started with ``-XX:SharedArchiveFile`` maps them instead
(measured in docs/benchmarks.md, "Start-up").

The archive is built once per Java installation and PySpark version, by
``python -m driftjoin.spark.runtime.class_archive`` (``scripts/setup.sh`` runs it): a driver JVM started
with ``-XX:ArchiveClassesAtExit`` runs :data:`TRAINING` (:mod:`driftjoin.app.class_training`: a
small streaming similarity join and a batch join) and writes the archive when it exits. Only an
archive that a JVM has mapped successfully is moved into place (atomically): a truncated archive crashes the JVM that maps it (SIGBUS, measured), so
an archive half-written by a killed build must never be used. A JVM that finds the archive
stale (other jars, another JDK) ignores it and loads classes as usual (``-Xshare:auto``), and
its CDS messages are turned off so the console stays quiet.

Where: ``$DRIFTJOIN_CACHE_DIR`` or ``$XDG_CACHE_HOME/driftjoin`` (``~/.cache/driftjoin``), about
180 MB. Without an archive everything works as before, only slower to start.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

#: Set (to the file the archive is written to) in the process that builds it.
DUMP_ENV = "DRIFTJOIN_CLASS_ARCHIVE_DUMP"
#: The program whose driver JVM writes the archive when it exits (it runs the operators, which
#: this module, part of the runtime they stand on, does not import).
TRAINING = "driftjoin.app.class_training"
#: The JVM's CDS log messages, off: a stale archive is ignored without a word.
_QUIET = "-Xlog:cds=off -Xlog:cds+dynamic=off"


def java_binary() -> str | None:
    """The ``java`` PySpark launches: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    java = os.path.join(home, "bin", "java") if home else shutil.which("java")
    return os.path.realpath(java) if java and os.path.exists(java) else None


def archive_path() -> Path | None:
    """Where this Java installation's and PySpark version's archive is (None: no Java found)."""
    import pyspark

    java = java_binary()
    if java is None:
        return None
    root = os.environ.get("DRIFTJOIN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "driftjoin")
    key = hashlib.sha1(f"{java}|{pyspark.__version__}".encode()).hexdigest()[:12]
    return Path(root) / f"spark-{pyspark.__version__}-{key}.jsa"


def jvm_options(enabled: bool = True) -> str:
    """Driver JVM options: write the archive (in the process building it), map it (if built and
    ``enabled``), or nothing."""
    dump = os.environ.get(DUMP_ENV)
    if dump:
        return f"-XX:ArchiveClassesAtExit={dump} {_QUIET}"
    path = archive_path() if enabled else None
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {_QUIET}"


def _maps(java: str, archive: Path) -> bool:
    """Whether a JVM maps ``archive`` and exits cleanly (a truncated one crashes it)."""
    try:
        # a crash report would land in the working directory
        run = subprocess.run([java, f"-XX:SharedArchiveFile={archive}", "-Xshare:auto", *_QUIET.split(),
                              "-XX:ErrorFile=/dev/null", "-XX:-CreateCoredumpOnCrash", "-version"],
                             capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return run.returncode == 0


def build(force: bool = False) -> Path | None:
    """Build the archive if there is none (or ``force``); returns its path (None if it failed)."""
    path, java = archive_path(), java_binary()
    if path is None or java is None:
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        run = subprocess.run([sys.executable, "-m", TRAINING], env={**os.environ, DUMP_ENV: str(tmp)},
                             capture_output=True, text=True, timeout=900)
        if run.returncode != 0 or not tmp.is_file() or not _maps(java, tmp):
            return None
        os.replace(tmp, path)
        return path
    finally:
        tmp.unlink(missing_ok=True)


def main() -> None:
    ap = argparse.ArgumentParser(description="Build the class-data-sharing archive driftjoin's local sessions map.")
    ap.add_argument("--force", action="store_true", help="rebuild even if an archive exists")
    args = ap.parse_args()
    path = build(force=args.force)
    print(f"class archive: {path}" if path else "class archive: not built (no Java found, or its JVM could not write one)")


if __name__ == "__main__":
    main()
