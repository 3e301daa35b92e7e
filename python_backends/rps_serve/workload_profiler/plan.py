"""What the profiler runs: text of growing length, images, and videos of growing length."""

from __future__ import annotations

from dataclasses import dataclass

from rps_serve.requests import Modality


@dataclass(frozen=True)
class ProfileItem:
    modality: Modality
    text_words: int
    video_frames: int = 0


@dataclass(frozen=True)
class ProfilePlan:
    """Each text length, image and video length is run `repeats` times, in a fixed order, so that a
    partly written profile can be resumed by skipping the items it already holds."""

    text_words: tuple[int, ...] = (16, 64, 128, 256, 512, 1024, 2048)
    images: int = 4
    video_frames: tuple[int, ...] = (4, 8, 16, 24, 32, 48)
    prompt_words_with_media: int = 24
    repeats: int = 3
    output_tokens: int = 8

    def items(self) -> list[ProfileItem]:
        once = (
            [ProfileItem(Modality.TEXT, words) for words in self.text_words]
            + [ProfileItem(Modality.IMAGE, self.prompt_words_with_media) for _ in range(self.images)]
            + [ProfileItem(Modality.VIDEO, self.prompt_words_with_media, f) for f in self.video_frames]
        )
        return once * self.repeats
