"""NexMark events (persons, auctions, bids) as a pure function of the record's index.

The thesis's autoscaling queries (section 4.5.2) read the NexMark benchmark's three kinds of
records: people register, open auctions, and bid. Here event ``k`` of a stream is decided by
``k`` alone, so a replayed offset range gives the same events (exactly-once) and the same
events can be computed by numpy here and by Spark SQL expressions over a generator's ``id``
column (:mod:`driftjoin.control.autoscale.nexmark`): the two are written from the same
definitions below, and the tests check them against each other.

Definitions (the benchmark's proportions, 1 person : 3 auctions : 46 bids per 50 events):

- ``kind``: ``k mod 50`` is 0 for a person, 1 to 3 for an auction, else a bid.
- ``h(k, salt) = ((k * 48271 + salt * 1000003) mod M) * 48271 mod M``, ``M = 2^31 - 1`` (two
  steps of the MINSTD generator: no 64-bit overflow for ``k < 10^13``, so Spark's ANSI
  arithmetic computes it too).
- person ``k``: ``id = k div 50``; ``state = STATES[h(k, 1) mod 6]``; ``city = h(k, 8) mod 8``.
- auction ``k``: ``id = 3 (k div 50) + (k mod 50) - 1``; ``seller`` = one of the ``RECENT``
  newest persons, ``max(0, k div 50 - h(k, 2) mod RECENT)``; ``category = 10 + h(k, 3) mod 10``;
  ``reserve = 100 + h(k, 6) mod 9900``.
- bid ``k``: ``auction`` = one of the ``RECENT`` newest auctions,
  ``max(0, auctions(k) - 1 - h(k, 4) mod RECENT)`` with ``auctions(k) = 3 (k div 50) + min(k mod
  50, 3)`` opened so far; ``bidder = max(0, k div 50 - h(k, 5) mod RECENT)``; ``price = 100 +
  h(k, 7) mod 99900`` (cents).

The event time of record ``k`` is the time its source offers it (the generator's ``ts``).

>>> e = events(np.arange(100))
>>> [str(x) for x in e["kind"][:5]], int(e["id"][50]), int(e["id"][51])
(['person', 'auction', 'auction', 'auction', 'bid'], 1, 3)
"""

from __future__ import annotations

import numpy as np

M = 2_147_483_647
STATES = ("OR", "ID", "CA", "WA", "NY", "TX")
#: sellers and bidders are among this many newest persons, bids among this many newest auctions
RECENT = 100
EUR_PER_USD = 0.908


def mix(k: np.ndarray, salt: int) -> np.ndarray:
    """``h(k, salt)``: a pseudo-random non-negative int below ``M``, Spark SQL's ``pmod`` form."""
    k = np.asarray(k, dtype=np.int64)
    return ((k * 48271 + salt * 1_000_003) % M) * 48271 % M


def events(k: np.ndarray) -> dict[str, np.ndarray]:
    """The events of indices ``k`` as columns (fields of other kinds are -1 or empty).

    Columns: ``kind`` (person, auction, bid), ``id`` (person or auction id), ``state``,
    ``city``, ``seller``, ``category``, ``reserve``, ``auction``, ``bidder``, ``price``.
    """
    k = np.asarray(k, dtype=np.int64)
    slot, person = k % 50, k // 50
    is_person, is_auction = slot == 0, (slot >= 1) & (slot <= 3)
    is_bid = ~(is_person | is_auction)
    none = np.full(len(k), -1, dtype=np.int64)
    kind = np.where(is_person, "person", np.where(is_auction, "auction", "bid"))
    opened = 3 * person + np.minimum(slot, 3)
    return {
        "kind": kind,
        "id": np.where(is_person, person, np.where(is_auction, 3 * person + slot - 1, none)),
        "state": np.where(is_person, np.asarray(STATES)[mix(k, 1) % len(STATES)], ""),
        "city": np.where(is_person, mix(k, 8) % 8, none),
        "seller": np.where(is_auction, np.maximum(0, person - mix(k, 2) % RECENT), none),
        "category": np.where(is_auction, 10 + mix(k, 3) % 10, none),
        "reserve": np.where(is_auction, 100 + mix(k, 6) % 9900, none),
        "auction": np.where(is_bid, np.maximum(0, opened - 1 - mix(k, 4) % RECENT), none),
        "bidder": np.where(is_bid, np.maximum(0, person - mix(k, 5) % RECENT), none),
        "price": np.where(is_bid, 100 + mix(k, 7) % 99900, none),
    }
