"""The light steps' floor through the served stack: a real tritonserver serving the repository as it
ships (the shipped policy, model.json's `rps` settings, light steps on), a rock sent through
`rps_ensemble` while sand streams in behind it. Sand is present in the rock's steps, so they are light
ones; the floor still gives the rock the light-step budget of every step, so its prefill takes at most
`prefill_steps_bound(P, budget)` engine steps however much sand waits: the bound on a heavier class's
service that the budget buys (docs/limits-and-guarantees.md), counted from the server's run log, in
steps rather than seconds, so that the verdict is the scheduler's and not the machine's speed. And
every request of the run, the rock and each sand, gets its first token within the bound the floor
buys it from the run's own load (`service_bound`), in the run's own steps."""

from __future__ import annotations

import json
import random
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rps_harness.client import Generation
from rps_harness.loadtest.run_analysis import engine_run, read_run_log
from rps_harness.service_bound import class_bounds
from rps_harness.workload.prompts import filler_text
from rps_serve.requests import Modality
from rps_serve.scheduling.light_steps import prefill_steps_bound
from rps_serve.triton.run_log import MODEL_PLACEHOLDER
from rps_serve.triton.settings import RUN_LOG_ENV, SETTINGS_FILE, read_settings
from rps_serve.vllm_plugin.config import CONFIG_KEY, RPSConfig
from tests.e2e.triton.conftest import ENSEMBLE, VLLM_MODEL, Server, run, start_server
from tests.prompts import chat_prompt

# A text of almost four of the CPU stack's 2,048-token steps: a rock (longer than a step) whose
# prefill spans several steps, within the served context (8,192 tokens).
ROCK_WORDS = 6200
SAND_WORDS = 20
# Sand clients, each sending its next request as its last one ends, all streaming before the rock is
# sent: sand then waits in most of the rock's steps (a broken floor would stall the rock in each).
SAND_CLIENTS = 6
SAND_PER_CLIENT = 200  # a stream that ends by itself, so a broken floor fails instead of hanging
# The rock's prefill is cut out of the run log by its engine-side prefill time, ending where
# `vllm_model` took its first token (a few milliseconds after the engine produced it): the window can
# take in one step more than the prefill's. Sand asks for one token, so no step of the window decodes.
STEP_SLACK = 1


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Path]]:
    logs = tmp_path_factory.mktemp("run-log")
    env = {RUN_LOG_ENV: str(logs / f"{MODEL_PLACEHOLDER}.jsonl")}
    with start_server(tmp_path_factory, env=env) as server:
        yield server, logs / f"{VLLM_MODEL}.jsonl"


def _served_budget(server: Server) -> tuple[int, int]:
    """The served step's token budget and the light-step budget of heavier classes in it, computed
    from the repository's settings and cost model as the plug-in computes them."""
    settings = read_settings(server.repository / SETTINGS_FILE, server.repository)
    step = int(settings.engine_args["max_num_batched_tokens"])
    rps = RPSConfig.from_additional_config({CONFIG_KEY: {**settings.rps, "policy": settings.policy.value}})
    return step, rps.variant.light_budget(step, server.cost_model())


def _stream_sand(
    server: Server, rng: random.Random, flowing: threading.Semaphore, stop: threading.Event, errors: list[str]
) -> None:
    for sent in range(SAND_PER_CLIENT):
        if stop.is_set():
            return
        prompt = chat_prompt(filler_text(SAND_WORDS, rng), Modality.TEXT)
        result = run(server, ENSEMBLE, Generation(prompt, sampling_parameters={"max_tokens": 1}))
        if result.error is not None:
            errors.append(result.error)
        if sent == 0:
            flowing.release()


def _in_engine(record: dict[str, Any]) -> tuple[float, float, float]:
    """When a request's run-log record says it entered the engine's queue, was first scheduled and
    took its first token."""
    first_token = record["arrival"] + record["to_first_token_s"]
    scheduled = first_token - record["prefill_s"]
    return scheduled - record["engine_queue_s"], scheduled, first_token


def test_a_rock_keeps_the_light_step_budget_under_a_stream_of_sand(served: tuple[Server, Path]) -> None:
    server, log = served
    step, budget = _served_budget(server)
    assert 0 < budget <= step, "the shipped settings turn light steps off"
    rng = random.Random(0)
    rock_prompt = chat_prompt(filler_text(ROCK_WORDS, rng), Modality.TEXT)
    flowing, stop, errors = threading.Semaphore(0), threading.Event(), []
    clients = [
        threading.Thread(target=_stream_sand, args=(server, random.Random(i + 1), flowing, stop, errors))
        for i in range(SAND_CLIENTS)
    ]
    for client in clients:
        client.start()
    try:
        for _ in clients:  # every client has had an answer: sand streams
            assert flowing.acquire(timeout=300), f"a sand client got no answer in 300 s: {errors}"
        sent = time.monotonic()
        rock = run(
            server,
            ENSEMBLE,
            Generation(
                rock_prompt, sampling_parameters={"max_tokens": 1}, additional_outputs=("num_input_tokens",)
            ),
        )
    finally:
        stop.set()
        for client in clients:
            client.join()
    assert rock.error is None and not errors, (rock.error, errors)
    prompt_tokens = int(rock.outputs["num_input_tokens"][0])
    assert prompt_tokens > step, "the rock fits in one step: nothing to chunk"
    time.sleep(0.5)  # the server flushes its log with every loop-lag sample, every 0.1 s
    records = read_run_log(log)
    requests = [r for r in records if r["kind"] == "request" and r["arrival"] >= sent]
    (rock_record,) = [r for r in requests if r["level"] == server.cost_model().num_classes - 1]
    _, start, first_token = _in_engine(rock_record)
    # Engine steps, as the run log records them with vLLM's iteration details (a record without them
    # stands for no step of its own).
    steps = [r for r in records if r["kind"] == "step" and "step_ms" in r and start <= r["t"] <= first_token]
    bound = prefill_steps_bound(prompt_tokens, budget)
    detail = json.dumps({"prompt_tokens": prompt_tokens, "budget": budget, "bound": bound, "steps": steps})
    assert len(steps) <= bound + STEP_SLACK, detail
    # The floor itself: from the rock's first chunk (a whole budget: the rock is longer than a step),
    # every step of its prefill but the last gave it the budget, sand or no sand. A step the window
    # takes in before that chunk is left out.
    tokens = [r["prefill_tokens"] for r in steps]
    while tokens and tokens[0] < budget:
        tokens.pop(0)
    assert tokens and all(t >= budget for t in tokens[:-1]), detail
    # Sand in the engine (queued or prefilling) while the rock prefilled: its steps were light ones.
    stays = [_in_engine(r) for r in requests if r["level"] == 0]
    beside = [(queued, first) for queued, _, first in stays if queued < first_token and first > start]
    assert beside, "no sand was in the engine while the rock prefilled: the floor was not exercised"
    # The bound on every request's wait: the run log's requests and steps as they were, the cache
    # with room to spare (the bound's assumption where the log records no free tokens).
    assert max(r["kv"] for r in records if r["kind"] == "step") < 0.5
    bounds = class_bounds(engine_run(records, step, budget, server.cost_model().num_classes))
    assert {c.label for c in bounds} >= {"sand", "rocks"} and all(c.holds for c in bounds), bounds
