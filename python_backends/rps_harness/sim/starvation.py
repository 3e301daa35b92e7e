"""Starvation scenario: one rock behind sand that arrives without pause and keeps the KV cache busy.

Sand (short prompts, short answers) arrives at a steady pace below the engine's capacity and always
holds part of a small KV cache; one rock arrives early with a prompt that fits only once the cache
has drained. Stock ordering by class alone (`static`) lets every new sand take the blocks that
free, so the rock waits until the sand stops; `rps` ages it past the sand within the bound that
`starvation_bound_s` derives from the aging parameters.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rps_harness.sim.engine import Engine, EngineConfig, EngineWork, StepRecord
from rps_harness.sim.timing import TimingModel
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import RequestClass
from rps_serve.scheduling.parameters import Policy, PressureSettings, class_ladder
from rps_serve.scheduling.queues import ClassQueues
from rps_serve.scheduling.regulator import starvation_bound_s
from rps_serve.scheduling.variant import SchedulingVariant

# A small engine: ~5 ms decode steps, 10 ms + 10 us per token with prefill; no vision encoder.
TIMING = TimingModel(
    prefill_step_s=0.01,
    token_s=1e-5,
    decode_step_s=0.005,
    kv_token_s=1e-7,
    encoder=(PrefillLine(0.0, 0.0),) * 3,
)


@dataclass(frozen=True)
class SustainedSand:
    """The scenario's knobs: one sand every `sand_interval_s` until `sand_until_s`; the rock's prompt
    takes `rock_share` of the KV cache, so it fits only when at most one sand holds blocks."""

    sand_interval_s: float = 0.05
    sand_prompt_tokens: int = 100
    sand_output_tokens: int = 60
    sand_until_s: float = 115.0
    rock_arrival_s: float = 10.0
    kv_capacity_tokens: int = 4096
    rock_share: float = 0.95


@dataclass(frozen=True)
class StarvationOutcome:
    """What one run measured, and the bound it implies.

    `rock_ttft_s`: the rock's arrival to first token. `sand_max_ttft_s`: the longest any sand took to
    its first token (it waited at most that long: D). `sand_max_service_s`: the longest first token →
    finish of a sand (how long blocks stay held). `longest_step_s`: the longest engine step.
    `bound_s`: `starvation_bound_s` at D, plus the time for the cache to drain (the longest sand
    service) and two steps (the step in progress, and the rock's own prefill step).
    """

    policy: Policy
    rock_ttft_s: float
    sand_max_ttft_s: float
    sand_max_service_s: float
    longest_step_s: float
    aging_bound_s: float
    bound_s: float


def run_sustained_sand(policy: Policy, scenario: SustainedSand = SustainedSand()) -> StarvationOutcome:
    sand = np.arange(0.0, scenario.sand_until_s, scenario.sand_interval_s)
    n = sand.size + 1
    arrival = np.concatenate([[scenario.rock_arrival_s], sand])
    rock_prompt = int(scenario.rock_share * scenario.kv_capacity_tokens)
    level = np.full(n, RequestClass.SAND.value, dtype=np.int64)
    level[0] = RequestClass.ROCKS.value
    work = EngineWork(
        ready_s=arrival,
        arrival_s=arrival,
        prompt_tokens=np.array([rock_prompt] + [scenario.sand_prompt_tokens] * (n - 1), dtype=np.int64),
        output_tokens=np.array([4] + [scenario.sand_output_tokens] * (n - 1), dtype=np.int64),
        modality_tokens=np.zeros(n, dtype=np.int64),
        encoder_s=np.zeros(n),
        level=level,
    )
    ladder = class_ladder(len(RequestClass))
    variant = SchedulingVariant(policy)
    clock: list[Engine] = []
    queues: ClassQueues[int] = ClassQueues(
        variant.regulator(ladder), clock=lambda: clock[0].now if clock else 0.0
    )
    steps: list[StepRecord] = []
    engine = Engine(
        work,
        EngineConfig(kv_capacity_tokens=scenario.kv_capacity_tokens),
        TIMING,
        queues,
        variant.preemption_rule(),
        observer=steps.append,
    )
    clock.append(engine)
    result = engine.run()
    ttft = result.first_token_s - arrival
    sand_max_ttft = float(ttft[1:].max())
    sand_service = float((result.finish_s - result.first_token_s)[1:].max())
    longest_step = max(step.duration_s for step in steps)
    aging = starvation_bound_s(ladder, RequestClass.ROCKS, sand_max_ttft, PressureSettings().max_boost)
    return StarvationOutcome(
        policy=policy,
        rock_ttft_s=float(ttft[0]),
        sand_max_ttft_s=sand_max_ttft,
        sand_max_service_s=sand_service,
        longest_step_s=longest_step,
        aging_bound_s=aging,
        bound_s=aging + sand_service + 2 * longest_step,
    )
