"""Runs requests one at a time on an in-process vLLM engine and times the vision encoder and prefill."""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from rps_serve.profiles.records import ProfileRecord
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.classify import request_features
from rps_serve.vllm_plugin.engine_args import engine_args
from rps_serve.workload.media import random_image, random_video
from rps_serve.workload.prompts import filler_text
from rps_serve.workload.request_format import RequestFormat
from rps_serve.workload_profiler.plan import ProfileItem

logger = logging.getLogger(__name__)


class EncoderTimer:
    """Wraps the model runner's vision-encoder call and accumulates its wall time."""

    def __init__(self, model_runner: Any) -> None:
        self.seconds = 0.0
        encode: Callable[..., Any] = model_runner._execute_mm_encoder

        def timed(*args: Any, **kwargs: Any) -> Any:
            started = time.perf_counter()
            try:
                return encode(*args, **kwargs)
            finally:
                self.seconds += time.perf_counter() - started

        model_runner._execute_mm_encoder = timed


def profiling_engine(model: Path, max_model_len: int) -> tuple[Any, EncoderTimer]:
    """An engine whose core and worker live in this process, with the whole prompt in one step."""
    from vllm import LLMEngine

    args = engine_args(
        model,
        Policy.FCFS,
        max_model_len=max_model_len,
        max_num_batched_tokens=max_model_len,  # prefill in one step: its time is one step's time
        enable_prefix_caching=False,
        distributed_executor_backend="uni",
    )
    # The timer must reach the model runner: engine core in this process (read when the engine is made).
    previous = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    try:
        engine = LLMEngine.from_engine_args(args)
    finally:
        if previous is None:
            del os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"]
        else:
            os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = previous
    runner = engine.engine_core.engine_core.model_executor.driver_worker.worker.model_runner
    return engine, EncoderTimer(runner)


class IsolatedProfiler:
    """Profiles one request at a time: nothing else is in the engine while a request runs."""

    def __init__(
        self, engine: Any, timer: EncoderTimer, served: RequestFormat, output_tokens: int, seed: int
    ) -> None:
        self._engine, self._timer, self._served = engine, timer, served
        self._scheduler = engine.engine_core.engine_core.scheduler
        self._output_tokens = output_tokens
        self._text_rng = random.Random(seed)
        self._media_rng = np.random.default_rng(seed)
        self._count = 0

    def _prompt(self, item: ProfileItem) -> dict[str, Any]:
        prompt: dict[str, Any] = {
            "prompt": self._served.prompt(filler_text(item.text_words, self._text_rng), item.modality)
        }
        media = self._served.media
        if item.modality is Modality.IMAGE:
            side = round(media.image_size * item.image_scale)
            prompt["multi_modal_data"] = {"image": random_image(side, side, self._media_rng)}
        elif item.modality is Modality.VIDEO:
            side = media.video_size
            prompt["multi_modal_data"] = {
                "video": random_video(item.video_frames, side, side, self._media_rng)
            }
        return prompt

    def run(self, item: ProfileItem) -> ProfileRecord:
        from vllm import SamplingParams

        self._count += 1
        request_id = f"profile-{self._count}"
        params = SamplingParams(max_tokens=self._output_tokens, ignore_eos=True)
        self._engine.add_request(request_id, self._prompt(item), params)
        self._timer.seconds = 0.0
        # Isolated: the request is the only one the engine core holds.
        (request,) = self._scheduler.requests.values()
        features = request_features(request)
        first_step_s: float | None = None
        encoder_s = 0.0
        output_tokens = 0
        while self._engine.has_unfinished_requests():
            started = time.perf_counter()
            outputs = self._engine.step()
            elapsed = time.perf_counter() - started
            for output in outputs:
                if first_step_s is None and output.outputs and output.outputs[0].token_ids:
                    first_step_s, encoder_s = elapsed, self._timer.seconds
                if output.finished:
                    output_tokens = len(output.outputs[0].token_ids)
        if first_step_s is None:
            raise RuntimeError(f"{request_id} produced no token")
        return ProfileRecord(
            modality=features.modality,
            prompt_tokens=features.prompt_tokens,
            modality_tokens=features.modality_tokens,
            encoder_s=encoder_s,
            prefill_s=max(first_step_s - encoder_s, 0.0),
            output_tokens=output_tokens,
        )
