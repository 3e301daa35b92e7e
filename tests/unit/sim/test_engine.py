"""The engine model: conservation, limits, isolation timing, ordering and preemption."""

from __future__ import annotations

import numpy as np
import pytest

from rps_harness.sim.engine import Engine, EngineConfig, EngineWork, StepRecord
from rps_harness.sim.timing import TimingModel
from rps_harness.workload.mixes import MIXES
from rps_harness.workload.trace import generate_trace
from rps_serve.profiles.reference import PrefillLine
from rps_serve.scheduling.parameters import Policy, class_ladder
from rps_serve.scheduling.preemption import PreemptionRule
from rps_serve.scheduling.queues import ClassQueues
from rps_serve.scheduling.regulator import PriorityRegulator

TIMING = TimingModel(
    prefill_step_s=0.01,
    token_s=1e-5,
    decode_step_s=0.005,
    kv_token_s=1e-7,
    encoder=(PrefillLine(0.0, 0.0), PrefillLine(0.002, 1e-6), PrefillLine(0.005, 2e-6)),
)


def _work(
    ready: list[float],
    prompt: list[int],
    output: list[int],
    level: list[int],
    visual: list[int] | None = None,
) -> EngineWork:
    n = len(ready)
    modality_tokens = np.array(visual or [0] * n, dtype=np.int64)
    return EngineWork(
        ready_s=np.array(ready),
        arrival_s=np.array(ready),
        prompt_tokens=np.array(prompt, dtype=np.int64),
        output_tokens=np.array(output, dtype=np.int64),
        modality_tokens=modality_tokens,
        encoder_s=np.zeros(n),
        level=np.array(level, dtype=np.int64),
    )


def _engine(
    work: EngineWork,
    policy: Policy,
    config: EngineConfig,
    chunk_cap: int = 0,
    steps: list[StepRecord] | None = None,
) -> Engine:
    holder: list[Engine] = []
    queues: ClassQueues[int] = ClassQueues(
        PriorityRegulator(policy, class_ladder(3)), clock=lambda: holder[0].now if holder else 0.0
    )
    engine = Engine(
        work,
        config,
        TIMING,
        queues,
        PreemptionRule.for_policy(policy),
        chunk_cap,
        observer=None if steps is None else steps.append,
    )
    holder.append(engine)
    return engine


def test_a_lone_request_takes_the_timing_models_time() -> None:
    engine = _engine(_work([0.5], [1000], [5], [0]), Policy.FCFS, EngineConfig(kv_capacity_tokens=100_000))
    result = engine.run()
    first = 0.5 + 0.01 + 1000 * 1e-5  # one prefill step
    # Four decode steps, each reading the KV computed so far (1000, 1001, 1002, 1003 tokens).
    finish = first + sum(0.005 + 1e-5 + 1e-7 * context for context in range(1000, 1004))
    assert result.first_token_s[0] == pytest.approx(first)
    assert result.finish_s[0] == pytest.approx(finish)
    assert result.steps == 5


def test_a_long_prompt_is_prefilled_in_budget_sized_chunks() -> None:
    config = EngineConfig(kv_capacity_tokens=100_000, max_num_batched_tokens=8192)
    result = _engine(_work([0.0], [20_000], [1], [0]), Policy.FCFS, config).run()
    # Three prefill steps (8192, 8192, 3616 tokens): three fixed costs and every token once.
    assert result.first_token_s[0] == pytest.approx(3 * 0.01 + 20_000 * 1e-5)
    assert result.steps == 3


def test_an_item_larger_than_the_token_budget_is_encoded_in_one_step() -> None:
    # vLLM's encoder budget is at least the largest multimodal item, so a small token budget only
    # chunks the prefill; one item per step, so the second video waits for the next step.
    config = EngineConfig(kv_capacity_tokens=100_000, max_num_batched_tokens=2048)
    work = _work([0.0, 0.0], [3100, 3100], [1, 1], [2, 2], visual=[3000, 3000])
    steps: list[StepRecord] = []
    result = _engine(work, Policy.FCFS, config, steps=steps).run()
    assert np.isfinite(result.finish_s).all()
    assert all(step.scheduled_tokens <= 2048 for step in steps)


def _full_steps(policy: Policy) -> np.ndarray:
    # Prompts fill a whole step each, so one request is admitted per step in queue order.
    work = _work([0.0, 0.001, 0.002, 0.003, 0.004], [8192] * 5, [1] * 5, [2, 2, 1, 0, 0])
    return _engine(work, policy, EngineConfig(kv_capacity_tokens=100_000)).run().first_token_s


def test_fcfs_serves_in_arrival_order() -> None:
    assert np.argsort(_full_steps(Policy.FCFS)).tolist() == [0, 1, 2, 3, 4]


def test_rps_serves_sand_then_pebbles_then_rocks() -> None:
    # Request 0 found the engine idle; the rest queued behind it.
    assert np.argsort(_full_steps(Policy.RPS)).tolist() == [0, 3, 4, 2, 1]


def _rock_and_sand(policy: Policy) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    # A rock holds most of a 1,024-token cache when a sand request arrives that does not fit beside it.
    work = _work([0.0, 0.05], [800, 300], [50, 2], [2, 0])
    result = _engine(work, policy, EngineConfig(kv_capacity_tokens=1024)).run()
    return result.first_token_s, result.finish_s, result.preemptions


def test_sand_evicts_a_rock_under_rps_but_waits_under_fcfs() -> None:
    first, finish, preemptions = _rock_and_sand(Policy.RPS)
    assert preemptions.tolist() == [1, 0]
    assert first[1] < finish[0]
    first, finish, preemptions = _rock_and_sand(Policy.FCFS)
    assert preemptions.tolist() == [0, 0]
    assert first[1] > finish[0]


def test_waiting_sand_evicts_one_rock_a_step_as_the_plug_in_does() -> None:
    # Two rocks fill a 1,024-token cache when two sand requests arrive that fit only once a rock is
    # gone: the head of the queue evicts one rock a step (tests/unit/vllm_plugin/
    # test_scheduler_contract.py holds the plug-in to the same scenario), never the second sand a
    # second rock in the same step.
    work = _work([0.0, 0.0, 0.05, 0.05], [400, 400, 400, 400], [60, 60, 2, 2], [2, 2, 0, 0])
    steps: list[StepRecord] = []
    result = _engine(work, Policy.RPS, EngineConfig(kv_capacity_tokens=1024), steps=steps).run()
    assert result.preemptions.tolist() == [1, 1, 0, 0]
    assert [s.preemptions for s in steps if s.preemptions] == [1, 1]
    assert max(result.first_token_s[2:]) < min(result.finish_s[:2])


@pytest.mark.parametrize(
    ("policy", "chunk_cap"), [(Policy.FCFS, 0), (Policy.RPS, 0), (Policy.RPS, 512), (Policy.EDF, 0)]
)
def test_conservation_and_limits_under_a_tight_cache(policy: Policy, chunk_cap: int) -> None:
    trace = generate_trace(MIXES["mixed-iii"], rate=30.0, n=300, seed=5)
    work = EngineWork(
        ready_s=trace.arrival_s,
        arrival_s=trace.arrival_s,
        prompt_tokens=trace.prompt_tokens,
        output_tokens=trace.output_tokens,
        modality_tokens=trace.modality_tokens,
        encoder_s=np.where(trace.modality_tokens > 0, 0.01, 0.0),
        level=trace.modality,  # the naive classes
    )
    config = EngineConfig(kv_capacity_tokens=40_000, max_num_seqs=64)
    steps: list[StepRecord] = []
    engine = _engine(work, policy, config, chunk_cap=chunk_cap, steps=steps)
    result = engine.run()

    assert np.all(np.isfinite(result.finish_s))
    assert np.array_equal(engine.generated, trace.output_tokens)  # every requested token, no more
    assert np.all(result.first_token_s >= trace.arrival_s)
    assert np.all(result.finish_s >= result.first_token_s)
    assert result.preemptions.sum() > 0  # the cache is tight enough to force recomputation
    assert engine.free_blocks == config.num_blocks  # every block came back
    assert max(s.scheduled_tokens for s in steps) <= config.max_num_batched_tokens
    assert max(s.used_blocks for s in steps) <= config.num_blocks
    assert max(s.running for s in steps) <= config.max_num_seqs
    assert sum(s.preemptions for s in steps) == result.preemptions.sum()
    assert result.busy_s == pytest.approx(sum(s.duration_s for s in steps))


def _prefill_steps(work: EngineWork, chunk_cap: int) -> tuple[list[int], np.ndarray]:
    steps: list[StepRecord] = []
    config = EngineConfig(kv_capacity_tokens=100_000)
    result = _engine(work, Policy.RPS, config, chunk_cap=chunk_cap, steps=steps).run()
    return [s.prefill_tokens for s in steps], result.first_token_s


def test_chunk_cap_lets_sand_past_a_running_rock_prefill() -> None:
    # A 30,000-token rock starts alone; a short sand request arrives during its first chunk.
    work = _work([0.0, 0.001], [30_000, 100], [1, 1], [2, 0])
    plain, plain_first = _prefill_steps(work, chunk_cap=0)
    # Running requests go first: the rock fills every step and sand rides along with its last chunk.
    assert plain == [8192, 8192, 8192, 5424 + 100]
    assert plain_first[1] == plain_first[0]
    capped, capped_first = _prefill_steps(work, chunk_cap=1024)
    # While sand waits behind the rock's prefill the rock's chunk is capped; then the cap lifts.
    assert capped == [8192, 1024 + 100, 8192, 8192, 4400]
    assert capped_first[1] == pytest.approx(0.01 + 8192e-5 + 0.01 + 1124e-5)


def test_chunk_cap_limits_every_chunk_of_the_step() -> None:
    # As vLLM's long_prefill_token_threshold: a pebble admitted beside the sand is capped too.
    work = _work([0.0, 0.001, 0.001], [30_000, 100, 3000], [1, 1, 1], [2, 0, 1])
    capped, _ = _prefill_steps(work, chunk_cap=1024)
    assert capped[:2] == [8192, 1024 + 100 + 1024]


def test_no_chunk_cap_while_only_heavier_requests_wait() -> None:
    work = _work([0.0, 0.001], [30_000, 3000], [1, 1], [1, 2])  # a rock waits behind a pebble
    capped, _ = _prefill_steps(work, chunk_cap=1024)
    plain, _ = _prefill_steps(work, chunk_cap=0)
    assert capped == plain


def test_same_input_same_result() -> None:
    trace = generate_trace(MIXES["mixed-i"], rate=20.0, n=200, seed=9)
    runs = []
    for _ in range(2):
        work = EngineWork(
            trace.arrival_s,
            trace.arrival_s,
            trace.prompt_tokens,
            trace.output_tokens,
            trace.modality_tokens,
            np.zeros(len(trace)),
            trace.modality,
        )
        runs.append(_engine(work, Policy.RPS, EngineConfig(kv_capacity_tokens=50_000)).run())
    assert np.array_equal(runs[0].first_token_s, runs[1].first_token_s)
    assert np.array_equal(runs[0].finish_s, runs[1].finish_s)


def test_a_request_larger_than_the_cache_is_refused() -> None:
    with pytest.raises(ValueError, match="KV tokens"):
        _engine(_work([0.0], [5000], [10], [0]), Policy.FCFS, EngineConfig(kv_capacity_tokens=1000))


def test_a_running_victim_is_vllms_priority_choice_heaviest_class_then_latest() -> None:
    """As vLLM's priority policy picks with the plug-in's class level as the priority: an old rock
    goes before fresh sand whatever their scores; within a class, the later arrival."""
    work = _work([0.0, 30.0, 31.0, 32.0], [100] * 4, [8] * 4, [2, 0, 2, 0])
    engine = _engine(work, Policy.RPS, EngineConfig(kv_capacity_tokens=100_000))
    assert engine._running_victim([0, 1]) == 0
    assert engine._running_victim([0, 1, 2, 3]) == 2
    assert engine._running_victim([1, 3]) == 3
    fcfs = _engine(work, Policy.FCFS, EngineConfig(kv_capacity_tokens=100_000))
    assert fcfs._running_victim([0, 1, 3]) == 3  # the last admitted


def _queue_work_per_step(waiting: int, steps: int = 5) -> list[int]:
    """Queue entries scored and compared per step while two sand requests decode in a full KV cache
    and `waiting` requests of every class wait for it (rps: each step tries the head, and an eviction)."""
    running = 2
    levels = [0] * running + [i % 3 for i in range(waiting)]
    work = _work(
        [0.0] * running + [0.001] * waiting,
        [1000] * running + [2000] * waiting,
        [50] * (running + waiting),
        levels,
    )
    engine = _engine(work, Policy.RPS, EngineConfig(kv_capacity_tokens=2200, max_num_batched_tokens=4096))
    for request in range(running):
        engine.add(request)
    engine.step()
    engine.now = 0.001
    for request in range(running, running + waiting):
        engine.add(request)
    work_per_step = []
    for _ in range(steps):
        before = engine.queues.visited
        engine.step()
        work_per_step.append(engine.queues.visited - before)
    assert len(engine.queues) == waiting, "a waiting request was admitted: the queue moved"
    return work_per_step


def test_the_work_of_a_step_does_not_grow_with_the_queue() -> None:
    assert _queue_work_per_step(64) == _queue_work_per_step(4096)


def test_stock_vllm_priority_orders_by_class_and_never_evicts_for_a_waiting_request() -> None:
    # Stock vLLM's priority policy: static class order, arrival within a class; a waiting request
    # waits for KV blocks (only a running request that cannot grow preempts, heaviest class first).
    assert np.argsort(_full_steps(Policy.VLLM_PRIORITY)).tolist() == [0, 3, 4, 2, 1]
    first, finish, preemptions = _rock_and_sand(Policy.VLLM_PRIORITY)
    assert preemptions.tolist() == [0, 0]
    assert first[1] > finish[0]
    work = _work([0.0, 30.0, 31.0, 32.0], [100] * 4, [8] * 4, [2, 0, 2, 0])
    engine = _engine(work, Policy.VLLM_PRIORITY, EngineConfig(kv_capacity_tokens=100_000))
    assert engine._running_victim([0, 1, 2, 3]) == 2
