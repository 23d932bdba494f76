"""The Zipf stream generator and the simulator's metrics."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from driftjoin.hypercube import Side, ZipfStreamSpec, make_dispatcher, oracle_pairs, run_join, zipf_stream
from driftjoin.hypercube.generator import zipf_ranks


def top_share(stream, side: Side | None = None) -> float:
    keys = Counter(t.key for t in stream if side is None or t.side is side)
    return keys.most_common(1)[0][1] / sum(keys.values())


def test_seeded_and_well_formed() -> None:
    spec = ZipfStreamSpec(300, 200, domain=50, alpha_r=1.0, alpha_s=0.5, phases=3, rate=2.0, seed=11)
    a, b = zipf_stream(spec), zipf_stream(spec)
    assert a == b and a != zipf_stream(ZipfStreamSpec(300, 200, domain=50, phases=3, seed=12))
    assert sum(t.side is Side.R for t in a) == 300 and sum(t.side is Side.S for t in a) == 200
    for side in Side:
        assert [t.tid for t in a if t.side is side] == list(range(300 if side is Side.R else 200))
    assert [t.ts for t in a] == [i / 2.0 for i in range(500)]
    assert all(0 <= t.key < 50 for t in a)


def test_alpha_controls_skew() -> None:
    rng = np.random.default_rng(0)
    uniform = np.bincount(zipf_ranks(rng, 50_000, 0.0, 100), minlength=100) / 50_000
    assert uniform.max() < 0.013
    skewed = np.bincount(zipf_ranks(rng, 50_000, 2.0, 100), minlength=100) / 50_000
    assert skewed[0] == pytest.approx(1 / sum(i**-2.0 for i in range(1, 101)), abs=0.01)
    shares = [top_share(zipf_stream(ZipfStreamSpec(4000, 4000, domain=1000, alpha_r=a, alpha_s=a, seed=1)))
              for a in (0.0, 0.5, 1.0, 1.5, 2.0)]
    assert shares == sorted(shares) and shares[-1] > 0.5


def test_hot_set_moves_between_phases_and_is_shared() -> None:
    stream = zipf_stream(ZipfStreamSpec(3000, 3000, domain=500, alpha_r=(2.0, 1.5, 2.0), alpha_s=2.0, phases=3, seed=4))
    thirds = [stream[i * 2000:(i + 1) * 2000] for i in range(3)]
    hot = [Counter(t.key for t in part).most_common(1)[0][0] for part in thirds]
    assert len(set(hot)) == 3
    for part, key in zip(thirds, hot):
        for side in Side:
            assert Counter(t.key for t in part if t.side is side).most_common(1)[0][0] == key
    apart = zipf_stream(ZipfStreamSpec(3000, 3000, domain=500, alpha_r=2.0, alpha_s=2.0, shared_hot_set=False, seed=4))
    r_hot = Counter(t.key for t in apart if t.side is Side.R).most_common(1)[0][0]
    s_hot = Counter(t.key for t in apart if t.side is Side.S).most_common(1)[0][0]
    assert r_hot != s_hot


def test_bad_specs_are_rejected() -> None:
    with pytest.raises(ValueError):
        zipf_stream(ZipfStreamSpec(10, 10, alpha_r=(1.0, 2.0), phases=3))
    with pytest.raises(ValueError):
        zipf_stream(ZipfStreamSpec(10, 10, domain=0))
    with pytest.raises(ValueError):
        make_dispatcher("nested-loop", 4)
    with pytest.raises(ValueError):
        make_dispatcher("biclique", 4, groups=3)


@pytest.mark.parametrize("algorithm", ["shc", "phj", "biclique"])
def test_metrics_add_up(algorithm: str) -> None:
    stream = zipf_stream(ZipfStreamSpec(2000, 2000, domain=300, alpha_r=1.5, alpha_s=1.5, seed=2))
    result = run_join(stream, algorithm, p=8, batch_size=128, collect_pairs=False)
    m = result.metrics
    assert result.pairs is None
    assert m.output == len(oracle_pairs(stream)) == sum(m.produced)
    assert m.tuples == 4000 and m.batches == 32 and len(m.received) == 8
    assert m.mean_load == sum(m.load) / 8 and m.max_load == max(m.load)
    assert sum(m.installed) == m.moved
    copies = {"phj": 1, "biclique": None, "shc": None}[algorithm]
    if copies is not None:
        assert sum(m.received) == 4000 * copies
    if algorithm == "biclique":
        assert sum(m.received) == 4000 * (1 + 4)  # one store + a probe of the 4 units of the other side
    if algorithm != "shc":
        assert m.moved == 0 and m.promotions == 0
    summary = m.summary()
    assert summary["max_load"] == m.max_load and "received" not in summary


def test_shc_balances_a_single_hot_value_far_better_than_phj() -> None:
    """alpha = 2: one value carries most of both sides; PHJ puts its whole output on one worker."""
    stream = zipf_stream(ZipfStreamSpec(3000, 3000, domain=1000, alpha_r=2.0, alpha_s=2.0, seed=5))
    shc = run_join(stream, "shc", p=16, batch_size=200, collect_pairs=False).metrics
    phj = run_join(stream, "phj", p=16, batch_size=200, collect_pairs=False).metrics
    assert shc.output == phj.output
    assert shc.max_work * 4 < phj.max_work
    assert max(shc.produced) * 4 < max(phj.produced)
