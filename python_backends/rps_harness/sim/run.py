"""One `rps-serve simulate` run: profile, cost model, trace, then every policy and its metrics as JSON."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.metrics import grouped_metrics, slo_metrics
from rps_harness.service_bound import EngineRun
from rps_harness.sim.breakdown import stage_means
from rps_harness.sim.cluster import ClusterOutcome, simulate_cluster
from rps_harness.sim.engine import StepRecord
from rps_harness.sim.hardware import Execution, model_spec
from rps_harness.sim.measured import as_served, read_measured_profile
from rps_harness.sim.online import trace_features
from rps_harness.sim.routing import Routing
from rps_harness.sim.simulator import (
    Deployment,
    PolicyVariant,
    SimOutcome,
    policy_variant,
    simulate,
    with_light_budget,
)
from rps_harness.sim.timing import fit_lines
from rps_harness.workload.shapes import ISOLATION, SERVING
from rps_harness.workload.source import Workload
from rps_harness.workload.synthetic_profile import reference_profile
from rps_harness.workload.trace import Trace
from rps_serve.cost import features as cols
from rps_serve.cost.model import CostModel, ModalityClasses
from rps_serve.cost.training import TrainingOptions, fit_cost_model
from rps_serve.profiles.records import ProfileRecord, read_records
from rps_serve.profiles.reference import reference_model
from rps_serve.requests import Modality
from rps_serve.scheduling.class_edges import engine_classes
from rps_serve.scheduling.light_steps import sand_edge_tokens, wait_stretch

logger = logging.getLogger(__name__)

SLO_PERCENTILE = 99
SERVING_SHAPES_PROFILES = "llava-onevision-"


@dataclass(frozen=True)
class SimulationConfig:
    """What one `simulate` run needs besides the policies.

    The simulated device is `reference` (a published H100 model: its prefill lines and its sizes, KV
    bytes per token and weights), with the prefill lines fitted to `profile` instead where one is given
    (JSONL records of isolated runs on `profile_gpus` GPUs), or a measured serving stack (`measured`,
    `sim.measured`), which sets everything. `seed` drives the reference profile's records and the
    classifier's k-means; the workload has its own. `execution` applies to the H100 devices (a
    measured stack's steps are what was measured). `kv_capacity_tokens` replaces the device's KV cache
    (a KV-pressure run); None keeps it.
    """

    reference: str
    gpus: int
    workload: Workload
    seed: int = 0
    classes: int = 3
    profile: Path | None = None
    profile_gpus: int = 1
    measured: Path | None = None
    execution: Execution = Execution.GRAPH
    kv_capacity_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.profile is not None and self.measured is not None:
            raise ValueError("a profile file and a measured stack both set the device: give one")
        if self.kv_capacity_tokens is not None and self.kv_capacity_tokens <= 0:
            raise ValueError(f"the KV cache must hold some tokens, got {self.kv_capacity_tokens}")

    def describe(self) -> str:
        """The simulated device, as a title names it."""
        return str(self.measured or self.profile or self.reference)

    def to_json(self) -> dict[str, Any]:
        return {
            "reference": self.reference,
            "profile": None if self.profile is None else str(self.profile),
            "profile_gpus": self.profile_gpus,
            "measured": None if self.measured is None else str(self.measured),
            "gpus": self.gpus,
            "seed": self.seed,
            "classes": self.classes,
            "execution": self.execution.value,
        }


@dataclass(frozen=True)
class SimulationSetup:
    """Everything policies share within one run: deployment, trace, class levels and the cost model's
    prefill estimates (in the deployment's seconds, for a cost order)."""

    deployment: Deployment
    trace: Trace
    levels: np.ndarray
    naive_levels: np.ndarray
    num_levels: int
    prefill_s: np.ndarray | None = None
    sand_edge_tokens: int = 0  # the longest text the cost model calls sand (light steps' budget)


def default_shapes(reference: str, profile: Path | None = None, measured: Path | None = None) -> str:
    """The paper's serving shapes for the LLaVA-OneVision reference devices (the models the paper
    served), the isolated-run shapes for a profile file or a measured stack."""
    on_reference = profile is None and measured is None
    return SERVING if on_reference and reference.startswith(SERVING_SHAPES_PROFILES) else ISOLATION


def device_profile(config: SimulationConfig) -> tuple[Deployment, list[ProfileRecord]]:
    """The simulated device of `config` (with its KV cache where `config` sets one), and the profile
    its cost model is trained on."""
    deployment, records = _device(config)
    if config.kv_capacity_tokens is not None:
        deployment = replace(deployment, kv_capacity_tokens=config.kv_capacity_tokens)
    return deployment, records


def _device(config: SimulationConfig) -> tuple[Deployment, list[ProfileRecord]]:
    if config.measured is not None:
        measured = read_measured_profile(config.measured)
        return measured.deployment(), cost_profile_records(measured.cost_profile, config.seed)
    spec = model_spec(config.reference)
    if config.profile is None:
        lines = reference_model(config.reference).lines
        deployment = Deployment(spec, config.gpus, lines, spec.profile_gpus, execution=config.execution)
        return deployment, reference_profile(config.reference, seed=config.seed)
    records = list(read_records(config.profile))
    deployment = Deployment(
        spec, config.gpus, fit_lines(records), config.profile_gpus, execution=config.execution
    )
    return deployment, records


def cost_profile_records(cost_profile: str, seed: int) -> list[ProfileRecord]:
    """What a measured stack's cost model was trained on: a profile file (JSONL records, as the
    served repository's `rps-serve train --profile-data`), else a named reference's synthetic profile."""
    path = Path(cost_profile)
    if path.suffix == ".jsonl":
        return list(read_records(path))
    return reference_profile(cost_profile, seed=seed)


def class_levels(trace: Trace, model: CostModel) -> np.ndarray:
    """Class level of every request of `trace`, classified in one batch."""
    return model.levels(trace_features(trace))


def prepare(config: SimulationConfig) -> SimulationSetup:
    deployment, records = device_profile(config)
    fitted = fit_cost_model(records, TrainingOptions(num_classes=config.classes, seed=config.seed))
    model = engine_classes(fitted, deployment.max_num_batched_tokens)
    trace = config.workload.trace()
    naive = class_levels(trace, ModalityClasses())
    cost, levels = model.estimate(trace_features(trace))
    return SimulationSetup(
        deployment,
        trace,
        levels,
        naive,
        config.classes,
        cost[:, cols.PREFILL_S].astype(float),
        sand_edge_tokens(model),
    )


def isolated_slo_s(setup: SimulationSetup) -> dict[Modality, float]:
    """Per modality, the P99 TTFT of the trace's requests each run alone: the SLO at scale 1."""
    isolated = setup.deployment.isolated_ttft_s(setup.trace)
    slo = {}
    for modality in Modality:
        mine = isolated[setup.trace.modality == modality.index]
        slo[modality] = float(np.percentile(mine, SLO_PERCENTILE)) if mine.size else float("nan")
    return slo


def served_variant(setup: SimulationSetup, name: str) -> PolicyVariant:
    """Policy variant `name` as the setup's engine runs it: with a measured stack's plug-in settings
    (`as_served`) and its light steps' budget resolved from the setup's cost model."""
    variant = as_served(policy_variant(name), setup.deployment)
    return with_light_budget(variant, setup.sand_edge_tokens, setup.deployment.max_num_batched_tokens)


def run_policy(
    setup: SimulationSetup, name: str, observer: Callable[[StepRecord], None] | None = None
) -> SimOutcome:
    variant = served_variant(setup, name)
    if variant.naive_classes:
        levels, num_levels = setup.naive_levels, ModalityClasses.num_classes
    else:
        levels, num_levels = setup.levels, setup.num_levels
    return simulate(
        setup.trace, levels, num_levels, variant, setup.deployment, observer, prefill_s=setup.prefill_s
    )


def bounded_run(setup: SimulationSetup, name: str) -> tuple[SimOutcome, EngineRun | None]:
    """`run_policy`, and the run as `service_bound` reads it where the policy has light steps (None
    where it has none, and so no floor)."""
    steps: list[StepRecord] = []
    outcome = run_policy(setup, name, steps.append)
    variant = served_variant(setup, name)
    token_budget = setup.deployment.max_num_batched_tokens
    budget = variant.scheduling.light_budget(token_budget)
    if not budget:
        return outcome, None
    records = outcome.records
    scheduled = np.full(len(records.arrival_s), np.inf)
    for step in reversed(steps):  # each request's earliest step wins
        for request, _ in step.scheduled:
            scheduled[request] = step.start_s
    engine = setup.deployment.engine_config(setup.deployment.layout(variant.modserve)[1])
    used_before = np.array([0] + [step.used_blocks for step in steps[:-1]])  # when each was scheduled
    start = np.array([step.start_s for step in steps])
    run = EngineRun(
        queued_s=outcome.ready_s,
        scheduled_s=scheduled,
        first_token_s=np.nan_to_num(records.first_token_s, nan=np.inf),
        level=records.level,
        prompt_tokens=setup.trace.prompt_tokens,
        step_start_s=start,
        step_end_s=start + np.array([step.duration_s for step in steps]),
        step_decodes=np.array([step.decodes for step in steps]),
        token_budget=token_budget,
        light_budget=budget,
        num_levels=records.num_levels,
        step_free_tokens=(engine.num_blocks - used_before) * engine.block_size,
        reserve_tokens=int(variant.policy.row.kv_reserve * engine.num_blocks * engine.block_size),
    )
    return outcome, run


def light_stretch(setup: SimulationSetup, name: str) -> float:
    """How much policy variant `name`'s light steps may stretch a heavier class's wait on the setup's
    engine (`light_steps.wait_stretch`; 1 without them)."""
    token_budget = setup.deployment.max_num_batched_tokens
    return wait_stretch(token_budget, served_variant(setup, name).scheduling.light_budget(token_budget))


def run_cluster(setup: SimulationSetup, name: str, replicas: int, routing: Routing) -> ClusterOutcome:
    """`run_policy` on `replicas` copies of the deployment behind a `routing` router."""
    variant = with_light_budget(
        policy_variant(name), setup.sand_edge_tokens, setup.deployment.max_num_batched_tokens
    )
    return simulate_cluster(
        setup.trace, setup.levels, setup.num_levels, variant, setup.deployment, replicas, routing
    )


def policy_result(outcome: SimOutcome, slo_s: dict[Modality, float]) -> dict[str, Any]:
    """Metrics of every request, and (`steady_state`) of those between ramp-up and drain."""
    records = outcome.records
    steady = records.steady_state()
    window = records.arrival_s[steady]
    start, end = (float(window.min()), float(window.max())) if window.size else (0.0, 0.0)
    steady_records = records.select(steady)
    return {
        **grouped_metrics(records),
        "steady_state": {
            "window_s": [start, end],
            **grouped_metrics(steady_records),
            "slo": slo_metrics(steady_records, slo_s, end - start),
        },
        "utilization": outcome.utilization,
        "idle_capacity": 1.0 - outcome.utilization,
        "completed": int(records.completed.sum()),
        "preemptions": outcome.preemptions,
        "steps": outcome.steps,
        "makespan_s": outcome.makespan_s,
        "slo": slo_metrics(records, slo_s, outcome.makespan_s),
        "stages": stage_means(
            records.arrival_s,
            outcome.ready_s,
            records.first_token_s,
            records.modality,
        ),
    }


def run_simulation(
    config: SimulationConfig, policies: Sequence[str]
) -> tuple[dict[str, Any], dict[str, SimOutcome]]:
    """The JSON report of `rps-serve simulate` and the raw outcome of every policy."""
    for name in policies:
        policy_variant(name)  # fail on a bad name before any work
    setup = prepare(config)
    slo = isolated_slo_s(setup)
    outcomes: dict[str, SimOutcome] = {}
    results: dict[str, Any] = {}
    for name in policies:
        started = time.perf_counter()
        outcomes[name] = run_policy(setup, name)
        logger.info("%s: simulated in %.2f s", name, time.perf_counter() - started)
        results[name] = policy_result(outcomes[name], slo)
    report = {
        "config": {
            **config.to_json(),
            **config.workload.to_json(),
            "policies": list(policies),
            "kv_capacity_tokens": setup.deployment.engine_config(setup.deployment.gpus).kv_capacity_tokens,
            "max_num_batched_tokens": setup.deployment.max_num_batched_tokens,
            "max_num_seqs": setup.deployment.max_num_seqs,
            "block_size": setup.deployment.block_size,
            "preprocess_workers": setup.deployment.preprocess.workers,
            "isolated_p99_ttft_s": {m.value: v for m, v in slo.items()},
            "class_counts": np.bincount(setup.levels, minlength=setup.num_levels).tolist(),
        },
        "results": results,
    }
    return report, outcomes
