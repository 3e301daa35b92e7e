"""The served model's own Hugging Face processor: how its chat template writes a user turn, and how many
placeholder tokens it makes of an image or a video.

Both are the model's, not ours: a Qwen2-VL turn carries `<|vision_start|><|image_pad|><|vision_end|>`,
a LLaVA-OneVision turn `<image>`; a Qwen2-VL image is (H/14 * W/14) / 4 tokens at its resized size, a
LLaVA-OneVision image its anyres tiles (a 384x384 base, then a grid of 384x384 crops, newline tokens
included) and a video 196 tokens per pooled frame. The Triton `preprocess` step and the load tools
ask the same processor, so what one sends the other counts alike, and both count what vLLM allocates.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rps_serve.requests import Modality

_TEXT_MARK = "\x00rps-text\x00"  # stands for the turn's text while the template is rendered


def load_processor(model: Path) -> Any:
    """The processor saved beside the model (`AutoProcessor`: tokenizer, image and video processors)."""
    from transformers import AutoProcessor

    return AutoProcessor.from_pretrained(str(model))


def placeholder_tokens(
    processor: Any, image_sizes: Sequence[tuple[int, int]], video_shapes: Sequence[tuple[int, int, int]]
) -> tuple[list[int], list[int]]:
    """Placeholder tokens of each image, (height, width), and each video, (frames, height, width).

    The processor's own sizing rule (`_get_num_multimodal_tokens`, the one vLLM's multimodal processors
    mirror when they lay out placeholders); checked against vLLM's prompt token counts for Qwen2-VL and
    LLaVA-OneVision by the e2e tests.
    """
    counted = processor._get_num_multimodal_tokens(
        image_sizes=[list(size) for size in image_sizes] or None,
        video_sizes=[list(shape) for shape in video_shapes] or None,
    )
    images = list(getattr(counted, "num_image_tokens", None) or [])
    videos = list(getattr(counted, "num_video_tokens", None) or [])
    if len(images) != len(image_sizes) or len(videos) != len(video_shapes):
        raise ValueError(f"{type(processor).__name__} does not count placeholder tokens for every medium")
    return images, videos


def user_turn(processor: Any, modality: Modality) -> tuple[str, str]:
    """What the model's chat template writes before and after the text of a user turn that carries one
    medium of `modality` (none for text), the assistant's turn opened after it."""
    parts: list[dict[str, str]] = [] if modality is Modality.TEXT else [{"type": modality.value}]
    parts.append({"type": "text", "text": _TEXT_MARK})
    rendered: str = processor.apply_chat_template(
        [{"role": "user", "content": parts}], tokenize=False, add_generation_prompt=True
    )
    if rendered.count(_TEXT_MARK) != 1:
        raise ValueError(
            f"the chat template of {type(processor).__name__} does not write a user turn's text once"
        )
    before, after = rendered.split(_TEXT_MARK)
    return before, after
