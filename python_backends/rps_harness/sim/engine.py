"""Engine model: vLLM V1's `schedule()` loop in simulated time; `ClassQueues` orders the waiting requests.

Each step, as vLLM V1 does it:
1. running requests first, in admission order: each gets its pending tokens (the rest of its prefill,
   or one decode token) up to the remaining token budget (chunked prefill); if the KV cache cannot
   hold them, running requests are preempted by recompute (FCFS: the last admitted; other policies:
   the heaviest class, latest arrival first, as vLLM's priority policy picks with the class level as
   the priority, which is what the plug-in hands it) until it can;
2. if nothing was preempted, waiting requests in policy order while budget, sequence slots, KV blocks
   and the encoder budget last; the head of the queue, if the KV cache cannot hold it, may evict one
   running request where the policy's `PreemptionRule` allows it (never under FCFS): one eviction a
   step, for the head only, as the plug-in evicts before it hands the step to vLLM;
   in both phases a prefill chunk is also limited by vLLM's `long_prefill_token_threshold`, which the
   class-aware chunk cap sets for the step (`prefill_chunk_cap`, as the vLLM plug-in does) while the
   best waiting request is of a lighter class than a running prefill; with a decode hold
   (`scheduling.holding`, as the plug-in configures it) held requests sit both phases out; in a light
   step (`scheduling.light_steps`: sand waits at the head or prefills) every chunk is limited to the
   light-step budget and the running heavier prefills but the first sit both phases out (a sand
   larger than the budget raises the limit to its size and all of them sit out), a heavier
   waiting request starts only while no heavier request prefills in the step, and where none does the
   best waiting heavier one goes first, ahead of the sand, once a light step has passed it over
   (`light_steps.Leads`; it goes back to its place if it cannot start);
3. the step takes the timing model's time; a request whose known tokens are all computed samples one
   token; finished requests free their blocks.
Recompute preemption drops a request's KV (and its encoder output): it prefills prompt and generated
tokens again from the waiting queue and keeps the tokens it already produced.

`run()` replays all requests at their `ready_s`; an engine can also be driven online, as a replica
behind a router is: `add()` hands it a request at its current time, `run_until()` advances it, `drain()`
finishes what it holds.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Hashable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np

from rps_harness.sim.timing import TimingModel
from rps_serve.scheduling.admission import admits, kv_blocks
from rps_serve.scheduling.chunking import prefill_chunk_cap
from rps_serve.scheduling.holding import DecodeHolds
from rps_serve.scheduling.light_steps import SAND, Leads, LightStep, may_lead, may_start, plan_light_step
from rps_serve.scheduling.preemption import Contender, PreemptionRule
from rps_serve.scheduling.queues import ClassQueues

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class EngineConfig:
    """vLLM's scheduler limits (V1 defaults for an H100 API server) and the KV-cache size."""

    kv_capacity_tokens: int
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    block_size: int = 16

    @property
    def num_blocks(self) -> int:
        return self.kv_capacity_tokens // self.block_size


@dataclass(frozen=True)
class EngineWork:
    """The requests handed to the engine, as parallel arrays.

    `ready_s`: when the scheduler sees the request (after preprocessing and any remote encoding), for
    `Engine.run()`; an engine driven online gets each request from `Engine.add()` instead;
    `arrival_s`: when the client sent it (vLLM's `arrival_time`);
    `rank_s`: the time it ranks from in its class queue (ages and scores count from here): its arrival,
    or later under a cost order (`SchedulingVariant.rank_time`); None: `arrival_s`;
    `encoder_s`: vision-encoder seconds charged to the step that starts its prefill (0 if encoded elsewhere);
    `modality_tokens`: what that encoding draws from the step's encoder budget.
    """

    ready_s: np.ndarray
    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    modality_tokens: np.ndarray
    encoder_s: np.ndarray
    level: np.ndarray
    rank_s: np.ndarray | None = None

    @property
    def ranks(self) -> np.ndarray:
        return self.arrival_s if self.rank_s is None else self.rank_s


@dataclass(frozen=True)
class StepRecord:
    """What one step did; handed to an observer (tests, traces, a router's view of the replica).

    `first_token_ids` and `finished_ids`: the requests that sampled their first token, and those that
    finished, at the end of the step; `scheduled`: (request, tokens) of every request the step ran.
    """

    start_s: float
    duration_s: float
    scheduled_tokens: int
    prefill_tokens: int
    decodes: int
    running: int
    used_blocks: int
    preemptions: int
    first_token_ids: tuple[int, ...] = ()
    finished_ids: tuple[int, ...] = ()
    scheduled: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class EngineResult:
    first_token_s: np.ndarray
    finish_s: np.ndarray
    preemptions: np.ndarray
    busy_s: float
    steps: int


class Engine:
    """One vLLM V1 engine (one replica, possibly tensor-parallel) simulated step by step."""

    def __init__(
        self,
        work: EngineWork,
        config: EngineConfig,
        timing: TimingModel,
        queues: ClassQueues[int],
        rule: PreemptionRule | None,
        chunk_cap_tokens: int = 0,
        observer: Callable[[StepRecord], None] | None = None,
        holds: DecodeHolds[int] | None = None,
        hold_exempt: np.ndarray | None = None,
        light_step_tokens: int = 0,
    ) -> None:
        """`holds`: the decode hold, None without one; `hold_exempt[i]`: request i is never held;
        `light_step_tokens`: the heavier classes' prefill tokens in a light step, 0 without light steps."""
        self.work, self.config, self.timing = work, config, timing
        self.holds = holds
        self.queues, self.rule, self.chunk_cap_tokens, self.observer = (
            queues,
            rule,
            chunk_cap_tokens,
            observer,
        )
        n = len(work.ready_s)
        longest = int(np.max(work.prompt_tokens + work.output_tokens, initial=0))
        if longest > config.num_blocks * config.block_size:
            raise ValueError(
                f"a request needs {longest} KV tokens; the cache holds {config.kv_capacity_tokens}"
            )
        # vLLM sizes the encoder budget to fit the largest multimodal item even above the token budget.
        self.encoder_budget = max(config.max_num_batched_tokens, int(np.max(work.modality_tokens, initial=0)))
        self.now = 0.0
        self.computed = np.zeros(n, dtype=np.int64)
        self.generated = np.zeros(n, dtype=np.int64)
        self.blocks = np.zeros(n, dtype=np.int64)
        self.preemptions = np.zeros(n, dtype=np.int64)
        self.first_token = np.full(n, np.nan)
        self.finish = np.full(n, np.nan)
        self.free_blocks = config.num_blocks
        self.running = np.empty(0, dtype=np.int64)
        self.finished = 0
        self.preemption_count = 0
        self.busy_s = 0.0
        self.steps = 0
        self._preempted_last = False
        self._fcfs_victims = queues.regulator.policy.row.vllm_policy == "fcfs"
        self._kv_reserve = queues.regulator.policy.row.kv_reserve
        self._num_levels = queues.regulator.num_levels
        self._chunk_limit = 0  # vLLM's long_prefill_token_threshold for the current step; 0: none
        self.light_step_tokens = light_step_tokens
        self._light = False  # the current step is a light one
        self._aside: set[int] = set()  # running requests that sit the current step out
        self.light_steps = 0
        self._leads: Leads[int] = Leads()
        # Plain lists: scalar reads in the Python parts of a step are much cheaper than numpy indexing.
        self._prompt = work.prompt_tokens.tolist()
        self._level = work.level.tolist()
        self._arrival = work.arrival_s.tolist()
        self._rank = work.ranks.tolist()
        self._encoder = work.encoder_s.tolist()
        self._visual = np.where(work.encoder_s > 0, work.modality_tokens, 0).tolist()
        self._exempt = [False] * n if hold_exempt is None else hold_exempt.tolist()

    # --- preemption ---------------------------------------------------------------------------

    def _preempt(self, request: int) -> None:
        self.free_blocks += int(self.blocks[request])
        self.blocks[request] = 0
        self.computed[request] = 0
        self.preemptions[request] += 1
        self.preemption_count += 1
        self._enqueue(request)

    def _enqueue(self, request: int) -> None:
        """Into the waiting queue, in the group of its decode hold while one holds it."""
        level = self._level[request]
        group = None if self.holds is None else self.holds.arrived(request, level, self._exempt[request])
        self.queues.add(request, level, self._rank[request], group)

    def _running_scores(self, ids: np.ndarray) -> np.ndarray:
        """Scores of running requests as if they were waiting since their rank time."""
        regulator = self.queues.regulator
        return regulator.scores(self.work.level[ids], self.work.ranks[ids], self.queues.now)

    def _running_victim(self, candidates: list[int]) -> int:
        """vLLM's victim when a running request cannot grow: the last admitted (FCFS), else the largest
        (priority, arrival), the priority being the class level (the plug-in's `request.priority`)."""
        if self._fcfs_victims:
            return candidates[-1]
        return max(candidates, key=lambda r: (self._level[r], self._arrival[r]))

    # --- step phases ----------------------------------------------------------------------------

    def _schedule_running(self) -> tuple[np.ndarray, bool]:
        """Tokens for every running request (aligned with `self.running`), and whether any was preempted."""
        ids = self.running
        # Tokens each request still has to compute before it samples (a decode: 1).
        pending = self.work.prompt_tokens[ids] + self.generated[ids] - self.computed[ids]
        if self._chunk_limit:
            pending = np.minimum(pending, self._chunk_limit)
        if self._aside:
            pending[np.isin(ids, list(self._aside))] = 0
        # In order, each request takes what is left of the budget; once it binds, later ones get nothing.
        budget = self.config.max_num_batched_tokens
        alloc = np.clip(budget - (np.cumsum(pending) - pending), 0, pending)
        grow = kv_blocks(self.computed[ids] + alloc, self.config.block_size) - self.blocks[ids]
        grow[alloc == 0] = 0
        needed = int(grow.sum())
        if needed <= self.free_blocks:
            self.blocks[ids] += grow
            self.free_blocks -= needed
            return alloc, False
        return self._schedule_running_with_preemption(), True

    def _chunk(self, pending: int, budget: int) -> int:
        """Tokens a request with `pending` tokens gets under the budget and the step's chunk limit."""
        if self._chunk_limit:
            pending = min(pending, self._chunk_limit)
        return min(pending, budget)

    def _schedule_running_with_preemption(self) -> np.ndarray:
        """The sequential path of step 1 when the KV cache is short: allocate in order, preempt as needed."""
        budget = self.config.max_num_batched_tokens
        order = self.running.tolist()
        alive = order.copy()
        preempted: set[int] = set()
        granted: dict[int, int] = {}
        for request in order:
            if request in preempted or request in self._aside:
                continue
            pending = self._prompt[request] + int(self.generated[request]) - int(self.computed[request])
            tokens = self._chunk(pending, budget)
            if tokens == 0:
                continue
            need = kv_blocks(int(self.computed[request]) + tokens, self.config.block_size)
            need -= int(self.blocks[request])
            while need > self.free_blocks:
                # A request sitting the step out is not in vLLM's running list for it: never a victim.
                victim = self._running_victim([r for r in alive if r not in self._aside])
                alive.remove(victim)
                preempted.add(victim)
                budget += granted.pop(victim, 0)
                self._preempt(victim)
                if victim == request:
                    break
            else:
                granted[request] = tokens
                budget -= tokens
                self.free_blocks -= need
                self.blocks[request] += need
        self.running = np.array(alive, dtype=np.int64)
        return np.array([granted.get(request, 0) for request in alive], dtype=np.int64)

    def _evict_for(self, request: int, removed: np.ndarray) -> int | None:
        """Index (in `self.running`) of the running request the rule lets `request` evict, if any."""
        assert self.rule is not None
        candidates = np.flatnonzero(~removed)
        if candidates.size == 0:
            return None
        ids = self.running[candidates]
        waiting = Contender(
            self._level[request],
            self.queues.score(self._level[request], self._rank[request]),
            self._rank[request],
            int(self.preemptions[request]),
        )
        position = self.rule.victim_position(
            waiting,
            self.work.level[ids],
            self._running_scores(ids),
            self.work.ranks[ids],
            self.preemptions[ids],
        )
        return None if position is None else int(candidates[position])

    def _schedule_waiting(self, budget: int, alloc: np.ndarray) -> tuple[list[int], list[int], np.ndarray]:
        """Admit waiting requests in policy order. Returns admitted ids, their tokens, and the mask of
        running requests evicted for them (aligned with `self.running`)."""
        config = self.config
        admitted: list[int] = []
        tokens: list[int] = []
        removed = np.zeros(len(self.running), dtype=bool)
        evicted: set[int] = set()
        encoder_budget = self.encoder_budget
        seqs = len(self.running)
        heavier_prefilling = self._light and any(
            self._level[r] != SAND and self.computed[r] < self._prompt[r]
            for r, gone in zip(self.running.tolist(), removed.tolist(), strict=True)
            if not gone and r not in self._aside
        )
        led = self.queues.leading
        while budget > 0 and self.queues:
            request = self.queues.peek()
            may_admit = self._may_admit(request, heavier_prefilling, encoder_budget, seqs, evicted)
            chunk = self._chunk(self._known_tokens(request), budget)
            need = kv_blocks(chunk, config.block_size)
            if request == self.queues.leading and (not may_admit or need > self.free_blocks):
                # A lead that cannot start goes back to its place (as in the plug-in, nothing is
                # evicted for it) and the sand goes on.
                self.queues.lead(None)
                continue
            if not may_admit:
                break
            if need > self.free_blocks:
                # The plug-in's rule: one eviction a step, for the head of the queue (it evicts before
                # a light step's lead is chosen).
                first = not evicted and all(a == led for a in admitted)
                index = self._evict_for(request, removed) if self.rule is not None and first else None
                if index is None:
                    break
                victim = int(self.running[index])
                removed[index] = True
                budget += int(alloc[index])  # what the victim was granted in step 1
                alloc[index] = 0
                evicted.add(victim)
                self._preempt(victim)
                seqs -= 1
                continue
            self.queues.remove(request)
            heavier_prefilling |= self._light and self._level[request] != SAND
            admitted.append(request)
            tokens.append(chunk)
            budget -= chunk
            encoder_budget -= self._visual[request]
            self.free_blocks -= need
            self.blocks[request] = need
            seqs += 1
        return admitted, tokens, removed

    def _may_admit(
        self, request: int, heavier_prefilling: bool, encoder_budget: int, seqs: int, evicted: set[int]
    ) -> bool:
        """Whether the waiting `request` may start now, but for the KV blocks its chunk needs: the
        policy's headroom, the light step's rule, the encoder budget and a free sequence slot, and not
        evicted in this step (vLLM does not reschedule a request in the step that preempted it)."""
        if not self._admits(request):
            return False
        if self._light and not may_start(self._level[request], heavier_prefilling):
            return False
        if request in evicted or self._visual[request] > encoder_budget:
            return False
        # A free sequence slot comes with the next finished request: no eviction for it.
        return seqs < self.config.max_num_seqs

    def _admits(self, request: int) -> bool:
        """The policy's KV headroom (`scheduling.admission`) lets `request` start now."""
        config = self.config
        tokens, level = self._known_tokens(request), self._level[request]
        blocks = self.free_blocks, config.num_blocks, config.block_size
        return admits(level, self._num_levels, tokens, *blocks, self._kv_reserve)

    def _known_tokens(self, request: int) -> int:
        """Prompt and generated tokens: what a waiting request computes (vLLM's `num_tokens`)."""
        return self._prompt[request] + int(self.generated[request])

    def _step_chunk_limit(self) -> int:
        """The step's prefill chunk limit, decided as the vLLM plug-in decides it: from the best waiting
        request's class and the classes of running requests whose prompt is not yet computed; no cap
        when every sequence slot is taken, since then no waiting request can start this step."""
        if not self.chunk_cap_tokens or not self.queues or len(self.running) >= self.config.max_num_seqs:
            return 0
        ids = self.running
        prefilling = self.work.level[ids[self.computed[ids] < self.work.prompt_tokens[ids]]]
        best = self._level[self.queues.peek()]
        return prefill_chunk_cap([best], prefilling.tolist(), self.chunk_cap_tokens)

    def _light_step(self) -> LightStep[int] | None:
        """In a light step, its prefill chunk limit and the running heavier prefills that sit it out
        (`light_steps.plan_light_step`), with the request that leads the queue in it set
        (`light_steps.Leads`), decided as the vLLM plug-in decides them; None otherwise (and when every
        sequence slot is taken, as the plug-in skips its rules then)."""
        if not self.light_step_tokens or len(self.running) >= self.config.max_num_seqs:
            return None
        ids = self.running
        prefilling = [
            (r, self._level[r], self._known_tokens(r) - int(self.computed[r]))
            for r in ids[self.computed[ids] < self.work.prompt_tokens[ids]].tolist()
        ]
        head = self.queues.peek() if self.queues else None
        waiting = None if head is None else (self._level[head], self._known_tokens(head))
        light = plan_light_step(self.light_step_tokens, waiting, prefilling)
        lead = self._leads.choose(light, lambda: self.queues.best_heavier(SAND))
        if lead is not None and waiting is not None:
            blocks = self.free_blocks, self.config.block_size, len(self.running)
            if may_lead(self._known_tokens(lead), waiting[1], *blocks):
                self.queues.lead(lead)
        return light

    @contextmanager
    def _holding(self) -> Iterator[None]:
        """For one step, the requests in a decode hold sit out, as in the plug-in (which skips the
        hold when every sequence slot is taken: no waiting request could start then)."""
        if self.holds is None or len(self.running) >= self.config.max_num_seqs:
            yield
            return
        with self.holds.applied(self.queues, self._running_levels, self.now):
            yield

    def _running_levels(self) -> Mapping[Hashable, int]:
        return {request: self._level[request] for request in self.running.tolist()}

    def step(self) -> float:
        """Schedule and run one step; returns its duration (0 when nothing could run)."""
        self.queues.begin_iteration()
        preemptions_before = self.preemption_count
        admitted: list[int] = []
        tokens: list[int] = []
        with self._holding():
            self._chunk_limit = self._step_chunk_limit()
            light = self._light_step()
            self._light = light is not None
            self._aside = set()
            if light is not None:
                self._aside = set(light.aside)
                self._chunk_limit = min(self._chunk_limit, light.limit) if self._chunk_limit else light.limit
                self.light_steps += 1
            alloc, preempted = self._schedule_running()
            self._preempted_last = preempted
            if not preempted:
                budget = self.config.max_num_batched_tokens - int(alloc.sum())
                admitted, tokens, removed = self._schedule_waiting(budget, alloc)
                if removed.any():
                    self.running, alloc = self.running[~removed], alloc[~removed]
        ids = np.concatenate([self.running, np.array(admitted, dtype=np.int64)])
        alloc = np.concatenate([alloc, np.array(tokens, dtype=np.int64)])
        scheduled = alloc > 0
        if not scheduled.any():
            return 0.0

        computed = self.computed[ids]
        decoding = (
            scheduled
            & (self.generated[ids] > 0)
            & (alloc == 1)
            & (computed == self.work.prompt_tokens[ids] + self.generated[ids] - 1)
        )
        prefill_tokens = int(alloc[scheduled & ~decoding].sum())
        decodes = int(decoding.sum())
        encoder_s = sum(self._encoder[r] for r in admitted)
        duration = self.timing.step_s(prefill_tokens, decodes, int(computed[decoding].sum()), encoder_s)
        start = self.now
        self.now += duration

        computed += alloc
        self.computed[ids] = computed
        sampled = ids[computed == self.work.prompt_tokens[ids] + self.generated[ids]]
        self.generated[sampled] += 1
        first = sampled[np.isnan(self.first_token[sampled])]
        self.first_token[first] = self.now
        done = sampled[self.generated[sampled] == self.work.output_tokens[sampled]]
        self.finish[done] = self.now
        self.free_blocks += int(self.blocks[done].sum())
        self.blocks[done] = 0
        self.finished += done.size
        self.running = ids[~np.isin(ids, done)] if done.size else ids
        if self.observer is not None:
            self.observer(
                StepRecord(
                    start_s=start,
                    duration_s=duration,
                    scheduled_tokens=int(alloc.sum()),
                    prefill_tokens=prefill_tokens,
                    decodes=decodes,
                    running=len(self.running),
                    used_blocks=self.config.num_blocks - self.free_blocks,
                    preemptions=self.preemption_count - preemptions_before,
                    first_token_ids=tuple(first.tolist()),
                    finished_ids=tuple(done.tolist()),
                    scheduled=tuple(zip(ids[scheduled].tolist(), alloc[scheduled].tolist(), strict=True)),
                )
            )
        return duration

    def add(self, request: int) -> None:
        """Hand request `request` (an index into `work`) to the waiting queue at the engine's current time."""
        self._enqueue(request)

    def _has_work(self) -> bool:
        return bool(self.running.size) or bool(self.queues)

    def _step_while_before(self, t: float) -> None:
        """Run steps while there is work and the clock is before `t` (a step may end past `t`)."""
        while self.now < t and self._has_work():
            duration = self.step()
            if duration == 0.0 and not self.running.size and not self._preempted_last:
                raise RuntimeError("engine stalled: a waiting request can never be admitted")
            self.busy_s += duration
            self.steps += duration > 0.0

    def run_until(self, t: float) -> None:
        """Run steps while there is work and the clock is before `t` (the last may end past `t`); an
        engine left idle waits, its clock moving to `t`."""
        self._step_while_before(t)
        self.now = max(self.now, t)

    def drain(self) -> None:
        """Run steps until every request handed to the engine has finished."""
        self._step_while_before(math.inf)

    def run(self) -> EngineResult:
        """Hand every request to the engine at its `ready_s` and simulate until all have finished."""
        ready = self.work.ready_s.tolist()
        for request in np.argsort(self.work.ready_s, kind="stable").tolist():
            self.run_until(ready[request])
            self.add(request)
        self.drain()
        logger.info(
            "engine: %d steps, %.1f s busy, %d preemptions", self.steps, self.busy_s, self.preemptions.sum()
        )
        return EngineResult(self.first_token, self.finish, self.preemptions, self.busy_s, self.steps)
