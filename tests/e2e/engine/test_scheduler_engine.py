"""The RPS scheduler inside a real vLLM V1 engine (CPU build, tiny Qwen2-VL)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from rps_serve.requests import Modality, RequestClass
from rps_serve.scheduling.light_steps import prefill_steps_bound
from rps_serve.scheduling.parameters import PAPER_PARAMETERS, Policy
from rps_serve.scheduling.regulator import outrank_wait_s
from tests.e2e.engine.conftest import BLOCK_SIZE, make_engine, scheduler_of

ONE_AT_A_TIME = {"max_num_seqs": 1}
CONTENDERS = [("rock", Modality.VIDEO), ("pebble", Modality.IMAGE), ("sand", Modality.TEXT)]


def test_classes_run_in_priority_order_under_contention(tiny_model: Path, driver_for: Any) -> None:
    driver = driver_for(make_engine(tiny_model, Policy.RPS, **ONE_AT_A_TIME))
    for request_id, modality in CONTENDERS:  # the rock arrives first
        driver.submit(request_id, modality)
    driver.run()
    assert driver.first_token_order() == ["sand", "pebble", "rock"]


def test_stock_fcfs_serves_in_arrival_order(tiny_model: Path, driver_for: Any) -> None:
    """The same contention under stock vLLM: the rock blocks everyone behind it."""
    driver = driver_for(make_engine(tiny_model, Policy.FCFS, **ONE_AT_A_TIME))
    for request_id, modality in CONTENDERS:
        driver.submit(request_id, modality)
    driver.run()
    assert driver.first_token_order() == ["rock", "pebble", "sand"]


def test_aging_lets_a_rock_through_sustained_sand(tiny_model: Path, driver_for: Any) -> None:
    """New sand keeps arriving; a rock that has waited past the outrank bound is served before it,
    a rock that has waited less is not."""
    bound = outrank_wait_s(PAPER_PARAMETERS[RequestClass.ROCKS], PAPER_PARAMETERS[RequestClass.SAND])
    driver = driver_for(make_engine(tiny_model, Policy.RPS, **ONE_AT_A_TIME))
    now = time.time()
    driver.submit("old-rock", Modality.VIDEO, arrival_time=now - 1.05 * bound)
    driver.submit("young-rock", Modality.VIDEO, arrival_time=now - 0.5 * bound)
    for i in range(6):
        driver.submit(f"sand{i}", Modality.TEXT)
        driver.advance()
    driver.run()
    order = driver.first_token_order()
    assert order[0] == "old-rock"
    assert order[-1] == "young-rock"


def test_an_aged_rock_keeps_its_turn_while_the_cache_drains(tiny_model: Path, driver_for: Any) -> None:
    """Sand that has waited a few seconds outranks an aged rock by score, and small sand fits where
    the rock does not; once the rock has been the head waiting for blocks it keeps its turn (the
    starvation guard), otherwise each new sand would take the blocks that free before it."""
    bound = outrank_wait_s(PAPER_PARAMETERS[RequestClass.ROCKS], PAPER_PARAMETERS[RequestClass.SAND])
    engine = make_engine(
        tiny_model, Policy.RPS, num_gpu_blocks_override=512 // BLOCK_SIZE + 1, max_model_len=512
    )
    scheduler = scheduler_of(engine)
    driver = driver_for(engine)
    for i in range(2):
        driver.submit(f"holder{i}", Modality.TEXT, words=150, max_tokens=60)
    driver.advance()
    driver.submit("rock", Modality.VIDEO, arrival_time=time.time() - 1.05 * bound)
    driver.advance()
    assert len(scheduler.waiting) == 1, "the rock fitted at once: the test proves nothing"
    late = [f"late{i}" for i in range(4)]
    for request_id in late:
        driver.submit(request_id, Modality.TEXT, words=10, arrival_time=time.time() - 3.0)
        driver.advance()
    driver.run()
    assert all(driver.first_token_step["rock"] <= driver.first_token_step[r] for r in late)


def test_sand_evicts_a_running_rock_under_kv_pressure(tiny_model: Path, driver_for: Any) -> None:
    # 16 usable blocks of 32 tokens: a ~300-token video decoding 200 tokens fills the cache.
    engine = make_engine(
        tiny_model, Policy.RPS, num_gpu_blocks_override=512 // BLOCK_SIZE + 1, max_model_len=512
    )
    scheduler = scheduler_of(engine)
    driver = driver_for(engine)
    driver.submit("rock", Modality.VIDEO, max_tokens=200)
    # Let the rock's KV grow until a 150-word (>= 150-token, >= 5-block) sand prompt cannot fit beside it.
    while scheduler.kv_cache_manager.block_pool.get_num_free_blocks() > 3:
        assert "rock" not in driver.finished_step, "the rock never filled the cache"
        driver.advance()
    driver.submit("sand", Modality.TEXT, words=150, max_tokens=4)
    driver.run()
    assert scheduler.evictions[RequestClass.ROCKS] >= 1
    assert driver.finished_step["sand"] < driver.finished_step["rock"]
    assert driver.output_tokens == {"rock": 200, "sand": 4}


def test_no_request_is_lost_and_kv_returns_to_baseline(tiny_model: Path, driver_for: Any) -> None:
    engine = make_engine(
        tiny_model, Policy.RPS, num_gpu_blocks_override=1024 // BLOCK_SIZE + 1, max_model_len=640
    )
    scheduler = scheduler_of(engine)
    free_at_start = scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
    driver = driver_for(engine)
    plan = {}
    modalities = [Modality.TEXT, Modality.TEXT, Modality.IMAGE, Modality.VIDEO]
    for i in range(16):
        modality = modalities[i % len(modalities)]
        plan[f"r{i}"] = max_tokens = 10 + 17 * (i % 5)
        driver.submit(f"r{i}", modality, words=10 + 9 * i, max_tokens=max_tokens)
        driver.advance()
    driver.run()
    assert sum(scheduler.preemptions.values()) > 0, "the cache was never short: the test proves nothing"
    assert driver.output_tokens == plan
    assert not scheduler.running and not scheduler.waiting
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == free_at_start


def test_abort_frees_kv_blocks(tiny_model: Path, driver_for: Any) -> None:
    engine = make_engine(tiny_model, Policy.RPS)
    scheduler = scheduler_of(engine)
    free_at_start = scheduler.kv_cache_manager.block_pool.get_num_free_blocks()
    driver = driver_for(engine)
    for i, modality in enumerate([Modality.VIDEO, Modality.IMAGE, Modality.TEXT, Modality.TEXT]):
        driver.submit(f"r{i}", modality, max_tokens=200)
    for _ in range(3):
        driver.advance()
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() < free_at_start
    engine.abort_request([f"r{i}" for i in range(4)])
    driver.advance()
    assert not engine.has_unfinished_requests()
    assert not scheduler.running and not scheduler.waiting
    assert scheduler.kv_cache_manager.block_pool.get_num_free_blocks() == free_at_start


def test_supplied_class_wins_over_the_engine_estimate(tiny_model: Path, driver_for: Any) -> None:
    """The ensemble's class (sampling_params.extra_args["rps"]) decides, not the engine's guess."""
    driver = driver_for(make_engine(tiny_model, Policy.RPS, **ONE_AT_A_TIME))
    driver.submit("text-said-rock", Modality.TEXT, extra_args={"rps": {"class_level": 2, "num_classes": 3}})
    driver.submit("video-said-sand", Modality.VIDEO, extra_args={"rps": {"class_level": 0, "num_classes": 3}})
    driver.submit("plain-image", Modality.IMAGE)
    driver.run()
    assert driver.first_token_order() == ["video-said-sand", "plain-image", "text-said-rock"]


def _sand_behind_a_chunked_rock(engine: Any, driver_for: Any, rock_left: int) -> Any:
    """A rock with more than `rock_left` prompt tokens left after its first chunk, then sand: both
    run to completion. Returns the driver, whose steps say who got a first token when."""
    scheduler = scheduler_of(engine)
    driver = driver_for(engine)
    driver.submit("rock", Modality.VIDEO, words=10, max_tokens=4)
    driver.advance()
    (rock,) = scheduler.running
    assert 0 < rock.num_computed_tokens < rock.num_prompt_tokens - rock_left, (
        "the rock's prefill is not chunked"
    )
    driver.submit("sand", Modality.TEXT, words=10, max_tokens=4)
    driver.run()
    assert driver.output_tokens == {"rock": 4, "sand": 4}
    return driver


@pytest.mark.parametrize("hold_s", [5.0, 0.0], ids=["holding", "not-holding"])
def test_a_rock_waits_for_the_sand_decoding_beside_it(
    tiny_model: Path, driver_for: Any, hold_s: float
) -> None:
    """With `decode_hold_s`, a rock that arrives while sand decodes starts only once that sand has
    finished (its encoder step would hold up every decode step of it); without, it starts at once."""
    engine = make_engine(tiny_model, Policy.RPS, rps={"decode_hold_s": hold_s, "aging_time_scale": 1.0})
    scheduler = scheduler_of(engine)
    driver = driver_for(engine)
    driver.submit("sand", Modality.TEXT, words=10, max_tokens=16)
    driver.advance()
    assert "sand" in driver.first_token_step, "sand is not decoding yet"
    driver.submit("rock", Modality.VIDEO, words=10, max_tokens=2)
    driver.run()
    assert driver.output_tokens == {"sand": 16, "rock": 2}
    assert (driver.first_token_step["rock"] > driver.finished_step["sand"]) is (hold_s > 0)
    assert (scheduler.holds > 0) is (hold_s > 0)


# Light steps on a real engine: 128-token steps, a budget of 48 for heavier prefills beside sand of
# about 25 tokens (`_short_sand` checks it), so that a light step holds the sand whole and the rock's
# capped chunk.
LIGHT = {"max_num_batched_tokens": 128}
LIGHT_BUDGET = 48


def _short_sand(scheduler: Any, request_id: str) -> None:
    """The engine's request of `request_id` (vLLM suffixes the ids it is given) fits beside the budget."""
    (tokens,) = [
        r.num_prompt_tokens for key, r in scheduler.requests.items() if key.startswith(f"{request_id}-")
    ]
    assert tokens + LIGHT_BUDGET <= LIGHT["max_num_batched_tokens"], f"sand of {tokens} tokens"


@pytest.mark.parametrize("light_steps", [True, False], ids=["light-steps", "no-light-steps"])
def test_sand_gets_a_light_step_beside_a_rocks_prefill(
    tiny_model: Path, driver_for: Any, light_steps: bool
) -> None:
    """Under the shipped order with light steps (`scheduling.light_steps`), sand arriving while a rock
    prefills gets its first token before the rock's: the rock keeps at most the light-step budget of
    that step, beside the sand. Without them the rock's chunks fill every step until its prefill is
    done."""
    rps = {"light_steps": light_steps, "light_step_tokens": LIGHT_BUDGET}
    engine = make_engine(tiny_model, Policy.HEADROOM, rps=rps, **LIGHT)
    driver = _sand_behind_a_chunked_rock(engine, driver_for, rock_left=LIGHT["max_num_batched_tokens"])
    assert (driver.first_token_step["sand"] < driver.first_token_step["rock"]) is light_steps
    assert (scheduler_of(engine).light_steps > 0) is light_steps


def test_a_rock_keeps_the_light_step_budget_under_a_stream_of_sand(tiny_model: Path, driver_for: Any) -> None:
    """The floor: with new sand in every step, every step is a light one, and a running rock still
    gets the budget of each until its prefill is done, so its first token comes within
    `prefill_steps_bound` steps of its start, the bound the budget buys."""
    engine = make_engine(
        tiny_model, Policy.HEADROOM, rps={"light_steps": True, "light_step_tokens": LIGHT_BUDGET}, **LIGHT
    )
    scheduler = scheduler_of(engine)
    driver = driver_for(engine)
    driver.submit("rock", Modality.VIDEO, words=10, max_tokens=2)
    driver.advance()
    (rock,) = scheduler.running
    left = rock.num_prompt_tokens - rock.num_computed_tokens
    assert left > LIGHT_BUDGET, "the rock's prefill is not chunked"
    for i in range(prefill_steps_bound(left, LIGHT_BUDGET)):
        driver.submit(f"sand-{i}", Modality.TEXT, words=10, max_tokens=2)
        driver.advance()
        _short_sand(scheduler, f"sand-{i}")
    assert "rock" in driver.first_token_step, "the rock's prefill outlasted its bound"
    driver.run()
    assert scheduler.light_steps >= prefill_steps_bound(left, LIGHT_BUDGET)
