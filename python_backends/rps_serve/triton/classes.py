"""The class of a request as the vllm_model knows it: from the ensemble's tensors, or estimated.

Who may claim a class: `vllm_model` is reachable directly, not only through `rps_ensemble`, so a caller
could send `rps_class_level` 0 with a video and jump every queue as sand. By default (`verify`) the
class a request carries is checked against the one `vllm_model` computes from the request's own
features with the same ONNX models: a heavier claim stands (a caller may volunteer to wait), a lighter
one is overruled. Through the ensemble both come from the same features (`rps_features`, which
`vllm_model` checks against the request's media instead of counting its prompt again,
`Preprocessor.inspect`) and agree. `trust` takes the class as given, for deployments whose clients
cannot reach the composing models or whose classifier `vllm_model` cannot reproduce. The engine's own
entry (`extra_args["rps"]`) is never the caller's.
With the online cost model (`cost.online`), `vllm_model`'s fit is newer than the ensemble's ONNX models,
so under `verify` it decides every request's class, and hands it to the engine.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from rps_serve.cost import features as cols
from rps_serve.cost.classifier import naive_level
from rps_serve.cost.runtime import Assessment, CostModelRunner
from rps_serve.requests import CostEstimate, Modality, RequestClass, RequestFeatures
from rps_serve.triton import protocol as p
from rps_serve.vllm_plugin.config import EXTRA_ARGS_KEY

logger = logging.getLogger(__name__)


class ClassSource(enum.Enum):
    """model.json's `class_source`: what `vllm_model` does with the class a request carries."""

    VERIFY = "verify"
    TRUST = "trust"


@dataclass(frozen=True)
class ClassInfo:
    level: int
    num_classes: int
    est_prefill_s: float
    supplied: bool  # handed to the engine in extra_args (else the engine classifies the request itself)

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

    def __init__(
        self,
        cost_model: CostModelRunner | None,
        source: ClassSource = ClassSource.VERIFY,
        online: bool = False,
    ) -> None:
        self._model = cost_model
        self.source = source
        self.online = online  # `cost_model` is refitted while it serves: its class is the newest

    def decide(self, supplied: ClassInfo | None, features: RequestFeatures) -> ClassInfo:
        """The class the engine gets: `supplied` per `source` (see the module docstring), else estimated."""
        if supplied is not None and self.source is ClassSource.TRUST:
            return supplied
        estimated = self.estimate(features)
        if supplied is None or self.online:
            return estimated
        if supplied.num_classes == estimated.num_classes and supplied.level >= estimated.level:
            return supplied
        logger.info(
            "overruled a supplied class %d of %d for a request this model classes %d of %d",
            supplied.level,
            supplied.num_classes,
            estimated.level,
            estimated.num_classes,
        )
        # Supplied, so that the engine gets it rather than re-estimating on its own token count.
        return replace(estimated, supplied=True)

    @property
    def num_classes(self) -> int:
        return len(Modality) if self._model is None else self._model.num_classes

    def assess(self, requests: Sequence[RequestFeatures]) -> list[Assessment]:
        """How this model would class `requests` now (what `rps-serve classify --url` asks). Without a
        cost model the class is the modality's, the prefill seconds unknown and the KV tokens the
        prompt's."""
        if self._model is None:
            return [
                Assessment(CostEstimate(math.nan, r.prompt_tokens), naive_level(r.modality)) for r in requests
            ]
        return self._model.assess(requests)

    def estimate(self, features: RequestFeatures) -> ClassInfo:
        verdict = self.assess([features])[0]
        # The engine classes with the repository's fit: an online fit's class is handed to it.
        return ClassInfo(verdict.level, self.num_classes, verdict.estimate.prefill_s, supplied=self.online)
