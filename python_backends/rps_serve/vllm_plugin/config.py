"""Settings of the RPS scheduler, carried to the engine core in vLLM's `additional_config["rps"]`."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rps_serve.scheduling.parameters import Policy
from rps_serve.scheduling.preemption import MAX_PREEMPTIONS

CONFIG_KEY = "rps"
EXTRA_ARGS_KEY = "rps"  # sampling_params.extra_args[EXTRA_ARGS_KEY]: the class as the ensemble computed it


@dataclass(frozen=True)
class RPSConfig:
    """How the engine orders, classifies and preempts.

    `cost_model` is a model repository holding the ONNX Impact Estimator and Request Classifier
    (`rps-serve train --out`); without it the engine classifies by modality (the naive classifier).
    `naive` forces the naive classifier even with a cost model (the ablation). `chunk_cap_tokens`
    caps prefill chunks while a lighter class waits behind a heavier prefill; 0 (the default) disables
    it: through Triton on the CPU stack a 256-token cap tripled the time per output token and doubled
    text TTFT (docs/results/2026-12-01.md). `yield_prefills`: a running request part-way through its
    prefill sits out a step while a waiting request that outranks it can be admitted; off by default, as
    through Triton on the CPU stack it cost everyone at 0.6x of capacity (docs/decisions.md).
    `decode_hold_s`: how long, at most, a waiting request of a heavier class than a running one sits
    out steps for the lighter requests running when it reached the queue (`scheduling.holding`), in
    the paper's seconds on the same clock as the aging (times `aging_time_scale`); 0 (the default)
    disables it; the CPU stack's model.json turns it on (docs/decisions.md). `decode_hold_media_only`
    holds only requests whose prefill runs a vision encoder (an image or a video: the steps a chunk
    cap cannot shorten), so that long texts never wait for it.
    `aging_time_scale`: the clock the class priorities age on, as a multiple of the paper's seconds
    (`scheduling.parameters.in_time_units`); None takes the cost model's (its report's
    `aging_time_scale`: how much slower than the paper's reference the served model is), or 1 without
    a cost model.
    `observed_costs`: a JSON-lines file the engine appends a profile record to for every prefill it
    completes, what the prefill took under load (`cost.observed`); None (the default) records none.
    """

    policy: Policy = Policy.RPS
    cost_model: str | None = None
    naive: bool = False
    chunk_cap_tokens: int = 0
    yield_prefills: bool = False
    max_preemptions: int = MAX_PREEMPTIONS
    decode_hold_s: float = 0.0
    decode_hold_media_only: bool = False
    aging_time_scale: float | None = None
    observed_costs: str | None = None

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
