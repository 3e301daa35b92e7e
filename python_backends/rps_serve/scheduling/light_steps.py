"""Light steps: while sand is present, the step it runs in carries few tokens of heavier prefills.

Once the class order has emptied sand's queue, a sand request's first token waits for the step it
lands in, and that step lasts as long as the prefill tokens beside it: a heavy prefill's chunk fills
the token budget (8,192 tokens on an H100) and makes a step several times longer than sand's own
prefill. While a sand request waits at the head of the queue or is part-way through its prefill,
a light step therefore
- lets heavier classes put at most `budget` prefill tokens into it: every prefill chunk of the step
  is capped there (vLLM's `long_prefill_token_threshold`, one number for every request of a step);
  sand is never split by it (a sand prefill larger than the budget raises the cap, and the heavier
  prefills sit that step out: `light_step`);
- lets at most one heavier request prefill in it: the first heavier prefill in running order goes
  on, any other sits the step out (keeping its KV blocks), and a waiting heavier request starts only
  while none prefills;
- where none prefills, lets the best waiting heavier request start first, ahead of the sand queued
  before it, once a light step has passed it over (`Leads`) and where the KV cache holds its prompt
  beside the sand's (`may_lead`): its chunk is the budget, and the sand takes the rest of the step.
  Sand queued after sand would otherwise fill every step before a heavier request's turn came, and
  under a stream of sand the heavier classes' share would hold only for prefills already started.
A heavier request with media may start in a light step where no heavier request prefills, its vision
encoder's time riding in that step: barred from light steps altogether, videos waited for steps with
no sand at all, 1.5x as long on average in the simulator, and the 72B's normalized latency rose
10-14% on cost-vs-modality (docs/decisions.md). The limit lifts in the first step with no sand.

The budget is the floor that keeps heavier classes served while sand streams in: they keep at least
`budget` tokens of every step (but those holding a sand prefill larger than it), started or waiting,
so a heavy prompt of P tokens needs at most ceil(P / budget) such steps of prefill whatever the sand
load (`prefill_steps_bound`), and the best waiting heavier request starts by the second light step
with no heavier prefill. It is derived from the served model's measured costs, not a constant
(`light_step_budget`): a step-time target of `LIGHT_STEP_EDGES` times the longest sand prefill, as
tokens (the prompt length at which the cost model stops calling a text sand, `sand_edge_tokens`),
and never less than `LIGHT_STEP_FLOOR` of the step's token budget. Both engines (the vLLM plug-in
and the simulator) take these decisions from this module.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Generic, NamedTuple, TypeVar

from rps_serve.cost import features as cols
from rps_serve.cost.model import CostModel
from rps_serve.requests import Modality, RequestFeatures
from rps_serve.scheduling.admission import kv_blocks

R = TypeVar("R")

SAND = 0
# The heavier classes' prefill in a light step costs at most this many longest sand prefills: 1 (the
# sand edge alone, or a quarter of the step) took sand P90 to 0.69-0.76x stock priority's in the
# simulator but videos' mean TTFT to 1.0-1.4x; 2 (half the step on an H100) kept sand at 0.78-0.83x
# with videos within 1.13x; 1.5 took sand a little lower but texts on cost-vs-modality higher
# (docs/decisions.md).
LIGHT_STEP_EDGES = 2.0
# The share of the step's token budget heavier classes keep in a light step, at least.
LIGHT_STEP_FLOOR = 0.25
# The longest text the search for the sand edge considers (vLLM's longest context of the served models).
_LONGEST_TEXT = 1 << 17


def sand_edge_tokens(model: CostModel) -> int:
    """The longest text prompt (in tokens) `model` classes as sand; 0 if none is.

    Prefill cost grows with the prompt, so the classes of texts are monotone in their length; the
    edge is found by bisection, one cost-model call per halving."""

    def is_sand(tokens: int) -> bool:
        text = RequestFeatures(Modality.TEXT, tokens, 0)
        return bool(model.levels(cols.feature_matrix([text]))[0] == SAND)

    if not is_sand(1):
        return 0
    if is_sand(_LONGEST_TEXT):
        return _LONGEST_TEXT
    low, high = 1, _LONGEST_TEXT  # is_sand(low) and not is_sand(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if is_sand(middle) else (low, middle)
    return low


def light_step_budget(
    edge_tokens: int, token_budget: int, edges: float = LIGHT_STEP_EDGES, floor: float = LIGHT_STEP_FLOOR
) -> int:
    """The prefill tokens heavier classes may put into a light step: `edges` times the sand edge
    (`sand_edge_tokens`) of the served model, at least `floor` of the step's `token_budget` and at
    most all of it."""
    return min(token_budget, max(math.ceil(edges * edge_tokens), math.ceil(floor * token_budget), 1))


def prefill_steps_bound(prompt_tokens: int, budget: int) -> int:
    """Steps of prefill a heavier request of `prompt_tokens` needs at most once it runs, sand or no
    sand: it keeps `budget` tokens of every step it prefills in."""
    return -(-prompt_tokens // budget)


def wait_stretch(token_budget: int, budget: int) -> float:
    """How much longer, at most, a heavier class waits with light steps of `budget` tokens than
    without, on `token_budget`-token steps: in the worst case every step is a light one and heavier
    prefills move at `budget` of the `token_budget` tokens a step could give them (a light step is no
    longer than a full one). 1 without light steps (`budget` 0)."""
    return token_budget / budget if budget else 1.0


class LightStep(NamedTuple, Generic[R]):
    """One light step's decision: the prefill chunk limit of every request in it, the running heavier
    prefills (in running order) that sit it out, and whether the best waiting heavier request starts
    first, ahead of the sand queued before it."""

    limit: int
    aside: list[R]
    heavier_first: bool = False


def light_step(budget: int, sand_tokens: Iterable[int], heavier_prefills: Sequence[R]) -> LightStep[R]:
    """A light step's prefill chunk limit, and which of the running heavier prefills (in running
    order) sit it out, given the tokens still to compute of every sand prefill present.

    The budget, and every heavier prefill but the first sits out. A sand prefill larger than the
    budget (a sand image can be: the budget is at least the longest sand text) raises the limit to
    its size, and then every heavier prefill sits out: vLLM schedules running requests before
    waiting ones, so a heavier chunk of that size would leave too little of the step for the sand."""
    largest = max(sand_tokens, default=0)
    if largest > budget:
        return LightStep(largest, list(heavier_prefills))
    return LightStep(budget, list(heavier_prefills[1:]))


def plan_light_step(
    budget: int, head: tuple[int, int] | None, prefilling: Sequence[tuple[R, int, int]]
) -> LightStep[R] | None:
    """The next step's light-step decision, as both engines take it: None where it is no light step
    (no sand waits at the head of the queue, `head`, and none is prefilling), else its chunk limit,
    the running heavier prefills that sit it out (`light_step`), and whether the best waiting heavier
    request (if one waits) starts first: where sand heads the queue, no heavier request prefills and
    the limit is the budget. `head`: the best waiting request's (level, tokens to compute), None with
    nothing waiting; `prefilling`: (request, level, tokens still to compute) of each running request
    part-way through its prompt, in running order."""
    sand = [left for _, level, left in prefilling if level == SAND]
    sand_heads = False
    if head is not None and head[0] == SAND:
        sand.append(head[1])
        sand_heads = True
    if not sand:
        return None
    heavier = [request for request, level, _ in prefilling if level != SAND]
    limit, aside, _ = light_step(budget, sand, heavier)
    return LightStep(limit, aside, sand_heads and not heavier and limit == budget)


def may_lead(lead_tokens: int, sand_tokens: int, free_blocks: int, block_size: int, running: int) -> bool:
    """Whether a heavier request with `lead_tokens` to compute may lead the queue ahead of sand with
    `sand_tokens`: where the KV cache's `free_blocks` hold both prompts whole beside a block for each
    `running` request's next token. A lead that held blocks the sand then waited for made the sand's
    longest wait under KV pressure up to twice stock priority's in the simulator; the waiting sand
    keeps first claim on the cache."""
    blocks = kv_blocks(lead_tokens, block_size) + kv_blocks(sand_tokens, block_size)
    return blocks + running <= free_blocks


def may_start(level: int, heavier_prefilling: bool) -> bool:
    """Whether a waiting request may start in a light step: sand always; a heavier one only while no
    heavier request prefills in the step."""
    return level == SAND or not heavier_prefilling


class Leads(Generic[R]):
    """Which waiting heavier request leads a light step's queue, ahead of the sand: the best waiting
    heavier request, once the light step before it, which could have let it lead
    (`LightStep.heavier_first`), passed it over, so that it is still waiting.

    Leading at once, in every such step, cost sand a little at 0.9x of capacity and a tenth of its
    P90 in the 72B's overload in the simulator; one step late, as here, it cost nothing measurable,
    since a heavier request that the sand leaves room for starts without leading (docs/decisions.md,
    "Light steps"). Both engines keep one and ask it at every step they plan (`choose`)."""

    def __init__(self) -> None:
        self._passed_over: R | None = None

    def choose(self, light: LightStep[Any] | None, best_heavier: Callable[[], R | None]) -> R | None:
        """The request that leads the step planned as `light` (None: not a light step), given the
        best waiting heavier request (`best_heavier`, asked only in a step that could let it lead);
        None where none does."""
        if light is None or not light.heavier_first:
            self._passed_over = None
            return None
        candidate = best_heavier()
        lead = candidate if candidate is not None and candidate == self._passed_over else None
        self._passed_over = candidate
        return lead
