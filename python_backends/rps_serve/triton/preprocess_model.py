"""Triton model `preprocess` (Python backend): parse, check, count tokens from the media's metadata, emit
the cost features; the media pass on undecoded."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from rps_serve.cost.features import feature_matrix
from rps_serve.triton import protocol as p
from rps_serve.triton.backend import error_response, requested_outputs, tensor_getter
from rps_serve.triton.preprocess import Preprocessor
from rps_serve.triton.prompt_tokens import PromptTokenCounter
from rps_serve.triton.server_release import log_triton_release
from rps_serve.triton.settings import load_settings
from rps_serve.triton.triton_log import log_to_triton

logger = logging.getLogger(__name__)


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        log_to_triton(pb_utils)
        log_triton_release()  # once per server: the repository loads one preprocess instance
        settings = load_settings(Path(args["model_repository"]).parent)
        counter = PromptTokenCounter(settings.model)
        self.preprocessor = Preprocessor(counter, settings.media)
        logger.info("preprocess: model %s, %s", settings.model, self.preprocessor.limits)
        processor = counter.processor
        logger.debug(
            "preprocess: placeholders %r (image), %r (video)", processor.image_token, processor.video_token
        )

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._respond(request) for request in requests]

    def _respond(self, request: Any) -> Any:
        get = tensor_getter(pb_utils, request)
        try:
            parsed = p.parse_request(get, request.parameters())
            features = self.preprocessor.inspect(parsed)
        except p.BadRequest as error:
            return error_response(pb_utils, request.request_id(), str(error), code="INVALID_ARG")
        except Exception as error:  # a failure on one request must not take the model down
            logger.exception("preprocess failed on request %r", request.request_id())
            return error_response(pb_utils, request.request_id(), f"preprocess failed: {error}")
        outputs: dict[str, Callable[[], np.ndarray | str]] = {
            p.PROMPT: lambda: parsed.prompt,
            p.FEATURES: lambda: feature_matrix([features]),
            p.STREAM: lambda: np.array([parsed.stream]),
            # Those the client sent as the request's parameters too: vllm_model gets them as a tensor.
            p.SAMPLING_PARAMETERS: lambda: json.dumps(parsed.sampling_parameters),
            p.EXCLUDE_INPUT_IN_OUTPUT: lambda: np.array([parsed.exclude_input_in_output]),
        }
        # Media go on as the client sent them: vllm_model decodes them once, in class order.
        if (images := get(p.IMAGE)) is not None and images.size:
            outputs[p.IMAGE] = lambda: images
        if (video := get(p.VIDEO)) is not None and video.size:
            outputs[p.VIDEO] = lambda: video
        tensors = requested_outputs(pb_utils, request.requested_output_names(), outputs)
        return pb_utils.InferenceResponse(output_tensors=tensors)
