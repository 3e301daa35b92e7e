"""The class of a request as the vllm_model knows it: from the ensemble's tensors, or estimated."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rps_serve.cost import features as cols
from rps_serve.cost.classifier import naive_level
from rps_serve.cost.runtime import OnnxCostModel
from rps_serve.requests import Modality, RequestClass, RequestFeatures
from rps_serve.triton import protocol as p
from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY


@dataclass(frozen=True)
class ClassInfo:
    level: int
    num_classes: int
    est_prefill_s: float
    supplied: bool  # computed by the ensemble (travels to the engine) rather than estimated here

    @property
    def request_class(self) -> RequestClass:
        return RequestClass.for_level(self.level, self.num_classes)

    def extra_args(self) -> dict[str, Any]:
        """`SamplingParams.extra_args` entry that hands the class to the RPS scheduler."""
        return {
            EXTRA_ARGS_KEY: {
                "class_level": self.level,
                "num_classes": self.num_classes,
                "est_prefill_s": self.est_prefill_s,
            }
        }


def supplied_class(get: p.TensorGetter) -> ClassInfo | None:
    """The class the ensemble computed, if the request carries it."""
    level, distances, cost = get(p.CLASS_LEVEL), get(p.CLASS_DISTANCES), get(p.COST)
    if level is None or level.size == 0:
        return None
    if distances is None or cost is None or distances.ndim != 2 or cost.shape != (1, cols.NUM_COST_COLUMNS):
        shape = f"[1, {cols.NUM_COST_COLUMNS}]"
        raise p.BadRequest(f"'{p.CLASS_LEVEL}' needs '{p.CLASS_DISTANCES}' [1, k] and '{p.COST}' {shape}")
    num_classes = int(distances.shape[1])
    value = int(level.reshape(-1)[0])
    if not 0 <= value < num_classes:
        raise p.BadRequest(f"class level {value} is outside 0..{num_classes - 1}")
    return ClassInfo(value, num_classes, float(cost[0, cols.PREFILL_S]), supplied=True)


class ClassEstimator:
    """For requests sent straight to vllm_model, which the engine classifies itself: the class the same
    ONNX models give for the features counted here, for the outputs and the metrics. (The engine counts
    tokens with vLLM's processor; the two counts agree for the models served here.)"""

    def __init__(self, cost_model: OnnxCostModel | None) -> None:
        self._model = cost_model

    def estimate(self, features: RequestFeatures) -> ClassInfo:
        if self._model is None:
            return ClassInfo(naive_level(features.modality), len(Modality), math.nan, supplied=False)
        verdict = self._model.assess([features])[0]
        return ClassInfo(verdict.level, self._model.num_classes, verdict.estimate.prefill_s, supplied=False)
