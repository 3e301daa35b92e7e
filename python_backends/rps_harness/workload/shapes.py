"""Token-count distributions of the four request kinds of the paper's workloads (LLaVA-OneVision-7B).

Two shape sets, `SHAPES`; both are our assumptions where the paper publishes only means:

- `isolation` (the isolated-run workloads behind `profiles/data/h100_prefill.json`), chosen so that the
  mean prompt+output tokens per kind match the published averages (572 short text, 1,616 long text,
  2,888 image, 4,118 video):
  - short text (ShareGPT turns): prompt ~ lognormal(median 200, sigma 0.9) clipped to [8, 1023];
  - long text (>= 6 ShareGPT turns joined): prompt ~ lognormal(median 1300, sigma 0.4) clipped to
    [1024, 16384];
  - image (LLaVA-Instruct): anyres tiling, 729 tokens per tile plus the base view, 1-4 tiles
    (p = .15/.35/.35/.15); question ~ lognormal(median 40, sigma 0.5);
  - video (LLaVA-Video, dynamic frames): 8-32 frames uniformly, 196 tokens per frame;
    question ~ lognormal(median 40, sigma 0.5);
  - outputs: lognormal(median 180, sigma 0.8) for text, (250, 0.7) for image, (100, 0.6) for video,
    clipped to [1, 1024].
- `serving` (the paper's serving runs, the simulator's default for the LLaVA-OneVision profiles): the
  same prompts, except that vLLM samples every video at its default 32 frames, which LLaVA-OneVision's
  processor turns into 32 x 196 + 1 = 6,273 placeholder tokens (384x384 frames: 27x27 SigLIP patches,
  2x2 pooled to 14x14, then one newline token after the last frame); outputs are lognormal with means
  in the middle of what the datasets the paper names answer (ShareGPT ~250-290 tokens for a short
  conversation, ~370-425 for a long one; LLaVA-Instruct ~120-150; LLaVA-Video ~500-700):
  short text (median 196, sigma 0.8, mean ~270), long text (334, 0.6, ~400), image (113, 0.6, ~135),
  video (530, 0.5, ~600), clipped to [1, 2048].

Three kinds whose cost disagrees with their modality (the `cost-vs-modality` mix), in both sets:
documents (texts several times a long text: lognormal median 3,600 tokens, sigma 0.15, clipped to
[3,000, 4,500], the answers of long text), thumbnails (an image's base view alone, no tiles: 729
tokens, the answers of images) and clips (4 frames, the answers of videos).
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
    DOCUMENT = "document"
    THUMBNAIL = "thumbnail"
    CLIP = "clip"

    @property
    def modality(self) -> Modality:
        return _KIND_MODALITY[self]


# The kinds of the paper's workloads and of the profiles synthesized from its fits.
PAPER_KINDS = (RequestKind.SHORT_TEXT, RequestKind.LONG_TEXT, RequestKind.IMAGE, RequestKind.VIDEO)

_KIND_MODALITY = {
    RequestKind.SHORT_TEXT: Modality.TEXT,
    RequestKind.LONG_TEXT: Modality.TEXT,
    RequestKind.DOCUMENT: Modality.TEXT,
    RequestKind.IMAGE: Modality.IMAGE,
    RequestKind.THUMBNAIL: Modality.IMAGE,
    RequestKind.VIDEO: Modality.VIDEO,
    RequestKind.CLIP: Modality.VIDEO,
}


@dataclass(frozen=True)
class Lognormal:
    """Integers from a lognormal distribution of `median` and `sigma`, rounded and clipped to [low, high]."""

    median: float
    sigma: float
    low: int
    high: int

    def sample(self, rng: np.random.Generator, n: int) -> np.ndarray:
        values = np.exp(rng.normal(np.log(self.median), self.sigma, size=n))
        return np.clip(np.rint(values), self.low, self.high).astype(np.int64)


@dataclass(frozen=True)
class Shapes:
    """One set of token-count distributions: output lengths per kind and the frames of a video."""

    name: str
    outputs: dict[RequestKind, Lognormal]
    video_frames: tuple[int, int]  # inclusive range, drawn uniformly
    video_extra_tokens: int  # placeholder tokens a video adds beyond its frames

    def video_tokens(self, frames: np.ndarray) -> np.ndarray:
        return VIDEO_TOKENS_PER_FRAME * frames + self.video_extra_tokens

    def output(self, kind: RequestKind) -> Lognormal:
        """The answer lengths of `kind`: a document answers as a long text, a thumbnail as an image,
        a clip as a video."""
        return self.outputs[_ANSWERS_AS.get(kind, kind)]


_ANSWERS_AS = {
    RequestKind.DOCUMENT: RequestKind.LONG_TEXT,
    RequestKind.THUMBNAIL: RequestKind.IMAGE,
    RequestKind.CLIP: RequestKind.VIDEO,
}


SHORT_TEXT_PROMPT = Lognormal(200, 0.9, 8, 1023)
LONG_TEXT_PROMPT = Lognormal(1300, 0.4, 1024, 16384)
DOCUMENT_PROMPT = Lognormal(3600, 0.15, 3000, 4500)
CLIP_FRAMES = 4
QUESTION = Lognormal(40, 0.5, 4, 512)
TILE_PROBABILITIES = (0.15, 0.35, 0.35, 0.15)  # of 1-4 anyres tiles

ISOLATION, SERVING = "isolation", "serving"
SHAPES: dict[str, Shapes] = {
    shapes.name: shapes
    for shapes in (
        Shapes(
            ISOLATION,
            outputs={
                RequestKind.SHORT_TEXT: Lognormal(180, 0.8, 1, 1024),
                RequestKind.LONG_TEXT: Lognormal(180, 0.8, 1, 1024),
                RequestKind.IMAGE: Lognormal(250, 0.7, 1, 1024),
                RequestKind.VIDEO: Lognormal(100, 0.6, 1, 1024),
            },
            video_frames=(8, 32),
            video_extra_tokens=0,
        ),
        Shapes(
            SERVING,
            outputs={
                RequestKind.SHORT_TEXT: Lognormal(196, 0.8, 1, 2048),
                RequestKind.LONG_TEXT: Lognormal(334, 0.6, 1, 2048),
                RequestKind.IMAGE: Lognormal(113, 0.6, 1, 2048),
                RequestKind.VIDEO: Lognormal(530, 0.5, 1, 2048),
            },
            video_frames=(32, 32),
            video_extra_tokens=1,
        ),
    )
}


def shapes_by_name(name: str) -> Shapes:
    if name not in SHAPES:
        raise ValueError(f"unknown shapes {name!r}; expected one of {', '.join(SHAPES)}")
    return SHAPES[name]


@dataclass(frozen=True)
class TokenSample:
    """Token counts of `n` sampled requests of one kind, as parallel integer arrays."""

    kind: RequestKind
    prompt_tokens: np.ndarray
    modality_tokens: np.ndarray
    output_tokens: np.ndarray


def sample_tokens(
    kind: RequestKind, n: int, rng: np.random.Generator, shapes: str = ISOLATION
) -> TokenSample:
    """Draw token counts for `n` requests of `kind` from `shapes`' distributions (module docstring)."""
    chosen = shapes_by_name(shapes)
    texts = {
        RequestKind.SHORT_TEXT: SHORT_TEXT_PROMPT,
        RequestKind.LONG_TEXT: LONG_TEXT_PROMPT,
        RequestKind.DOCUMENT: DOCUMENT_PROMPT,
    }
    if kind in texts:
        text = texts[kind].sample(rng, n)
        visual = np.zeros(n, dtype=np.int64)
    else:
        if kind is RequestKind.IMAGE:
            tiles = rng.choice([1, 2, 3, 4], size=n, p=list(TILE_PROBABILITIES))
            visual = IMAGE_TOKENS_PER_TILE * (1 + tiles)
        elif kind is RequestKind.THUMBNAIL:
            visual = np.full(n, IMAGE_TOKENS_PER_TILE, dtype=np.int64)
        elif kind is RequestKind.VIDEO:
            low, high = chosen.video_frames
            visual = chosen.video_tokens(rng.integers(low, high + 1, size=n))
        else:
            visual = chosen.video_tokens(np.full(n, CLIP_FRAMES))
        text = QUESTION.sample(rng, n)
    output = chosen.output(kind).sample(rng, n)
    return TokenSample(kind, text + visual, visual.astype(np.int64), output)
