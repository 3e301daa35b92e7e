"""Token-count distributions of the four request kinds of the paper's workloads (LLaVA-OneVision-7B).

The distributions are our assumptions, chosen so that the mean prompt+output tokens per kind match the
averages published for the isolation workloads (572 short text, 1,616 long text, 2,888 image,
4,118 video; `profiles/data/h100_prefill.json`):

- short text (ShareGPT turns): prompt ~ lognormal(median 200, sigma 0.9) clipped to [8, 1023];
- long text (>= 6 ShareGPT turns joined): prompt ~ lognormal(median 1300, sigma 0.4) clipped to [1024, 16384];
- image (LLaVA-Instruct): anyres tiling, 729 tokens per tile plus the base view, 1-4 tiles
  (p = .15/.35/.35/.15); question ~ lognormal(median 40, sigma 0.5);
- video (LLaVA-Video, capped at 32 frames): 8-32 frames uniformly, 196 tokens per frame;
  question ~ lognormal(median 40, sigma 0.5);
- outputs: lognormal(median 180, sigma 0.8) for text, (250, 0.7) for image, (100, 0.6) for video,
  clipped to [1, 1024].
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import numpy as np

from rps_serve.requests import Modality

IMAGE_TOKENS_PER_TILE = 729
VIDEO_TOKENS_PER_FRAME = 196


class RequestKind(enum.Enum):
    SHORT_TEXT = "text"
    LONG_TEXT = "long_text"
    IMAGE = "image"
    VIDEO = "video"

    @property
    def modality(self) -> Modality:
        if self in (RequestKind.SHORT_TEXT, RequestKind.LONG_TEXT):
            return Modality.TEXT
        return Modality(self.value)


@dataclass(frozen=True)
class TokenSample:
    """Token counts of `n` sampled requests of one kind, as parallel integer arrays."""

    kind: RequestKind
    prompt_tokens: np.ndarray
    modality_tokens: np.ndarray
    output_tokens: np.ndarray


def _lognormal(
    rng: np.random.Generator, median: float, sigma: float, low: int, high: int, n: int
) -> np.ndarray:
    values = np.exp(rng.normal(np.log(median), sigma, size=n))
    return np.clip(np.rint(values), low, high).astype(np.int64)


def sample_tokens(kind: RequestKind, n: int, rng: np.random.Generator) -> TokenSample:
    """Draw token counts for `n` requests of `kind` from the distributions in the module docstring."""
    if kind is RequestKind.SHORT_TEXT:
        text = _lognormal(rng, 200, 0.9, 8, 1023, n)
        visual = np.zeros(n, dtype=np.int64)
        output = _lognormal(rng, 180, 0.8, 1, 1024, n)
    elif kind is RequestKind.LONG_TEXT:
        text = _lognormal(rng, 1300, 0.4, 1024, 16384, n)
        visual = np.zeros(n, dtype=np.int64)
        output = _lognormal(rng, 180, 0.8, 1, 1024, n)
    elif kind is RequestKind.IMAGE:
        tiles = rng.choice([1, 2, 3, 4], size=n, p=[0.15, 0.35, 0.35, 0.15])
        visual = IMAGE_TOKENS_PER_TILE * (1 + tiles)
        text = _lognormal(rng, 40, 0.5, 4, 512, n)
        output = _lognormal(rng, 250, 0.7, 1, 1024, n)
    else:
        frames = rng.integers(8, 33, size=n)
        visual = VIDEO_TOKENS_PER_FRAME * frames
        text = _lognormal(rng, 40, 0.5, 4, 512, n)
        output = _lognormal(rng, 100, 0.6, 1, 1024, n)
    return TokenSample(kind, text + visual, visual.astype(np.int64), output)
