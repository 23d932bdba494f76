"""Long fuzz run of the operators (the test suite runs the same harness at a small size).

    .venv/bin/python bench/fuzz_operators.py --examples 40 [--operator similarity_join] [--mode streaming]

Runs tests/fuzz with hypothesis drawing ``--examples`` random cases per operator and mode (not
derandomised: every run explores new cases) and prints one line per operator and mode: passed,
or the failing case hypothesis shrank it to.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--examples", type=int, default=40, help="cases per operator and mode")
    parser.add_argument("--operator", default="", help="similarity_join, topk_set_join, equi_join or natural_join (default: all)")
    parser.add_argument("--mode", choices=["streaming", "static", ""], default="", help="default: both")
    args = parser.parse_args()
    env = dict(os.environ, DRIFTJOIN_FUZZ="long", DRIFTJOIN_FUZZ_EXAMPLES=str(args.examples))
    selector = " and ".join(x for x in (args.operator, args.mode) if x)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(ROOT / "tests" / "fuzz"), "-rA"]
    if selector:
        cmd += ["-k", selector]
    return subprocess.call(cmd, cwd=ROOT, env=env)


if __name__ == "__main__":
    raise SystemExit(main())
