"""Prefill cap: while sand waits for its first token, heavier classes get a bounded share of each step.

Why: a step lasts in proportion to the tokens it computes (~28 µs per token for a 7B model on one
H100), and a request's first token comes only at the end of the step that completes its prefill.
With vLLM's 8,192-token budget, a step that carries a long image or video chunk lasts ~0.25 s, so a
short text admitted beside it waits that long however early the queue lets it in. While any sand
request is pending (waiting, or admitted but before its first token), the prefill tokens of heavier
classes in one step are capped; their decodes are not. Heavier prefills still advance every step,
and the cap lifts as soon as no sand is pending. FCFS has no cap, as stock vLLM.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rps_serve.scheduling.parameters import Policy

DEFAULT_HEAVY_TOKENS = 2048


@dataclass(frozen=True)
class PrefillCap:
    """At most `heavy_tokens` prefill tokens of classes above sand per step while sand is pending."""

    heavy_tokens: int = DEFAULT_HEAVY_TOKENS

    def __post_init__(self) -> None:
        if self.heavy_tokens < 1:
            raise ValueError(f"heavy_tokens must be at least 1, got {self.heavy_tokens}")

    @classmethod
    def for_policy(cls, policy: Policy, heavy_tokens: int = DEFAULT_HEAVY_TOKENS) -> PrefillCap | None:
        """The cap of a class-aware policy; None for fcfs."""
        return None if policy is Policy.FCFS else cls(heavy_tokens)

    def heavy_budget(self, sand_pending: bool) -> int | None:
        """Prefill tokens the heavier classes may take this step; None when uncapped."""
        return self.heavy_tokens if sand_pending else None


def allocate_in_order(
    pending: np.ndarray, token_budget: int, capped: np.ndarray, capped_budget: int | None
) -> np.ndarray:
    """Tokens for each request, in order, as a greedy loop would grant them.

    Request i gets min(pending[i], what is left of `token_budget`, and, where `capped[i]`, what is
    left of `capped_budget`); every grant draws on the budgets it is limited by.
    """
    pending = np.asarray(pending, dtype=np.int64)
    wanted = pending
    if capped_budget is not None:
        heavy = np.where(capped, pending, 0)
        granted = np.clip(capped_budget - (np.cumsum(heavy) - heavy), 0, heavy)
        wanted = np.where(capped, granted, pending)
    # Once the token budget binds, it is spent: nothing after that request gets tokens, so the capped
    # grants computed above (which assumed every earlier capped request got its share) stay exact.
    return np.clip(token_budget - (np.cumsum(wanted) - wanted), 0, wanted)
