"""Every shell block of the README runs as written from a fresh shell in the checkout.

Each ```bash block is read by bash itself, in a dry run: bash parses it (``bash -n``), then runs it
with a DEBUG trap that records every simple command with its words expanded the way bash expands
them (a ``NAME=value`` prefix does not apply to the words of its own command: the README's
Connect command once ran ``/sbin/start-connect-server.sh`` that way) and skips it, except
assignments and ``export``, which run so later commands see their values. Then every command
must exist in a fresh shell of the checkout: a builtin, a file of the checkout (``.venv/bin/...``,
``scripts/...``), or a system tool on a PATH without this venv; a tool whose packages matter
(``python``, ``spark-submit``, ``driftjoin``...) must be the venv's. Every path an argument names
must exist, be made by an earlier command of the block (``driftjoin pack``'s artifact, a
``mkdir -p`` folder) or be one of the reader's own (:data:`PLACEHOLDERS`); every pip extra must be
declared; every ``driftjoin`` command line must parse (its flags exist).

What runs for real: the Spark Connect blocks start and stop a server in
tests/spark/connect/test_readme_server.py, and the zip block below submits a job to the
standalone cluster CI starts (marker ``cluster``). The setup and test commands are what CI runs
itself; the packed environment's block is left to the dry run (74 s to build and 168 s to run,
where tests/deploy_cluster_job.py runs the same commands ``driftjoin pack`` prints).
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from typer.testing import CliRunner

from driftjoin import __version__
from driftjoin.app.cli import app

from readme_blocks import REPO, fresh_env, fresh_path, readme_blocks

BLOCKS = readme_blocks("bash")
#: Arguments that stand for the reader's own things, with what they are.
PLACEHOLDERS = {"my_job.py": "the reader's job", "/opt/py/bin/python": "the executors' Python"}
#: Tools a command must take from this checkout's venv: what they do depends on its packages.
VENV_TOOLS = {"python", "python3", "pip3", "pytest", "driftjoin", "spark-submit", "pyspark", "spark-shell"}
#: Tools taken from the reader's PATH on purpose: ``pip install ".[spark]"`` installs driftjoin
#: into whichever environment the reader is in (README, Installing as a library).
READERS_OWN = {"pip"}
#: bash's dry run: each simple command is recorded (subshell depth, the command as written, its
#: expanded words) into $__DRY and skipped, unless it only assigns or exports.
DRY_RUN = r"""
shopt -s extdebug
set -T
__dry() {
  local __x __w=(__UNPARSED__)
  eval "__w=( $BASH_COMMAND )" 2>/dev/null  # its status is the last substitution's: a failed one still expands
  printf '%s\x1f%s' "$BASH_SUBSHELL" "$BASH_COMMAND" >> "$__DRY"
  printf '\x1f%s' "${__w[@]}" >> "$__DRY"
  printf '\x1e' >> "$__DRY"
  [ "$BASH_SUBSHELL" -gt 0 ] && return 0
  [ "${__w[0]}" = export ] && return 0
  for __x in "${__w[@]}"; do case "$__x" in [A-Za-z_]*=*) ;; *) return 1 ;; esac; done
  return 0
}
trap __dry DEBUG
"""


def dry_run(block: str, tmp_path: Path) -> list[tuple[int, str, list[str]]]:
    """The simple commands of ``block`` as bash expands them: (subshell depth, as written, words)."""
    record = tmp_path / "dry"
    script = tmp_path / "block.sh"
    script.write_text(DRY_RUN + block)
    record.write_text("")
    run = subprocess.run(["bash", str(script)], cwd=REPO, env=fresh_env(__DRY=str(record)), capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    commands = []
    for entry in record.read_text().split("\x1e")[:-1]:
        depth, written, *words = entry.split("\x1f")
        commands.append((int(depth), written, words))
    return commands


def _substitutions(written: str) -> list[str]:
    """The ``$(...)`` commands inside a command as written."""
    found, i = [], written.find("$(")
    while i >= 0:
        depth, j = 1, i + 2
        while j < len(written) and depth:
            depth += {"(": 1, ")": -1}.get(written[j], 0)
            j += 1
        found.append(written[i + 2:j - 1])
        i = written.find("$(", j)
    return found


def _builtins() -> set[str]:
    out = subprocess.run(["bash", "-c", "compgen -b; compgen -k"], capture_output=True, text=True, check=True).stdout
    return set(out.split())


BUILTINS = _builtins()


def _command_problem(word: str) -> str | None:
    if word in BUILTINS:
        return None
    if "/" in word:
        path = REPO / word
        if path.is_file() and os.access(path, os.X_OK):
            return None
        return f"runs {word}, which {'is not executable' if path.exists() else 'does not exist'}"
    if word in VENV_TOOLS:
        return f"runs {word} from PATH, which in a fresh shell is not this checkout's: use .venv/bin/{word}"
    if word in READERS_OWN or shutil.which(word, path=fresh_path()):
        return None
    return f"runs {word}, which a fresh shell's PATH does not have"


def _path_value(word: str) -> str | None:
    """The path an argument names, if it names one: a word with a slash or a file suffix, or the
    value of ``key=value``; not a URL, not a flag."""
    if re.match(r"^[A-Za-z_][\w.]*=", word):
        word = word.split("=", 1)[1]
    word = word.split("#", 1)[0]
    if not word or word.startswith("-") or "://" in word:
        return None
    if "/" in word or word.endswith((".py", ".sh", ".toml", ".zip", ".tar.gz", ".json")):
        return word
    return None


def _extras() -> set[str]:
    return set(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"])


def problems(block: str, tmp_path: Path) -> list[str]:
    """What in ``block`` would not run as written from a fresh shell in the checkout."""
    found: list[str] = []
    made: set[Path] = set()  # files and folders the block's own commands make
    for depth, written, words in dry_run(block, tmp_path):
        if words == ["__UNPARSED__"]:
            found.append(f"bash cannot expand {written!r}")
            continue
        for inner in _substitutions(written) if depth == 0 else []:
            inner_words = [w for w in inner.split() if not re.match(r"^[A-Za-z_]\w*=", w)]
            if inner_words and (problem := _command_problem(inner_words[0])):
                found.append(f"$({inner}) {problem}")
        command = [w for w in words if not re.match(r"^[A-Za-z_]\w*=", w)]
        checked = [w for w in words if re.match(r"^[A-Za-z_]\w*=", w)] + command[1:]
        if command and command[0] != "export" and (problem := _command_problem(command[0])):
            found.append(f"{written!r} {problem}")
        if depth:
            continue
        for word in checked:
            extras = re.fullmatch(r"\.\[([\w,-]+)\]", word)
            if extras:
                found += [f"{written!r} installs the extra {e!r}, which pyproject.toml does not declare"
                          for e in extras.group(1).split(",") if e not in _extras()]
                continue
            value = _path_value(word)
            if value is None or value in PLACEHOLDERS:
                continue
            path = (REPO / value).resolve()
            if not path.exists() and not any(path == m or m in path.parents for m in made):
                found.append(f"{written!r} names {value}, which does not exist (nor does the block make it)")
        if command[:2] == ["mkdir", "-p"]:
            made.update((REPO / d).resolve() for d in command[2:])
        if command[:1] == [".venv/bin/driftjoin"] and command[1:2] == ["pack"]:
            result = CliRunner().invoke(app, [*command[1:], "--help"])  # flags and command names parse
            if result.exit_code:
                found.append(f"{written!r}: {result.output.strip().splitlines()[-1]}")
            out = command[command.index("--out") + 1] if "--out" in command else "dist"
            kind = command[command.index("--kind") + 1] if "--kind" in command else "archive"
            made.add((REPO / out / f"driftjoin-{__version__}{'.zip' if kind == 'zip' else '-env.tar.gz'}").resolve())
        elif command[:1] == [".venv/bin/driftjoin"]:
            result = CliRunner().invoke(app, [*command[1:], "--help"])
            if result.exit_code:
                found.append(f"{written!r}: {result.output.strip().splitlines()[-1]}")
    return found


@pytest.mark.parametrize("block", BLOCKS, ids=[b.splitlines()[0][:40] for b in BLOCKS])
def test_every_shell_block_parses_and_runs_only_what_a_fresh_shell_has(block, tmp_path):
    parsed = subprocess.run(["bash", "-n"], input=block, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    assert problems(block, tmp_path) == []


def test_the_dry_run_finds_the_defects_it_is_for(tmp_path):
    """The checks against blocks that fail from a fresh shell, as the README's did."""
    connect = ('SPARK_HOME="$(python -c \'import os, pyspark; print(os.path.dirname(pyspark.__file__))\')" \\\n'
               '"$SPARK_HOME/sbin/start-connect-server.sh" --master "local[2]"\n')
    found = problems(connect, tmp_path)
    assert any("runs python from PATH" in p for p in found), found
    assert any("runs /sbin/start-connect-server.sh, which does not exist" in p for p in found), found
    found = problems("spark-submit --py-files /abs/dist/driftjoin.zip my_job.py\n"
                     ".venv/bin/driftjoin pack --knd zip\npip install '.[spork]'\n", tmp_path)
    assert len(found) == 4, found
    assert "runs spark-submit from PATH" in found[0] and "/abs/dist/driftjoin.zip, which does not exist" in found[1]
    assert "--knd" in found[2] and "'spork'" in found[3]
    assert problems('.venv/bin/driftjoin pack --kind zip\nls "$PWD/dist/driftjoin-' + __version__ + '.zip"\n',
                    tmp_path) == []


ZIP_JOB = '''
from pyspark.sql import SparkSession
from driftjoin import similarity_join

spark = SparkSession.builder.appName("readme-zip").getOrCreate()
df = spark.createDataFrame([(i, [i / 10, 0.0]) for i in range(30)], "id long, vector array<double>")
print("PAIRS", similarity_join(df, threshold=0.15, metric="euclidean", parallelism=2, algorithm="s3j").count())
spark.stop()
'''


@pytest.mark.cluster
@pytest.mark.slow
def test_the_zip_block_submits_a_job_to_the_cluster_as_written(tmp_path):
    """The README's zip block on the standalone cluster CI starts, in a job's working directory
    that holds the job and this checkout's venv; ``HOST`` and the reader's two placeholders are
    the only words replaced."""
    from tests.spark.helpers import MASTER

    if not MASTER:
        pytest.skip("no standalone cluster: run scripts/cluster.sh start and set DRIFTJOIN_CLUSTER")
    (block,) = [b for b in BLOCKS if "--kind zip" in b]
    block = block.replace("spark://HOST:7077", MASTER).replace("/opt/py/bin/python", sys.executable)
    (tmp_path / ".venv").symlink_to(REPO / ".venv")
    (tmp_path / "my_job.py").write_text(ZIP_JOB)
    run = subprocess.run(["bash", "-e", "-c", block], cwd=tmp_path, env=fresh_env(SPARK_LOCAL_IP="127.0.0.1"),
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "PAIRS 29" in run.stdout.splitlines(), run.stdout[-2000:]
    assert (tmp_path / "dist" / f"driftjoin-{__version__}.zip").is_file()
