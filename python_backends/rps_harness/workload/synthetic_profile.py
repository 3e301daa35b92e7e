"""Default profiles: isolated-run records synthesized from the published H100 fits.

Used when no measured profile exists for a model. Prompt and output tokens follow
`workload.shapes`. Prefill seconds are the published line times multiplicative lognormal noise
shaped so that fitting recovers the line the way it was published:
- text (least-squares fit): noise with mean 1, sigma 0.15 in log space;
- image and video (90th-percentile fit): noise whose 90th percentile is 1, sigma 0.25 in log space,
  so the published line sits above 90% of the records.
Times are floored at 1 ms (one published video line has a negative intercept). The reference does
not publish vision-encoder times separately, so `encoder_s` is 0 in these records.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace

import numpy as np

from rps_harness.workload.shapes import PAPER_KINDS, sample_tokens
from rps_serve.profiles.records import ProfileRecord
from rps_serve.profiles.reference import reference_model
from rps_serve.requests import Modality

TEXT_NOISE_SIGMA = 0.15
VISUAL_NOISE_SIGMA = 0.25
_Z90 = 1.2815515655446004
MIN_PREFILL_S = 1e-3


def _noise(modality: Modality, n: int, rng: np.random.Generator) -> np.ndarray:
    z = rng.standard_normal(n)
    if modality is Modality.TEXT:
        return np.exp(TEXT_NOISE_SIGMA * z - TEXT_NOISE_SIGMA**2 / 2)
    return np.exp(VISUAL_NOISE_SIGMA * (z - _Z90))


def reference_profile(model: str, per_kind: int = 500, seed: int = 0) -> list[ProfileRecord]:
    """`per_kind` records for each request kind (short text, long text, image, video) of `model`."""
    lines = reference_model(model).lines
    rng = np.random.default_rng(seed)
    records: list[ProfileRecord] = []
    for kind in PAPER_KINDS:
        tokens = sample_tokens(kind, per_kind, rng)
        line = lines[kind.modality]
        clean = line.intercept + line.slope * tokens.prompt_tokens
        prefill = np.maximum(clean * _noise(kind.modality, per_kind, rng), MIN_PREFILL_S)
        records.extend(
            ProfileRecord(
                modality=kind.modality,
                prompt_tokens=int(prompt),
                modality_tokens=int(visual),
                encoder_s=0.0,
                prefill_s=float(seconds),
                output_tokens=int(output),
            )
            for prompt, visual, output, seconds in zip(
                tokens.prompt_tokens, tokens.modality_tokens, tokens.output_tokens, prefill, strict=True
            )
        )
    return records


def with_slower_images(records: Sequence[ProfileRecord], factor: float) -> list[ProfileRecord]:
    """`records` as a device whose image admission (its vision encoder) takes `factor` times as long
    would measure them: a fit of the others' device is wrong there where it matters, for images."""
    return with_slower_admission(records, factor, {Modality.IMAGE})


def with_slower_admission(
    records: Sequence[ProfileRecord], factor: float, modalities: Collection[Modality]
) -> list[ProfileRecord]:
    """`records` with the admission time (vision encoding and prefill) of the requests of `modalities`
    `factor` times what was measured (a factor under 1: faster), held in `prefill_s`."""
    return [
        replace(r, prefill_s=r.admission_s * factor, encoder_s=0.0) if r.modality in modalities else r
        for r in records
    ]
