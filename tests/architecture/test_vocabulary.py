"""One registry per vocabulary: the metric names the code accepts are the ones the docs list.

:mod:`driftjoin.metric_names` is the one place a ``metric=`` name is resolved (the settings
check, the vector metrics, the metric-space cores); these tests hold the code and the docs to it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from driftjoin.distance import METRICS, get_metric
from driftjoin.metric.spaces import get_space
from driftjoin.metric_names import METRIC_NAMES, VECTOR, UnknownMetricError, lookup, names
from driftjoin.spark.runtime.settings import SettingError
from driftjoin.spark.similarity.api import similarity_join
from driftjoin.spark.similarity.settings import SimilaritySettings

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_the_vector_metrics_are_the_registrys():
    assert set(METRICS) == set(names(VECTOR))


@pytest.mark.parametrize("entry", METRIC_NAMES, ids=lambda m: m.name)
def test_every_spelling_is_documented_and_resolves_everywhere(entry):
    readme = (ROOT / "README.md").read_text()
    for spelling in entry.spellings:
        assert f'"{spelling}"' in readme, f"README.md's metric= table lacks {spelling!r}"
        assert f'``"{spelling}"``' in similarity_join.__doc__, f"similarity_join's docstring lacks {spelling!r}"
        assert lookup(spelling.upper()) == entry
        settings = SimilaritySettings.check({"threshold": 0.5 if entry.kind != "string" else 1, "metric": spelling})
        assert settings.metric == spelling
        if entry.kind == VECTOR:
            assert get_metric(spelling).name == entry.name
        else:
            assert get_space(spelling).name == entry.name


def test_every_metric_the_docs_write_resolves():
    written = {m for path in DOCS for m in re.findall(r"""metric\s*=\s*["']([A-Za-z_]+)["']""", path.read_text())}
    assert written, "the docs name metrics"
    bad = []
    for name in sorted(written):
        try:
            lookup(name)
        except UnknownMetricError:
            if name.lower() not in ("sqeuclidean",):  # the docs' example of a refused name
                bad.append(name)
    assert not bad


def test_a_misspelled_metric_lists_every_metric_and_the_closest_one_everywhere():
    """Issue 33 item 4: ``"levenstein"`` used to list only the vector metrics."""
    messages = []
    with pytest.raises(SettingError) as error:
        SimilaritySettings.check({"threshold": 1, "metric": "levenstein"})
    messages.append(str(error.value))
    assert str(error.value).startswith("metric='levenstein' is an unknown metric (did you mean 'levenshtein'?)")
    for resolve in (get_space, get_metric):
        with pytest.raises(ValueError) as error:
            resolve("levenstein")
        messages.append(str(error.value))
    for message in messages:
        for entry in METRIC_NAMES:
            for spelling in entry.spellings:
                assert re.search(rf"\b{spelling}\b", message), (spelling, message)
        assert "did you mean 'levenshtein'" in message


def test_refused_names_say_what_to_use():
    with pytest.raises(SettingError, match="squared Euclidean is not a metric; use metric='euclidean'"):
        SimilaritySettings.check({"threshold": 1, "metric": "sqeuclidean"})
    with pytest.raises(ValueError, match="metric='jaccard' compares token sets, not vectors"):
        get_metric("jaccard")
