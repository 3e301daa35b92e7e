"""The preprocess step: validate a request, decode its media, count its tokens, emit cost features."""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rps_serve.cost.features import feature_matrix
from rps_serve.requests import RequestFeatures
from rps_serve.triton.media import (
    MediaLimits,
    check_prompt_bytes,
    check_prompt_tokens,
    decode_images,
    decode_video,
)
from rps_serve.triton.prompt_tokens import PromptTokenCounter, request_features
from rps_serve.triton.protocol import GenerateRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class PreparedRequest:
    """A request ready for the engine: decoded media and the cost model's input."""

    request: GenerateRequest
    images: list[Any]  # PIL RGB images
    video_frames: np.ndarray | None  # [F, H, W, 3] uint8, sampled
    features: RequestFeatures

    @property
    def feature_matrix(self) -> np.ndarray:
        """float32 [1, 3], the Impact Estimator's input."""
        return feature_matrix([self.features])

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

    def prepare(self, request: GenerateRequest, video_frames: np.ndarray | None = None) -> PreparedRequest:
        """Decode and count. `video_frames` are frames an earlier step already decoded and sampled."""
        check_prompt_bytes(request.prompt, self.limits)
        images = decode_images(request.images, self.limits)
        if video_frames is None and request.video is not None:
            video_frames = decode_video(request.video, self.limits)
        video_shape = None
        if video_frames is not None:
            frames, height, width = video_frames.shape[:3]
            video_shape = (frames, height, width)
        count = self.counter.count(
            request.prompt, [(image.height, image.width) for image in images], video_shape
        )
        check_prompt_tokens(count.prompt_tokens, self.limits)
        features = request_features(count, len(images), video_frames is not None)
        return PreparedRequest(request, images, video_frames, features)
