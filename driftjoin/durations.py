"""Parsing of durations written the way Spark writes them ("1 minute", "30 seconds", "500 ms")."""

from __future__ import annotations

import math
import re

_UNITS = {
    "ms": 0.001, "millisecond": 0.001, "milliseconds": 0.001,
    "s": 1.0, "sec": 1.0, "secs": 1.0, "second": 1.0, "seconds": 1.0,
    "m": 60.0, "min": 60.0, "mins": 60.0, "minute": 60.0, "minutes": 60.0,
    "h": 3600.0, "hour": 3600.0, "hours": 3600.0,
    "d": 86400.0, "day": 86400.0, "days": 86400.0,
}
_PATTERN = re.compile(r"^\s*([-+]?\d+(?:\.\d+)?)\s*([a-zA-Z]+)\s*$")


def parse_duration(text: str | float | int, what: str = "duration", *, allow_zero: bool = False) -> float:
    """Seconds in ``text``; a bare number is taken as seconds. Fails with a usable message."""
    if isinstance(text, bool):
        raise ValueError(f"{what} {text!r} is not a duration; write it like '1 minute', '30 seconds' or '500 ms'")
    if isinstance(text, (int, float)):
        seconds = float(text)
    else:
        m = _PATTERN.match(str(text))
        if not m or m.group(2).lower() not in _UNITS:
            raise ValueError(f"{what} {text!r} is not a duration; write it like '1 minute', '30 seconds' or '500 ms'")
        seconds = float(m.group(1)) * _UNITS[m.group(2).lower()]
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not allow_zero):
        raise ValueError(f"{what} must be {'zero or ' if allow_zero else ''}positive and finite, got {text!r}")
    return seconds
