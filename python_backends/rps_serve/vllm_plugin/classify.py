"""The class of a vLLM request: as supplied by the caller, or estimated from its tokens and media."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np

from rps_serve.cost.classifier import naive_level
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY, RPSConfig

logger = logging.getLogger(__name__)

NAIVE_LEVELS = len(Modality)


def request_features(request: Any) -> RequestFeatures:
    """Features of a vLLM `Request`: the heaviest media type it carries, prompt and placeholder tokens."""
    modalities = [feature.modality for feature in request.mm_features]
    modality = Modality.heaviest(modalities.count("image"), modalities.count("video"))
    placeholders = sum(feature.mm_position.length for feature in request.mm_features)
    return RequestFeatures(modality, request.num_prompt_tokens, min(placeholders, request.num_prompt_tokens))


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


class ClassLabeler:
    """Class levels from request features: the ONNX cost model when given, otherwise the modality."""

    def __init__(self, cost_model: Path | None) -> None:
        self._model = OnnxCostModel.from_repository(cost_model) if cost_model else None
        self.num_levels = self._model.num_classes if self._model else NAIVE_LEVELS
        self.kind = "ONNX cost model" if self._model else "modality (naive)"

    def levels(self, modality: np.ndarray, prompt_tokens: np.ndarray, visual: np.ndarray) -> np.ndarray:
        """Levels of requests given as parallel arrays: `Modality.index`, prompt and placeholder tokens."""
        if self._model is None:
            return np.array([naive_level(Modality.from_index(int(m))) for m in modality], dtype=np.int64)
        features = np.column_stack([modality, prompt_tokens, visual]).astype(np.float32)
        return self._model.classify(self._model.cost(features))


class EngineClassifier:
    """Maps a vLLM request to its class level; the caller's class wins over the engine's estimate."""

    def __init__(self, config: RPSConfig) -> None:
        cost_model = Path(config.cost_model) if config.cost_model and not config.naive else None
        self._labeler = ClassLabeler(cost_model)
        self.num_levels = self._labeler.num_levels
        self.kind = self._labeler.kind

    def level(self, request: Any) -> int:
        supplied = supplied_level(request, self.num_levels)
        if supplied is not None:
            return supplied
        features = request_features(request)
        levels = self._labeler.levels(
            np.array([features.modality.index]),
            np.array([features.prompt_tokens]),
            np.array([features.modality_tokens]),
        )
        return int(levels[0])
