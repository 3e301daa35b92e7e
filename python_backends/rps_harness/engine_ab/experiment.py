"""`rps-serve ab`: policies side by side on a real vLLM engine, fresh engine per run, runs interleaved."""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rps_harness.engine_ab.async_llm_replay import build_requests, replay
from rps_harness.metrics import RequestRecords, concatenate_records, grouped_metrics
from rps_harness.workload.content import ContentLimits
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.source import Workload
from rps_serve.cost.runtime import cost_model_at
from rps_serve.scheduling.class_edges import engine_classes
from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.engine_args import engine_args

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class ABConfig:
    """One A/B experiment. Engine settings follow the CPU calibration runs (2,048-token steps)."""

    model: Path
    workload: Workload
    policies: tuple[Policy, ...]
    repeats: int = 3
    seed: int = 0  # of the content (fresh text and pixels per run)
    cost_model: Path | None = None
    max_num_batched_tokens: int = 2048
    max_model_len: int = 8192
    renderer_num_workers: int = 1
    rps_settings: dict[str, Any] = field(default_factory=dict)

    @property
    def content_limits(self) -> ContentLimits:
        return ContentLimits(max_text_tokens=self.max_model_len // 2)


def _engine(config: ABConfig, policy: Policy) -> Any:
    from vllm.v1.engine.async_llm import AsyncLLM

    args = engine_args(
        config.model,
        policy,
        config.cost_model,
        config.rps_settings,
        asynchronous=True,
        max_model_len=config.max_model_len,
        max_num_batched_tokens=config.max_num_batched_tokens,
        renderer_num_workers=config.renderer_num_workers,
    )
    return AsyncLLM.from_engine_args(args)


def run_ab(config: ABConfig) -> dict[str, Any]:
    """Every policy `repeats` times, interleaved (fcfs, rps, fcfs, rps, ...), on the same trace with
    fresh prompts and media per run; results pooled per policy, in `rps-serve simulate`'s JSON shape."""
    served = RequestFormat.of_model(config.model)
    cost_model = engine_classes(cost_model_at(config.cost_model), config.max_num_batched_tokens)
    trace = config.workload.trace()
    runs: dict[Policy, list[RequestRecords]] = {p: [] for p in config.policies}
    for repeat in range(config.repeats):
        for index, policy in enumerate(config.policies):
            content_seed = config.seed + 1000 * repeat + index  # fresh content: caches must not hit
            requests = build_requests(trace, served, cost_model, config.content_limits, content_seed)
            engine = _engine(config, policy)
            try:
                started = time.perf_counter()
                records = asyncio.run(replay(engine, requests, cost_model.num_classes))
                logger.info("%s run %d: %.1f s", policy.value, repeat + 1, time.perf_counter() - started)
            finally:
                engine.shutdown()
            runs[policy].append(records)
    results = {}
    for policy, policy_runs in runs.items():
        pooled = concatenate_records(policy_runs)
        results[policy.value] = {
            **grouped_metrics(pooled),
            "completed": int(pooled.completed.sum()),
            "requests": len(pooled.arrival_s),
            "runs": len(policy_runs),
        }
    settings = {k: v for k, v in asdict(config).items() if k != "workload"}
    settings.update(
        config.workload.to_json(), model=str(config.model), policies=[p.value for p in config.policies]
    )
    settings["cost_model"] = str(config.cost_model) if config.cost_model else None
    settings["media"] = asdict(served.media)
    return {"config": settings, "results": results}
