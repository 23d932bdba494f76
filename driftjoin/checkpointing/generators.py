"""Input generators: NexMark (persons, auctions, bids), the reachability stream, vectors for S3J.

Each generator returns the replayable input of a run: per source partition (= source
instance, like a Kafka partition) a list of ``(arrival time, record)`` in time order, with
records arriving at ``rate`` per second in total, spread round-robin over the partitions.
Replaying a partition from an offset gives the same records, which is what the protocols rely
on. The arrival time doubles as the record's event time (the windows' clock).

NexMark (after the NexMark benchmark and the generator the thesis extends): persons, auctions
and bids in the benchmark's proportions of 1 : 3 : 46; a query is fed only the kinds it reads.
The skewed setting is NexMark's *hot items*: with probability ``hot`` an auction's seller, a
bid's auction and a bid's bidder is one of a few hot keys instead of a uniformly drawn one
(the thesis uses 10 to 30%; here one hot key per kind, so one worker takes it all). Sellers are drawn among the most recent persons so that the
windowed join (Q8) finds its matches in the current window.

Reachability (thesis 3.6, after FFP): a static set of ``nodes``; each event is a new link
(60%), a new source node (15%), a deleted link (20%) or a deleted source node (5%); deletions
pick a live link or source. A link's (a source's) add and delete go to the same partition, so
a channel delivers them in order.
"""

from __future__ import annotations

import numpy as np

Input = list[list[tuple[float, tuple]]]

STATES = ("OR", "ID", "CA", "WA", "NY", "TX")
CITIES = ("Portland", "Boise", "Fresno", "Seattle", "Albany", "Austin", "Salem", "Reno")
HOT_KEYS = 1  # one hot seller / auction / bidder: all its load on one worker
RECENT = 60   # sellers and bidders are drawn among this many most recent persons (and auctions)


def _arrivals(n: int, rate: float, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(n, dtype=np.float64) / rate
    return t, np.arange(n) % partitions


def _split(times: np.ndarray, parts: np.ndarray, recs: list[tuple], partitions: int) -> Input:
    out: Input = [[] for _ in range(partitions)]
    for t, p, r in zip(times.tolist(), parts.tolist(), recs):
        out[p].append((t, r))
    return out


def _pick(rng: np.random.Generator, upto: np.ndarray, hot: float) -> np.ndarray:
    """A key below ``upto`` (exclusive) among the RECENT latest, or a hot key with probability ``hot``."""
    recent = upto - 1 - rng.integers(0, RECENT, size=len(upto))
    keys = np.maximum(recent, 0)
    is_hot = rng.random(len(upto)) < hot
    keys[is_hot] = rng.integers(0, HOT_KEYS, size=int(is_hot.sum()))
    return keys


def nexmark(kinds: str, rate: float, duration: float, partitions: int, seed: int, hot: float = 0.0) -> Input:
    """NexMark events of the given ``kinds`` (``"B"`` bids, ``"PA"`` persons and auctions)."""
    if not 0.0 <= hot <= 1.0:
        raise ValueError(f"hot (the hot-item share) must be in [0, 1], got {hot}")
    rng = np.random.default_rng(seed)
    n = int(rate * duration)
    times, parts = _arrivals(n, rate, partitions)
    recs: list[tuple]
    if kinds == "B":
        # bids reference auctions and persons created at the benchmark's rates (1 : 3 per 46 bids)
        persons_so_far = np.arange(n) // 46 + HOT_KEYS + 1
        auctions_so_far = np.arange(n) * 3 // 46 + HOT_KEYS + 1
        auction = _pick(rng, auctions_so_far, hot)
        bidder = _pick(rng, persons_so_far, hot)
        price = rng.integers(100, 100_000, size=n)
        recs = [("B", a, b, p, t) for a, b, p, t in zip(auction.tolist(), bidder.tolist(), price.tolist(), times.tolist())]
    elif kinds == "PA":
        is_person = (np.arange(n) % 4) == 0  # 1 person per 3 auctions
        person_id = np.cumsum(is_person) - 1
        auction_id = np.cumsum(~is_person) - 1
        seller = _pick(rng, person_id + 1, hot)
        state = rng.integers(0, len(STATES), size=n)
        city = rng.integers(0, len(CITIES), size=n)
        category = rng.integers(10, 20, size=n)
        reserve = rng.integers(100, 10_000, size=n)
        recs = []
        for k, t in enumerate(times.tolist()):
            if is_person[k]:
                pid = int(person_id[k])
                recs.append(("P", pid, f"person{pid}", CITIES[city[k]], STATES[state[k]], t))
            else:
                recs.append(("A", int(auction_id[k]), int(seller[k]), int(category[k]), int(reserve[k]), t))
    else:
        raise ValueError(f"NexMark kinds must be 'B' or 'PA', got {kinds!r}")
    return _split(times, parts, recs, partitions)


def reachability(rate: float, duration: float, partitions: int, seed: int, nodes: int) -> Input:
    """Link and source-node additions and deletions over a static set of ``nodes``."""
    if nodes < 2:
        raise ValueError(f"the reachability query needs at least 2 nodes, got {nodes}")
    rng = np.random.default_rng(seed)
    n = int(rate * duration)
    times = np.arange(n, dtype=np.float64) / rate
    kind = rng.choice(4, size=n, p=[0.60, 0.15, 0.20, 0.05])
    out: Input = [[] for _ in range(partitions)]
    live_links: list[tuple[int, int, int]] = []
    live_roots: list[tuple[int, int]] = []
    next_link = next_root = 0
    for t, k in zip(times.tolist(), kind.tolist()):
        if k == 2 and live_links:
            lid, a, b = live_links.pop(int(rng.integers(len(live_links))))
            out[lid % partitions].append((t, ("L-", lid, a, b)))
        elif k == 3 and live_roots:
            root, node = live_roots.pop(int(rng.integers(len(live_roots))))
            out[root % partitions].append((t, ("S-", root, node)))
        elif k == 1:
            node = int(rng.integers(nodes))
            live_roots.append((next_root, node))
            out[next_root % partitions].append((t, ("S+", next_root, node)))
            next_root += 1
        else:
            a, b = (int(x) for x in rng.choice(nodes, size=2, replace=False))
            live_links.append((next_link, a, b))
            out[next_link % partitions].append((t, ("L+", next_link, a, b)))
            next_link += 1
    return out


def vectors(rate: float, duration: float, partitions: int, seed: int, dim: int = 2) -> Input:
    """Two streams (side = id % 2) of vectors uniform in [-1, 1]^dim, for the S3J query."""
    rng = np.random.default_rng(seed)
    n = int(rate * duration)
    times, parts = _arrivals(n, rate, partitions)
    vec = rng.uniform(-1.0, 1.0, size=(n, dim))
    recs = [("V", i, i % 2, tuple(v), t) for i, (v, t) in enumerate(zip(vec.tolist(), times.tolist()))]
    return _split(times, parts, recs, partitions)
