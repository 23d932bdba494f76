"""The simulator runs the live policies on a model of the micro-batch engine."""

from __future__ import annotations

from dataclasses import replace

from driftjoin.control.autoscale import DS2, Policy, Scaler, make_policy
from driftjoin.control.autoscale.simulator import SimConfig, Simulation, StageModel, list_schedule_makespan, simulate
from driftjoin.generators.rates import RateSchedule


def test_list_schedule_makespan_is_spark_task_order():
    assert list_schedule_makespan([3, 1, 1, 1], 2) == 3
    assert list_schedule_makespan([1, 1, 1, 3], 2) == 4


def test_ds2_settles_near_equation_4_3_on_a_constant_load():
    cfg = SimConfig(capacity=1000, partitions=40, task_overhead=0.0, batch_overhead=0.2, monitoring_window=30)
    r = simulate("constant:high=10000,duration=1200", Scaler(make_policy("ds2"), 1, 40, cooldown=60), 1200, cfg)
    assert 10 <= r.workers[-1][1] <= 14          # 10 workers of 1000/s, plus 20% over-provisioning
    assert r.throughput() > 9000


def test_spark_dynamic_allocation_grows_to_the_task_count():
    cfg = SimConfig(capacity=1000, partitions=12, monitoring_window=30)
    r = simulate("constant:high=3000,duration=900", Scaler(make_policy("spark-dynamic-allocation"), 1, 30, cooldown=60), 900, cfg)
    assert r.workers[-1][1] == 12 and r.actions == 0


def test_a_shared_machine_caps_what_more_executors_give():
    """Two executors on a machine that gives them one core's worth process what one does."""
    sched = "constant:high=1800,duration=600"
    run = {}
    for cores in (float("inf"), 1.0):
        cfg = SimConfig(capacity=1000, partitions=2, task_overhead=0.0, batch_overhead=0.0, machine_cores=cores)
        run[cores] = simulate(sched, Scaler(make_policy("ds2"), 2, 2, cooldown=60), 600, cfg, initial_workers=2)
    assert run[float("inf")].throughput() > 1700           # 2 x 1000/s keep up with 1800/s
    assert run[1.0].throughput() < 1050                    # one core's worth: 1000/s


# -- Spark's task waves (the sizing) -----------------------------------------------------------

def _after(r, t0: float, rate: float, end: float) -> float:
    """Records processed by batches starting after ``t0`` over those offered meanwhile."""
    return sum(b[2] for b in r.batches if b[0] >= t0) / (rate * (end - t0))


def test_ds2_falls_behind_on_task_waves_and_the_wave_aware_sizing_keeps_up():
    """The thesis's scale: 70 partitions, up to 70 workers of 2,000 records/s, 84,000 records/s.
    DS2 asks for 51 workers, which run two waves (the throughput of 35), and never acts again."""
    cfg = SimConfig(partitions=70)
    sched = "constant:high=84000,duration=3600"
    thesis = simulate(sched, Scaler(make_policy("ds2"), 1, 70, cooldown=300), 3600, cfg)
    waves = simulate(sched, Scaler(make_policy("ds2"), 1, 70, cooldown=300, sizing="waves", partitions=70), 3600, cfg)
    assert thesis.workers[-1][1] == 51 and _after(thesis, 1200, 84000, 3600) < 0.7
    assert waves.workers[-1][1] == 70 and _after(waves, 1200, 84000, 3600) > 0.98
    assert not [t for t, _ in waves.workers if t > 1200]                  # settled


def test_hpa_cpu_oscillates_on_waves_and_the_wave_aware_sizing_settles():
    """10 workers over 10 partitions at 70% load, CPU read as 0.8 of busy time: HPA-CPU's 8 or 9
    workers run two waves, fall behind, read less CPU and come back: 10 -> 8 -> 10 -> 9 ..."""
    cfg = SimConfig(partitions=10, cpu_per_busy=0.8)
    sched = "constant:high=14000,duration=3600"
    thesis = simulate(sched, Scaler(make_policy("hpa-cpu"), 1, 10, cooldown=300), 3600, cfg, initial_workers=10)
    waves = simulate(sched, Scaler(make_policy("hpa-cpu"), 1, 10, cooldown=300, sizing="waves", partitions=10), 3600, cfg,
                     initial_workers=10)
    counts = [k for _, k in thesis.workers]
    downs = sum(b < a for a, b in zip(counts, counts[1:]))
    ups = sum(b > a for a, b in zip(counts, counts[1:]))
    assert downs >= 3 and ups >= 2 and thesis.processed_fraction() < 0.98
    assert waves.workers == [(0.0, 10)] and waves.processed_fraction() > 0.98


def test_an_executor_that_arrives_during_a_stage_takes_its_waiting_tasks():
    """Spark gives a stage's waiting tasks to an executor as soon as it registers."""

    class Ten(Policy):
        name = "ten"

        def recommend(self, m, current):
            return 10

    cfg = SimConfig(capacity=1.0, partitions=10, task_overhead=0.0, batch_overhead=0.0, trigger_interval=1.0,
                    launch_delay=20.0, state_reload=0.0, monitoring_window=30.0, max_per_batch=1000)
    r = simulate("constant:high=1000,duration=400", Scaler(Ten(), 1, 10, cooldown=0), 400, cfg)
    start, duration, n = r.batches[0]
    assert n == 1000 and duration < 200          # 10 tasks of 100 s: one on 1 core until 50 s, then 9 more


# -- the thesis's queue latency ----------------------------------------------------------------

def test_queue_latency_counts_the_records_still_waiting():
    """One worker at 50 times its capacity: its first batch (1 s of input) takes 50 s, the next
    the 50 s offered meanwhile and does not end within the run. The few records it processed
    waited a second or two; the thesis's queue latency of every record offered shows the rest."""
    cfg = SimConfig(capacity=100.0, partitions=1, task_overhead=0.0, batch_overhead=0.1)
    r = simulate("constant:high=5000,duration=600", Scaler(make_policy("ds2"), 1, 1, cooldown=0), 600, cfg)
    assert r.processed_fraction() < 0.01
    assert r.latency(0.95, "processed") < 5
    assert r.latency(0.95) > 500                  # offered early in the run, still waiting at its end
    assert 250 < r.latency(0.5) < 350


# -- queries of several stages -----------------------------------------------------------------

def test_ds2_sizes_a_query_of_two_stages_by_the_sum_of_their_parallelism():
    """A scan (1/4000 s per record, half the records pass) and an aggregation (1/1000 s per
    record): 8,000 records/s need 2 + 4 cores' worth; DS2 sees both stages."""
    cfg = SimConfig(partitions=40, task_overhead=0.0, batch_overhead=0.1, monitoring_window=30,
                    stages=(StageModel("scan", 1 / 4000, 0.5, tasks=40), StageModel("agg", 1 / 1000)))
    assert round(cfg.stage_capacity()) == 1333
    r = simulate("constant:high=8000,duration=1800", Scaler(make_policy("ds2"), 1, 40, cooldown=60, sizing="waves", partitions=40),
                 1800, cfg)
    w = r.windows[-1]
    assert [s.name for s in w.stages] == ["scan", "agg"] and w.stages[1].upstream == ("scan",)
    assert abs(w.stages[0].selectivity - 0.5) < 1e-9
    assert DS2(overprovisioning=0).recommend(w, w.workers) == 6
    assert r.workers[-1][1] == 8 and _after(r, 600, 8000, 1800) > 0.98      # ceil(6 * 1.2) = 8: one wave of 5 tasks


# -- stop-and-restart actuation (the thesis's) -------------------------------------------------

class _Once(Policy):
    """Asks for ``target`` workers from the first window on."""

    name = "once"

    def __init__(self, target: int) -> None:
        self.target = target

    def recommend(self, m, current):
        return self.target


def test_a_restart_abandons_the_batch_in_flight_and_pauses_for_the_restart_pause():
    """Stop-and-restart: at the action the running batch is given up (its records read again
    after the restart), no batch starts for ``restart_pause`` seconds plus the new executors'
    launch, the next one reloads the state; the live path keeps processing while the executor
    comes."""
    base = SimConfig(capacity=100.0, partitions=4, task_overhead=0.0, batch_overhead=0.0, trigger_interval=1.0,
                     monitoring_window=30.0, state_reload=2.0, launch_delay=5.0)
    sched = "constant:high=150,duration=600"
    runs = {}
    for mode, pause in (("live", 0.0), ("restart", 20.0), ("restart", 60.0)):
        cfg = replace(base, mode=mode, restart_pause=pause)
        runs[mode, pause] = r = simulate(sched, Scaler(_Once(4), 1, 4, cooldown=1e9), 600, cfg)
        assert r.actions == 1 and r.workers[-1] == ((30.0 if mode == "restart" else 35.0), 4)
    for pause in (20.0, 60.0):
        r = runs["restart", pause]
        after = [b for b in r.batches if b[0] >= 30.0]
        assert all(b[0] + b[1] <= 30.0 + 1e-9 for b in r.batches if b[0] < 30.0)   # none ran past the stop
        assert after[0][0] >= 30.0 + pause + 5.0                      # nothing ran during the pause
        assert after[0][1] >= 2.0                               # the first batch reloads the state
        assert sum(b[2] for b in r.batches) <= r.offered       # the abandoned batch is not counted twice
    live = runs["live", 0.0]
    assert [b for b in live.batches if 30.0 <= b[0] < 50.0]   # live: batches go on during the actuation
    assert runs["restart", 60.0].latency(0.95) > runs["restart", 20.0].latency(0.95) > live.latency(0.95)


def test_a_restart_during_a_batch_reads_its_records_again():
    """A batch of 1,000 records at 10/s per worker is running when the restart comes: its
    records are not processed by it, they are in the first batch after the restart."""
    cfg = SimConfig(capacity=10.0, partitions=1, task_overhead=0.0, batch_overhead=0.0, trigger_interval=1.0,
                    monitoring_window=30.0, state_reload=0.0, restart_pause=10.0, mode="restart", max_per_batch=1000)
    r = simulate("constant:high=1000,duration=200", Scaler(_Once(2), 1, 2, cooldown=1e9), 200, cfg)
    first = r.batches[0]
    assert first[0] >= 30.0 + 10.0 + 20.0 and first[2] == 1000   # the batch started at 0 s never completed


# -- Dhalion, one stage per action (the thesis's) ----------------------------------------------

def test_dhalion_per_stage_grows_the_pool_by_one_stages_share():
    """A query of three stages of equal cost, from 1 worker to a load that needs about 25: the
    pool-wide Dhalion multiplies the pool by equation 4.2's factor (capped at 10x), the thesis's
    one only the busiest stage's third of it (1 + 9 / 3 = 4 workers), so its first scale-up
    brings less and the records offered meanwhile wait longer."""
    cfg = SimConfig(partitions=40, task_overhead=0.0, batch_overhead=0.1, monitoring_window=30,
                    stages=(StageModel("scan", 1 / 6000, 1.0, tasks=40), StageModel("join", 1 / 6000), StageModel("agg", 1 / 6000)))
    sched = "constant:high=50000,duration=1200"
    pool = simulate(sched, Scaler(make_policy("dhalion"), 1, 40, cooldown=300), 1200, cfg)
    stage = simulate(sched, Scaler(make_policy("dhalion-stage"), 1, 40, cooldown=300), 1200, cfg)
    assert pool.workers[:2] == [(0.0, 1), (50.0, 10)]
    assert stage.workers[:2] == [(0.0, 1), (50.0, 4)]
    early = lambda r: sum(b[2] for b in r.batches if b[0] + b[1] <= 350)  # noqa: E731
    assert early(stage) < early(pool)                        # before the second action: less processed
    assert stage.latency(0.95) > pool.latency(0.95)


# -- a stage whose state grows with the rate (the Incremental Join) ----------------------------

def test_a_stage_with_a_time_to_live_holds_rate_times_ttl_rows_and_costs_more_per_record_as_it_grows():
    """The join stage keeps 20 s of records; each record probes its partition's state (a hundredth
    of it) at 100 us per row, 1 us per row of the whole state: at
    1,000 records/s its state settles at 20,000 rows and a record costs 1 + 20 ms; at 2,000/s
    at 40,000 rows: DS2's true processing rate halves (work grows with the rate squared)."""
    def run(rate):
        cfg = SimConfig(partitions=100, task_overhead=0.0, batch_overhead=0.0, monitoring_window=30, trigger_interval=1.0,
                        stages=(StageModel("join", 1e-3, 0.0, state_ttl=20.0, probe_cost=1e-4),))
        sim = Simulation(RateSchedule.parse(f"constant:high={rate},duration=300"), Scaler(make_policy("ds2"), 100, 100), cfg,
                         initial_workers=100)    # enough workers: 2,000/s x 41 ms = 82 cores' worth
        r = sim.run(300)
        return sim, r

    (s1, r1), (s2, r2) = run(1000), run(2000)
    assert abs(s1.state_rows(0, 300) - 20_000) < 1_500 and abs(s2.state_rows(0, 300) - 40_000) < 3_000
    tpr1, tpr2 = r1.windows[-1].stages[0].true_processing_rate, r2.windows[-1].stages[0].true_processing_rate
    assert 0.45 < tpr2 / tpr1 < 0.6
    assert 40 < tpr1 < 55                                     # 1 / (1 ms + 20 ms)
