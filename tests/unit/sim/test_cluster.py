"""Replicas behind a router: one replica is `simulate`, each router follows its rule, the online front end
is `worker_pool`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import pytest

from rps_harness.sim.cluster import ClusterOutcome, simulate_cluster
from rps_harness.sim.frontend import PreprocessCosts, WorkerPool, worker_pool
from rps_harness.sim.routing import Backlog, Router, Routing
from rps_harness.sim.run import SimulationConfig, SimulationSetup, prepare, run_cluster
from rps_harness.sim.simulator import Deployment, policy_variant, simulate
from rps_harness.workload.source import SyntheticWorkload

PROFILE = "llava-onevision-qwen2-7b"
RATE_PER_REPLICA = 14.0
REPLICAS = 3


def _setup(replicas: int, requests_per_replica: int) -> SimulationSetup:
    workload = SyntheticWorkload("mixed-iii", RATE_PER_REPLICA * replicas, requests_per_replica * replicas, 0)
    return prepare(SimulationConfig(PROFILE, 1, workload))


def _small_cache(deployment: Deployment) -> Deployment:
    """The deployment on 30 GB GPUs (KV cache short enough to preempt) with two front-end workers."""
    return dataclasses.replace(
        deployment,
        gpu=dataclasses.replace(deployment.gpu, memory_bytes=30e9),
        preprocess=PreprocessCosts(workers=2),
    )


@pytest.fixture(scope="module")
def one() -> SimulationSetup:
    return _setup(1, 300)


@pytest.fixture(scope="module")
def several() -> SimulationSetup:
    return _setup(REPLICAS, 150)


def _cluster(setup: SimulationSetup, policy: str, replicas: int, routing: Routing) -> ClusterOutcome:
    return run_cluster(setup, policy, replicas, routing)


@pytest.mark.parametrize("policy", ["fcfs", "rps"])
@pytest.mark.parametrize("routing", list(Routing))
def test_one_replica_is_simulate_under_every_router(
    one: SimulationSetup, policy: str, routing: Routing
) -> None:
    setup = dataclasses.replace(one, deployment=_small_cache(one.deployment))
    alone = simulate(setup.trace, setup.levels, setup.num_levels, policy_variant(policy), setup.deployment)
    assert alone.preemptions > 0  # the case exercises preemption
    outcome = _cluster(setup, policy, 1, routing)
    np.testing.assert_array_equal(outcome.records.first_token_s, alone.records.first_token_s)
    np.testing.assert_array_equal(outcome.records.finish_s, alone.records.finish_s)
    np.testing.assert_array_equal(outcome.ready_s, alone.ready_s)
    assert outcome.utilization.tolist() == [alone.utilization]
    assert outcome.preemptions.tolist() == [alone.preemptions]
    assert outcome.steps.tolist() == [alone.steps]
    assert outcome.makespan_s == alone.makespan_s


def _known_at_arrivals(outcome: ClusterOutcome, replicas: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per request i and replica r, recomputed from the records: the requests routed to r before i that
    had not finished by i's arrival, those that had no first token by then, and those of the latter
    of a class up to i's."""
    records = outcome.records
    n = len(records.arrival_s)
    outstanding = np.zeros((n, replicas), dtype=np.int64)
    queued = np.zeros((n, replicas), dtype=np.int64)
    ahead = np.zeros((n, replicas), dtype=np.int64)
    for i in range(n):
        earlier = np.arange(n) < i
        arrival = records.arrival_s[i]
        busy = earlier & ~(records.finish_s <= arrival)
        waiting = earlier & ~(records.first_token_s <= arrival)
        outstanding[i] = np.bincount(outcome.replica[busy], minlength=replicas)
        queued[i] = np.bincount(outcome.replica[waiting], minlength=replicas)
        lighter = waiting & (records.level <= records.level[i])
        ahead[i] = np.bincount(outcome.replica[lighter], minlength=replicas)
    return outstanding, queued, ahead


def _first_least_in_rotation(keys: Sequence[tuple[int, ...]], start: int) -> int:
    scan = [(start + k) % len(keys) for k in range(len(keys))]
    return min(scan, key=lambda r: keys[r])


def _check_complete(outcome: ClusterOutcome, replicas: int) -> None:
    assert outcome.records.completed.all()
    assert outcome.routed.tolist() == np.bincount(outcome.replica, minlength=replicas).tolist()
    assert np.all(outcome.ready_s >= outcome.records.arrival_s)
    assert np.all(outcome.records.first_token_s > outcome.ready_s)


@pytest.mark.parametrize("policy", ["fcfs", "rps"])
def test_round_robin_sends_request_i_to_replica_i_mod_n(several: SimulationSetup, policy: str) -> None:
    outcome = _cluster(several, policy, REPLICAS, Routing.ROUND_ROBIN)
    assert outcome.replica.tolist() == [i % REPLICAS for i in range(len(several.trace))]
    _check_complete(outcome, REPLICAS)


@pytest.mark.parametrize("policy", ["fcfs", "rps"])
def test_least_outstanding_picks_the_first_least_loaded_replica_after_the_last_pick(
    several: SimulationSetup, policy: str
) -> None:
    outcome = _cluster(several, policy, REPLICAS, Routing.LEAST_OUTSTANDING)
    _check_complete(outcome, REPLICAS)
    outstanding, _, _ = _known_at_arrivals(outcome, REPLICAS)
    assert outstanding.max() > 1  # requests overlap: the rule is exercised
    start = 0
    for i, pick in enumerate(outcome.replica.tolist()):
        assert outstanding[i, pick] == outstanding[i].min()
        assert pick == _first_least_in_rotation([(int(c),) for c in outstanding[i]], start)
        start = (pick + 1) % REPLICAS


@pytest.mark.parametrize("policy", ["fcfs", "rps"])
@pytest.mark.parametrize("routing", [Routing.LEAST_QUEUE, Routing.CLASS_AWARE])
def test_backlog_routers_pick_the_least_backlog_they_read_then_least_outstanding(
    several: SimulationSetup, policy: str, routing: Routing
) -> None:
    """`least-queue` reads the requests without a first token of every class, `class-aware` those of
    a class up to the new request's."""
    outcome = _cluster(several, policy, REPLICAS, routing)
    _check_complete(outcome, REPLICAS)
    outstanding, queued, ahead = _known_at_arrivals(outcome, REPLICAS)
    backlog = queued if routing is Routing.LEAST_QUEUE else ahead
    sand = outcome.records.level == 0
    assert backlog[sand].max() > 0  # sand finds requests waiting: the rule is exercised
    start = 0
    for i, pick in enumerate(outcome.replica.tolist()):
        assert backlog[i, pick] == backlog[i].min()
        keys = [(int(b), int(o)) for b, o in zip(backlog[i], outstanding[i], strict=True)]
        assert pick == _first_least_in_rotation(keys, start)
        start = (pick + 1) % REPLICAS


def test_class_aware_sends_sand_past_a_replica_busy_with_heavier_classes() -> None:
    backlog = Backlog(2, 3)
    for _ in range(5):
        backlog.routed(0, 2)  # five rocks waiting on replica 0
    backlog.routed(1, 0)  # one sand waiting on replica 1
    assert Router(Routing.CLASS_AWARE, 2).choose(0, backlog) == 0
    assert Router(Routing.LEAST_OUTSTANDING, 2).choose(0, backlog) == 1
    # Five waiting against one, whatever their class.
    assert Router(Routing.LEAST_QUEUE, 2).choose(0, backlog) == 1
    assert Router(Routing.CLASS_AWARE, 2).choose(2, backlog) == 1  # a rock waits behind all of them
    backlog.first_token(0, 2)
    backlog.finished(0)
    assert backlog.outstanding == [4, 1] and backlog.ahead_of(0, 2) == 4
    assert backlog.queued(0) == 4 and backlog.queued(1) == 1


def test_a_cluster_of_colocated_replicas_only(several: SimulationSetup) -> None:
    with pytest.raises(ValueError, match="colocated"):
        simulate_cluster(
            several.trace,
            several.levels,
            several.num_levels,
            policy_variant("modserve"),
            dataclasses.replace(several.deployment, gpus=2),
            2,
            Routing.ROUND_ROBIN,
        )


@pytest.mark.parametrize("by_class", [False, True])
@pytest.mark.parametrize("seed", range(20))
def test_the_online_pool_finishes_every_job_when_worker_pool_does(by_class: bool, seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 80))
    ready = np.round(rng.uniform(0.0, 4.0, n), 1)  # rounded: ties in ready time
    service = np.where(rng.random(n) < 0.15, 0.0, rng.exponential(0.2, n))
    levels = rng.integers(0, 3, n)
    workers = int(rng.integers(1, 4))
    expected, _ = worker_pool(ready, service, workers, levels if by_class else None)

    pool = WorkerPool(workers)
    finished: dict[int, float] = {}
    clock = 0.0
    for job in np.argsort(ready, kind="stable").tolist():
        # Advance to a random moment up to this job's ready time, which the pool must not pass yet.
        clock = float(rng.uniform(clock, ready[job])) if rng.random() < 0.5 else clock
        finished.update(pool.advance(clock))
        level = int(levels[job]) if by_class else 0
        finished.update(pool.submit(job, float(ready[job]), float(service[job]), level))
    finished.update(pool.advance(math.inf))
    assert sorted(finished) == list(range(n))
    np.testing.assert_array_equal([finished[job] for job in range(n)], expected)


def test_the_online_pool_takes_jobs_in_ready_order_only() -> None:
    pool = WorkerPool(1)
    pool.submit(0, 1.0, 0.5)
    with pytest.raises(ValueError, match="before an earlier submission"):
        pool.submit(1, 0.5, 0.5)
