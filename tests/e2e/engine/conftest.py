"""A real vLLM V1 engine (CPU build) in-process, on a tiny random Qwen2-VL built for the session."""

from __future__ import annotations

import random
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.prompts import filler_text
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.cpu_env import configure_cpu_engine_environment
from tests.prompts import chat_prompt

configure_cpu_engine_environment(Path(tempfile.mkdtemp(prefix="rps-vllm-")))


@pytest.fixture(scope="package", autouse=True)
def in_process_engine_core() -> Iterator[None]:
    """Engine core in the test process: tests drive `step()` themselves and inspect the scheduler.
    Restored afterwards, so that tests elsewhere get vLLM's default."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
        yield


MEDIA_SIZE = 224  # image -> 64 placeholder tokens; 8-frame video -> 256
VIDEO_FRAMES = 8
MAX_MODEL_LEN = 1024
BLOCK_SIZE = 32  # the CPU backend's default is 128; small blocks make KV pressure easy to set up


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from rps_harness.local.tiny_model import TinyModelSpec, build_tiny_model

    out = tmp_path_factory.mktemp("tiny-qwen2-vl")
    build_tiny_model(
        out,
        TinyModelSpec(
            layers=2, hidden=128, image_size=MEDIA_SIZE, video_size=MEDIA_SIZE, video_frames=VIDEO_FRAMES
        ),
    )
    return out


def make_engine(model: Path, policy: Policy, **overrides: Any) -> Any:
    from vllm import LLMEngine

    from rps_serve.vllm_plugin.engine_args import engine_args

    settings: dict[str, Any] = {
        "max_model_len": MAX_MODEL_LEN,
        "max_num_batched_tokens": MAX_MODEL_LEN,
        "enable_prefix_caching": False,
        "block_size": BLOCK_SIZE,
        "seed": 0,
        **overrides,
    }
    return LLMEngine.from_engine_args(
        engine_args(model, policy, rps_settings=settings.pop("rps", None), **settings)
    )


def scheduler_of(engine: Any) -> Any:
    return engine.engine_core.engine_core.scheduler


@dataclass
class Driver:
    """Submits requests to an engine, steps it to completion, and records what happened when."""

    engine: Any
    rng: random.Random = field(default_factory=lambda: random.Random(0))
    media_rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    step: int = 0
    first_token_step: dict[str, int] = field(default_factory=dict)
    finished_step: dict[str, int] = field(default_factory=dict)
    output_tokens: dict[str, int] = field(default_factory=dict)

    def submit(
        self,
        request_id: str,
        modality: Modality,
        words: int = 20,
        max_tokens: int = 4,
        arrival_time: float | None = None,
        extra_args: dict[str, Any] | None = None,
    ) -> None:
        from vllm import SamplingParams

        prompt: dict[str, Any] = {"prompt": chat_prompt(filler_text(words, self.rng), modality)}
        if modality is Modality.IMAGE:
            prompt["multi_modal_data"] = {"image": random_image(MEDIA_SIZE, MEDIA_SIZE, self.media_rng)}
        elif modality is Modality.VIDEO:
            video = random_video(VIDEO_FRAMES, MEDIA_SIZE, MEDIA_SIZE, self.media_rng)
            prompt["multi_modal_data"] = {"video": video}
        params = SamplingParams(max_tokens=max_tokens, ignore_eos=True, extra_args=extra_args)
        self.engine.add_request(request_id, prompt, params, arrival_time=arrival_time)

    def advance(self) -> None:
        self.step += 1
        for output in self.engine.step():
            produced = len(output.outputs[0].token_ids)
            if produced and output.request_id not in self.first_token_step:
                self.first_token_step[output.request_id] = self.step
            if output.finished:
                self.finished_step[output.request_id] = self.step
                self.output_tokens[output.request_id] = produced

    def run(self, max_steps: int = 5000) -> None:
        while self.engine.has_unfinished_requests():
            self.advance()
            assert self.step < max_steps, "engine did not drain"

    def first_token_order(self) -> list[str]:
        return sorted(self.first_token_step, key=lambda r: (self.first_token_step[r], r))


@pytest.fixture
def driver_for() -> Iterator[Any]:
    """driver_for(engine) -> Driver; shuts the engines down after the test."""
    engines: list[Any] = []

    def build(engine: Any) -> Driver:
        engines.append(engine)
        return Driver(engine)

    yield build
    for engine in engines:
        engine.engine_core.shutdown()
