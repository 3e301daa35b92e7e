"""A way to schedule, as one value both engines receive: the simulator (`sim.simulator`) and the vLLM
plug-in (`vllm_plugin.scheduler`) ask it for their priority regulator, their rule for evicting a
running request for a waiting one, and their decode holds, so that neither re-reads a policy's name.

The policy's row of `parameters.POLICY_TABLE` gives its order, eviction margin and KV reserve; the
fields beside it are the plug-in's settings that change decisions (model.json's `rps`, through
`vllm_plugin.config.RPSConfig.variant`); the simulator's ablations sit beside it in its own
`PolicyVariant`. Trying a policy is adding a row to the table, or a value of this to the simulator's
`POLICY_VARIANTS`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from rps_serve.cost.model import CostModel
from rps_serve.scheduling.holding import DecodeHolds
from rps_serve.scheduling.light_steps import light_step_budget, sand_edge_tokens
from rps_serve.scheduling.parameters import ClassParameters, Policy
from rps_serve.scheduling.preemption import MAX_PREEMPTIONS, PreemptionRule
from rps_serve.scheduling.regulator import PriorityRegulator

R = TypeVar("R")


@dataclass(frozen=True)
class SchedulingVariant:
    """`policy` and how it runs. `max_preemptions`: the evictions one request may suffer;
    `chunk_cap_tokens`: the prefill chunk cap while a lighter class waits behind a heavier prefill, 0
    for none; `decode_hold_s`: the decode hold (`scheduling.holding`) in the paper's seconds on the
    aging clock, 0 for none; `decode_hold_media_only`: it holds only requests with an image or a video;
    `cost_order`: inside its class a request ranks as if it had arrived `cost_order` times its
    estimated prefill later (`rank_time`), 0 for arrival order; `light_steps`: while sand is present,
    heavier classes put at most `light_step_tokens` prefill tokens into a step
    (`scheduling.light_steps`), 0 for the budget the engine's cost model gives (`light_budget`)."""

    policy: Policy
    max_preemptions: int = MAX_PREEMPTIONS
    chunk_cap_tokens: int = 0
    decode_hold_s: float = 0.0
    decode_hold_media_only: bool = False
    cost_order: float = 0.0
    light_steps: bool = False
    light_step_tokens: int = 0

    def regulator(self, ladder: Sequence[ClassParameters]) -> PriorityRegulator:
        return PriorityRegulator(self.policy, ladder)

    def preemption_rule(self) -> PreemptionRule | None:
        """The rule for evicting a running request for a waiting one; None where none is evicted."""
        return PreemptionRule.for_policy(self.policy, self.max_preemptions)

    def decode_holds(self, time_scale: float, num_levels: int, weak: bool = True) -> DecodeHolds[R] | None:
        """The decode holds on an aging clock `time_scale` times the paper's, under a policy that
        orders by class; None where there are none. `weak`: as `DecodeHolds` takes it."""
        if not self.decode_hold_s or not self.policy.row.by_class:
            return None
        return DecodeHolds(self.decode_hold_s * time_scale, num_levels, weak=weak)

    def light_budget(self, token_budget: int, model: CostModel | None = None) -> int:
        """The heavier classes' prefill tokens in a light step on an engine of `token_budget`-token
        steps: `light_step_tokens`, or where that is 0 the budget `model`'s sand edge gives (the cost
        model that classes the engine's requests: `light_steps.light_step_budget`); 0 where light
        steps are off (under stock vLLM or an order without classes too: nothing tells sand there)."""
        row = self.policy.row
        if not self.light_steps or row.stock or not row.by_class:
            return 0
        if self.light_step_tokens:
            return min(self.light_step_tokens, token_budget)
        if model is None:
            raise ValueError("light steps need their budget: light_step_tokens or the cost model")
        return light_step_budget(sand_edge_tokens(model), token_budget)

    def rank_time(self, arrival: float, prefill_s: float) -> float:
        """The time a request ranks from in its class queue: its arrival, shifted by `cost_order`
        times its estimated prefill (in the engine's seconds) where the plug-in orders by class
        (stock vLLM cannot) and the estimate is known. Shorter prefills then go first inside a
        class, and a longer one is passed only by requests arriving within `cost_order` times the
        difference: a bound, not a clock."""
        row = self.policy.row
        if not self.cost_order or row.stock or not row.by_class or not math.isfinite(prefill_s):
            return arrival
        return arrival + self.cost_order * prefill_s
