"""Job files with match rules (``[link]`` and ``[[link.rules]]``), checked before Spark starts."""

from __future__ import annotations

import tomllib

import pytest

from driftjoin.app.runner import JobConfig
from driftjoin.spark.runtime.settings import SettingError

JOB = """
[source]
kind = "persons"
total = 100
pace = false

[link]
within = "1 minute"

[[link.rules]]
dob = "equal"
surname = ["levenshtein", 2]

[[link.rules]]
postcode = "equal"
address = { metric = "jaccard", threshold = 0.4, tokens = "words" }

[sink]
kind = "console"
"""


def test_a_link_job_reads_rules_as_tables():
    cfg = JobConfig.from_dict(tomllib.loads(JOB))
    assert cfg.operator == "link"
    assert cfg.join["rules"] == [{"dob": "equal", "surname": ("levenshtein", 2)},
                                 {"postcode": "equal", "address": {"metric": "jaccard", "threshold": 0.4, "tokens": "words"}}]
    assert cfg.join["ingest_col"] == "ts" and cfg.expected_records == 100


@pytest.mark.parametrize("change, message", [
    (('surname = ["levenshtein", 2]', 'surname = ["levenshtein", 2.5]'), r"\[link\] rules\[0\]\['surname'\].*whole number"),
    (('tokens = "words"', 'tokens = "letters"'), r"\[link\] rules\[1\]\['address'\] has tokens='letters'"),
    (('within = "1 minute"', 'within = "1 minute"\nparallelism = 0'), r"\[link\] parallelism"),
    (('within = "1 minute"', 'within = "1 minute"\nthreshold = 1'), r"\[link\] threshold is not a setting of link"),
])
def test_bad_rules_in_a_job_file_name_the_key(change, message):
    with pytest.raises(SettingError, match=message):
        JobConfig.from_dict(tomllib.loads(JOB.replace(*change)))


def test_the_persons_schema_of_the_app_is_the_sources():
    from driftjoin.app.schema import PERSONS_SCHEMA
    from driftjoin.spark.sources.persons import SCHEMA

    assert PERSONS_SCHEMA == SCHEMA


@pytest.mark.parametrize("change, message", [
    (("dob = \"equal\"", "dob = [\"levenshtein\", 1]"), r"\[link\] rules\[0\]\['dob'\] compares dates with levenshtein"),
    (("postcode = \"equal\"", "zip = \"equal\""), r"\[link\] rules\[1\]\['zip'\] names no column of the input"),
    (('within = "1 minute"', 'within = "1 minute"\nid_col = "key"'), r"\[link\] id_col 'key' is not a column"),
])
def test_rules_are_checked_against_the_sources_columns_before_spark(change, message):
    with pytest.raises(SettingError, match=message):
        JobConfig.from_dict(tomllib.loads(JOB.replace(*change)))


def test_rules_are_checked_against_a_declared_schema(tmp_path):
    (tmp_path / "in").mkdir()
    job = JOB.replace('kind = "persons"\ntotal = 100\npace = false',
                      f'kind = "files"\nleft = "{tmp_path / "in"}"\nschema = "id long, dob string, surname string, '
                      'postcode string, address string, ts timestamp"')
    job = job.replace('within = "1 minute"', 'within = "1 minute"\ntime_col = "ts"\nwatermark = "1 minute"')
    cfg = JobConfig.from_dict(tomllib.loads(job))
    assert cfg.join["rules"][0]["dob"] == "equal"
    with pytest.raises(SettingError, match=r"\[link\] rules\[0\]\['dob'\] compares strings with \('within'"):
        JobConfig.from_dict(tomllib.loads(job.replace('dob = "equal"', 'dob = ["within", "2 days"]')))
