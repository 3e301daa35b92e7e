"""What a replayed trace request holds on a served model: one policy for the Triton load client and
the in-process vLLM replay, so both send the same words, media and output lengths for a trace.

A trace's text tokens (prompt tokens less modality tokens) count the request's text alone, as a
dataset counts a question: each text is exactly that many tokens on the served model's tokenizer.
The engine's prompt adds the served chat turn's tokens and the served media's placeholders
(`ContentPlan.served_trace`).
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from rps_harness.workload.media import random_image, random_video
from rps_harness.workload.prompts import filler_text
from rps_harness.workload.request_format import RequestFormat
from rps_harness.workload.shapes import RequestKind
from rps_harness.workload.trace import Trace
from rps_serve.requests import Modality

_KINDS = list(RequestKind)


@dataclass(frozen=True)
class ContentLimits:
    """Bounds the served model puts on a trace's token counts.

    Text keeps the trace's text tokens up to `max_text_tokens` (the model's context); outputs keep the
    trace's lengths within [`min_output_tokens`, `max_output_tokens`] (None: no upper bound).
    """

    max_text_tokens: int
    min_output_tokens: int = 1
    max_output_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.max_text_tokens < 1 or self.min_output_tokens < 1:
            raise ValueError("text and output token bounds must be at least 1")
        if self.max_output_tokens is not None and self.max_output_tokens < self.min_output_tokens:
            raise ValueError(
                f"max_output_tokens {self.max_output_tokens} < min_output_tokens {self.min_output_tokens}"
            )


@dataclass(frozen=True)
class RequestContent:
    """One prompt (the served model's chat format) with its media as pixels and its output length."""

    modality: Modality
    prompt: str
    image: np.ndarray | None
    video: np.ndarray | None
    max_tokens: int


@dataclass(frozen=True)
class ContentPlan:
    """Per trace row: request kind (its index), modality, text tokens asked for, placeholder tokens of
    its media, output tokens, and the tokens the served chat turn adds.

    Images and videos are always the served format's media for their kind, so their placeholder tokens
    are what the model's processor makes of them, not the trace's.
    """

    kind: np.ndarray
    modality: np.ndarray
    text_tokens: np.ndarray
    visual_tokens: np.ndarray
    output_tokens: np.ndarray
    turn_tokens: np.ndarray

    def served_trace(self, trace: Trace) -> Trace:
        """`trace` with the token counts the engine sees: the prompt's text, its chat turn and its
        media's placeholders; the outputs within the limits."""
        return Trace(
            arrival_s=trace.arrival_s,
            kind=trace.kind,
            prompt_tokens=self.text_tokens + self.turn_tokens + self.visual_tokens,
            modality_tokens=self.visual_tokens,
            output_tokens=self.output_tokens,
        )

    def contents(self, served: RequestFormat, seed: int) -> Iterator[RequestContent]:
        """Fresh filler text of the planned tokens and random pixels for every row: no two requests
        share a prefix or an image."""
        text_rng = random.Random(seed)
        pixels = np.random.default_rng(seed)
        media = served.media
        for row in range(len(self.modality)):
            modality = Modality.from_index(int(self.modality[row]))
            medium = media.medium(_KINDS[int(self.kind[row])])
            image = video = None
            if medium is not None and modality is Modality.IMAGE:
                image = random_image(medium.size, medium.size, pixels)
            elif medium is not None:
                video = random_video(medium.frames, medium.size, medium.size, pixels)
            text = filler_text(int(self.text_tokens[row]), text_rng, served.filler_words)
            prompt = served.prompt(text, modality)
            yield RequestContent(modality, prompt, image, video, int(self.output_tokens[row]))


def plan_content(trace: Trace, served: RequestFormat, limits: ContentLimits) -> ContentPlan:
    """Token counts of every request of `trace` in the served model's format, within `limits`."""
    visual = np.array([served.placeholder_tokens(_KINDS[int(k)]) for k in trace.kind], dtype=np.int64)
    text = np.clip(trace.prompt_tokens - trace.modality_tokens, 1, limits.max_text_tokens)
    high = np.iinfo(np.int64).max if limits.max_output_tokens is None else limits.max_output_tokens
    output = np.clip(trace.output_tokens, limits.min_output_tokens, high)
    turn = np.array([served.turn_tokens[Modality.from_index(int(m))] for m in trace.modality], dtype=np.int64)
    return ContentPlan(
        trace.kind, trace.modality, text.astype(np.int64), visual, output.astype(np.int64), turn
    )
