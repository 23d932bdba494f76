"""A discrete-event simulator (simpy) of a micro-batch streaming query under an autoscaler.

The live runs on this machine stop at 2 executors; the thesis goes to 70 workers and
hour-long workloads. The simulator runs the *same* policy objects (:mod:`.policies`, through
the same :class:`Scaler`) against a model of Spark's micro-batch engine whose constants come
from the live runs (:class:`SimConfig`, calibrated by bench/autoscale_live.py):

- records arrive by a :class:`RateSchedule`; a batch starts at the next trigger tick (or at
  once) and takes everything offered (up to ``max_per_batch``);
- a query is a chain of stages (:class:`StageModel`, the thesis's operators; by default one
  stage of ``1 / capacity`` seconds per record): a stage receives its upstream's records
  times the upstream's selectivity and runs its tasks (the state partitions unless it says
  otherwise); task ``i`` does ``share_i * records * cost`` seconds of work plus
  ``task_overhead``; Spark hands tasks in index order to the first free core, so a stage
  takes the makespan of that list schedule (``ceil(P / k)`` waves of equal tasks) and the
  stages of a batch run one after the other; the batch adds ``batch_overhead`` (planning,
  commit); on a machine shared with other jobs ``k`` executors get the CPU of only
  ``machine_cores`` (when fewer than ``k``), so their tasks stretch by ``k / machine_cores``;
- a stage may hold state (:attr:`StageModel.state_ttl`): the records it took in the last
  ``state_ttl`` seconds, which each of its batches scans (``state_cost`` per row) and each of its
  records probes (``probe_cost`` per row of its partition), so its work grows with the rate
  squared (the
  thesis's Incremental Join: "a constantly growing state and a non-linear to the input
  computational cost", bounded by its time-to-live);
- scaling ``live``: an added executor takes tasks ``launch_delay`` seconds later (also the
  tasks of a stage already running), a removed one goes at once; the next batch pays
  ``state_reload`` (state partitions reloaded by other executors). ``restart`` (the thesis's
  stop-and-restart, Flink's savepoint path; on Spark ``query.stop()`` and a restart from the
  checkpoint): the batch in flight is abandoned (its records are read again after the
  restart), no batch runs for ``restart_pause`` seconds, and ``launch_delay`` more when the
  restart adds executors (both measured on Spark: bench/autoscale_mechanics.py), then the
  first batch pays ``restart_reload`` (the state of every partition reloaded, new Python
  workers: also measured there);
- Spark's dynamic allocation (policy ``spark-dynamic-allocation``) is modelled as Spark
  configures it: while tasks wait longer than ``backlog_timeout`` it asks for 1, 2, 4 ... more
  executors every ``backlog_timeout`` (up to the tasks running and waiting, and
  ``max_workers``); an executor idle for ``idle_timeout`` seconds is removed.

It reports what the live controller reports (per window :class:`WindowMetrics`, with one
:class:`StageMetrics` per stage for DS2) and the thesis's latencies: the *queue latency* of
every record offered in the run (batch start minus the time it was offered; a record still
waiting when the run ends counts the time it has waited so far, so a policy that falls behind
cannot look fast by processing few records), the same over the processed records only, and
the processing-time latency (batch end minus that time), beside the processed fraction.
``shares`` (a function of time giving each state partition's fraction of the load) models
skew; ``balancer`` (see :mod:`driftjoin.control.joint`) may change the shares while it runs.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import simpy

from driftjoin.control.autoscale.latency import batch_waits, waiting_waits, weighted_quantile
from driftjoin.control.autoscale.metrics import StageMetrics, WindowMetrics
from driftjoin.control.autoscale.policies import Scaler
from driftjoin.generators.rates import RateSchedule


@dataclass(frozen=True)
class StageModel:
    """One stage of a simulated query (a Spark stage, the thesis's operator).

    ``cost``: seconds of one core per record in (1 / DS2's true processing rate while the state
    is empty); ``selectivity``: records out per record in; ``tasks``: its task count (``None``:
    the state partitions, :attr:`SimConfig.partitions`; a source stage has as many as the
    source's partitions); ``state_ttl``, ``state_cost``, ``probe_cost``: a stage whose state
    holds its last ``state_ttl`` seconds of records, at that cost per row per batch and per
    record (see the module docstring).
    """

    name: str
    cost: float
    selectivity: float = 1.0
    tasks: int | None = None
    #: seconds of event time a record stays in the stage's state (``None``: a stateless stage)
    state_ttl: float | None = None
    #: seconds per state row per batch (scanning the state: eviction by the watermark)
    state_cost: float = 0.0
    #: seconds per record per state row of its partition (a record probes its own partition's
    #: state, a 1/tasks share of the rows: what its probe costs as the state grows)
    probe_cost: float = 0.0

    def __post_init__(self) -> None:
        for name in ("state_cost", "probe_cost"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"stage {self.name}: {name}={v!r} must be a finite number of seconds >= 0")
        if self.state_ttl is not None and not self.state_ttl > 0:
            raise ValueError(f"stage {self.name}: state_ttl={self.state_ttl!r} must be > 0 seconds (None: stateless)")
        if not (self.cost >= 0 and math.isfinite(self.cost)):
            raise ValueError(f"stage {self.name}: cost={self.cost!r} must be a finite number of seconds per record >= 0")
        if not (self.selectivity >= 0 and math.isfinite(self.selectivity)):
            raise ValueError(f"stage {self.name}: selectivity={self.selectivity!r} must be >= 0")
        if self.tasks is not None and (isinstance(self.tasks, bool) or not isinstance(self.tasks, int) or self.tasks < 1):
            raise ValueError(f"stage {self.name}: tasks={self.tasks!r} must be an int >= 1 (or None: the state partitions)")


@dataclass(frozen=True)
class SimConfig:
    """The engine's constants (defaults: measured on the standalone cluster here, see
    docs/autoscaling.md) and the run's settings. ``stages``: the query's stages in order;
    empty: one stage of ``1 / capacity`` seconds per record over the state partitions."""

    capacity: float = 2000.0
    machine_cores: float = math.inf
    batch_overhead: float = 0.5
    task_overhead: float = 0.1
    partitions: int = 70
    trigger_interval: float = 1.0
    max_per_batch: int | None = None
    launch_delay: float = 20.0
    state_reload: float = 2.0
    restart_pause: float = 10.0
    #: the first batch's extra time after a restart (``None``: ``state_reload``, as after a live action)
    restart_reload: float | None = None
    mode: str = "live"
    #: CPU of an executor's process tree per second of task busy time: 1.20 measured on one
    #: executor at 64% busy, load average 2.8-4.4 (bench/autoscale_live.py --cpu-rate); the
    #: reading is capped at one core, as the collector's is
    cpu_per_busy: float = 1.2
    monitoring_window: float = 30.0
    backlog_timeout: float = 1.0
    idle_timeout: float = 60.0
    stages: tuple[StageModel, ...] = ()

    def __post_init__(self) -> None:
        if self.mode not in ("live", "restart"):
            raise ValueError(f"mode={self.mode!r}: choose 'live' (executors added under the running query) or 'restart' "
                             "(stop, rescale, restart from the checkpoint: the thesis's actuation)")
        if self.restart_reload is not None and not (self.restart_reload >= 0 and math.isfinite(self.restart_reload)):
            raise ValueError(f"restart_reload={self.restart_reload!r} must be a finite number of seconds >= 0 (None: state_reload)")
        for name in ("restart_pause", "state_reload", "launch_delay"):
            v = getattr(self, name)
            if not (v >= 0 and math.isfinite(v)):
                raise ValueError(f"{name}={v!r} must be a finite number of seconds >= 0")

    def query(self) -> tuple[StageModel, ...]:
        """The stages a batch runs (the default single stage when none are given)."""
        return self.stages or (StageModel("stage0", 1.0 / self.capacity),)

    def stage_capacity(self) -> float:
        """Records/s one core takes through every stage (without overheads)."""
        per, sel = 0.0, 1.0
        for st in self.query():
            per += sel * st.cost
            sel *= st.selectivity
        return 1.0 / per if per > 0 else math.inf


@dataclass
class SimResult:
    windows: list[WindowMetrics]
    workers: list[tuple[float, int]]
    actions: int
    batches: list[tuple[float, float, int]]
    queue_latency: tuple[np.ndarray, np.ndarray] = field(repr=False, default=None)
    processing_latency: tuple[np.ndarray, np.ndarray] = field(repr=False, default=None)
    balance_actions: int = 0
    #: waits so far of the records offered but not processed when the run ended (censored)
    waiting: tuple[np.ndarray, np.ndarray] = field(repr=False, default=None)
    offered: int = 0

    def latency(self, q: float, kind: str = "queue") -> float:
        """Quantile ``q`` of ``kind``: ``"queue"`` the thesis's queue latency of every record
        offered (those still waiting at the end count their wait so far), ``"processed"`` the
        same over the processed records only, ``"processing"`` batch end minus offer time."""
        if kind == "queue":
            parts = [self.queue_latency, self.waiting or (np.array([]), np.array([]))]
            lat = (np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))
        elif kind in ("processed", "processing"):
            lat = self.queue_latency if kind == "processed" else self.processing_latency
        else:
            raise ValueError(f"latency kind {kind!r}: choose queue, processed or processing")
        return weighted_quantile(lat[0], lat[1], q)

    def processed_fraction(self) -> float:
        """Records processed over records offered in the run."""
        return sum(b[2] for b in self.batches) / self.offered if self.offered else 1.0

    def mean_workers(self, end: float) -> float:
        """Time-weighted mean number of workers over ``[0, end]``."""
        pts = self.workers + [(end, self.workers[-1][1])]
        return sum((b[0] - a[0]) * a[1] for a, b in zip(pts, pts[1:])) / end

    def throughput(self) -> float:
        return sum(b[2] for b in self.batches) / max(self.batches[-1][0] + self.batches[-1][1], 1e-9) if self.batches else 0.0


def list_schedule_makespan(durations: np.ndarray, cores: int) -> float:
    """Makespan of tasks handed in index order to the first free of ``cores`` cores (Spark)."""
    free = [0.0] * max(1, cores)
    for d in durations:
        t = heapq.heappop(free)
        heapq.heappush(free, t + float(d))
    return max(free)


class Simulation:
    """One simulated run: ``Simulation(schedule, scaler, config).run(duration)``."""

    def __init__(self, schedule: RateSchedule, scaler: Scaler, config: SimConfig, *, initial_workers: int = 1,
                 shares: Callable[[float], np.ndarray] | None = None, balancer=None) -> None:
        self.schedule, self.scaler, self.cfg = schedule, scaler, config
        self.env = simpy.Environment()
        self.k = scaler.clamp(initial_workers)
        self.pending_up: list[float] = []            # times added executors become usable
        self.shares_fn = shares
        self.balancer = balancer
        self.stages = config.query()
        self.processed = 0
        self.reload_due = False
        self.paused_until = 0.0
        self.workers_log: list[tuple[float, int]] = [(0.0, self.k)]
        self.batches: list[tuple[float, float, int]] = []
        self._win: list[tuple[float, float, int]] = []                 # start, duration, records
        self._stage_in = np.zeros(len(self.stages))                    # per stage in the window: records in,
        self._stage_out = np.zeros(len(self.stages))                   # out,
        self._stage_useful = np.zeros(len(self.stages))                # and task seconds
        self._busy: list[tuple[float, int]] = [(0.0, 0)]               # (time, cores running tasks from then on)
        #: per stage with state: (batch start, records taken) of the batches still in its state
        self._state: list[list[tuple[float, float]]] = [[] for _ in self.stages]
        self._engine = None                          # the engine's process (a restart interrupts it)
        self._in_batch = False
        self._qlat: list[tuple[np.ndarray, np.ndarray]] = []
        self._plat: list[tuple[np.ndarray, np.ndarray]] = []
        self._lag0 = 0.0
        self._t0 = 0.0
        self.windows: list[WindowMetrics] = []
        self._da_step = 1
        self._da_next: float | None = None
        self._idle_since = 0.0
        self._arrival = self.env.event()             # fires when an added executor registers

    # -- the engine ----------------------------------------------------------------------------

    def offered(self, t: float) -> int:
        return int(math.floor(float(self.schedule.count(t)) + 1e-9))

    def shares(self, t: float) -> np.ndarray:
        p = self.cfg.partitions
        base = np.full(p, 1.0 / p) if self.shares_fn is None else np.asarray(self.shares_fn(t), dtype=float)
        return self.balancer.shares(t, base, self.k) if self.balancer is not None else base

    def _set_workers(self, k: int) -> None:
        if k != self.k:
            self.k = k
            self.workers_log.append((self.env.now, k))

    def engine(self):
        cfg = self.cfg
        while True:
            env = self.env
            if env.now < self.paused_until:
                yield env.timeout(self.paused_until - env.now)
            if cfg.trigger_interval > 0:
                tick = math.ceil(env.now / cfg.trigger_interval - 1e-9) * cfg.trigger_interval
                if tick > env.now:
                    yield env.timeout(tick - env.now)
            start = env.now
            self._activate_launched()
            n = self.offered(start) - self.processed
            if cfg.max_per_batch:
                n = min(n, cfg.max_per_batch)
            if n <= 0:
                yield env.timeout(max(cfg.trigger_interval, 0.05))
                continue
            shares = self.shares(start)
            self._idle_check(max(len(shares), max((st.tasks or 0) for st in self.stages)))
            reload = 0.0
            if self.reload_due:
                reload = cfg.restart_reload if self.reload_due == "restart" and cfg.restart_reload is not None else cfg.state_reload
            self.reload_due = False
            self._in_batch = True
            try:
                yield env.timeout(cfg.batch_overhead + reload)
                records = float(n)
                taken = []
                for i, st in enumerate(self.stages):
                    p = st.tasks or cfg.partitions
                    frac = shares if p == len(shares) else np.full(p, 1.0 / p)
                    stretch = max(1.0, self.k / cfg.machine_cores)
                    rows = self.state_rows(i, start)        # a record probes its own partition's share
                    work = records * (st.cost + st.probe_cost * rows / p) + rows * st.state_cost
                    tasks = frac * (work * stretch) + cfg.task_overhead
                    yield from self._run_stage(tasks)
                    self._stage_in[i] += records
                    self._stage_out[i] += records * st.selectivity
                    self._stage_useful[i] += float(tasks.sum())
                    taken.append(records)
                    records *= st.selectivity
            except simpy.Interrupt:              # a restart stopped the query: the batch is read again after it
                self._in_batch = False
                self._busy.append((env.now, 0))
                continue
            self._in_batch = False
            for i, st in enumerate(self.stages):
                if st.state_ttl is not None:
                    self._state[i].append((start, taken[i]))
            self._busy.append((env.now, 0))
            duration = env.now - start
            first = self.processed
            self.processed += n
            self._qlat.append(batch_waits(self.schedule, first, first + n, start))
            self._plat.append(batch_waits(self.schedule, first, first + n, start + duration))
            self.batches.append((start, duration, n))
            self._win.append((start, duration, n))

    def state_rows(self, i: int, now: float) -> float:
        """Rows in stage ``i``'s state at ``now``: the records it took over the last ``state_ttl``
        seconds (0 for a stateless stage)."""
        ttl = self.stages[i].state_ttl
        if ttl is None:
            return 0.0
        kept = [(t, n) for t, n in self._state[i] if t >= now - ttl]
        self._state[i] = kept
        return float(sum(n for _, n in kept))

    def _run_stage(self, tasks: np.ndarray):
        """Tasks in index order to free cores; executors that arrive meanwhile take tasks too."""
        env = self.env
        pending, running = list(tasks), []
        pending.reverse()                          # pop() from the end: index order
        while pending or running:
            self._activate_launched()
            while pending and len(running) < max(1, self.k):
                heapq.heappush(running, env.now + pending.pop())
            self._busy.append((env.now, len(running)))
            self._allocate(len(pending), len(running))
            wake = running[0]
            if pending and self._da_next is not None:
                wake = min(wake, self._da_next)
            yield env.timeout(max(0.0, wake - env.now)) | self._arrival
            while running and running[0] <= env.now + 1e-12:
                heapq.heappop(running)

    def _launch(self, count: int) -> None:
        """``count`` executors requested now: usable ``launch_delay`` seconds later."""
        if count <= 0:
            return
        at = self.env.now + self.cfg.launch_delay
        self.pending_up += [at] * count
        self.env.process(self._register(at))

    def _register(self, at: float):
        yield self.env.timeout(max(0.0, at - self.env.now))
        arrival, self._arrival = self._arrival, self.env.event()
        arrival.succeed()

    def _activate_launched(self) -> None:
        now = self.env.now
        ready = [t for t in self.pending_up if t <= now + 1e-12]
        if ready:
            self.pending_up = [t for t in self.pending_up if t > now + 1e-12]
            self._set_workers(self.k + len(ready))
            self.reload_due = True

    def _allocate(self, waiting: int, running: int) -> None:
        """Spark's allocator: tasks waiting for ``backlog_timeout`` -> request 1, 2, 4 ... more
        executors, again every ``backlog_timeout`` while tasks wait (up to the tasks there)."""
        if not self.scaler.policy.external:
            return
        now = self.env.now
        if waiting <= 0:
            self._da_next, self._da_step = None, 1
            return
        if self._da_next is None:
            self._da_next = now + self.cfg.backlog_timeout
            return
        if now + 1e-12 >= self._da_next:
            need = min(self.scaler.max_workers, waiting + running)
            add = min(self._da_step, need - self.k - len(self.pending_up))
            if add > 0:
                self._launch(add)
                self._da_step *= 2
            self._da_next = now + self.cfg.backlog_timeout

    def _idle_check(self, tasks: int) -> None:
        """Spark's allocator: executors beyond a batch's tasks never get one and are removed
        after ``idle_timeout``."""
        if not self.scaler.policy.external:
            return
        if self.k > max(tasks, self.scaler.min_workers):
            if self._idle_since == 0.0:
                self._idle_since = self.env.now
            elif self.env.now - self._idle_since >= self.cfg.idle_timeout:
                self._set_workers(max(tasks, self.scaler.min_workers))
                self._idle_since = 0.0
        else:
            self._idle_since = 0.0

    # -- the controller ------------------------------------------------------------------------

    def window_metrics(self) -> WindowMetrics:
        now, cfg = self.env.now, self.cfg
        dur = max(now - self._t0, 1e-9)
        n = sum(b[2] for b in self._win)
        lag = float(self.offered(now) - self.processed)
        # core-seconds spent running tasks in the window, batches in progress included
        pts = [p for p in self._busy if p[0] < now] + [(now, 0)]
        core_seconds = sum((b[0] - max(a[0], self._t0)) * a[1] for a, b in zip(pts, pts[1:]) if b[0] > self._t0)
        self._busy = [pts[-2]] if len(pts) >= 2 else [(now, 0)]
        busy = min(1.0, core_seconds / (dur * max(1, self.k)))
        stages = tuple(StageMetrics(st.name, (self.stages[i - 1].name,) if i else (), st.tasks or cfg.partitions,
                                    float(self._stage_in[i]), float(self._stage_out[i]), float(self._stage_useful[i]))
                       for i, st in enumerate(self.stages)) if n else ()
        m = WindowMetrics(
            time=now, duration=dur, workers=self.k,
            input_rate=(self.offered(now) - self.offered(self._t0)) / dur, processed_rate=n / dur,
            lag=lag, lag_change_rate=(lag - self._lag0) / dur, stages=stages,
            cpu_utilisation=min(1.0, busy * cfg.cpu_per_busy), idle_per_second=1.0 - busy,
            batch_duration=float(np.mean([b[1] for b in self._win])) if self._win else math.nan,
            trigger_interval=cfg.trigger_interval, batches=len(self._win))
        self._t0, self._lag0, self._win = now, lag, []
        self._stage_in[:] = 0.0
        self._stage_out[:] = 0.0
        self._stage_useful[:] = 0.0
        return m

    def controller(self):
        cfg = self.cfg
        while True:
            yield self.env.timeout(cfg.monitoring_window)
            m = self.window_metrics()
            self.windows.append(m)
            if self.balancer is not None:
                self.balancer.observe(m, self.shares(self.env.now), self.k)
            if self.balancer is not None and self.balancer.wants_balance_instead(m, self.k, self.scaler):
                continue
            target = self.scaler.decide(m, self.k)
            if target is None:
                continue
            if cfg.mode == "restart":     # stop; a scale-up waits for its executors to launch; start again
                self.paused_until = self.env.now + cfg.restart_pause + (cfg.launch_delay if target > self.k else 0.0)
                self._set_workers(target)
                self.reload_due = "restart"
                if self._in_batch and self._engine is not None and self._engine.is_alive:
                    self._engine.interrupt("restart")
            elif target > self.k:
                self._launch(target - self.k - len(self.pending_up))
            else:
                self.pending_up = []
                self._set_workers(target)
                self.reload_due = True

    def run(self, duration: float) -> SimResult:
        self._engine = self.env.process(self.engine())
        self.env.process(self.controller())
        self.env.run(until=duration)

        def cat(parts):
            if not parts:
                return np.array([]), np.array([])
            return np.concatenate([v for v, _ in parts]), np.concatenate([w for _, w in parts])

        offered = self.offered(duration)
        return SimResult(self.windows, self.workers_log, len(self.scaler.actions), self.batches, cat(self._qlat), cat(self._plat),
                         balance_actions=getattr(self.balancer, "actions", 0),
                         waiting=waiting_waits(self.schedule, self.processed, offered, duration), offered=offered)


def simulate(schedule: RateSchedule | str, policy: Scaler, duration: float, config: SimConfig | None = None, **kw) -> SimResult:
    """Run one simulation (``schedule`` may be a spec string)."""
    sched = RateSchedule.parse(schedule) if isinstance(schedule, str) else schedule
    return Simulation(sched, policy, config or SimConfig(), **kw).run(duration)


def convergence(workers: list[tuple[float, int]], change_at: float, end: float, settle: float) -> tuple[float, int]:
    """Convergence time and steps after an input change at ``change_at`` (thesis 4.5.1), from
    the worker count over time (``(time, workers from then on)``, e.g. :attr:`SimResult.workers`
    or a live run's): the time of the last scaling action before the count then stays
    unchanged for at least ``settle`` seconds (or until ``end``), and the number of actions it
    took. ``(nan, steps)`` when it never settles."""
    changes = [t for t, _ in workers if change_at <= t < end]
    for i, t in enumerate(changes):
        nxt = changes[i + 1] if i + 1 < len(changes) else end
        if nxt - t >= settle:
            return t - change_at, i + 1
    return (0.0, 0) if not changes else (math.nan, len(changes))
