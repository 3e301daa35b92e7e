"""Event loop of one simulated deployment: front end, optional encoder GPUs (ModServe), and the engine."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np

from rps_harness.metrics import RequestRecords
from rps_harness.sim.engine import Engine, EngineConfig, EngineWork, StepRecord
from rps_harness.sim.frontend import PreprocessCosts, worker_pool
from rps_harness.sim.hardware import Execution, GpuSpec, ModelSpec, kv_capacity_tokens
from rps_harness.sim.timing import TimingModel, timing_from_lines
from rps_harness.workload.trace import Trace
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality
from rps_serve.scheduling.holding import DecodeHolds
from rps_serve.scheduling.light_steps import light_step_budget
from rps_serve.scheduling.parameters import COST_ORDER, Policy, class_ladder, in_time_units
from rps_serve.scheduling.queues import ClassQueues
from rps_serve.scheduling.variant import SchedulingVariant
from rps_serve.vllm_plugin.config import RPSConfig


@dataclass(frozen=True)
class PolicyVariant:
    """A named way to run the deployment: how it schedules (`scheduling`, the value the plug-in
    receives too), where classes come from, and the layout.

    `naive_classes`: text/image/video as sand/pebbles/rocks instead of the cost model's classes.
    `evicts`: a waiting request may evict a running one where the policy's `PreemptionRule` allows
    (False, an ablation, leaves only vLLM's own preemption of a running request that cannot grow).
    `modserve`: half the GPUs (rounded down) run the vision encoder, one request per GPU, first come
    first served; the other half run the LLM engine with tensor parallelism.
    """

    name: str
    scheduling: SchedulingVariant
    naive_classes: bool = False
    evicts: bool = True
    modserve: bool = False

    @property
    def policy(self) -> Policy:
        return self.scheduling.policy


# The `rps-cap` chunk cap for the simulated H100 engine (8,192-token steps).
SIM_CHUNK_CAP_TOKENS = 2048

POLICY_VARIANTS: dict[str, PolicyVariant] = {
    variant.name: variant
    for variant in (
        # modality-priority orders by modality: the naive classifier's levels.
        *(
            PolicyVariant(policy.value, SchedulingVariant(policy), naive_classes=policy.row.by_modality)
            for policy in Policy
        ),
        PolicyVariant("rps-naive", SchedulingVariant(Policy.RPS), naive_classes=True),
        PolicyVariant("rps-cap", SchedulingVariant(Policy.RPS, chunk_cap_tokens=SIM_CHUNK_CAP_TOKENS)),
        PolicyVariant("rps-no-evict", SchedulingVariant(Policy.RPS), evicts=False),
        PolicyVariant("headroom-cost", SchedulingVariant(Policy.HEADROOM, cost_order=COST_ORDER)),
        PolicyVariant("headroom-light", SchedulingVariant(Policy.HEADROOM, light_steps=True)),
        PolicyVariant("modserve", SchedulingVariant(Policy.FCFS), modserve=True),
        PolicyVariant("modserve-rps", SchedulingVariant(Policy.RPS), modserve=True),
    )
}


def policy_variant(name: str) -> PolicyVariant:
    if name not in POLICY_VARIANTS:
        raise ValueError(f"unknown policy {name!r}; expected one of {', '.join(POLICY_VARIANTS)}")
    return POLICY_VARIANTS[name]


def with_light_budget(variant: PolicyVariant, edge_tokens: int, token_budget: int) -> PolicyVariant:
    """`variant` with its light steps' budget resolved (`light_steps.light_step_budget`) from
    `edge_tokens`, the longest text its cost model calls sand, on `token_budget`-token steps, unless
    its own settings give one."""
    scheduling = variant.scheduling
    if not scheduling.light_steps or scheduling.light_step_tokens:
        return variant
    budget = light_step_budget(edge_tokens, token_budget)
    return replace(variant, scheduling=replace(scheduling, light_step_tokens=budget))


def served_settings(name: str) -> tuple[Policy, dict[str, Any]]:
    """The policy and model.json `rps` settings that serve variant `name` through Triton: its policy,
    and the plug-in's settings (`RPSConfig`) where its scheduling differs from the policy's own. Only
    a variant that the plug-in's settings express has them (not `modserve` or `rps-no-evict`)."""
    variant = policy_variant(name)
    own = SchedulingVariant(variant.policy)
    changed = {
        f.name: getattr(variant.scheduling, f.name)
        for f in fields(SchedulingVariant)
        if getattr(variant.scheduling, f.name) != getattr(own, f.name)
    }
    naive = variant.naive_classes and not variant.policy.row.by_modality
    expressed = set(changed) <= set(RPSConfig.__dataclass_fields__)
    if variant.modserve or naive or not variant.evicts or not expressed:
        raise ValueError(f"the plug-in's settings do not express {name!r}")
    return variant.policy, changed


def served_names() -> list[str]:
    """Every variant a server can run (`served_settings`): the policies, then the other variants."""
    names = [policy.value for policy in Policy]
    for name in POLICY_VARIANTS:
        if name not in names:
            try:
                served_settings(name)
            except ValueError:
                continue
            names.append(name)
    return names


@dataclass(frozen=True)
class Deployment:
    """A model on `gpus` H100s behind vLLM in `execution` mode, with its isolated prefill lines measured
    (in graph mode) on `profile_gpus`. `kv_capacity_tokens`: the LLM engine's KV cache in tokens where
    it is set (vLLM's `num_gpu_blocks_override` times the block size, as a KV-pressure run sets it),
    else what the GPUs' memory leaves after the weights. `aging_time_scale`: the policies' clock as
    a multiple of the paper's seconds (the plug-in's, from its cost model's report)."""

    spec: ModelSpec
    gpus: int
    lines: Mapping[Modality, PrefillLine]
    profile_gpus: int
    preprocess: PreprocessCosts = field(default_factory=PreprocessCosts)
    gpu: GpuSpec = field(default_factory=GpuSpec)
    max_num_batched_tokens: int = 8192
    max_num_seqs: int = 1024
    block_size: int = 16
    execution: Execution = Execution.GRAPH
    kv_capacity_tokens: int | None = None
    aging_time_scale: float = 1.0

    def timing(self, gpus: int) -> TimingModel:
        return timing_from_lines(self.lines, self.spec, gpus, self.profile_gpus, self.gpu, self.execution)

    def engine_config(self, gpus: int) -> EngineConfig:
        return EngineConfig(
            kv_capacity_tokens=(
                kv_capacity_tokens(self.spec, gpus, self.gpu)
                if self.kv_capacity_tokens is None
                else self.kv_capacity_tokens
            ),
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            block_size=self.block_size,
        )

    def layout(self, modserve: bool) -> tuple[int, int]:
        """(encoder GPUs, LLM GPUs)."""
        if not modserve:
            return 0, self.gpus
        if self.gpus < 2:
            raise ValueError("modserve needs at least 2 GPUs: half encode, half run the LLM")
        return self.gpus // 2, self.gpus - self.gpus // 2

    def isolated_engine_s(self, trace: Trace) -> np.ndarray:
        """Engine seconds to the first token of every request of `trace` run alone on the deployment."""
        return self.timing(self.gpus).isolated_ttft_s(
            trace.modality, trace.prompt_tokens, trace.modality_tokens, self.max_num_batched_tokens
        )

    def isolated_ttft_s(self, trace: Trace) -> np.ndarray:
        """TTFT of every request of `trace` run alone on the whole deployment (front end + engine)."""
        preprocess = self.preprocess.seconds(trace.modality, trace.prompt_tokens, trace.modality_tokens)
        return preprocess + self.isolated_engine_s(trace)


@dataclass(frozen=True)
class SimOutcome:
    """Per-request records, and `ready_s`: when the engine saw each request (after the front end)."""

    records: RequestRecords
    ready_s: np.ndarray
    utilization: float
    preemptions: int
    steps: int
    makespan_s: float


def simulate(
    trace: Trace,
    levels: np.ndarray,
    num_levels: int,
    variant: PolicyVariant,
    deployment: Deployment,
    observer: Callable[[StepRecord], None] | None = None,
    prefill_s: np.ndarray | None = None,
) -> SimOutcome:
    """Run `trace` through the deployment under `variant`, with class level `levels[i]` and (for a
    cost order) estimated prefill seconds `prefill_s[i]` for request i."""
    encoder_gpus, llm_gpus = deployment.layout(variant.modserve)
    timing = deployment.timing(llm_gpus)
    prep = deployment.preprocess
    preprocessed, _ = worker_pool(
        trace.arrival_s,
        prep.seconds(trace.modality, trace.prompt_tokens, trace.modality_tokens),
        prep.workers,
        levels=None if variant.policy.is_stock else levels,
    )
    encoder_busy = 0.0
    if variant.modserve:
        remote = deployment.timing(1).encoder_s(trace.modality, trace.modality_tokens)
        ready, encoder_busy = worker_pool(preprocessed, remote, encoder_gpus)
        local = np.zeros(len(trace))
    else:
        ready, local = preprocessed, timing.encoder_s(trace.modality, trace.modality_tokens)

    engine = engine_for(
        trace, ready, local, levels, num_levels, variant, deployment, llm_gpus, observer, prefill_s
    )
    result = engine.run()
    records = trace_records(trace, result.first_token_s, result.finish_s, levels, num_levels)
    makespan = records.makespan_s
    gpu_seconds = result.busy_s * llm_gpus + encoder_busy
    utilization = gpu_seconds / (deployment.gpus * makespan) if makespan > 0 else 0.0
    return SimOutcome(records, ready, utilization, int(result.preemptions.sum()), result.steps, makespan)


def engine_for(
    trace: Trace,
    ready_s: np.ndarray,
    encoder_s: np.ndarray,
    levels: np.ndarray,
    num_levels: int,
    variant: PolicyVariant,
    deployment: Deployment,
    gpus: int,
    observer: Callable[[StepRecord], None] | None = None,
    prefill_s: np.ndarray | None = None,
) -> Engine:
    """The LLM engine of the requests of `trace` on `gpus` of the deployment's GPUs under `variant`
    (with light steps, their budget resolved: `with_light_budget`), with `encoder_s` of vision encoding
    charged to its steps; its Queue Manager reads the engine's clock.
    `prefill_s`: each request's estimated prefill seconds, which a cost order needs (`rank_times`)."""
    clock = _EngineClock()
    scale = deployment.aging_time_scale
    ladder = in_time_units(class_ladder(num_levels), scale)
    scheduling = variant.scheduling
    queues: ClassQueues[int] = ClassQueues(scheduling.regulator(ladder), clock=clock)
    holds: DecodeHolds[int] | None = scheduling.decode_holds(scale, num_levels, weak=False)
    exempt = None
    if holds is not None:
        # The plug-in exempts a request without encoder inputs in the engine: a text, and under
        # modserve every request (other GPUs encode the media).
        exempt = scheduling.decode_hold_media_only & ((trace.modality_tokens == 0) | variant.modserve)
    config = deployment.engine_config(gpus)
    engine = Engine(
        EngineWork(
            ready_s=ready_s,
            arrival_s=trace.arrival_s,
            prompt_tokens=trace.prompt_tokens,
            output_tokens=trace.output_tokens,
            modality_tokens=trace.modality_tokens,
            encoder_s=encoder_s,
            level=levels,
            rank_s=rank_times(scheduling, trace.arrival_s, prefill_s),
        ),
        config,
        deployment.timing(gpus),
        queues,
        scheduling.preemption_rule() if variant.evicts else None,
        scheduling.chunk_cap_tokens,
        observer,
        holds,
        exempt,
        scheduling.light_budget(config.max_num_batched_tokens),
    )
    clock.engine = engine
    return engine


def rank_times(
    scheduling: SchedulingVariant, arrival_s: np.ndarray, prefill_s: np.ndarray | None
) -> np.ndarray | None:
    """The times requests rank from in their class queues under `scheduling`'s cost order, each as
    the plug-in computes it (`SchedulingVariant.rank_time`); None (arrival) without a cost order."""
    if not scheduling.cost_order:
        return None
    if prefill_s is None:
        raise ValueError("a cost order needs every request's estimated prefill seconds")
    ranks = map(scheduling.rank_time, arrival_s.tolist(), prefill_s.tolist())
    return np.fromiter(ranks, dtype=float, count=len(arrival_s))


def trace_records(
    trace: Trace, first_token_s: np.ndarray, finish_s: np.ndarray, levels: np.ndarray, num_levels: int
) -> RequestRecords:
    """Per-request records of `trace` from its first-token and finish times."""
    return RequestRecords(
        arrival_s=trace.arrival_s,
        first_token_s=first_token_s,
        finish_s=finish_s,
        output_tokens=trace.output_tokens,
        modality=trace.modality,
        level=levels,
        num_levels=num_levels,
        kind=trace.kind,
    )


class _EngineClock:
    """The engine's simulated time, read by the Queue Manager at every iteration."""

    engine: Engine | None = None

    def __call__(self) -> float:
        return 0.0 if self.engine is None else self.engine.now
