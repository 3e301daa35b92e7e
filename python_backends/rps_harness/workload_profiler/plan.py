"""What the profiler runs: text of growing length, images of growing size, and videos of growing length."""

from __future__ import annotations

from dataclasses import dataclass

from rps_serve.requests import Modality


@dataclass(frozen=True)
class ProfileItem:
    modality: Modality
    text_words: int
    video_frames: int = 0
    image_scale: float = 1.0  # of the served model's image side (`MediaShape.image_size`)


@dataclass(frozen=True)
class ProfilePlan:
    """Each text length, image size and video length is run `repeats` times, in a fixed order, so that
    a partly written profile can be resumed by skipping the items it already holds. Images come in
    several sizes around the served one: with one size, every image has the same prompt tokens and
    the image line's slope is left to chance."""

    text_words: tuple[int, ...] = (16, 64, 128, 256, 512, 1024, 2048)
    image_scales: tuple[float, ...] = (0.5, 0.75, 1.0, 1.25)
    video_frames: tuple[int, ...] = (4, 8, 16, 24, 32, 48)
    prompt_words_with_media: int = 24
    repeats: int = 3
    output_tokens: int = 8

    def items(self) -> list[ProfileItem]:
        once = (
            [ProfileItem(Modality.TEXT, words) for words in self.text_words]
            + [
                ProfileItem(Modality.IMAGE, self.prompt_words_with_media, image_scale=scale)
                for scale in self.image_scales
            ]
            + [ProfileItem(Modality.VIDEO, self.prompt_words_with_media, f) for f in self.video_frames]
        )
        return once * self.repeats
