#!/usr/bin/env bash
# Run the whole test suite (creates the venv first if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/pytest ] || bash scripts/setup.sh
exec .venv/bin/python -m pytest "$@"
