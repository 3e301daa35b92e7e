"""What the RPS plug-in relies on inside vLLM's scheduler, exercised through the scheduler itself.

A scheduler without a model, as vLLM's own scheduler tests build it (`model_free`, from the installed
vllm package: no source tree, no engine), driven step by step. `make vllm-upstream-tests` runs these
on the other supported release too. Each check fails if the internal it names stops behaving as the
plug-in assumes:
- `self.waiting` is ours: every queue call vLLM makes through a request's life lands in it;
- `schedule()` reads `self.running` and the slot limits afresh at each call (a prefill set aside);
- `scheduler_config.long_prefill_token_threshold` is read at each call (the chunk cap);
- `_preempt_request` puts the request back in `self.waiting` and counts the preemption;
- a request taken out of `self.waiting` for one call is not scheduled, and is after (the decode hold).
Then the plug-in's own decisions on that scheduler: the class order for a free slot, eviction under KV
pressure (from lighter to heavier, one a step, never under FCFS, at most `max_preemptions` times per
request).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from vllm.v1.request import RequestStatus

from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.config import RPSConfig
from rps_serve.vllm_plugin.queue import ClassRequestQueue
from rps_serve.vllm_plugin.scheduler import RPSAsyncScheduler, RPSScheduler
from tests.unit.vllm_plugin.model_free import classed_request, create_scheduler, feed, write_opt_model

SAND, ROCK = 0, 2
BLOCK_SIZE = 16  # create_scheduler's
ROCK_BLOCKS = 12

pytestmark = pytest.mark.parametrize("async_scheduling", [False, True], ids=["sync", "async"])


Build = Callable[..., Any]


@pytest.fixture(scope="module")
def opt_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_opt_model(tmp_path_factory.mktemp("hub"))


@pytest.fixture()
def build(opt_model: Path, async_scheduling: bool) -> Build:
    """`build(max_num_seqs=16, num_blocks=10000, **settings)`: a scheduler without a model, of our sync
    or async class, with `settings` as its RPS config."""
    cls = RPSAsyncScheduler if async_scheduling else RPSScheduler

    def scheduler(max_num_seqs: int = 16, num_blocks: int = 10000, **settings: Any) -> Any:
        def rps(*, vllm_config: Any, **kwargs: Any) -> Any:
            vllm_config.additional_config = RPSConfig(**settings).to_additional_config()
            return cls(vllm_config=vllm_config, **kwargs)

        return create_scheduler(
            opt_model,
            rps,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=256,
            num_blocks=num_blocks,
            block_size=BLOCK_SIZE,
            async_scheduling=async_scheduling,
        )

    return scheduler


def test_every_waiting_queue_call_lands_in_the_class_queue(build: Build) -> None:
    scheduler = build()
    assert isinstance(scheduler.waiting, ClassRequestQueue)
    rock, sand = classed_request("rock", ROCK, 100), classed_request("sand", SAND, 20)
    scheduler.add_request(rock)
    scheduler.add_request(sand)
    assert list(scheduler.waiting) == [sand, rock] and sand.priority == SAND and rock.priority == ROCK
    output = scheduler.schedule()
    assert set(output.num_scheduled_tokens) == {"sand", "rock"} and not scheduler.waiting
    feed(scheduler, output)
    scheduler.running.remove(rock)  # as the plug-in's eviction does before preempting
    scheduler._preempt_request(rock, 0.0)
    assert list(scheduler.waiting) == [rock]
    assert rock.status == RequestStatus.PREEMPTED and rock.num_preemptions == 1
    scheduler.finish_requests(["rock"], RequestStatus.FINISHED_ABORTED)
    assert not scheduler.waiting and scheduler.get_num_unfinished_requests() == 1


def test_a_prefill_set_aside_sits_out_one_step(build: Build) -> None:
    """A rock part-way through its prefill, set aside for one step (as a light step sets aside the
    heavier prefills past the first), leaves that step to the sand waiting behind it, in the one
    sequence slot left: `schedule()` must read `self.running` and the slot limits at each call."""
    scheduler = build(max_num_seqs=2)
    scheduler.add_request(classed_request("rock", ROCK, 2000))
    first = scheduler.schedule()
    assert first.num_scheduled_tokens == {"rock": 256}
    feed(scheduler, first)
    scheduler.add_request(classed_request("sand", SAND, 20))
    (rock,) = scheduler.running
    with scheduler._set_aside([rock]):
        second = scheduler.schedule()
        assert scheduler.max_num_running_reqs == 1
    assert second.num_scheduled_tokens == {"sand": 20}
    assert scheduler.max_num_running_reqs == 2
    assert [r.request_id for r in scheduler.running] == ["rock", "sand"]
    feed(scheduler, second)
    assert "rock" in scheduler.schedule().num_scheduled_tokens


def test_the_prefill_threshold_is_read_at_every_step(build: Build) -> None:
    """With `chunk_cap_tokens`, the rock's chunk is capped while sand waits behind it."""
    scheduler = build(chunk_cap_tokens=64)
    scheduler.add_request(classed_request("rock", ROCK, 2000))
    first = scheduler.schedule()
    assert first.num_scheduled_tokens == {"rock": 256}
    feed(scheduler, first)
    scheduler.add_request(classed_request("sand", SAND, 20))
    assert scheduler.schedule().num_scheduled_tokens == {"rock": 64, "sand": 20}
    assert scheduler.scheduler_config.long_prefill_token_threshold == 0  # restored after the step


def test_a_request_held_out_of_the_queue_starts_after_the_hold(build: Build) -> None:
    """With `decode_hold_s`, a rock arriving while sand decodes waits for that sand to finish."""
    scheduler = build(decode_hold_s=60.0, aging_time_scale=1.0)
    scheduler.add_request(classed_request("sand", SAND, 20, max_tokens=100))
    feed(scheduler, scheduler.schedule())
    scheduler.add_request(classed_request("rock", ROCK, 100))
    held = scheduler.schedule()
    assert set(held.num_scheduled_tokens) == {"sand"}
    assert [r.request_id for r in scheduler.waiting] == ["rock"]  # back in the queue after the step
    assert scheduler.holds == 1
    feed(scheduler, held)
    scheduler.finish_requests(["sand"], RequestStatus.FINISHED_ABORTED)
    assert set(scheduler.schedule().num_scheduled_tokens) == {"rock"}


def test_with_media_only_holds_a_text_rock_starts_at_once(build: Build) -> None:
    """`decode_hold_media_only`: a heavy request without encoder inputs is not held; one with is."""
    scheduler = build(decode_hold_s=60.0, decode_hold_media_only=True, aging_time_scale=1.0)
    scheduler.add_request(classed_request("sand", SAND, 20, max_tokens=100))
    feed(scheduler, scheduler.schedule())
    scheduler.add_request(classed_request("image rock", ROCK, 100, image_tokens=64))
    scheduler.add_request(classed_request("text rock", ROCK, 100))
    step = scheduler.schedule()
    assert set(step.num_scheduled_tokens) == {"sand", "text rock"}
    assert [r.request_id for r in scheduler.waiting] == ["image rock"]
    assert scheduler.holds == 1


# The plug-in's own decisions, on the same scheduler without a model.


def test_sand_takes_the_one_free_slot_before_an_earlier_rock(build: Build) -> None:
    for policy, first in ((Policy.RPS, "sand"), (Policy.FCFS, "rock")):
        scheduler = build(policy=policy, max_num_seqs=1, aging_time_scale=1.0)
        scheduler.add_request(classed_request("rock", ROCK, 100))
        scheduler.add_request(classed_request("sand", SAND, 20))
        assert set(scheduler.schedule().num_scheduled_tokens) == {first}, policy


def _kv_bound_scheduler(build: Build, policy: Policy, max_preemptions: int = 1) -> Any:
    """A rock decoding in a KV cache with no room left for the sand that arrives next."""
    scheduler = build(
        policy=policy,
        num_blocks=ROCK_BLOCKS + 2,  # the rock's blocks, one null block, one to spare
        max_preemptions=max_preemptions,
        aging_time_scale=1.0,
    )
    scheduler.add_request(classed_request("rock", ROCK, ROCK_BLOCKS * BLOCK_SIZE - 8, max_tokens=100))
    feed(scheduler, scheduler.schedule())
    scheduler.add_request(classed_request("sand", SAND, 4 * BLOCK_SIZE))
    return scheduler


def test_under_kv_pressure_waiting_sand_evicts_a_running_rock(build: Build) -> None:
    scheduler = _kv_bound_scheduler(build, Policy.RPS)
    step = scheduler.schedule()
    assert "sand" in step.num_scheduled_tokens and "rock" not in step.num_scheduled_tokens
    assert scheduler.evictions[ROCK] == 1 and scheduler.requests["rock"].num_preemptions == 1
    assert [r.request_id for r in scheduler.waiting] == ["rock"]


def test_waiting_sand_evicts_one_rock_a_step(build: Build) -> None:
    # The simulator's scenario (tests/unit/sim/test_engine.py): two rocks fill the cache when two
    # sand requests arrive that fit only once a rock is gone; the first step evicts one rock, not two.
    scheduler = build(
        policy=Policy.RPS,
        num_blocks=2 * ROCK_BLOCKS + 3,  # both rocks' blocks, one null block, two to spare
        aging_time_scale=1.0,
    )
    for name in ("rock-0", "rock-1"):
        scheduler.add_request(classed_request(name, ROCK, ROCK_BLOCKS * BLOCK_SIZE - 8, max_tokens=100))
    while any(r.num_computed_tokens < r.num_prompt_tokens for r in scheduler.running) or scheduler.waiting:
        feed(scheduler, scheduler.schedule())
    for name in ("sand-0", "sand-1"):
        scheduler.add_request(classed_request(name, SAND, (ROCK_BLOCKS - 1) * BLOCK_SIZE))
    scheduler.schedule()
    assert scheduler.evictions[ROCK] == 1
    rocks = (scheduler.requests["rock-0"], scheduler.requests["rock-1"])
    assert sorted(r.num_preemptions for r in rocks) == [0, 1]


def test_fcfs_never_evicts_for_a_waiting_request(build: Build) -> None:
    scheduler = _kv_bound_scheduler(build, Policy.FCFS)
    step = scheduler.schedule()
    assert "rock" in step.num_scheduled_tokens and "sand" not in step.num_scheduled_tokens
    assert not scheduler.evictions and scheduler.requests["rock"].num_preemptions == 0


def test_a_rock_is_evicted_at_most_max_preemptions_times(build: Build) -> None:
    scheduler = _kv_bound_scheduler(build, Policy.RPS, max_preemptions=0)
    step = scheduler.schedule()
    assert "rock" in step.num_scheduled_tokens and not scheduler.evictions
