"""Shared vocabulary: modalities, request classes, request features and cost estimates."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Modality(enum.Enum):
    """What a request carries besides its text prompt."""

    TEXT = "text"
    IMAGE = "image"
    VIDEO = "video"

    @property
    def index(self) -> int:
        """Stable integer code used in ONNX feature vectors (text=0, image=1, video=2)."""
        return _MODALITY_ORDER.index(self)

    @classmethod
    def from_index(cls, index: int) -> Modality:
        return _MODALITY_ORDER[index]

    @classmethod
    def heaviest(cls, images: int, videos: int) -> Modality:
        """A request's modality, the one rule everywhere: its heaviest medium (a video outweighs any
        number of images)."""
        return cls.VIDEO if videos else cls.IMAGE if images else cls.TEXT


_MODALITY_ORDER: tuple[Modality, ...] = (Modality.TEXT, Modality.IMAGE, Modality.VIDEO)


class RequestClass(enum.IntEnum):
    """The three admission-cost classes; the value is the class level (0 = lightest)."""

    SAND = 0
    PEBBLES = 1
    ROCKS = 2

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def from_label(cls, label: str) -> RequestClass:
        try:
            return cls[label.upper()]
        except KeyError:
            names = ", ".join(c.label for c in cls)
            raise ValueError(f"unknown request class {label!r}; expected one of {names}") from None

    @classmethod
    def for_level(cls, level: int, num_levels: int) -> RequestClass:
        """Name the class of `level` when the classifier has `num_levels` clusters.

        With three levels this is the identity. With two, the levels are sand and rocks; with four
        or five, every level between the lightest and the heaviest counts as pebbles.
        """
        if not 0 <= level < num_levels:
            raise ValueError(f"level {level} is outside 0..{num_levels - 1}")
        if level == 0:
            return cls.SAND
        if level == num_levels - 1:
            return cls.ROCKS
        return cls.PEBBLES


@dataclass(frozen=True)
class RequestFeatures:
    """What the cost model needs to know about a request before it runs.

    `prompt_tokens` counts every prefill token, image and video placeholder tokens included;
    `modality_tokens` counts only the placeholder tokens.
    """

    modality: Modality
    prompt_tokens: int
    modality_tokens: int = 0

    def __post_init__(self) -> None:
        if self.prompt_tokens < 0 or self.modality_tokens < 0:
            raise ValueError("token counts must be non-negative")
        if self.modality_tokens > self.prompt_tokens:
            raise ValueError(
                f"modality_tokens ({self.modality_tokens}) exceeds prompt_tokens ({self.prompt_tokens})"
            )


@dataclass(frozen=True)
class CostEstimate:
    """Admission cost of a request: estimated GPU prefill seconds and KV-cache tokens."""

    prefill_s: float
    memory_tokens: int


def request_features(
    images: int, videos: int, prompt_tokens: int, placeholder_tokens: int
) -> RequestFeatures:
    """The cost model's view of a request, however its tokens were counted (`preprocess` before vLLM,
    the plug-in on vLLM's request): its heaviest medium, its prompt tokens and the placeholders among
    them."""
    return RequestFeatures(
        Modality.heaviest(images, videos), prompt_tokens, min(placeholder_tokens, prompt_tokens)
    )
