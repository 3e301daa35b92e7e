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

from rps_harness.workload.prompts import one_token_words
from rps_harness.workload.shapes import RequestKind
from rps_serve.model_processor import load_processor, placeholder_tokens, user_turn
from rps_serve.requests import Modality

MEDIA_FILE = (
    "rps_media.json"  # beside a model built by `rps-serve make-tiny-model`: the media it is sized for
)


@dataclass(frozen=True)
class Medium:
    """One medium the load tools send: an image of `size` x `size` pixels, or (`frames` > 0) a video
    of that many such frames."""

    size: int
    frames: int = 0


@dataclass(frozen=True)
class MediaShape:
    """The media the load tools send: square images of `image_size` pixels, videos of `video_frames`
    square frames of `video_size` (the frames the model takes, so that preprocess keeps them all).
    The kinds whose cost disagrees with their modality send smaller media: thumbnails a third of an
    image's side, clips a sixth of a video's frames (672-pixel images and 24-frame videos: 224 pixels
    and 4 frames)."""

    image_size: int = 672
    video_size: int = 448
    video_frames: int = 24

    def __post_init__(self) -> None:
        if min(self.image_size, self.video_size, self.video_frames) < 1:
            raise ValueError(f"media sizes must be positive: {self}")

    @property
    def thumbnail_size(self) -> int:
        return max(1, self.image_size // 3)

    @property
    def clip_frames(self) -> int:
        return max(2, self.video_frames // 6)

    def medium(self, kind: RequestKind) -> Medium | None:
        """What a request of `kind` sends; None for text."""
        return {
            RequestKind.IMAGE: Medium(self.image_size),
            RequestKind.THUMBNAIL: Medium(self.thumbnail_size),
            RequestKind.VIDEO: Medium(self.video_size, self.video_frames),
            RequestKind.CLIP: Medium(self.video_size, self.clip_frames),
        }.get(kind)

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
    `placeholders`: per request kind, the placeholder tokens of its medium in `media` (0 for text);
    `turn_tokens`: per modality, the prompt tokens the turn adds to its text and placeholders (the
    medium's one marker token gives way to the placeholders); `filler_words`: words that are one
    token each on the model's tokenizer, so that a filler text of n of them is n tokens."""

    turns: Mapping[Modality, tuple[str, str]]
    placeholders: Mapping[RequestKind, int]
    media: MediaShape
    turn_tokens: Mapping[Modality, int]
    filler_words: tuple[str, ...]

    @classmethod
    def of_model(cls, model: Path, media: MediaShape | None = None, processor: Any = None) -> RequestFormat:
        """The format of the model in directory `model`, by its own processor (`processor`, if the
        caller has loaded it) and chat template."""
        processor = processor or load_processor(model)
        media = media or MediaShape.of_model(model)
        images = [kind for kind in RequestKind if kind.modality is Modality.IMAGE]
        videos = [kind for kind in RequestKind if kind.modality is Modality.VIDEO]
        shapes = [media.medium(kind) for kind in images], [media.medium(kind) for kind in videos]
        image_tokens, video_tokens = placeholder_tokens(
            processor,
            [(m.size, m.size) for m in shapes[0] if m is not None],
            [(m.frames, m.size, m.size) for m in shapes[1] if m is not None],
        )
        placeholders = dict.fromkeys(RequestKind, 0)
        placeholders.update(zip(images, image_tokens, strict=True))
        placeholders.update(zip(videos, video_tokens, strict=True))
        turns = {modality: user_turn(processor, modality) for modality in Modality}
        tokenizer = processor.tokenizer
        turn_tokens = {
            modality: len(tokenizer(before + after, add_special_tokens=False)["input_ids"])
            - (modality is not Modality.TEXT)
            for modality, (before, after) in turns.items()
        }
        return cls(turns, placeholders, media, turn_tokens, one_token_words(tokenizer))

    def prompt(self, text: str, modality: Modality) -> str:
        """One user turn with `text` and, for image and video, the medium's placeholder."""
        before, after = self.turns[modality]
        return f"{before}{text}{after}"

    def placeholder_tokens(self, of: Modality | RequestKind) -> int:
        """The placeholder tokens of a request kind's medium, or of a modality's usual medium."""
        kind = of if isinstance(of, RequestKind) else _USUAL_KIND[of]
        return self.placeholders[kind]


_USUAL_KIND = {
    Modality.TEXT: RequestKind.SHORT_TEXT,
    Modality.IMAGE: RequestKind.IMAGE,
    Modality.VIDEO: RequestKind.VIDEO,
}
