"""A request's preparation in two steps: `inspect` reads what its media say about themselves (image
headers, the video container's frame count and size) to count its tokens and emit its cost features,
cheaply and before its class is known; `decode` decodes the media for the engine, once, after
classification (see `triton.front_end`)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rps_serve.requests import Modality, RequestFeatures, request_features
from rps_serve.triton.media import (
    MediaLimits,
    check_image_count,
    check_prompt_bytes,
    check_prompt_tokens,
    decode_images,
    decode_video,
    image_size,
    video_shape,
)
from rps_serve.triton.prompt_tokens import PromptTokenCounter
from rps_serve.triton.protocol import CLAIMED_FEATURES, BadRequest, GenerateRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class DecodedMedia:
    """A request's media as the engine takes them."""

    images: list[Any]  # PIL RGB images
    video_frames: np.ndarray | None  # [F, H, W, 3] uint8, sampled

    def multi_modal_data(self) -> dict[str, Any]:
        data: dict[str, Any] = {}
        if self.images:
            data["image"] = self.images[0] if len(self.images) == 1 else self.images
        if self.video_frames is not None:
            data["video"] = self.video_frames
        return data


class Preprocessor:
    def __init__(self, counter: PromptTokenCounter, limits: MediaLimits) -> None:
        self.counter = counter
        # The model's processor decides how many frames a video becomes, when it says.
        frames = counter.video_frames
        self.limits = limits if frames is None else replace(limits, video_frames=frames)

    def inspect(self, request: GenerateRequest, claimed: RequestFeatures | None = None) -> RequestFeatures:
        """The cost features from the prompt and the media's own metadata (no pixel decoded); raises
        `BadRequest` for a request over a limit or whose media markers do not match its media.

        With `claimed`, the features the ensemble's `preprocess` counted for this request, the prompt
        is not tokenized again: the claim stands if the media agree with it exactly (its modality, and
        its placeholder tokens as the media's metadata give them) and its text tokens are no more
        than the prompt's bytes; otherwise `BadRequest`."""
        check_prompt_bytes(request.prompt, self.limits)
        check_image_count(request.images, self.limits)
        sizes = [image_size(data, self.limits, i) for i, data in enumerate(request.images)]
        shape = None if request.video is None else video_shape(request.video, self.limits)
        if claimed is None:
            count = self.counter.count(request.prompt, sizes, shape)
            features = request_features(
                len(sizes), int(shape is not None), count.prompt_tokens, count.placeholder_tokens
            )
        else:
            modality = Modality.heaviest(len(sizes), int(shape is not None))
            features = _checked_claim(
                claimed, request, modality, self.counter.placeholders(request.prompt, sizes, shape)
            )
        check_prompt_tokens(features.prompt_tokens, self.limits)
        return features

    def decode(self, request: GenerateRequest) -> DecodedMedia:
        """The media decoded (and the video sampled) for the engine; `BadRequest` if they do not decode."""
        images = decode_images(request.images, self.limits)
        frames = None if request.video is None else decode_video(request.video, self.limits)
        return DecodedMedia(images, frames)


def _checked_claim(
    claimed: RequestFeatures, request: GenerateRequest, modality: Modality, placeholders: int
) -> RequestFeatures:
    """`claimed` if the request's media (their `modality` and `placeholders` tokens) agree with it
    and its text tokens fit in the prompt's bytes (a token is at least one byte)."""
    prompt_bytes = len(request.prompt.encode())
    text_tokens = claimed.prompt_tokens - claimed.modality_tokens
    if (
        claimed.modality is not modality
        or claimed.modality_tokens != placeholders
        or text_tokens > prompt_bytes
    ):
        raise BadRequest(
            f"'{CLAIMED_FEATURES}' ({claimed.modality.value}, {claimed.prompt_tokens} prompt tokens, "
            f"{claimed.modality_tokens} placeholder tokens) do not match the request: "
            f"{modality.value}, {placeholders} placeholder tokens, a prompt of {prompt_bytes} bytes"
        )
    return claimed
