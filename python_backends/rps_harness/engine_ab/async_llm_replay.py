"""Replays a workload trace through a vLLM `AsyncLLM` engine at the trace's arrival times."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from rps_harness.metrics import RequestRecords
from rps_harness.workload.content import ContentLimits, plan_content
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.trace import Trace
from rps_serve.cost.model import CostModel
from rps_serve.requests import Modality
from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY


@dataclass(frozen=True)
class ReplayRequest:
    arrival_s: float
    modality: Modality
    prompt: dict[str, Any]
    max_tokens: int
    level: int


def build_requests(
    trace: Trace, served: RequestFormat, cost_model: CostModel, limits: ContentLimits, seed: int
) -> list[ReplayRequest]:
    """Fresh prompts and media for every request of `trace`, sized for the served model (`plan_content`)."""
    plan = plan_content(trace, served, limits)
    features = np.column_stack([plan.modality, plan.text_tokens + plan.visual_tokens, plan.visual_tokens])
    levels = cost_model.levels(features.astype(np.float32))
    requests = []
    for row, content in enumerate(plan.contents(served, seed)):
        prompt: dict[str, Any] = {"prompt": content.prompt}
        if content.image is not None:
            prompt["multi_modal_data"] = {"image": content.image}
        elif content.video is not None:
            prompt["multi_modal_data"] = {"video": content.video}
        requests.append(
            ReplayRequest(
                float(trace.arrival_s[row]), content.modality, prompt, content.max_tokens, int(levels[row])
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
    # The class level is also the request's vLLM priority: what stock vLLM's priority policy orders by
    # (vllm-priority); the FCFS policy ignores it, and the RPS scheduler sets its own.
    async for output in engine.generate(request.prompt, params, f"r{index}", priority=request.level):
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
