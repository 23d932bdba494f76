"""NexMark events and the thesis's five autoscaling queries (section 4.5.2).

The generator (driftjoin/generators/nexmark.py) against Python integer arithmetic; the Spark
SQL events against the generator; each Spark query on a static read of the generator source
against a plain-Python oracle written from the query's definition."""

from __future__ import annotations

from collections import Counter, defaultdict

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driftjoin.control.autoscale.nexmark import QUERIES, NexmarkSettings, events as sql_events, query
from driftjoin.generators.nexmark import RECENT, STATES, events

M = 2**31 - 1


def h(k: int, salt: int) -> int:
    return ((k * 48271 + salt * 1_000_003) % M) * 48271 % M


@settings(max_examples=50, deadline=None)
@given(first=st.integers(0, 10**12), n=st.integers(1, 300))
def test_events_follow_their_definition(first, n):
    ks = np.arange(first, first + n, dtype=np.int64)
    e = events(ks)
    for i, k in enumerate(ks.tolist()):
        slot, person = k % 50, k // 50
        if slot == 0:
            assert (e["kind"][i], e["id"][i], e["state"][i]) == ("person", person, STATES[h(k, 1) % 6])
        elif slot <= 3:
            assert (e["kind"][i], e["id"][i]) == ("auction", 3 * person + slot - 1)
            assert e["seller"][i] == max(0, person - h(k, 2) % RECENT) and 10 <= e["category"][i] < 20
        else:
            assert e["kind"][i] == "bid" and e["price"][i] == 100 + h(k, 7) % 99900
            assert e["auction"][i] == max(0, 3 * person + 2 - h(k, 4) % RECENT)
            assert e["bidder"][i] == max(0, person - h(k, 5) % RECENT)


def test_events_reference_only_what_exists():
    """Sellers and bidders are persons registered before; bids go to auctions already open."""
    e = events(np.arange(20_000))
    kinds = Counter(e["kind"].tolist())
    assert (kinds["person"], kinds["auction"], kinds["bid"]) == (400, 1200, 18_400)
    persons = np.flatnonzero(e["kind"] == "person")
    auctions = np.flatnonzero(e["kind"] == "auction")
    assert list(e["id"][persons]) == list(range(400)) and list(e["id"][auctions]) == list(range(1200))
    for k in np.flatnonzero(e["kind"] == "auction"):
        assert e["seller"][k] in e["id"][persons[persons < k]]
    for k in np.flatnonzero(e["kind"] == "bid")[::37]:
        assert e["auction"][k] in e["id"][auctions[auctions < k]] and e["bidder"][k] in e["id"][persons[persons < k]]


# -- Spark: the same events, the five queries against oracles ------------------------------------

N, RATE = 6000, 500.0            # 12 s of events


@pytest.fixture(scope="module")
def raw(spark):
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    return (spark.read.format("driftjoin").option("total", N).option("rate", RATE).option("dim", 1)
            .option("partitions", 2).option("start", 0).load())


@pytest.fixture(scope="module")
def oracle_input(raw):
    rows = sorted((r.id, r.ts.timestamp()) for r in raw.select("id", "ts").collect())
    ids = np.array([r[0] for r in rows])
    assert list(ids) == list(range(N))
    return events(ids), np.array([round(r[1] * 1e6) for r in rows], dtype=np.int64)    # event times in us


def test_spark_sql_events_equal_the_generators(raw, oracle_input):
    e, _ = oracle_input
    got = sorted(sql_events(raw.select("id", "ts")).collect(), key=lambda r: r.ts)
    assert len(got) == N
    for k, r in enumerate(got):
        assert r.kind == e["kind"][k]
        expected = {"eid": e["id"][k], "seller": e["seller"][k], "category": e["category"][k], "reserve": e["reserve"][k],
                    "auction": e["auction"][k], "bidder": e["bidder"][k], "price": e["price"][k], "city": e["city"][k]}
        assert {c: (-1 if getattr(r, c) is None else getattr(r, c)) for c in expected} == expected
        assert (r.state or "") == e["state"][k]


def _us(ts) -> int:
    return round(ts.timestamp() * 1e6)


def test_map_and_filter(raw, oracle_input):
    e, t = oracle_input
    bids = np.flatnonzero(e["kind"] == "bid")
    got = Counter((r.auction, r.bidder, round(r.price_eur, 6), _us(r.ts)) for r in query(raw, "map").collect())
    assert got == Counter((e["auction"][k], e["bidder"][k], round(e["price"][k] * 0.908, 6), t[k]) for k in bids)
    got = Counter((r.auction, r.price, _us(r.ts)) for r in query(raw, "filter").collect())
    want = Counter((e["auction"][k], e["price"][k], t[k]) for k in bids if e["auction"][k] % 123 == 0)
    assert got == want and len(want) > 10


def test_incremental_join(raw, oracle_input):
    e, t = oracle_input
    s = NexmarkSettings(ttl=1.5)
    persons = [k for k in np.flatnonzero(e["kind"] == "person") if e["state"][k] in ("OR", "ID", "CA")]
    want = Counter()
    for a in np.flatnonzero((e["kind"] == "auction") & (e["category"] == 10)):
        for p in persons:
            if e["id"][p] == e["seller"][a] and t[p] <= t[a] <= t[p] + 1_500_000:
                want[(e["id"][p], e["state"][p], e["id"][a], t[a])] += 1
    got = Counter((r.person, r.state, r.auction, _us(r.a_ts)) for r in query(raw, "ij", s).collect())
    assert got == want and len(want) > 5


def test_sliding_window_counts(raw, oracle_input):
    e, t = oracle_input
    s = NexmarkSettings(window=4.0, slide=1.0)
    want = Counter()
    for k in np.flatnonzero(e["kind"] == "bid"):
        last = t[k] // 1_000_000 * 1_000_000                  # the newest window that holds t: starts at floor(t)
        for start in range(last - 3_000_000, last + 1, 1_000_000):
            want[(start, start + 4_000_000, e["auction"][k])] += 1
    got = Counter({(_us(r.start), _us(r.end), r.auction): r["count"] for r in query(raw, "sa", s).collect()})
    assert got == want


def test_session_window_counts(raw, oracle_input):
    e, t = oracle_input
    s = NexmarkSettings(gap=2.0)
    times = defaultdict(list)
    for k in np.flatnonzero(e["kind"] == "bid"):
        times[e["bidder"][k]].append(t[k])
    want = Counter()
    for bidder, ts in times.items():
        ts.sort()
        first = prev = ts[0]
        count = 0
        for x in ts + [None]:
            if x is None or x - prev >= 2_000_000:            # a gap of 2 s ends the session
                want[(first, prev + 2_000_000, bidder)] = count
                if x is not None:
                    first, count = x, 0
            if x is not None:
                prev, count = x, count + 1
    got = Counter({(_us(r.start), _us(r.end), r.bidder): r["count"] for r in query(raw, "swa", s).collect()})
    assert got == want and sum(1 for c in want.values() if c > 1) > 10


def test_bad_settings():
    with pytest.raises(ValueError, match="slide"):
        NexmarkSettings(window=1.0, slide=2.0)
    with pytest.raises(ValueError, match="ttl"):
        NexmarkSettings(ttl=0)
    assert set(QUERIES) == {"map", "filter", "ij", "sa", "swa"}
