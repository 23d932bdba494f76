"""Input-rate schedules: the five workload shapes of the thesis (section 4.5.3), deterministic.

A schedule is a piecewise-linear rate ``r(t) >= 0`` (records per second, ``t`` seconds after
the stream's start) given by knots; ``count(t)`` is the number of records offered by ``t``
(the integral of the rate) and ``time_of(k)`` its inverse, the time record ``k`` becomes
available. The generator sources use them so that record ``k`` has time
``start + time_of(k)`` whatever micro-batch reads it: a replayed offset range gives the same
rows. After the last knot the rate stays at its last value.

Shapes (``low``/``high`` records per second over ``duration`` seconds):

- ``constant``: ``high`` throughout.
- ``increasing``: from ``low`` (the thesis: 0) up to ``high``, linearly.
- ``decreasing``: from ``high`` down to ``low``.
- ``cosine``: ``low + (high - low) (1 - cos(2 pi t cycles / duration)) / 2``: starts low,
  peaks at the middle of each cycle (64 linear pieces per cycle).
- ``random``: starts at ``(low + high) / 2``; every ``step`` seconds the rate moves by a
  uniform random amount in ``[-jump, jump] * (high - low)``, clipped to ``[low, high]``
  (seeded: the same spec gives the same walk).
- ``steps``: fixed pulses: ``levels`` (fractions of the way from ``low`` to ``high``) held
  for ``duration / len(levels)`` each; the default ``0, 1, 0.5`` is the thesis's convergence
  experiment (low, then high, then medium).

A spec string names a schedule in one option, e.g. ``"cosine:low=100,high=2000,duration=600"``
or ``"steps:low=200,high=2000,duration=900,levels=0/1/0.5"``; :meth:`RateSchedule.spec` gives
it back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

SHAPES = ("constant", "increasing", "decreasing", "cosine", "random", "steps")
_COSINE_PIECES = 64


@dataclass(frozen=True)
class RateSchedule:
    shape: str = "constant"
    low: float = 0.0
    high: float = 1000.0
    duration: float = 600.0
    cycles: float = 1.0
    step: float = 10.0
    jump: float = 0.1
    levels: tuple[float, ...] = (0.0, 1.0, 0.5)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.shape not in SHAPES:
            raise ValueError(f"rate schedule {self.shape!r}: choose one of {', '.join(SHAPES)}")
        if not (0 <= self.low <= self.high) or not math.isfinite(self.high) or self.high <= 0:
            raise ValueError(f"rate schedule needs 0 <= low <= high and high > 0 (records/s), got low={self.low}, high={self.high}")
        if not self.duration > 0 or not self.cycles > 0 or not self.step > 0 or not 0 <= self.jump <= 1:
            raise ValueError("rate schedule needs duration, cycles and step > 0 and jump in [0, 1]")
        if not self.levels or any(not 0 <= v <= 1 for v in self.levels):
            raise ValueError("rate schedule levels are fractions in [0, 1] between low and high")
        t, r = self._knots()
        t, r = np.asarray(t, dtype=float), np.asarray(r, dtype=float)    # a step or duration given as int
        object.__setattr__(self, "_t", t)
        object.__setattr__(self, "_r", r)
        # records offered at each knot (trapezoids)
        object.__setattr__(self, "_n", np.concatenate([[0.0], np.cumsum(np.diff(t) * (r[1:] + r[:-1]) / 2)]))

    def _knots(self) -> tuple[np.ndarray, np.ndarray]:
        lo, hi, d = self.low, self.high, self.duration
        if self.shape == "constant":
            return np.array([0.0, d]), np.array([hi, hi])
        if self.shape == "increasing":
            return np.array([0.0, d]), np.array([lo, hi])
        if self.shape == "decreasing":
            return np.array([0.0, d]), np.array([hi, lo])
        if self.shape == "cosine":
            t = np.linspace(0.0, d, int(math.ceil(_COSINE_PIECES * self.cycles)) + 1)
            return t, lo + (hi - lo) * (1 - np.cos(2 * np.pi * self.cycles * t / d)) / 2
        if self.shape == "random":
            n = max(1, int(math.ceil(d / self.step)))
            rng = np.random.default_rng(self.seed)
            walk = np.empty(n)
            walk[0] = (lo + hi) / 2
            for i in range(1, n):
                walk[i] = min(hi, max(lo, walk[i - 1] + rng.uniform(-self.jump, self.jump) * (hi - lo)))
            starts = np.arange(n) * self.step
            ends = np.minimum(starts + self.step, d)
            return np.ravel(np.column_stack([starts, ends])), np.repeat(walk, 2)
        k = len(self.levels)
        starts = np.arange(k) * d / k
        rates = lo + (hi - lo) * np.asarray(self.levels, dtype=float)
        return np.ravel(np.column_stack([starts, starts + d / k])), np.repeat(rates, 2)

    # -- the three functions a source needs ----------------------------------------------------

    def rate(self, t: float | np.ndarray) -> np.ndarray:
        """Records per second at ``t`` (the right limit at a step)."""
        t = np.asarray(t, dtype=float)
        return np.interp(t, self._t, self._r, left=self._r[0], right=self._r[-1])

    def count(self, t: float | np.ndarray) -> np.ndarray:
        """Records offered in ``[0, t]`` (a float; floor it for an offset)."""
        t = np.maximum(np.asarray(t, dtype=float), 0.0)
        i = np.clip(np.searchsorted(self._t, t, side="right") - 1, 0, len(self._t) - 1)
        t0, r0 = self._t[i], self._r[i]
        slope = np.zeros_like(t0)
        inside = i < len(self._t) - 1
        j = np.minimum(i + 1, len(self._t) - 1)
        dt = self._t[j] - t0
        np.divide(self._r[j] - r0, dt, out=slope, where=inside & (dt > 0))
        x = t - t0
        return self._n[i] + r0 * x + slope * x * x / 2

    def time_of(self, k: float | np.ndarray) -> np.ndarray:
        """The time record ``k`` becomes available: the smallest ``t`` with ``count(t) >= k``."""
        k = np.asarray(k, dtype=float)
        i = np.clip(np.searchsorted(self._n, k, side="left") - 1, 0, len(self._t) - 1)
        t0, r0, n0 = self._t[i], self._r[i], self._n[i]
        j = np.minimum(i + 1, len(self._t) - 1)
        dt = self._t[j] - t0
        slope = np.where((i < len(self._t) - 1) & (dt > 0), (self._r[j] - r0) / np.where(dt > 0, dt, 1), 0.0)
        need = np.maximum(k - n0, 0.0)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            # solve r0 x + slope x^2 / 2 = need for the smallest x >= 0
            quad = np.where(np.abs(slope) > 1e-12,
                            (-r0 + np.sqrt(np.maximum(r0 * r0 + 2 * slope * need, 0.0))) / np.where(np.abs(slope) > 1e-12, slope, 1),
                            need / np.where(r0 > 0, r0, np.inf))
            last = self._r[-1]
            # past the schedule at its last rate; a rate near 0 puts the record at (or near) infinity
            tail = self._t[-1] + (k - self._n[-1]) / (last if last > 0 else np.inf)
        beyond = k > self._n[-1]
        return np.where(beyond, tail, t0 + np.where(need > 0, quad, 0.0))

    # -- spec strings --------------------------------------------------------------------------

    def spec(self) -> str:
        parts = [f"low={self.low!r}", f"high={self.high!r}", f"duration={self.duration!r}"]
        if self.shape == "cosine":
            parts.append(f"cycles={self.cycles:g}")
        if self.shape == "random":
            parts += [f"step={self.step:g}", f"jump={self.jump:g}", f"seed={self.seed}"]
        if self.shape == "steps":
            parts.append("levels=" + "/".join(f"{v:g}" for v in self.levels))
        return f"{self.shape}:" + ",".join(parts)

    @staticmethod
    def parse(spec: str) -> "RateSchedule":
        shape, _, rest = spec.strip().partition(":")
        kwargs: dict[str, object] = {}
        for item in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = item.partition("=")
            if not eq or key not in RateSchedule.__dataclass_fields__ or key == "shape":
                raise ValueError(f"rate schedule {spec!r}: unknown setting {item!r} (use low, high, duration, cycles, step, jump, levels, seed)")
            try:
                kwargs[key] = (tuple(float(v) for v in value.split("/")) if key == "levels"
                               else int(value) if key == "seed" else float(value))
            except ValueError:
                raise ValueError(f"rate schedule {spec!r}: {key}={value!r} is not a number") from None
        return RateSchedule(shape.strip(), **kwargs)
