"""``link`` on Spark against the brute-force oracle of tests/link/oracle.py: static and streaming,
self and two-sided, windows, a restart from the checkpoint and a refused change of rules, the
rules and distances of every pair, dead letters, bad rules refused before the start.

Spark time is what this file costs: small inputs from the person generator, few micro-batches."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from pyspark.errors import StreamingQueryException

from driftjoin import SettingError, invalid_links, link
from driftjoin.generators.persons import PersonOptions, person_records
from tests.link.oracle import oracle_link

from ..helpers import run_available_now, write_batches

pytestmark = pytest.mark.spark

RULES = [
    {"dob": "equal", "surname": ("levenshtein", 1)},
    {"postcode": "equal", "address": ("jaccard", 0.5, "words")},
    {"given_name": ("levenshtein", 1), "surname": ("levenshtein", 1)},
    {"dob": ("within", "2 days"), "surname": "equal", "given_name": "equal"},
]
SPEC = [
    [("dob", "date", "equal", None, None), ("surname", "string", "levenshtein", 1, None)],
    [("postcode", "string", "equal", None, None), ("address", "string", "jaccard", 0.5, "words")],
    [("given_name", "string", "levenshtein", 1, None), ("surname", "string", "levenshtein", 1, None)],
    [("dob", "date", "within", 2, None), ("surname", "string", "equal", None, None),
     ("given_name", "string", "equal", None, None)],
]
EPOCH = dt.date(1970, 1, 1)


def _people(n: int, seed: int = 4, stream: int = 0) -> list[dict]:
    r = person_records(seed, stream, 0, n, PersonOptions(dup_rate=0.5, postcodes=30, surnames=60, given_names=40))
    out = []
    for k in range(n):
        d = r["dob"][k]
        out.append({"id": int(r["id"][k]), "given_name": r["given_name"][k], "surname": r["surname"][k],
                    "dob": None if str(d) == "NaT" else (d.astype(dt.date) - EPOCH).days,
                    "address": r["address"][k], "postcode": r["postcode"][k]})
    return out


def _frame(spark, rows):
    data = [(r["id"], r["given_name"], r["surname"], None if r["dob"] is None else EPOCH + dt.timedelta(days=r["dob"]),
             r["address"], r["postcode"], r.get("ts")) for r in rows]
    return spark.createDataFrame(data, "id long, given_name string, surname string, dob date, address string, "
                                       "postcode string, ts double")


def _check(rows, got, expected_records, self_join=True, window=("unbounded",)):
    exp = oracle_link(expected_records, SPEC, self_join=self_join, window=window)
    keyed = {}
    for r in rows:
        key = (r.left_id, r.right_id, None if window[0] in ("interval", "unbounded") else r.window_start)
        assert key not in keyed, f"{key} twice"
        keyed[key] = r
    assert {(a, b) for a, b, _ in keyed} == {(a, b) for a, b, _ in exp}
    by_pair = {k[:2]: v for k, v in exp.items()}
    for (a, b, _), r in keyed.items():
        first, sat, dist = by_pair[(a, b)]
        assert r.rule == first and r.rules == sat
        d = r.distances.asDict()
        for (col, metric, tokens), want in dist.items():
            field = {"dob": "dob_equal" if metric == "equal" else "dob_within",
                     "surname": "surname_levenshtein" if metric == "levenshtein" else "surname_equal",
                     "given_name": "given_name_levenshtein" if metric == "levenshtein" else "given_name_equal"
                     }.get(col, col)
            assert (d[field] is None) if want is None else math.isclose(d[field], float(want), rel_tol=0, abs_tol=0), \
                (a, b, field, d[field], want)
    return len(keyed)


def test_static_self_link_equals_the_oracle(spark):
    people = _people(300)
    rows = link(_frame(spark, people), rules=RULES, parallelism=3).collect()
    for p in people:
        p["side"], p["t"] = 0, 0
    n = _check(rows, rows, people)
    assert n > 30 and {r.rule for r in rows} >= {0, 1, 2}


def test_static_two_sided_with_hot_postcodes_split(spark, tmp_path):
    left, right = _people(250, seed=5), _people(250, seed=5, stream=1)
    rows = link(_frame(spark, left), _frame(spark, right), rules=RULES, parallelism=4, min_heavy=2,
                metrics_dir=str(tmp_path / "m")).collect()
    for p in left:
        p["side"], p["t"] = 0, 0
    for p in right:
        p["side"], p["t"] = 1, 0
    assert _check(rows, rows, left + right, self_join=False) > 20


def test_streaming_within_restart_and_refused_change(spark, tmp_path):
    """One micro-batch, a restart from the checkpoint, two more: pairs within 10 s cross both the
    restart and a batch boundary; a restart with other rules is refused."""
    people = _people(240, seed=6)
    for k, p in enumerate(people):
        p["ts"] = 1_700_000_000 + k * 0.25  # 60 s of records

    def files(lo, hi, start):
        write_batches(tmp_path / "in", [[{**p, "dob": None if p["dob"] is None else str(EPOCH + dt.timedelta(days=p["dob"]))}
                                         for p in people[i : i + 80]] for i in range(lo, hi, 80)], start=start)

    schema = "id long, given_name string, surname string, dob date, address string, postcode string, ts double"

    def run(rules=RULES):
        stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
        pairs = link(stream, rules=rules, within="10 seconds", time_col="ts", watermark="1 hour", parallelism=2)
        return run_available_now(pairs, tmp_path / "out", tmp_path / "ckpt")

    files(0, 80, 0)
    run()
    files(80, 240, 1)
    run()
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    for p in people:
        p["side"], p["t"] = 0, round((p["ts"] - 1_700_000_000) * 1e6)
    assert _check(rows, rows, people, window=("interval", 10 * 10**6)) > 10
    write_batches(tmp_path / "in", [[{**people[0], "id": 10**6, "dob": None}]], start=3)
    with pytest.raises(StreamingQueryException, match="rules"):
        run(RULES[:2])


def test_bad_rules_are_refused_before_the_start(spark):
    df = _frame(spark, _people(5))
    cases = [
        ([{"surnme": ("levenshtein", 1)}], "names no column of the input"),
        ([{"dob": ("levenshtein", 1)}], "compares dates with levenshtein"),
        ([{"address": ("jaccard", 1.5, "words")}], "in \\[0, 1\\)"),
        ([{"surname": "equal"}, {}], "rules\\[1\\] has no condition"),
        ([{"postcode": ("within", 3)}], "needs numbers, dates or timestamps"),
    ]
    for rules, message in cases:
        with pytest.raises(SettingError, match=message):
            link(df, rules=rules)
    with pytest.raises(SettingError, match="parallelism"):
        link(df, rules=RULES, parallelism=0)


def test_dead_letters_and_nulls(spark):
    df = spark.createDataFrame([(1, ["a", "b"], "x"), (None, ["a"], "x"), (3, ["a", None], "x"), (4, None, "x"),
                                (5, ["a", "b"], None)], "id long, tags array<string>, zip string")
    rules = [{"tags": ("jaccard", 0.5)}, {"zip": "equal"}]
    dead = {(r.id, r.reason) for r in invalid_links(df, rules=rules).collect()}
    assert dead == {(None, "missing id"), (3, "tags: a token set with a null element")}
    got = {(r.left_id, r.right_id, r.rule, tuple(r.rules)) for r in link(df, rules=rules).collect()}
    assert got == {(1, 5, 0, (0,)), (1, 4, 1, (1,))}


def test_streaming_hot_keys_split_by_the_control_plane_stay_exact(spark, tmp_path):
    """Workers report their largest groups; the controller publishes heavy groups; the plan key binds
    them to windows no copy has reached; the pairs stay those of the oracle."""
    from driftjoin.spark.runtime import decisions

    people = _people(240, seed=8)
    for k, p in enumerate(people):
        p["ts"] = 1_700_000_000 + k * 0.125  # 30 s of records, 6 batches of 5 s, windows of 10 s
    write_batches(tmp_path / "in", [[{**p, "dob": None if p["dob"] is None else str(EPOCH + dt.timedelta(days=p["dob"]))}
                                     for p in people[i : i + 40]] for i in range(0, 240, 40)])
    schema = "id long, given_name string, surname string, dob date, address string, postcode string, ts double"
    stream = spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).json(str(tmp_path / "in"))
    rules = [{"postcode": "equal", "surname": ("levenshtein", 1)}, RULES[0]]
    metrics = str(tmp_path / "m")
    pairs = link(stream, rules=rules, window="10 seconds", time_col="ts", watermark="1 hour", parallelism=3,
                 min_heavy=4, drive=["block", None], metrics_dir=metrics)
    q = run_available_now(pairs, tmp_path / "out", tmp_path / "ckpt")
    rows = spark.read.parquet(str(tmp_path / "out")).collect()
    spec = [[("postcode", "string", "equal", None, None), ("surname", "string", "levenshtein", 1, None)], SPEC[0]]
    for p in people:
        p["side"], p["t"] = 0, round((p["ts"] - 1_700_000_000) * 1e6) + 1_700_000_000 * 10**6
    expected = oracle_link(people, spec, self_join=True, window=("tumbling", 10 * 10**6))
    got = {(r.left_id, r.right_id, round(r.window_start.timestamp() * 1e6) // (10 * 10**6)): r.rule for r in rows}
    assert len(got) == len(rows) and got == {k: v[0] for k, v in expected.items()}
    query = str(q.id)
    assert decisions.versions(metrics, f"link/{query}/split"), "no hot-key decision was published"
    bound = decisions.newest(metrics, f"link/{query}/binding")
    assert bound is not None and bound["versions"], "no decision was bound to a window"
