"""Settings of the RPS scheduler, carried to the engine core in vLLM's `additional_config["rps"]`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rps_serve.scheduling.parameters import SHIPPED_POLICY, Policy
from rps_serve.scheduling.preemption import MAX_PREEMPTIONS
from rps_serve.scheduling.variant import SchedulingVariant

CONFIG_KEY = "rps"
EXTRA_ARGS_KEY = "rps"  # sampling_params.extra_args[EXTRA_ARGS_KEY]: the class as the ensemble computed it


@dataclass(frozen=True)
class RPSConfig:
    """How the engine orders, classifies and preempts (model.json's `rps` settings).

    - `cost_model`: a repository holding the ONNX estimator and classifier (`rps-serve train --out`);
      without one the engine classes by modality. `naive` forces that even with one (the ablation).
    - `chunk_cap_tokens`: caps prefill chunks while a lighter class waits behind a heavier prefill;
      0 disables it.
    - `decode_hold_s`: the longest a waiting request of a heavier class sits out steps for the lighter
      requests running when it arrived (`scheduling.holding`), in the paper's seconds on the aging
      clock; 0 disables it. `decode_hold_media_only` holds only requests with an image or a video.
    - `cost_order`: inside its class a request ranks as if it had arrived this many times its
      estimated prefill later (`SchedulingVariant.rank_time`); 0 keeps arrival order.
    - `light_steps`: while sand is present, heavier classes put few prefill tokens into a step
      (`scheduling.light_steps`): `light_step_tokens` of them, or with 0 the budget the cost model
      gives (twice the longest text it calls sand, at least a quarter of the step's token budget).
    - `aging_time_scale`: the aging clock as a multiple of the paper's seconds; None takes the cost
      model's report, or 1 without a cost model.
    - `observed_costs`: a JSON-lines file that gets a profile record of every completed prefill.

    Why each default is what it is: docs/decisions.md.
    """

    policy: Policy = SHIPPED_POLICY
    cost_model: str | None = None
    naive: bool = False
    chunk_cap_tokens: int = 0
    max_preemptions: int = MAX_PREEMPTIONS
    decode_hold_s: float = 0.0
    decode_hold_media_only: bool = False
    cost_order: float = 0.0
    light_steps: bool = False
    light_step_tokens: int = 0
    aging_time_scale: float | None = None
    observed_costs: str | None = None

    @property
    def variant(self) -> SchedulingVariant:
        """How these settings schedule, as the simulator runs them too."""
        return SchedulingVariant(
            self.policy,
            max_preemptions=self.max_preemptions,
            chunk_cap_tokens=self.chunk_cap_tokens,
            decode_hold_s=self.decode_hold_s,
            decode_hold_media_only=self.decode_hold_media_only,
            cost_order=self.cost_order,
            light_steps=self.light_steps,
            light_step_tokens=self.light_step_tokens,
        )

    def to_additional_config(self) -> dict[str, Any]:
        return {CONFIG_KEY: {**asdict(self), "policy": self.policy.value}}

    @classmethod
    def from_additional_config(cls, additional: dict[str, Any] | None) -> RPSConfig:
        raw = dict((additional or {}).get(CONFIG_KEY) or {})
        unknown = set(raw) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown RPS scheduler settings {sorted(unknown)}")
        if "policy" in raw:
            raw["policy"] = Policy.parse(raw["policy"])
        if raw.get("cost_model") is not None and not Path(raw["cost_model"]).is_dir():
            raise ValueError(f"RPS cost model repository {raw['cost_model']} does not exist")
        return cls(**raw)
