"""The bound the light steps' floor buys (`service_bound`), on runs written out step by step: it holds
where the scheduler gave each class its order and its share, and breaks where it did not."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from rps_harness.service_bound import EngineRun, class_bounds, request_bounds

STEP_S = 0.1
TOKENS = 100  # a step's token budget
BUDGET = 50  # the light steps' budget of heavier prefills
SAND, ROCK = 0, 2


def _run(
    requests: list[tuple[int, int, int, int]], steps: int = 40, free: list[int] | None = None
) -> EngineRun:
    """`requests` as (level, prompt tokens, step it arrives in, step of its first token); every step
    lasts `STEP_S` and decodes nothing; a request arrives half-way through its step, is scheduled in
    the next and takes its first token at the end of its step."""
    start = np.arange(steps) * STEP_S
    level, tokens, arrives, first = (np.array(column) for column in zip(*requests, strict=True))
    return EngineRun(
        queued_s=start[arrives] + STEP_S / 2,
        scheduled_s=start[arrives + 1],
        first_token_s=start[first] + STEP_S,
        level=level,
        prompt_tokens=tokens,
        step_start_s=start,
        step_end_s=start + STEP_S,
        step_decodes=np.zeros(steps, dtype=int),
        token_budget=TOKENS,
        light_budget=BUDGET,
        step_free_tokens=None if free is None else np.array(free),
    )


def _sand_stream(first: int, last: int, tokens: int = 40) -> list[tuple[int, int, int, int]]:
    """One sand request arriving in every step from `first` to `last`, each served in the next step."""
    return [(SAND, tokens, step, step + 1) for step in range(first, last)]


def test_a_rock_that_keeps_the_floor_under_a_stream_of_sand_is_within_its_bound() -> None:
    # A rock of 200 tokens arrives in step 2 among sand; from step 3 it takes the budget every step:
    # four steps, its first token at the end of step 6.
    run = _run([(ROCK, 200, 2, 6), *_sand_stream(0, 30)])
    bounds = request_bounds(run)
    assert run.wait_s[0] <= bounds[0]
    assert all(c.holds for c in class_bounds(run))


def test_a_rock_the_sand_stalls_breaks_its_bound() -> None:
    # The same rock set aside while sand streams: its prefill done only once the sand stops (step 30).
    run = _run([(ROCK, 200, 2, 31), *_sand_stream(0, 30)])
    [rocks] = [c for c in class_bounds(run) if c.label == "rocks"]
    assert rocks.breaks == 1 and rocks.longest_s > rocks.bound_s


def test_sand_behind_a_running_rock_is_bounded_by_what_the_floor_leaves() -> None:
    # The rock runs from step 1; sand arriving in step 2 has the step's other half: first token in 3.
    held = _run([(ROCK, 400, 0, 8), (SAND, 40, 2, 3)])
    assert held.wait_s[1] <= request_bounds(held)[1]
    # Sand that waited for the whole rock (the rock took every step's tokens) breaks its bound.
    starved = _run([(ROCK, 400, 0, 4), (SAND, 40, 2, 5)])
    assert starved.wait_s[1] > request_bounds(starved)[1]


def test_sand_counts_the_share_of_a_rock_that_leads_the_queue_after_it() -> None:
    # Two sand requests of 40 tokens, then a rock: the rock leads step 3 with the budget, the second
    # sand has 10 tokens of it and finishes in step 4.
    led = _run([(SAND, 40, 2, 3), (SAND, 40, 2, 4), (ROCK, 400, 2, 10)])
    led = dataclasses.replace(led, queued_s=led.queued_s + np.array([0.0, 0.001, 0.002]))
    assert all(led.wait_s <= request_bounds(led))
    # Without the rock, the second sand had all it needed in step 3: finishing in step 4 breaks its bound.
    alone = dataclasses.replace(led, queued_s=led.queued_s[:2], scheduled_s=led.scheduled_s[:2],
                                first_token_s=led.first_token_s[:2], level=led.level[:2],
                                prompt_tokens=led.prompt_tokens[:2])  # fmt: skip
    assert alone.wait_s[1] > request_bounds(alone)[1]


def test_a_pebble_served_after_a_rock_that_came_before_it_but_had_not_started_breaks_its_bound() -> None:
    pebble, rock = 1, ROCK
    # The rock and a pebble arrive in step 0; the pebble's two steps first (class order), then the
    # rock's four.
    in_order = _run([(rock, 200, 0, 6), (pebble, 100, 0, 2)])
    in_order = dataclasses.replace(in_order, scheduled_s=np.array([0.3, 0.1]))
    assert all(c.holds for c in class_bounds(in_order))
    # The rock goes first and the pebble waits for its whole prefill: class order broken.
    rock_first = dataclasses.replace(
        _run([(rock, 200, 0, 4), (pebble, 100, 0, 6)]), scheduled_s=np.array([0.1, 0.5])
    )
    [pebbles] = [c for c in class_bounds(rock_first) if c.label == "pebbles"]
    assert not pebbles.holds


def test_service_counts_from_the_first_step_the_cache_has_room() -> None:
    # A sand request of 40 tokens arriving in step 2 while the cache has 10 tokens free until step 9.
    free = [10] * 10 + [1000] * 30
    run = _run([(SAND, 40, 2, 9)], free=free)
    assert run.wait_s[0] <= request_bounds(run)[0]
    # With room all along, the same wait breaks the bound.
    assert run.wait_s[0] > request_bounds(dataclasses.replace(run, step_free_tokens=None))[0]


def test_a_policy_without_light_steps_has_no_floor_to_bound() -> None:
    with pytest.raises(ValueError, match="light steps"):
        dataclasses.replace(_run([(SAND, 40, 0, 1)]), light_budget=0)
