"""How the load tools write requests for the served model: its chat turn for each modality, the media
they send, and the placeholder tokens the model's processor makes of that media.

Read from the model directory (`RequestFormat.of_model`), so that the same tools load a tiny Qwen2-VL,
a tiny LLaVA-OneVision or the GPU image's model with prompts its own template writes.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from rps_serve.model_processor import load_processor, placeholder_tokens, user_turn
from rps_serve.requests import Modality

MEDIA_FILE = (
    "rps_media.json"  # beside a model built by `rps-serve make-tiny-model`: the media it is sized for
)


@dataclass(frozen=True)
class MediaShape:
    """The media the load tools send: square images of `image_size` pixels, videos of `video_frames`
    square frames of `video_size` (the frames the model takes, so that preprocess keeps them all)."""

    image_size: int = 672
    video_size: int = 448
    video_frames: int = 24

    def __post_init__(self) -> None:
        if min(self.image_size, self.video_size, self.video_frames) < 1:
            raise ValueError(f"media sizes must be positive: {self}")

    def save(self, model: Path) -> None:
        (model / MEDIA_FILE).write_text(json.dumps(asdict(self), indent=2) + "\n")

    @classmethod
    def of_model(cls, model: Path) -> MediaShape:
        """The shape written beside the model (`MEDIA_FILE`), else the defaults."""
        path = model / MEDIA_FILE
        if not path.is_file():
            return cls()
        raw = json.loads(path.read_text())
        return cls(**{name: int(raw[name]) for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class RequestFormat:
    """`turns`: per modality, what the chat template writes before and after a user turn's text;
    `placeholders`: per modality, the placeholder tokens of one medium of `media` (0 for text)."""

    turns: Mapping[Modality, tuple[str, str]]
    placeholders: Mapping[Modality, int]
    media: MediaShape

    @classmethod
    def of_model(cls, model: Path, media: MediaShape | None = None, processor: Any = None) -> RequestFormat:
        """The format of the model in directory `model`, by its own processor (`processor`, if the
        caller has loaded it) and chat template."""
        processor = processor or load_processor(model)
        media = media or MediaShape.of_model(model)
        size, frames = media.image_size, media.video_frames
        (image,), (video,) = placeholder_tokens(
            processor, [(size, size)], [(frames, media.video_size, media.video_size)]
        )
        return cls(
            turns={modality: user_turn(processor, modality) for modality in Modality},
            placeholders={Modality.TEXT: 0, Modality.IMAGE: image, Modality.VIDEO: video},
            media=media,
        )

    def prompt(self, text: str, modality: Modality) -> str:
        """One user turn with `text` and, for image and video, the medium's placeholder."""
        before, after = self.turns[modality]
        return f"{before}{text}{after}"

    def placeholder_tokens(self, modality: Modality) -> int:
        return self.placeholders[modality]
