"""The fuzz harness shared by the operators: generated rows and micro-batch boundaries in,
three properties out.

A *case* is a list of input lines (each a JSON row of one side, or garbage) cut into
micro-batches. Each operator has a *spec* (:class:`OperatorSpec`) that draws its lines, valid
and malformed, runs its join and its dead-letter query, and predicts from an independent model
(plain Python over the lines, not the operator's code) which rows are dead letters, which the
join refuses because of its state (late or duplicate rows, reported by the join itself), and
the exact output of the rest. The harness runs the case as a stream (one JSON file per side and
micro-batch, ``availableNow``) or as a static DataFrame and checks:

1. the query never fails because of a row (neither the join nor its dead letters);
2. each row is joined, dead-lettered or refused by the join, exactly one of the three: the
   observed dead letters and refusals equal the model's, as multisets of row ids (rows without
   an id are counted);
3. the output equals the oracle's over the rows the model keeps.

Sizes come from the hypothesis profile: ``ci`` (a few examples, fixed seed, in the test suite)
or ``long`` (``bench/fuzz_operators.py``).
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

FIRST_MTIME = 1_700_000_000


@dataclass(frozen=True)
class Line:
    """One input line: its side, its id (None: the row has none) and its text."""

    side: int
    ident: Any
    text: str


@dataclass
class Case:
    """Input lines in arrival order, cut into micro-batches, plus the operator's drawn settings."""

    batches: list[list[Line]]
    settings: dict[str, Any] = field(default_factory=dict)

    @property
    def lines(self) -> list[Line]:
        return [line for batch in self.batches for line in batch]


@dataclass
class Outcome:
    """What a run produced (or what the model predicts): output rows, dead letters, refusals."""

    output: Counter
    dead: Counter
    refused: Counter

    def describe(self) -> str:
        return f"{sum(self.output.values())} output rows, dead {dict(self.dead)}, refused {dict(self.refused)}"


class OperatorSpec:
    """What the harness needs from one operator (see the specs in this package)."""

    name: str
    schema: str
    two_sides: bool

    def case(self) -> st.SearchStrategy[Case]:
        raise NotImplementedError

    def join(self, left, right, case: Case, metrics_dir: str, streaming: bool):
        raise NotImplementedError

    def dead_letters(self, left, right, case: Case):
        raise NotImplementedError

    def observe(self, output: list, dead: list, metrics_dir: str) -> Outcome:
        raise NotImplementedError

    def expect(self, case: Case, streaming: bool) -> Outcome:
        raise NotImplementedError


def cut(lines: list[Line], draw, max_batches: int) -> list[list[Line]]:
    """Micro-batch boundaries drawn over the arrival order (every batch holds at least one line)."""
    n = len(lines)
    k = draw(st.integers(1, max(1, min(max_batches, n))), label="batches")
    inner = sorted(draw(st.sets(st.integers(1, n - 1), min_size=k - 1, max_size=k - 1), label="cuts")) if n > 1 and k > 1 else []
    bounds = [0, *inner, n]
    return [lines[a:b] for a, b in zip(bounds, bounds[1:])]


def write_case(case: Case, folder: Path) -> None:
    """One JSON-lines file per side and micro-batch, with increasing mtimes (the file source's order)."""
    for side in (0, 1):
        d = folder / ("L" if side == 0 else "R")
        d.mkdir(parents=True, exist_ok=True)
        for b, batch in enumerate(case.batches):
            path = d / f"b{b:04d}.json"
            path.write_text("".join(line.text + "\n" for line in batch if line.side == side) or "\n")
            os.utime(path, (FIRST_MTIME + b, FIRST_MTIME + b))


def run(spark, spec: OperatorSpec, case: Case, tmp: Path, streaming: bool) -> Outcome:
    """Run ``case`` through the operator and its dead letters; fail if either query fails."""
    write_case(case, tmp / "in")
    metrics = str(tmp / "metrics")

    def read(name: str):
        if streaming:
            return spark.readStream.schema(spec.schema).option("maxFilesPerTrigger", 1).json(str(tmp / "in" / name))
        return spark.read.schema(spec.schema).json(str(tmp / "in" / name))

    left = read("L")
    right = read("R") if spec.two_sides else None
    joined = spec.join(left, right, case, metrics, streaming)
    dead = spec.dead_letters(left, right, case)
    if not streaming:
        return spec.observe(joined.collect(), dead.collect(), metrics)
    queries = []
    for df, name in ((joined, "out"), (dead, "dead")):
        q = (df.writeStream.format("parquet").option("path", str(tmp / name))
             .option("checkpointLocation", str(tmp / f"ck_{name}")).trigger(availableNow=True).start())
        queries.append(q)
    for q in queries:
        q.awaitTermination()
        assert q.exception() is None, q.exception()
    batches = [p for p in queries[0].recentProgress if p["numInputRows"]]
    assert len(batches) == len(case.batches), f"{len(batches)} micro-batches ran for {len(case.batches)} files"

    def collect(name: str) -> list:
        path = tmp / name
        return spark.read.parquet(str(path)).collect() if any(path.glob("*.parquet")) else []

    return spec.observe(collect("out"), collect("dead"), metrics)


def check(spark, spec: OperatorSpec, case: Case, tmp: Path, streaming: bool) -> None:
    """The three properties (module docstring) for one case."""
    got = run(spark, spec, case, tmp, streaming)
    want = spec.expect(case, streaming)
    assert got.dead == want.dead, f"dead letters differ: got {dict(got.dead)}, expected {dict(want.dead)}"
    assert got.refused == want.refused, f"refused rows differ: got {dict(got.refused)}, expected {dict(want.refused)}"
    assert got.output == want.output, (
        f"output differs: {sum((got.output - want.output).values())} extra, {sum((want.output - got.output).values())} missing")


def kept_batches(case: Case, streaming: bool) -> list[list[dict[str, Any]]]:
    """The valid rows (``case.settings["valid"]``: line position -> row) per micro-batch, in
    arrival order; a static run is one batch."""
    valid = case.settings["valid"]
    out, at = [], 0
    for batch in case.batches:
        out.append([valid[i] for i in range(at, at + len(batch)) if i in valid])
        at += len(batch)
    return out if streaming else [[r for b in out for r in b]]


def dead_ids(case: Case) -> Counter:
    """The ids of the lines that are not valid rows (None for rows without an id)."""
    valid = case.settings["valid"]
    return Counter(line.ident for i, line in enumerate(case.lines) if i not in valid)


def dumps(row: dict[str, Any]) -> str:
    """A row as a JSON line; NaN and infinities as Spark's JSON reader writes them (allowed by default)."""
    return json.dumps(row, allow_nan=True)
