"""How a request's class is decided: a cost model estimates its admission cost and classes it; without
one, `ModalityClasses` classes it by its modality. The Triton models, the plug-in and the simulator
all hold a `CostModel`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from rps_serve.cost import features as cols
from rps_serve.requests import CostEstimate, Modality, RequestFeatures


@dataclass(frozen=True)
class Assessment:
    """The cost model's verdict on one request."""

    estimate: CostEstimate
    level: int


class Assesses(Protocol):
    """Anything that says how it would class requests: a cost model here, or a running server
    (`client.ServedClasses`)."""

    def assess(self, requests: Sequence[RequestFeatures]) -> list[Assessment]: ...


class CostModel:
    """The Impact Estimator and the Request Classifier as one: `estimate` gives every request's cost and
    class level. A model in two steps implements `cost` and `classify`; where it runs is the subclass
    (ONNX files, a fit in memory, a fit refitted while it serves)."""

    num_classes: int
    refits = False  # refitted while it serves (`cost.online`): its class is newer than the ONNX files'

    def __str__(self) -> str:
        return type(self).__name__

    def cost(self, feature_matrix: np.ndarray) -> np.ndarray:
        """[n, 3] features -> [n, 3] cost (float32)."""
        raise NotImplementedError

    def classify(self, cost: np.ndarray) -> np.ndarray:
        """[n, 3] cost -> [n] class levels (int64)."""
        raise NotImplementedError

    def estimate(self, feature_matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """[n, 3] features -> ([n, 3] cost, [n] class levels)."""
        cost = self.cost(feature_matrix)
        return cost, self.classify(cost)

    def within_edges(self, level: int, prompt_tokens: int) -> int:
        """`level`, moved to where the engine this model classes for needs a request of `prompt_tokens`
        (`scheduling.class_edges`); here, where no engine is named, as it is."""
        return level

    def levels(self, feature_matrix: np.ndarray) -> np.ndarray:
        """The class level (int64) of every row of an [n, 3] feature matrix."""
        return self.estimate(feature_matrix)[1]

    def assess(self, requests: Sequence[RequestFeatures]) -> list[Assessment]:
        cost, levels = self.estimate(cols.feature_matrix(requests))
        return [
            Assessment(CostEstimate(float(row[cols.PREFILL_S]), int(row[cols.MEMORY_TOKENS])), int(level))
            for row, level in zip(cost, levels, strict=True)
        ]


class ModalityClasses(CostModel):
    """The rule for a request without a cost model (and the ablation's classes): text is sand, image
    pebbles, video rocks; the prefill seconds unknown (NaN), the KV tokens the prompt's."""

    num_classes = len(Modality)

    def estimate(self, feature_matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        features = np.asarray(feature_matrix, dtype=np.float32)
        cost = np.empty((len(features), cols.NUM_COST_COLUMNS), dtype=np.float32)
        cost[:, cols.PREFILL_S] = np.nan
        cost[:, cols.MEMORY_TOKENS] = features[:, cols.PROMPT_TOKENS]
        cost[:, cols.COST_MODALITY_TOKENS] = features[:, cols.MODALITY_TOKENS]
        return cost, features[:, cols.MODALITY].astype(np.int64)  # a modality's index is its level


def agreement(a: Assesses, b: Assesses, requests: Sequence[RequestFeatures]) -> float:
    """Share of `requests` that `a` and `b` put in the same class."""
    levels = [np.array([v.level for v in model.assess(requests)]) for model in (a, b)]
    return float(np.mean(levels[0] == levels[1]))


def agreement_by_modality(a: Assesses, b: Assesses, requests: Sequence[RequestFeatures]) -> dict[str, float]:
    """`agreement` over the requests of each modality, by its name."""
    return {m.value: agreement(a, b, [r for r in requests if r.modality is m]) for m in Modality}
