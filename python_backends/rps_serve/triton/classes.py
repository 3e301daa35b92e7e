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
Whoever classes a request, its class then meets the served engine's class edges (`scheduling.class_edges`:
sand fits in one light step, a prompt longer than a step is a rock), which the ensemble's ONNX
models cannot know.
With the online cost model (`cost.online`), `vllm_model`'s fit is newer than the ensemble's ONNX models,
so under `verify` it decides every request's class, and hands it to the engine.
"""

from __future__ import annotations

import enum
import logging
from dataclasses import dataclass, replace
from typing import Any

from rps_serve.cost import features as cols
from rps_serve.cost.model import CostModel
from rps_serve.requests import RequestClass, RequestFeatures
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


def decide_class(
    model: CostModel, source: ClassSource, supplied: ClassInfo | None, features: RequestFeatures
) -> ClassInfo:
    """The class the engine gets: `supplied` per `source` (see the module docstring), else `model`'s.
    The engine's class edges (`scheduling.class_edges`) hold for every class, a caller's too."""
    if supplied is not None and supplied.num_classes == model.num_classes:
        supplied = replace(supplied, level=model.within_edges(supplied.level, features.prompt_tokens))
    if supplied is not None and source is ClassSource.TRUST:
        return supplied
    estimated = estimated_class(model, features)
    if supplied is None or model.refits:
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


def estimated_class(model: CostModel, features: RequestFeatures) -> ClassInfo:
    """`model`'s class for a request counted here. The engine classes a request it is not handed a class
    for with the repository's ONNX files on vLLM's token count (the same count for the models served
    here), so only a refitted model's class is handed to it."""
    verdict = model.assess([features])[0]
    return ClassInfo(verdict.level, model.num_classes, verdict.estimate.prefill_s, supplied=model.refits)
