"""When a waiting request may evict a running one (recompute preemption), and which one.

Rule: a waiting request W that cannot otherwise be admitted may evict a running request R only if
1. R is of a strictly heavier class level than W;
2. W's score beats R's by more than the policy's margin (R scored as if waiting since its arrival,
   so a rock that has aged is protected);
3. R has been preempted fewer than `max_preemptions` times.
Rule 1 makes eviction flow only from lighter to heavier classes, so two requests can never evict
each other in turn (no ping-pong); the margin stops evictions between near-equal priorities, where
the recompute would cost more than the reordering gains; rule 3 bounds the work any request loses.
The victim is the eligible request with the worst score, latest arrival on ties (as vLLM chooses).
FCFS never preempts for a waiting request, as stock vLLM.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

import numpy as np

from rps_serve.scheduling.parameters import Policy

T = TypeVar("T")


@dataclass(frozen=True)
class Contender:
    """What the rule needs to know of a request, waiting or running."""

    level: int
    score: float
    arrival_time: float
    num_preemptions: int = 0


MAX_PREEMPTIONS = 2  # evictions one request may suffer for waiting ones: bounds the prefill it recomputes


@dataclass(frozen=True)
class PreemptionRule:
    margin: float
    max_preemptions: int = MAX_PREEMPTIONS

    @classmethod
    def for_policy(cls, policy: Policy, max_preemptions: int = MAX_PREEMPTIONS) -> PreemptionRule | None:
        """The rule of `policy` (its `eviction_margin`); None where no waiting request evicts."""
        margin = policy.row.eviction_margin
        return None if margin is None else cls(margin, max_preemptions)

    def may_evict(self, waiting: Contender, running: Contender) -> bool:
        return (
            running.level > waiting.level
            and running.num_preemptions < self.max_preemptions
            and waiting.score + self.margin < running.score
        )

    def choose_victim(self, waiting: Contender, running: Sequence[tuple[T, Contender]]) -> T | None:
        """The running request `waiting` should evict, or None if the rule allows none."""
        eligible = [
            (c.score, c.arrival_time, i) for i, (_, c) in enumerate(running) if self.may_evict(waiting, c)
        ]
        if not eligible:
            return None
        return running[max(eligible)[2]][0]

    def victim_position(
        self,
        waiting: Contender,
        levels: np.ndarray,
        scores: np.ndarray,
        arrivals: np.ndarray,
        preemptions: np.ndarray,
    ) -> int | None:
        """`choose_victim` over running requests given as parallel arrays (a simulator's hundreds of
        running requests in one vectorized pass): the victim's position, or None."""
        allowed = (
            (levels > waiting.level)
            & (preemptions < self.max_preemptions)
            & (waiting.score + self.margin < scores)
        )
        eligible = np.flatnonzero(allowed)
        if eligible.size == 0:
            return None
        # The largest (score, arrival, position), as `choose_victim` takes it.
        return int(eligible[np.lexsort((eligible, arrivals[eligible], scores[eligible]))[-1]])
