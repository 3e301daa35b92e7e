"""Replays a workload trace through a vLLM `AsyncLLM` engine at the trace's arrival times."""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rps_serve.metrics import RequestRecords
from rps_serve.requests import Modality
from rps_serve.tiny_model import TinyModelSpec
from rps_serve.vllm_plugin.classify import ClassLabeler
from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY
from rps_serve.workload.media import random_image, random_video
from rps_serve.workload.prompts import chat_prompt, filler_text
from rps_serve.workload.trace import Trace

TOKENS_PER_WORD = 1.1  # filler words, tiny model tokenizer (measured by `rps-serve profile`)


@dataclass(frozen=True)
class ReplayRequest:
    arrival_s: float
    modality: Modality
    prompt: dict[str, Any]
    max_tokens: int
    level: int


def build_requests(
    trace: Trace, media: TinyModelSpec, labeler: ClassLabeler, max_text_tokens: int, seed: int
) -> list[ReplayRequest]:
    """Fresh prompts and media for every request of `trace`, sized for the served model.

    Text keeps the trace's prompt length (capped at `max_text_tokens`; about 1.1 tokens per filler
    word with the tiny model's tokenizer); image and video placeholders are whatever the model's
    processor makes of its media size. Content is random, so caches cannot hit across requests.
    """
    text_rng = random.Random(seed)
    media_rng = np.random.default_rng(seed)
    modality = trace.modality
    visual = np.array([media.placeholder_tokens(Modality.from_index(int(m))) for m in modality])
    text_tokens = np.minimum(
        np.where(visual > 0, trace.prompt_tokens - trace.modality_tokens, trace.prompt_tokens),
        max_text_tokens,
    )
    levels = labeler.levels(modality, text_tokens + visual, visual)
    requests = []
    for i in range(len(trace)):
        kind = Modality.from_index(int(modality[i]))
        prompt: dict[str, Any] = {
            "prompt": chat_prompt(filler_text(max(1, int(text_tokens[i] / TOKENS_PER_WORD)), text_rng), kind)
        }
        if kind is Modality.IMAGE:
            prompt["multi_modal_data"] = {
                "image": random_image(media.image_size, media.image_size, media_rng)
            }
        elif kind is Modality.VIDEO:
            frames = random_video(media.video_frames, media.video_size, media.video_size, media_rng)
            prompt["multi_modal_data"] = {"video": frames}
        requests.append(
            ReplayRequest(
                float(trace.arrival_s[i]),
                kind,
                prompt,
                int(trace.output_tokens[i]),
                int(levels[i]),
            )
        )
    return requests


async def _send(
    engine: Any,
    index: int,
    request: ReplayRequest,
    start: float,
    num_levels: int,
    first: np.ndarray,
    finish: np.ndarray,
    produced: np.ndarray,
) -> None:
    from vllm import SamplingParams

    await asyncio.sleep(max(0.0, start + request.arrival_s - time.perf_counter()))
    extra = {EXTRA_ARGS_KEY: {"class_level": request.level, "num_classes": num_levels}}
    params = SamplingParams(max_tokens=request.max_tokens, ignore_eos=True, extra_args=extra)
    async for output in engine.generate(request.prompt, params, f"r{index}"):
        now = time.perf_counter() - start
        if np.isnan(first[index]) and output.outputs and output.outputs[0].token_ids:
            first[index] = now
        if output.finished:
            finish[index] = now
            produced[index] = len(output.outputs[0].token_ids)


async def replay(engine: Any, requests: list[ReplayRequest], num_levels: int) -> RequestRecords:
    """Send every request at its arrival time (seconds after start), wait for all, and time them."""
    n = len(requests)
    first, finish = np.full(n, np.nan), np.full(n, np.nan)
    produced = np.zeros(n, dtype=np.int64)
    start = time.perf_counter()
    await asyncio.gather(
        *(_send(engine, i, r, start, num_levels, first, finish, produced) for i, r in enumerate(requests))
    )
    return RequestRecords(
        arrival_s=np.array([r.arrival_s for r in requests]),
        first_token_s=first,
        finish_s=finish,
        output_tokens=produced,
        modality=np.array([r.modality.index for r in requests]),
        level=np.array([r.level for r in requests]),
        num_levels=num_levels,
    )
