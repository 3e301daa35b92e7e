"""RPS scheduler for the vLLM V1 engine: class queues, priorities each step, eviction for waiting requests.

Subclasses vLLM's own schedulers and keeps their `schedule()` loop; what changes:
- `self.waiting` is a `ClassRequestQueue`: requests come out in RPS priority order, recomputed at
  every step (`ClassQueues.begin_iteration`);
- before the loop, the best waiting request may evict a running request of a heavier class when the
  KV cache keeps it out (`PreemptionRule`; recompute preemption, as vLLM's own);
- a running request part-way through its prefill can sit out a step while a waiting request that
  outranks it can be admitted, so the lighter prefill takes the step's tokens instead of waiting for the
  heavier one to finish (it keeps its KV blocks and goes on at the next step: no recompute; off by
  default);
- a waiting request of a heavier class than a running one can sit out steps until the lighter
  requests running when it reached the queue have finished, for at most `decode_hold_s` on the
  served model's clock (`scheduling.holding`): its long encoder and prefill steps then hold up fewer
  decoding requests;
- while a lighter class waits behind a heavier prefill, prefill chunks can be capped for that step
  (off by default);
- while sand waits at the head of the queue or prefills, the step is a light one
  (`scheduling.light_steps`): heavier prefills put at most the light-step budget into it, one of them
  at most, and where none prefills the best waiting heavier request leads the queue for the step
  once a light step has passed it over;
- `request.priority` is set to the class level, so that vLLM's own preemption under KV pressure
  (which runs with the priority policy) evicts the heaviest class first.
Use `RPSScheduler` where async scheduling is off (CPU), `RPSAsyncScheduler` where it is on (GPU).
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import vllm
from vllm.v1.core.sched.async_scheduler import AsyncScheduler
from vllm.v1.core.sched.output import SchedulerOutput
from vllm.v1.core.sched.request_queue import SchedulingPolicy
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.request import Request, RequestStatus

from rps_serve.cost.observed import PrefillCostObserver, StepWork
from rps_serve.cost.runtime import aging_time_scale
from rps_serve.scheduling.admission import admits, kv_blocks
from rps_serve.scheduling.chunking import prefill_chunk_cap
from rps_serve.scheduling.class_edges import engine_classes
from rps_serve.scheduling.holding import DecodeHolds
from rps_serve.scheduling.light_steps import SAND, Leads, LightStep, may_lead, may_start, plan_light_step
from rps_serve.scheduling.parameters import class_ladder, in_time_units
from rps_serve.scheduling.preemption import Contender
from rps_serve.vllm_plugin.classify import engine_class, engine_cost_model, engine_request_features
from rps_serve.vllm_plugin.config import RPSConfig
from rps_serve.vllm_plugin.parent_watch import watch_parent
from rps_serve.vllm_plugin.queue import ClassRequestQueue, Ranked
from rps_serve.vllm_plugin.version import check_vllm_version

logger = logging.getLogger(__name__)


class _ObservedCosts:
    """The plug-in's record of observed prefill costs (`RPSConfig.observed_costs`): the steps
    scheduled and not yet updated, the observer, and the file its records go to."""

    def __init__(self, path: Path) -> None:
        self.observer = PrefillCostObserver()
        self.steps: dict[int, tuple[StepWork, float]] = {}  # id(scheduler output) -> work, start
        # Open for the engine's life, a line at a time.
        self._file = path.open("a", encoding="utf-8", buffering=1)

    def step_done(self, output_id: int) -> None:
        if (step := self.steps.pop(output_id, None)) is None:
            return
        work, started = step
        for record in self.observer.observe(work, time.perf_counter() - started):
            self._file.write(record.to_json() + "\n")


class _RPSMixin(Scheduler):
    running: list[Request]
    _costs: _ObservedCosts | None = None  # class-wide default: on only with `observed_costs`

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        check_vllm_version(vllm.__version__)
        super().__init__(*args, **kwargs)
        watch_parent()  # no orphaned engine: it ends with the process that started it
        self.rps = RPSConfig.from_additional_config(self.vllm_config.additional_config)
        self.cost_model = engine_classes(engine_cost_model(self.rps), self.max_num_scheduled_tokens)
        self.time_scale = self.rps.aging_time_scale or (
            aging_time_scale(Path(self.rps.cost_model)) if self.rps.cost_model else 1.0
        )
        ladder = in_time_units(class_ladder(self.cost_model.num_classes), self.time_scale)
        variant = self._variant = self.rps.variant
        regulator = variant.regulator(ladder)
        if self.waiting:
            raise RuntimeError("the RPS scheduler must replace the waiting queue before requests arrive")
        self._decode_holds: DecodeHolds[Request] | None = variant.decode_holds(
            self.time_scale, regulator.num_levels
        )
        group_of = self._queued if self._decode_holds is not None else None
        self.waiting: ClassRequestQueue = ClassRequestQueue(regulator, self._classify, group_of)
        # vLLM picks its preemption victim under KV pressure by (priority, arrival) only with this policy.
        self.policy = SchedulingPolicy.PRIORITY
        self.preemption_rule = variant.preemption_rule()
        self.evictions: Counter[int] = Counter()  # preemptions for a waiting request, by victim class
        self.preemptions: Counter[int] = Counter()  # every preemption, vLLM's own included, by class
        self.light_steps = 0  # light steps (`scheduling.light_steps`) scheduled
        self._leads: Leads[Request] = Leads()
        self.holds = 0  # steps a waiting request sat out, at the head of its class, for lighter ones running
        if self.rps.observed_costs is not None:
            self._costs = _ObservedCosts(Path(self.rps.observed_costs))
        # Read once, not at every step: a step reads them after the forward pass, each a cache miss.
        by_class = self.rps.policy.row.by_class
        self._caps_chunks = by_class and bool(self.rps.chunk_cap_tokens)
        self._starts = self._kv_headroom(self.rps.policy.row.kv_reserve)
        self._light_budget = variant.light_budget(self.max_num_scheduled_tokens, self.cost_model)
        logger.info(
            "RPS scheduler: policy %s, %d classes by %s, priorities aging on %.2fx the paper's clock, "
            "light steps of %s heavier prefill tokens",
            self.rps.policy.value,
            self.cost_model.num_classes,
            self.cost_model,
            self.time_scale,
            self._light_budget or "(off)",
        )

    def _classify(self, request: Request) -> Ranked:
        variant = self._variant
        level, prefill_s = engine_class(self.cost_model, request, needs_prefill=bool(variant.cost_order))
        request.priority = level
        return Ranked(level, variant.rank_time(request.arrival_time, prefill_s))

    def _queued(self, request: Request, level: int) -> int | None:
        """A request joins the waiting queue: the decode hold learns of it (a text is never held under
        `decode_hold_media_only`) and names the group it waits in while its hold lasts."""
        assert self._decode_holds is not None
        exempt = self.rps.decode_hold_media_only and not request.has_encoder_inputs
        return self._decode_holds.arrived(request, level, exempt)

    def schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        output = self._schedule(*args, **kwargs)
        if self._costs is not None:
            self._costs.steps[id(output)] = (self._work_of(output), time.perf_counter())
        return output

    def update_from_output(self, scheduler_output: SchedulerOutput, *args: Any, **kwargs: Any) -> Any:
        if self._costs is not None:
            self._costs.step_done(id(scheduler_output))
        return super().update_from_output(scheduler_output, *args, **kwargs)

    def _work_of(self, output: SchedulerOutput) -> StepWork:
        """The prompt and decode tokens `output` schedules per request (vLLM has already advanced
        each request's computed tokens past them)."""
        prefill: dict[str, int] = {}
        completed = {}
        decode = 0
        for request_id, tokens in output.num_scheduled_tokens.items():
            request = self.requests[request_id]
            before = request.num_computed_tokens - tokens
            prompt = min(tokens, max(request.num_prompt_tokens - before, 0))
            decode += tokens - prompt
            if prompt:
                prefill[request_id] = prompt
                if before + prompt >= request.num_prompt_tokens:
                    completed[request_id] = engine_request_features(request)
        return StepWork(prefill, decode, completed)

    def _schedule(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        self.waiting.classes.begin_iteration()
        # With every sequence slot taken no waiting request can start this step, so neither a hold,
        # an eviction nor a chunk cap would change what runs: skip them (and the scoring they need).
        if len(self.running) >= self.max_num_running_reqs:
            return super().schedule(*args, **kwargs)
        # Most steps have no hold to decide or check: they skip the hold's context altogether.
        if self._decode_holds is None or not self._decode_holds.pending():
            return self._schedule_waiting(*args, **kwargs)
        with self._holding(self._decode_holds):
            return self._schedule_waiting(*args, **kwargs)

    def _schedule_waiting(self, *args: Any, **kwargs: Any) -> SchedulerOutput:
        """vLLM's loop, after an eviction for the best waiting request and with the step's KV headroom,
        light step and chunk cap, where they act."""
        self._evict_for_waiting()
        light = self._light_step()  # from the queue's head as it stands, before the headroom applies
        # The admission rules hold for this step's loop only: outside it, a queue that reads as empty
        # would tell vLLM that nothing waits.
        self.waiting.admits = self._starts if light is None else self._light_starts
        try:
            if light is None and not self._caps_chunks:
                return super().schedule(*args, **kwargs)  # the usual step: vLLM's loop as it is
            cap = self._prefill_cap()
            aside: list[Request] = []
            if light is not None:
                aside = light.aside
                cap = min(cap, light.limit) if cap else light.limit
            if cap >= self.max_num_scheduled_tokens:
                cap = 0  # a cap of the whole step limits no chunk (a light step on the CPU stack's)
            if not cap and not aside:
                return super().schedule(*args, **kwargs)
            with self._chunk_cap(cap), self._set_aside(aside):
                return super().schedule(*args, **kwargs)
        finally:
            self.waiting.admits = None

    def _light_step(self) -> LightStep[Request] | None:
        """In a light step (`scheduling.light_steps`), the step's prefill chunk limit and the running
        heavier prefills that sit it out (`light_steps.plan_light_step`), with the request that leads
        the queue set (`light_steps.Leads`) where the KV cache holds its prompt beside the sand's
        (`light_steps.may_lead`; vLLM's loop also ends its admissions at a request it cannot
        allocate, so a lead that failed there would keep the sand out of the step); None otherwise."""
        if not self._light_budget:
            return None
        level = self.waiting.level
        head = self.waiting.peek_request() if self.waiting else None
        prefilling = [
            (r, level(r), r.num_tokens - r.num_computed_tokens)
            for r in self.running
            if r.num_computed_tokens < r.num_prompt_tokens and r.status == RequestStatus.RUNNING
        ]
        waiting = None if head is None else (level(head), head.num_tokens - head.num_computed_tokens)
        light = plan_light_step(self._light_budget, waiting, prefilling)
        classes = self.waiting.classes
        lead = self._leads.choose(light, lambda: classes.best_heavier(SAND))
        if light is None:
            return None
        self.light_steps += 1
        if lead is not None and waiting is not None:
            free = self.kv_cache_manager.block_pool.get_num_free_blocks()
            tokens = lead.num_tokens - lead.num_computed_tokens
            if may_lead(tokens, waiting[1], free, self.block_size, len(self.running)):
                classes.lead(lead)
        return light

    def _light_starts(self, request: Request) -> bool:
        """Whether the best waiting request may start in a light step: the KV headroom lets it, and a
        heavier one finds no heavier request prefilling in the step (the running ones, and those this
        step admitted: vLLM's loop appends them to `running`)."""
        if self._starts is not None and not self._starts(request):
            return False
        level = self.waiting.level
        mine = level(request)
        # Sand may start whatever prefills: the running requests are looked at for heavier ones only.
        heavier_prefilling = mine != SAND and any(
            r.num_computed_tokens < r.num_prompt_tokens and level(r) != SAND for r in self.running
        )
        return may_start(mine, heavier_prefilling)

    def _kv_headroom(self, reserve: float) -> Callable[[Request], bool] | None:
        """Whether a waiting request may start, where the policy keeps `reserve` of the KV cache free:
        a request of the heaviest class starts only where that share stays free after it
        (`scheduling.admission`), and the queue reads as empty to vLLM's loop otherwise. Asked when
        vLLM's loop asks whether requests wait, after the running requests have taken their blocks,
        as the simulator asks. None without a reserve. Built once: a step only calls it."""
        if not reserve:
            return None
        pool = self.kv_cache_manager.block_pool
        usable = pool.num_gpu_blocks - 1  # vLLM keeps one null block
        num_levels = self.waiting.classes.regulator.num_levels
        level_of, free_blocks, block_size = self.waiting.level, pool.get_num_free_blocks, self.block_size

        def starts(request: Request) -> bool:
            return admits(
                level_of(request), num_levels, request.num_tokens, free_blocks(), usable, block_size, reserve
            )

        return starts

    @contextmanager
    def _holding(self, holds: DecodeHolds[Request]) -> Iterator[None]:
        """For one `schedule()`, waiting requests in a decode hold (`scheduling.holding`) sit out: the
        queue keeps each cohort of holds together and skips it whole while its hold is in force, so
        the step's work follows the cohorts, not the queue's length."""

        def running() -> Mapping[Hashable, int]:
            return {r.request_id: self.waiting.level(r) for r in self.running}

        with holds.applied(self.waiting.classes, running, time.monotonic()) as held:
            self.holds += held
            yield

    def _contenders(self, requests: list[Request]) -> list[Contender]:
        """`requests` as the preemption rule sees them, scored in one vectorized call."""
        ranked = [self.waiting.ranked(r) for r in requests]
        levels = [level for level, _ in ranked]
        since = [rank_time for _, rank_time in ranked]
        scores = self.waiting.classes.scores(levels, since)
        return [
            Contender(level, score, rank_time, r.num_preemptions)
            for r, level, rank_time, score in zip(requests, levels, since, scores, strict=True)
        ]

    def _kv_short_for(self, request: Request) -> bool:
        """Whether free KV blocks cannot hold `request`'s next chunk (after running decodes take theirs)."""
        chunk = min(request.num_tokens - request.num_computed_tokens, self.max_num_scheduled_tokens)
        # Running requests are scheduled first and may each need a fresh block for their next token.
        needed = kv_blocks(chunk, self.block_size) + len(self.running)
        return needed > self.kv_cache_manager.block_pool.get_num_free_blocks()

    def _evict_for_waiting(self) -> None:
        """Preempt one running request for the best waiting one, if the rule allows and the KV cache is
        what keeps it out. A full set of sequence slots is no reason to evict: one frees with the next
        finished request, and evicting for slots near saturation piles up recompute work."""
        if self.preemption_rule is None or not self.waiting:
            return
        # Only a running request of a heavier class than the candidate's can be evicted: without one
        # above the lightest class, nothing else needs a look. Every request in the engine has been
        # through the waiting queue, which set its priority to its level (`_classify`).
        heavier = [r for r in self.running if r.status == RequestStatus.RUNNING and r.priority > 0]
        if not heavier:
            return
        candidate = self.waiting.peek_request()
        if not self._kv_short_for(candidate):
            return
        running = [r for r in heavier if r.priority > candidate.priority]
        if not running:
            return
        waiting, *contenders = self._contenders([candidate, *running])
        victim = self.preemption_rule.choose_victim(waiting, list(zip(running, contenders, strict=True)))
        if victim is None or not self._request_blocks_can_be_freed(victim):
            return
        self.running.remove(victim)
        self._preempt_request(victim, time.monotonic())
        self.evictions[self.waiting.level(victim)] += 1
        logger.debug("evicted %s for waiting %s", victim.request_id, candidate.request_id)

    @contextmanager
    def _set_aside(self, requests: list[Request]) -> Iterator[None]:
        """Leave `requests` out of `self.running` for one `schedule()`, with as many fewer sequence slots
        for it to fill; afterwards they are back in their places, ahead of what the step admitted."""
        if not requests:
            yield
            return
        before: list[Request] = list(self.running)
        aside = {id(r) for r in requests}
        self.running = [r for r in before if id(r) not in aside]
        self.max_num_running_reqs -= len(requests)
        self.max_num_active_reqs -= len(requests)
        try:
            yield
        finally:
            self.max_num_running_reqs += len(requests)
            self.max_num_active_reqs += len(requests)
            after = {id(r) for r in self.running}
            kept = [r for r in before if id(r) in aside or id(r) in after]
            known = {id(r) for r in kept}
            self.running = kept + [r for r in self.running if id(r) not in known]

    def _preempt_request(self, request: Request, *args: Any, **kwargs: Any) -> None:
        self.preemptions[self.waiting.level(request)] += 1
        if self._costs is not None:
            self._costs.observer.forget(request.request_id)
        super()._preempt_request(request, *args, **kwargs)

    def finish_requests(self, request_ids: str | Iterable[str] | None, *args: Any, **kwargs: Any) -> Any:
        """Aborted requests (None: all of them) leave the prefill observer too."""
        if self._costs is None:
            return super().finish_requests(request_ids, *args, **kwargs)
        if request_ids is None:
            self._costs.observer = PrefillCostObserver()
            return super().finish_requests(request_ids, *args, **kwargs)
        ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
        for request_id in ids:
            self._costs.observer.forget(request_id)
        return super().finish_requests(ids, *args, **kwargs)

    def _prefill_cap(self) -> int:
        if not self._caps_chunks or not self.waiting:
            return 0
        prefilling = (
            self.waiting.level(r) for r in self.running if r.num_computed_tokens < r.num_prompt_tokens
        )
        return prefill_chunk_cap(
            [self.waiting.level(self.waiting.peek_request())], prefilling, self.rps.chunk_cap_tokens
        )

    @contextmanager
    def _chunk_cap(self, cap: int) -> Iterator[None]:
        """Apply vLLM's per-request prefill cap (long_prefill_token_threshold) for one step."""
        config = self.scheduler_config
        configured = config.long_prefill_token_threshold
        if cap and (configured == 0 or cap < configured):
            config.long_prefill_token_threshold = cap
        try:
            yield
        finally:
            config.long_prefill_token_threshold = configured


class RPSScheduler(_RPSMixin, Scheduler):
    """For engines without async scheduling (the CPU platform)."""


class RPSAsyncScheduler(_RPSMixin, AsyncScheduler):
    """For engines with async scheduling (the default on GPUs)."""


def scheduler_cls_name(async_scheduling: bool) -> str:
    cls = RPSAsyncScheduler if async_scheduling else RPSScheduler
    return f"{cls.__module__}.{cls.__qualname__}"
