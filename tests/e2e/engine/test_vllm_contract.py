"""What the plug-in relies on inside vLLM's (non-public) scheduler and engine, on the installed vLLM with
a real engine. A vLLM upgrade that changes any of it must fail here, before it misbehaves in production.

How the scheduler loop uses the waiting queue, `self.running`, the slot limits, the prefill threshold
and `_preempt_request` is exercised, not read, by tests/unit/vllm_plugin/test_scheduler_contract.py and
vLLM's own scheduler tests run against the RPS classes (`make vllm-upstream-tests`, on vLLM 0.32 and
0.33). What stays here as a reading of the source is the AsyncLLM path of rendered inputs, which needs a
whole engine."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import vllm
from vllm.v1.core.sched.request_queue import RequestQueue

from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin import SUPPORTED_VLLM_VERSIONS
from rps_serve.vllm_plugin.queue import ClassRequestQueue
from rps_serve.vllm_plugin.scheduler import RPSScheduler
from tests.e2e.engine.conftest import Driver, make_engine, scheduler_of


@pytest.fixture(scope="module")
def engine(tiny_model: Path) -> Iterator[Any]:
    engine = make_engine(tiny_model, Policy.RPS)
    yield engine
    engine.engine_core.shutdown()


def test_installed_vllm_is_a_supported_release() -> None:
    assert vllm.__version__ in SUPPORTED_VLLM_VERSIONS


def test_class_queue_implements_every_request_queue_method() -> None:
    abstract = set(RequestQueue.__abstractmethods__)
    assert abstract, "RequestQueue is no longer abstract: re-check the interface"
    assert not set(ClassRequestQueue.__abstractmethods__)
    assert abstract <= set(vars(ClassRequestQueue))


def test_scheduler_state_we_read_exists(engine: Any) -> None:
    scheduler = scheduler_of(engine)
    assert isinstance(scheduler, RPSScheduler)
    assert isinstance(scheduler.waiting, ClassRequestQueue)
    for name in (
        "running",
        "kv_holding_waiting",
        "max_num_running_reqs",
        "max_num_active_reqs",
        "max_num_scheduled_tokens",
        "block_size",
    ):
        assert hasattr(scheduler, name), name
    assert isinstance(scheduler.running, list)  # set aside and restored around one schedule()
    assert isinstance(scheduler.kv_cache_manager.block_pool.get_num_free_blocks(), int)
    assert isinstance(scheduler.scheduler_config.long_prefill_token_threshold, int)


def test_request_fields_we_read(engine: Any) -> None:
    scheduler = scheduler_of(engine)
    driver = Driver(engine)
    driver.submit("video", Modality.VIDEO, extra_args={"probe": 1})
    (request,) = list(scheduler.waiting)
    assert request.num_prompt_tokens > 0 and request.num_computed_tokens == 0
    assert request.num_tokens >= request.num_prompt_tokens
    assert request.arrival_time > 0 and request.num_preemptions == 0
    assert request.sampling_params.extra_args == {"probe": 1}
    (feature,) = request.mm_features
    assert feature.modality == "video" and 0 < feature.mm_position.length < request.num_prompt_tokens
    assert request.priority == scheduler.waiting.level(request)  # the scheduler wrote it
    driver.run()


def test_the_rendered_input_path_vllm_model_uses() -> None:
    """`triton.engine_input` renders prompts itself and hands `generate` the result, which vLLM must
    pass to the engine without processing it again, stamped with the arrival time we set."""
    from vllm.renderers.base import BaseRenderer
    from vllm.renderers.inputs.preprocess import parse_model_prompt
    from vllm.v1.engine.async_llm import AsyncLLM
    from vllm.v1.engine.input_processor import InputProcessor

    assert callable(parse_model_prompt)
    assert list(inspect.signature(BaseRenderer.render_cmpl).parameters)[:3] == [
        "self",
        "prompts",
        "tok_params",
    ]
    assert isinstance(
        inspect.getattr_static(BaseRenderer, "default_cmpl_tok_params"), functools.cached_property
    )
    assert callable(BaseRenderer._join_mm_warmup)
    add_request = inspect.getsource(AsyncLLM.add_request)
    assert 'isinstance(prompt, dict) and "type" in prompt' in add_request
    assert "priority" in inspect.signature(AsyncLLM.generate).parameters
    assert 'prompt.get("arrival_time"' in inspect.getsource(InputProcessor.process_inputs)
