"""Triton model `vllm_model` (Python backend, decoupled): a vLLM `AsyncLLM` whose scheduler is ours.

As in NVIDIA's vLLM backend, `execute` hands each request to an asyncio loop running in its own
thread and returns at once; the coroutine streams the engine's outputs back through the request's
response sender and always ends with a final response or an error. A request cancelled by its client
is aborted in the engine when its next output arrives (through an ensemble, Triton 2.51 passes a
cancellation on only between steps, so it does not reach a request this model is already streaming).
The class travels from the ensemble as tensors and reaches the RPS scheduler in
`SamplingParams.extra_args`; requests sent here directly carry none, and the engine classifies them
itself.
"""

from __future__ import annotations

import asyncio
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils
from vllm.exceptions import VLLMClientError

from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.triton import protocol as p
from rps_serve.triton.backend import (
    configure_logging,
    error_response,
    log_failure,
    string_tensor,
    tensor_getter,
)
from rps_serve.triton.classes import ClassEstimator, ClassInfo, supplied_class
from rps_serve.triton.metrics import ClassMetrics
from rps_serve.triton.preprocess import Preprocessor
from rps_serve.triton.prompt_tokens import PromptTokenCounter
from rps_serve.triton.settings import load_settings

logger = logging.getLogger(__name__)

FINAL = pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL


def sampling_params(parameters: dict[str, Any], info: ClassInfo) -> Any:
    from vllm import SamplingParams

    parameters = dict(parameters)
    if info.supplied:
        parameters["extra_args"] = {**(parameters.get("extra_args") or {}), **info.extra_args()}
    try:
        return SamplingParams(**parameters)
    except (TypeError, ValueError, VLLMClientError) as error:
        raise p.BadRequest(f"invalid '{p.SAMPLING_PARAMETERS}': {error}") from None


@dataclass
class _Progress:
    """What one request has produced so far (for metrics and the final response)."""

    text: str = ""
    sent: int = 0  # characters of `text` already streamed
    first_token: bool = False
    preemptions: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    finish_reason: str = ""
    cancelled: bool = False


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        configure_logging()
        if not pb_utils.using_decoupled_model_transaction_policy(json.loads(args["model_config"])):
            raise pb_utils.TritonModelException("vllm_model must be decoupled (model_transaction_policy)")
        settings = load_settings(Path(args["model_repository"]).parent)
        self.preprocessor = Preprocessor(PromptTokenCounter(settings.model), settings.media)
        cost_model = OnnxCostModel.from_repository(settings.cost_model) if settings.cost_model else None
        self.classes = ClassEstimator(cost_model)
        self.metrics = ClassMetrics(pb_utils, args["model_name"])
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="vllm-model-loop", daemon=True)
        self.thread.start()
        starting = asyncio.run_coroutine_threadsafe(self._start_engine(settings.engine_kwargs()), self.loop)
        self.engine = starting.result()
        logger.info("vllm_model: %s, policy %s", settings.model, settings.policy.value)

    async def _start_engine(self, kwargs: dict[str, Any]) -> Any:
        from vllm import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        return AsyncLLM.from_engine_args(AsyncEngineArgs(**kwargs))

    def execute(self, requests: list[Any]) -> None:
        for request in requests:
            asyncio.run_coroutine_threadsafe(self._serve(request), self.loop).add_done_callback(log_failure)

    def finalize(self) -> None:
        self.engine.shutdown()
        self.metrics.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=30)

    async def _serve(self, request: Any) -> None:
        """Answer one request; whatever happens, its last message carries the final flag."""
        sender = request.get_response_sender()
        try:
            await self._generate(request, sender)
        except (p.BadRequest, VLLMClientError) as error:  # the request's fault, e.g. a prompt too long
            sender.send(error_response(pb_utils, str(error), invalid_argument=True), flags=FINAL)
        except Exception as error:
            logger.exception("vllm_model failed on a request")
            sender.send(
                error_response(pb_utils, f"vllm_model failed: {error}", invalid_argument=False), flags=FINAL
            )

    async def _generate(self, request: Any, sender: Any) -> None:
        arrival = time.monotonic()
        get = tensor_getter(pb_utils, request)
        parsed = p.parse_request(get)
        frames = get(p.VIDEO_FRAMES)
        prepared = self.preprocessor.prepare(parsed, frames if frames is not None and frames.size else None)
        info = supplied_class(get) or self.classes.estimate(prepared.features)
        params = sampling_params(dict(parsed.sampling_parameters), info)
        prompt: dict[str, Any] = {"prompt": parsed.prompt}
        if media := prepared.multi_modal_data():
            prompt["multi_modal_data"] = media
        request_id = f"{request.request_id() or 'triton'}-{uuid.uuid4().hex}"
        progress = _Progress()
        self.metrics.admitted(info.request_class)
        try:
            async for output in self.engine.generate(prompt, params, request_id):
                if sender.is_cancelled():
                    progress.cancelled = True
                    await self.engine.abort(request_id)
                    sender.send(flags=FINAL)
                    return
                self._record(output, progress, info, arrival)
                if parsed.stream:
                    delta = progress.text[progress.sent :]
                    progress.sent = len(progress.text)
                    sender.send(self._response(delta, progress, info), flags=FINAL if output.finished else 0)
            if not parsed.stream:
                text = progress.text if parsed.exclude_input_in_output else parsed.prompt + progress.text
                sender.send(self._response(text, progress, info), flags=FINAL)
        finally:
            self.metrics.ended(
                info.request_class, progress.preemptions, progress.first_token, progress.cancelled
            )

    def _record(self, output: Any, progress: _Progress, info: ClassInfo, arrival: float) -> None:
        completion = output.outputs[0]
        if completion.token_ids and not progress.first_token:
            progress.first_token = True
            self.metrics.first_token(info.request_class, time.monotonic() - arrival)
        progress.text = completion.text
        progress.output_tokens = len(completion.token_ids)
        progress.input_tokens = len(output.prompt_token_ids or ())
        progress.finish_reason = completion.finish_reason or ""
        if output.metrics is not None:
            progress.preemptions = output.metrics.num_preemptions

    def _response(self, text: str, progress: _Progress, info: ClassInfo) -> Any:
        return pb_utils.InferenceResponse(
            output_tensors=[
                string_tensor(pb_utils, p.TEXT_OUTPUT, text),
                string_tensor(pb_utils, p.FINISH_REASON, progress.finish_reason),
                pb_utils.Tensor(p.NUM_INPUT_TOKENS, np.array([progress.input_tokens], dtype=np.uint32)),
                pb_utils.Tensor(p.NUM_OUTPUT_TOKENS, np.array([progress.output_tokens], dtype=np.uint32)),
                string_tensor(pb_utils, p.RPS_CLASS, info.request_class.label),
                pb_utils.Tensor(p.EST_PREFILL_S, np.array([info.est_prefill_s], dtype=np.float32)),
            ]
        )
