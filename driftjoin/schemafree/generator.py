"""Seedable generators of schema-free JSON document streams (Section VII-B).

* :func:`nobench_documents` - NoBench-style objects (Chasseur et al.): strings,
  a Boolean, ``thousandth``, dynamically typed ``dyn1``/``dyn2``, a nested object, a
  nested array and a block of sparse attributes. As in the paper the unique ``num``
  attribute is left out; the other attributes are optional (except ``bool`` and
  ``thousandth``) and drawn from bounded pools so that documents can join.
* :func:`server_log_documents` - server access log like the paper's Fig. 1: logins and
  file accesses of users on a few servers, with a ubiquitous Boolean ``Success``,
  correlated fields (a user's IP and location, a department's files), fields that appear
  only for some events and an increasing ``timestamp`` for time windows.

The same seed always yields the same documents (``random.Random`` only).
"""

from __future__ import annotations

import random
from typing import Any


def _pick(rng: random.Random, pool: int, skew: float = 0.0) -> int:
    """Index in ``range(pool)``; ``skew > 0`` favours small indices (Zipf-like)."""
    if skew <= 0:
        return rng.randrange(pool)
    return min(int(pool * rng.random() ** (1.0 + skew)), pool - 1)


def nobench_documents(
    n: int,
    seed: int = 0,
    *,
    thousandth: int = 1000,
    optional: float = 0.35,
    sparse_blocks: int = 100,
) -> list[dict[str, Any]]:
    """``n`` NoBench-style documents.

    ``thousandth`` is the number of values of the ubiquitous ``thousandth`` attribute
    (NoBench: 1000), ``optional`` the probability of each optional attribute and
    ``sparse_blocks`` the number of blocks of 10 sparse attributes (NoBench: 100).
    """
    rng = random.Random(seed)

    def maybe() -> bool:
        return rng.random() < optional

    docs: list[dict[str, Any]] = []
    for i in range(n):
        doc: dict[str, Any] = {"bool": rng.random() < 0.5, "thousandth": rng.randrange(thousandth)}
        if maybe():
            doc["str1"] = f"s{rng.randrange(10 * max(n, 1)):x}"
        if maybe():
            doc["str2"] = f"t{_pick(rng, 20, skew=1.0)}"
        if maybe():
            value = rng.randrange(10)
            doc["dyn1"] = value if rng.random() < 0.5 else str(value)
        if maybe():
            kind = rng.randrange(4)
            doc["dyn2"] = [rng.randrange(5), rng.randrange(5), None, rng.random() < 0.5][kind]
        if maybe():
            doc["nested_obj"] = {"str": f"n{rng.randrange(10)}", "num": rng.randrange(100)}
        if maybe():
            doc["nested_arr"] = [f"a{rng.randrange(4)}" for _ in range(rng.randrange(3))]
        if rng.random() < 0.5:
            block = rng.randrange(sparse_blocks)
            for k in range(10):
                if rng.random() < 0.7:
                    doc[f"sparse_{block * 10 + k:03d}"] = f"v{rng.randrange(5)}"
        if i % 97 == 0:
            doc["dyn2"] = None  # explicit null: absent attribute
        docs.append(doc)
    return docs


_SEVERITIES = ("Info", "Warn.", "Err.", "Crit.")


def server_log_documents(
    n: int,
    seed: int = 0,
    *,
    users: int = 200,
    servers: int = 5,
    files: int = 500,
    rate: float = 10.0,
    timestamp: bool = True,
) -> list[dict[str, Any]]:
    """``n`` server-log documents (logins and file accesses), ``rate`` per time unit.

    With ``timestamp`` each document has an increasing ``timestamp`` for a
    :class:`~driftjoin.schemafree.window.TimeWindow` (which removes it from the join);
    leave it out for count windows, where a unique timestamp would block every join.

    Users are Zipf-like skewed; each user has a home IP, a location and a department,
    and file accesses mostly touch the department's files.
    """
    rng = random.Random(seed)
    departments = max(users // 20, 1)
    home_ip = [f"10.{u % 7}.{u // 7 % 256}.{rng.randrange(1, 255)}" for u in range(users)]
    location = [f"L{rng.randrange(12)}" for _ in range(users)]
    department = [rng.randrange(departments) for _ in range(users)]
    time = 0.0
    docs: list[dict[str, Any]] = []
    for _ in range(n):
        time += rng.expovariate(rate)
        user = _pick(rng, users, skew=1.5)
        success = rng.random() < 0.85
        doc: dict[str, Any] = {"timestamp": round(time, 6)} if timestamp else {}
        doc.update(Server=f"srv{rng.randrange(servers)}", User=f"u{user}", Success=success)
        if rng.random() < 0.45:
            doc["Event"] = "login"
            doc["IP"] = home_ip[user] if rng.random() < 0.9 else f"172.16.0.{rng.randrange(256)}"
            doc["Location"] = location[user]
            if rng.random() < 0.3:
                doc["Client"] = {"os": rng.choice(["linux", "win", "mac"]), "agent": f"v{rng.randrange(3)}"}
        else:
            doc["Event"] = "file"
            own = rng.random() < 0.8
            dept = department[user] if own else rng.randrange(departments)
            doc["File"] = f"/d{dept}/f{_pick(rng, files // departments or 1, skew=1.0)}"
            doc["Access"] = "write" if rng.random() < 0.3 else "read"
        if not success:
            severity = _SEVERITIES[1 + _pick(rng, 3, skew=1.0)]
            doc["Severity"] = severity
            doc["MsgId"] = 1 + rng.randrange(4)
        elif rng.random() < 0.2:
            doc["Severity"] = "Info"
        if rng.random() < 0.1:
            doc["Session"] = None  # explicit null: absent attribute
        if rng.random() < 0.05:
            doc["Tags"] = sorted(rng.sample(["vpn", "admin", "batch", "night"], 2))
        docs.append(doc)
    return docs
