#!/usr/bin/env bash
# CI's runs at versions other than the lock (constraints.txt), each in its own venv beside .venv:
#   scripts/versions.sh lowest [pytest args]   .venv-lowest: pyspark and every runtime dependency at
#                                              the lower bound pyproject.toml declares
#   scripts/versions.sh newest [pytest args]   .venv-newest: the lock, but the newest pandas and numpy
#                                              that the declared ranges, pyspark and numba accept
# then the fast subset of the suite there (SUBSET below; the test of the installed versions is
# marked `versions`).
set -euo pipefail
cd "$(dirname "$0")/.."
WHICH="${1:?usage: $0 lowest|newest [pytest args]}"; shift
PY="${PYTHON:-python3.11}"
command -v "$PY" >/dev/null 2>&1 || PY=python3
VENV=".venv-$WHICH"
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet -c constraints.txt pip
case "$WHICH" in
  lowest)
    # name==lower bound for pyspark and each runtime dependency; the test tools as locked
    "$VENV/bin/python" - > "$VENV/constraints.txt" <<'EOF'
import re, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))["project"]
for requirement in project["dependencies"] + project["optional-dependencies"]["spark"]:
    name, low = re.match(r"([A-Za-z0-9._-]+)\s*>=\s*([^,;\s]+)", requirement).groups()
    print(f"{name}=={low}")
tools = {re.match(r"[A-Za-z0-9._-]+", r).group(0).lower() for r in project["optional-dependencies"]["test"]}
for line in open("constraints.txt"):
    if line.split("==")[0].strip().lower() in tools:
        print(line.strip())
EOF
    UPGRADE=()
    ;;
  newest)
    grep -v -i -E '^(numpy|pandas)==' constraints.txt > "$VENV/constraints.txt"
    UPGRADE=(--upgrade --upgrade-strategy only-if-needed pandas numpy)
    ;;
  *) echo "usage: $0 lowest|newest [pytest args]" >&2; exit 2 ;;
esac
"$VENV/bin/python" -m pip install --quiet -c "$VENV/constraints.txt" -e ".[spark,test]" "${UPGRADE[@]}"
"$VENV/bin/python" -m pip check
"$VENV/bin/python" -c "import importlib.metadata as m; print('$WHICH:', ', '.join(f'{p} {m.version(p)}' for p in ('pyspark', 'pandas', 'numpy', 'pyarrow', 'protobuf', 'scipy', 'numba')))"
# the cores that use numba and scipy (S3J, SWOOP, the grid) and rapidfuzz (edit distance) against their oracles, and every
# operator on Spark (pyspark, pandas, pyarrow), streaming and static, on generated cases against its oracle
SUBSET=(tests/s3j/test_core_oracle.py tests/swoop/test_swoop_kernels.py tests/grid tests/metric/test_spaces.py
        tests/metric/test_passjoin.py tests/fuzz tests/test_versions.py)
exec env DRIFTJOIN_VERSIONS="$WHICH" "$VENV/bin/python" -m pytest -q -p no:cacheprovider "${SUBSET[@]}" "$@"
