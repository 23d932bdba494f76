"""The person-record generator: deterministic by chunk, ground truth consistent, skewed, errors applied."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from driftjoin.generators.persons import CHUNK, ID_BITS, PersonOptions, person_records


def test_any_range_regenerates_the_same_records():
    whole = person_records(7, 0, 0, 3 * CHUNK)
    part = person_records(7, 0, CHUNK - 5, CHUNK + 10)
    sl = slice(CHUNK - 5, 2 * CHUNK + 5)
    assert part["id"].tolist() == whole["id"][sl].tolist()
    for col in ("entity", "given_name", "surname", "address", "postcode"):
        assert part[col] == list(whole[col][sl]) if isinstance(part[col], list) else (part[col] == whole[col][sl]).all()
    assert (np.isnat(part["dob"]) == np.isnat(whole["dob"][sl])).all()


def test_entities_are_records_and_originals_carry_the_truth():
    r = person_records(3, 0, 0, 4 * CHUNK)
    s1 = person_records(3, 1, 0, 4 * CHUNK)
    ids = set(r["id"].tolist()) | set(s1["id"].tolist())
    assert s1["id"][0] == 1 << ID_BITS
    # every entity id is the id of an original record of some stream (one whose entity is itself)
    originals = {i for i, e in zip(r["id"].tolist() + s1["id"].tolist(), r["entity"].tolist() + s1["entity"].tolist())
                 if i == e}
    assert set(r["entity"].tolist()) <= originals and originals <= ids
    dup = r["entity"] != r["id"]
    assert 0.2 < dup.mean() < 0.4  # dup_rate 0.3
    # duplicates refer to entities of both streams (two-sided linking has cross-stream matches)
    assert (r["entity"][dup] >> ID_BITS).max() == 1
    # each duplicate differs from its original somewhere (1 to 3 modifications), most in few fields
    by_id = {i: k for k, i in enumerate(r["id"].tolist())}
    changed = []
    for k in np.nonzero(dup)[0].tolist():
        e = int(r["entity"][k])
        if e in by_id:
            j = by_id[e]
            changed.append(sum(r[c][k] != r[c][j] for c in ("given_name", "surname", "address", "postcode"))
                           + int(r["dob"][k] != r["dob"][j]))
    assert changed and min(changed) >= 0 and np.mean(changed) >= 1.0


def test_postcodes_and_names_are_skewed_and_fields_go_missing():
    r = person_records(1, 0, 0, 20 * CHUNK)
    n = len(r["id"])
    top_postcode = Counter(p for p in r["postcode"] if p).most_common(1)[0][1]
    assert top_postcode > 0.1 * n  # zipf 1.1 over 5,000 postcodes: about 15%
    assert Counter(r["surname"]).most_common(1)[0][1] > 0.015 * n
    assert any(p is None for p in r["postcode"]) and any(g is None for g in r["given_name"]) and np.isnat(r["dob"]).any()


def test_options_are_checked():
    with pytest.raises(ValueError, match="dup_rate"):
        PersonOptions(dup_rate=1.0)
    assert len(person_records(0, 0, 0, 10, PersonOptions(dup_rate=0.0, postcodes=3))["id"]) == 10
    with pytest.raises(ValueError, match="house_numbers"):
        PersonOptions(house_numbers=0)


def test_house_numbers_run_from_one_to_the_option():
    def numbers(opts: PersonOptions | None) -> set[int]:  # of the originals (a duplicate's may be moved up)
        r = person_records(5, 0, 0, 2 * CHUNK, opts)
        return {int(a.split()[0]) for a, i, e in zip(r["address"], r["id"].tolist(), r["entity"].tolist())
                if a and i == e and a.split()[0].isdigit()}

    assert numbers(None) <= set(range(1, 300)) and len(numbers(None)) > 250
    wide = numbers(PersonOptions(house_numbers=5000))
    assert wide <= set(range(1, 5001)) and max(wide) > 300


@pytest.mark.spark
def test_spark_source_static_and_stream(spark, tmp_path):
    from driftjoin.spark.sources.persons import SCHEMA

    static = spark.read.format("driftjoin-persons").option("total", 300).option("seed", 5).load()
    from pyspark.sql.types import StructType

    assert static.schema == StructType.fromDDL(SCHEMA)
    rows = static.orderBy("id").collect()
    expected = person_records(5, 0, 0, 300)
    assert [r.id for r in rows] == expected["id"].tolist() and [r.surname for r in rows] == expected["surname"]
    stream = (spark.readStream.format("driftjoin-persons").option("total", 300).option("seed", 5).option("pace", "false")
              .load())
    q = stream.writeStream.format("memory").queryName("persons_src").trigger(availableNow=True).start()
    q.awaitTermination()
    got = spark.sql("select id, surname from persons_src order by id").collect()
    assert [r.id for r in got] == expected["id"].tolist()
    with pytest.raises(Exception, match="no option"):
        spark.read.format("driftjoin-persons").option("total", 3).option("bogus", 1).load().collect()
