"""The light-step rule (`rps_serve.scheduling.light_steps`): its budget from a cost model, its step
composition, and the floor it keeps for heavier classes in simulated steps."""

from __future__ import annotations

import numpy as np
import pytest

from rps_harness.sim.engine import StepRecord
from rps_harness.sim.hardware import Execution
from rps_harness.sim.run import SimulationConfig, prepare, run_policy
from rps_harness.sim.simulator import policy_variant, with_light_budget
from rps_harness.workload.shapes import SERVING
from rps_harness.workload.source import SyntheticWorkload
from rps_harness.workload.synthetic_profile import reference_profile
from rps_serve.cost import features as cols
from rps_serve.cost.model import ModalityClasses
from rps_serve.cost.training import TrainingOptions, fit_cost_model
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.scheduling.light_steps import (
    LIGHT_STEP_FLOOR,
    SAND,
    light_step,
    light_step_budget,
    may_start,
    plan_light_step,
    prefill_steps_bound,
    sand_edge_tokens,
)

REFERENCE = "llava-onevision-qwen2-7b"


def test_the_sand_edge_is_where_the_cost_model_stops_calling_a_text_sand() -> None:
    model = fit_cost_model(reference_profile(REFERENCE, seed=0), TrainingOptions(num_classes=3, seed=0))
    edge = sand_edge_tokens(model)
    texts = [RequestFeatures(Modality.TEXT, tokens, 0) for tokens in (edge, edge + 1)]
    assert model.levels(cols.feature_matrix(texts)).tolist()[0] == SAND
    assert model.levels(cols.feature_matrix(texts)).tolist()[1] != SAND
    # Every text classes as sand by modality: the edge is the longest text searched.
    assert sand_edge_tokens(ModalityClasses()) >= 100_000


@pytest.mark.parametrize(
    ("edge", "token_budget", "edges", "budget"),
    [
        (1_950, 8_192, 2.0, 3_900),
        (1_950, 8_192, 1.5, 2_925),
        (500, 8_192, 1.5, 2_048),
        (6_000, 8_192, 1.5, 8_192),
        (0, 256, 1.5, 64),
    ],
)
def test_the_budget_is_edges_times_the_sand_edge_within_the_floor_and_the_step(
    edge: int, token_budget: int, edges: float, budget: int
) -> None:
    assert light_step_budget(edge, token_budget, edges=edges) == budget
    assert light_step_budget(edge, token_budget) >= LIGHT_STEP_FLOOR * token_budget


def test_a_light_step_needs_sand_waiting_first_or_prefilling() -> None:
    assert plan_light_step(100, (SAND, 20), []) == (100, [], True)
    assert plan_light_step(100, (2, 500), [("rock", 2, 900), ("sand", SAND, 30)]) == (100, [], False)
    assert plan_light_step(100, (1, 300), [("rock", 2, 900), ("pebble", 1, 50)]) is None
    assert plan_light_step(100, None, []) is None
    # The waiting sand's tokens count with the prefilling sand's: the largest sets the limit.
    assert plan_light_step(100, (SAND, 150), [("rock", 2, 900)]) == (150, ["rock"], False)


def test_a_waiting_heavier_request_goes_first_only_where_no_heavier_one_prefills() -> None:
    """Ahead of the sand at the head of the queue, where the step gives heavier classes the budget."""
    assert plan_light_step(100, (SAND, 20), [("sand", SAND, 30)]).heavier_first
    assert not plan_light_step(100, (SAND, 20), [("rock", 2, 900)]).heavier_first
    # Sand prefilling, a heavier request heading the queue: it goes first anyway.
    assert not plan_light_step(100, (1, 300), [("sand", SAND, 30)]).heavier_first
    # A sand larger than the budget keeps every heavier request out of the step.
    assert not plan_light_step(100, (SAND, 150), []).heavier_first


def test_one_heavier_prefill_goes_on_unless_a_sand_exceeds_the_budget() -> None:
    assert light_step(100, [20, 60], ["rock", "pebble"]) == (100, ["pebble"], False)
    assert light_step(100, [], ["rock"]) == (100, [], False)
    # vLLM runs running requests first: a heavier chunk of the sand's size would split it.
    assert light_step(100, [150], ["rock", "pebble"]) == (150, ["rock", "pebble"], False)


def test_a_heavier_request_starts_only_while_none_prefills() -> None:
    assert may_start(SAND, heavier_prefilling=True)
    assert may_start(1, heavier_prefilling=False)
    assert not may_start(2, heavier_prefilling=True)


def test_the_prefill_bound_counts_whole_steps() -> None:
    assert [prefill_steps_bound(p, 2048) for p in (1, 2048, 2049, 6273)] == [1, 1, 2, 4]


@pytest.mark.parametrize("mix", ["mixed-iii", "cost-vs-modality"])
def test_heavier_prefills_keep_the_budget_in_every_light_step(mix: str) -> None:
    """The floor, in simulated steps of the 7B on an H100 near its capacity: in every step where a
    heavier prefill ran beside sand, it was the only one, and it got the budget, or all it had left,
    unless the step was full; never more than the budget."""
    config = SimulationConfig(
        REFERENCE,
        1,
        SyntheticWorkload(mix, 9.0, 400, 0, shapes=SERVING),
        0,
        execution=Execution.EAGER,
    )
    setup = prepare(config)
    token_budget = setup.deployment.max_num_batched_tokens
    budget = with_light_budget(
        policy_variant("headroom-light"), setup.sand_edge_tokens, token_budget
    ).scheduling.light_step_tokens
    levels, prompts = setup.levels, setup.trace.prompt_tokens
    computed = np.zeros(len(levels), dtype=np.int64)
    checked = 0

    def observe(step: StepRecord) -> None:
        nonlocal checked
        prefills = [(r, n) for r, n in step.scheduled if computed[r] < prompts[r]]
        sand = [n for r, n in prefills if levels[r] == SAND]
        heavier = [(r, n) for r, n in prefills if levels[r] != SAND]
        for r, n in step.scheduled:
            computed[r] += n
        if not sand or not heavier or max(sand) > budget:
            return
        checked += 1
        assert len(heavier) == 1, step
        ((request, tokens),) = heavier
        left = int(prompts[request] - (computed[request] - tokens))
        assert tokens <= budget, step
        assert tokens == min(budget, left) or step.scheduled_tokens == token_budget, step

    run_policy(setup, "headroom-light", observe)
    assert checked > 0
