"""Timing model: seconds of one engine step from its prefill tokens, decodes, KV reads and encoder work.

Built from per-modality isolated prefill lines (published, or fitted on profile records):
- a step with prefill tokens costs the text line's intercept once, plus the text line's slope per
  scheduled token (prefill chunk tokens and decode tokens alike: the LLM does not know where a
  token came from);
- a decode-only step costs reading the weights once (CUDA graphs hide the rest), plus the same
  per-token compute and reading every decoding request's KV cache (`hardware` bandwidth assumption);
- the vision encoder runs for a whole image or video in the step that starts its request's prefill;
  its cost is what the modality's line adds to the text line: (a_m - a_text) + (b_m - b_text) * v for
  v modality tokens, floored at 0.
- every step, prefill or decode, also pays the execution mode's fixed overhead (`step_overhead_s`:
  0 in graph mode, the kernel launches of eager mode; `hardware`).
So a request prefilled alone in one step in graph mode takes exactly its modality's line (up to the
tokens of its question, charged at the text slope instead of the modality's), and a graph-mode decode
step of a 7B model on one H100 takes ~7 ms plus ~2.4 ms per 100,000 KV tokens (eager: ~8 ms more).
The decode step's parameters are `decode_step_s` (the batch's fixed cost), `token_s` (per request in
the batch; `decode_token_s` where a fit on loaded steps sets it apart from the prefill slope) and
`kv_token_s` (per KV token its requests attend to).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rps_harness.sim.hardware import H100, Execution, GpuSpec, ModelSpec, tp_speedup
from rps_serve.profiles.lines import fit_line, modality_points
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import PrefillLine
from rps_serve.requests import Modality


@dataclass(frozen=True)
class TimingModel:
    """Step seconds on the GPUs the engine runs on. `encoder` is indexed by `Modality.index`."""

    prefill_step_s: float
    token_s: float
    decode_step_s: float
    kv_token_s: float
    encoder: tuple[PrefillLine, ...]
    step_overhead_s: float = 0.0
    decode_token_s: float | None = None  # None: `token_s`

    def step_s(self, prefill_tokens: int, decodes: int, decode_context: int, encoder_s: float) -> float:
        """One step: `prefill_tokens` chunk tokens, `decodes` decoding requests reading
        `decode_context` KV tokens in all, and `encoder_s` of vision encoding."""
        fixed = max(self.prefill_step_s, self.decode_step_s) if prefill_tokens else self.decode_step_s
        return (
            self.step_overhead_s
            + fixed
            + self.token_s * prefill_tokens
            + self.decode_request_s * decodes
            + self.kv_token_s * decode_context
            + encoder_s
        )

    @property
    def decode_request_s(self) -> float:
        """What one decoding request adds to a step besides its KV reads."""
        return self.token_s if self.decode_token_s is None else self.decode_token_s

    def encoder_s(self, modality: np.ndarray, modality_tokens: np.ndarray) -> np.ndarray:
        """Encoder seconds of every request (0 without modality tokens)."""
        intercept = np.array([line.intercept for line in self.encoder])[modality]
        slope = np.array([line.slope for line in self.encoder])[modality]
        seconds = np.maximum(intercept + slope * modality_tokens, 0.0)
        return np.where(modality_tokens > 0, seconds, 0.0)

    def isolated_ttft_s(
        self,
        modality: np.ndarray,
        prompt_tokens: np.ndarray,
        modality_tokens: np.ndarray,
        max_num_batched_tokens: int,
    ) -> np.ndarray:
        """Engine time to the first token of every request run alone (chunked at the token budget)."""
        chunks = -(-prompt_tokens // max_num_batched_tokens)
        fixed = self.step_overhead_s + max(self.prefill_step_s, self.decode_step_s)
        return chunks * fixed + self.token_s * prompt_tokens + self.encoder_s(modality, modality_tokens)

    def scaled(self, factor: float) -> TimingModel:
        """Every compute cost times `factor` (decode terms are set from bandwidth separately; kernel
        launches do not scale)."""
        return replace(
            self,
            prefill_step_s=self.prefill_step_s * factor,
            token_s=self.token_s * factor,
            encoder=tuple(PrefillLine(e.intercept * factor, e.slope * factor) for e in self.encoder),
        )


def timing_from_lines(
    lines: Mapping[Modality, PrefillLine],
    spec: ModelSpec,
    gpus: int,
    profile_gpus: int | None = None,
    gpu: GpuSpec = H100,
    execution: Execution = Execution.GRAPH,
) -> TimingModel:
    """Timing on `gpus` GPUs in `execution` mode from isolated prefill lines measured in graph mode on
    `profile_gpus` (spec's default)."""
    text = lines[Modality.TEXT]
    encoder = tuple(
        PrefillLine(0.0, 0.0)
        if modality is Modality.TEXT
        else PrefillLine(lines[modality].intercept - text.intercept, lines[modality].slope - text.slope)
        for modality in Modality
    )
    bandwidth = gpu.hbm_bytes_per_s * gpu.bandwidth_efficiency * tp_speedup(gpus)
    measured = TimingModel(
        prefill_step_s=text.intercept,
        token_s=text.slope,
        decode_step_s=spec.weight_bytes / bandwidth,
        kv_token_s=spec.kv_bytes_per_token / bandwidth,
        encoder=encoder,
        step_overhead_s=spec.step_overhead_s(execution),
    )
    source_gpus = spec.profile_gpus if profile_gpus is None else profile_gpus
    return measured.scaled(tp_speedup(source_gpus) / tp_speedup(gpus))


def fit_lines(records: Sequence[ProfileRecord]) -> dict[Modality, PrefillLine]:
    """Least-squares line of isolated GPU seconds (encoder + prefill) on prompt tokens, per modality.

    Least squares, not the estimator's 90th percentile: the simulator needs typical times.
    """
    return {modality: fit_line(*modality_points(records, modality)) for modality in Modality}
