"""Prompt and placeholder token counts of a request, by the model's own processor.

The prompt is tokenized once; every image or video marker in it expands to as many placeholder
tokens as the processor gives the medium at its size, which is what vLLM will allocate KV cache for.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from rps_serve.model_processor import load_processor, placeholder_tokens
from rps_serve.triton.protocol import BadRequest


@dataclass(frozen=True)
class TokenCount:
    prompt_tokens: int  # placeholders included
    placeholder_tokens: int


class PromptTokenCounter:
    """Counts tokens with the processor saved beside the model (`AutoProcessor`)."""

    def __init__(self, model: Path) -> None:
        self.processor = load_processor(model)
        tokenizer = self.processor.tokenizer
        self._tokenizer = tokenizer
        self._image_marker = tokenizer.convert_tokens_to_ids(self.processor.image_token)
        self._video_marker = tokenizer.convert_tokens_to_ids(self.processor.video_token)

    @property
    def video_frames(self) -> int | None:
        """Frames per video the model's video processor asks for, if it says."""
        frames = getattr(self.processor.video_processor, "num_frames", None)
        return int(frames) if frames else None

    def count(
        self, prompt: str, image_sizes: list[tuple[int, int]], video_shape: tuple[int, int, int] | None
    ) -> TokenCount:
        """`image_sizes` as (height, width); `video_shape` as (frames, height, width)."""
        ids: list[int] = self._tokenizer(prompt, add_special_tokens=False)["input_ids"]
        image_markers, video_markers = ids.count(self._image_marker), ids.count(self._video_marker)
        placeholders = self._placeholders(image_markers, video_markers, image_sizes, video_shape)
        return TokenCount(len(ids) - image_markers - video_markers + placeholders, placeholders)

    def placeholders(
        self, prompt: str, image_sizes: list[tuple[int, int]], video_shape: tuple[int, int, int] | None
    ) -> int:
        """The media's placeholder tokens, without tokenizing the prompt: its markers are the
        processor's special tokens, which the tokenizer never splits, so they are counted as text."""
        image_markers = prompt.count(self.processor.image_token)
        video_markers = prompt.count(self.processor.video_token)
        return self._placeholders(image_markers, video_markers, image_sizes, video_shape)

    def _placeholders(
        self,
        image_markers: int,
        video_markers: int,
        image_sizes: list[tuple[int, int]],
        video_shape: tuple[int, int, int] | None,
    ) -> int:
        """The placeholder tokens the media expand to, once the prompt's markers match the media."""
        videos = 0 if video_shape is None else 1
        if image_markers != len(image_sizes) or video_markers != videos:
            raise BadRequest(
                f"the prompt has {image_markers} image and {video_markers} video placeholders "
                f"({self.processor.image_token!r}, {self.processor.video_token!r}) but the request carries "
                f"{len(image_sizes)} images and {videos} videos"
            )
        video_shapes = [] if video_shape is None else [video_shape]
        image_counts, video_counts = placeholder_tokens(self.processor, image_sizes, video_shapes)
        return sum(image_counts) + sum(video_counts)
