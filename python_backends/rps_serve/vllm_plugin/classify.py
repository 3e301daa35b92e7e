"""The class of a vLLM request: as supplied by the caller, or estimated from its tokens and media."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from rps_serve.cost import features as cols
from rps_serve.cost.model import CostModel
from rps_serve.cost.runtime import cost_model_at
from rps_serve.requests import RequestFeatures, request_features
from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY, RPSConfig

logger = logging.getLogger(__name__)


def engine_request_features(request: Any) -> RequestFeatures:
    """`request_features` of a vLLM `Request`, from the media vLLM holds for it and the tokens it counted."""
    modalities = [feature.modality for feature in request.mm_features]
    placeholders = sum(feature.mm_position.length for feature in request.mm_features)
    return request_features(
        modalities.count("image"), modalities.count("video"), request.num_prompt_tokens, placeholders
    )


def supplied_level(request: Any, num_levels: int) -> int | None:
    """The class level in `extra_args["rps"]`, if the caller supplied one that fits this engine."""
    extra = (request.sampling_params.extra_args or {}) if request.sampling_params else {}
    supplied = extra.get(EXTRA_ARGS_KEY)
    if not isinstance(supplied, dict) or "class_level" not in supplied:
        return None
    level, classes = supplied["class_level"], supplied.get("num_classes", num_levels)
    if not isinstance(level, int) or classes != num_levels or not 0 <= level < num_levels:
        logger.warning(
            "request %s: ignoring supplied class %r (engine has %d classes)",
            request.request_id,
            supplied,
            num_levels,
        )
        return None
    return level


def engine_cost_model(config: RPSConfig) -> CostModel:
    """The cost model the engine classes with: the repository's ONNX files, or (without them, or with
    `naive` set) the modality's classes."""
    return cost_model_at(Path(config.cost_model) if config.cost_model and not config.naive else None)


def engine_level(model: CostModel, request: Any) -> int:
    """A vLLM request's class level: the caller's, if it supplied one that fits, else `model`'s."""
    supplied = supplied_level(request, model.num_classes)
    if supplied is not None:
        return supplied
    return int(model.levels(cols.feature_matrix([engine_request_features(request)]))[0])
