"""What differs on a Spark Connect session: how to tell one, where its driver runs, what is refused.

A Spark Connect session (``SparkSession.builder.remote("sc://host:15002")``) is a client of a
Spark driver that runs elsewhere: it has no ``sparkContext``, no Py4J gateway (``_jvm``,
``_jsc``, ``_jsparkSession``) and no handle on a running query's JVM objects. driftjoin uses only
what both kinds of session offer (``spark.conf``, DataFrames, the ``StreamingQueryListener`` API,
query progress); a feature that needs the driver's JVM refuses a Connect session with
:class:`ConnectUnsupported`, which says what to do instead.

Example::

    >>> from driftjoin.spark.runtime.connect import ConnectUnsupported
    >>> str(ConnectUnsupported("x", "do y"))
    'x needs the Spark driver in this process (its JVM), which a Spark Connect session does not give: do y'
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any


class ConnectUnsupported(RuntimeError):
    """A feature that needs the driver's JVM, asked for on a Spark Connect session."""

    def __init__(self, feature: str, instead: str) -> None:
        super().__init__(f"{feature} needs the Spark driver in this process (its JVM), which a Spark Connect session "
                         f"does not give: {instead}")


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a remote driver)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def refuse_on_connect(spark: Any, feature: str, instead: str) -> None:
    """Raise :class:`ConnectUnsupported` if ``spark`` is a Spark Connect session."""
    if is_connect(spark):
        raise ConnectUnsupported(feature, instead)


def master(spark: Any) -> str:
    """The master URL of the driver behind ``spark`` (``local[2]``, ``spark://...``, ``yarn``...)."""
    return spark.conf.get("spark.master")


def _this_machine(host: str) -> bool:
    """Whether ``host`` names this machine (a loopback address, or this machine's name)."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    if any(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses):
        return True
    return host in (socket.gethostname(), socket.getfqdn())


def shares_files(spark: Any) -> bool:
    """Whether this process, the driver and every executor of ``spark`` see one file system:
    local mode, with the driver in this process (classic) or on this machine (Spark Connect)."""
    if not master(spark).startswith("local"):
        return False
    return not is_connect(spark) or _this_machine(spark.conf.get("spark.driver.host"))


def cluster_parallelism(spark: Any) -> int:
    """Tasks the cluster behind a Spark Connect session runs at once: ``spark.default.parallelism``
    when the server sets it, else Spark's default (its executors' cores), which a Connect client
    cannot read from a ``sparkContext``: a ``range`` without a partition count gets that many
    partitions, and one cheap query counts them (about 0.1 s on a local server)."""
    from pyspark.sql import functions as F

    given = spark.conf.get("spark.default.parallelism", None)
    if given:
        return int(given)
    rows = spark.range(0, 1 << 16).select(F.spark_partition_id().alias("p")).agg(F.max("p").alias("last")).first()
    return int(rows["last"]) + 1


def session_key(spark: Any) -> str:
    """A key of ``spark``'s session, the same for every Python handle on it (a classic session's
    JVM session id; a Connect session's id)."""
    if is_connect(spark):
        return f"connect:{spark.session_id}"
    from driftjoin.spark.runtime.jvm import session_uuid

    return session_uuid(spark)
