"""The served scheduler and the simulator decide the same steps on the same scenarios.

Both engines take their per-step decisions (class order, the decode hold, the chunk cap, evictions
under KV pressure, the cost order inside a class, light steps) from the same code in
`rps_serve.scheduling`; what each adds around it is its own: vLLM's scheduler loop in the plug-in,
`sim.engine`'s model of that loop in the simulator. Each row of `SCENARIOS` feeds the same
requests, at the same steps, to a model-free vLLM scheduler (`model_free`) as the server runs the
policy (the plug-in; stock vLLM's own scheduler for the baselines, with the class level as the
request's priority) and to the simulator's engine built as `rps-serve simulate --measured` builds it
(`as_served`, `engine_for`), and checks that every step schedules the same requests for the same
numbers of tokens.

The aging clock runs a million times slower than the paper's in both, so that the order follows the
classes and arrival and not the few milliseconds the two engines' clocks differ by (the simulator's
is simulated, the plug-in's is the machine's); for the same reason a decode hold here ends when the
lighter requests finish, never on its time limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from vllm.v1.core.sched.scheduler import Scheduler

from rps_harness.sim.engine import Engine, StepRecord
from rps_harness.sim.measured import MeasuredProfile, as_served
from rps_harness.sim.simulator import engine_for, policy_variant
from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.trace import Trace
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.config import RPSConfig
from rps_serve.vllm_plugin.scheduler import RPSScheduler
from tests.unit.vllm_plugin.model_free import (
    NUM_CLASSES,
    classed_request,
    create_scheduler,
    feed,
    write_opt_model,
)

SAND, PEBBLE, ROCK = 0, 1, 2
BLOCK_SIZE = 16  # create_scheduler's
TOKEN_BUDGET = 256  # max_num_batched_tokens of both engines
ENCODER_BUDGET = 1024
TIME_SCALE = 1e6
MAX_STEPS = 200


@dataclass(frozen=True)
class Arrival:
    """A request that reaches both engines' waiting queues before step `step`."""

    step: int
    name: str
    level: int
    tokens: int
    max_tokens: int = 4
    image_tokens: int = 0
    est_prefill_s: float = 1e-3  # what the ensemble estimates and hands to the engine


@dataclass(frozen=True)
class Scenario:
    name: str
    arrivals: tuple[Arrival, ...]
    policy: Policy = Policy.RPS
    settings: dict[str, Any] = field(default_factory=dict)  # the plug-in's (model.json's `rps`)
    max_num_seqs: int = 16
    num_blocks: int = 10_000  # vLLM's, its null block included


ROCK_TOKENS = 12 * BLOCK_SIZE - 8  # a rock that takes 12 blocks


def kv_pressure(name: str, policy: Policy) -> Scenario:
    """A rock running in all but one free block of the KV cache when sand arrives."""
    return Scenario(
        name,
        (Arrival(0, "rock", ROCK, ROCK_TOKENS, max_tokens=20), Arrival(1, "sand", SAND, 4 * BLOCK_SIZE)),
        policy=policy,
        num_blocks=12 + 2,
    )


# The light steps' budget in both engines.
LIGHT_STEP_TOKENS = 80
# Five sand requests a step (260 tokens) would fill the steps ahead of a pebble queued before them.
SAND_STREAM = (
    "a waiting heavier request passed over once goes first, with the budget, as sand fills the steps"
)
PEBBLE_TOKENS = 300
LIGHT_STEP_ARRIVALS = {
    "one heavier prefill a step, capped, beside unsplit sand": (
        Arrival(0, "rock-0", ROCK, 1000, max_tokens=2),
        Arrival(0, "rock-1", ROCK, 600, max_tokens=2),
        Arrival(1, "sand-0", SAND, 20, max_tokens=3),
        Arrival(2, "pebble", PEBBLE, 300, max_tokens=2),
        Arrival(4, "sand-1", SAND, 150, max_tokens=2),
        Arrival(4, "sand-2", SAND, 30, max_tokens=2),
        Arrival(9, "sand-3", SAND, 40, max_tokens=2),
    ),
    "a heavier image starts only where no heavier request prefills": (
        Arrival(0, "sand-0", SAND, 30, max_tokens=8),
        Arrival(1, "image", PEBBLE, 200, image_tokens=64, max_tokens=2),
        Arrival(1, "sand-1", SAND, 60, max_tokens=2),
        Arrival(2, "sand-2", SAND, 20, max_tokens=2),
        Arrival(2, "text pebble", PEBBLE, 200, max_tokens=2),
    ),
    SAND_STREAM: (
        Arrival(0, "pebble", PEBBLE, PEBBLE_TOKENS, max_tokens=2),
        *(Arrival(step, f"sand-{step}-{i}", SAND, 52, max_tokens=2) for step in range(4) for i in range(5)),
    ),
}

SCENARIOS = [
    Scenario(
        "sand takes the one free slot before an earlier rock",
        (Arrival(0, "rock", ROCK, 100), Arrival(0, "sand", SAND, 20)),
        max_num_seqs=1,
    ),
    Scenario(
        "FCFS keeps arrival order",
        (Arrival(0, "rock", ROCK, 100), Arrival(0, "sand", SAND, 20)),
        policy=Policy.FCFS,
        max_num_seqs=1,
    ),
    Scenario(
        "stock priority orders by class, without aging",
        (Arrival(0, "rock", ROCK, 100), Arrival(0, "pebble", PEBBLE, 50), Arrival(1, "sand", SAND, 20)),
        policy=Policy.VLLM_PRIORITY,
        max_num_seqs=1,
    ),
    Scenario(
        "a mixed stream over a binding token budget",
        (
            Arrival(0, "video", ROCK, 900, max_tokens=3),
            Arrival(0, "text-0", SAND, 120, max_tokens=6),
            Arrival(1, "image", PEBBLE, 300, max_tokens=5),
            Arrival(2, "text-1", SAND, 40, max_tokens=8),
            Arrival(4, "long-text", PEBBLE, 500, max_tokens=2),
            Arrival(6, "text-2", SAND, 60, max_tokens=3),
            Arrival(9, "text-3", SAND, 250, max_tokens=4),
        ),
    ),
    Scenario(
        "the chunk cap while sand waits behind a rock's prefill",
        (
            Arrival(0, "rock", ROCK, 2000, max_tokens=2),
            Arrival(1, "sand", SAND, 20),
            Arrival(3, "pebble", PEBBLE, 300),
        ),
        settings={"chunk_cap_tokens": 64},
    ),
    Scenario(
        "a decode hold: the rock waits for the sand running when it came",
        (
            Arrival(0, "sand", SAND, 20, max_tokens=6),
            Arrival(2, "rock", ROCK, 100),
            Arrival(3, "late sand", SAND, 20, max_tokens=10),
        ),
        settings={"decode_hold_s": 60.0},
    ),
    Scenario(
        "a media-only hold: the image waits, the long text does not",
        (
            Arrival(0, "sand", SAND, 20, max_tokens=5),
            Arrival(1, "image rock", ROCK, 200, image_tokens=64),
            Arrival(1, "text rock", ROCK, 200),
        ),
        settings={"decode_hold_s": 60.0, "decode_hold_media_only": True},
    ),
    Scenario(
        "a hold skipped while every sequence slot is taken",
        (
            Arrival(0, "sand-0", SAND, 20, max_tokens=3),
            Arrival(0, "sand-1", SAND, 20, max_tokens=6),
            Arrival(1, "rock", ROCK, 100),
        ),
        settings={"decode_hold_s": 60.0},
        max_num_seqs=2,
    ),
    kv_pressure("under KV pressure waiting sand evicts a running rock", Policy.RPS),
    Scenario(
        "one eviction a step",
        (
            Arrival(0, "rock-0", ROCK, ROCK_TOKENS, max_tokens=20),
            Arrival(0, "rock-1", ROCK, ROCK_TOKENS, max_tokens=20),
            Arrival(2, "sand-0", SAND, 11 * BLOCK_SIZE),
            Arrival(2, "sand-1", SAND, 11 * BLOCK_SIZE),
        ),
        num_blocks=2 * 12 + 3,
    ),
    Scenario(
        "a rock evicted at most max_preemptions times",
        (
            Arrival(0, "rock", ROCK, ROCK_TOKENS, max_tokens=20),
            Arrival(1, "sand-0", SAND, 4 * BLOCK_SIZE),
            Arrival(10, "sand-1", SAND, 4 * BLOCK_SIZE),
        ),
        settings={"max_preemptions": 1},
        num_blocks=12 + 2,
    ),
    *(
        Scenario(
            f"{policy.value}: a running request that cannot grow is preempted by vLLM's rule",
            (
                Arrival(0, "rock-0", ROCK, 11 * BLOCK_SIZE, max_tokens=30),
                Arrival(0, "rock-1", ROCK, 11 * BLOCK_SIZE, max_tokens=30),
                Arrival(0, "pebble", PEBBLE, 40, max_tokens=30),
            ),
            policy=policy,
            num_blocks=2 * 11 + 3 + 2,
        )
        for policy in (Policy.RPS, Policy.FCFS, Policy.VLLM_PRIORITY)
    ),
    kv_pressure("FCFS never evicts for a waiting request", Policy.FCFS),
    Scenario(
        "headroom: a rock that would leave less than the reserve free waits; sand starts",
        (
            Arrival(0, "rock-0", ROCK, ROCK_TOKENS, max_tokens=6),
            Arrival(1, "rock-1", ROCK, ROCK_TOKENS + BLOCK_SIZE, max_tokens=3),
            Arrival(2, "sand", SAND, 20, max_tokens=3),
        ),
        policy=Policy.HEADROOM,
        num_blocks=2 * 12 + 3,
    ),
    Scenario(
        "headroom: a pebble that would leave less than the reserve free starts",
        (
            Arrival(0, "rock", ROCK, ROCK_TOKENS, max_tokens=6),
            Arrival(1, "pebble", PEBBLE, ROCK_TOKENS + BLOCK_SIZE, max_tokens=3),
            Arrival(2, "sand", SAND, 20, max_tokens=3),
        ),
        policy=Policy.HEADROOM,
        num_blocks=2 * 12 + 3,
    ),
    Scenario(
        "headroom: with room to spare it is class order",
        (
            Arrival(0, "rock", ROCK, 100),
            Arrival(0, "pebble", PEBBLE, 50),
            Arrival(1, "sand", SAND, 20),
        ),
        policy=Policy.HEADROOM,
        max_num_seqs=1,
    ),
    *(
        Scenario(
            f"{policy.value} light steps: {what}",
            arrivals,
            policy=policy,
            settings={"light_steps": True, "light_step_tokens": LIGHT_STEP_TOKENS},
        )
        for policy in (Policy.HEADROOM, Policy.RPS)
        for what, arrivals in LIGHT_STEP_ARRIVALS.items()
    ),
    Scenario(
        "headroom with a cost order: the shorter pebble first inside its class, sand before both",
        (
            Arrival(0, "sand-0", SAND, 20, max_tokens=3),
            Arrival(1, "long pebble", PEBBLE, 300, est_prefill_s=1.0),
            Arrival(1, "short pebble", PEBBLE, 50, est_prefill_s=0.1),
            Arrival(1, "sand-1", SAND, 40, est_prefill_s=0.5),
        ),
        policy=Policy.HEADROOM,
        settings={"cost_order": 20.0},
        max_num_seqs=1,
    ),
]

Steps = list[dict[str, int]]


@pytest.fixture(scope="module")
def opt_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_opt_model(tmp_path_factory.mktemp("hub"))


def served_steps(scenario: Scenario, model: Path) -> Steps:
    """Each step's scheduled tokens per request, of vLLM's scheduler as the server runs the policy."""
    row = scenario.policy.row
    config = RPSConfig(policy=scenario.policy, aging_time_scale=TIME_SCALE, **scenario.settings)

    def rps(*, vllm_config: Any, **kwargs: Any) -> Any:
        vllm_config.additional_config = config.to_additional_config()
        return RPSScheduler(vllm_config=vllm_config, **kwargs)

    scheduler = create_scheduler(
        model,
        Scheduler if row.stock else rps,
        policy=row.vllm_policy,
        max_num_seqs=scenario.max_num_seqs,
        max_num_batched_tokens=TOKEN_BUDGET,
        num_blocks=scenario.num_blocks,
        block_size=BLOCK_SIZE,
        async_scheduling=False,
        encoder_budget=ENCODER_BUDGET,
    )

    def add(arrival: Arrival) -> None:
        request = classed_request(
            arrival.name,
            arrival.level,
            arrival.tokens,
            arrival.max_tokens,
            arrival.image_tokens,
            arrival.est_prefill_s,
        )
        request.priority = arrival.level  # what the server hands stock vLLM (the plug-in sets it too)
        scheduler.add_request(request)

    def step() -> dict[str, int]:
        output = scheduler.schedule()
        feed(scheduler, output)
        return dict(output.num_scheduled_tokens)

    return _drive(scenario, add, step, lambda: scheduler.get_num_unfinished_requests() > 0)


def simulator_steps(scenario: Scenario) -> Steps:
    """Each step's scheduled tokens per request, of the simulator's engine built as `rps-serve simulate
    --measured` builds it for a stack serving `scenario.settings`."""
    arrivals = scenario.arrivals
    names = [a.name for a in arrivals]
    image = np.array([a.image_tokens > 0 for a in arrivals])
    kinds = list(RequestKind)
    trace = Trace(
        arrival_s=np.arange(len(arrivals)) * 1e-6,
        kind=np.where(image, kinds.index(RequestKind.IMAGE), kinds.index(RequestKind.SHORT_TEXT)),
        prompt_tokens=np.array([a.tokens for a in arrivals]),
        modality_tokens=np.array([a.image_tokens for a in arrivals]),
        output_tokens=np.array([a.max_tokens for a in arrivals]),
    )
    rps = RPSConfig(**scenario.settings)
    deployment = MeasuredProfile(
        name="agreement",
        lines={m: PrefillLine(0.01 * (1 + m.index), 1e-4) for m in Modality},
        decode_step_s=0.005,
        kv_token_s=1e-7,
        front_end_s={m: 0.0 for m in Modality},
        kv_capacity_tokens=(scenario.num_blocks - 1) * BLOCK_SIZE,  # vLLM keeps one null block
        max_num_batched_tokens=TOKEN_BUDGET,
        max_num_seqs=scenario.max_num_seqs,
        rps_chunk_cap_tokens=rps.chunk_cap_tokens,
        cost_profile="",
        rps_decode_hold_s=rps.decode_hold_s,
        rps_decode_hold_media_only=rps.decode_hold_media_only,
        rps_max_preemptions=rps.max_preemptions,
        rps_cost_order=rps.cost_order,
        rps_light_steps=rps.light_steps,
        rps_light_step_tokens=rps.light_step_tokens,
        aging_time_scale=TIME_SCALE,
    ).deployment()
    variant = as_served(policy_variant(scenario.policy.value), deployment)
    steps: list[StepRecord] = []
    levels = np.array([a.level for a in arrivals])
    encoder_s = deployment.timing(1).encoder_s(trace.modality, trace.modality_tokens)
    prefill_s = np.array([a.est_prefill_s for a in arrivals])
    engine: Engine = engine_for(
        trace,
        trace.arrival_s,
        encoder_s,
        levels,
        NUM_CLASSES,
        variant,
        deployment,
        1,
        steps.append,
        prefill_s,
    )

    def step() -> dict[str, int]:
        before = len(steps)
        engine.step()
        return {names[r]: tokens for r, tokens in steps[-1].scheduled} if len(steps) > before else {}

    return _drive(
        scenario, lambda a: engine.add(names.index(a.name)), step, lambda: engine.finished < len(arrivals)
    )


def _drive(
    scenario: Scenario,
    add: Callable[[Arrival], None],
    step: Callable[[], dict[str, int]],
    busy: Callable[[], bool],
) -> Steps:
    """Steps until every request has arrived and finished (at most `MAX_STEPS`)."""
    last = max(a.step for a in scenario.arrivals)
    steps: Steps = []
    for k in range(MAX_STEPS):
        for arrival in scenario.arrivals:
            if arrival.step == k:
                add(arrival)
        if k > last and not busy():
            return steps
        steps.append(step())
    raise AssertionError(f"{scenario.name}: not done in {MAX_STEPS} steps")


@pytest.mark.parametrize("scenario", SCENARIOS, ids=[s.name for s in SCENARIOS])
def test_the_served_scheduler_and_the_simulator_schedule_the_same_steps(
    scenario: Scenario, opt_model: Path
) -> None:
    served, simulated = served_steps(scenario, opt_model), simulator_steps(scenario)
    for k, (real, sim) in enumerate(zip(served, simulated, strict=False)):
        assert sim == real, f"step {k}: served {real}, simulator {sim}"
    assert len(simulated) == len(served)


LIGHT = [s for s in SCENARIOS if s.settings.get("light_steps")]


@pytest.mark.parametrize("scenario", LIGHT, ids=[s.name for s in LIGHT])
def test_light_steps_change_what_the_scenario_schedules(scenario: Scenario, opt_model: Path) -> None:
    """Each light-step scenario exercises the rule: without it the served scheduler runs other steps."""
    plain = Scenario(scenario.name, scenario.arrivals, policy=scenario.policy)
    assert served_steps(scenario, opt_model) != served_steps(plain, opt_model)


@pytest.mark.parametrize("policy", [Policy.HEADROOM, Policy.RPS])
def test_a_waiting_heavier_request_keeps_the_budget_of_steps_full_of_sand(
    policy: Policy, opt_model: Path
) -> None:
    """The floor for a heavier request that has not started: the sand fills the first step and passes
    it over; from the next it leads the queue, ahead of the sand, and gets the budget (or what it has
    left) of every step until its prompt is computed."""
    scenario = next(s for s in LIGHT if s.name == f"{policy.value} light steps: {SAND_STREAM}")
    steps = served_steps(scenario, opt_model)
    assert "pebble" not in steps[0] and sum(steps[0].values()) == TOKEN_BUDGET
    left, k = PEBBLE_TOKENS, 1
    while left:
        assert steps[k].get("pebble") == min(LIGHT_STEP_TOKENS, left), f"step {k}: {steps[k]}"
        left -= steps[k]["pebble"]
        k += 1
    # By class order alone, the sand held the pebble back for longer.
    plain = served_steps(Scenario(scenario.name, scenario.arrivals, policy=policy), opt_model)
    computed = np.cumsum([step.get("pebble", 0) for step in plain])
    assert int(np.searchsorted(computed, PEBBLE_TOKENS)) > k - 1
