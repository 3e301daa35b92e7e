"""What the repository's models are configured with: `vllm_model/model.json`, with environment overrides.

model.json holds the model path, the scheduling policy, the cost-model repository, the RPS scheduler's
settings, vLLM engine arguments, the media limits and `max_pending_requests`: how many requests
`vllm_model` holds at once (queued or running) before it answers UNAVAILABLE, like the
`max_queue_size` of Triton's own queue policy (absent or null: no limit, as Triton's default), and
`class_source`: whether `vllm_model` checks the class a request carries (`verify`, the default) or takes
it as given (`trust`), see `triton.classes`; `front_end_workers`, the threads that decode and render
requests' media (`triton.front_end`), and `front_end`: whether they take requests in class order and
render them for the engine (`class`) or in arrival order, leaving the rendering to vLLM's own renderer
(`vllm`); absent or null: `class` under the plug-in's policies, `vllm` under the stock baselines, each
as it ships (set it to compare front ends under one policy); `cost_model_online`: whether `vllm_model`
refits the cost model from the engine's observed prefill costs while it serves (`cost.online`):
`false` (or absent) keeps the repository's fit, `true` or an object of `OnlineOptions` fields refits it.
`engine_restart_deadline_s`: how long a dead engine may take to serve again before the replica reports
itself in need of replacing (`triton.engine_supervisor`); absent or null: three times the first engine start
plus its shutdown, at least two minutes.
Relative paths are taken from the model repository's root, so a fresh checkout works wherever it lies.
`RPS_MODEL`, `RPS_POLICY` and `RPS_FRONT_END` override the model, the policy and the front end
(`rps-serve serve --model/--policy` sets the first two); `RPS_ENGINE_ARGS` and `RPS_SCHEDULER` (JSON)
override engine arguments and the RPS scheduler's settings (`rps`) key by key.
"""

from __future__ import annotations

import enum
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from rps_serve.cost.online import OnlineOptions
from rps_serve.scheduling.parameters import FRONT_END_WORKERS, SHIPPED_POLICY, Policy
from rps_serve.triton.classes import ClassSource
from rps_serve.triton.media import MediaLimits
from rps_serve.triton.names import SETTINGS_FILE as SETTINGS_FILE
from rps_serve.triton.names import SETTINGS_NAME as SETTINGS_NAME
from rps_serve.vllm_plugin.engine_args import scheduler_engine_kwargs

MODEL_ENV = "RPS_MODEL"
POLICY_ENV = "RPS_POLICY"
FRONT_END_ENV = "RPS_FRONT_END"
RUN_LOG_ENV = "RPS_RUN_LOG"  # where `vllm_model` writes its run log (`triton.run_log`), if set
ENGINE_ARGS_ENV = "RPS_ENGINE_ARGS"
SCHEDULER_ENV = "RPS_SCHEDULER"


class FrontEndMode(enum.Enum):
    """Who orders and renders requests before the engine (model.json's `front_end`)."""

    CLASS = "class"  # the front end's workers, in class order, render the engine's input themselves
    VLLM = "vllm"  # the workers decode media in arrival order; vLLM's renderer does the rest

    @classmethod
    def parse(cls, name: str) -> FrontEndMode:
        try:
            return cls(name.strip().lower())
        except ValueError:
            choices = ", ".join(m.value for m in cls)
            raise ValueError(f"front_end must be one of {choices}, got {name!r}") from None

    @classmethod
    def shipped(cls, policy: Policy) -> FrontEndMode:
        """Each policy's front end as it ships: vLLM's for the stock baselines, ours for the plug-in."""
        return cls.VLLM if policy.is_stock else cls.CLASS


@dataclass(frozen=True)
class ServingSettings:
    model: Path
    policy: Policy
    cost_model: Path | None
    rps: dict[str, Any] = field(default_factory=dict)
    engine_args: dict[str, Any] = field(default_factory=dict)
    media: MediaLimits = field(default_factory=MediaLimits)
    max_pending_requests: int | None = None
    class_source: ClassSource = ClassSource.VERIFY
    front_end_workers: int = FRONT_END_WORKERS
    front_end: FrontEndMode | None = None  # None: the policy's own (`FrontEndMode.shipped`)
    cost_model_online: OnlineOptions = field(default_factory=OnlineOptions)
    engine_restart_deadline_s: float | None = None  # None: from the first engine start

    @property
    def front_end_mode(self) -> FrontEndMode:
        return self.front_end or FrontEndMode.shipped(self.policy)

    def engine_kwargs(self) -> dict[str, Any]:
        """`AsyncEngineArgs` keyword arguments: the engine arguments plus the scheduler for the policy."""
        return {
            **self.engine_args,
            "model": str(self.model),
            # Per-request stats (preemptions) reach RequestOutput.metrics only with stats on.
            "disable_log_stats": False,
            # The RPS scheduler must match the engine's loop: its async variant where async scheduling is on.
            **scheduler_engine_kwargs(
                self.policy,
                cost_model=self.cost_model,
                async_scheduling=bool(self.engine_args.get("async_scheduling")),
                **self.rps,
            ),
        }


SETTINGS_KEYS = frozenset(f.name for f in fields(ServingSettings))  # model.json's top-level keys


def _path(value: str, repository: Path) -> Path:
    path = Path(value)
    return path if path.is_absolute() else (repository / path).resolve()


def read_settings(file: Path, repository: Path, environ: Mapping[str, str] | None = None) -> ServingSettings:
    """The settings in `file` (a model.json), relative paths taken from `repository`.

    The model directory need not exist here (a deployment's model.json names where weights will be
    mounted); `load_settings` checks it before a server uses it.
    """
    env = os.environ if environ is None else environ
    try:
        raw = json.loads(file.read_text())
    except (OSError, json.JSONDecodeError) as error:
        raise ValueError(f"cannot read {file}: {error}") from None
    unknown = set(raw) - SETTINGS_KEYS
    if unknown:
        raise ValueError(
            f"{file}: unknown settings {sorted(unknown)}; expected some of {sorted(SETTINGS_KEYS)}"
        )
    engine_args = {**raw.get("engine_args", {}), **json.loads(env.get(ENGINE_ARGS_ENV) or "{}")}
    rps = {**raw.get("rps", {}), **json.loads(env.get(SCHEDULER_ENV) or "{}")}
    model = env.get(MODEL_ENV) or raw.get("model")
    if not model:
        raise ValueError(f"{file}: no 'model' given (set it there or in {MODEL_ENV})")
    cost_model = raw.get("cost_model")
    max_pending = raw.get("max_pending_requests")
    if max_pending is not None and (type(max_pending) is not int or max_pending < 1):
        raise ValueError(
            f"{file}: max_pending_requests must be a positive integer or null, got {max_pending!r}"
        )
    try:
        class_source = ClassSource(raw.get("class_source", ServingSettings.class_source.value))
    except ValueError:
        choices = [c.value for c in ClassSource]
        raise ValueError(
            f"{file}: class_source must be one of {choices}, got {raw['class_source']!r}"
        ) from None
    front_end = env.get(FRONT_END_ENV) or raw.get("front_end")
    workers = raw.get("front_end_workers", ServingSettings.front_end_workers)
    if type(workers) is not int or workers < 1:
        raise ValueError(f"{file}: front_end_workers must be a positive integer, got {workers!r}")
    deadline = raw.get("engine_restart_deadline_s")
    if deadline is not None and (type(deadline) not in (int, float) or not 0 < deadline < math.inf):
        raise ValueError(
            f"{file}: engine_restart_deadline_s must be a positive number of seconds or null, "
            f"got {deadline!r}"
        )
    return ServingSettings(
        model=_path(model, repository),
        policy=Policy.parse(env.get(POLICY_ENV) or raw.get("policy", SHIPPED_POLICY.value)),
        cost_model=None if cost_model is None else _path(cost_model, repository),
        rps=rps,
        engine_args=engine_args,
        media=MediaLimits.from_mapping(raw.get("media", {})),
        max_pending_requests=max_pending,
        class_source=class_source,
        front_end_workers=workers,
        front_end=None if front_end is None else FrontEndMode.parse(str(front_end)),
        cost_model_online=OnlineOptions.from_setting(raw.get("cost_model_online")),
        engine_restart_deadline_s=None if deadline is None else float(deadline),
    )


def load_settings(
    repository: Path, environ: Mapping[str, str] | None = None, model: str = SETTINGS_FILE.parent.name
) -> ServingSettings:
    """The model.json of the repository's engine model `model` (`vllm_model`; a repository with an
    engine per policy has more, `local.repository.policy_repository`), for a server about to start:
    the served model must exist."""
    settings = read_settings(repository / model / SETTINGS_NAME, repository, environ)
    if not (settings.model / "config.json").is_file():
        raise ValueError(
            f"no model at {settings.model}: build the tiny model with `make tiny-model`, or set {MODEL_ENV} "
            "(`rps-serve serve --model DIR`)"
        )
    return settings
