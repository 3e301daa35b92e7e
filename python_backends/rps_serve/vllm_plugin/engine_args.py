"""Engine arguments that put the RPS scheduler (or stock vLLM, for the baselines) into a vLLM V1 engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rps_serve.scheduling.parameters import Policy
from rps_serve.vllm_plugin.config import RPSConfig
from rps_serve.vllm_plugin.version import check_installed_vllm


def scheduler_engine_kwargs(
    policy: Policy,
    cost_model: Path | None = None,
    async_scheduling: bool = False,
    **rps_settings: Any,
) -> dict[str, Any]:
    """`EngineArgs` keyword arguments selecting the scheduler for `policy`.

    `fcfs`, `vllm-priority` and `modality-priority` are stock vLLM (its own scheduler and queue), so
    that baselines are the real thing; every other policy runs the RPS scheduler with vLLM's priority
    policy underneath. An unsupported vLLM release is refused here, before an engine starts
    (`vllm_plugin.version`), and again by the scheduler in the engine-core process.
    """
    if policy.is_stock:
        return {"scheduling_policy": policy.row.vllm_policy}
    check_installed_vllm()
    from rps_serve.vllm_plugin.scheduler import scheduler_cls_name

    config = RPSConfig(policy=policy, cost_model=str(cost_model) if cost_model else None, **rps_settings)
    return {
        "scheduling_policy": policy.row.vllm_policy,
        "scheduler_cls": scheduler_cls_name(async_scheduling),
        "additional_config": config.to_additional_config(),
    }


def engine_args(
    model: Path,
    policy: Policy,
    cost_model: Path | None = None,
    rps_settings: dict[str, Any] | None = None,
    asynchronous: bool = False,
    **overrides: Any,
) -> Any:
    """`EngineArgs` (or `AsyncEngineArgs`) for a tiny Qwen2-VL on the CPU build with `policy`'s scheduler.

    float32 (bf16 needs AMX permissions on this CPU class), eager mode (no compile at start-up), one
    image or video per prompt; `overrides` are further `EngineArgs` fields.
    """
    from vllm import AsyncEngineArgs, EngineArgs

    settings: dict[str, Any] = {
        "model": str(model),
        "dtype": "float32",
        "enforce_eager": True,
        "limit_mm_per_prompt": {"image": 1, "video": 1},
        **scheduler_engine_kwargs(policy, cost_model, **(rps_settings or {})),
        **overrides,
    }
    return (AsyncEngineArgs if asynchronous else EngineArgs)(**settings)
