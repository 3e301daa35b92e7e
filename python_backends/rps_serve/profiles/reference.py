"""Published isolated-run prefill fits on H100 (RPS-Serve public artifact), bundled as package data."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources
from typing import TypeVar

import numpy as np

from rps_serve.requests import Modality

Tokens = TypeVar("Tokens", float, np.ndarray)

# The model and GPU the paper tuned its priority parameters to, and the default reference of every
# command that takes one: LLaVA-OneVision-7B on one H100.
DEFAULT_REFERENCE = "llava-onevision-qwen2-7b"


@dataclass(frozen=True)
class PrefillLine:
    """prefill_seconds = intercept + slope * prompt_tokens (placeholder tokens included)."""

    intercept: float
    slope: float

    def seconds(self, prompt_tokens: Tokens) -> Tokens:
        return self.intercept + self.slope * prompt_tokens


@dataclass(frozen=True)
class ReferenceModel:
    """One model's published fits: text by least squares, image and video at the 90th percentile."""

    name: str
    gpus: int
    lines: dict[Modality, PrefillLine]


@cache
def _published() -> dict[str, object]:
    text = resources.files("rps_serve.profiles").joinpath("data/h100_prefill.json").read_text()
    data: dict[str, object] = json.loads(text)
    return data


def reference_model_names() -> list[str]:
    models = _published()["models"]
    assert isinstance(models, dict)
    return sorted(models)


def reference_model(name: str) -> ReferenceModel:
    models = _published()["models"]
    assert isinstance(models, dict)
    if name not in models:
        raise ValueError(f"no reference profile for {name!r}; known: {', '.join(sorted(models))}")
    entry = models[name]
    lines = {
        modality: PrefillLine(entry[modality.value]["intercept"], entry[modality.value]["slope"])
        for modality in Modality
    }
    return ReferenceModel(name=name, gpus=int(entry["gpus"]), lines=lines)


def isolated_ttft_slo_s() -> dict[Modality, float]:
    """P99 TTFT of isolated single-modality runs (LLaVA-OneVision-72B, 4 GPUs): the default SLOs."""
    slos = _published()["isolated_p99_ttft_slo_s_llava_72b_4gpu"]
    assert isinstance(slos, dict)
    return {modality: float(slos[modality.value]) for modality in Modality}
