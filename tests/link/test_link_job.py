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
