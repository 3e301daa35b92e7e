"""A simulator profile of a measured serving stack (the CPU test stack), for `simulate --measured FILE.json`.

Built from two kinds of isolated runs, and optionally the engine's steps under load:
- engine: prefill lines per modality from `rps-serve profile` records (lower-quartile lines: a
  shared machine only adds time; a modality whose requests all have about the same size, like
  fixed-size images, gets the text slope and its own level);
- server: TTFT and time per output token of requests sent one at a time to the real server
  (`rps-serve bench`'s isolated runs). Time per output token on the request's context is a line:
  its intercept is the decode step, its slope the cost of attending to one KV token. The front end
  (gRPC, ensemble steps, media decoding, vLLM's input processing) is what the server's isolated
  TTFT adds to the engine's, per modality, modelled as the server's front-end workers
  (`front_end_workers`), class-ordered under the class-aware policies as in `vllm_model`.
- loaded steps (`loaded_steps`, optional): an engine step's terms fitted on the step records of
  loaded runs (`sim.step_fit`): per step (the time between steps included), per prompt-chunk token,
  per decoding request, per KV token; they replace the isolated runs' step, slope and decode terms
  (under load a chunk token costs more than isolated runs show), the encoder staying the lines'.
The cost model is the one the server's repository was trained from (`cost_profile`: the profile file
it was trained on, or a reference's name); the plug-in's
settings are the served model.json's (chunk cap, decode hold, evictions per request), its aging clock
its cost model's.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from rps_harness.sim.frontend import PreprocessCosts
from rps_harness.sim.hardware import ModelSpec
from rps_harness.sim.simulator import Deployment, PolicyVariant
from rps_harness.sim.timing import TimingModel
from rps_harness.workload.trace import Trace
from rps_serve.profiles.lines import fit_line, modality_points
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality
from rps_serve.scheduling.parameters import FRONT_END_WORKERS
from rps_serve.scheduling.preemption import MAX_PREEMPTIONS

FORMAT = "rps-serve measured profile 1"
# Token counts spanning less than this ratio cannot fix a slope (e.g. every image is the same size).
MIN_TOKEN_SPREAD = 1.5
LINE_QUANTILE = 0.25


@dataclass(frozen=True)
class LoadedSteps:
    """An engine step's seconds fitted on loaded runs: `step_s` every step, `chunk_token_s` each
    prompt-chunk token, `decode_request_s` each decoding request, `kv_token_s` each KV token read."""

    step_s: float
    chunk_token_s: float
    decode_request_s: float
    kv_token_s: float


@dataclass(frozen=True)
class MeasuredDeployment(Deployment):
    """A `Deployment` whose decode step and KV capacity were measured rather than derived from GPU
    bandwidth and memory; RPS runs with the served plug-in's settings (`as_served`)."""

    decode_step_s: float = 0.0
    kv_token_s: float = 0.0
    rps_chunk_cap_tokens: int = 0
    rps_decode_hold_s: float = 0.0
    rps_decode_hold_media_only: bool = False
    rps_max_preemptions: int = MAX_PREEMPTIONS
    rps_cost_order: float = 0.0
    rps_light_steps: bool = False
    rps_light_step_tokens: int = 0
    loaded_steps: LoadedSteps | None = None

    def timing(self, gpus: int) -> TimingModel:
        isolated = replace(super().timing(gpus), decode_step_s=self.decode_step_s, kv_token_s=self.kv_token_s)
        loaded = self.loaded_steps
        if loaded is None:
            return isolated
        return replace(
            isolated,
            prefill_step_s=loaded.step_s,
            decode_step_s=loaded.step_s,
            token_s=loaded.chunk_token_s,
            decode_token_s=loaded.decode_request_s,
            kv_token_s=loaded.kv_token_s,
        )


@dataclass(frozen=True)
class MeasuredProfile:
    """Everything the simulator needs about a measured stack; stored as JSON."""

    name: str
    lines: Mapping[Modality, PrefillLine]
    decode_step_s: float
    kv_token_s: float
    front_end_s: Mapping[Modality, float]
    kv_capacity_tokens: int
    max_num_batched_tokens: int
    max_num_seqs: int
    rps_chunk_cap_tokens: int
    cost_profile: str
    front_end_workers: int = FRONT_END_WORKERS
    rps_decode_hold_s: float = 0.0
    rps_decode_hold_media_only: bool = False
    rps_max_preemptions: int = MAX_PREEMPTIONS
    rps_cost_order: float = 0.0
    rps_light_steps: bool = False
    rps_light_step_tokens: int = 0
    aging_time_scale: float = 1.0
    loaded_steps: LoadedSteps | None = None

    def deployment(self) -> MeasuredDeployment:
        front = self.front_end_s
        text = front[Modality.TEXT]
        preprocess = PreprocessCosts(
            text_base_s=text,
            text_token_s=0.0,
            image_base_s=max(front[Modality.IMAGE] - text, 0.0),
            image_tile_s=0.0,
            video_base_s=max(front[Modality.VIDEO] - text, 0.0),
            video_frame_s=0.0,
            workers=self.front_end_workers,
        )
        # One "GPU" (the machine); the model sizes only feed terms this deployment overrides.
        spec = ModelSpec(self.name, parameters=0.0, layers=1, kv_heads=1, head_dim=1, profile_gpus=1)
        return MeasuredDeployment(
            spec=spec,
            gpus=1,
            lines=dict(self.lines),
            profile_gpus=1,
            preprocess=preprocess,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            decode_step_s=self.decode_step_s,
            kv_token_s=self.kv_token_s,
            kv_capacity_tokens=self.kv_capacity_tokens,
            rps_chunk_cap_tokens=self.rps_chunk_cap_tokens,
            rps_decode_hold_s=self.rps_decode_hold_s,
            rps_decode_hold_media_only=self.rps_decode_hold_media_only,
            rps_max_preemptions=self.rps_max_preemptions,
            rps_cost_order=self.rps_cost_order,
            rps_light_steps=self.rps_light_steps,
            rps_light_step_tokens=self.rps_light_step_tokens,
            aging_time_scale=self.aging_time_scale,
            loaded_steps=self.loaded_steps,
        )

    def to_json(self) -> dict[str, Any]:
        raw = asdict(self)
        raw["lines"] = {m.value: asdict(line) for m, line in self.lines.items()}
        raw["front_end_s"] = {m.value: s for m, s in self.front_end_s.items()}
        return {"format": FORMAT, **raw}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> MeasuredProfile:
        if raw.get("format") != FORMAT:
            raise ValueError(f"not a measured profile (format {raw.get('format')!r}, expected {FORMAT!r})")
        fields = {k: v for k, v in raw.items() if k != "format"}
        fields["lines"] = {Modality(m): PrefillLine(**line) for m, line in raw["lines"].items()}
        fields["front_end_s"] = {Modality(m): float(s) for m, s in raw["front_end_s"].items()}
        if raw.get("loaded_steps") is not None:
            fields["loaded_steps"] = LoadedSteps(**raw["loaded_steps"])
        return cls(**fields)


def read_measured_profile(path: Path) -> MeasuredProfile:
    try:
        return MeasuredProfile.from_json(json.loads(path.read_text()))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path}: not a measured profile ({error})") from None


def robust_lines(records: Sequence[ProfileRecord]) -> dict[Modality, PrefillLine]:
    """Admission seconds (encoder + prefill) on prompt tokens per modality: the lower-quartile line.

    On a shared machine another job only ever adds time to a run (single runs were 20x slow here), so
    the line follows the fast runs: quantile regression at `LINE_QUANTILE`, not least squares. A
    modality with too narrow a range of sizes keeps the text slope (see `MIN_TOKEN_SPREAD`).
    """
    lines: dict[Modality, PrefillLine] = {}
    for modality in Modality:  # text first: the others may need its slope
        tokens, seconds = modality_points(records, modality)
        if tokens.max() / tokens.min() >= MIN_TOKEN_SPREAD:
            lines[modality] = fit_line(tokens, seconds, LINE_QUANTILE)
        else:
            slope = lines[Modality.TEXT].slope
            lines[modality] = PrefillLine(float(np.quantile(seconds - slope * tokens, LINE_QUANTILE)), slope)
    return lines


def front_end_seconds(
    deployment: Deployment, trace: Trace, server_ttft_s: np.ndarray
) -> dict[Modality, float]:
    """Per modality, the median of what the server's isolated TTFT adds to the engine's (floored at 0).

    `trace` holds the isolated requests with the token counts the server saw; `deployment`
    without front-end costs gives the engine's isolated TTFT.
    """
    engine = replace(deployment, preprocess=PreprocessCosts(0, 0, 0, 0, 0, 0)).isolated_ttft_s(trace)
    extra = server_ttft_s - engine
    front = {}
    for modality in Modality:
        mine = extra[trace.modality == modality.index]
        if mine.size == 0:
            raise ValueError(f"no isolated {modality.value} runs to measure the front end with")
        front[modality] = max(float(np.median(mine)), 0.0)
    return front


def decode_costs(context_tokens: np.ndarray, tpot_s: np.ndarray, token_s: float) -> tuple[float, float]:
    """(decode step seconds, seconds per KV token read) from isolated runs: the median line of time
    per output token on context tokens. A decode step also pays `token_s` (the prefill lines' slope)
    for its one token: that part is taken out of the step."""
    finite = np.isfinite(tpot_s)
    line = fit_line(context_tokens[finite], tpot_s[finite], quantile=0.5)
    return max(line.intercept - token_s, 0.0), max(line.slope, 0.0)


def as_served(variant: PolicyVariant, deployment: Deployment) -> PolicyVariant:
    """A policy of the plug-in on a measured stack runs with the served plug-in's chunk cap, decode
    hold, eviction limit, cost order and light steps, as the plug-in applies them (under every
    policy of its own that orders by class; stock vLLM has none of them)."""
    row = variant.policy.row
    if not isinstance(deployment, MeasuredDeployment) or not row.by_class or row.stock:
        return variant
    scheduling = variant.scheduling
    served = replace(
        scheduling,
        chunk_cap_tokens=scheduling.chunk_cap_tokens or deployment.rps_chunk_cap_tokens,
        decode_hold_s=scheduling.decode_hold_s or deployment.rps_decode_hold_s,
        decode_hold_media_only=scheduling.decode_hold_media_only or deployment.rps_decode_hold_media_only,
        max_preemptions=deployment.rps_max_preemptions,
        cost_order=scheduling.cost_order or deployment.rps_cost_order,
        light_steps=scheduling.light_steps or deployment.rps_light_steps,
        light_step_tokens=scheduling.light_step_tokens or deployment.rps_light_step_tokens,
    )
    return replace(variant, scheduling=served)
