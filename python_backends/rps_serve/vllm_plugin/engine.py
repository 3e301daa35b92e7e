"""Engine arguments that put the RPS scheduler (or stock vLLM, for `fcfs`) into a vLLM V1 engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.config import RPSConfig

STOCK_POLICY = Policy.FCFS


def scheduler_engine_kwargs(
    policy: Policy,
    cost_model: Path | None = None,
    async_scheduling: bool = False,
    **rps_settings: Any,
) -> dict[str, Any]:
    """`EngineArgs` keyword arguments selecting the scheduler for `policy`.

    `fcfs` is stock vLLM (its own scheduler, FCFS queue) so that baselines are the real thing;
    every other policy runs the RPS scheduler with vLLM's priority policy underneath.
    """
    if policy is STOCK_POLICY:
        return {"scheduling_policy": "fcfs"}
    from rps_serve.vllm_plugin.scheduler import scheduler_cls_name

    config = RPSConfig(policy=policy, cost_model=str(cost_model) if cost_model else None, **rps_settings)
    return {
        "scheduling_policy": "priority",
        "scheduler_cls": scheduler_cls_name(async_scheduling),
        "additional_config": config.to_additional_config(),
    }
