"""Prompts for the Qwen2-VL chat format, with fresh filler text so no two requests share a prefix."""

from __future__ import annotations

import random

from rps_serve.requests import Modality

_PLACEHOLDER = {
    Modality.TEXT: "",
    Modality.IMAGE: "<|vision_start|><|image_pad|><|vision_end|>",
    Modality.VIDEO: "<|vision_start|><|video_pad|><|vision_end|>",
}
_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "an", "el", "or", "is", "um", "pe", "da")


def filler_text(words: int, rng: random.Random) -> str:
    """`words` random pseudo-words; random content defeats the prefix cache between requests."""
    return " ".join("".join(rng.choices(_SYLLABLES, k=rng.randint(1, 4))) for _ in range(words))


def chat_prompt(text: str, modality: Modality) -> str:
    """One user turn in the Qwen2-VL chat format, with the media placeholder first."""
    return f"<|im_start|>user\n{_PLACEHOLDER[modality]}{text}<|im_end|>\n<|im_start|>assistant\n"
