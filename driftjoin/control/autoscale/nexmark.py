"""The thesis's autoscaling workloads (section 4.5.2) as Structured Streaming queries.

Five NexMark queries of growing complexity, over any DataFrame with a record index ``id`` and
an event time ``ts`` (driftjoin's generator source, ``format("driftjoin")``, follows the
thesis's workload shapes with its ``schedule`` option; Spark's own ``rate`` source has a
fixed rate). The events are Spark SQL expressions of ``id``, the definitions of
:mod:`driftjoin.generators.nexmark` (persons, auctions, bids; checked against it by the
tests), so no Python runs per record beyond the source.

- ``map`` (Map, NexMark Q1): every bid's price in euros. Stateless.
- ``filter`` (Filter, Q2): the bids on auctions whose id is a multiple of 123. Stateless.
- ``ij`` (Incremental Join, Q3): persons in Oregon, Idaho or California joined with the
  auctions of category 10 they sell, a stream-stream join whose state keeps a person for
  ``ttl`` seconds of event time (the thesis's time-to-live: its state would otherwise grow for
  ever), cleaned by the watermarks.
- ``sa`` (Sliding Window Aggregate, Q5): bids per auction in windows of ``window`` seconds
  sliding by ``slide``; a window is emitted once the watermark passes its end.
- ``swa`` (Session Window Aggregate, Q11): bids per bidder in each session (a gap of ``gap``
  seconds without a bid ends it); emitted once the watermark passes the session's end.

Each becomes Spark stages a micro-batch runs one after the other: the stateless queries one
(the source's partitions), the stateful ones a scan stage and a stateful stage over the state
partitions (``spark.sql.shuffle.partitions``), which the autoscaler's collector reports per
stage (DS2's operators).

>>> sorted(QUERIES)
['filter', 'ij', 'map', 'sa', 'swa']
"""

from __future__ import annotations

from dataclasses import dataclass

from driftjoin.generators.nexmark import EUR_PER_USD, M, RECENT, STATES


@dataclass(frozen=True)
class NexmarkSettings:
    """Window and state settings, seconds of event time."""

    ttl: float = 10.0
    window: float = 10.0
    slide: float = 2.0
    gap: float = 2.0
    watermark: float = 2.0

    def __post_init__(self) -> None:
        for name in ("ttl", "window", "slide", "gap"):
            if not getattr(self, name) > 0:
                raise ValueError(f"NexMark setting {name}={getattr(self, name)!r} must be > 0 seconds")
        if self.watermark < 0:
            raise ValueError(f"NexMark setting watermark={self.watermark!r} must be >= 0 seconds")
        if self.slide > self.window:
            raise ValueError(f"slide={self.slide} is longer than window={self.window}: a sliding window slides by at most its length")


QUERIES = {
    "map": "Map (NexMark Q1): bid prices in euros, stateless",
    "filter": "Filter (Q2): bids on auctions whose id is a multiple of 123, stateless",
    "ij": "Incremental Join (Q3): persons in OR/ID/CA x their auctions of category 10, state kept for ttl",
    "sa": "Sliding Window Aggregate (Q5): bids per auction per sliding window",
    "swa": "Session Window Aggregate (Q11): bids per bidder per session",
}
#: what each query's writer needs: stateless queries append; windows append once closed
OUTPUT_MODE = {"map": "append", "filter": "append", "ij": "append", "sa": "append", "swa": "append"}


def _mix(F, salt: int):
    """``h(id, salt)`` of :mod:`driftjoin.generators.nexmark` in Spark SQL (long arithmetic)."""
    return F.pmod(F.pmod(F.col("id") * 48271 + salt * 1_000_003, M) * 48271, M)


def events(df):
    """NexMark events of ``df``'s ``id`` and ``ts``: kind, id (person or auction), state, city,
    seller, category, reserve, auction, bidder, price, ts (the definitions of
    :mod:`driftjoin.generators.nexmark`; fields of other kinds are null)."""
    from pyspark.sql import functions as F

    slot, person = F.pmod(F.col("id"), 50), F.floor(F.col("id") / 50)
    is_person, is_auction = slot == 0, (slot >= 1) & (slot <= 3)
    is_bid = slot > 3
    states = F.array(*[F.lit(s) for s in STATES])
    opened = person * 3 + F.least(slot, F.lit(3))
    return df.select(
        F.when(is_person, "person").when(is_auction, "auction").otherwise("bid").alias("kind"),
        F.when(is_person, person).when(is_auction, person * 3 + slot - 1).alias("eid"),
        F.when(is_person, F.element_at(states, (F.pmod(_mix(F, 1), len(STATES)) + 1).cast("int"))).alias("state"),
        F.when(is_person, F.pmod(_mix(F, 8), 8)).alias("city"),
        F.when(is_auction, F.greatest(F.lit(0), person - F.pmod(_mix(F, 2), RECENT))).alias("seller"),
        F.when(is_auction, F.pmod(_mix(F, 3), 10) + 10).alias("category"),
        F.when(is_auction, F.pmod(_mix(F, 6), 9900) + 100).alias("reserve"),
        F.when(is_bid, F.greatest(F.lit(0), opened - 1 - F.pmod(_mix(F, 4), RECENT))).alias("auction"),
        F.when(is_bid, F.greatest(F.lit(0), person - F.pmod(_mix(F, 5), RECENT))).alias("bidder"),
        F.when(is_bid, F.pmod(_mix(F, 7), 99900) + 100).alias("price"),
        F.col("ts"),
    )


def query(df, name: str, settings: NexmarkSettings | None = None):
    """The NexMark query ``name`` (:data:`QUERIES`) over the generator DataFrame ``df``.

    Streaming or static: on a static DataFrame the watermarks do nothing and every window and
    session is in the result (what the tests compare with a plain-Python oracle).

    >>> query(None, "q7")
    Traceback (most recent call last):
    ...
    ValueError: NexMark query 'q7': choose one of map, filter, ij, sa, swa
    """
    if name not in QUERIES:
        raise ValueError(f"NexMark query {name!r}: choose one of {', '.join(QUERIES)}")
    from pyspark.sql import functions as F

    s = settings or NexmarkSettings()
    ev = events(df)
    bids = ev.filter(F.col("kind") == "bid")
    wm = f"{int(s.watermark * 1000)} milliseconds"
    if name == "map":
        return bids.select("auction", "bidder", (F.col("price") * EUR_PER_USD).alias("price_eur"), "ts")
    if name == "filter":
        return bids.filter(F.pmod(F.col("auction"), 123) == 0).select("auction", "price", "ts")
    if name == "ij":
        persons = (ev.filter((F.col("kind") == "person") & F.col("state").isin("OR", "ID", "CA"))
                   .select(F.col("eid").alias("person"), "state", "city", F.col("ts").alias("p_ts")).withWatermark("p_ts", wm))
        auctions = (ev.filter((F.col("kind") == "auction") & (F.col("category") == 10))
                    .select(F.col("eid").alias("auction"), "seller", "reserve", F.col("ts").alias("a_ts")).withWatermark("a_ts", wm))
        ttl = F.expr(f"INTERVAL {int(s.ttl * 1000)} MILLISECONDS")
        cond = (F.col("seller") == F.col("person")) & (F.col("a_ts") >= F.col("p_ts")) & (F.col("a_ts") <= F.col("p_ts") + ttl)
        return persons.join(auctions, cond, "inner").select("person", "state", "city", "auction", "reserve", "a_ts")
    timed = bids.withWatermark("ts", wm)
    if name == "sa":
        win = F.window("ts", f"{int(s.window * 1000)} milliseconds", f"{int(s.slide * 1000)} milliseconds")
        return timed.groupBy(win.alias("w"), "auction").count().select(
            F.col("w.start").alias("start"), F.col("w.end").alias("end"), "auction", "count")
    win = F.session_window("ts", f"{int(s.gap * 1000)} milliseconds")
    return timed.groupBy(win.alias("w"), "bidder").count().select(
        F.col("w.start").alias("start"), F.col("w.end").alias("end"), "bidder", "count")
