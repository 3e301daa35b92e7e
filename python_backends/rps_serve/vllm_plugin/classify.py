"""The class of a vLLM request: as supplied by the caller, or estimated from its tokens and media."""

from __future__ import annotations

import logging
import math
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


def extra_args_class(request: Any, num_levels: int) -> tuple[int, float] | None:
    """The class level and estimated prefill seconds in `extra_args["rps"]`, if the caller supplied a
    level that fits this engine (the estimate NaN where it supplied none)."""
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
    estimate = supplied.get("est_prefill_s")
    return level, float(estimate) if isinstance(estimate, int | float) else math.nan


def engine_cost_model(config: RPSConfig) -> CostModel:
    """The cost model the engine classes with: the repository's ONNX files, or (without them, or with
    `naive` set) the modality's classes."""
    return cost_model_at(Path(config.cost_model) if config.cost_model and not config.naive else None)


def engine_class(model: CostModel, request: Any, needs_prefill: bool = True) -> tuple[int, float]:
    """A vLLM request's class level and estimated prefill seconds: the caller's, if it supplied a
    level that fits (the ensemble supplies both), else `model`'s (NaN where it estimates no prefill).
    Without `needs_prefill` a supplied level is taken without asking `model` for a missing estimate."""
    supplied = extra_args_class(request, model.num_classes)
    if supplied is not None and (not needs_prefill or not math.isnan(supplied[1])):
        return supplied
    cost, levels = model.estimate(cols.feature_matrix([engine_request_features(request)]))
    level = int(levels[0]) if supplied is None else supplied[0]
    return level, float(cost[0, cols.PREFILL_S])
