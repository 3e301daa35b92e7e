"""Triton model `preprocess` (Python backend): parse, decode, count tokens, emit the cost features."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np
import triton_python_backend_utils as pb_utils

from rps_serve.triton import protocol as p
from rps_serve.triton.backend import configure_logging, error_response, string_tensor, tensor_getter
from rps_serve.triton.preprocess import Preprocessor
from rps_serve.triton.prompt_tokens import PromptTokenCounter
from rps_serve.triton.settings import load_settings

logger = logging.getLogger(__name__)


class TritonPythonModel:
    def initialize(self, args: dict[str, Any]) -> None:
        configure_logging()
        settings = load_settings(Path(args["model_repository"]).parent)
        self.preprocessor = Preprocessor(PromptTokenCounter(settings.model), settings.media)
        logger.info("preprocess: model %s, %s", settings.model, self.preprocessor.limits)

    def execute(self, requests: list[Any]) -> list[Any]:
        return [self._respond(request) for request in requests]

    def _respond(self, request: Any) -> Any:
        get = tensor_getter(pb_utils, request)
        try:
            parsed = p.parse_request(get)
            prepared = self.preprocessor.prepare(parsed)
        except p.BadRequest as error:
            return error_response(pb_utils, str(error), code="INVALID_ARG")
        except Exception as error:  # a failure on one request must not take the model down
            logger.exception("preprocess failed")
            return error_response(pb_utils, f"preprocess failed: {error}")
        outputs = [
            string_tensor(pb_utils, p.PROMPT, parsed.prompt),
            pb_utils.Tensor(p.FEATURES, prepared.feature_matrix),
            pb_utils.Tensor(p.STREAM, np.array([parsed.stream])),
            string_tensor(pb_utils, p.SAMPLING_PARAMETERS, json.dumps(parsed.sampling_parameters)),
            pb_utils.Tensor(p.EXCLUDE_INPUT_IN_OUTPUT, np.array([parsed.exclude_input_in_output])),
        ]
        images = get(p.IMAGE)
        if images is not None and images.size:
            outputs.append(pb_utils.Tensor(p.IMAGE, images))
        if prepared.video_frames is not None:
            outputs.append(pb_utils.Tensor(p.VIDEO_FRAMES, np.ascontiguousarray(prepared.video_frames)))
        return pb_utils.InferenceResponse(output_tensors=outputs)
