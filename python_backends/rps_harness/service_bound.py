"""The longest a request can wait in the engine for its first token, computed from its run's load and
the light steps' floor: the bound the floor buys, checked request by request in both engines.

While sand is present a light step lets heavier prefills take at most `budget` tokens of it, one
heavier request at a time: the one prefilling, or where none is, the best waiting one, ahead of the
sand; the floor is that they keep that share of every step, sand or no sand
(`scheduling.light_steps`). Requests leave each class queue in arrival order, lighter classes first,
and vLLM runs the requests it has started before those waiting. From the moment a request reaches the
engine's queue, the step then in progress serves nobody in particular, and after it:
- a **heavier** request of class k waits for the prefills of every heavier request still without its
  first token that goes before it (a lighter class, or class k arriving earlier), of every heavier
  one already prefilling (a started prefill is not set aside), and of every heavier one of a lighter
  class arriving while it waits. They are served one at a time, each taking the floor's share of
  every step, `min(budget, the step's tokens less its decodes)`; one that has not started may first
  be passed over for a step (it leads the queue from the next: `light_steps.Leads`); a step that
  holds a sand prefill larger than the budget gives them nothing.
- a **sand** request needs the prompts of the sand ahead of it still without a first token and its
  own, at what each step leaves: its tokens less its decodes and less the floor's share, for as long
  as heavier prefill work is present (the prompts of the heavier requests without a first token at
  its arrival, and of those arriving after it: a waiting heavier request goes ahead of the sand).
The bound is the end of the step by which that much service has been given. The load is the run's
own (arrivals, prompt tokens, decodes per step) and the steps' times are the run's, so the bound
says whether the scheduler gave every class its order and its share, not how fast the machine is.

The KV cache is the other thing a request waits for: vLLM starts nothing the cache cannot hold, and
the KV reserve starts a rock only where a share of the cache stays free beside it
(`scheduling.admission`). Where the run records the cache's free tokens per step, a request's service
counts from the first step at which the cache had room for it and for every prompt that goes before
it and had not started (with the reserve, for the heaviest class); how soon room appears depends on
when running requests end, which is the run's, not the floor's. What it leaves out: a cache that
fills again once that service has begun, and waiting for a free sequence slot (`max_num_seqs`). A
policy without light steps has no floor and no bound here (`budget` 0)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from rps_serve.requests import RequestClass
from rps_serve.scheduling.light_steps import SAND


@dataclass(frozen=True)
class EngineRun:
    """One run as the engine saw it: per request (in any order) when it reached the engine's queue,
    was first scheduled and sampled its first token (inf where it never did), its class level and
    prompt tokens; per step (in time order) when it started and ended, how many decode tokens it
    ran and, where known, how many tokens the KV cache had free when it was scheduled (None: the
    cache never ran short); the step's token budget, the light steps' budget of heavier prefills and
    the KV reserve, in tokens, that the heaviest class leaves free."""

    queued_s: np.ndarray
    scheduled_s: np.ndarray
    first_token_s: np.ndarray
    level: np.ndarray
    prompt_tokens: np.ndarray
    step_start_s: np.ndarray
    step_end_s: np.ndarray
    step_decodes: np.ndarray
    token_budget: int
    light_budget: int
    num_levels: int = 3
    step_free_tokens: np.ndarray | None = None
    reserve_tokens: int = 0

    def __post_init__(self) -> None:
        if not 0 < self.light_budget <= self.token_budget:
            raise ValueError(
                f"a bound needs light steps: budget {self.light_budget} of a {self.token_budget}-token step"
            )

    @property
    def wait_s(self) -> np.ndarray:
        return self.first_token_s - self.queued_s


@dataclass(frozen=True)
class ClassBound:
    """One class of one run: its longest wait in the engine, the largest of its requests' bounds, and
    how many of its requests waited past their own bound."""

    label: str
    longest_s: float
    bound_s: float
    breaks: int
    requests: int

    @property
    def holds(self) -> bool:
        return self.breaks == 0


def request_bounds(run: EngineRun) -> np.ndarray:
    """Every request's bound on its wait in the engine, in seconds from its arrival there (inf where
    the run has too few steps after it to give that much service)."""
    steps = _Steps.of(run)
    return np.array([_bound(run, steps, r) for r in range(len(run.queued_s))])


def class_bounds(run: EngineRun, among: np.ndarray | None = None) -> list[ClassBound]:
    """Per class present in the run (or in its requests `among`, a mask): its longest wait against
    the bounds of its requests."""
    bounds, wait = request_bounds(run), run.wait_s
    served = np.isfinite(wait) if among is None else np.isfinite(wait) & among
    classes = []
    for level in range(run.num_levels):
        mine = (run.level == level) & served
        if mine.any():
            classes.append(
                ClassBound(
                    RequestClass.for_level(level, run.num_levels).label,
                    float(wait[mine].max()),
                    float(bounds[mine].max()),
                    int(np.sum(wait[mine] > bounds[mine])),
                    int(mine.sum()),
                )
            )
    return classes


@dataclass(frozen=True)
class _Steps:
    """What each step can give: `room`, its tokens less its decodes; `share`, what the floor gives
    heavier prefills in it (0 in a step it does not keep)."""

    room: np.ndarray
    share: np.ndarray

    @classmethod
    def of(cls, run: EngineRun) -> _Steps:
        room = np.maximum(run.token_budget - run.step_decodes, 0).astype(np.int64)
        return cls(room, np.where(_floor_steps(run), np.minimum(run.light_budget, room), 0))


def _bound(run: EngineRun, steps: _Steps, r: int) -> float:
    arrived = run.queued_s[r]
    first = int(np.searchsorted(run.step_start_s, arrived, side="left"))  # after the one in progress
    end = _sand_end(run, steps, r, first) if run.level[r] == SAND else _heavier_end(run, steps, r, first)
    return end - arrived


def _with_room(run: EngineRun, r: int, first: int, waiting_prompts: np.ndarray) -> int:
    """The first step from `first` on at which the KV cache had room for `r`'s prompt and for those
    of `waiting_prompts` (the prompts going before it that had not started), with the KV reserve
    beside them if `r` is of the heaviest class; `first` where the run does not record the cache."""
    if run.step_free_tokens is None:
        return first
    need = int(waiting_prompts.sum()) + int(run.prompt_tokens[r])
    if run.level[r] == run.num_levels - 1:
        need += run.reserve_tokens
    # The step's decodes take their next tokens' room first.
    free = run.step_free_tokens[first:] - run.step_decodes[first:]
    room = np.nonzero(free >= need)[0]
    return first + int(room[0]) if room.size else len(run.step_start_s)


def _waiting_at(run: EngineRun, r: int) -> np.ndarray:
    """The requests other than `r` in the engine without a first token when `r` arrived."""
    others = np.arange(len(run.queued_s)) != r
    return others & (run.queued_s <= run.queued_s[r]) & (run.first_token_s > run.queued_s[r])


def _ahead(run: EngineRun, r: int) -> np.ndarray:
    """Requests that arrived before `r` (by time, then by index)."""
    index = np.arange(len(run.queued_s))
    earlier = run.queued_s < run.queued_s[r]
    return earlier | ((run.queued_s == run.queued_s[r]) & (index < r))


def _sand_end(run: EngineRun, steps: _Steps, r: int, first: int) -> float:
    """The end of the step by which the sand ahead of `r` and `r` itself have had every prompt token,
    each step giving them its room less what heavier prefills take: the floor's share, while heavier
    work present since `r`'s arrival or arrived since lasts."""
    waiting = _waiting_at(run, r)
    ahead = waiting & _ahead(run, r) & (run.level == SAND)
    need = run.prompt_tokens[ahead].sum() + run.prompt_tokens[r]
    first = _with_room(run, r, first, run.prompt_tokens[ahead & (run.scheduled_s > run.queued_s[r])])
    room, share = steps.room[first:], steps.share[first:]
    # Heavier prompt tokens present by each step's start: those without a first token at r's arrival,
    # then each later arrival from the first step that starts after it.
    later = (run.level != SAND) & (run.queued_s > run.queued_s[r])
    arrives = np.searchsorted(run.step_start_s[first:], run.queued_s[later], side="left")
    present = np.cumsum(np.bincount(arrives, run.prompt_tokens[later], minlength=len(room) + 1))[: len(room)]
    present = present + run.prompt_tokens[waiting & (run.level != SAND)].sum()
    # Heavier prefills take the share of each step, up to what is present: taken_k = S_k + min(0,
    # min over j <= k of (present_j - S_j)), S the cumulative share.
    cumulative_share = np.cumsum(share)
    taken = cumulative_share + np.minimum(np.minimum.accumulate(present - cumulative_share), 0)
    given = np.cumsum(room) - taken
    step = int(np.searchsorted(given, need, side="left"))
    return float(run.step_end_s[first + step]) if step < len(given) else float("inf")


def _heavier_end(run: EngineRun, steps: _Steps, r: int, first: int) -> float:
    """The end of the step by which `r` has had its whole prompt, step by step: the heavier prefills
    that go before it are served one at a time, each taking the floor's share of a step ahead of the
    sand, one that has not started after a step that passes it over (then it leads the queue).
    Heavier requests of a lighter class arriving after `r` go before it."""
    level, arrived = run.level[r], run.queued_s[r]
    waiting, heavier = _waiting_at(run, r), run.level != SAND
    started = waiting & heavier & (run.scheduled_s <= arrived)
    # Lighter classes go first whenever they came, r's own class in arrival order.
    goes_first = (run.level < level) | ((run.level == level) & _ahead(run, r))
    before = waiting & heavier & ~started & goes_first
    jobs = [int(t) for t in run.prompt_tokens[started]] + [int(t) for t in run.prompt_tokens[before]]
    going = int(started.sum())  # the first `going` jobs have started
    passed_over = going == 0  # the job at the head has yet to sit out the step that passes it over
    later = np.nonzero((run.queued_s > arrived) & heavier & (run.level < level))[0]
    later = later[np.argsort(run.queued_s[later], kind="stable")]
    first = _with_room(run, r, first, run.prompt_tokens[before])
    queue = [*jobs, int(run.prompt_tokens[r])]  # `r` last: whatever arrives later goes before it
    arrivals = 0
    for step in range(first, len(run.step_start_s)):
        while arrivals < len(later) and run.queued_s[later[arrivals]] <= run.step_start_s[step]:
            queue.insert(len(queue) - 1, int(run.prompt_tokens[later[arrivals]]))
            arrivals += 1
        if passed_over:
            passed_over = False
            continue
        queue[0] -= min(int(steps.share[step]), queue[0])
        if queue[0] == 0:
            if len(queue) == 1:
                return float(run.step_end_s[step])
            queue.pop(0)
            going = max(going - 1, 0)
            passed_over = going == 0
    return float("inf")


def _floor_steps(run: EngineRun) -> np.ndarray:
    """Steps that give heavier prefills their floor: all but those during which a sand prompt larger
    than the budget was prefilling (its step raises the cap and sets every heavier prefill aside)."""
    large = (run.level == SAND) & (run.prompt_tokens > run.light_budget)
    keeps = np.ones(len(run.step_start_s), dtype=bool)
    for r in np.nonzero(large)[0]:
        keeps &= ~((run.step_end_s > run.scheduled_s[r]) & (run.step_start_s < run.first_token_s[r]))
    return keeps
