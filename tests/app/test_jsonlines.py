"""JSON lines against a declared schema (driftjoin/app/jsonlines.py), for every column type: a value
of the JSON type its column declares is read, any other is a dead letter whose reason names the
column, what it must be and what the line holds; Spark's own reader would have turned a number
into the text of a string column (the issue's ``"name": 12345``). Also the job file's schema
reader (driftjoin/app/schema.py), which needs no Spark."""

from __future__ import annotations

import doctest
import json

import pytest

import driftjoin.app.schema
from driftjoin.app.jsonlines import parse_json_lines
from driftjoin.app.schema import parse_schema
from driftjoin.spark.runtime.settings import SettingError

SCHEMA = ("id long, n int, x double, d decimal(10,2), name string, ok boolean, ts timestamp, day date, "
          "v array<double>, tokens array<string>, ids array<bigint>, nested array<array<int>>, "
          "attrs map<string,int>, point struct<x: double, y: double>")

#: (the line's values besides "id", the reason, or None when the line is read)
CASES = [
    ({"n": 3, "x": 1, "d": 2.5, "name": "Ann", "ok": True, "ts": "2024-05-01 10:00:00", "day": "2024-05-01",
      "v": [1, 2.5], "tokens": ["a"], "ids": [1, 2], "nested": [[1], []], "attrs": {"k": 1}, "point": {"x": 1, "y": 2}},
     None),
    ({"name": None, "v": [None, 1.0], "tokens": []}, None),  # nulls are values: the join decides about them
    ({"ts": 1714557600}, None),  # a whole number of seconds, as Spark reads it
    ({"name": 12345}, "name is not a string: got an integer"),
    ({"name": 1.5}, "name is not a string: got a number"),
    ({"name": {"first": "Ann"}}, "name is not a string: got an object"),
    ({"name": ["Ann"]}, "name is not a string: got a list of strings"),
    ({"name": True}, "name is not a string: got true or false"),
    ({"n": "3"}, "n is not an integer: got a string"),
    ({"n": 3.5}, "n is not an integer: got a number"),
    ({"n": 2147483648}, "n is not an integer: got 2147483648"),  # the right JSON type, beyond int's range
    ({"x": "NaN"}, "x is not a number: got a string"),  # Spark's reader would take it as NaN
    ({"d": "2.5"}, "d is not a number: got a string"),
    ({"ok": "true"}, "ok is not true or false: got a string"),
    ({"ok": 1}, "ok is not true or false: got an integer"),
    ({"ts": 1.5}, "ts is not a timestamp: got a number"),
    ({"ts": "yesterday"}, "ts is not a timestamp: got yesterday"),
    ({"day": 19844}, "day is not a date: got an integer"),
    ({"v": ["1", "2"]}, "v is not a list of numbers: got a list of strings"),
    ({"v": [1, "2"]}, "v is not a list of numbers: got a list of mixed values"),
    ({"v": "1,2"}, "v is not a list of numbers: got a string"),
    ({"tokens": [1, 2]}, "tokens is not a list of strings: got a list of integers"),
    ({"tokens": [["a"]]}, "tokens is not a list of strings: got a list of lists"),
    ({"ids": [1.5]}, "ids is not a list of integers: got a list of numbers"),
    ({"nested": [1, 2]}, "nested is not a list of lists of integers: got a list of integers"),
    ({"attrs": {"k": "1"}}, "attrs is not an object of type map<string,int>: got an object"),
    ({"attrs": [1]}, "attrs is not an object of type map<string,int>: got a list of integers"),
    ({"point": {"x": "1", "y": 2}}, "point is not an object of type struct<x:double,y:double>: got an object"),
    ({"point": 3}, "point is not an object of type struct<x:double,y:double>: got an integer"),
]


@pytest.mark.spark
def test_every_column_type_takes_its_json_type_and_nothing_else(spark):
    lines = [json.dumps({"id": i, **values}) for i, (values, _) in enumerate(CASES)]
    lines += ['{"id": 100, "name": "Ann"', '[1, 2]', '{"id": "x"}']
    parsed = parse_json_lines(spark.createDataFrame([(line,) for line in lines], "value string"), SCHEMA)
    got = {r["_raw"]: r for r in parsed.collect()}
    assert len(got) == len(lines)
    for line, (values, reason) in zip(lines, CASES):
        assert got[line]["_reason"] == reason, line
    read = got[lines[0]]
    assert (read["n"], read["name"], read["v"], read["attrs"], read["point"].y) == (3, "Ann", [1.0, 2.5], {"k": 1}, 2.0)
    assert got[lines[2]]["ts"] is not None
    assert [got[line]["_reason"] for line in lines[-3:]] == ["not valid JSON", "not a JSON object",
                                                              "id is not an integer: got a string"]


def test_the_job_files_schema_is_read_without_spark():
    assert doctest.testmod(driftjoin.app.schema).failed == 0
    columns = parse_schema("`first name` STRING NOT NULL, tags: ARRAY< string >, amount DECIMAL(10, 2), "
                           "meta struct<a: int, b: string> COMMENT 'kept for later'")
    assert [(c.name, None if c.dtype is None else c.dtype.simpleString()) for c in columns] == [
        ("first name", "string"), ("tags", "array<string>"), ("amount", "decimal(10,2)"), ("meta", None)]
    with pytest.raises(SettingError, match=r"\[source\] schema declares 'id' twice"):
        parse_schema("id long, ID string")
    with pytest.raises(SettingError, match=r"\[source\] schema entry 'id' is not 'name type'"):
        parse_schema("id, name string")
