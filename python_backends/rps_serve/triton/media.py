"""Decoding and validating request media: images (any format Pillow reads) and videos (any container
OpenCV's FFmpeg reads), within configurable limits, and sampling a video's frames.

Media only ever comes from the request's bytes: nothing here opens a URL or a path a client names.
"""

from __future__ import annotations

import io
import logging
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from rps_serve.triton.protocol import BadRequest

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MediaLimits:
    """What a request may carry. Bytes are of the decoded (not base64) file; pixels are per image/frame.

    The prompt's limits live here too, so model.json's `media` section bounds everything a request brings.
    """

    max_text_bytes: int = 1024 * 1024  # checked before tokenizing, so a huge prompt costs nothing
    max_prompt_tokens: int = 32768  # media placeholders included: what the KV cache must hold
    max_output_tokens: int = 4096  # sampling_parameters' max_tokens
    max_images: int = 1
    max_image_bytes: int = 20 * 1024 * 1024
    max_image_pixels: int = 4096 * 4096
    max_video_bytes: int = 64 * 1024 * 1024
    max_video_pixels: int = 1920 * 1080
    max_video_frames: int = 1800  # one minute at 30 frames per second
    video_frames: int = 24  # frames sampled from every video for the model

    @classmethod
    def from_mapping(cls, raw: Mapping[str, Any]) -> MediaLimits:
        known = {f.name for f in fields(cls)}
        unknown = set(raw) - known
        if unknown:
            raise ValueError(f"unknown media limits {sorted(unknown)}; expected some of {sorted(known)}")
        return cls(**{name: int(value) for name, value in raw.items()})


def decode_image(data: bytes, limits: MediaLimits, index: int = 0) -> Any:
    """A PIL RGB image; `BadRequest` if it is too large or not an image."""
    from PIL import Image

    if len(data) > limits.max_image_bytes:
        raise BadRequest(f"image {index} is {len(data)} bytes; the limit is {limits.max_image_bytes}")
    try:
        with Image.open(io.BytesIO(data)) as image:
            width, height = image.size
            if width * height > limits.max_image_pixels:
                raise BadRequest(
                    f"image {index} is {width}x{height}; the limit is {limits.max_image_pixels} pixels"
                )
            return image.convert("RGB")
    except BadRequest:
        raise
    except Image.UnidentifiedImageError:
        raise BadRequest(f"image {index} cannot be decoded: not an image format Pillow reads") from None
    # Pillow reports a malformed file as OSError, ValueError, SyntaxError, EOFError or struct.error
    # (fuzzing found several): whatever the decoder raises on the client's bytes is a bad image.
    except Exception as error:
        raise BadRequest(f"image {index} cannot be decoded: {type(error).__name__}: {error}") from None


def check_prompt_bytes(prompt: str, limits: MediaLimits) -> None:
    size = len(prompt.encode("utf-8"))
    if size > limits.max_text_bytes:
        raise BadRequest(f"the prompt is {size} bytes; the limit is {limits.max_text_bytes}")


def check_prompt_tokens(tokens: int, limits: MediaLimits) -> None:
    if tokens > limits.max_prompt_tokens:
        raise BadRequest(
            f"the prompt is {tokens} tokens (media placeholders included); "
            f"the limit is {limits.max_prompt_tokens}"
        )


def decode_images(images: tuple[bytes, ...], limits: MediaLimits) -> list[Any]:
    if len(images) > limits.max_images:
        raise BadRequest(f"{len(images)} images; the limit is {limits.max_images} per request")
    return [decode_image(data, limits, i) for i, data in enumerate(images)]


def sample_indices(total: int, wanted: int) -> np.ndarray:
    """`wanted` frame indices spread evenly over `total` frames (all of them if there are fewer)."""
    if total <= wanted:
        return np.arange(total)
    return np.unique(np.linspace(0, total - 1, wanted).round().astype(np.int64))


def decode_video(data: bytes, limits: MediaLimits) -> np.ndarray:
    """`limits.video_frames` RGB frames [F, H, W, 3] uint8 sampled evenly over the video."""
    import cv2

    if len(data) > limits.max_video_bytes:
        raise BadRequest(f"video is {len(data)} bytes; the limit is {limits.max_video_bytes}")
    # OpenCV reads containers from files only; the file lives in a private temporary directory.
    with tempfile.NamedTemporaryFile(suffix=".video") as file:
        file.write(data)
        file.flush()
        capture = cv2.VideoCapture(file.name, cv2.CAP_FFMPEG)
        try:
            if not capture.isOpened():
                raise BadRequest("video cannot be decoded: unknown or corrupt container")
            width = int(capture.get(cv2.CAP_PROP_FRAME_WIDTH))
            height = int(capture.get(cv2.CAP_PROP_FRAME_HEIGHT))
            if width * height > limits.max_video_pixels:
                raise BadRequest(
                    f"video is {width}x{height}; the limit is {limits.max_video_pixels} pixels per frame"
                )
            frames = _read_frames(capture, limits)
        finally:
            capture.release()
    if not frames:
        raise BadRequest("video has no decodable frames")
    return np.stack([cv2.cvtColor(frame, cv2.COLOR_BGR2RGB) for frame in frames])


def _read_frames(capture: Any, limits: MediaLimits) -> list[np.ndarray]:
    import cv2

    total = int(capture.get(cv2.CAP_PROP_FRAME_COUNT))
    if total > limits.max_video_frames:
        raise BadRequest(f"video has {total} frames; the limit is {limits.max_video_frames}")
    if total <= 0:  # the container does not say: decode everything, within the limit
        frames: list[np.ndarray] = []
        while (ok := capture.grab()) and len(frames) <= limits.max_video_frames:
            frames.append(capture.retrieve()[1])
        if ok:
            raise BadRequest(f"video has more than {limits.max_video_frames} frames")
        return [frames[i] for i in sample_indices(len(frames), limits.video_frames)]
    wanted = set(sample_indices(total, limits.video_frames).tolist())
    frames = []
    for index in range(total):
        if not capture.grab():
            break
        if index in wanted:
            ok, frame = capture.retrieve()
            if ok:
                frames.append(frame)
    return frames
