"""Class edges: what a class means to the engine that serves it, whatever k-means draws.

k-means groups the profiled requests by cost; where its boundaries fall depends on what was
profiled. The scheduler's rules, though, assume something of each class on the engine it runs:
- **sand fits in one light step**: its whole prefill in one step beside the heavier classes' floor
  (`light_steps.LIGHT_STEP_FLOOR` of the step's token budget), so it is never split, and a light
  step holding the largest sand still gives heavier prefills their share;
- **a rock needs more than one full step**: a prompt longer than the step's token budget is
  prefilled in chunks across steps, holding its KV blocks all the while; such starts are what the
  KV reserve (`parameters.Policy.kv_reserve`) holds back, and what a preemption would recompute.
`EngineClasses` applies both to a cost model's classes on an engine of a given step: sand longer
than the room is pebbles (or the next class), and anything longer than a step is a rock. On the
H100 deployments the fitted classes already hold both (no request of the policy table's workloads
changes class); on the CPU stack, whose 2,048-token steps are about as long as the longest sand
text k-means draws (2,029 tokens), they make the long documents and the videos rocks and the longest
texts pebbles, so every class exists there (docs/decisions.md, "Class edges").
The rule for requests without a cost model (`ModalityClasses`, classes by modality) is left as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from rps_serve.cost import features as cols
from rps_serve.cost.model import CostModel, ModalityClasses
from rps_serve.scheduling.light_steps import LIGHT_STEP_FLOOR, SAND


@dataclass(frozen=True)
class ClassEdges:
    """Prompt-token edges of an engine of `token_budget`-token steps: sand has at most
    `sand_tokens`, and every prompt over `rock_tokens` is a rock."""

    sand_tokens: int
    rock_tokens: int

    @classmethod
    def of_step(cls, token_budget: int, floor: float = LIGHT_STEP_FLOOR) -> ClassEdges:
        """The edges on steps of `token_budget` tokens, heavier classes keeping `floor` of a step."""
        return cls(sand_tokens=math.floor((1.0 - floor) * token_budget), rock_tokens=token_budget)

    def apply(self, levels: np.ndarray, prompt_tokens: np.ndarray, num_classes: int) -> np.ndarray:
        """`levels` (int64) of requests of `prompt_tokens`, each moved to the class its length needs."""
        rock = num_classes - 1
        edged = np.where((levels == SAND) & (prompt_tokens > self.sand_tokens), SAND + 1, levels)
        return np.where(prompt_tokens > self.rock_tokens, rock, edged).astype(np.int64)


class EngineClasses(CostModel):
    """`model`'s cost estimates, and its classes moved to the engine's `edges`."""

    def __init__(self, model: CostModel, edges: ClassEdges) -> None:
        self.model, self.edges = model, edges
        self.num_classes = model.num_classes

    def __str__(self) -> str:
        sand, rocks = self.edges.sand_tokens, self.edges.rock_tokens
        return f"{self.model} within class edges (sand <= {sand}, rocks > {rocks} tokens)"

    @property
    def refits(self) -> bool:  # type: ignore[override]  # the wrapped model's, which may change
        return self.model.refits

    def within_edges(self, level: int, prompt_tokens: int) -> int:
        return int(self.edges.apply(np.array([level]), np.array([prompt_tokens]), self.num_classes)[0])

    def estimate(self, feature_matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        cost, levels = self.model.estimate(feature_matrix)
        tokens = np.asarray(feature_matrix)[:, cols.PROMPT_TOKENS]
        return cost, self.edges.apply(levels, tokens, self.num_classes)


def engine_classes(model: CostModel, token_budget: int) -> CostModel:
    """`model` classing as an engine of `token_budget`-token steps needs (`EngineClasses`); the
    modality rule as it is."""
    if isinstance(model, ModalityClasses | EngineClasses):
        return model
    return EngineClasses(model, ClassEdges.of_step(token_budget))
